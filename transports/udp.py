"""KSP over UDP: one datagram per message (§2.3), reliability from the sessions.

`UdpServer` wraps a `SIBSession` (duplicate cache, IND retransmission) around one datagram
socket; `open_udp_link` a `KPSession` (CON retransmission, IND ACKs) around a connected one.
Sizes are checked by the sessions before sending (65 507 bytes, or the request's MAX RESPONSE
SIZE), so nothing too large reaches `sendto`.
"""
from __future__ import annotations

import asyncio
import os
import random
import select
import socket
from collections.abc import Hashable

from ksp import UDP, KPSession, SIBSession, Timing
from ksp.session import SessionOptions
from ksp.service import Service

from ._kplink import SessionLink
from .reads import READ_SIZE, small_reads
from ._sibadapter import SessionAdapter

__all__ = ["UdpServer", "UdpLink", "open_udp_link"]

#: Datagrams `UdpServer` handles per wake-up of the loop at most (then other callbacks run).
DRAIN = 256


class UdpServer(SessionAdapter, asyncio.DatagramProtocol):
    """The SIB side over UDP. Start with `await UdpServer.start(service, host, port)`."""

    transport_name = "udp"

    def __init__(self, service: Service, session: SIBSession) -> None:
        super().__init__(service, session)
        self.transport: asyncio.DatagramTransport | None = None
        self.port = 0
        self._closed_fut = self.loop.create_future()
        #: A `transports.pcap.PcapWriter`: every datagram in and out is written to it.
        self.pcap = None
        self.local: tuple[str, int] = ("0.0.0.0", 0)
        #: A second handle of the transport's socket (a dup of its descriptor, non-blocking
        #: like it) to read what else has arrived once the loop reports it readable.
        self._reader: socket.socket | None = None
        #: Polls `_reader` without waiting: whether anything else has arrived (None: no poll).
        self._waiting: select.poll | None = None

    @classmethod
    async def start(cls, service: Service, host: str = "127.0.0.1", port: int = 0, *,
                    timing: Timing | None = None, rng: random.Random | None = None,
                    options: SessionOptions | None = None) -> "UdpServer":
        """`options`: the bounds of the session's tables (`ksp.session.SessionOptions`)."""
        loop = asyncio.get_running_loop()
        session = SIBSession(UDP, options=options, timing=timing, rng=rng)
        self = cls(service, session)
        await loop.create_datagram_endpoint(lambda: self, local_addr=(host, port))
        return self

    # -- asyncio.DatagramProtocol ----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        small_reads(transport)
        self.local = transport.get_extra_info("sockname")[:2]
        self.port = self.local[1]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            self._reader = socket.socket(sock.family, sock.type, sock.proto,
                                         fileno=os.dup(sock.fileno()))
            if hasattr(select, "poll"):
                self._waiting = select.poll()
                self._waiting.register(self._reader, select.POLLIN)

    def datagram_received(self, data: bytes, addr: Hashable) -> None:
        """One datagram, then those already queued behind it (at most `DRAIN` in all):
        datagrams that arrived together (the ACKs of one update's INDs) cost one event-loop
        turn (`epoll_wait`, callback), not one each. Each is handled as the loop would hand
        it over: received, then pumped. Whether anything is queued is polled first: one request
        alone (the common case) then costs no failed read (an exception raised and caught)."""
        self._received(data, addr)
        reader = self._reader
        if reader is None or (self._waiting is not None and not self._waiting.poll(0)):
            return
        for _ in range(DRAIN - 1):
            if self._closed:
                return
            try:
                data, addr = reader.recvfrom(READ_SIZE)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # as the loop reports it
                self.error_received(exc)
                return
            self._received(data, addr)

    def _received(self, data: bytes, addr: Hashable) -> None:
        if self.pcap is not None:
            self.pcap.udp(addr[:2], self.local, data)
        self.session.receive_datagram(data, addr[:2], self.loop.time())
        self.pump()

    def error_received(self, exc: Exception) -> None:
        pass  # ICMP unreachable from a KP that went away: IND retries run out on their own

    def connection_lost(self, exc: Exception | None) -> None:
        self.shut()
        if not self._closed_fut.done():
            self._closed_fut.set_result(None)

    # -- SessionAdapter ----------------------------------------------------------------------

    def transmit(self) -> None:
        """Send what the session holds: straight on the socket while the transport buffers
        nothing (asyncio's `sendto` checks and wraps every call, 100 times for an update
        with 100 subscribers), through the transport from the first datagram the kernel
        cannot take on, so that the order holds."""
        transport, pcap = self.transport, self.pcap
        out = self.session.datagrams_to_send(self.loop.time())
        if not out:
            return
        direct = self._reader if transport.get_write_buffer_size() == 0 else None
        for data, addr in out:
            if pcap is not None:  # recorded first: whatever a KP received is in the capture,
                pcap.udp(self.local, addr[:2], data)  # even if the SIB is killed right after
            if direct is not None:
                try:
                    direct.sendto(data, addr)
                    continue
                except (BlockingIOError, InterruptedError):
                    direct = None  # buffered by the transport, and all after it
                except OSError as exc:  # as the transport reports it
                    self.error_received(exc)
                    continue
            transport.sendto(data, addr)

    async def close(self) -> None:
        self.shut()
        if self.transport is not None:
            self.transport.close()
            await self._closed_fut

    def shut(self) -> None:
        super().shut()
        if self._reader is not None:
            self._waiting = None
            self._reader.close()
            self._reader = None


class UdpLink(SessionLink, asyncio.DatagramProtocol):
    """The KP side over UDP (a connected datagram socket)."""

    def __init__(self, session: KPSession) -> None:
        super().__init__(session)
        self.transport: asyncio.DatagramTransport | None = None
        self._closed_fut = self.loop.create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        small_reads(transport)

    def datagram_received(self, data: bytes, addr: Hashable) -> None:
        self.session.receive_datagram(data, self.loop.time())
        self.pump()

    def error_received(self, exc: Exception) -> None:
        if isinstance(exc, ConnectionRefusedError):  # ICMP port unreachable: say so now
            self.unreachable("nothing listens there (ICMP port unreachable)")

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost(exc or ConnectionError("closed"))
        if not self._closed_fut.done():
            self._closed_fut.set_result(None)

    def transmit(self) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        for data in self.session.datagrams_to_send(self.loop.time()):
            transport.sendto(data)

    async def close(self) -> None:
        self.lost(ConnectionError("the client was closed"))
        if self.transport is not None:
            self.transport.close()
            await self._closed_fut


async def open_udp_link(host: str, port: int, *, timing: Timing | None = None,
                        rng: random.Random | None = None, credentials=None,
                        max_message_size: int | None = None) -> UdpLink:
    loop = asyncio.get_running_loop()
    session = KPSession(UDP, timing=timing, rng=rng, credentials=credentials,
                        max_message_size=max_message_size)
    link = UdpLink(session)
    link.peer = f"udp://{host}:{port}"
    await loop.create_datagram_endpoint(lambda: link, remote_addr=(host, port))
    return link
