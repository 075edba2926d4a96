"""Fair shares of the SIB's caps in all: what one party holds of a cap (requests queued for the
scheduler, SEPA subscriptions) is bounded too, so one party cannot fill the cap in all and
shut everyone else out; the cap in all still bounds memory.

A party is whom a request speaks for: a KP with a KP ID (CREDENTIALS) or a SEPA client with a
token is that identity; an anonymous one is its host address (IPv6: its /64,
`ksp.hosts.address_key`), not its transport address, since a KP without a KP ID
sending from many ports would otherwise be many parties.
"""
from __future__ import annotations

import asyncio
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable
from contextvars import ContextVar

from ksp.secure import SealedAddr
from ksp.session import KPIdentity
from ksp.hosts import address_key

__all__ = ["Pace", "ShareExceeded", "Shares", "client_party", "current_party", "kp_party"]

#: The party of the SEPA request being handled, which `Sib.call` counts its work against (set
#: by the gate in the request's task; None: nobody's, not counted).
current_party: ContextVar[Hashable | None] = ContextVar("current_party", default=None)


class ShareExceeded(asyncio.QueueFull):
    """A party holds its share of a cap (a `QueueFull`: whoever handles a full queue handles
    this too; the SEPA gate answers it 429 rather than 503)."""


def host_of(addr: Hashable) -> Hashable:
    """The host of a transport address: a TCP connection's peer host, a datagram's (host,
    port)'s host; anything else as it is."""
    host = getattr(addr, "peer_host", None)
    if host is not None:
        return host
    if isinstance(addr, tuple) and addr and isinstance(addr[0], str):
        return addr[0]
    return addr


def kp_party(kp: KPIdentity) -> Hashable:
    """A KSP request's party: its KP ID, else its host address."""
    if kp.kp_id is not None:
        return ("kp", kp.kp_id)
    if isinstance(kp.addr, SealedAddr):  # a sealed message names its (verified) KP ID
        return ("kp", kp.addr.kp_id)
    return ("address", address_key(host_of(kp.addr)))


def client_party(identity: str | None, host: str | None) -> Hashable:
    """A SEPA request's party: its token's client (secure mode), else its host address."""
    if identity is not None:
        return ("client", identity)
    return ("address", address_key(host))


class Shares:
    """How much of a cap each party holds, at most `per_party` each (None: no bound)."""

    def __init__(self, per_party: int | None) -> None:
        self.per_party = per_party
        self._held: Counter[Hashable] = Counter()

    def take(self, party: Hashable) -> bool:
        """One more for `party`, unless it holds its share already (False: nothing taken).
        Without a bound nothing is counted (the request path stays as fast)."""
        if self.per_party is None:
            return True
        held = self._held.get(party, 0)
        if held >= self.per_party:
            return False
        self._held[party] = held + 1
        return True

    def full(self, party: Hashable) -> bool:
        """Whether `party` holds its share (to check before work that may fail, and `take`
        after it)."""
        return self.per_party is not None and self._held.get(party, 0) >= self.per_party

    def give(self, party: Hashable) -> None:
        """One given back by `party`."""
        left = self._held.get(party, 0) - 1
        if left > 0:
            self._held[party] = left
        else:
            self._held.pop(party, None)

    def held(self, party: Hashable) -> int:
        return self._held.get(party, 0)

    def __len__(self) -> int:
        """Parties holding anything."""
        return len(self._held)


class Pace:
    """At most `rate` requests a second from each party, after a burst of `burst` (default:
    a second's worth). Every request costs the event loop that the devices' requests and
    INDs also need (a SEPA request refused at once still ~0.1 ms), so one party sending as
    fast as it can would slow everyone. A request ahead of its party's pace waits its turn
    (`delay`); HTTP/1.1 connections and WebSockets send the next only after, so a client is
    slowed, not refused. One that would wait more than `most` seconds is refused (many
    connections of one party at once). The generic cell rate algorithm: one time per party,
    at most `parties` of them kept (the least recently seen go: they are owed nothing)."""

    def __init__(self, rate: float | None, burst: float | None = None, most: float = 1.0,
                 parties: int = 65_536, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.burst = burst if burst is not None else (rate or 0)
        self.most = most
        self.parties = parties
        self.clock = clock
        self._due: OrderedDict[Hashable, float] = OrderedDict()
        #: Requests made to wait, and refused, since the start.
        self.waited = 0
        self.refused = 0

    @property
    def remembered(self) -> int:
        """Parties whose pace is kept now (at most `parties`): the table's size, for metrics."""
        return len(self._due)

    def delay(self, party: Hashable) -> float | None:
        """Seconds the request of `party` waits before it runs (0.0: none), its turn then
        taken; None: it would wait past `most` — refuse it (nothing taken)."""
        if not self.rate:
            return 0.0
        now = self.clock()
        interval = 1.0 / self.rate
        due = max(self._due.get(party, now), now)  # when its next request is in pace
        wait = due - now - max(self.burst - 1, 0) * interval
        if wait > self.most:
            self.refused += 1
            return None
        self._due[party] = due + interval
        self._due.move_to_end(party)
        while len(self._due) > self.parties:
            self._due.popitem(last=False)
        if wait > 1e-6:  # not a rounding error of the sums above
            self.waited += 1
            return wait
        return 0.0

    async def wait(self, party: Hashable) -> bool:
        """`delay`'s wait, slept; False if refused."""
        wait = self.delay(party)
        if wait is None:
            return False
        if wait:
            await asyncio.sleep(wait)
        return True
