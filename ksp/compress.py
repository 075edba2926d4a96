"""Automatic prefix lists: the encoder's choice of PREFIX entries (docs/wire-format.md §10).

The wire format leaves the prefix list to the sender; this picks one that shortens the message:
each IRI's namespace (up to its last `#`, `/` or `:`) becomes a prefix when it occurs often
enough to pay for its own entry.
"""
from __future__ import annotations

from typing import Iterable, Iterator

from .codes import RESERVED_CODE, Op
from .terms import COMPACT_DATATYPES, Literal


def namespace(iri: str) -> str:
    cut = max(iri.rfind("#"), iri.rfind("/"), iri.rfind(":"))
    return iri[: cut + 1] if cut > 0 else ""


def choose_prefixes(iris: Iterable[str]) -> tuple[str, ...]:
    """Namespaces worth a prefix entry, in order of first use (at most 255).

    An entry costs its length plus two bytes and saves its length at every use, so a namespace
    is taken when `uses × len > len + 2`.
    """
    uses: dict[str, int] = {}
    for iri in iris:
        ns = namespace(iri)
        if ns:
            uses[ns] = uses.get(ns, 0) + 1
    chosen = [ns for ns, n in uses.items() if n * len(ns) > len(ns) + 2]
    return tuple(chosen[:255])


def _term_iris(term: object) -> Iterator[str]:
    if isinstance(term, str):
        if term and term not in RESERVED_CODE:
            yield term
    elif isinstance(term, Literal):
        if term.lang is None and term.datatype not in COMPACT_DATATYPES:
            yield term.datatype


def _graph_iris(graph) -> Iterator[str]:
    prev = None
    for t in graph or ():
        for i, term in enumerate(t):
            if prev is None or prev[i] != term:  # Empty members need no IRI
                yield from _term_iris(term)
        prev = t


def _expr_iris(expr) -> Iterator[str]:
    for token in expr:
        if not isinstance(token, Op):
            yield from _term_iris(token)


def request_iris(req) -> Iterator[str]:
    """Every IRI a request's encoding spells out, once per occurrence."""
    for name in ("delete", "insert", "template", "where"):
        yield from _graph_iris(getattr(req, name))
    for graph in req.optional or ():
        yield from _graph_iris(graph)
    for name in req.graphs or ():
        yield from _term_iris(name)
    for name in (req.source, req.target):
        if name is not None:
            yield from _term_iris(name)
    opts = req.options
    for names in (opts.delete_graphs, opts.insert_graphs, opts.query_graphs):
        for name in names or ():
            yield from _term_iris(name)
    for graph in opts.optional or ():
        yield from _graph_iris(graph)
    for expr in opts.filters or ():
        yield from _expr_iris(expr)
    for bind in opts.binds or ():
        yield from _expr_iris(bind.expr)


def result_iris(items, triples: bool) -> Iterator[str]:
    """Every IRI in SELECT rows, or in CONSTRUCT triples when `triples`."""
    if triples:
        yield from _graph_iris(items)
        return
    for row in items:
        for term in row:
            if term is not None:
                yield from _term_iris(term)

