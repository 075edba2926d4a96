"""Same-shape persistent queries that differ only in the integer thresholds of their FILTERs
(`<sensor_k> :value ?v FILTER(?v > t_j)`, many devices watching one sensor): one store query of
the pattern without those comparisons, each member's comparisons then applied here to the
rows, instead of a `VALUES` block of one row per member that the store must parse each time.

Why this is each member's own evaluation: the FILTERs of a group are one conjunction applied to
the group's solutions, so filtering by the shared ones in the store and then by the member's
own gives the member's bag. A member's comparison `?x op t` (t a canonical xsd:integer) with
?x bound to an xsd:integer is SPARQL's numeric comparison of the two integers, which Python's
is; with ?x unbound it is an error and the solution is dropped. A bound value the comparison
cannot decide that way — another numeric type, a lexical form outside xsd:integer's, an
integer past the store's 64 bits, any other term — makes the whole evaluation `Undecided`: the
caller evaluates the members with `VALUES` instead (`sib.shapes.run`), so the store decides.
"""
from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import pyoxigraph as ox

from ksp.codes import Op
from ksp.terms import IRI, XSD_INTEGER, Literal, Var

_COMPARE: dict[Op, Callable[[int, int], bool]] = {Op.EQ: operator.eq, Op.NE: operator.ne, Op.LT: operator.lt, Op.GT: operator.gt,
            Op.LE: operator.le, Op.GE: operator.ge}
_FLIPPED = {Op.EQ: Op.EQ, Op.NE: Op.NE, Op.LT: Op.GT, Op.GT: Op.LT, Op.LE: Op.GE,
            Op.GE: Op.LE}  # `t op ?x` as `?x op' t`
_LEXICAL = re.compile(r"[+-]?[0-9]+")  # xsd:integer's lexical space
_CANONICAL = re.compile(r"0|-?[1-9][0-9]*")
_BOUND = 1 << 62  # well inside the store's 64-bit integers: beyond, the store decides


class Undecided(Exception):
    """A row holds a value the comparisons here cannot decide exactly."""


Check = tuple[int, Callable[[int, int], bool], int]  # (variable, comparison, threshold)


@dataclass(frozen=True, slots=True)
class Thresholds:
    """`filters`: the indexes (in the pattern's FILTERs) of the comparisons applied here;
    `checks`: each member's, in member order; `variables`: the variables they compare."""

    filters: frozenset[int]
    checks: tuple[tuple[Check, ...], ...]
    variables: tuple[int, ...]

    def split(self, rows: Iterable, width: int) -> list[list[tuple]]:
        """Each member's rows (store terms, the first `width` columns) among `rows` (the store's
        solutions of the pattern without the comparisons, every variable projected)."""
        kept = []
        for row in rows:
            terms = tuple(row)
            kept.append(({v: _value(terms[v]) for v in self.variables}, terms[:width]))
        return [[row for values, row in kept
                 if all((x := values[v]) is not None and compare(x, t)
                        for v, compare, t in checks)]
                for checks in self.checks]


def _value(term) -> int | None:
    if term is None:
        return None  # unbound: the comparison is an error, the solution dropped
    if type(term) is ox.Literal and term.datatype.value == XSD_INTEGER and (
            _LEXICAL.fullmatch(term.value)):
        value = int(term.value)
        if -_BOUND < value < _BOUND:
            return value
    raise Undecided(term)


def thresholds(filters: Sequence[tuple], slots_before: int, columns: Sequence[int],
               constants: Sequence[tuple]) -> Thresholds | None:
    """The members' comparisons when every constant that differs between them (`columns`, slot
    numbers; the FILTERs' slots come after the `slots_before` of the triple patterns) is the
    threshold of a comparison `?x op t` or `t op ?x` and a canonical xsd:integer in every
    member (`constants`, each member's in slot order); None otherwise."""
    where: dict[int, tuple[int, int]] = {}  # slot -> (filter index, position in it)
    slot = slots_before
    for i, expr in enumerate(filters):
        for position, term in enumerate(expr):
            if isinstance(term, (IRI, Literal)):  # a slot, as `sib.shapes.shape_of` counts
                where[slot] = (i, position)
                slot += 1
    per_member: list[list[Check]] = [[] for _ in constants]
    used = set()
    for column in columns:
        found = where.get(column)
        if found is None:
            return None  # a constant of a triple pattern
        i, position = found
        expr = filters[i]
        if len(expr) != 3 or expr[2] not in _COMPARE or position == 2:
            return None
        var = expr[1 - position]
        if not isinstance(var, Var):
            return None
        op = expr[2] if position == 1 else _FLIPPED[expr[2]]
        used.add(i)
        for checks, member in zip(per_member, constants):
            t = member[column]
            if not (type(t) is Literal and t.datatype == XSD_INTEGER and t.lang is None
                    and _CANONICAL.fullmatch(t.lexical) and -_BOUND < int(t.lexical) < _BOUND):
                return None
            checks.append((var.index, _COMPARE[op], int(t.lexical)))
    if not columns:
        return None
    return Thresholds(frozenset(used), tuple(map(tuple, per_member)),
                      tuple(sorted({c[0] for checks in per_member for c in checks})))
