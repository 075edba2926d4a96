"""The TCP (and TLS) adapters over real loopback sockets, spoken to by raw streams."""
from __future__ import annotations

import asyncio
import json
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ksp import (
    TCP, IRI, Literal, Request, Status, Triple, Tx, Var, decode_sib_message, encode,
    tcp_frame_length,
)
from ksp.framing import DEFAULT_MAX_TCP_MESSAGE, FRAME, FrameReader
from ksp.session import _Persistent
from sib import Sib
from transports import KspConnectionError, TcpServer, connect
from transports.reads import READ_SIZE

from memory_service import MemoryService
from strategies import kp_bytes, requests
from transport_helpers import FAST, answer_to, run, sent_to_sib, tls_contexts, until

EX = "http://example.org/"
INSERT = Request(Tx.INSERT_DATA, 5, insert=(Triple(IRI(EX + "s"), IRI(EX + "p"), Literal("v")),))
SELECT = Request(Tx.SELECT, 6, projection=1, where=(Triple(Var(0), IRI(EX + "p"), Var(1)),))
TCP_REQ_VECTORS = [v for v in (json.loads(p.read_text()) for p in sorted(
    (Path(__file__).parent / "vectors").glob("invalid_*.json")))
    if v["direction"] == "kp_to_sib" and v["transport"] == "tcp"
    and v["name"] != "invalid_0x04_tcp_length_mismatch"]  # on a stream: waits for the rest


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    header = await asyncio.wait_for(reader.readexactly(8), 10)
    return header + await asyncio.wait_for(reader.readexactly(tcp_frame_length(header) - 8), 10)


async def read_message(reader: asyncio.StreamReader, answers: Tx | None = None):
    return decode_sib_message(await read_frame(reader), TCP, answers=answers)


async def open_raw(port: int, ssl=None):
    return await asyncio.open_connection("127.0.0.1", port, ssl=ssl,
                                         server_hostname="localhost" if ssl else None)


async def still_serves(port: int) -> None:
    """A new connection's SELECT is answered OK (after whatever a test did to the server)."""
    reader, writer = await open_raw(port)
    writer.write(encode(SELECT, TCP))
    assert (await read_message(reader, Tx.SELECT)).status == Status.OK
    await close_raw(writer)


async def close_raw(writer: asyncio.StreamWriter) -> None:
    writer.close()
    try:
        await writer.wait_closed()
    except (ConnectionError, OSError):
        pass


@pytest.mark.parametrize("tls", [False, True], ids=["tcp", "tls"])
def test_partial_reads_byte_by_byte(tls, tmp_path):
    async def scenario():
        server_ctx, client_ctx = tls_contexts(tmp_path) if tls else (None, None)
        service = MemoryService()
        server = await TcpServer.start(service, ssl=server_ctx, timing=FAST)
        reader, writer = await open_raw(server.port, client_ctx)
        try:
            for byte in encode(INSERT, TCP) + encode(SELECT, TCP):  # two messages, 1 byte each
                writer.write(bytes([byte]))
                await writer.drain()
            assert (await read_message(reader)).status == Status.OK
            answer = await read_message(reader, Tx.SELECT)
            assert answer.tid == 6 and answer.result.rows == ((IRI(EX + "s"),),)
        finally:
            await close_raw(writer)
            await server.close()
        return service

    service = run(scenario())
    assert [r.tx for _, r in service.requests] == [Tx.INSERT_DATA, Tx.SELECT]


def test_a_message_larger_than_one_read_arrives_whole_both_ways():
    """The adapters read at most `READ_SIZE` bytes at a time (not asyncio's 256 KiB, whose
    allocation cost an mmap and munmap per read): a message five reads long is reassembled by
    the SIB, and its triple comes back whole in a RES."""
    value = "v" * (5 * READ_SIZE)

    async def scenario():
        service = MemoryService()
        server = await TcpServer.start(service, timing=FAST)
        try:
            async with await connect(f"tcp://127.0.0.1:{server.port}", timing=FAST) as kp:
                await kp.insert_data([(IRI(EX + "s"), IRI(EX + "p"), Literal(value))])
                rows = await kp.query(SELECT._replace(projection=2))
                sizes = {conn.transport.max_size for conn in server._connections}
                sizes.add(kp.link.transport.max_size)
        finally:
            await server.close()
        return rows, sizes

    rows, sizes = run(scenario())
    assert [str(row[1]) for row in rows.rows] == [value]
    assert sizes == {READ_SIZE}


def test_oversize_message_is_refused_and_the_stream_goes_on():
    async def scenario():
        service = MemoryService()
        server = await TcpServer.start(service, timing=FAST, max_message_size=1000)
        reader, writer = await open_raw(server.port)
        try:
            big = Request(Tx.INSERT_DATA, 9, insert=(
                Triple(IRI(EX + "s"), IRI(EX + "p"), Literal("x" * 5000)),))
            writer.write(encode(big, TCP) + encode(SELECT, TCP))
            answer = await read_message(reader)
            assert (answer.tid, answer.status) == (9, Status.LIMIT_EXCEEDED)
            assert (await read_message(reader, Tx.SELECT)).tid == 6
        finally:
            await close_raw(writer)
            await server.close()
        return service

    service = run(scenario())
    assert [r.tid for _, r in service.requests] == [6]  # the big one was never executed


def test_broken_framing_is_answered_then_closed():
    async def scenario():
        server = await TcpServer.start(MemoryService(), timing=FAST)
        reader, writer = await open_raw(server.port)
        try:
            writer.write(struct.pack("<BBHI", 1, 0x87, 77, 4))  # Length 4 < 8
            answer = await read_message(reader)
            assert (answer.tid, answer.status) == (77, Status.INVALID_DATA_FORMAT)
            assert await asyncio.wait_for(reader.read(), 10) == b""  # closed by the server
        finally:
            await close_raw(writer)
            await server.close()

    run(scenario())


def test_invalid_tcp_messages_get_their_status():
    assert TCP_REQ_VECTORS

    async def scenario():
        server = await TcpServer.start(MemoryService(), timing=FAST)
        try:
            for vector in TCP_REQ_VECTORS:
                reader, writer = await open_raw(server.port)
                data = bytes.fromhex(vector["hex"])
                writer.write(data)
                answer = await read_message(reader)
                assert answer.status == vector["error"]["status"], vector["name"]
                await close_raw(writer)
        finally:
            await server.close()

    run(scenario())


def test_closed_connection_fails_waiting_requests():
    async def scenario():
        class Silent(MemoryService):
            def submit(self, request, channel):  # never answers
                self.requests.append((channel.transport, request))

        service = Silent()
        server = await TcpServer.start(service, timing=FAST)
        async with await connect(f"tcp://127.0.0.1:{server.port}", timing=FAST) as kp:
            waiting = asyncio.ensure_future(kp.query(SELECT))
            await until(lambda: service.requests, what="the query reaching the service")
            await server.close()
            with pytest.raises(KspConnectionError):
                await waiting
            with pytest.raises(KspConnectionError):
                await kp.query(SELECT)

    run(scenario())


def test_a_kp_that_reconnects_keeps_its_persistent_operation():
    """R12: the INDs follow the KP ID to its new connection."""
    async def scenario():
        service = MemoryService()
        server = await TcpServer.start(service, timing=FAST)
        url = f"tcp://127.0.0.1:{server.port}"
        try:
            first = await connect(url, kp_id="sensor-7", timing=FAST)
            sub = first.subscribe(SELECT._replace(tx=Tx.SELECT_PERSISTENT))
            await sub.__aenter__()
            tid = sub.tid
            await first.close(keep_persistent=True)  # as a device going to sleep
            async with await connect(url, kp_id="sensor-7", timing=FAST) as again:
                # its next request moves the INDs to the new connection
                link = again.link
                received = []

                class Sink:
                    def deliver(self, response):
                        received.append(response)
                        service.changed.set()

                    def end(self, status): ...
                    def fail(self, exc): ...

                # the KP kept its TID (as firmware keeps it in RTC RAM); the Python client has
                # no API to adopt one, so the test plants it in the session
                link.session._persistent[tid] = _Persistent(Tx.SELECT_PERSISTENT)
                link._sinks[tid] = Sink()
                await again.insert_data([(IRI(EX + "t"), IRI(EX + "p"), Literal("w"))])
                await until(lambda: received, what="the IND to the TID the KP kept")
                assert received[-1].tid == tid and received[-1].result.rows == ((IRI(EX + "t"),),)
                await again.terminate(tid)
            assert not service.subs
        finally:
            await server.close()

    run(scenario())


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(requests(small=True), kp_bytes(TCP)), min_size=1, max_size=4))
def test_requests_valid_or_broken_into_a_real_sib_are_answered_and_it_serves_on(pairs):
    """Into the real SIB, one connection per pair: a valid request (a CON one gets its RES),
    then random, valid or broken bytes and the end of the stream. Every message back is a RES
    or IND that decodes and names a TID sent, the SIB closes the connection, and serves on."""
    async def frames(reader: asyncio.StreamReader) -> list[bytes]:
        """The messages of what a connection brings until the SIB closes it (whole frames
        only: nothing oversize, no broken Length)."""
        cut, out = FrameReader(DEFAULT_MAX_TCP_MESSAGE), []
        while chunk := await asyncio.wait_for(reader.read(65536), 10):
            for kind, *frame in cut.feed(chunk):
                assert kind == FRAME, (kind, frame)
                out.append(frame[0])
        return out

    async def scenario():
        sib = await Sib().start()
        server = await TcpServer.start(sib, timing=FAST)
        try:
            for request, junk in pairs:
                named, _ = sent_to_sib([(encode(request, TCP), request), (junk, None)])
                reader, writer = await open_raw(server.port)
                writer.write(encode(request, TCP))
                while request.confirmable:  # its RES, after any IND
                    answer = answer_to(await read_frame(reader), named, TCP)
                    if not answer.indication and answer.tid == request.tid:
                        break
                writer.write(junk)
                writer.write_eof()
                for frame in await frames(reader):
                    answer_to(frame, named, TCP)
                await close_raw(writer)
            await still_serves(server.port)
        finally:
            await server.close()
            await sib.close()

    run(scenario())


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200))
def test_random_streams_never_crash_the_server(junk):
    async def scenario():
        server = await TcpServer.start(MemoryService(answer_later=False), timing=FAST)
        try:
            reader, writer = await open_raw(server.port)
            writer.write(junk)
            writer.write_eof()
            while await asyncio.wait_for(reader.read(65536), 10):  # answers, then EOF
                pass
            await close_raw(writer)
            await still_serves(server.port)
        finally:
            await server.close()

    run(scenario())
