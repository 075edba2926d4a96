"""`Server`: any subset of the UDP, TCP (or TLS) and CoAP adapters around one `Service`."""
from __future__ import annotations

import ssl as _ssl
from typing import TYPE_CHECKING

from ksp import KPIdentity, Timing
from ksp.service import Channel, Service
from ksp.session import SessionOptions

from .limits import ConnectionLimits
from .tcp import TcpServer
from .udp import UdpServer

if TYPE_CHECKING:  # aiocoap is the `coap` extra: imported when a CoAP listener starts
    from .coap import CoapServer

__all__ = ["Server", "UdpServer", "TcpServer", "CoapServer"]


def __getattr__(name: str):
    """`CoapServer` on first use, so the UDP/TCP server and the KP client need no aiocoap."""
    if name == "CoapServer":
        from .coap import CoapServer
        return CoapServer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Server:
    """Start with `await Server.start(service, udp=0, tcp=0, coap=0)`: each given port (0 =
    ephemeral) starts that transport; `ssl` makes the TCP listener TLS."""

    def __init__(self) -> None:
        self.udp: UdpServer | None = None
        self.tcp: TcpServer | None = None
        self.coap: CoapServer | None = None

    @classmethod
    async def start(cls, service: Service, host: str = "127.0.0.1", *,
                    udp: int | None = None, tcp: int | None = None, coap: int | None = None,
                    ssl: _ssl.SSLContext | None = None, timing: Timing | None = None,
                    max_message_size: int | None = None,
                    tcp_limits: ConnectionLimits | None = None, pcap=None,
                    options: SessionOptions | None = None) -> "Server":
        """`options`: the bounds of every listener's `SIBSession` (`ksp.session.SessionOptions`:
        `max_entries`, the size of each of their tables, at least the number of persistent
        operations the SIB will hold, ...). `pcap`: a `transports.pcap.PcapWriter` for every
        UDP and CoAP datagram and TCP byte in and out."""
        self = cls()
        port = None
        try:
            if udp is not None:
                port = ("UDP", udp)
                self.udp = await UdpServer.start(service, host, udp, timing=timing,
                                                 options=options)
                self.udp.pcap = pcap
            if tcp is not None:
                port = ("TCP", tcp)
                self.tcp = await TcpServer.start(service, host, tcp, ssl=ssl, timing=timing,
                                                 limits=tcp_limits,
                                                 max_message_size=max_message_size,
                                                 options=options)
                self.tcp.pcap = pcap
            if coap is not None:
                port = ("CoAP", coap)
                from .coap import CoapServer

                self.coap = await CoapServer.start(service, host, coap, timing=timing,
                                                   options=options)
                if pcap is not None:
                    self.coap.tap(pcap, host)
        except BaseException as exc:
            await self.close()
            if isinstance(exc, OSError) and port is not None:  # say which listener, in words
                reason = exc.strerror or str(exc)
                error = OSError(exc.errno, f"{port[0]} port {port[1]} on {host}: {reason}")
                error.listener = port[0].lower()  # which: udp, tcp, coap
                raise error from exc
            raise
        return self

    def channel(self, transport: str, kp: KPIdentity, tid: int) -> Channel:
        """The channel of (transport, kp, tid), e.g. for a SIB restoring its persistent
        operations after a restart (then `channel.restore(state)` hands it its delivery)."""
        return self._adapter(transport).channel(kp, tid)

    @property
    def ind_retransmissions(self) -> int:
        """INDs re-sent for want of an ACK so far (the UDP session's; TCP does not re-send)."""
        return sum(a.session.stats.ind_retransmissions for a in (self.udp, self.tcp)
                   if a is not None)

    @property
    def sealed_dropped(self) -> int:
        """Sealed datagrams dropped unopened so far (unknown KP, bad tag, replay: wire format
        13.3), over UDP and CoAP."""
        return ((self.udp.session.stats.sealed_dropped if self.udp is not None else 0)
                + (self.coap.session.stats.sealed_dropped if self.coap is not None else 0))

    @property
    def held_for_validation(self) -> int:
        """Answers held back until their address is validated so far (wire format 14: RESs
        replaced by ECHO REQUIRED, persistent requests answered with it, INDs not sent), over
        UDP and CoAP, and sealed requests of a KP with no replay window asked for an echo (13.5)."""
        return sum(a.session.stats.held_for_validation + a.session.stats.sealed_echo_required
                   for a in (self.udp, self.coap) if a is not None)

    def _adapter(self, transport: str):
        adapter = getattr(self, transport, None) if transport in ("udp", "tcp", "coap") else None
        if adapter is None:
            raise ValueError(f"no {transport!r} transport running")
        return adapter

    async def close(self) -> None:
        for adapter in (self.coap, self.tcp, self.udp):
            if adapter is not None:
                await adapter.close()

    async def __aenter__(self) -> "Server":
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()
