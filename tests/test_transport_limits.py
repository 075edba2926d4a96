"""Bounded TCP (transports/limits.py) through real sockets: a cap on connections in all and per
address, a bound on bytes of unfinished messages across all connections, a slow-message and an
idle timeout. Over a limit a connection is closed; the other clients are still served."""
from __future__ import annotations

import asyncio
import logging
import socket

from ksp import TCP, Request, Status, Tx, decode_sib_message, encode
from transports import connect
from ksp.hosts import address_key
from transports.limits import ConnectionLimits
from transports.tcp import TcpServer

from memory_service import MemoryService
from transport_helpers import FAST, run

ASK = Request(Tx.ASK, 1, where=())


async def _served(limits: ConnectionLimits):
    server = await TcpServer.start(MemoryService(), timing=FAST, limits=limits)
    return server, f"tcp://127.0.0.1:{server.port}"


async def _still_served(url: str) -> None:
    async with connect(url, timing=FAST) as kp:
        assert await asyncio.wait_for(kp.query(ASK), 10) in (True, False)


async def _closed(reader: asyncio.StreamReader, within: float = 10.0) -> bool:
    try:
        return await asyncio.wait_for(reader.read(), within) == b""
    except (ConnectionError, TimeoutError):
        return True


def test_connection_caps_total_and_per_address(caplog):
    async def scenario():
        server, url = await _served(ConnectionLimits(max_connections=30, max_per_address=20))
        try:
            held = []
            for _ in range(25):  # one byte each, as in the attack: never a whole message
                r, w = await asyncio.open_connection("127.0.0.1", server.port)
                w.write(b"\x01")
                held.append((r, w))
            await asyncio.sleep(0.2)
            assert len(server.guard) == 20  # the per-address cap (all are 127.0.0.1)
            closed = [await _closed(r, 2) for r, _ in held[20:]]
            assert all(closed)
            assert server.guard.refused["per address"] == 5
            for _, w in held:
                w.close()
            await asyncio.sleep(0.2)
            assert len(server.guard) == 0
            await _still_served(url)
        finally:
            await server.close()

    with caplog.at_level(logging.WARNING, "transports.limits"):
        run(scenario())
    lines = [r for r in caplog.records if "per address" in r.getMessage()]
    assert len(lines) == 1  # one log line for the five refusals


def test_buffered_bytes_are_bounded_across_connections():
    """100 connections each sending most of a 1 MiB message: past the bound, the one that grew
    is closed; what is buffered stays under the bound; a small client still gets answers."""
    async def scenario():
        cap = 4 << 20
        server, url = await _served(ConnectionLimits(max_buffered_bytes=cap, frame_timeout=0))
        server.session.max_message_size = 2 << 20
        try:
            header = encode(ASK, TCP)[:4] + (1 << 20).to_bytes(4, "little")
            conns = []
            for _ in range(100):
                r, w = await asyncio.open_connection("127.0.0.1", server.port)
                w.write(header + b"\x00" * ((1 << 20) - 4096))
                conns.append((r, w))
            await asyncio.sleep(0.5)
            assert server.guard.total_buffered <= cap
            assert server.guard.refused["buffered bytes"] >= 90
            await _still_served(url)
            for _, w in conns:
                w.close()
        finally:
            await server.close()

    run(scenario(), timeout=120)


def test_slow_messages_and_idle_connections_are_closed():
    async def scenario():
        server, url = await _served(ConnectionLimits(frame_timeout=0.5, idle_timeout=1.0))
        try:
            r1, w1 = await asyncio.open_connection("127.0.0.1", server.port)
            w1.write(encode(ASK, TCP)[:5])  # a message begun, never finished (slowloris)
            r2, w2 = await asyncio.open_connection("127.0.0.1", server.port)  # silent
            assert await _closed(r1, 5)
            assert server.guard.refused["slow message"] == 1
            assert await _closed(r2, 5)
            assert server.guard.refused["idle"] == 1
            await _still_served(url)  # a client that talks is served
            for w in (w1, w2):
                w.close()
        finally:
            await server.close()

    run(scenario())


async def _ask_from(port: int, source: str, tid: int = 1):
    """A raw KSP/TCP connection from `source` (a loopback address) that asks once and keeps
    the connection: (its answer's status, reader, writer); None for the status if the SIB
    closed the connection unanswered."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    writer.write(encode(ASK._replace(tid=tid), TCP))
    try:
        head = await asyncio.wait_for(reader.readexactly(8), 10)
        body = await reader.readexactly(int.from_bytes(head[4:], "little") - 8)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None, reader, writer
    return decode_sib_message(head + body, TCP, Tx.ASK).status, reader, writer


def test_a_full_listener_still_admits_a_new_client():
    """Slow connections (a message begun, never finished) from three addresses fill the
    listener; a client from a fourth address is still admitted and answered, in place of the
    oldest slow connection of an address holding the most; a KP that spoke and then waits in
    silence (as for INDs) is not the one closed. A new connection from an address holding as
    many as any other is refused, as before."""
    async def scenario():
        server, _ = await _served(ConnectionLimits(max_connections=6, max_per_address=3))
        held = []
        try:
            status, r, w = await _ask_from(server.port, "127.0.0.1")  # a KP, silent since
            assert status is Status.OK
            held.append((r, w))
            for source in ("127.0.0.1", "127.0.0.2", "127.0.0.2", "127.0.0.3", "127.0.0.3"):
                r, w = await asyncio.open_connection("127.0.0.1", server.port,
                                                     local_addr=(source, 0))
                w.write(encode(ASK, TCP)[:5])
                held.append((r, w))
            await asyncio.sleep(0.2)
            assert len(server.guard) == 6
            status, r, w = await _ask_from(server.port, "127.0.0.9")
            held.append((r, w))
            assert status is Status.OK
            assert server.guard.refused["reclaimed"] == 1
            assert await _closed(held[1][0], 10)  # the oldest slow one of the biggest holders
            status, r, w = await _ask_from(server.port, "127.0.0.3")  # holds 2, the most
            held.append((r, w))
            assert status is None and server.guard.refused["connections"] == 1
            held[0][1].write(encode(ASK._replace(tid=3), TCP))
            head = await asyncio.wait_for(held[0][0].readexactly(8), 10)
            assert decode_sib_message(head + await held[0][0].readexactly(
                int.from_bytes(head[4:], "little") - 8), TCP, Tx.ASK).status is Status.OK
        finally:
            for _, w in held:
                w.close()
            await server.close()

    run(scenario())


def test_ipv6_addresses_count_by_their_64():
    assert address_key("2001:db8:1:2:aaaa::1") == address_key("2001:db8:1:2::ffff") \
        == "2001:db8:1:2::/64"
    assert address_key("2001:db8:1:3::1") != address_key("2001:db8:1:2::1")
    assert address_key("::ffff:192.0.2.7") == "192.0.2.7"
    assert address_key("192.0.2.7") == "192.0.2.7" and address_key(None) is None
