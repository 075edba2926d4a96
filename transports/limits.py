"""Limits on a server's connections, the same for every stream listener the SIB opens (KSP over
TCP, and the SEPA gate's HTTP and WebSocket listeners, which `sib.cli` gives a `Guard`): how
many connections in all and per address, how many bytes of unfinished messages buffered across
all of them, how long a connection may stay silent, and how long one message may take to arrive
(slowloris).

A connection over a limit is closed, with one log line per limit and minute
(`transports.ratelog`: a flood must not flood the log too); the others are not affected.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from .ratelog import RateLimitedLog

log = logging.getLogger("transports.limits")


@dataclass(frozen=True)
class ConnectionLimits:
    """None (or 0 for the timeouts) turns a limit off."""

    max_connections: int | None = 1024
    max_per_address: int | None = 64
    max_buffered_bytes: int | None = 64 << 20
    idle_timeout: float = 0.0  # off: a KP waiting for INDs sends nothing for hours
    frame_timeout: float = 30.0


class Guard:
    """Applies `ConnectionLimits` to one listener's connections. The listener calls `admit`
    on accept (False: close it), `buffered` after each read (False: close it), `release` when a
    connection ends; `close(conn)` is how the guard closes one (the listener's callable)."""

    def __init__(self, limits: ConnectionLimits, name: str,
                 close: Callable[[Hashable], None]) -> None:
        self.limits = limits
        self.name = name
        self._close = close
        self._per_address: Counter[Hashable] = Counter()
        self._conns: dict[Hashable, list] = {}  # conn -> [address, last read, frame start, bytes]
        self.total_buffered = 0
        self.refused: Counter[str] = Counter()  # closed connections, by limit
        self._log = RateLimitedLog(log)
        self._sweeper: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self._conns)

    def admit(self, conn: Hashable, address: Hashable) -> bool:
        lim = self.limits
        if lim.max_connections is not None and len(self._conns) >= lim.max_connections:
            return self._refuse("connections", f"{lim.max_connections} connections")
        if lim.max_per_address is not None and self._per_address[address] >= lim.max_per_address:
            return self._refuse("per address", f"{lim.max_per_address} connections from "
                                               f"{address}")
        now = time.monotonic()
        self._conns[conn] = [address, now, None, 0]
        self._per_address[address] += 1
        self._arm()
        return True

    def buffered(self, conn: Hashable, size: int) -> bool:
        """`conn` just read, and holds `size` bytes of an unfinished message."""
        state = self._conns.get(conn)
        if state is None:
            return True
        now = time.monotonic()
        state[1] = now
        if size == 0:
            state[2] = None
        elif state[2] is None:
            state[2] = now  # a message started
        self.total_buffered += size - state[3]
        state[3] = size
        cap = self.limits.max_buffered_bytes
        if cap is not None and self.total_buffered > cap:
            self._refuse("buffered bytes", f"{cap} bytes of unfinished messages buffered")
            return False
        return True

    def release(self, conn: Hashable) -> None:
        state = self._conns.pop(conn, None)
        if state is None:
            return
        self.total_buffered -= state[3]
        self._per_address[state[0]] -= 1
        if not self._per_address[state[0]]:
            del self._per_address[state[0]]

    def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None

    # -- timeouts ---------------------------------------------------------------------------

    def _arm(self) -> None:
        lim = self.limits
        if self._sweeper is None and (lim.idle_timeout or lim.frame_timeout):
            period = min(t for t in (lim.idle_timeout, lim.frame_timeout) if t) / 4
            loop = asyncio.get_running_loop()
            self._sweeper = loop.call_later(max(period, 0.05), self._sweep)

    def _sweep(self) -> None:
        self._sweeper = None
        lim, now = self.limits, time.monotonic()
        for conn, (_, last, started, _) in list(self._conns.items()):
            if lim.frame_timeout and started is not None and now - started > lim.frame_timeout:
                self._refuse("slow message", f"a message unfinished after {lim.frame_timeout} s")
                self._close(conn)
            elif lim.idle_timeout and now - last > lim.idle_timeout:
                self._refuse("idle", f"silent for {lim.idle_timeout} s")
                self._close(conn)
        if self._conns:
            self._arm()

    def _refuse(self, limit: str, what: str) -> bool:
        self.refused[limit] += 1
        self._log.warning(limit, "%s: connection closed: %s (limit %r; %d so far)", self.name,
                          what, limit, self.refused[limit])
        return False
