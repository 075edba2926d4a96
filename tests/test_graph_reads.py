"""Graph restrictions written in the query text count for the access check (`sib.sepa.reads`):
`FROM`, `FROM NAMED`, `GRAPH <g>`, an update's `WITH` and `USING`, at the SEPA gate and through
the bridge (which sends a device's QUERY GRAPH list as `FROM <g>`), so per-graph grants work
everywhere and never let a client read a graph it was not granted.

Soundness is checked by evaluation: a generated query gives the same answers on the store cut
down to the graphs `graphs_read` found as on the whole store."""
from __future__ import annotations

import asyncio

import pyoxigraph as ox
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from rdflib import Literal, URIRef

from bridge.testing import BridgeProcess, gate_broker
from ksp.codes import Status
from sib import AccessPolicy
from sib.sepa.reads import graphs_read
from transports import connect
from transports.errors import KspStatusError

from test_sepa_gate import PRE, Lab, run

EX = "http://example.org/"
GRAPHS = ("default", EX + "g1", EX + "g2", EX + "g3")


@pytest.mark.parametrize("query, reads", [
    ("SELECT * WHERE { ?s ?p ?o }", {"default"}),
    ("SELECT * FROM <http://a/> WHERE { ?s ?p ?o }", {"http://a/"}),
    ("SELECT * FROM <http://a/> FROM NAMED <http://b/> WHERE { GRAPH ?g { ?s ?p ?o } }",
     {"http://a/", "http://b/"}),
    (PRE + "SELECT * WHERE { GRAPH ex:g { ?s ?p ?o } FILTER(?o > 1) }", {EX + "g"}),
    (PRE + "SELECT * WHERE { GRAPH ex:g { ?s ?p ?o } FILTER EXISTS { ?s ?q ?r } }",
     {EX + "g", "default"}),
    (PRE + "SELECT * WHERE { GRAPH ex:g { ?s ?p ?o } BIND(?o + 1 AS ?n) }", {EX + "g"}),
    (PRE + "SELECT * WHERE { VALUES (?s ?o) { (ex:a 1) } GRAPH ex:g { ?s ?p ?o } }",
     {EX + "g"}),
    (PRE + "CONSTRUCT { ?s ?p ?o } WHERE { GRAPH ex:g { ?s ?p ?o } }", {EX + "g"}),
    ("SELECT * WHERE { GRAPH ?g { ?s ?p ?o } }", {"*"}),
    ("ASK {}", set()),
    ("DESCRIBE <http://a/>", {"default"}),
    # what the scan does not follow reads everything
    ("SELECT * WHERE { SERVICE <http://a/> { ?s ?p ?o } }", {"*"}),
    ("SELECT * WHERE { ?s ?p ?o ", {"*"}),
    ("SELECT * WHERE { GRAPH <http://g/> {?x ?y ?z} FILTER(?z<(1)).?s?p?o.FILTER(?s>0) }",
     {"*"}),
    ("NOT SPARQL", {"*"}),
])
def test_the_graphs_a_query_reads(query, reads):
    assert graphs_read(query) == reads


def test_an_updates_with_graph_is_its_default():
    where = PRE + "SELECT * WHERE { ?s ?p ?o GRAPH ex:h { ?s ?q ?r } }"
    assert graphs_read(where, {EX + "g"}) == {EX + "g", EX + "h"}


# -- soundness, by evaluation -------------------------------------------------------------

TERMS = {"s": ["?s", "?x", "ex:a", "ex:b"], "p": ["?p", "ex:p", "ex:q"],
         "o": ["?o", "?x", "ex:a", "1", "2"]}


def _triple(draw) -> str:
    return " ".join(draw(st.sampled_from(TERMS[k])) for k in "spo") + " ."


@st.composite
def groups(draw, depth: int = 0) -> str:
    parts = []
    for _ in range(draw(st.integers(0, 3))):
        kinds = ["triple", "filter", "values"] + (
            ["graph", "optional", "union", "minus", "exists", "sub"] if depth < 3 else [])
        kind = draw(st.sampled_from(kinds))
        inner = (lambda: draw(groups(depth + 1)))
        if kind == "triple":
            parts.append(_triple(draw))
        elif kind == "filter":
            parts.append(draw(st.sampled_from(
                ["FILTER(?o > 1)", "FILTER(bound(?x))", "FILTER(?s != ex:a)"])))
        elif kind == "values":
            parts.append(draw(st.sampled_from(
                ["VALUES ?s { ex:a ex:b }", "VALUES (?o ?p) { (1 ex:p) (2 UNDEF) }"])))
        elif kind == "graph":
            g = draw(st.sampled_from(["ex:g1", "ex:g2", "ex:g3", "ex:none", "?g"]))
            parts.append(f"GRAPH {g} {{ {inner()} }}")
        elif kind == "optional":
            parts.append(f"OPTIONAL {{ {inner()} }}")
        elif kind == "union":
            parts.append(f"{{ {inner()} }} UNION {{ {inner()} }}")
        elif kind == "minus":
            parts.append(f"MINUS {{ {inner()} }}")
        elif kind == "exists":
            parts.append(f"FILTER {draw(st.sampled_from(['', 'NOT ']))}EXISTS {{ {inner()} }}")
        else:
            parts.append(f"{{ SELECT * WHERE {{ {inner()} }} }}")
    return " ".join(parts)


@st.composite
def queries(draw) -> str:
    where = draw(groups())
    dataset = ""
    if draw(st.booleans()) and draw(st.booleans()):  # a quarter of them with FROM clauses
        dataset = " ".join(draw(st.lists(st.sampled_from(
            ["FROM ex:g1", "FROM ex:g2", "FROM NAMED ex:g2", "FROM NAMED ex:g3"]),
            max_size=3, unique=True)))
    form = draw(st.sampled_from(["SELECT *", "ASK", "SELECT (COUNT(*) AS ?n)"]))
    return f"{PRE}{form} {dataset} WHERE {{ {where} }}"


def _store(graphs) -> ox.Store:
    """Each graph holds the same shapes with values of its own, so that which graph a pattern
    reads shows in the answers."""
    store = ox.Store()
    ex = lambda local: ox.NamedNode(EX + local)  # noqa: E731
    for k, name in enumerate(GRAPHS):
        if name not in graphs and "*" not in graphs:
            continue
        g = ox.DefaultGraph() if name == "default" else ox.NamedNode(name)
        for s, p, o in (("a", "p", ox.Literal(str(k), datatype=ox.NamedNode(
                "http://www.w3.org/2001/XMLSchema#integer"))), ("a", "q", ex("b")),
                        ("b", "p", ex("a")), (f"only{k}", "p", ex("a"))):
            store.add(ox.Quad(ex(s), ex(p), o, g))
        if k % 2:
            store.add(ox.Quad(ex("b"), ex("q"), ox.Literal("2", datatype=ox.NamedNode(
                "http://www.w3.org/2001/XMLSchema#integer")), g))
    return store


FULL = _store({"*"})


def _answers(store: ox.Store, query: str):
    result = store.query(query)
    if isinstance(result, ox.QueryBoolean):
        return bool(result)
    return sorted(tuple(str(solution[v]) if solution[v] is not None else ""
                        for v in result.variables) for solution in result)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(queries())
def test_a_query_on_the_graphs_found_answers_as_on_the_whole_store(query):
    try:
        expected = _answers(FULL, query)
    except SyntaxError:
        assume(False)
    reads = graphs_read(query)
    assert _answers(_store(reads), query) == expected, (query, reads)


# -- at the gate and through the bridge -----------------------------------------------------

GRANTED, OTHER = EX + "granted", EX + "other"


def test_per_graph_grants_at_the_gate_from_the_query_text():
    async def main():
        policy = AccessPolicy(anonymous={"read": [GRANTED], "write": [GRANTED]})
        async with Lab(access=policy) as lab:
            await lab.update(f"INSERT DATA {{ GRAPH <{GRANTED}> {{ <{EX}s> <{EX}p> 1 }} }}")
            for query, status in (
                    (f"SELECT ?o FROM <{GRANTED}> WHERE {{ ?s ?p ?o }}", 200),
                    (f"SELECT ?o WHERE {{ GRAPH <{GRANTED}> {{ ?s ?p ?o }} }}", 200),
                    (f"SELECT ?o FROM NAMED <{GRANTED}> WHERE {{ GRAPH ?g {{ ?s ?p ?o }} }}",
                     200),
                    (f"SELECT ?o FROM <{OTHER}> WHERE {{ ?s ?p ?o }}", 403),
                    (f"SELECT ?o WHERE {{ GRAPH <{OTHER}> {{ ?s ?p ?o }} }}", 403),
                    ("SELECT ?o WHERE { GRAPH ?g { ?s ?p ?o } }", 403),
                    ("SELECT ?o WHERE { ?s ?p ?o }", 403)):  # the default graph
                async with lab.http.get(lab.base + "/query", params={"query": query}) as r:
                    body = await r.json()
                    assert r.status == status, (query, body)
                    if status == 200:
                        assert [b["o"]["value"] for b in body["results"]["bindings"]] == ["1"]
            # updates: WITH and USING name what their WHERE reads
            await lab.update(f"WITH <{GRANTED}> DELETE {{ ?s ?p 1 }} INSERT {{ ?s ?p 2 }} "
                             "WHERE { ?s ?p 1 }")
            await lab.update(f"INSERT {{ GRAPH <{GRANTED}> {{ ?s ?p 3 }} }} USING <{GRANTED}> "
                             "WHERE { ?s ?p 2 }")
            body = await lab.update(f"INSERT {{ GRAPH <{GRANTED}> {{ ?s ?p 4 }} }} "
                                    f"WHERE {{ GRAPH <{OTHER}> {{ ?s ?p ?o }} }}", status=403)
            assert body["error"] == "forbidden"
            bindings = await lab.select(f"SELECT ?o FROM <{GRANTED}> WHERE {{ ?s ?p ?o }}")
            assert sorted(b["o"]["value"] for b in bindings) == ["2", "3"]
    run(main())


def test_per_graph_grants_through_the_bridge(tmp_path):
    """The device's QUERY GRAPH reaches the broker as `FROM <g>`: allowed for the graph the
    broker grants, refused for another (before, every such query needed `"*"`)."""
    config = tmp_path / "broker.toml"
    config.write_text(f'[access]\nanonymous = {{ read = ["{GRANTED}"], write = ["{GRANTED}"] }}\n')
    with gate_broker("--config", str(config)) as broker, BridgeProcess(
            "--broker", f"http://127.0.0.1:{broker.ports['http']}", "--memory",
            "--udp-port", "0", "--tcp-port", "-1", "--coap-port", "-1") as bridge:
        async def main():
            async with await connect(f"udp://127.0.0.1:{bridge.port}") as kp:
                await kp.insert_data([(URIRef(EX + "s"), URIRef(EX + "p"), Literal(1))],
                                     URIRef(GRANTED))
                rows = await kp.query(f"SELECT ?o FROM <{GRANTED}> WHERE {{ ?s ?p ?o }}")
                assert [row[0] for row in rows.rows] == [Literal(1)]
                with pytest.raises(KspStatusError) as refused:
                    await kp.query(f"SELECT ?o FROM <{OTHER}> WHERE {{ ?s ?p ?o }}")
                assert refused.value.status == Status.ACCESS_DENIED

        asyncio.run(asyncio.wait_for(main(), 120))
