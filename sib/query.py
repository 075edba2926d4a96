"""Query evaluation (SELECT, ASK, CONSTRUCT): a pattern's solutions turned into a `ksp` result.

Results of unordered queries are put in one canonical order, so that the same store state
always gives the same result: a persistent query then changes exactly when its answer does, and
two SIBs that hold the same data answer byte for byte alike. MAX RESPONSE SIZE is the codec's
business (`ksp.encode(max_size=)` keeps whole results that fit and reports TRC = all).
"""
from __future__ import annotations

from collections.abc import Iterator
from heapq import nsmallest
from itertools import islice

import pyoxigraph as ox

from ksp.codes import Tx
from ksp.model import AskResult, ConstructResult, Order, Request, Result, SelectResult
from ksp.model import SolutionModifier
from ksp.terms import BNode, IRI, Literal

from .oxterms import from_ox
from .pattern import Pattern, row_from_ox
from .store import QuadStore
from .updates import instantiate

_ASK_MODIFIER = SolutionModifier(limit=1)
MAX_ROWS = 0xFFFF
"""Rows one RES can carry (RC is a u16), and where TRC saturates."""


def term_key(t) -> str:
    """A term's place in the canonical order: unbound, IRIs, blank nodes, literals (by lexical
    form, datatype, language), each by code point. One string, so that rows compare as one
    `str` comparison: sorting thousands of rows is C's work of a few milliseconds, not tens
    of milliseconds of nested tuple comparisons holding the GIL. (\\x00 ends a term and \\x01
    separates a literal's parts: text holding either may sort otherwise than by its parts.)"""
    if t is None:
        return "0\x00"
    if isinstance(t, IRI):
        return f"1{t}\x00"
    if isinstance(t, BNode):
        return f"2{t.label}\x00"
    if isinstance(t, Literal):
        return f"3{t.lexical}\x01{t.datatype}\x01{t.lang or ''}\x00"
    return f"4{t!r}\x00"


def _row_key(row) -> str:
    return "".join(map(term_key, row))


def store_term_key(t) -> str:
    """`term_key(from_ox(t))` of a pyoxigraph term, without making the ksp term."""
    kind = type(t)
    if kind is ox.NamedNode:
        return f"1{t.value}\x00"
    if kind is ox.Literal:
        return f"3{t.value}\x01{t.datatype.value}\x01{t.language or ''}\x00"
    if t is None:
        return "0\x00"
    if kind is ox.BlankNode:
        return f"2{t.value}\x00"
    return term_key(from_ox(t))


def _store_row_key(row) -> str:
    return "".join(map(store_term_key, row))


def _ordered(modifier: SolutionModifier | None) -> bool:
    return modifier is not None and modifier.order is not Order.NONE


def evaluate(store: QuadStore, req: Request, pattern: Pattern) -> Result:
    base = req.tx.base
    modifier = req.options.modifier
    if base is Tx.ASK:
        return AskResult(bool(pattern.solutions(store, 0, _ASK_MODIFIER)))
    if base is Tx.SELECT:
        return results_of(req, pattern.solutions(store, req.projection or 0, modifier))
    return results_of(req, pattern.solutions(store, None, modifier))


def evaluate_once(store: QuadStore, req: Request, pattern: Pattern,
                  payload: int | None = None) -> Result:
    """`evaluate` for a one-shot query whose RES is at most `payload` bytes (the transport's
    cap): a SELECT keeps only the rows that can be in it — at most MAX_ROWS (RC is a u16,
    where TRC saturates), and one byte per term at least — in the canonical order, the same
    RES as `evaluate`'s. A query of millions of rows then costs its time, never millions of
    long-lived objects (nor the garbage collector's walks over them, which hold every
    thread)."""
    if req.tx.base is not Tx.SELECT:
        return evaluate(store, req, pattern)
    # pyoxigraph's rows, keyed without making a term: the ksp terms (and the garbage
    # collector's work on them, which holds every thread) only for the rows kept
    return select(req, pattern.store_rows(store, req.projection or 0, req.options.modifier),
                  payload)


def most_rows(req: Request, payload: int | None, projection: int) -> int:
    """The most rows a SELECT RES of `req` keeps (`select`): MAX_ROWS, and one byte per term
    at least within MAX RESPONSE SIZE and the transport's `payload`."""
    cap = req.options.max_response_size
    if payload is not None:
        cap = payload if cap is None else min(cap, payload)
    return MAX_ROWS if cap is None else min(MAX_ROWS, cap // max(1, projection))


def select(req: Request, rows: Iterator | list, payload: int | None = None) -> SelectResult:
    """The SELECT result of `req` from `rows` of pyoxigraph terms (each projected on its
    variables, in the order of its modifier): the rows a RES of at most `payload` bytes and
    MAX RESPONSE SIZE can hold, in the canonical order (`evaluate_once`)."""
    projection = req.projection or 0
    keep = most_rows(req, payload, projection)
    if _ordered(req.options.modifier):
        rows = iter(rows)
        kept = list(islice(rows, keep))
        total = len(kept) + sum(1 for _ in islice(rows, MAX_ROWS - len(kept)))
    elif type(rows) is list and len(rows) <= keep:  # every row kept (a simple read's)
        if not projection:
            return SelectResult(0, ((),) * len(rows))
        if len(rows) > 1:
            rows = sorted(rows, key=_store_row_key)
        return SelectResult(projection, tuple([row_from_ox(row) for row in rows]))
    else:
        seen = [0]

        def counted(rows):
            for row in rows:
                seen[0] += 1
                yield row

        kept = nsmallest(keep, counted(rows), key=_store_row_key)
        total = seen[0]
    # `total` only when rows were left out: otherwise the very result `evaluate` gives
    rows_of = map(row_from_ox, kept) if projection else (() for _ in kept)
    return SelectResult(projection, tuple(rows_of),
                        total=None if total == len(kept) else min(total, MAX_ROWS))


def results_of(req: Request, solutions: list) -> Result:
    """The result of `req` from its pattern's solutions (SELECT: projected on its variables;
    CONSTRUCT: every variable; ASK: any)."""
    base = req.tx.base
    ordered = _ordered(req.options.modifier)
    if base is Tx.ASK:
        return AskResult(bool(solutions))
    if base is Tx.SELECT:
        if not ordered:
            solutions.sort(key=_row_key)
        return SelectResult(req.projection or 0, tuple(solutions))
    if not ordered:
        solutions.sort(key=_row_key)
    triples: dict = {}
    for i, sol in enumerate(solutions):
        # Template blank nodes: fresh per solution, labelled by solution rank so that the
        # same state gives the same result.
        counter = iter(range(1 << 30))
        bnodes: dict[str, BNode] = {}
        for t in req.template or ():
            c = instantiate(t, sol, bnodes, lambda: f"c{i}_{next(counter)}")
            if c is not None:
                triples.setdefault(c, None)
    out = list(triples)
    if not ordered:
        out.sort(key=_row_key)
    return ConstructResult(tuple(out))
