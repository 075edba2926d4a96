"""Smoke test of the codec benchmark (tools/bench/codec.py) — no timing assertions.

Speed is measured by the benchmark itself, never by tests. This guards that the comparison is
fair: every KSP message decodes back to what was encoded, and every contender's input says the
same thing as the KSP message (terms converted by hand, not with the code under test).
"""
from __future__ import annotations

import io
import json

import pyoxigraph as ox
import pytest
import rdflib
from rdflib.plugins.sparql import prepareQuery
from rdflib.query import Result

from ksp.codec import UDP, decode_kp_message, decode_sib_message
from ksp.codes import Op, Tx
from ksp.terms import IRI, Literal, Triple, Var
from tools.bench import _timing, codec

GH = "http://example.org/greenhouse#"
XSD = "http://www.w3.org/2001/XMLSchema#"


@pytest.fixture(scope="module")
def cases():
    return {case.key: case for case in codec.build_cases()}


# -- KSP terms to the other libraries' terms, by hand --------------------------------------------

def to_ox(term):
    if isinstance(term, IRI):
        return ox.NamedNode(str(term))
    assert isinstance(term, Literal) and term.lang is None
    return ox.Literal(term.lexical, datatype=ox.NamedNode(term.datatype))


def to_rdflib(term):
    if isinstance(term, IRI):
        return rdflib.URIRef(str(term))
    if isinstance(term, Var):
        return rdflib.Variable("st"[term.index])  # the query names variable 0 ?s, 1 ?t
    assert isinstance(term, Literal) and term.lang is None
    return rdflib.Literal(term.lexical, datatype=rdflib.URIRef(term.datatype))


def ox_key(term):
    """(kind, value, datatype) of a pyoxigraph term."""
    if isinstance(term, ox.NamedNode):
        return ("iri", term.value, None)
    return ("literal", term.value, term.datatype.value)


def ksp_key(term):
    if isinstance(term, IRI):
        return ("iri", str(term), None)
    return ("literal", term.lexical, term.datatype)


# -- The harness runs ----------------------------------------------------------------------------

def test_quick_run_with_tiny_loops_produces_a_full_report():
    report = codec.run(quick=True, target=0.0, repeats=1, max_loops=1)
    assert [r.title for r in report.rows][-1] == "mix (sum of the three)"
    assert len(report.rows) == 4
    for timing in report.timings.values():
        assert timing.loops == 1 and len(timing.per_call) == 1 and timing.median > 0
    mix = report.mix
    assert mix.ksp_decode == pytest.approx(sum(r.ksp_decode for r in report.rows[:3]))
    assert mix.ksp_bytes == sum(r.ksp_bytes for r in report.rows[:3])
    text = codec.render(report, "cmd --quick", markdown=False)
    assert "target ≥ 5×" in text and "target ≥ 300×" in text
    md = codec.render(report, "cmd --markdown", markdown=True)
    assert md.startswith("| message | KSP decode µs |")
    assert "`cmd --markdown`" in md and "Platform:" in md and "Python:" in md


def test_compare_interleaves_and_keeps_every_repeat():
    calls = []
    contenders = {name: (lambda n=name: calls.append(n)) for name in "abc"}
    timings = _timing.compare(contenders, target=0.0, repeats=3, max_loops=1)
    assert [len(t.per_call) for t in timings.values()] == [3, 3, 3]
    # after two calibration calls each (warm-up, then one loop): rotating round-robin
    assert calls[6:] == list("abc" "bca" "cab")


def test_cli_has_a_bench_codec_subcommand():
    from tools.cli import build_parser

    args = build_parser().parse_args(["bench", "codec", "--quick", "--markdown"])
    assert args.suite == "codec" and args.args == ["--quick", "--markdown"]


# -- KSP round trips -----------------------------------------------------------------------------

def test_each_ksp_message_decodes_to_what_was_encoded(cases):
    for case in cases.values():
        if case.answers is None:
            decoded = decode_kp_message(case.wire, UDP)
        else:
            decoded = decode_sib_message(case.wire, UDP, case.answers)
        assert codec.as_built(decoded) == case.message
        assert case.contenders["ksp_decode"]() == decoded
        assert case.contenders["ksp_encode"]() == case.wire
    assert cases["insert"].message.confirmable and cases["select"].message.confirmable
    assert cases["insert"].message.tx is Tx.INSERT_DATA
    assert cases["select"].message.tx is Tx.SELECT_PERSISTENT


# -- (1) INSERT DATA -----------------------------------------------------------------------------

def test_sparql_update_inserts_the_same_triples_as_ksp(cases):
    case = cases["insert"]
    expected = {Triple(*(to_ox(t) for t in triple)) for triple in case.message.insert}
    assert len(expected) == 2

    store = ox.Store()
    store.update(case.text.decode("utf-8"))
    assert {Triple(q.subject, q.predicate, q.object) for q in store} == expected
    assert all(q.graph_name == ox.DefaultGraph() for q in store)

    g = rdflib.Graph()
    g.update(case.text.decode("utf-8"))
    assert set(g) == {tuple(to_rdflib(t) for t in triple) for triple in case.message.insert}

    assert json.loads(case.sepa) == {"update": {"sparql": case.text.decode("utf-8")}}


# -- (2) persistent SELECT + FILTER --------------------------------------------------------------

def test_sparql_query_is_the_ksp_select(cases):
    case = cases["select"]
    msg = case.message
    text = case.text.decode("utf-8")
    algebra = prepareQuery(text).algebra  # parses, and gives the pattern to compare
    project = algebra.p
    assert project.name == "Project" and [str(v) for v in project.PV] == ["s", "t"]
    assert msg.projection == 2  # ?s, ?t are KSP variables 0 and 1, both projected
    filt = project.p
    assert filt.name == "Filter"
    assert {tuple(t) for t in filt.p.triples} == {tuple(to_rdflib(x) for x in t) for t in msg.where}
    expr = filt.expr
    (var, lit, op), = msg.options.filters
    assert (var, op) == (Var(1), Op.GT) and expr.op == op.symbol
    assert (expr.expr, expr.other) == (to_rdflib(var), to_rdflib(lit))
    assert json.loads(case.sepa) == {"subscribe": {"sparql": text, "alias": "hot-sensors"}}


def test_sparql_query_selects_what_the_ksp_select_means(cases):
    """On data with near misses, the query returns exactly the rows the KSP pattern describes."""
    text = cases["select"].text.decode("utf-8")
    rdf_type = ox.NamedNode("http://www.w3.org/1999/02/22-rdf-syntax-ns#type")
    store = ox.Store()

    def sensor(name, cls, room, value):
        s = ox.NamedNode(GH + name)
        store.add(ox.Quad(s, rdf_type, ox.NamedNode(GH + cls)))
        store.add(ox.Quad(s, ox.NamedNode(GH + "inRoom"), ox.NamedNode(GH + room)))
        store.add(ox.Quad(s, ox.NamedNode(GH + "value"),
                          ox.Literal(value, datatype=ox.NamedNode(XSD + "float"))))

    sensor("hot", "TemperatureSensor", "room1", "26.5")  # canonical: the store keeps it
    sensor("cold", "TemperatureSensor", "room1", "25.5")
    sensor("elsewhere", "TemperatureSensor", "room2", "30.0")
    sensor("humid", "HumiditySensor", "room1", "80.0")
    rows = [(sol["s"].value, sol["t"].value) for sol in store.query(text)]
    assert rows == [(GH + "hot", "26.5")]
    assert list(ox.Store().query(text)) == []  # what the benchmark times: an empty store


# -- (3) 20-row SELECT result --------------------------------------------------------------------

def test_results_json_is_the_ksp_result(cases):
    case = cases["result"]
    result = case.message.result
    expected = [tuple(ksp_key(t) for t in row) for row in result.rows]
    assert len(expected) == 20 and result.variables == 2
    assert expected[1] == (("iri", GH + "sensor1", None), ("literal", "20.25", XSD + "float"))

    ox_rows = [tuple(ox_key(t) for t in sol)
               for sol in ox.parse_query_results(case.text, format=ox.QueryResultsFormat.JSON)]
    assert ox_rows == expected

    res = Result.parse(io.BytesIO(case.text), format="json")
    assert [str(v) for v in res.vars] == ["s", "t"]
    assert [tuple(row) for row in res] == [tuple(to_rdflib(t) for t in row) for row in result.rows]

    assert case.contenders["pyoxigraph"]() and case.contenders["rdflib"]()

    note = json.loads(case.sepa)["notification"]
    assert note["sequence"] == 1 and note["spuid"]
    assert note["addedResults"] == json.loads(case.text)
    assert note["removedResults"] == {"head": {"vars": ["s", "t"]}, "results": {"bindings": []}}
    bindings = note["addedResults"]["results"]["bindings"]
    assert [((b["s"]["value"]), (b["t"]["value"], b["t"]["datatype"])) for b in bindings] == [
        (str(s), (t.lexical, t.datatype)) for s, t in result.rows]
