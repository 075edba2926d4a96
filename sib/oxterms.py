"""Conversion between `ksp.terms` and pyoxigraph terms: the one edge where the store's terms
are met. Everything else in `sib/` speaks `ksp.terms` (quads are `(s, p, o, g)` tuples whose
graph is an IRI, `DEFAULT_GRAPH` = the default graph)."""
from __future__ import annotations

from functools import lru_cache

import pyoxigraph as ox

from ksp.codes import Status

from ksp.terms import DEFAULT_GRAPH, IRI, RDF_LANGSTRING, XSD_STRING, BNode, Literal, Term

from .errors import RequestError

Quad = tuple[Term, Term, Term, IRI]
_DEFAULT = ox.DefaultGraph()


#: The term caches below hold at most `CACHED` IRIs and `LITERALS_CACHED` literals of at most
#: `CACHED_CHARS` characters each, so they are bounded in bytes too (about 16 MiB each at worst;
#: measured cost in docs/sib.md): a longer term is converted each time instead, which only costs
#: a little time. Literals get the smaller cache: a sensor's readings are new literals that
#: mostly never come back, so a literal cache as large as the IRI cache fills with readings
#: that only pass through it, and the garbage collector's full passes walk each of its
#: long-lived entries (`ksp bench soak --ab`, docs/benchmarks.md); the literals that do recur
#: (states, flags, small numbers) stay in the smaller one, least recently used first out.
CACHED, LITERALS_CACHED, CACHED_CHARS = 65536, 4096, 256


def named(iri: str) -> ox.NamedNode:
    return _named(iri) if len(iri) <= CACHED_CHARS else ox.NamedNode(iri)


@lru_cache(maxsize=CACHED)
def _named(iri: str) -> ox.NamedNode:
    return ox.NamedNode(iri)


def _literal(lit: Literal) -> ox.Literal:
    return _small_literal(lit) if len(lit.lexical) <= CACHED_CHARS else _new_literal(lit)


def _new_literal(lit: Literal) -> ox.Literal:
    if lit.lang is not None:
        return ox.Literal(lit.lexical, language=lit.lang)
    return ox.Literal(lit.lexical, datatype=named(lit.datatype))


_small_literal = lru_cache(maxsize=LITERALS_CACHED)(_new_literal)


def to_ox(term: Term):
    """The pyoxigraph term of a concrete ksp term (IRI, BNode, Literal). A term the store
    cannot hold (the codec carries any text as an IRI; oxigraph wants an absolute IRI, a valid
    language tag) is a RequestError with status 0x04."""
    try:
        if isinstance(term, IRI):
            return named(term)
        if isinstance(term, Literal):
            return _literal(term)
        if isinstance(term, BNode):
            return ox.BlankNode(term.label)
    except ValueError as exc:
        raise RequestError(Status.INVALID_DATA_FORMAT, f"{term!r}: {exc}") from None
    raise TypeError(f"{term!r} is not a concrete RDF term")


def graph_to_ox(graph: IRI):
    return _DEFAULT if graph == DEFAULT_GRAPH else to_ox(graph)


def quad_to_ox(q: Quad) -> ox.Quad:
    return ox.Quad(to_ox(q[0]), to_ox(q[1]), to_ox(q[2]), graph_to_ox(q[3]))


_NAMED, _LITERAL = ox.NamedNode, ox.Literal


def from_ox(term) -> Term:
    """The ksp term of a pyoxigraph term."""
    kind = type(term)  # the common kinds first, without the isinstance walk
    if kind is _LITERAL:
        lang = term.language
        if lang:
            return Literal(term.value, RDF_LANGSTRING, lang)
        return Literal(term.value, term.datatype.value)
    if kind is _NAMED:
        return IRI(term.value)
    if isinstance(term, ox.NamedNode):
        return IRI(term.value)
    if isinstance(term, ox.Literal):
        lang = term.language
        if lang:
            return Literal(term.value, RDF_LANGSTRING, lang)
        return Literal(term.value, term.datatype.value)
    if isinstance(term, ox.BlankNode):
        return BNode(term.value)
    raise TypeError(f"unsupported store term {term!r}")


def graph_from_ox(graph) -> IRI:
    return DEFAULT_GRAPH if isinstance(graph, ox.DefaultGraph) else IRI(graph.value)


def quad_from_ox(q: ox.Quad) -> Quad:
    return (from_ox(q.subject), from_ox(q.predicate), from_ox(q.object),
            graph_from_ox(q.graph_name))


_scratch = ox.Store()
_scratch_uses = 0
_S, _P = ox.NamedNode("urn:ksp:s"), ox.NamedNode("urn:ksp:p")


def _canonical_literal(lit: Literal) -> Literal:
    if len(lit.lexical) <= CACHED_CHARS:
        return _cached_canonical(lit)
    return _canonicalise(lit)


def _canonicalise(lit: Literal) -> Literal:
    global _scratch, _scratch_uses
    _scratch_uses += 1
    if _scratch_uses >= 4096:  # an in-memory store keeps every version: start afresh
        _scratch, _scratch_uses = ox.Store(), 0
    _scratch.add(ox.Quad(_S, _P, to_ox(lit)))
    stored = next(iter(_scratch))
    _scratch.remove(stored)
    return from_ox(stored.object)


_cached_canonical = lru_cache(maxsize=LITERALS_CACHED)(_canonicalise)


def term_caches() -> dict[str, object]:
    """Each term cache's `functools` cache info (hits, misses, maxsize, currsize), by name: what
    the soak benchmarks and the tests read to see them bounded."""
    return {"iris": _named.cache_info(), "literals": _small_literal.cache_info(),
            "canonical literals": _cached_canonical.cache_info()}


def canonical(term: Term) -> Term:
    """The term as the store holds it: oxigraph keeps typed literals by value ("01"^^xsd:integer
    reads back as "1", language tags in lower case). Deltas and index keys use this form, so a
    quad written is the quad reported and the quad an index key meets."""
    if isinstance(term, Literal) and (term.lang is not None or term.datatype != XSD_STRING):
        return _canonical_literal(term)
    return term


def resolve_iri(base: str, iri: str) -> str:
    """`iri` (an IRIREF's text, without the angle brackets) resolved against the absolute IRI
    `base` by RFC 3986 §5.2, with pyoxigraph's resolver (the one its parsers use): an empty
    fragment (`ns#`) is kept, dot segments removed, an absolute IRI unchanged. ValueError if
    `base` is not absolute or the result is not an IRI."""
    try:
        (triple,) = ox.parse(f"<{iri}> <urn:p> <urn:o> .", format=ox.RdfFormat.TURTLE,
                             base_iri=base)
    except SyntaxError as exc:
        raise ValueError(str(exc)) from None
    return triple.subject.value
