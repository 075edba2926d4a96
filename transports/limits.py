"""Limits on a server's connections, the same for every stream listener the SIB opens (KSP over
TCP, and the SEPA gate's HTTP and WebSocket listeners, which `sib.cli` gives a `Guard`): how
many connections in all and per address, how many bytes of unfinished messages buffered across
all of them, how long a connection may stay silent, and how long one message may take to arrive
(slowloris).

A connection over a limit is closed, with one log line per limit and minute
(`ksp.ratelog`: a flood must not flood the log too); the others are not affected.

Fair share: "an address" is an IPv4 address, or an IPv6 /64 (one host holds a whole /64, so
counting its single addresses would cap nothing). When the listener is at `max_connections`, a
new connection from an address holding fewer connections than the address holding the most is
still admitted: the biggest holder's connection that has said the least is closed to make room
(one that has not finished a message yet, or said nothing since it was accepted, the oldest
first; else the one silent the longest). So connections from many addresses cannot keep a
new client out, while no address loses a connection to one holding as many as it does.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from ksp.hosts import address_key
from ksp.ratelog import RateLimitedLog

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
    on accept (False: close it), `buffered` after each read (False: close it; a listener that
    does not parse messages calls `heard` instead), `release` when a connection ends;
    `close(conn)` is how the guard closes one (the listener's callable), including the one a
    full listener reclaims for a smaller holder (module docstring)."""

    def __init__(self, limits: ConnectionLimits, name: str,
                 close: Callable[[Hashable], None]) -> None:
        self.limits = limits
        self.name = name
        self._close = close
        self._per_address: Counter[Hashable] = Counter()
        #: conn -> [address key, last read, frame start, bytes, said anything yet]
        self._conns: dict[Hashable, list] = {}
        self.total_buffered = 0
        self.refused: Counter[str] = Counter()  # closed connections, by limit
        self._log = RateLimitedLog(log, time.monotonic)
        self._sweeper: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self._conns)

    def admit(self, conn: Hashable, address: Hashable) -> bool:
        lim = self.limits
        address = address_key(address)
        if lim.max_per_address is not None and self._per_address[address] >= lim.max_per_address:
            return self._refuse("per address", f"{lim.max_per_address} connections from "
                                               f"{address}")
        if lim.max_connections is not None and len(self._conns) >= lim.max_connections:
            if not self._reclaim(address):
                return self._refuse("connections", f"{lim.max_connections} connections")
        now = time.monotonic()
        self._conns[conn] = [address, now, None, 0, False]
        self._per_address[address] += 1
        self._arm()
        return True

    def heard(self, conn: Hashable) -> None:
        """`conn` just read (for listeners that do not parse messages, so never call
        `buffered`): it has said something, and is not silent."""
        state = self._conns.get(conn)
        if state is not None:
            state[1], state[4] = time.monotonic(), True

    def _reclaim(self, address: Hashable) -> bool:
        """At the cap: close the connection that has said the least of the address holding the
        most, if `address` holds fewer than that one (module docstring). Whether it did."""
        most = max(self._per_address.values(), default=0)
        if self._per_address[address] >= most:
            return False
        victim, rank = None, None
        for conn, (addr, last, started, _, said) in self._conns.items():
            if self._per_address[addr] != most:
                continue
            mine = (0, started) if started is not None else (0, last) if not said else (1, last)
            if rank is None or mine < rank:
                victim, rank = conn, mine
        self.release(victim)
        self._refuse("reclaimed", f"the least active of {most} connections from the biggest "
                                  f"holder, for a new one from {address}")
        self._close(victim)
        return True

    def buffered(self, conn: Hashable, size: int) -> bool:
        """`conn` just read, and holds `size` bytes of an unfinished message."""
        state = self._conns.get(conn)
        if state is None:
            return True
        now = time.monotonic()
        state[1], state[4] = now, True
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
        for conn, (_, last, started, _, _) in list(self._conns.items()):
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
