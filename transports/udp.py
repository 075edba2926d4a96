"""KSP over UDP: one datagram per message (§2.3), reliability from the sessions.

`UdpServer` wraps a `SIBSession` (duplicate cache, IND retransmission) around one datagram
socket; `open_udp_link` a `KPSession` (CON retransmission, IND ACKs) around a connected one.
Sizes are checked by the sessions before sending (65 507 bytes, or the request's MAX RESPONSE
SIZE), so nothing too large reaches `sendto`.
"""
from __future__ import annotations

import asyncio
import random
from collections.abc import Hashable

from ksp import UDP, KPSession, SIBSession, Timing
from ksp.session import SessionOptions
from ksp.service import Service

from ._kplink import SessionLink
from .reads import small_reads
from ._sibadapter import SessionAdapter

__all__ = ["UdpServer", "UdpLink", "open_udp_link"]


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

    def datagram_received(self, data: bytes, addr: Hashable) -> None:
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
        transport, pcap = self.transport, self.pcap
        for data, addr in self.session.datagrams_to_send(self.loop.time()):
            if pcap is not None:  # recorded first: whatever a KP received is in the capture,
                pcap.udp(self.local, addr[:2], data)  # even if the SIB is killed right after
            transport.sendto(data, addr)

    async def close(self) -> None:
        self.shut()
        if self.transport is not None:
            self.transport.close()
            await self._closed_fut


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
