"""Guess limiting for secrets checked against an identity: KSP passwords (`sib.auth`), SEPA
registration secrets and client secrets (`sib.sepa.gate`).

Wrong guesses slow the *guesser* down, never the identity guessed at: a source address is
refused (KSP LIMIT_EXCEEDED, HTTP 429) for a while after its failures, so a device that has
never proved its password still gets in from its own address with the right one, however many
wrong ones others sent for it. How long a source waits grows exponentially:

- each failure counts against its source's host (IPv6: its /64, `ksp.hosts.address_key`) and
  against the identity it named (any name, listed or not: the answer does not tell them
  apart);
- past `free` failures of the source, *or of the identity* (many sources guessing one name),
  the failing source waits `base * 2**k` seconds before its next try, at most `cap`, where `k`
  is how far past `free` the larger of the two counts is; a source that has not failed is
  never held back;
- a key quiet for `forget_after` seconds starts again from zero.

Both tables keep at most `max_keys` keys, the least recently failed dropped first.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable

from ksp.hosts import address_key

from .fairness import host_of

__all__ = ["GuessLimit", "source_key"]


def source_key(source: Hashable) -> Hashable:
    """The key a transport address or an HTTP peer's host counts under."""
    return address_key(host_of(source))


class _Counts:
    """Failures per key: [count, last failure, held until], least recently failed first."""

    __slots__ = ("forget_after", "max_keys", "entries")

    def __init__(self, forget_after: float, max_keys: int) -> None:
        self.forget_after = forget_after
        self.max_keys = max_keys
        self.entries: OrderedDict[Hashable, list[float]] = OrderedDict()

    def get(self, key: Hashable, now: float) -> list[float] | None:
        entry = self.entries.get(key)
        if entry is not None and now - entry[1] >= self.forget_after and now >= entry[2]:
            del self.entries[key]
            return None
        return entry

    def add(self, key: Hashable, now: float) -> list[float]:
        entry = self.get(key, now)
        if entry is None:
            entry = self.entries[key] = [0, now, 0.0]
        entry[0] += 1
        entry[1] = now
        self.entries.move_to_end(key)
        while len(self.entries) > self.max_keys:
            self.entries.popitem(last=False)
        return entry

    def __len__(self) -> int:
        return len(self.entries)


class GuessLimit:
    """See the module docstring. `clock`: seconds, monotonic (tests pass their own)."""

    def __init__(self, *, free: int = 10, base: float = 1.0, cap: float = 60.0,
                 forget_after: float = 600.0, max_keys: int = 4096,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.free, self.base, self.cap = free, base, cap
        self.clock = clock
        self.by_source = _Counts(forget_after, max_keys)
        self.by_identity = _Counts(forget_after, max_keys)
        #: For metrics: tries refused for their source's wait.
        self.refused = 0

    def wait(self, source: Hashable) -> float:
        """Seconds `source` must wait before its next try is checked (0: try now). A refused
        try is counted (`refused`) but does not lengthen the wait."""
        entry = self.by_source.get(source_key(source), self.clock())
        if entry is None:
            return 0.0
        left = entry[2] - self.clock()
        if left <= 0:
            return 0.0
        self.refused += 1
        return left

    def failed(self, identity: Hashable, source: Hashable) -> float:
        """A wrong secret from `source` for `identity`: returns the source's wait from now."""
        now = self.clock()
        mine = self.by_source.add(source_key(source), now)
        theirs = self.by_identity.add(identity, now)
        k = int(max(mine[0], theirs[0])) - self.free
        if k < 0:
            return 0.0
        delay = self.cap if k >= 63 else min(self.cap, self.base * 2 ** k)
        mine[2] = max(mine[2], now + delay)
        return mine[2] - now

    def failures(self, *, source: Hashable | None = None,
                 identity: Hashable | None = None) -> int:
        """Failures counted now for `source` or `identity` (stats, tests)."""
        table, key = ((self.by_source, source_key(source)) if source is not None
                      else (self.by_identity, identity))
        entry = table.get(key, self.clock())
        return 0 if entry is None else int(entry[0])
