"""The Python KP client against a real server over loopback, on every transport."""
from __future__ import annotations

import asyncio
import socket

import pytest
import rdflib
from rdflib import XSD, Literal, URIRef, Variable

from ksp import IRI, Literal as KspLiteral, Request, Status, Timing, Triple, Tx, Var
from transports import KspStatusError, KspTimeout, connect
from ksp.kpid import kp_id_bytes

from transport_helpers import TRANSPORTS, client_of, run, until

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


@pytest.mark.parametrize("over", ["udp", "tcp"])
def test_a_subscription_read_slower_than_its_states_keeps_the_newest(over, tmp_path, caplog):
    """Each IND reaches the client (over CoAP an observation may skip states, so the counts
    below would not be fixed); the queue keeps the newest `max_queued`, counts the rest, and
    says so once."""
    async def scenario():
        async with client_of(over, tmp_path) as (svc, server, kp):
            with pytest.raises(ValueError):
                kp.subscribe(SELECT_TEMP._replace(tx=Tx.SELECT_PERSISTENT), max_queued=0)
            await kp.insert_data([(S1, TEMP, Literal(1))])
            query = SELECT_TEMP._replace(tx=Tx.SELECT_PERSISTENT)
            async with kp.subscribe(query, max_queued=3) as sub:
                for value in range(2, 9):  # 7 INDs after the initial state: 8 states, unread
                    await kp.insert_data([(S1, TEMP, Literal(value))])
                await until(lambda: sub.dropped == 5, what="5 states dropped")
                states = [await anext(sub) for _ in range(3)]
                assert [len(s.result.rows) for s in states] == [6, 7, 8]
                await kp.insert_data([(S1, TEMP, Literal(9))])  # nothing older was left
                assert len((await anext(sub)).result.rows) == 9
                assert sub.dropped == 5
        dropped = [r for r in caplog.records if "oldest of 3 waiting" in r.getMessage()]
        assert len(dropped) == 1 and dropped[0].levelname == "WARNING"

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
            await until(lambda: svc.store, what="the unconfirmed update executed")
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


# -- the friendlier API ----------------------------------------------------------------------


def test_rows_by_name_and_position_and_async_with_connect(tmp_path):
    from transport_helpers import serving

    async def scenario():
        async with serving("udp", tmp_path) as (svc, server, url, args):
            async with connect(url, **args) as kp:  # no `await` needed
                await kp.insert_data([(S1, TEMP, Literal(21))])
                rows = await kp.query(f"SELECT ?s ?t WHERE {{ ?s <{TEMP}> ?t }}")
                (row,) = rows.rows
                assert row == (S1, Literal(21))  # still a plain tuple to compare
                assert row[0] is row["s"] is row["?s"] is row.s
                assert row.t == Literal(21) and row.asdict() == {"s": S1, "t": Literal(21)}
                with pytest.raises(KeyError, match="the variables: s, t"):
                    row["x"]
                with pytest.raises(AttributeError):
                    row.x
                # no TID needed where the client assigns it...
                assert await kp.query(Request(Tx.ASK, where=((S1, TEMP, Literal(21)),))) is True
                # ...and any value given is replaced
                res = await kp.request(SELECT_TEMP._replace(tid=12345))
                assert res.tid != 12345 and res.status == Status.OK
            assert kp.link.lost_with is not None  # closed on leaving the block

    run(scenario())


def test_connection_failures_are_client_errors_naming_the_address():
    from sib.testing import free_port
    from transports import ClientError, KspConnectionError

    async def scenario():
        port = free_port("tcp")
        with pytest.raises(KspConnectionError, match=f"tcp://127.0.0.1:{port}"):
            await connect(f"tcp://127.0.0.1:{port}")
        # UDP: nothing listens; the OS's ICMP port unreachable ends the wait at once, and the
        # request is not retransmitted afterwards (no late execution of a "failed" update)
        port = free_port("udp")
        slow = Timing(ack_timeout=20, max_retransmit=4)  # 20 s before a first retransmission
        async with connect(f"udp://127.0.0.1:{port}", timing=slow) as kp:
            loop = asyncio.get_running_loop()
            started = loop.time()
            with pytest.raises(ClientError, match=f"udp://127.0.0.1:{port}.*unreachable"):
                await kp.query(SELECT_TEMP)
            assert loop.time() - started < 20  # not the retransmission schedule's time-out
            assert not kp.link.session.pending
            # the link is still usable (a SIB may come up there later)
            with pytest.raises(ClientError):
                await kp.query(SELECT_TEMP)

    run(scenario())


@pytest.mark.parametrize("keep", [False, True])
def test_close_terminates_persistent_operations_unless_kept(tmp_path, keep):
    from transport_helpers import serving

    async def scenario():
        async with serving("udp", tmp_path) as (svc, server, url, args):
            kp = await connect(url, kp_id="sleepy", keep_persistent=keep, **args)
            sub = kp.subscribe(SELECT_TEMP._replace(tx=Tx.SELECT_PERSISTENT))
            await sub.__aenter__()
            rule = await kp.request(Request(
                Tx.INSERT_PERSISTENT, 0, insert=((S2, TEMP, Var(1)),),
                where=((S1, TEMP, Var(1)),)))
            assert len(svc.subs) == 2
            await kp.close()
            terminated = [r.tid for t, r in svc.requests if r.tx is Tx.TERMINATE]
            if keep:
                assert terminated == [] and len(svc.subs) == 2
            else:
                assert sorted(terminated) == sorted([sub.tid, rule.tid]) and not svc.subs

    run(scenario())


def test_literals_come_back_with_their_exact_lexical_form():
    """Through a real SIB: rdflib must not normalise what the SIB holds ("1"^^xsd:double is not
    "1.0", a date keeps its time zone)."""
    from sib import Sib
    from transports import Server

    async def scenario():
        sib = Sib()
        async with await Server.start(sib, udp=0) as server:
            async with connect(f"udp://127.0.0.1:{server.udp.port}") as kp:
                await kp.update(f'PREFIX xsd: <{XSD}> INSERT DATA {{ <{S1}> <{TEMP}> '
                                '"2006-08-23Z"^^xsd:date, "1"^^xsd:double }')
                rows = await kp.query(f"SELECT ?o WHERE {{ <{S1}> <{TEMP}> ?o }}")
        await sib.close()
        return {(str(r.o), str(r.o.datatype)) for r in rows.rows}

    assert run(scenario()) == {("2006-08-23Z", str(XSD.date)), ("1", str(XSD.double))}


def test_jsap_named_queries_and_updates_with_forced_bindings(tmp_path):
    """As SEPA's APIs: a JSAP's namespaces serve as prefixes, its queries and updates are used
    by name with their forced bindings filled in; a missing or unknown binding is an error."""
    import json

    from sib import Sib
    from transports import Server
    from transports.jsap import JsapError

    jsap = tmp_path / "greenhouse.jsap"
    jsap.write_text(json.dumps({
        "namespaces": {"gh": "http://example.org/gh#"},
        "updates": {"SET": {"sparql": "DELETE { ?s gh:t ?old } INSERT { ?s gh:t ?value } "
                                      "WHERE { OPTIONAL { ?s gh:t ?old } }",
                            "forcedBindings": {
                                "s": {"type": "uri"},
                                "value": {"type": "literal",
                                          "datatype": "http://example.org/gh#celsius"}}}},
        "queries": {"T": {"sparql": "SELECT ?t WHERE { ?s gh:t ?t }",
                          "forcedBindings": {"s": {"type": "uri",
                                                   "value": "http://example.org/gh#s1"}}}}}))

    async def scenario():
        sib = Sib()
        try:
            await talk(sib)
        finally:
            await sib.close()

    async def talk(sib):
        async with await Server.start(sib, udp=0) as server:
            async with connect(f"udp://127.0.0.1:{server.udp.port}", jsap=str(jsap)) as kp:
                gh = "http://example.org/gh#"
                await kp.update("SET", bindings={"s": gh + "s1", "value": "21.50"})
                await kp.update("SET", bindings={"s": gh + "s1", "value": "22.0"})
                await kp.update("SET", bindings={"s": gh + "s2", "value": "9"})
                (row,) = (await kp.query("T")).rows  # the file's default binding: s1
                assert str(row.t) == "22.0"
                (row,) = (await kp.query("T", bindings={"s": gh + "s2"})).rows
                assert str(row.t) == "9"
                assert (str(row.t.datatype), len((await kp.query(
                    'SELECT ?s WHERE { ?s gh:t "9"^^gh:celsius }')).rows)) == (gh + "celsius", 1)
                with pytest.raises(JsapError, match="'value' needs a value"):
                    await kp.update("SET", bindings={"s": gh + "s1"})
                with pytest.raises(JsapError, match=r"no forced binding \['x'\]"):
                    await kp.query("T", bindings={"x": 1})
                with pytest.raises(ValueError, match="bindings need a JSAP"):
                    await kp.query("SELECT ?s WHERE { ?s ?p ?o }", bindings={"s": 1})

    run(scenario())


@pytest.mark.parametrize("cut", ["max-response-size", "datagram"])
def test_a_cut_result_is_flagged_and_query_all_gets_it_whole(cut):
    """Through a real SIB over UDP: a SELECT cut to MAX RESPONSE SIZE (or to one datagram) says
    so (`truncated`), and `query_all` pages the rest with OFFSET; the query's own OFFSET and
    LIMIT are kept. CONSTRUCT results say so too."""
    from ksp import Options, SolutionModifier
    from sib import Sib
    from transports import Server

    n = 300 if cut == "max-response-size" else 2000
    filler = "x" * (0 if cut == "max-response-size" else 60)

    async def scenario():
        sib = Sib()
        try:
            async with await Server.start(sib, udp=0) as server:
                async with connect(f"udp://127.0.0.1:{server.udp.port}") as kp:
                    for start in range(0, n, 250):  # a Graph field carries 255 triples at most
                        await kp.insert_data([(S1, TEMP, Literal(f"{filler}{i:05}"))
                                              for i in range(start, min(n, start + 250))])
                    options = Options(max_response_size=300) if filler == "" else Options()
                    select = Request(Tx.SELECT, projection=1, where=((S1, TEMP, Variable("v0")),),
                                     options=options)
                    first = await kp.query(select)
                    assert first.truncated and first.total == n and 0 < len(first.rows) < n
                    whole = await kp.query_all(select)
                    assert not whole.truncated
                    assert sorted(str(r[0]) for r in whole.rows) == [
                        f"{filler}{i:05}" for i in range(n)]
                    part = await kp.query_all(select._replace(options=options._replace(
                        modifier=SolutionModifier(offset=5, limit=n - 10))))
                    assert len(part.rows) == n - 10
                    triples = await kp.query(Request(
                        Tx.CONSTRUCT, template=((S1, TEMP, Variable("v0")),),
                        where=((S1, TEMP, Variable("v0")),), options=options))
                    assert triples.truncated and triples.total == n
        finally:
            await sib.close()

    run(scenario(), timeout=300)
