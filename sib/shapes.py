"""Persistent queries equal up to their constants, evaluated together in one store query.

Devices subscribe to the same pattern with their own constants (`<sensor_k> :value ?v`). When
an update affects many such queries, evaluating each costs a SPARQL parse, plan and run per
query. Here the queries of one *shape* (the pattern with every IRI/literal of its triple
patterns and FILTERs replaced by a slot) are evaluated as ONE query: the slots whose constants
differ become variables bound by a VALUES block that also binds a member number `?g`; the slots
whose constants agree stay constants. Each solution is then handed to the member its `?g` names.

Why this is exactly each query's own evaluation: a VALUES row joined with the pattern binds the
slot variables to that member's constants, and a join on a bound variable matches the same
terms as the constant would (term equality), in the WHERE graph, in OPTIONAL groups (left join
on the bound variable) and in FILTERs (evaluated on the bound value). Every solution of the
member's query extends to exactly one solution of the grouped query and back, so the bags are
the same. Only shapes for which that argument holds are grouped: no solution modifier (ORDER,
LIMIT, OFFSET, DISTINCT act on the whole bag), no BIND (it splits the group's scope). Anything
else, or a grouped query the store refuses, falls back to one evaluation per query.

An update of one sensor affects the same groups each time: their query is kept (`Prepared`, by
the groups' ids, bounded), so that only the store's work is done again.
"""
from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from ksp.codes import Tx
from ksp.model import Options, Request, Result
from ksp.terms import IRI, XSD_INTEGER, Literal, Triple, Var
from ksp.sparql import render, render_term, var_name

from .oxterms import from_ox, graph_to_ox
from .pattern import Pattern
from .query import results_of
from .store import QuadStore
from .thresholds import Thresholds, Undecided, thresholds

_SLOT = object()  # a constant's place in a shape key
_term_text = lru_cache(maxsize=1 << 16)(render_term)  # the same devices' constants, again
_INTEGER = re.compile(r"0|-?[1-9][0-9]*")  # canonical xsd:integer lexical forms


def _abstract(term, constants: list):
    if isinstance(term, (IRI, Literal)):
        constants.append(term)
        return _SLOT
    return term


def shape_of(request: Request, pattern: Pattern) -> tuple[Hashable, tuple] | None:
    """(shape key, constants in slot order), or None if the query must be evaluated alone."""
    if request.options.modifier is not None or pattern.binds:
        return None
    constants: list = []
    where = tuple(tuple(_abstract(t, constants) for t in tp) for tp in pattern.where)
    optional = tuple(tuple(tuple(_abstract(t, constants) for t in tp) for tp in g)
                     for g in pattern.optional)
    filters = tuple(tuple(_abstract(t, constants) for t in e) for e in pattern.filters)
    key = (request.tx.base, request.projection, request.template, pattern.graphs,
           pattern.nvars, where, optional, filters)
    return key, tuple(constants)


def _value_text(term) -> str:
    """A VALUES cell: a canonical xsd:integer as its bare token, which the store reads as the
    same term (`-42` is `"-42"^^xsd:integer`) and parses faster than the typed form; any
    other term as the renderer writes it."""
    if type(term) is Literal and term.datatype == XSD_INTEGER and _INTEGER.fullmatch(
            term.lexical):
        return term.lexical
    return _term_text(term)


@dataclass(frozen=True, slots=True)
class Together:
    """The one store query answering the members of one shape (`prepare`): its text, its
    dataset, the column of the member number `?g`, and how many columns a solution keeps."""

    text: str
    kwargs: dict
    group_var: int
    width: int
    #: When the members differ only in integer thresholds (`sib.thresholds`): the query of
    #: the pattern without them, every variable projected, and the members' comparisons.
    base: str | None = None
    thresholds: Thresholds | None = None


def prepare(members: Sequence[tuple[Request, Pattern, tuple]]) -> Together:
    """The query of `evaluate_together` for these (request, pattern, constants) of one shape."""
    first_req, first = members[0][0], members[0][1]
    columns = [i for i, c in enumerate(members[0][2])
               if any(m[2][i] != c for m in members[1:])]
    nvars = first.nvars
    slot_var = {i: Var(nvars + k) for k, i in enumerate(columns)}
    group_var = nvars + len(columns)
    counter = iter(range(len(members[0][2])))

    def put(term):
        if isinstance(term, (IRI, Literal)):
            i = next(counter)
            return slot_var.get(i, term)
        return term

    where = tuple(Triple(*(put(t) for t in tp)) for tp in first.where)
    optional = tuple(tuple(Triple(*(put(t) for t in tp)) for tp in g) for g in first.optional)
    filters = tuple(tuple(put(t) for t in e) for e in first.filters)
    text = render(Request(Tx.SELECT, 0, projection=group_var + 1, where=where,
                          optional=optional or None,
                          options=Options(filters=filters or None)), dataset_clauses=False)
    names = " ".join(f"?{var_name(v.index)}" for v in (*slot_var.values(), Var(group_var)))
    rows = " ".join(
        "(" + " ".join([*(_value_text(m[2][i]) for i in columns), str(g)]) + ")"
        for g, m in enumerate(members))
    head, sep, tail = text.partition("WHERE {")
    text = f"{head}{sep} VALUES ({names}) {{ {rows} }}{tail}"
    if first.graphs is None:
        kwargs = {"use_default_graph_as_union": True}
    else:
        kwargs = {"default_graph": [graph_to_ox(g) for g in first.graphs]}
    base = first_req.tx.base
    width = 0 if base is Tx.ASK else (
        first_req.projection or 0 if base is Tx.SELECT else nvars)
    slots_before = sum(isinstance(t, (IRI, Literal))
                       for tp in first.where + tuple(t for g in first.optional for t in g)
                       for t in tp)
    compared = thresholds(first.filters, slots_before, columns, [m[2] for m in members])
    if compared is None:
        return Together(text, kwargs, group_var, width)
    shared = tuple(e for i, e in enumerate(first.filters) if i not in compared.filters)
    alone = render(Request(Tx.SELECT, 0, projection=nvars, where=first.where,
                           optional=first.optional or None,
                           options=Options(filters=shared or None)), dataset_clauses=False)
    return Together(text, kwargs, group_var, width, alone, compared)


def run(store: QuadStore, together: Together, requests: Sequence[Request]) -> list[Result]:
    """The result of each of `requests` (the members `together` was prepared for, in order)."""
    group_var, width = together.group_var, together.width
    # pyoxigraph's terms first: members with the same rows (devices watching one sensor) are
    # told apart by them, and only one member of each kind has its terms converted
    rows: list[list] | None = None
    if together.thresholds is not None and together.base is not None:
        try:
            rows = together.thresholds.split(
                store.oxigraph.query(together.base, **together.kwargs), width)
        except Undecided:  # a value only the store can compare: the VALUES query decides
            pass
    if rows is None:
        rows = [[] for _ in requests]
        for row in store.oxigraph.query(together.text, **together.kwargs):
            rows[int(row[group_var].value)].append(tuple(row)[:width])
    # Members with the same solutions share one result object, which the sessions then
    # encode once for all of them.
    results: dict[tuple, Result] = {}
    out = []
    for req, found in zip(requests, rows):
        key = tuple(found)
        result = results.get(key)
        if result is None:
            result = results[key] = results_of(req, [
                tuple(None if t is None else from_ox(t) for t in sol) for sol in found])
        out.append(result)
    return out


def evaluate_together(store: QuadStore, members: Sequence[tuple[Request, Pattern, tuple]]
                      ) -> list[Result]:
    """The result of each (request, pattern, constants) of one shape, in order, from one
    query. Raises what the store raises (the caller then evaluates them one by one)."""
    return run(store, prepare(members), [m[0] for m in members])


class Prepared:
    """The `Together` queries of the member sets seen lately, by a key naming the set (the
    query groups' ids): an update of the same sensor affects the same groups again, whose
    query is then neither assembled nor rendered anew. Bounded: at most `limit` queries and
    `chars` characters of text in all (least recently used ones go first; a text longer than
    `chars` is not kept)."""

    def __init__(self, limit: int = 256, chars: int = 1 << 22) -> None:
        self.limit, self.chars = limit, chars
        self._kept: OrderedDict[Hashable, Together] = OrderedDict()
        self._size = 0  # characters of text kept

    def __len__(self) -> int:
        return len(self._kept)

    def get(self, key: Hashable, members: Callable[[], Sequence[tuple[Request, Pattern, tuple]]]
            ) -> Together:
        """The query of set `key`, prepared from `members()` unless kept."""
        kept = self._kept.get(key)
        if kept is not None:
            self._kept.move_to_end(key)
            return kept
        together = prepare(members())
        size = len(together.text)
        if size <= self.chars:
            self._kept[key] = together
            self._size += size
            while len(self._kept) > self.limit or self._size > self.chars:
                self._size -= len(self._kept.popitem(last=False)[1].text)
        return together
