"""Limits and hygiene: the cap on persistent operations per KP, the cap on queued requests in
all and per KP (status 0x0a LIMIT_EXCEEDED, nothing applied), and a KP that stops ACKing INDs over a real UDP
socket is dropped with its operations freed."""
from __future__ import annotations

import asyncio
import socket

import pytest

from ksp import Literal, Options, Request, Status, Timing, Triple, Tx, Var
from ksp.codec import TCP, UDP, decode_sib_message, encode
from ksp.session import SessionOptions
from sib import Sib
from sib.testing import Client, ex
from transports import Server, connect

S, P = ex("s"), ex("p")


async def validate(sock: socket.socket, port: int) -> None:
    """Validate the raw socket's address as a board does before it subscribes (wire format
    14): a persistent request draws ECHO REQUIRED, whose echo value an ASK carries back."""
    loop = asyncio.get_running_loop()
    # TIDs 1 and 2: under the numbers a test's requests use after it (wire format 15)
    probe = Request(Tx.ASK_PERSISTENT, 1, where=(Triple(S, P, Var(0)),))
    await loop.sock_sendto(sock, encode(probe, UDP), ("127.0.0.1", port))
    echo = decode_sib_message(await asyncio.wait_for(loop.sock_recv(sock, 65536), 30), UDP,
                              Tx.ASK_PERSISTENT)
    assert echo.status == Status.ECHO_REQUIRED
    ask = Request(Tx.ASK, 2, where=(Triple(S, P, Var(0)),), options=Options(echo=echo.result))
    await loop.sock_sendto(sock, encode(ask, UDP), ("127.0.0.1", port))
    answer = await asyncio.wait_for(loop.sock_recv(sock, 65536), 30)
    assert decode_sib_message(answer, UDP, Tx.ASK).status == Status.OK


def sub(tid: int) -> Request:
    return Request(Tx.SELECT_PERSISTENT, tid, projection=1, where=(Triple(S, P, Var(0)),))


def test_cap_on_persistent_operations_per_kp():
    async def go():
        sib = Sib(max_persistent_per_kp=2)
        a, b = Client(sib, "a"), Client(sib, "b")
        assert (await a.call(sub(1))).status == Status.OK
        assert (await a.call(sub(2))).status == Status.OK
        assert (await a.call(sub(3))).status == Status.LIMIT_EXCEEDED
        assert (await a.call(sub(2))).status == Status.OK  # reusing a TID replaces, no new slot
        assert (await b.call(sub(3))).status == Status.OK  # the cap is per KP
        assert sib.core.persistent_count == 3
        assert (await a.call(Request(Tx.TERMINATE, 1))).status == Status.OK
        assert (await a.call(sub(3))).status == Status.OK
        rule = Request(Tx.INSERT_PERSISTENT, 4, insert=(Triple(S, ex("q"), Var(0)),),
                       where=(Triple(S, P, Var(0)),))
        assert (await a.call(rule)).status == Status.LIMIT_EXCEEDED
        assert sib.core.metrics.limited == 2
        await sib.close()

    asyncio.run(go())


def test_cap_on_persistent_operations_in_all():
    """`max_persistent` bounds every KP's operations together: past it a new one is refused
    whoever asks; reusing an active TID takes no new slot; an ended one frees its slot."""
    async def go():
        sib = Sib(max_persistent=3)
        a, b, c, d = (Client(sib, name) for name in "abcd")
        for kp in (a, b, c):
            assert (await kp.call(sub(1))).status == Status.OK
        assert (await d.call(sub(1))).status == Status.LIMIT_EXCEEDED
        rule = Request(Tx.INSERT_PERSISTENT, 2, insert=(Triple(S, ex("q"), Var(0)),),
                       where=(Triple(S, P, Var(0)),))
        assert (await d.call(rule)).status == Status.LIMIT_EXCEEDED
        assert not sib.core.registry.rules and len(sib.core.registry.groups) == 1
        assert (await a.call(sub(1))).status == Status.OK  # replaces its own: no new slot
        assert sib.core.persistent_count == 3 and sib.core.metrics.limited == 2
        assert (await b.call(Request(Tx.TERMINATE, 1))).status == Status.OK
        assert (await d.call(rule)).status == Status.OK
        assert (await c.call(sub(2))).status == Status.LIMIT_EXCEEDED
        assert sib.core.persistent_count == 3 and len(sib.core.registry.rules) == 1
        await sib.close()

    asyncio.run(go())


def test_kps_known_only_by_their_address_hold_no_more_than_the_cap_over_real_udp():
    """Without a KP ID a KP is its address, so one host sending from many ports is many KPs,
    each within `max_persistent_per_kp`: only the cap in all bounds what they hold."""
    async def go():
        sib = Sib(max_persistent=5)
        async with await Server.start(sib, udp=0) as server:
            loop = asyncio.get_running_loop()
            socks = []
            try:
                statuses = []
                for k in range(12):
                    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                    socks.append(sock)
                    sock.bind(("127.0.0.1", 0))
                    sock.setblocking(False)
                    await validate(sock, server.udp.port)
                    request = Request(Tx.SELECT_PERSISTENT, 9, projection=1,
                                      where=(Triple(ex(f"s{k}"), P, Var(0)),))
                    await loop.sock_sendto(sock, encode(request, UDP),
                                           ("127.0.0.1", server.udp.port))
                    data = await asyncio.wait_for(loop.sock_recv(sock, 65536), 30)
                    statuses.append(decode_sib_message(data, UDP, Tx.SELECT).status)
                assert statuses == [Status.OK] * 5 + [Status.LIMIT_EXCEEDED] * 7
                assert sib.core.persistent_count == 5
                assert server.udp.session.sizes()["deliveries"] <= 5
            finally:
                for sock in socks:
                    sock.close()
        await sib.close()

    asyncio.run(asyncio.wait_for(go(), 120))


def test_cap_on_queued_requests_refuses_at_once_and_applies_nothing():
    async def go():
        sib = Sib(max_queued=3)
        kp = Client(sib)
        for tid in range(1, 6):  # no await in between: the scheduler has not run yet
            kp.submit(Request(Tx.INSERT_DATA, tid, insert=(Triple(S, P, Literal.of(tid)),)))
        refused = [r.tid for kind, _, _, r in kp.log if kind == "res"]
        assert refused == [4, 5]  # answered before anything ran
        await sib.drain()
        statuses = {r.tid: r.status for kind, _, _, r in kp.log if kind == "res"}
        assert statuses == {1: 0, 2: 0, 3: 0, 4: Status.LIMIT_EXCEEDED,
                            5: Status.LIMIT_EXCEEDED}
        assert {q[2] for q in sib.store.match()} == {Literal.of(1), Literal.of(2), Literal.of(3)}
        await sib.close()

    asyncio.run(go())


async def _res(reader: asyncio.StreamReader, tx: Tx):
    head = await asyncio.wait_for(reader.readexactly(8), 30)
    body = await reader.readexactly(int.from_bytes(head[4:], "little") - 8)
    return decode_sib_message(head + body, TCP, tx)


def test_a_kp_flooding_the_queue_holds_no_more_than_its_share_over_real_tcp():
    """`max_queued_per_kp`: an anonymous KP flooding from four connections of one host (one
    party: its address, whatever its ports) has at most its share queued, the rest refused
    0x0a at once and not applied; another KP's request, arriving in the same instant, finds
    room in the queue and is answered."""
    async def go():
        sib = Sib(max_queued=20, max_queued_per_kp=5)
        async with await Server.start(sib, tcp=0) as server:
            port = server.tcp.port
            flood = [await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.1", 0))
                     for _ in range(4)]
            other = await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.2", 0))
            try:
                tid = 0
                for _, writer in flood:  # 100 requests, read by the SIB in one loop pass
                    batch = []
                    for _ in range(25):
                        tid += 1
                        batch.append(encode(Request(Tx.INSERT_DATA, tid, insert=(
                            Triple(S, P, Literal.of(tid)),)), TCP))
                    writer.write(b"".join(batch))
                other[1].write(encode(Request(Tx.ASK, 1, where=(Triple(S, P, Var(0)),)), TCP))
                statuses = [(await _res(reader, Tx.INSERT_DATA)).status
                            for reader, _ in flood for _ in range(25)]
                assert (await _res(other[0], Tx.ASK)).status is Status.OK
            finally:
                for _, writer in (*flood, other):
                    writer.close()
        await sib.close()
        return statuses, len(list(sib.store.match()))

    statuses, stored = asyncio.run(asyncio.wait_for(go(), 120))
    refused = statuses.count(Status.LIMIT_EXCEEDED)
    assert refused >= 50 and statuses.count(Status.OK) == 100 - refused == stored


def test_kp_that_stops_acking_is_dropped_over_real_udp():
    """A raw UDP socket subscribes, then never ACKs: the IND is retransmitted max_retransmit
    times, then the SIB drops the KP and frees its operations."""
    timing = Timing(ack_timeout=0.05, ack_random_factor=1.0, max_retransmit=2)

    async def go():
        sib = Sib()
        async with await Server.start(sib, udp=0, timing=timing) as server:
            mute = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            mute.bind(("127.0.0.1", 0))
            mute.setblocking(False)
            loop = asyncio.get_running_loop()
            try:
                await validate(mute, server.udp.port)
                await loop.sock_sendto(mute, encode(sub(7), UDP), ("127.0.0.1", server.udp.port))
                res = decode_sib_message(await loop.sock_recv(mute, 65536), UDP, Tx.SELECT)
                assert res.status == Status.OK and not res.indication
                assert sib.core.persistent_count == 1
                async with await connect(f"udp://127.0.0.1:{server.udp.port}") as writer:
                    await writer.insert_data([(ex_rdf("s"), ex_rdf("p"), 1)])
                inds = []
                for _ in range(timing.max_retransmit + 1):  # the IND and its retransmissions
                    msg = await asyncio.wait_for(loop.sock_recv(mute, 65536), 30)
                    inds.append(decode_sib_message(msg, UDP, Tx.SELECT))
                assert all(i.indication and i.tid == 7 and i.seq == 1 for i in inds)
                deadline = loop.time() + 30
                while sib.core.persistent_count and loop.time() < deadline:
                    await asyncio.sleep(0.05)
                assert sib.core.persistent_count == 0
                assert server.ind_retransmissions == timing.max_retransmit
            finally:
                mute.close()
        await sib.close()

    asyncio.run(asyncio.wait_for(go(), 120))


def ex_rdf(local: str):
    from rdflib import URIRef
    return URIRef(str(ex(local)))


def test_more_persistent_operations_than_the_session_keeps_still_number_their_inds():
    """The UDP session keeps IND state for `max_entries` operations; the SIB numbers INDs
    itself, so an operation whose delivery state was evicted still sends seq 2 after seq 1
    (else the KP would drop the second IND as stale)."""
    from transports.udp import UdpServer

    async def go():
        sib = Sib()
        server = await UdpServer.start(sib, "127.0.0.1", 0,
                                       options=SessionOptions(max_entries=4))
        try:
            async with await connect(f"udp://127.0.0.1:{server.port}") as kp:
                subs = []
                for k in range(6):
                    sub = kp.subscribe(Request(Tx.SELECT_PERSISTENT, 0, projection=1, where=(
                        Triple(ex(f"s{k}"), P, Var(0)),)))
                    subs.append(await sub.__aenter__())
                    await anext(sub)  # the initial state
                for value in (1, 2):
                    for k in range(6):
                        await kp.insert_data([(ex_rdf(f"s{k}"), ex_rdf("p"), value)])
                        ind = await asyncio.wait_for(anext(subs[k]), 30)
                        assert ind.seq == value and len(ind.result.rows) == value
                for sub in subs:
                    await sub.__aexit__(None, None, None)
        finally:
            await server.close()
            await sib.close()

    asyncio.run(asyncio.wait_for(go(), 120))


def test_session_sizing_reaches_the_udp_and_tcp_sessions(tmp_path):
    """`Server.start(options=SessionOptions(max_entries=))` sizes both sessions; `ksp-sib`
    takes it from `[limits] max_session_entries`, by default large enough for 10,000+
    subscriptions."""
    from sib.config import ConfigError, load

    async def go():
        sib = Sib()
        async with await Server.start(sib, udp=0, tcp=0,
                                          options=SessionOptions(max_entries=123)) as server:
            assert server.udp.session.max_entries == server.tcp.session.max_entries == 123
        await sib.close()

    asyncio.run(asyncio.wait_for(go(), 60))
    assert load().max_session_entries >= 10_000
    # the cap on persistent operations in all stays below the session tables' size
    assert 10_000 <= load().max_persistent < load().max_session_entries
    limits = tmp_path / "limits.toml"
    limits.write_text("[limits]\nmax_persistent = 7\n")
    assert load(limits).max_persistent == 7
    limits.write_text("[limits]\nmax_persistent = 0\n")
    with pytest.raises(ConfigError, match="max_persistent"):
        load(limits)
    assert load().max_quads == 0  # no cap on the store unless asked
    limits.write_text("[limits]\nmax_quads = -1\n")
    with pytest.raises(ConfigError, match="max_quads"):
        load(limits)
    toml = tmp_path / "sib.toml"
    toml.write_text("[limits]\nmax_session_entries = 20000\n")
    assert load(toml).max_session_entries == 20_000
    from sib.cli import build_parser
    args = build_parser().parse_args(["--max-session-entries", "30000"])
    assert load(toml, {"max_session_entries": args.max_session_entries}).max_session_entries \
        == 30_000


@pytest.mark.slow
def test_the_metrics_endpoint_holds_a_bounded_number_of_connections_for_a_bounded_time():
    """`Metrics.serve`: past `max_connections` a connection is closed unanswered; one whose
    request trickles in (a header line now and then, each well within the deadline) is closed
    at `timeout` all the same, so its slot comes back; then a scrape is answered."""
    from sib.metrics import Metrics
    from transport_helpers import closed_by_peer as closed

    async def go():
        metrics = Metrics()
        server = await metrics.serve("127.0.0.1", 0, max_connections=2, timeout=3.0)
        port = server.sockets[0].getsockname()[1]
        try:
            slow = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
            for _, writer in slow:
                writer.write(b"GET /metrics HTTP/1.1\r\n")
            await asyncio.sleep(0.2)  # both accepted and reading
            extra = await asyncio.open_connection("127.0.0.1", port)
            assert await closed(extra[0], 1.5)  # over the limit: closed unanswered, at once
            started = asyncio.get_running_loop().time()
            for _ in range(8):  # a header line every 0.5 s, until the deadline cuts it off
                await asyncio.sleep(0.5)
                for _, writer in slow:
                    try:
                        writer.write(b"X-Slow: 1\r\n")
                    except ConnectionError:  # cut off already
                        pass
            assert all([await closed(reader) for reader, _ in slow])
            assert asyncio.get_running_loop().time() - started < 8
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /metrics HTTP/1.1\r\nHost: sib\r\n\r\n")
            answer = await asyncio.wait_for(reader.read(), 10)
            assert answer.startswith(b"HTTP/1.1 200") and b"ksp_requests_total" in answer
            for _, w in (*slow, extra, (reader, writer)):
                w.close()
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(asyncio.wait_for(go(), 60))


def test_the_store_s_size_cap_refuses_growth_and_nothing_else():
    """`max_quads`: a write that would grow the store past it is refused 0x0a with nothing of
    it written; one that does not grow it passes at the cap; a rule whose firing the cap
    refuses ends with a LIMIT_EXCEEDED IND while the INDs of the write go on."""
    async def go():
        sib = Sib(max_quads=4)
        kp, watcher = Client(sib, "kp"), Client(sib, "watcher")
        assert (await watcher.call(sub(1))).status == Status.OK
        rule = Request(Tx.INSERT_PERSISTENT, 2, insert=(Triple(S, ex("copy"), Var(0)),),
                       where=(Triple(S, P, Var(0)),))
        assert (await kp.call(rule)).status == Status.OK

        def insert(tid: int, *values: int) -> Request:
            return Request(Tx.INSERT_DATA, tid,
                           insert=tuple(Triple(S, P, Literal.of(v)) for v in values))

        def values(p) -> set:
            return {q[2] for q in sib.store.match(S, p)}

        assert (await kp.call(insert(3, 1, 2))).status == Status.OK  # 2, and 2 copies: 4
        assert sib.store.size == 4 and values(ex("copy")) == {Literal.of(1), Literal.of(2)}
        assert (await kp.call(insert(4, 3))).status == Status.LIMIT_EXCEEDED
        assert sib.store.size == 4 and values(P) == {Literal.of(1), Literal.of(2)}
        swap = Request(Tx.UPDATE_DATA, 5, delete=(Triple(S, P, Literal.of(2)),),
                       insert=(Triple(S, P, Literal.of(3)),))
        assert (await kp.call(swap)).status == Status.OK  # no growth: passes at the cap
        assert values(P) == {Literal.of(1), Literal.of(3)}
        # the rule's next firing (a copy of 3) would make 5: the rule ends, the rest goes on
        ended = [r for kind, _, tid, r in kp.log if kind == "ind" and tid == 2]
        assert [r.status for r in ended] == [Status.LIMIT_EXCEEDED]
        assert not sib.core.registry.rules and sib.store.size == 4 == len(sib.store)
        assert "ksp_store_quads 4.0" in sib.core.metrics.render().splitlines()
        inds = [r for kind, _, tid, r in watcher.log if kind == "ind" and tid == 1]
        assert {row[0] for row in inds[-1].result.rows} == {Literal.of(1), Literal.of(3)}
        await sib.close()

    asyncio.run(go())
