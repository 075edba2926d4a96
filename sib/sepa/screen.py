"""The triple patterns of a SEPA subscription's query, for the SIB's pattern index
(`sib.index.PatternIndex`): a changed quad that matches none of them cannot change the result,
so the subscription is not evaluated again.

Soundness: a SPARQL query reads the store only through triple patterns and property paths
(BGPs, OPTIONAL, UNION, MINUS, EXISTS, subqueries all are made of them). So the patterns are
gathered from everywhere in the query (a CONSTRUCT template or an unused pattern only adds
candidates), a path contributes each of its IRIs as `?s iri ?o`, and anything not read through
a pattern with a constant makes the query unscreenable (`None`: evaluated after every change):
a negated property set or a path that may have length zero (`*`, `?`, which binds every node
of the graph), DESCRIBE, SERVICE, a query neither parser reads. Literal constants are
wildcards (the store compares terms, the parsers may normalise lexical forms), and graphs are
not screened (every changed quad is looked up, whatever its graph); creating or dropping a
graph makes every subscription a candidate (`GRAPH ?g {}` reads the graph names), in the
broker.

Two parsers: KSP's own compiler (`ksp.sparql`, about 0.2 ms) for the subset it reads, else
rdflib's SPARQL algebra (about 6 ms), once per distinct query text.
"""
from __future__ import annotations

from collections import Counter

from ksp.errors import KspError
from ksp.sparql import compile as compile_ksp
from ksp.terms import IRI, Literal, Triple, Var

__all__ = ["PARSED", "triple_patterns"]

_ANY = Var(0)
#: Texts each parser ("ksp", "rdflib") has read in this process: rdflib's are the ones that
#: cost the event loop milliseconds (a subscription is screened on the scheduler).
PARSED: Counter[str] = Counter()


def triple_patterns(text: str, base_iri: str | None = None) -> list[Triple] | None:
    """The query's triple patterns (variables, blank nodes and literals as wildcards), or None
    if it cannot be screened. `base_iri` resolves the text's relative IRIs; it goes to rdflib
    only: a text KSP's compiler reads has none (it refuses them), and a BASE would send every
    text to rdflib, ~6 ms of the event loop per subscription instead of ~0.1 ms."""
    try:
        request = compile_ksp(text)
    except KspError:
        PARSED["rdflib"] += 1
        return _from_rdflib(text if base_iri is None else f"BASE <{base_iri}>\n{text}")
    PARSED["ksp"] += 1
    found: list[Triple] = []
    _walk_ksp(request, found)
    return [Triple(*(_ANY if isinstance(t, Literal) else t for t in tp)) for tp in found]


def _walk_ksp(value, found: list[Triple]) -> None:
    if isinstance(value, Triple):
        found.append(value)
    elif isinstance(value, tuple):
        for item in value:
            _walk_ksp(item, found)


def _from_rdflib(text: str) -> list[Triple] | None:
    from rdflib.plugins.sparql.algebra import translateQuery
    from rdflib.plugins.sparql.parser import parseQuery

    try:
        query = translateQuery(parseQuery(text))
    except Exception:  # pyoxigraph decides whether it is SPARQL; unscreenable here
        return None
    if query.algebra.name == "DescribeQuery":
        return None
    found: list[Triple] = []
    try:
        _walk_algebra(query.algebra, found, set())
    except _Unscreenable:
        return None
    return found


class _Unscreenable(Exception):
    pass


_WILD = Triple(_ANY, _ANY, _ANY)
#: Algebra nodes whose solutions all use a triple of their first pattern (`p` or `p1`).
_THROUGH = {"Filter", "Extend", "Project", "Distinct", "Reduced", "Slice", "OrderBy",
            "ToMultiSet", "LeftJoin", "Minus", "Graph"}


def _walk_algebra(node, found: list[Triple], seen: set[int]) -> None:
    from rdflib.paths import Path
    from rdflib.plugins.sparql.parserutils import CompValue

    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, CompValue):
        if node.name in ("ServiceGraphPattern", "Service"):
            raise _Unscreenable
        if node.name == "GraphGraphPattern" or (node.name == "Graph"
                                                and not _grounded(node.p)):
            # GRAPH ?g {} and its kin read the graph names: any quad may change them
            found.append(_WILD)
        for key, value in node.items():
            if key == "triples" and isinstance(value, list):
                for tp in value:
                    _add(tp, found)
            else:
                _walk_algebra(value, found, seen)
    elif isinstance(node, dict):
        for value in node.values():
            _walk_algebra(value, found, seen)
    elif isinstance(node, (list, tuple, set, frozenset)):
        for value in node:
            _walk_algebra(value, found, seen)
    elif isinstance(node, Path):
        raise _Unscreenable  # a path outside a triple pattern: not read here


def _grounded(node) -> bool:
    """Whether every solution of `node` uses some triple (else a GRAPH around it yields one
    per graph name)."""
    name = getattr(node, "name", None)
    if name == "BGP":
        return bool(node.triples)
    if name == "Join":
        return _grounded(node.p1) or _grounded(node.p2)
    if name == "Union":
        return _grounded(node.p1) and _grounded(node.p2)
    if name in _THROUGH:
        return _grounded(node["p"] if "p" in node else node["p1"])
    return False


def _add(tp, found: list[Triple]) -> None:
    """One triple pattern; the unexpanded form (inside EXISTS) is a flat list of s, p, o."""
    from rdflib.paths import Path

    tp = list(tp)
    if len(tp) % 3:
        raise _Unscreenable
    for i in range(0, len(tp), 3):
        s, p, o = tp[i:i + 3]
        if isinstance(p, Path):
            found.extend(Triple(_ANY, IRI(iri), _ANY) for iri in _path_iris(p))
        else:
            found.append(Triple(_term(s), _term(p), _term(o)))


def _term(term):
    from rdflib import URIRef

    return IRI(str(term)) if isinstance(term, URIRef) else _ANY


def _path_iris(path) -> list[str]:
    from rdflib import URIRef
    from rdflib.paths import AlternativePath, InvPath, MulPath, SequencePath

    if isinstance(path, URIRef):
        return [str(path)]
    if isinstance(path, (SequencePath, AlternativePath)):
        return [iri for arg in path.args for iri in _path_iris(arg)]
    if isinstance(path, InvPath):
        return _path_iris(path.arg)
    if isinstance(path, MulPath) and path.mod == "+":
        return _path_iris(path.path)
    raise _Unscreenable  # `*` and `?` match zero steps; a negated set any other predicate
