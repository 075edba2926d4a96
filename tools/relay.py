"""A real UDP relay for one KP in front of a server, for tests and benchmarks that need a network
between the two: it counts datagrams and bytes each way (`counts`), keeps what the KP sent
(`sent`), can delay the KP's datagrams (`delay`), cut the link both ways (`down`), and deliver
a copy of an earlier datagram again, late (`replay`).

    relay = await UdpRelay.start(("127.0.0.1", sib_port))
    kp = await connect(f"udp://127.0.0.1:{relay.port}")
"""
from __future__ import annotations

import asyncio

__all__ = ["UdpRelay"]


class UdpRelay(asyncio.DatagramProtocol):
    """See the module docstring. The server sees one address, the relay's upstream socket."""

    def __init__(self) -> None:
        self.delay = 0.0  # seconds the KP's datagrams are held before they go on
        self.down = False  # nothing passes either way
        self.sent: list[bytes] = []  # every datagram the KP sent
        self.counts = {"up": [0, 0], "down": [0, 0]}  # way -> [datagrams, bytes]
        self.front: asyncio.DatagramTransport | None = None
        self.up: asyncio.DatagramTransport | None = None
        self.client = None
        self.port = 0
        self._late: list[asyncio.TimerHandle] = []

    @classmethod
    async def start(cls, server: tuple[str, int]) -> "UdpRelay":
        self = cls()
        loop = asyncio.get_running_loop()
        await loop.create_datagram_endpoint(lambda: self, local_addr=("127.0.0.1", 0))
        relay = self

        class Upstream(asyncio.DatagramProtocol):
            def datagram_received(self, data: bytes, addr) -> None:
                if not relay.down and relay.client is not None:
                    relay.count("down", data)
                    relay.front.sendto(data, relay.client)

        self.up, _ = await loop.create_datagram_endpoint(Upstream, remote_addr=server)
        return self

    def connection_made(self, transport) -> None:
        self.front = transport
        self.port = transport.get_extra_info("sockname")[1]

    def datagram_received(self, data: bytes, addr) -> None:
        self.client = addr
        if self.down:
            return
        self.sent.append(data)
        self.count("up", data)
        if self.delay:
            self._late.append(asyncio.get_running_loop().call_later(
                self.delay, self.up.sendto, data))
        else:
            self.up.sendto(data)

    def replay(self, data: bytes) -> None:
        """A copy of `data` reaches the server now, from the KP's side (the network's)."""
        self.up.sendto(data)

    def count(self, way: str, data: bytes) -> None:
        self.counts[way][0] += 1
        self.counts[way][1] += len(data)

    def reset(self) -> None:
        self.counts = {"up": [0, 0], "down": [0, 0]}

    def close(self) -> None:
        for handle in self._late:
            handle.cancel()
        self.up.close()
        self.front.close()
