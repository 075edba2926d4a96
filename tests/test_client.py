"""The Python KP client against a real server over loopback, on every transport."""
from __future__ import annotations

import socket

import pytest
import rdflib
from rdflib import XSD, Literal, URIRef, Variable

from ksp import IRI, Literal as KspLiteral, Request, Status, Timing, Triple, Tx, Var
from transports import KspStatusError, KspTimeout, connect
from ksp.kpid import kp_id_bytes

from transport_helpers import TRANSPORTS, client_of, run

EX = "http://example.org/"
S1, S2 = URIRef(EX + "s1"), URIRef(EX + "s2")
TEMP = URIRef(EX + "temperature")

SELECT_ALL = Request(Tx.SELECT, 0, projection=3, where=(Triple(Var(0), Var(1), Var(2)),))
SELECT_TEMP = Request(Tx.SELECT, 0, projection=2,
                      where=((Variable("v0"), TEMP, Variable("v1")),))


@pytest.fixture(params=TRANSPORTS)
def transport(request):
    return request.param


def test_query_update_and_graph_management(transport, tmp_path):
    async def scenario():
        async with client_of(transport, tmp_path) as (svc, server, kp):
            await kp.insert_data([(S1, TEMP, Literal(21)), (S2, TEMP, Literal("warm", lang="en"))])
            rows = await kp.query(SELECT_TEMP)
            assert rows.variables == (Variable("v0"), Variable("v1"))
            assert set(rows.rows) == {(S1, Literal(21)), (S2, Literal("warm", lang="en"))}
            assert all(isinstance(t, rdflib.term.Identifier) for row in rows.rows for t in row)
            assert Literal(21) == rows.rows[0][1] or Literal(21) == rows.rows[1][1]
            ask = Request(Tx.ASK, 0, where=((S1, TEMP, Literal(21)),))
            assert await kp.query(ask) is True
            assert await kp.query(ask._replace(where=((S1, TEMP, Literal(22)),))) is False
            construct = Request(Tx.CONSTRUCT, 0, template=((Variable("v0"), URIRef(EX + "hot"),
                                                            Variable("v1")),),
                                where=((Variable("v0"), TEMP, Variable("v1")),))
            triples = await kp.query(construct)
            assert (S1, URIRef(EX + "hot"), Literal(21)) in triples
            await kp.delete_data([(S2, TEMP, Literal("warm", lang="en"))])
            await kp.update(Request(Tx.INSERT_DATA, 0, insert=(
                (S2, TEMP, Literal("1.5", datatype=XSD.decimal)),)))
            rows = await kp.query(SELECT_TEMP)
            assert set(rows.rows) == {(S1, Literal(21)),
                                      (S2, Literal("1.5", datatype=XSD.decimal))}
            await kp.create(URIRef(EX + "g"))
            with pytest.raises(KspStatusError) as err:
                await kp.create(URIRef(EX + "g"))
            assert err.value.status is Status.GRAPH_EXISTS
            await kp.drop(URIRef(EX + "g"))
            with pytest.raises(KspStatusError) as err:
                await kp.drop(URIRef(EX + "g"))
            assert err.value.status is Status.NO_SUCH_GRAPH
            with pytest.raises(KspStatusError) as err:
                await kp.terminate(1234)
            assert err.value.status is Status.UNKNOWN_TRANSACTION
            # each request executed once, with the KP's identity from CREDENTIALS
            assert all(count == 1 for count in svc.executions.values())
            assert {r.options.credentials.kp_id for _, r in svc.requests} == {
                kp_id_bytes("kp-1")}
            assert {t for t, _ in svc.requests} == {"tcp" if transport == "tls" else transport}

    run(scenario())


def test_subscribe_delivers_states_and_leaving_terminates(transport, tmp_path):
    async def scenario():
        async with client_of(transport, tmp_path) as (svc, server, kp):
            await kp.insert_data([(S1, TEMP, Literal(1))])
            async with kp.subscribe(SELECT_TEMP._replace(tx=Tx.SELECT_PERSISTENT)) as sub:
                first = await anext(sub)
                assert first.seq is None and first.result.rows == ((S1, Literal(1)),)
                for value in (2, 3):
                    await kp.insert_data([(S1, TEMP, Literal(value))])
                    ind = await anext(sub)
                    assert (S1, Literal(value)) in ind.result.rows
                    assert len(ind.result.rows) == value
                tid = sub.tid
                assert list(svc.subs) and list(svc.subs)[0][1] == tid
            assert not svc.subs  # the TERMINATE reached the service
            assert [r.tid for _, r in svc.requests if r.tx is Tx.TERMINATE] == [tid]
            # a later change reaches nobody; the client keeps working
            await kp.insert_data([(S1, TEMP, Literal(4))])
            assert len((await kp.query(SELECT_TEMP)).rows) == 4

    run(scenario())


def test_sib_ends_a_subscription_and_terminate_and_reset(transport, tmp_path):
    async def scenario():
        async with client_of(transport, tmp_path) as (svc, server, kp):
            ask = Request(Tx.ASK_PERSISTENT, 0, where=((S1, TEMP, Variable("v0")),))
            async with kp.subscribe(ask) as sub:
                assert (await anext(sub)).result is False
                await kp.insert_data([(S1, TEMP, Literal(5))])
                assert (await anext(sub)).result is True
                svc.end_all(Status.TERMINATED)
                assert [ind async for ind in sub] == []
                assert sub.status == Status.TERMINATED
            # explicit terminate
            async with kp.subscribe(ask) as sub:
                await anext(sub)
                await kp.terminate(sub.tid)
                assert [ind async for ind in sub] == []
                assert not svc.subs
            # RESET ends every persistent operation of this KP
            async with kp.subscribe(ask) as a, kp.subscribe(ask) as b:
                assert len(svc.subs) == 2
                assert (await anext(a)).seq is None and (await anext(b)).seq is None
                await kp.reset()
                assert not svc.subs
                assert [x async for x in a] == [] and [x async for x in b] == []
            # an error status other than TERMINATED raises from the iterator
            async with kp.subscribe(ask) as sub:
                await anext(sub)
                svc.end_all(Status.ACCESS_DENIED)
                with pytest.raises(KspStatusError) as err:
                    await anext(sub)
                assert err.value.status is Status.ACCESS_DENIED

    run(scenario())


@pytest.mark.parametrize("transport", ["udp", "coap"])
def test_no_answer_is_a_timeout(transport):
    async def scenario():
        silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # bound, never answers
        silent.bind(("127.0.0.1", 0))
        try:
            port = silent.getsockname()[1]
            timing = Timing(ack_timeout=0.05, max_retransmit=2)
            async with await connect(f"{transport}://127.0.0.1:{port}", timing=timing) as kp:
                with pytest.raises(KspTimeout):
                    await kp.query(SELECT_ALL)
            return silent.recv(65535)
        finally:
            silent.close()

    assert run(scenario(), timeout=60)  # the request did go out


def test_non_update_returns_at_once_and_is_executed(tmp_path):
    async def scenario():
        async with client_of("udp", tmp_path) as (svc, server, kp):
            assert await kp.update(Request(Tx.INSERT_DATA, 0, insert=((S1, TEMP, Literal(7)),)),
                                   confirmable=False) is None
            while not svc.store:
                svc.changed.clear()
                await svc.changed.wait()
            assert Triple(IRI(S1), IRI(TEMP), KspLiteral("7", str(XSD.integer))) in svc.store

    run(scenario())


def test_bad_arguments_are_typed_errors():
    async def scenario():
        with pytest.raises(ValueError):
            await connect("ftp://127.0.0.1:1")
        with pytest.raises(ValueError):
            await connect("udp://127.0.0.1")  # no port
        with pytest.raises(ValueError):
            await connect("udp://127.0.0.1:1", password="x")  # password without KP ID

    run(scenario())


def test_rdflib_term_conversion_round_trips():
    from transports.rdfterms import from_ksp, to_ksp
    for term in (URIRef(EX + "x"), Literal("a"), Literal("b", lang="fi"), Literal(3),
                 Literal("2024-01-01T00:00:00", datatype=XSD.dateTime), rdflib.BNode("n1"),
                 Variable("v4")):
        assert from_ksp(to_ksp(term)) == term
    with pytest.raises(ValueError):
        to_ksp(Variable("name"))


def test_persistent_update_is_an_iterator_of_indications(transport, tmp_path):
    async def scenario():
        async with client_of(transport, tmp_path) as (svc, server, kp):
            rule = Request(Tx.INSERT_PERSISTENT, 0,
                           insert=((Variable("v0"), URIRef(EX + "seen"), Literal(True)),),
                           where=((Variable("v0"), TEMP, Variable("v1")),))
            async with kp.subscribe(rule) as sub:
                assert (await anext(sub)).result is None  # the RES: it started
                await kp.insert_data([(S1, TEMP, Literal(1))])
                ind = await anext(sub)
                assert ind.result is None and ind.tid == sub.tid
            assert not svc.subs

    run(scenario())


def test_sparql_text(transport, tmp_path):
    from ksp.errors import UnsupportedSparql

    async def scenario():
        async with client_of(transport, tmp_path) as (svc, server, kp):
            await kp.update(f"INSERT DATA {{ <{S1}> <{TEMP}> 21 . <{S2}> <{TEMP}> 19 }}")
            rows = await kp.query(f"SELECT ?room ?t WHERE {{ ?room <{TEMP}> ?t }}")
            assert rows.variables == (Variable("room"), Variable("t"))
            assert set(rows.rows) == {(S1, Literal(21)), (S2, Literal(19))}
            assert await kp.query(f"ASK {{ <{S1}> <{TEMP}> 21 }}") is True
            kp.prefixes = {"ex": EX}
            async with kp.subscribe("SELECT ?room WHERE { ?room ex:temperature ?t }") as sub:
                assert {r[0] for r in (await anext(sub)).result.rows} == {S1, S2}
                await kp.update("INSERT DATA { ex:s3 ex:temperature 5 }")
                ind = await anext(sub)
                assert ind.result.variables == (Variable("room"),) and len(ind.result.rows) == 3
            await kp.update("CREATE GRAPH ex:g")
            with pytest.raises(KspStatusError) as err:
                await kp.update("CREATE GRAPH ex:g")
            assert err.value.status is Status.GRAPH_EXISTS
            with pytest.raises(UnsupportedSparql) as err:
                await kp.query("SELECT ?s WHERE { { ?s ?p ?o } UNION { ?o ?p ?s } }")
            assert "UNION" in str(err.value)
            assert not [r for _, r in svc.requests if r.tx is Tx.SELECT and r.projection == 1]

    run(scenario())
