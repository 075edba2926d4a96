"""The graphs a SPARQL query (or an update's WHERE) can read, from its text, for the access
check: a client with a per-graph grant may then write `FROM <g>`, `GRAPH <g> { … }` or `WITH
<g>` in the text (as the bridge does for a device's QUERY GRAPH list) instead of the protocol's
graph parameters.

It is an over-approximation by construction, never an under-one: a dataset clause (`FROM`,
`FROM NAMED`) bounds the query exactly (SPARQL 1.1 Query §13.2); without one, every term of a
triple pattern reads the graph of the innermost `GRAPH` around it (`GRAPH ?v`: every graph), or
the default graph outside any; `FILTER`, `BIND` and `HAVING` expressions, `VALUES` data and a
`CONSTRUCT` template read nothing (an `EXISTS { … }` in them is a pattern again); `DESCRIBE`
reads the default graph. Whatever the scan does not follow (`SERVICE`, unbalanced brackets, a
`GRAPH` not followed by an IRI or a variable, an expression's `<` and `>` that a lexer takes
for an IRI around brackets) reads every graph, so the check fails closed.
`tests/test_graph_reads.py` evaluates generated queries on the store cut down to the graphs
found and on the whole store: the same answers.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ksp.errors import SparqlSyntaxError

from ..access import ALL, DEFAULT, graph_names
from .update import _Scan

__all__ = ["graphs_read"]

_TERMS = frozenset({"var", "iri", "pname", "str", "num", "bnode"})
_EXPRESSIONS = frozenset({"FILTER", "BIND", "HAVING"})
_FORMS = frozenset({"SELECT", "CONSTRUCT", "DESCRIBE", "ASK"})


class _Unfollowed(Exception):
    """A construct the scan does not follow: every graph is read."""


@dataclass
class _Frame:
    close: str  # the bracket that ends it
    graphs: frozenset[str]  # what a pattern term in it reads
    counting: bool  # whether terms in it are pattern terms


def graphs_read(text: str, default: Iterable[str] = (DEFAULT,),
                base: str | None = None) -> set[str]:
    """Graph names (as grants name them; `*` for every graph) the query `text` can read.
    `default`: what its default graph is (an update's `WITH <g>` makes it `g`); `base`: the
    service's base IRI, which relative IRIs resolve against as the query's own do."""
    try:
        scan = _Scan(text, base)
        scan.prologue()
        dataset = _dataset_clauses(scan)
        if dataset is not None:
            return dataset
        return _patterns(scan, frozenset(default))
    except (_Unfollowed, SparqlSyntaxError, IndexError):
        return {ALL}


def _dataset_clauses(scan: _Scan) -> set[str] | None:
    """The graphs of the `FROM` / `FROM NAMED` clauses (None: there are none). They stand
    outside every bracket, between the query form and its WHERE."""
    start, depth, graphs = scan.i, 0, []
    while scan.tok.kind != "eof":
        tok = scan.tok
        if tok.kind == "op" and tok.text in "{(":
            depth += 1
        elif tok.kind == "op" and tok.text in "})":
            depth -= 1
        elif depth == 0 and scan.word() == "FROM":
            scan.i += 1
            scan.accept("NAMED")
            graphs.append(scan.iri())
            continue
        scan.i += 1
    scan.i = start
    return graph_names(graphs) if graphs else None


def _patterns(scan: _Scan, default: frozenset[str]) -> set[str]:
    reads: set[str] = set()
    form = scan.word()
    if form not in _FORMS:
        raise _Unfollowed(form)
    scan.i += 1
    if form == "DESCRIBE":
        reads |= default  # the descriptions come from the default graph
    if form == "CONSTRUCT" and scan.tok.text == "{":
        scan.block()  # the template: written, not read
    stack = [_Frame("", default, False)]  # outside the WHERE: projection, modifiers
    graph: frozenset[str] | None = None  # that of the GRAPH whose block comes next
    expression = False  # the next '(' opens an expression
    while scan.tok.kind != "eof":
        tok, word = scan.tok, scan.word()
        top = stack[-1]
        if word in _EXPRESSIONS:
            expression = True
        elif word == "VALUES":
            _skip_values(scan)
            continue
        elif word == "GRAPH":
            scan.i += 1
            name = scan.tok
            if name.kind == "var":
                graph = frozenset({ALL})
                scan.i += 1
            elif name.kind in ("iri", "pname"):
                graph = frozenset(graph_names([scan.iri()]))
            else:
                raise _Unfollowed("GRAPH")
            reads |= graph  # even an empty block tells whether the graph is there
            if scan.tok.text != "{":
                raise _Unfollowed("GRAPH")
            continue
        elif word == "SERVICE":
            raise _Unfollowed("SERVICE")
        elif tok.kind == "op" and tok.text == "{":
            stack.append(_Frame("}", top.graphs if graph is None else graph, True))
            graph, expression = None, False
        elif tok.kind == "op" and tok.text == "(":
            stack.append(_Frame(")", top.graphs, top.counting and not expression))
            expression = False
        elif tok.kind == "op" and tok.text in "})":
            if len(stack) == 1 or stack.pop().close != tok.text:
                raise _Unfollowed("brackets")
        elif top.counting and (tok.kind in _TERMS or word == "A" or tok.text == "["):
            reads |= top.graphs
        elif tok.kind == "iri" and ("(" in tok.text or ")" in tok.text):
            # in an expression `?a<(1))…(?b>` lexes as one IRI where SPARQL sees two
            # comparisons and what stands between them, a pattern perhaps
            raise _Unfollowed("an IRI or comparisons")
        scan.i += 1
    if len(stack) != 1:
        raise _Unfollowed("brackets")
    return reads


def _skip_values(scan: _Scan) -> None:
    """Past `VALUES ?x { … }` or `VALUES (?x ?y) { ( … ) … }`: data, read from no graph."""
    scan.i += 1
    if scan.tok.text == "(":
        scan.i += 1
        while scan.tok.text != ")":
            if scan.tok.kind != "var":
                raise _Unfollowed("VALUES")
            scan.i += 1
        scan.i += 1
    elif scan.tok.kind == "var":
        scan.i += 1
    else:
        raise _Unfollowed("VALUES")
    scan.block()
