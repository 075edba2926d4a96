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
"""
from __future__ import annotations

from collections.abc import Hashable, Sequence
from functools import lru_cache

from ksp.codes import Tx
from ksp.model import Options, Request, Result
from ksp.terms import IRI, Literal, Triple, Var
from ksp.sparql import render, render_term, var_name

from .oxterms import from_ox, graph_to_ox
from .pattern import Pattern
from .query import results_of
from .store import QuadStore

_SLOT = object()  # a constant's place in a shape key
_term_text = lru_cache(maxsize=1 << 16)(render_term)  # the same devices' constants, again


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


def evaluate_together(store: QuadStore, members: Sequence[tuple[Request, Pattern, tuple]]
                      ) -> list[Result]:
    """The result of each (request, pattern, constants) of one shape, in order, from one
    query. Raises what the store raises (the caller then evaluates them one by one)."""
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
        "(" + " ".join([*(_term_text(m[2][i]) for i in columns), str(g)]) + ")"
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
    solutions: list[list] = [[] for _ in members]
    for row in store.oxigraph.query(text, **kwargs):
        solutions[int(row[group_var].value)].append(tuple(
            None if (t := row[k]) is None else from_ox(t) for k in range(width)))
    # Members with the same solutions (devices watching one sensor) share one result object,
    # which the sessions then encode once for all of them.
    results: dict[tuple, Result] = {}
    out = []
    for (req, _, _), sols in zip(members, solutions):
        key = tuple(sols)
        result = results.get(key)
        if result is None:
            result = results[key] = results_of(req, sols)
        out.append(result)
    return out
