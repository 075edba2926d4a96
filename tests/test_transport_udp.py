"""The UDP adapters over real loopback sockets, spoken to by a raw datagram socket."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ksp import (
    UDP, Ack, EncodeError, IRI, Literal, Options, Request, Response, Status, Timing, Triple, Tx,
    Var, decode_sib_message, encode,
)
from ksp.service import Service
from ksp.session import MAX_UDP_PAYLOAD
from sib import Sib
from transports import UdpServer, connect
from transports.reads import READ_SIZE

from lengths import examples
from memory_service import DEFAULT, MemoryService
from strategies import kp_bytes, requests
from transport_helpers import FAST, answer_to, run, sent_to_sib

VECTORS = [json.loads(p.read_text()) for p in
           sorted((Path(__file__).parent / "vectors").glob("invalid_*.json"))]
UDP_REQ_VECTORS = [v for v in VECTORS if v["direction"] == "kp_to_sib" and v["transport"] == "udp"]

EX = "http://example.org/"
SELECT = Request(Tx.SELECT, 7, projection=2, where=(Triple(Var(0), IRI(EX + "p"), Var(1)),))


class RawUdp(asyncio.DatagramProtocol):
    """A bare datagram socket: what a sensor board's firmware would be."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes] = asyncio.Queue()

    def datagram_received(self, data, addr) -> None:
        self.queue.put_nowait(data)

    @classmethod
    async def open(cls, port: int):
        loop = asyncio.get_running_loop()
        transport, proto = await loop.create_datagram_endpoint(
            cls, remote_addr=("127.0.0.1", port))
        return transport, proto

    async def recv(self, timeout: float = 10.0) -> bytes:
        return await asyncio.wait_for(self.queue.get(), timeout)

    async def validate(self, transport) -> None:
        """Validate this socket's address as a board does before it subscribes (wire format
        14): a persistent request draws ECHO REQUIRED, whose echo value an ASK carries back."""
        # TIDs 1 and 2: under the numbers a test's requests use after it (wire format 15)
        probe = Request(Tx.ASK_PERSISTENT, 1, where=(Triple(Var(0), Var(1), Var(2)),))
        transport.sendto(encode(probe, UDP))
        echo = decode_sib_message(await self.recv(), UDP, answers=probe.tx)
        assert echo.status == Status.ECHO_REQUIRED
        ask = Request(Tx.ASK, 2, where=(Triple(Var(0), Var(1), Var(2)),),
                      options=Options(echo=echo.result))
        transport.sendto(encode(ask, UDP))
        assert decode_sib_message(await self.recv(), UDP, answers=Tx.ASK).status == Status.OK


def test_invalid_datagrams_get_their_status_and_never_reach_the_service():
    assert len(UDP_REQ_VECTORS) > 20

    async def scenario():
        service = MemoryService()
        server = await UdpServer.start(service, timing=FAST)
        transport, raw = await RawUdp.open(server.port)
        try:
            for vector in UDP_REQ_VECTORS:
                data = bytes.fromhex(vector["hex"])
                transport.sendto(data)
                if len(data) < 4:  # no TID: nothing to answer
                    continue
                answer = decode_sib_message(await raw.recv(), UDP)
                assert answer.tid == int.from_bytes(data[2:4], "little"), vector["name"]
                assert answer.status == vector["error"]["status"], vector["name"]
            # the server still works
            transport.sendto(encode(SELECT, UDP))
            answer = decode_sib_message(await raw.recv(), UDP, answers=Tx.SELECT)
            assert answer.status == Status.OK and answer.tid == 7
            assert raw.queue.empty()
        finally:
            transport.close()
            await server.close()
        return service

    service = run(scenario())
    assert [r.tid for _, r in service.requests] == [7]


@pytest.mark.slow
@settings(max_examples=examples(50, 150), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.binary(max_size=64).filter(lambda b: b[2:4] != b"\xff\xff"),
                min_size=1, max_size=10))
def test_random_datagrams_never_crash_the_server(datagrams):
    async def scenario():
        service = MemoryService(answer_later=False)
        server = await UdpServer.start(service, timing=FAST)
        transport, raw = await RawUdp.open(server.port)
        try:
            for data in datagrams:
                transport.sendto(data)
            # the highest request number there is (wire format 15): never behind what went
            # before
            transport.sendto(encode(SELECT._replace(tid=0xFFFF, options=SELECT.options._replace(
                epoch=0xFFFFFFFF)), UDP))
            while True:  # every answer is a decodable RES/IND; ours arrives in the end
                data = await raw.recv()
                ours = data[2:4] == b"\xff\xff"
                answer = decode_sib_message(data, UDP, answers=Tx.SELECT if ours else None)
                if ours:
                    assert answer.status == Status.OK
                    break
        finally:
            transport.close()
            await server.close()

    run(scenario())


FUZZ_PAIRS = st.lists(st.tuples(requests(small=True).filter(lambda r: r.tid != 0xFFFF),
                                kp_bytes(UDP)), min_size=1, max_size=5)
"""Valid requests, each followed by random, valid or one-byte-changed bytes (`fuzz_exchange`)."""


async def fuzz_exchange(port: int, pairs, timeout: float = 10.0) -> dict[int, Response]:
    """Send `pairs` (FUZZ_PAIRS) to a UDP server, then a SELECT with TID 0xFFFF, and read until
    every valid CON request whose TID is its own, and the SELECT, has its RES: what comes back
    must decode and name a TID sent, and the SELECT be answered OK. The RES by TID."""
    datagrams = [m for r, b in pairs for m in ((encode(r, UDP), r), (b, None))]
    named, owed = sent_to_sib(datagrams)
    named[0xFFFF] = {Tx.SELECT}
    transport, raw = await RawUdp.open(port)
    try:
        for data, _ in datagrams:
            transport.sendto(data)
        # the highest request number there is (wire format 15): never behind what went before
        transport.sendto(encode(SELECT._replace(tid=0xFFFF, options=SELECT.options._replace(
            epoch=0xFFFFFFFF)), UDP))
        answered: dict[int, Response] = {}
        while not (owed <= answered.keys() and 0xFFFF in answered):
            answer = answer_to(await raw.recv(timeout), named, UDP)
            if not answer.indication:
                answered[answer.tid] = answer
        assert answered[0xFFFF].status == Status.OK
        return {tid: answered[tid] for tid in owed}
    finally:
        transport.close()


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(FUZZ_PAIRS)
def test_requests_valid_or_broken_into_a_real_sib_are_answered_and_it_serves_on(pairs):
    """Into the real SIB (the test double cannot evaluate every valid request): what comes back
    is RES and IND that decode and name a TID sent, every valid CON request whose TID is its own
    gets its RES, and the SIB serves on."""
    async def scenario():
        sib = await Sib().start()
        server = await UdpServer.start(sib, timing=FAST)
        try:
            await fuzz_exchange(server.port, pairs)
        finally:
            await server.close()
            await sib.close()

    run(scenario())


def test_retransmitted_request_is_answered_from_the_cache():
    async def scenario():
        service = MemoryService()
        server = await UdpServer.start(service, timing=FAST)
        transport, raw = await RawUdp.open(server.port)
        try:
            insert = encode(Request(Tx.INSERT_DATA, 3, insert=(
                Triple(IRI(EX + "s"), IRI(EX + "p"), Literal("x")),)), UDP)
            for _ in range(3):
                transport.sendto(insert)
                assert decode_sib_message(await raw.recv(), UDP).status == Status.OK
        finally:
            transport.close()
            await server.close()
        return service

    service = run(scenario())
    assert len(service.requests) == 1  # an INSERT retried three times inserts once


def test_ind_is_retransmitted_until_acked_then_unreachable():
    async def scenario():
        service = MemoryService()
        server = await UdpServer.start(service, timing=Timing(ack_timeout=0.05,
                                                              max_retransmit=3))
        transport, raw = await RawUdp.open(server.port)
        try:
            await raw.validate(transport)
            sub = Request(Tx.SELECT_PERSISTENT, 9, projection=0,
                          where=(Triple(Var(0), Var(1), Var(2)),))
            transport.sendto(encode(sub, UDP))
            assert decode_sib_message(await raw.recv(), UDP, answers=sub.tx).status == Status.OK
            service.graphs[IRI("")].add(Triple(IRI(EX + "s"), IRI(EX + "p"), Literal("x")))
            service.notify()
            first = decode_sib_message(await raw.recv(), UDP, answers=sub.tx)
            again = decode_sib_message(await raw.recv(), UDP, answers=sub.tx)
            assert first.indication and again == first and first.seq == 1
            transport.sendto(encode(Ack(9, 1), UDP))  # ACKed: no more retransmissions
            service.notify()
            second = decode_sib_message(await raw.recv(), UDP, answers=sub.tx)
            assert second.seq == 2
            await asyncio.wait_for(service.lost.wait(), 30)  # never ACKed: retries run out
            for _ in range(3):  # the 3 retransmissions of IND 2 went out meanwhile
                assert decode_sib_message(await raw.recv(), UDP, answers=sub.tx) == second
            assert service.unreachable[0][1] == 9 and not service.subs
        finally:
            transport.close()
            await server.close()

    run(scenario(), timeout=120)


def test_oversize_request_is_refused_before_sending():
    async def scenario():
        service = MemoryService()
        server = await UdpServer.start(service, timing=FAST)
        try:
            async with await connect(f"udp://127.0.0.1:{server.port}", timing=FAST) as kp:
                big = Literal("x" * MAX_UDP_PAYLOAD)
                with pytest.raises(EncodeError):
                    await kp.insert_data([(IRI(EX + "s"), IRI(EX + "p"), big)])
                await kp.insert_data([(IRI(EX + "s"), IRI(EX + "p"), Literal("small"))])
        finally:
            await server.close()
        return service

    service = run(scenario())
    assert len(service.requests) == 1


def test_oversize_result_is_cut_to_one_datagram():
    async def scenario():
        service = MemoryService()
        for i in range(3000):
            service.store.add(Triple(IRI(f"{EX}s{i}"), IRI(EX + "p"), Literal("v" * 40)))
        server = await UdpServer.start(service, timing=FAST)
        try:
            async with await connect(f"udp://127.0.0.1:{server.port}", timing=FAST) as kp:
                rows = await kp.query(SELECT)
        finally:
            await server.close()
        return rows

    rows = run(scenario())
    assert rows.total == 3000 and 0 < len(rows.rows) < 3000  # TRC tells the KP to page


def test_inds_follow_a_kp_id_to_its_new_address():
    """R12: a device whose address changes (DHCP, reconnect) keeps its persistent operation;
    its next request from the new address moves the INDs there."""
    from ksp import Credentials, Options

    creds = Options(credentials=Credentials(b"K" * 16, "pw"))

    async def scenario():
        service = MemoryService()
        server = await UdpServer.start(service, timing=FAST)
        old_t, old = await RawUdp.open(server.port)
        new_t, new = await RawUdp.open(server.port)
        try:
            await old.validate(old_t)
            await new.validate(new_t)
            sub = Request(Tx.SELECT_PERSISTENT, 21, projection=0,
                          where=(Triple(Var(0), Var(1), Var(2)),), options=creds)
            old_t.sendto(encode(sub, UDP))
            assert decode_sib_message(await old.recv(), UDP, answers=sub.tx).status == Status.OK
            service.store.add(Triple(IRI(EX + "a"), IRI(EX + "p"), Literal("1")))
            service.notify()
            ind = decode_sib_message(await old.recv(), UDP, answers=sub.tx)
            old_t.sendto(encode(Ack(21, ind.seq), UDP))
            # the same KP ID from a new address
            new_t.sendto(encode(Request(Tx.ASK, 22, where=(Triple(Var(0), Var(1), Var(2)),),
                                        options=creds), UDP))
            assert decode_sib_message(await new.recv(), UDP, answers=Tx.ASK).result.value
            service.store.add(Triple(IRI(EX + "b"), IRI(EX + "p"), Literal("2")))
            service.notify()
            ind = decode_sib_message(await new.recv(), UDP, answers=sub.tx)
            assert (ind.tid, ind.seq, len(ind.result.rows)) == (21, 2, 2)
            new_t.sendto(encode(Ack(21, ind.seq), UDP))
            assert old.queue.empty()
        finally:
            old_t.close()
            new_t.close()
            await server.close()

    run(scenario())


def test_an_answer_given_inside_submit_is_sent_even_if_submit_then_raises():
    """A RES the service gives from inside `submit` leaves with the adapter's pump; a service
    failing after answering must not strand it (nor stop the server)."""

    class AnswerThenFail(Service):
        def submit(self, request, channel) -> None:
            channel.respond(Response(request.tid, Status.OK))
            raise RuntimeError("service bug after answering")

        def kp_unreachable(self, kp, tid) -> None:
            pass

    async def scenario():
        loop = asyncio.get_running_loop()
        errors = []
        loop.set_exception_handler(lambda loop, context: errors.append(context["exception"]))
        server = await UdpServer.start(AnswerThenFail(), timing=FAST)
        transport, raw = await RawUdp.open(server.port)
        try:
            for tid in (3, 4):
                transport.sendto(encode(Request(Tx.INSERT_DATA, tid, insert=(
                    Triple(IRI(EX + "s"), IRI(EX + "p"), Literal("x")),)), UDP))
                res = decode_sib_message(await raw.recv(), UDP)
                assert (res.tid, res.status) == (tid, Status.OK)
        finally:
            transport.close()
            await server.close()
        return errors

    errors = run(scenario())
    assert [str(e) for e in errors] == ["service bug after answering"] * 2


def test_the_largest_datagram_arrives_whole_both_ways():
    """The adapters read at most `READ_SIZE` bytes at a time, not asyncio's 256 KiB (whose
    allocation cost an mmap and munmap per datagram): a request of the largest size a session
    sends still reaches the SIB whole, and its triple comes back whole in a RES."""
    def insert(n: int) -> Request:
        return Request(Tx.INSERT_DATA, 0, insert=(
            Triple(IRI(EX + "s"), IRI(EX + "p"), Literal("v" * n)),))

    n = MAX_UDP_PAYLOAD - len(encode(insert(0), UDP))
    while len(encode(insert(n), UDP)) > MAX_UDP_PAYLOAD:
        n -= 1
    request = insert(n)
    assert len(encode(request, UDP)) == MAX_UDP_PAYLOAD

    async def scenario():
        service = MemoryService()
        server = await UdpServer.start(service, timing=FAST)
        try:
            async with await connect(f"udp://127.0.0.1:{server.port}", timing=FAST) as kp:
                await kp.update(request)
                rows = await kp.query(SELECT)
                sizes = (server.transport.max_size, kp.link.transport.max_size)
        finally:
            await server.close()
        return service, rows, sizes

    service, rows, sizes = run(scenario())
    assert service.graphs[DEFAULT] == set(request.insert)
    assert [str(row[1]) for row in rows.rows] == ["v" * n]
    assert sizes == (READ_SIZE, READ_SIZE)


def test_a_burst_beyond_one_drain_is_answered_whole_and_in_order(monkeypatch):
    """More requests than `UdpServer` reads per wake-up (`DRAIN`, made small here: the
    kernel's default receive buffer holds about 256 such datagrams), queued before the loop
    looks: each is answered once, in the order sent, whatever the wake-up it was read in."""
    import transports.udp

    monkeypatch.setattr(transports.udp, "DRAIN", 16)
    DRAIN = transports.udp.DRAIN

    class AnswerOK(Service):
        def submit(self, request, channel) -> None:
            channel.respond(Response(request.tid, Status.OK))

        def kp_unreachable(self, kp, tid) -> None:
            pass

    async def scenario():
        import socket

        server = await UdpServer.start(AnswerOK(), timing=FAST)
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        sock.connect(("127.0.0.1", server.port))
        sock.setblocking(False)
        count = 2 * DRAIN + 10
        try:
            for tid in range(count):  # all sent before the server's loop runs
                sock.send(encode(SELECT._replace(tid=tid), UDP))
            tids = []
            deadline = asyncio.get_running_loop().time() + 20
            while len(tids) < count and asyncio.get_running_loop().time() < deadline:
                try:
                    tids.append(decode_sib_message(sock.recv(READ_SIZE), UDP).tid)
                except BlockingIOError:
                    await asyncio.sleep(0.01)
            assert tids == list(range(count))
        finally:
            sock.close()
            await server.close()

    run(scenario())
