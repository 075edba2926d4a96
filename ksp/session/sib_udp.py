"""The SIB's UDP message layer, `UdpSIBSession`: the duplicate cache, IND retransmission with
back-off until an ACK covers it, tombstones of final INDs given up on, sealed datagrams."""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass

from ..codec import UDP, Transport
from ..codes import Tx
from ..delivery import Delivery, DeliveryPolicy
from ..model import Ack, Request
from ..secure import MAGIC, SealError
from ..seqnum import is_newer
from ..transactions import Exchange
from .events import AckReceived, KPIdentity, KPUnreachable
from .sib import SIBSession

__all__ = ["UdpSIBSession"]


@dataclass(slots=True)
class _Tombstone:
    """A final IND given up on (its KP silent past every retry): sent again, with a fresh
    retry schedule, when the KP is heard from, so an operation the SIB ended reaches a KP that
    was away for longer than the retries (`UdpSIBSession`)."""

    delivery: Delivery  # final, with the IND's sequence number
    data: bytes         # the final IND
    addr: Hashable | None  # where it went
    expires: float
    out: bool = False   # sent again: its delivery is back in the table, awaiting the ACK
    heard: bool = False  # the KP sent something else meanwhile, and no ACK of it


def _unindex(index: dict[Hashable, set], at: Hashable, key: Hashable) -> None:
    keys = index.get(at)
    if keys is not None:
        keys.discard(key)
        if not keys:
            del index[at]


class UdpSIBSession(SIBSession):
    """The SIB's UDP message layer: a duplicate cache answering copies of a request within
    EXCHANGE_LIFETIME, each IND retransmitted with back-off until an ACK covers it (R10), a
    newer one superseding it, bounded in bytes (`max_ind_bytes`); a final IND given up on kept
    as a tombstone for `tombstone_lifetime` seconds and sent again when its KP is heard from;
    sealed datagrams opened before anything else sees them."""

    IND_DELIVERY = DeliveryPolicy.ACKED

    def __init__(self, transport: Transport | str = UDP, *,
                 tombstone_lifetime: float = 86_400.0, **kwargs) -> None:
        if Transport(transport) is not UDP:
            raise ValueError("a UdpSIBSession is a UDP session")
        self._datagrams: list[tuple[bytes, Hashable]] = []
        super().__init__(UDP, **kwargs)
        self.tombstone_lifetime = tombstone_lifetime
        # (kp, tid) -> tombstone, oldest first (at most max_entries); and the keys by the
        # address the final IND went to and by KP identity, to find them when a datagram comes.
        self._tombstones: OrderedDict[tuple[KPIdentity, int], _Tombstone] = OrderedDict()
        self._tombstones_at: dict[Hashable, set[tuple[KPIdentity, int]]] = {}
        self._tombstones_of: dict[KPIdentity, set[tuple[KPIdentity, int]]] = {}

    def sizes(self) -> dict[str, int]:
        return {**super().sizes(), "tombstones": len(self._tombstones)}

    def datagrams_to_send(self, now: float) -> list[tuple[bytes, Hashable]]:
        """(datagram, address) pairs."""
        out, self._datagrams = self._datagrams, []
        return out

    def receive_datagram(self, data: bytes, addr: Hashable, now: float) -> None:
        self._expire(now)
        if data and data[0] == MAGIC and self.sealers is not None:
            try:  # verified before anything else sees it: a replay moves no exchange
                data, addr = self.sealers.open(data, addr)
            except SealError:
                self.stats.sealed_dropped += 1
                return
        self._on_message(bytes(data), addr, now)

    def _out(self, data: bytes, addr: Hashable) -> None:
        self._datagrams.append((data, addr))

    def _deliver(self, key: tuple[KPIdentity, int], d: Delivery, addr: Hashable, data: bytes,
                 now: float) -> None:
        self._keep_ind(d, data)
        self._send_indication(key, d, addr)
        if self._ind_bytes > self.max_ind_bytes:
            self._shed(key, now)
        if key not in self._timers:
            # Otherwise the schedule of the superseded IND goes on: new INDs arriving faster
            # than the timeout must not postpone KPUnreachable forever.
            self._start_backoff(key, d, now)

    def _forget(self, key: tuple[KPIdentity, int], d: Delivery, evicted: bool) -> None:
        self._keep_ind(d, None)
        super()._forget(key, d, evicted)
        t = self._tombstones.get(key)
        if t is not None and t.out:  # the final IND sent again was ACKed, or the KP ended it
            self._unbury(key)

    def _duplicate(self, key: tuple, addr: Hashable) -> bool:
        ex = self._cache.get(key)
        if ex is None:
            return False
        ex.addr = addr  # a retransmission (or a duplicated datagram)
        if ex.response is not None:
            self.stats.res_retransmissions_answered += 1
            self._send(ex.response, addr)
        else:
            self.stats.duplicates_ignored += 1
        return True

    def _remember(self, key: tuple, ex: Exchange, now: float) -> None:
        self._cache.add(key, ex, now)

    def _keep_ind(self, d: Delivery, data: bytes | None) -> None:
        """Set the IND kept for retransmission, counting its bytes."""
        self._ind_bytes += (len(data) if data else 0) - (len(d.data) if d.data else 0)
        d.data = data

    def _shed(self, keep: tuple[KPIdentity, int], now: float) -> None:
        """Over `max_ind_bytes`: give up on the oldest unacknowledged INDs (their KPs are
        reported unreachable, as if their retries had run out), never the one just sent."""
        for key, d in list(self._deliveries.items()):
            if self._ind_bytes <= self.max_ind_bytes:
                return
            if key != keep and d.data is not None:
                self._unreachable(key, d, self._endpoint(key[0]) or d.endpoint, now)

    def _start_backoff(self, key: tuple[KPIdentity, int], d: Delivery, now: float) -> None:
        """A new retransmission schedule for the IND just sent: full retry budget, first
        timeout drawn afresh."""
        d.retries = 0
        d.timeout = self.timing.initial_timeout(self._rng)
        self._timers.set(key, now + d.timeout)

    def _retry(self, key: tuple[KPIdentity, int], now: float) -> None:
        d = self._deliveries.get(key)
        if d is None or d.data is None:
            return
        addr = self._endpoint(key[0])
        if addr is None:
            addr = d.endpoint
        if d.retries >= self.timing.max_retransmit or addr is None:
            self._unreachable(key, d, addr, now)
            return
        d.retries += 1
        d.timeout *= 2
        self.stats.ind_retransmissions += 1
        self._send_indication(key, d, addr)
        self._timers.set(key, now + d.timeout)

    def _unreachable(self, key: tuple[KPIdentity, int], d: Delivery, addr: Hashable | None,
                     now: float) -> None:
        """Give up on the IND kept for `key`: `KPUnreachable`; the numbering stays, in case the
        SIB indicates again; a final IND leaves a tombstone."""
        if d.final:
            self._bury(key, d, addr, now)
        self._keep_ind(d, None)
        self._timers.cancel(key)
        if d.final:
            self.end_persistent(*key)
        self.stats.kp_unreachable += 1
        self._events.append(KPUnreachable(*key))

    def _send_indication(self, key: tuple[KPIdentity, int], d: Delivery,
                         addr: Hashable) -> None:
        self._send(d.data, addr)
        route = (addr, key[1])
        self._ack_routes[route] = key[0]
        self._ack_routes.move_to_end(route)
        while len(self._ack_routes) > self.max_entries:
            self._ack_routes.popitem(last=False)

    def _resend_to(self, kp: KPIdentity, addr: Hashable, now: float) -> None:
        """A KP ID heard from a new address (a device back from sleep, a new lease): its
        unacknowledged INDs go there at once, with a fresh retry budget, rather than at the next
        back-off step — which a device awake for moments would mostly sleep through."""
        for key, d in self._deliveries.items():
            if key[0] == kp and d.data is not None:
                self._send_indication(key, d, addr)
                self._start_backoff(key, d, now)

    # -- tombstones: final INDs given up on ------------------------------------------------

    def _expire(self, now: float) -> None:
        super()._expire(now)
        tombstones = self._tombstones
        while tombstones:
            key, t = next(iter(tombstones.items()))
            if t.expires > now:
                return
            if t.out:  # its retries stop too
                self.end_persistent(*key)
            if key in tombstones:
                self._unbury(key)

    def _bury(self, key: tuple[KPIdentity, int], d: Delivery, addr: Hashable | None,
              now: float) -> None:
        """Keep the final IND of `d`, given up on, to send it again when its KP is heard from:
        once ACKed it is gone. One given up on again keeps its place and expiry, unless the KP
        was heard from meanwhile: a KP that talks but never ACKs it has forgotten that TID (it
        ACKs no IND of a transaction it does not know, R13)."""
        t = self._tombstones.get(key)
        if t is not None:
            if t.heard:
                self._unbury(key)
            t.out = t.heard = False
            return
        if d.data is None or self.tombstone_lifetime <= 0:
            return
        self._tombstones[key] = _Tombstone(d, d.data, addr, now + self.tombstone_lifetime)
        if addr is not None:
            self._tombstones_at.setdefault(addr, set()).add(key)
        self._tombstones_of.setdefault(key[0], set()).add(key)
        while len(self._tombstones) > self.max_entries:
            self._unbury(next(iter(self._tombstones)))

    def _unbury(self, key: tuple[KPIdentity, int]) -> None:
        t = self._tombstones.pop(key)
        _unindex(self._tombstones_at, t.addr, key)
        _unindex(self._tombstones_of, key[0], key)

    def _heard_from(self, addr: Hashable, now: float, request: Request | None = None,
                    kp: KPIdentity | None = None) -> None:
        """Send the final INDs given up on at `addr` again. A request of `kp` first drops its
        tombstones under its own TID (a TERMINATE's target) or, for RESET, all of them: the KP
        has moved on from those."""
        if not self._tombstones:
            return
        tombstones = self._tombstones
        if request is not None:
            tid, reset = request.tid, request.tx is Tx.RESET
            for key in list(self._tombstones_of.get(kp, ())):
                if (reset or key[1] == tid) and not tombstones[key].out:
                    self._unbury(key)
        for key in list(self._tombstones_at.get(addr, ())):
            t = tombstones[key]
            if t.out:
                t.heard = True
            else:
                self._revive(key, t, addr, now)

    def _heard_of(self, kp: KPIdentity, addr: Hashable, now: float) -> None:
        tombstones = self._tombstones
        for key in list(self._tombstones_of.get(kp, ()) if tombstones else ()):
            if not tombstones[key].out:
                self._revive(key, tombstones[key], addr, now)

    def _revive(self, key: tuple[KPIdentity, int], t: _Tombstone, addr: Hashable,
                now: float) -> None:
        """Send the tombstone's final IND to `addr`, with a fresh retry schedule."""
        if t.addr != addr:  # where the KP is now
            _unindex(self._tombstones_at, t.addr, key)
            self._tombstones_at.setdefault(addr, set()).add(key)
            t.addr = addr
        t.out = True
        d = self.transactions.put_back(key, t.delivery)
        self._keep_ind(d, t.data)
        self.stats.ends_resent += 1
        self._send_indication(key, d, addr)
        self._start_backoff(key, d, now)

    def _on_ack(self, ack: Ack, addr: Hashable, now: float) -> None:
        kp = self._ack_routes.get((addr, ack.tid))
        self._events.append(AckReceived(kp, addr, ack.tid, ack.seq))
        if kp is None:
            self.stats.acks_unmatched += 1
            return
        key = (kp, ack.tid)
        d = self._deliveries.get(key)
        if d is None or d.data is None:
            return
        if ack.seq is None or not is_newer(d.seq, ack.seq):
            # Covers the newest IND (a bare ACK, R10, acknowledges the newest sent).
            self._keep_ind(d, None)
            d.acknowledged()
            d.retries = 0
            self._timers.cancel(key)
            if d.final:
                self.end_persistent(kp, ack.tid)
        else:
            # An older IND arrived: the KP is alive; the newest is still owed. Keep the schedule
            # (an ACK must not postpone a retransmission) but restart the retry budget.
            d.retries = 0
            d.timeout = self.timing.initial_timeout(self._rng)
