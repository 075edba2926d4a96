"""`Server`: any subset of the UDP, TCP (or TLS) and CoAP adapters around one `Service`."""
from __future__ import annotations

import ssl as _ssl

from ksp import KPIdentity, Timing

from .coap import CoapServer
from .service import Channel, Service
from .tcp import TcpServer
from .udp import UdpServer

__all__ = ["Server", "UdpServer", "TcpServer", "CoapServer"]


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
                    max_message_size: int | None = None) -> "Server":
        self = cls()
        try:
            if udp is not None:
                self.udp = await UdpServer.start(service, host, udp, timing=timing)
            if tcp is not None:
                self.tcp = await TcpServer.start(service, host, tcp, ssl=ssl, timing=timing,
                                                 max_message_size=max_message_size)
            if coap is not None:
                self.coap = await CoapServer.start(service, host, coap)
        except BaseException:
            await self.close()
            raise
        return self

    def channel(self, transport: str, kp: KPIdentity, tid: int) -> Channel:
        """Rebuild the channel of (transport, kp, tid), e.g. for a SIB restoring its persistent
        operations after a restart."""
        adapter = getattr(self, transport, None) if transport in ("udp", "tcp", "coap") else None
        if adapter is None:
            raise ValueError(f"no {transport!r} transport running")
        return adapter.channel(kp, tid)

    async def close(self) -> None:
        for adapter in (self.coap, self.tcp, self.udp):
            if adapter is not None:
                await adapter.close()

    async def __aenter__(self) -> "Server":
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()
