"""KSP over TCP (and TLS): messages framed by the 8-byte header's Length field (§2.2).

The sessions reassemble partial reads and enforce the maximum message size (a larger message
is answered LIMIT_EXCEEDED and skipped unbuffered; Length < 8 closes the connection). TLS is
asyncio's: pass an `ssl.SSLContext` to the server (certificate) or the client (trust).
One `SIBSession` serves every connection of a listener, each connection being its own
endpoint handle, so a KP reconnecting with the same KP ID keeps its persistent operations.
"""
from __future__ import annotations

import asyncio
import ssl as _ssl
from collections.abc import Hashable

from ksp import TCP, KPSession, SIBSession, Timing
from ksp.service import Service
from ksp.session import SessionOptions

from ._kplink import SessionLink
from .reads import small_reads
from ._sibadapter import SessionAdapter
from .limits import ConnectionLimits, Guard

__all__ = ["TcpServer", "TcpLink", "open_tcp_link"]


class _Connection(asyncio.Protocol):
    """One accepted connection; it is also its own endpoint handle in the session."""

    def __init__(self, server: "TcpServer") -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.closed = server.loop.create_future()
        self.peer_host: str | None = None  # for limits per source (e.g. failed passwords)
        self.ends: tuple = ()  # (peer, local) addresses, for the capture

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        small_reads(transport)
        peer = transport.get_extra_info("peername")
        self.peer_host = peer[0] if peer else None
        if not self.server.guard.admit(self, self.peer_host):
            transport.abort()  # over a connection limit: closed at once, nothing read
            return
        self.server._connections.add(self)
        if self.server.pcap is not None and peer:
            self.ends = (peer[:2], transport.get_extra_info("sockname")[:2])
            self.server.pcap.tcp_open(*self.ends)

    def data_received(self, data: bytes) -> None:
        server = self.server
        if server.pcap is not None and self.ends:
            server.pcap.tcp(*self.ends, data)
        session = server.session
        session.receive_data(data, self, server.loop.time())
        if not server.guard.buffered(self, session.buffered(self)):
            self.transport.abort()  # the bound on buffered bytes: this one grew past it
        server.pump()

    def eof_received(self) -> bool | None:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        server = self.server
        if server.pcap is not None and self.ends:
            server.pcap.tcp_close(*self.ends)
        server.guard.release(self)
        server._connections.discard(self)
        server.session.connection_lost(self)
        if not self.closed.done():
            self.closed.set_result(None)
        server.pump()

    def __repr__(self) -> str:
        peer = self.transport.get_extra_info("peername") if self.transport else None
        return f"<tcp connection {peer}>"


class TcpServer(SessionAdapter):
    """The SIB side over TCP/TLS. Start with `await TcpServer.start(service, host, port,
    ssl=context)`."""

    transport_name = "tcp"

    def __init__(self, service: Service, session: SIBSession) -> None:
        super().__init__(service, session)
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[_Connection] = set()
        self.port = 0
        #: A `transports.pcap.PcapWriter`: every connection's bytes both ways (inside TLS:
        #: the plaintext, as the session sees it) are written to it.
        self.pcap = None

    @classmethod
    async def start(cls, service: Service, host: str = "127.0.0.1", port: int = 0, *,
                    ssl: _ssl.SSLContext | None = None, timing: Timing | None = None,
                    max_message_size: int | None = None,
                    limits: ConnectionLimits | None = None,
                    options: SessionOptions | None = None) -> "TcpServer":
        """`limits`: on connections, buffered bytes and timeouts (`transports.limits`; the
        defaults when None); `options`: the bounds of the session's tables
        (`ksp.session.SessionOptions`)."""
        loop = asyncio.get_running_loop()
        session = SIBSession(TCP, options=options, timing=timing,
                             max_message_size=max_message_size)
        self = cls(service, session)
        self.guard = Guard(limits or ConnectionLimits(), f"tcp :{port}", self._abort_conn)
        self._server = await loop.create_server(lambda: _Connection(self), host, port, ssl=ssl)
        self.port = self._server.sockets[0].getsockname()[1]
        self.guard.name = f"tcp://{host}:{self.port}"
        return self

    def _abort_conn(self, conn: "_Connection") -> None:
        if conn.transport is not None:
            conn.transport.abort()

    def transmit(self) -> None:
        for data, conn in self.session.data_to_send():
            if conn.transport is not None and not conn.transport.is_closing():
                if self.pcap is not None and conn.ends:  # recorded first: what the KP sees
                    self.pcap.tcp(conn.ends[1], conn.ends[0], data)  # is in the capture
                conn.transport.write(data)

    def abort(self, addr: Hashable) -> None:
        if isinstance(addr, _Connection) and addr.transport is not None:
            addr.transport.close()  # after the error RES already written

    async def close(self) -> None:
        self.shut()
        self.guard.stop()
        if self._server is not None:
            self._server.close()
        conns = list(self._connections)
        for conn in conns:
            if conn.transport is not None:
                conn.transport.close()
        if conns:
            await asyncio.gather(*(c.closed for c in conns))
        if self._server is not None:
            await self._server.wait_closed()


class TcpLink(SessionLink, asyncio.Protocol):
    """The KP side over TCP/TLS."""

    def __init__(self, session: KPSession) -> None:
        super().__init__(session)
        self.transport: asyncio.Transport | None = None
        self._closed_fut = self.loop.create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        small_reads(transport)

    def data_received(self, data: bytes) -> None:
        self.session.receive_data(data, self.loop.time())
        self.pump()

    def eof_received(self) -> bool | None:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost(exc or ConnectionError("the SIB closed the connection"))
        self.session.receive_data(b"", self.loop.time())  # the session forgets its requests
        self.pump()
        if not self._closed_fut.done():
            self._closed_fut.set_result(None)

    def transmit(self) -> None:
        data = self.session.data_to_send()
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    async def close(self) -> None:
        self.lost(ConnectionError("the client was closed"))
        if self.transport is not None:
            self.transport.close()
            await self._closed_fut


async def open_tcp_link(host: str, port: int, *, ssl: _ssl.SSLContext | None = None,
                        server_hostname: str | None = None, timing: Timing | None = None,
                        credentials=None, max_message_size: int | None = None) -> TcpLink:
    loop = asyncio.get_running_loop()
    session = KPSession(TCP, timing=timing, credentials=credentials,
                        max_message_size=max_message_size)
    link = TcpLink(session)
    link.peer = f"{'tcps' if ssl is not None else 'tcp'}://{host}:{port}"
    kwargs = {}
    if ssl is not None:
        kwargs = {"ssl": ssl, "server_hostname": server_hostname or host}
    await loop.create_connection(lambda: link, host, port, **kwargs)
    return link
