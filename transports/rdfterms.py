"""rdflib terms at the client's edge ⇄ `ksp.terms` inside (the only place they meet).

Variables travel as indexes (§4.5) and are named `?v{k}`, so `Variable("v3")` is `Var(3)`.
An `xsd:string` literal becomes a plain rdflib `Literal` (RDF 1.1: the same literal).
"""
from __future__ import annotations

from collections import OrderedDict
from operator import attrgetter
from typing import Any

import rdflib

from ksp import IRI, BNode, Literal, Request, Triple, Var
from ksp.terms import RDF_LANGSTRING, XSD_STRING

__all__ = ["to_ksp", "from_ksp", "triple_to_ksp", "triple_from_ksp", "request_to_ksp"]

_GRAPH_FIELDS = ("delete", "insert", "where", "template")
_graph_fields = attrgetter(*_GRAPH_FIELDS)


def to_ksp(term: Any):
    """An rdflib term (or an already-KSP term, or a plain Python value) as a `ksp.terms` term."""
    if isinstance(term, (IRI, BNode, Var, Literal)):
        return term
    if isinstance(term, rdflib.URIRef):
        return IRI(str(term))
    if isinstance(term, rdflib.Literal):
        if term.language:
            return Literal(str(term), RDF_LANGSTRING, term.language)
        return Literal(str(term), str(term.datatype) if term.datatype else XSD_STRING)
    if isinstance(term, rdflib.BNode):
        return BNode(str(term))
    if isinstance(term, rdflib.Variable):
        name = str(term)
        if name[:1] == "v" and name[1:].isdigit():
            return Var(int(name[1:]))
        raise ValueError(f"variable ?{name}: KSP variables are indexes, name them ?v0, ?v1, … "
                         "(or pass SPARQL text)")
    if isinstance(term, (bool, int, float, str)):
        return Literal.of(term)
    raise TypeError(f"not an RDF term: {term!r}")


CACHED = 4096
"""IRIs and literals `from_ksp` keeps converted, each (the oldest out first); only those of
at most `CACHED_CHARS` characters (an rdflib `Literal` costs microseconds to make: it parses
its value)."""
CACHED_CHARS = 256
_converted: dict[type, OrderedDict] = {IRI: OrderedDict(), Literal: OrderedDict()}


def from_ksp(term: Any):
    """A `ksp.terms` term as an rdflib term (None stays None: an unbound variable). rdflib
    terms are immutable: a term met again may be given the same object (`CACHED`)."""
    converted = _converted.get(type(term))
    if converted is not None:
        got = converted.get(term)
        if got is None:
            got = _converted_once(term)
            if (len(term) if type(term) is IRI else len(term.lexical)) <= CACHED_CHARS:
                converted[term] = got
                if len(converted) > CACHED:
                    try:
                        converted.popitem(last=False)
                    except KeyError:  # emptied meanwhile (another thread's loop)
                        pass
        return got
    return _converted_once(term)


def _converted_once(term: Any):
    if term is None:
        return None
    if isinstance(term, IRI):
        return rdflib.URIRef(term)
    if isinstance(term, Literal):
        if term.lang is not None:
            return rdflib.Literal(term.lexical, lang=term.lang)
        if term.datatype == XSD_STRING:
            return rdflib.Literal(term.lexical)
        # normalize=False: rdflib would rewrite the lexical form ("1"^^xsd:double as "1.0",
        # a date's time zone dropped); a KP gets exactly what the SIB holds.
        return rdflib.Literal(term.lexical, datatype=rdflib.URIRef(term.datatype),
                              normalize=False)
    if isinstance(term, BNode):
        return rdflib.BNode(term.label)
    if isinstance(term, Var):
        return rdflib.Variable(f"v{term.index}")
    raise TypeError(f"not a KSP term: {term!r}")


def triple_to_ksp(triple) -> Triple:
    s, p, o = triple
    return Triple(to_ksp(s), to_ksp(p), to_ksp(o))


def triple_from_ksp(triple) -> tuple:
    return (from_ksp(triple[0]), from_ksp(triple[1]), from_ksp(triple[2]))


_KSP_TERMS = frozenset({IRI, BNode, Var, Literal})


def _is_ksp(graph) -> bool:
    """Already KSP triples of KSP terms (the common case: checked, not rebuilt)."""
    if type(graph) is not tuple:
        return False
    terms = _KSP_TERMS
    for t in graph:  # a loop, not all(generator): this runs for every request sent
        if not (type(t) is Triple and type(t[0]) in terms and type(t[1]) in terms
                and type(t[2]) in terms):
            return False
    return True


def _graph(graph) -> tuple[Triple, ...] | None:
    if graph is None or _is_ksp(graph):
        return graph
    return tuple(triple_to_ksp(t) for t in graph)


def request_to_ksp(request: Request) -> Request:
    """`request` with any rdflib terms in its data fields converted (options must be KSP)."""
    changes: dict[str, Any] = {}
    for name, value in zip(_GRAPH_FIELDS, _graph_fields(request)):
        if value is not None and not _is_ksp(value):
            changes[name] = _graph(value)
    if request.optional is not None and not all(_is_ksp(g) for g in request.optional):
        changes["optional"] = tuple(_graph(g) for g in request.optional)
    for name in ("source", "target"):
        value = getattr(request, name)
        if value is not None and type(value) is not IRI:
            changes[name] = graph_name(value)
    if request.graphs is not None and not all(type(g) is IRI for g in request.graphs):
        changes["graphs"] = tuple(graph_name(g) for g in request.graphs)
    return request._replace(**changes) if changes else request


def graph_name(name: Any) -> IRI:
    """A graph name: an IRI (rdflib URIRef or str); None or "" is the default graph (R15)."""
    if name is None:
        return IRI("")
    if isinstance(name, (rdflib.URIRef, str)):
        return IRI(str(name))
    raise TypeError(f"not a graph name: {name!r}")
