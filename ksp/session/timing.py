"""Retransmission parameters (`Timing`, CoAP's defaults) and the deadline heap every session
waits on (`_Timers`)."""
from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Hashable
from dataclasses import dataclass

__all__ = ["Timing"]


@dataclass(frozen=True, slots=True)
class Timing:
    """Retransmission parameters, CoAP's defaults (RFC 7252 §4.8).

    A CON request (client) or an IND (server) is retransmitted after an initial timeout drawn
    uniformly from [ack_timeout, ack_timeout × ack_random_factor], doubled after each of at most
    `max_retransmit` retransmissions; one more timeout after the last one, the sender gives up.
    `exchange_lifetime` (how long a TID stays a duplicate at the server, and how long a NON
    request waits for a RES it may never get) defaults to CoAP's derivation
    MAX_TRANSMIT_SPAN + 2 × max_latency + ack_timeout = 45 + 200 + 2 = 247 s, so it follows
    the other parameters when they change. Client and server should use the same values.
    """

    ack_timeout: float = 2.0
    ack_random_factor: float = 1.5
    max_retransmit: int = 4
    max_latency: float = 100.0
    exchange_lifetime: float | None = None
    #: Seconds a persistent transaction may be silent (no IND) before the KP asks the SIB
    #: whether it still runs (a keepalive, UDP; 0: never). With `keepalive_retransmit`, how
    #: soon a KP that only listens learns that the SIB ended it or is gone: `liveness_bound`.
    keepalive: float = 25.0
    keepalive_retransmit: int = 2

    def __post_init__(self) -> None:
        if not self.ack_timeout > 0:
            raise ValueError(f"ack_timeout {self.ack_timeout} must be > 0")
        if not self.ack_random_factor >= 1:
            raise ValueError(f"ack_random_factor {self.ack_random_factor} must be >= 1")
        if self.max_retransmit < 0:
            raise ValueError(f"max_retransmit {self.max_retransmit} must be >= 0")
        if self.keepalive < 0 or self.keepalive_retransmit < 0:
            raise ValueError(f"keepalive {self.keepalive} and keepalive_retransmit "
                             f"{self.keepalive_retransmit} must be >= 0")
        if self.exchange_lifetime is None:
            object.__setattr__(self, "exchange_lifetime", self.max_transmit_span
                               + 2 * self.max_latency + self.ack_timeout)

    @property
    def max_transmit_span(self) -> float:
        """Longest time from the first to the last transmission of one message."""
        return self.ack_timeout * (2 ** self.max_retransmit - 1) * self.ack_random_factor

    @property
    def max_transmit_wait(self) -> float:
        """Longest time from the first transmission until the sender gives up."""
        return self.ack_timeout * (2 ** (self.max_retransmit + 1) - 1) * self.ack_random_factor

    @property
    def liveness_bound(self) -> float | None:
        """The longest a silent persistent transaction goes before the KP knows whether it
        runs: the keepalive's wait, then its retransmissions (None: no keepalive)."""
        if not self.keepalive:
            return None
        return self.keepalive + self.ack_timeout * self.ack_random_factor * (
            2 ** (self.keepalive_retransmit + 1) - 1)

    def initial_timeout(self, rng: random.Random) -> float:
        return self.ack_timeout * rng.uniform(1.0, self.ack_random_factor)


class _Timers:
    """One deadline per key, in a heap with lazy deletion (stale entries skipped, compacted)."""

    __slots__ = ("_heap", "_live", "_gen")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Hashable]] = []
        self._live: dict[Hashable, int] = {}
        self._gen = itertools.count()

    def set(self, key: Hashable, deadline: float) -> None:
        gen = next(self._gen)
        self._live[key] = gen
        heapq.heappush(self._heap, (deadline, gen, key))
        if len(self._heap) > 2 * len(self._live) + 64:
            live = self._live
            self._heap = [e for e in self._heap if live.get(e[2]) == e[1]]
            heapq.heapify(self._heap)

    def cancel(self, key: Hashable) -> None:
        self._live.pop(key, None)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._live

    def next(self) -> float | None:
        heap, live = self._heap, self._live
        while heap and live.get(heap[0][2]) != heap[0][1]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def pop_due(self, now: float) -> list[Hashable]:
        due = []
        while (deadline := self.next()) is not None and deadline <= now:
            key = heapq.heappop(self._heap)[2]
            del self._live[key]
            due.append(key)
        return due
