"""`render(request, union=True)`: KSP's reading of a request without graph options (§7.6: match
the union of all graphs, DELETE from every graph) written into SPARQL for a store whose default
graph is only its default graph, as a SEPA broker's is (the bridge).

The oracles: queries against pyoxigraph in union mode (`use_default_graph_as_union`, which the
rest of the suite ties to the SIB), updates against the SIB's own core; random data in the
default graph and two named graphs that share triples, random requests over the same words.
"""
from __future__ import annotations

from collections import Counter

import pyoxigraph as ox
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ksp import compile_sparql
from ksp.errors import NoSparqlEquivalent
from ksp.session import KPIdentity
from ksp.sparql.render import render
from sib.core import SibCore
from sib.store import QuadStore
from sib.testing import RecordingChannel

E = "http://e/"


def every_graph(text: str):
    """The request in KSP's option-less form (what a device sends): text that names no graph,
    read as every graph rather than SPARQL's default graph."""
    return compile_sparql(text, every_graph=True)

GRAPHS = [None, E + "g1", E + "g2"]
SUBJECTS = ["<http://e/a>", "<http://e/b>", "<http://e/c>"]
PREDICATES = ["<http://e/p>", "<http://e/q>"]
OBJECTS = SUBJECTS + ["1", "2"]
VARS = ["?x", "?y", "?z"]

quads = st.lists(st.tuples(st.sampled_from(GRAPHS), st.sampled_from(SUBJECTS),
                           st.sampled_from(PREDICATES), st.sampled_from(OBJECTS)),
                 max_size=14)


def _term(draw, words):
    return draw(st.sampled_from(VARS)) if draw(st.booleans()) else draw(st.sampled_from(words))


@st.composite
def patterns(draw, n=(1, 3)):
    return " ".join(f"{_term(draw, SUBJECTS)} {_term(draw, PREDICATES)} {_term(draw, OBJECTS)} ."
                    for _ in range(draw(st.integers(*n))))


@st.composite
def queries(draw):
    where = draw(patterns())
    if draw(st.booleans()):
        where += f" OPTIONAL {{ {draw(patterns((1, 2)))} }}"
    form = draw(st.sampled_from(["select", "distinct", "ask", "construct"]))
    if form == "ask":
        return f"ASK {{ {where} }}"
    if form == "construct":
        return f"CONSTRUCT {{ ?x <http://e/r> ?y }} WHERE {{ {where} }}"
    return f"SELECT {'DISTINCT ' if form == 'distinct' else ''}* WHERE {{ {where} }}"


@st.composite
def updates(draw):
    ground = st.tuples(st.sampled_from(SUBJECTS), st.sampled_from(PREDICATES),
                       st.sampled_from(OBJECTS)).map(" ".join)
    data = lambda: " . ".join(draw(st.lists(ground, min_size=1, max_size=3)))  # noqa: E731
    kind = draw(st.sampled_from(["delete data", "update data", "delete", "modify", "insert",
                                 "delete graph"]))
    if kind == "delete data":
        return f"DELETE DATA {{ {data()} }}"
    if kind == "update data":
        return f"DELETE DATA {{ {data()} }} ; INSERT DATA {{ {data()} }}"
    where = draw(patterns((1, 2)))
    if draw(st.booleans()):
        where += f" OPTIONAL {{ {draw(patterns((1, 1)))} }}"
    template = "?x <http://e/p> ?y"
    if kind == "delete":
        return f"DELETE {{ {template} }} WHERE {{ {where} }}"
    if kind == "modify":
        return f"DELETE {{ {template} }} INSERT {{ ?x <http://e/q> 2 }} WHERE {{ {where} }}"
    if kind == "insert":
        return f"INSERT {{ {template} }} WHERE {{ {where} }}"
    return f"DELETE {{ GRAPH <http://e/g1> {{ {template} }} }} WHERE {{ {where} }}"


def _ox(term: str):
    return ox.NamedNode(term[1:-1]) if term.startswith("<") else ox.Literal(
        term, datatype=ox.NamedNode("http://www.w3.org/2001/XMLSchema#integer"))


def _store(data) -> ox.Store:
    store = ox.Store()
    for g, s, p, o in data:
        store.add(ox.Quad(_ox(s), _ox(p), _ox(o),
                          ox.NamedNode(g) if g else ox.DefaultGraph()))
    return store


def _answer(result):
    if isinstance(result, ox.QueryBoolean):
        return bool(result)
    if isinstance(result, ox.QueryTriples):
        return {str(t) for t in result}
    names = [v.value for v in result.variables]
    return Counter(tuple(str(row[n]) if row[n] is not None else None for n in names)
                   for row in result)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(quads, queries())
def test_queries_read_the_union_of_all_graphs(data, text):
    request = every_graph(text)
    expected = _answer(_store(data).query(render(request), use_default_graph_as_union=True))
    assert _answer(_store(data).query(render(request, union=True))) == expected, text


def _sib(data, request):
    """(the SIB's answer, the quads after it) for `request` on `data`."""
    store = QuadStore(temporary=True)
    try:
        core = SibCore(store)
        store.oxigraph.extend(list(_store(data)))
        log: list = []
        core.handle(request, RecordingChannel(KPIdentity(None, ("kp", 1)), 1, log))
        assert log and log[0][3].status == 0, log
        return log[0][3], {str(q) for q in store.oxigraph}
    finally:
        store.close()


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(quads, updates())
def test_updates_delete_from_every_graph_as_the_sib_does(data, text):
    request = every_graph(text)
    plain = _store(data)
    plain.update(render(request, union=True))
    assert {str(q) for q in plain} == _sib(data, request)[1], text


def test_a_triple_in_two_graphs_matches_twice_as_in_the_sib():
    """The union is of the graphs' contents (pyoxigraph's union default graph, which the SIB
    answers from): a triple held by the default graph and g1 matches twice, with or without
    variables; one held by no graph not at all."""
    data = [(None, "<http://e/a>", "<http://e/p>", "1"),
            (E + "g1", "<http://e/a>", "<http://e/p>", "1"),
            (E + "g2", "<http://e/b>", "<http://e/q>", "2")]
    rows = _store(data).query(render(every_graph(
        "SELECT ?s WHERE { ?s <http://e/p> 1 . <http://e/b> <http://e/q> 2 }"), union=True))
    assert [str(r["v0"]) for r in rows] == ["<http://e/a>"] * 2
    answer, _ = _sib(data, every_graph("SELECT ?s WHERE { ?s <http://e/p> 1 . "
                                       "<http://e/b> <http://e/q> 2 }"))
    assert len(answer.result.rows) == 2
    assert not _store(data[:2]).query(render(every_graph(
        "ASK { <http://e/b> <http://e/q> 2 }"), union=True))


def test_what_one_update_cannot_say_is_refused():
    """Deleting from every graph multiplies the solutions by the graphs a triple is in, which
    would give each copy its own blank nodes in the INSERT template."""
    request = every_graph("DELETE { ?x <http://e/p> ?y } INSERT { ?x <http://e/q> [] } "
                          "WHERE { ?x <http://e/p> ?y }")
    with pytest.raises(NoSparqlEquivalent, match="without DELETE GRAPH"):
        render(request, union=True)
    render(request)  # the plain text is still there
