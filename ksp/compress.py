"""Automatic prefix lists: the encoder's choice of PREFIX entries (docs/wire-format.md §10).

The wire format leaves the prefix list to the sender; this picks one that shortens the message:
each IRI's namespace (up to its last `#`, `/` or `:`) becomes a prefix when it occurs often
enough to pay for its own entry.
"""
from __future__ import annotations

from typing import Iterable, Iterator

from .codes import RESERVED_CODE, Op
from .terms import COMPACT_DATATYPES, Literal


_namespaces: dict[str, str] = {}


def namespace(iri: str) -> str:
    """The IRI up to and including its last `#`, `/` or `:` ("" if none)."""
    ns = _namespaces.get(iri)
    if ns is None:
        cut = max(iri.rfind("#"), iri.rfind("/"), iri.rfind(":"))
        ns = iri[: cut + 1] if cut > 0 else ""
        if len(_namespaces) >= 8192:
            _namespaces.clear()
        _namespaces[iri] = ns
    return ns


def choose_prefixes(iris: Iterable[str]) -> tuple[str, ...]:
    """Namespaces worth a prefix entry, in order of first use (at most 255).

    An entry costs its length in bytes plus two and saves that length at every use, so a
    namespace is taken when `uses × bytes > bytes + 2`.
    """
    uses: dict[str, int] = {}
    get = uses.get
    for iri in iris:
        ns = namespace(iri)
        if ns:
            uses[ns] = get(ns, 0) + 1
    chosen = []
    for ns, n in uses.items():
        size = len(ns.encode("utf-8"))
        if n * size > size + 2:
            chosen.append(ns)
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

