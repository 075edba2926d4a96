"""A real UDP relay that loses, duplicates and reorders datagrams, for the lossy-link tests.

Clients send to `proxy.port`; each client address gets its own upstream socket to the server,
so the server sees one address per client, as with a NAT. Faults are drawn from a seeded
`random.Random`, independently for each datagram in each direction.
"""
from __future__ import annotations

import asyncio
import random
from collections import Counter


class _Upstream(asyncio.DatagramProtocol):
    def __init__(self, proxy: "LossyProxy", client: tuple) -> None:
        self.proxy, self.client = proxy, client
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr) -> None:
        front = self.proxy.front
        self.proxy._relay(data, lambda d: front.sendto(d, self.client))

    def error_received(self, exc) -> None:
        pass


class LossyProxy(asyncio.DatagramProtocol):
    def __init__(self, server: tuple[str, int], *, loss: float = 0.2, duplicate: float = 0.1,
                 reorder: float = 0.3, max_delay: float = 0.03, seed: int = 1) -> None:
        self.server = server
        self.loss, self.duplicate, self.reorder, self.max_delay = loss, duplicate, reorder, max_delay
        self.rng = random.Random(seed)
        self.stats: Counter = Counter()
        self.front: asyncio.DatagramTransport | None = None
        self.port = 0
        self._upstreams: dict[tuple, _Upstream] = {}
        self._pending: dict[tuple, asyncio.Task] = {}
        self._delayed: list[asyncio.TimerHandle] = []  # cancelled at close (fired ones too)

    @classmethod
    async def start(cls, server: tuple[str, int], **kwargs) -> "LossyProxy":
        self = cls(server, **kwargs)
        loop = asyncio.get_running_loop()
        await loop.create_datagram_endpoint(lambda: self, local_addr=("127.0.0.1", 0))
        return self

    def connection_made(self, transport) -> None:
        self.front = transport
        self.port = transport.get_extra_info("sockname")[1]

    def datagram_received(self, data: bytes, addr) -> None:
        up = self._upstreams.get(addr)
        if up is None:
            up = self._upstreams[addr] = _Upstream(self, addr)
            loop = asyncio.get_running_loop()
            self._pending[addr] = loop.create_task(loop.create_datagram_endpoint(
                lambda: up, remote_addr=self.server))
        if up.transport is None:
            task = self._pending[addr]
            task.add_done_callback(lambda _: self._relay(data, up.transport.sendto))
            return
        self._relay(data, up.transport.sendto)

    def error_received(self, exc) -> None:
        pass

    def _relay(self, data: bytes, send) -> None:
        rng, stats = self.rng, self.stats
        stats["datagrams"] += 1
        if rng.random() < self.loss:
            stats["dropped"] += 1
            return
        copies = 1
        if rng.random() < self.duplicate:
            copies = 2
            stats["duplicated"] += 1
        loop = asyncio.get_running_loop()
        for _ in range(copies):
            if rng.random() < self.reorder:
                stats["delayed"] += 1
                self._delayed.append(
                    loop.call_later(rng.uniform(0, self.max_delay), self._late, send, data))
            else:
                send(data)

    def _late(self, send, data: bytes) -> None:
        try:
            send(data)
        except Exception:  # the socket closed meanwhile
            pass

    async def close(self) -> None:
        for handle in self._delayed:
            handle.cancel()
        for task in self._pending.values():
            await task
        for up in self._upstreams.values():
            up.transport.close()
        self.front.close()
        await asyncio.sleep(0)
