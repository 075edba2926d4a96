"""Prepared statements (`KP.prepare`) and each KP's compile cache (`transports.statements`):
the same answers as the text gives, compile errors at preparing, the cache within its bound,
and a compile reused only with the same prefix names, form and `every_graph` — never another
KP's credentials."""
from __future__ import annotations

import pytest
from rdflib import Literal, URIRef, Variable

from ksp import IRI, Tx
from ksp.errors import SparqlSyntaxError, UnsupportedSparql
from ksp.kpid import kp_id_bytes
from transports import CompileCache, KspUsageError, Statement, connect

from transport_helpers import client_of, run, serving

EX = "http://example.org/"
S1, S2, TEMP = URIRef(EX + "s1"), URIRef(EX + "s2"), URIRef(EX + "temperature")


def test_a_prepared_statement_answers_as_its_text(tmp_path):
    async def scenario():
        async with client_of("udp", tmp_path) as (svc, server, kp):
            insert = kp.prepare(f"INSERT DATA {{ <{S1}> <{TEMP}> 21 . <{S2}> <{TEMP}> 19 }}")
            assert isinstance(insert, Statement) and insert.tx is Tx.INSERT_DATA
            await kp.update(insert)
            select = kp.prepare(f"SELECT ?room ?t WHERE {{ ?room <{TEMP}> ?t }}")
            for _ in range(3):  # as often as wanted
                rows = await kp.query(select)
                assert rows.variables == (Variable("room"), Variable("t"))
                assert set(rows.rows) == {(S1, Literal(21)), (S2, Literal(19))}
                assert {r.room for r in rows.rows} == {S1, S2}
            assert rows == await kp.query(select.text)
            assert (await kp.query_all(select)).rows == (await kp.query_all(select.text)).rows
            assert await kp.query(kp.prepare(f"ASK {{ <{S1}> <{TEMP}> 21 }}")) is True
            response = await kp.request(select)
            assert response.result.variables == 2
            async with kp.subscribe(kp.prepare(select.text, persistent=True)) as sub:
                assert len((await anext(sub)).result.rows) == 2
                await kp.update(kp.prepare(f"INSERT DATA {{ <{EX}s3> <{TEMP}> 5 }}"))
                assert len((await anext(sub)).result.rows) == 3
            # the statement went as the text goes: the same request, a TID of its own each time
            sent = [r for _, r in svc.requests if r.tx is Tx.SELECT]
            assert len({r.tid for r in sent}) == len(sent)
            want = select.request
            assert {(r.projection, r.where, r.options.query_graphs) for r in sent} == {
                (want.projection, want.where, want.options.query_graphs)}

    run(scenario())


def test_errors_come_at_preparing_and_a_statement_is_used_as_what_it_is(tmp_path):
    async def scenario():
        async with client_of("udp", tmp_path) as (svc, server, kp):
            with pytest.raises(UnsupportedSparql, match="UNION"):
                kp.prepare("SELECT ?s WHERE { { ?s ?p ?o } UNION { ?o ?p ?s } }")
            with pytest.raises(SparqlSyntaxError):
                kp.prepare("SELEKT ?s WHERE { ?s ?p ?o }")
            with pytest.raises(TypeError):
                kp.prepare(b"SELECT * WHERE { ?s ?p ?o }")
            select = kp.prepare("SELECT ?s WHERE { ?s ?p ?o }")
            update = kp.prepare(f"INSERT DATA {{ <{S1}> <{TEMP}> 1 }}")
            with pytest.raises(KspUsageError, match="not an update"):
                await kp.update(select)
            with pytest.raises(KspUsageError, match="not a query"):
                await kp.query(update)
            with pytest.raises(KspUsageError, match="not a persistent"):
                kp.subscribe(select)
            with pytest.raises(KspUsageError, match="no bindings"):
                await kp.query(select, bindings={"s": S1})
            with pytest.raises(KspUsageError, match="bindings need a JSAP"):
                kp.prepare("SELECT ?s WHERE { ?s ?p ?o }", bindings={"s": S1})
            assert isinstance(KspUsageError("x"), ValueError)  # what these raised before
            assert not svc.requests  # nothing was sent

    run(scenario())


def test_the_cache_stays_within_its_bounds():
    cache = CompileCache(max_entries=8, max_text=200)
    texts = [f"SELECT ?v WHERE {{ <{EX}s{k}> <{TEMP}> ?v }}" for k in range(50)]
    for _ in range(2):
        for text in texts:
            assert cache.compile(text).request.where[0][0] == IRI(text.split("<")[1][:-2])
            assert len(cache) <= 8
    assert len(cache) == 8 and cache.hits == 0 and cache.misses == 100  # LRU, a cycle of 50
    for _ in range(3):
        cache.compile(texts[-1])
    assert cache.hits == 3 and len(cache) == 8
    long = f"SELECT ?v WHERE {{ <{EX}{'x' * 200}> <{TEMP}> ?v }}"
    cache.compile(long)
    cache.compile(long)
    assert cache.misses == 102 and len(cache) == 8  # longer than max_text: compiled each time
    off = CompileCache(max_entries=0)
    off.compile(texts[0])
    off.compile(texts[0])
    assert len(off) == 0 and off.misses == 2
    with pytest.raises(SparqlSyntaxError):
        cache.compile("SELEKT")
    assert len(cache) == 8
    cache.clear()
    assert len(cache) == 0
    with pytest.raises(ValueError):
        CompileCache(max_entries=-1)


def test_a_compile_is_reused_only_with_the_same_prefixes_form_and_graphs():
    cache = CompileCache()
    text = "SELECT ?v WHERE { ex:s ex:p ?v }"
    a = cache.compile(text, prefixes={"ex": "http://a.example/"})
    b = cache.compile(text, prefixes={"ex": "http://b.example/"})
    assert a.request.where[0][0] == IRI("http://a.example/s")
    assert b.request.where[0][0] == IRI("http://b.example/s")
    prefixes = {"ex": "http://a.example/"}
    assert cache.compile(text, prefixes=prefixes) == a
    prefixes["ex"] = "http://c.example/"  # changed in place: compiled again
    assert cache.compile(text, prefixes=prefixes).request.where[0][0] == IRI("http://c.example/s")
    with pytest.raises(SparqlSyntaxError):
        cache.compile(text)  # no prefixes now: ex: is unknown, whatever was compiled before
    plain = "SELECT ?v WHERE { <urn:s> <urn:p> ?v }"
    default_graph = cache.compile(plain)
    every_graph = cache.compile(plain, every_graph=True)
    persistent = cache.compile(plain, persistent=True)
    assert default_graph.request.options.query_graphs == (IRI(""),)
    assert every_graph.request.options.query_graphs is None
    assert persistent.tx is Tx.SELECT_PERSISTENT and default_graph.tx is Tx.SELECT
    assert cache.compile(plain) is default_graph  # and each kept beside the others
    assert cache.compile(plain, every_graph=True) is every_graph
    assert cache.compile(plain, persistent=True) is persistent


def test_a_kp_compiles_again_when_its_prefixes_or_graph_reading_change(tmp_path):
    async def scenario():
        async with client_of("udp", tmp_path) as (svc, server, kp):
            await kp.insert_data([(S1, TEMP, Literal(1))])
            text = "SELECT ?t WHERE { ex:s1 ex:temperature ?t }"
            kp.prefixes = {"ex": EX}
            assert (await kp.query(text)).rows == ((Literal(1),),)
            kp.prefixes["ex"] = "http://elsewhere.example/"
            assert (await kp.query(text)).rows == ()
            kp.prefixes = {"ex": EX}
            kp.every_graph = True
            assert (await kp.query(text)).rows == ((Literal(1),),)
            graphs = [r.options.query_graphs for _, r in svc.requests if r.tx is Tx.SELECT]
            assert graphs == [(IRI(""),), (IRI(""),), None]
            assert (len(kp.compiled), kp.compiled.hits, kp.compiled.misses) == (2, 0, 3)
            assert (await kp.query(text)).rows == ((Literal(1),),)
            assert (len(kp.compiled), kp.compiled.hits, kp.compiled.misses) == (2, 1, 3)

    run(scenario())


def test_a_statement_carries_the_credentials_of_the_kp_that_sends_it(tmp_path):
    async def scenario():
        async with serving("udp", tmp_path) as (svc, server, url, args):
            async with connect(url, kp_id="kp-a", password="pw", **args) as a, \
                    connect(url, kp_id="kp-b", password="pw", **args) as b, \
                    connect(url, **args) as anonymous:
                text = f"SELECT ?t WHERE {{ <{S1}> <{TEMP}> ?t }}"
                statement = a.prepare(text)
                for kp in (a, b, anonymous, a, b, anonymous):
                    await kp.query(text)
                    await kp.query(statement)
                sent = [r.options.credentials for _, r in svc.requests]
                ids = [None if c is None else c.kp_id for c in sent]
                a_id, b_id = kp_id_bytes("kp-a"), kp_id_bytes("kp-b")
                assert ids == [a_id, a_id, b_id, b_id, None, None] * 2
                assert statement.request.options.credentials is None

    run(scenario())


def test_converted_terms_are_kept_within_their_bound():
    from ksp import Literal as KspLiteral
    from ksp.model import SelectResult
    from transports.client import convert_result
    from transports.rdfterms import CACHED, CACHED_CHARS, from_ksp

    iris = [IRI(f"{EX}bounded/{k}") for k in range(CACHED + 10)]
    first = from_ksp(iris[0])
    assert from_ksp(iris[0]) is first  # kept
    for iri in iris[1:]:
        from_ksp(iri)
    assert from_ksp(iris[-1]) is from_ksp(iris[-1])
    again = from_ksp(iris[0])
    assert again == first and again is not first  # the oldest went first
    long = KspLiteral("x" * (CACHED_CHARS + 1))
    assert from_ksp(long) is not from_ksp(long) and from_ksp(long) == Literal("x" * (CACHED_CHARS + 1))
    rows = convert_result(SelectResult(1, ((KspLiteral("1.50", "http://www.w3.org/2001/XMLSchema#decimal"),),)), ("v",))
    assert str(rows.rows[0].v) == "1.50"  # the lexical form as the SIB holds it
