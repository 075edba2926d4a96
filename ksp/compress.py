"""Automatic prefix lists: the encoder's choice of PREFIX entries (docs/wire-format.md §10).

The wire format leaves the prefix list to the sender; this picks one that shortens the message:
each IRI's namespace (up to its last `#`, `/` or `:`) becomes a prefix when it occurs often
enough to pay for its own entry.
"""
from __future__ import annotations

from typing import Iterable

from .codes import RESERVED_CODE, Op
from .model import UNSET_OPTIONS, Call
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


_chosen: dict[tuple[str, ...], tuple[str, ...]] = {}


def choose_prefixes(iris: Iterable[str]) -> tuple[str, ...]:
    """Namespaces worth a prefix entry, in order of first use (at most 255).

    An entry costs its length in bytes plus two and saves that length at every use, so a
    namespace is taken when `uses × bytes > bytes + 2`. Short IRI lists are remembered: a
    device sends messages of one shape over and over.
    """
    key = tuple(iris)
    chosen = _chosen.get(key)
    if chosen is None:
        chosen = _choose(key)
        if len(key) <= 64:
            if len(_chosen) >= 4096:
                _chosen.clear()
            _chosen[key] = chosen
    return chosen


def _choose(iris: tuple[str, ...]) -> tuple[str, ...]:
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


def _add_term(out: list[str], term: object) -> None:
    if isinstance(term, str):
        if term and term not in RESERVED_CODE:
            out.append(term)
    elif isinstance(term, Literal):
        if term.lang is None and term.datatype not in COMPACT_DATATYPES:
            out.append(term.datatype)


def _add_graph(out: list[str], graph) -> None:
    prev = None
    for t in graph or ():
        if prev is None or len(t) != 3 or len(prev) != 3:  # (bad triples: the encoder says why)
            for term in t:
                _add_term(out, term)
        else:  # Empty members (a repeat of the previous triple's) need no IRI
            s, p, o = t
            if s != prev[0]:
                _add_term(out, s)
            if p != prev[1]:
                _add_term(out, p)
            if o != prev[2]:
                _add_term(out, o)
        prev = t


def _add_expr(out: list[str], expr) -> None:
    for token in expr:
        if not isinstance(token, (Op, Call)):
            _add_term(out, token)


def request_iris(req) -> list[str]:
    """Every IRI a request's encoding spells out, once per occurrence."""
    out: list[str] = []
    for graph in (req.delete, req.insert, req.template, req.where):
        if graph:
            _add_graph(out, graph)
    for graph in req.optional or ():
        _add_graph(out, graph)
    for name in req.graphs or ():
        _add_term(out, name)
    for name in (req.source, req.target):
        if name is not None:
            _add_term(out, name)
    opts = req.options
    if opts[1:] == UNSET_OPTIONS:
        return out
    for names in (opts.delete_graphs, opts.insert_graphs, opts.query_graphs):
        for name in names or ():
            _add_term(out, name)
    for graph in opts.optional or ():
        _add_graph(out, graph)
    for expr in opts.filters or ():
        _add_expr(out, expr)
    for bind in opts.binds or ():
        _add_expr(out, bind.expr)
    return out


def result_iris(items, triples: bool) -> list[str]:
    """Every IRI in SELECT rows, or in CONSTRUCT triples when `triples`."""
    out: list[str] = []
    if triples:
        _add_graph(out, items)
        return out
    for row in items:
        for term in row:
            if term is not None:
                _add_term(out, term)
    return out

