"""The SIB over UDP: `UdpMessageLayer` (the duplicate cache, each IND retransmitted with back-off
until an ACK covers it, tombstones of final INDs given up on) and `UdpSIBSession`, the session
over it with the datagram's input and output (sealed datagrams opened before anything else)."""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass

from ..codec import UDP, encode, peek_tid
from ..codes import RES_EPOCH, Status, Tx
from ..delivery import Delivery, DeliveryPolicy
from ..model import Ack, Request, Response
from ..secure import SealedAddr
from ..seqnum import is_newer
from ..transactions import PERSISTENT, Exchange
from .dedup import DuplicateCache
from .events import AckReceived, KPIdentity, KPUnreachable
from .layer import SibMessageLayer
from .sib import SIBSession
from .timing import _Timers
from .validation import AddressBudgets

__all__ = ["UdpMessageLayer", "UdpSIBSession"]

_OK = Status.OK
_UNKNOWN = Status.UNKNOWN_TRANSACTION

OpKey = tuple[KPIdentity, int]


class _Unacked:
    """The newest IND of a delivery while no ACK covers it, and its retransmission schedule."""

    __slots__ = ("data", "retries", "timeout")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.retries = 0
        self.timeout = 0.0


@dataclass(slots=True)
class _Tombstone:
    """A final IND given up on (its KP silent past every retry): sent again, with a fresh
    retry schedule, when the KP is heard from, so an operation the SIB ended reaches a KP that
    was away for longer than the retries (`UdpMessageLayer`)."""

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


class UdpMessageLayer(SibMessageLayer):
    """The SIB's UDP message layer: a duplicate cache answering copies of a request within
    EXCHANGE_LIFETIME, each IND retransmitted with back-off until an ACK covers it (R10), a
    newer one superseding it, bounded in bytes (`max_ind_bytes`); a final IND given up on kept
    as a tombstone for `tombstone_lifetime` seconds and sent again when its KP is heard from
    (the bounds: the session's `SessionOptions`). Until a source address is validated it is
    sent at most `amplification_factor` × what it sent (wire format 14, `budgets`)."""

    policy = DeliveryPolicy.ACKED
    sealed = True

    def __init__(self) -> None:
        self.tombstone_lifetime = 0.0  # the session's, once attached
        #: (datagram, address) pairs to send.
        self.datagrams: list[tuple[bytes, Hashable]] = []
        #: The IND kept for retransmission per operation, and their bytes in all.
        self.unacked: dict[OpKey, _Unacked] = {}
        self.ind_bytes = 0
        #: (address, TID) an IND went to -> the KP it was for: where an ACK belongs.
        self.ack_routes: OrderedDict[tuple[Hashable, int], KPIdentity] = OrderedDict()
        self.timers = _Timers()
        # (kp, tid) -> tombstone, oldest first (at most max_entries); and the keys by the
        # address the final IND went to and by KP identity, to find them when a datagram comes.
        self._tombstones: OrderedDict[OpKey, _Tombstone] = OrderedDict()
        self._tombstones_at: dict[Hashable, set[OpKey]] = {}
        self._tombstones_of: dict[KPIdentity, set[OpKey]] = {}

    def attach(self, session: SIBSession) -> None:
        super().attach(session)
        options = session.options
        self.tombstone_lifetime = options.tombstone_lifetime
        self._options = options  # its bounds, read on the path of every IND
        #: (kp, tid, tx, hash of the bytes) -> the request seen, and its RES.
        self.cache = DuplicateCache(session.timing.exchange_lifetime, options.max_entries,
                                    options.max_cache_bytes)
        #: Bytes received and sent per unvalidated address, and the validated ones (None: no
        #: limit, `amplification_factor` 0).
        self.budgets = (AddressBudgets(options.amplification_factor, options.max_addresses)
                        if options.amplification_factor else None)
        #: Each running operation's endpoint, pinned in `budgets` (at most one per delivery).
        self.pinned: dict[OpKey, Hashable] = {}

    def sizes(self) -> dict[str, int]:
        sizes = {"recent requests": len(self.cache), "ack routes": len(self.ack_routes),
                 "timers": len(self.timers._heap), "tombstones": len(self._tombstones)}
        if self.budgets is not None:
            sizes["validated addresses"] = self.budgets.validated_count
            sizes["address budgets"] = self.budgets.budget_count
        return sizes

    # -- the contract (`SibMessageLayer`) ----------------------------------------------------

    def send(self, data: bytes, addr: Hashable, answering: tuple | None = None) -> None:
        if type(addr) is not SealedAddr:  # the common case: no call
            budgets = self.budgets
            if budgets is None or budgets.spend(addr, len(data)):
                self.datagrams.append((data, addr))
            else:
                self._over_budget(data, addr)
            return
        out = self.session.seal(data, addr)
        if out is not None:
            if self.budgets is None or self.budgets.spend(out[1], len(out[0])):
                self.datagrams.append(out)
            else:
                self.session.stats.held_for_validation += 1

    def _over_budget(self, data: bytes, addr: Hashable) -> None:
        """`data` would take `addr` past its budget (wire format 14): a RES is replaced by
        ECHO REQUIRED, which fits unless the address sent less than one whole request; anything
        else waits (an IND is retransmitted as usual)."""
        self.session.stats.held_for_validation += 1
        code = data[1] if len(data) >= 4 else 0x80
        named = code & RES_EPOCH and len(data) >= 8  # the RES names its request's epoch (15.6)
        if not code & 0x80 and (code & (RES_EPOCH - 1 if named else 0x7F)) != 0x0F:
            epoch = int.from_bytes(data[4:8], "little") if named else None
            echo = self.session.echo_required(peek_tid(data), addr, self.session.now, epoch)
            if self.budgets.spend(addr, len(echo)):
                self.datagrams.append((echo, addr))

    def admits(self, request: Request, addr: Hashable) -> bool:
        budgets = self.budgets
        if budgets is None or request.tx not in PERSISTENT:
            return True
        return budgets.is_validated(addr.addr if type(addr) is SealedAddr else addr)

    def proven(self, addr: Hashable) -> None:
        if self.budgets is not None:
            self.budgets.validate(addr)

    def deliver(self, key: OpKey, d: Delivery, addr: Hashable, data: bytes, now: float) -> None:
        unacked = self.unacked.get(key)  # `_keep_ind(key, data)`, on the path of every IND
        if unacked is None:
            self.unacked[key] = _Unacked(data)
        else:
            self.ind_bytes -= len(unacked.data)
            unacked.data = data
        self.ind_bytes += len(data)
        self._send_indication(key, addr, data)
        if self.ind_bytes > self._options.max_ind_bytes:
            self._shed(key, now)
        if key not in self.timers._live:
            # Otherwise the schedule of the superseded IND goes on: new INDs arriving faster
            # than the timeout must not postpone KPUnreachable forever.
            self._start_backoff(key, now)

    def answered(self, ex: Exchange, data: bytes | None) -> None:
        self.cache.answered(ex, data)
        if data is not None:
            # Started (status OK, the request's epoch named or not): its keepalives find it.
            if ex.tx in PERSISTENT and data[1] & ~RES_EPOCH == 0:
                self._route(ex.addr, ex.key[1], ex.key[0])
                self._pin((ex.key[0], ex.key[1]), ex.addr)

    def duplicate(self, key: tuple, addr: Hashable) -> bool:
        return self.cache.answer_copy(key, addr, self.send, self.session.stats)

    def behind(self, key: tuple, number: int) -> int | None:
        return self.cache.behind(key, number)

    def remember(self, key: tuple, ex: Exchange, now: float, number: int = -1) -> None:
        self.cache.add(key, ex, now, number)

    def spent(self, kp: KPIdentity, number: int) -> None:
        self.cache.spent(kp, number)

    def forget(self, key: OpKey, d: Delivery, evicted: bool) -> None:
        self._pin(key, None)
        self._keep_ind(key, None)
        self.timers.cancel(key)
        t = self._tombstones.get(key)
        if t is not None and t.out:  # the final IND sent again was ACKed, or the KP ended it
            self._unbury(key)

    def ended(self, key: OpKey) -> None:
        self._pin(key, None)
        self.timers.cancel(key)

    def awaiting_ack(self, key: OpKey) -> bool:
        return key in self.unacked

    def get_timer(self) -> float | None:
        return self.timers.next()

    def handle_timer(self, now: float) -> None:
        for key in self.timers.pop_due(now):
            self._retry(key, now)

    def on_ack(self, ack: Ack, addr: Hashable, now: float) -> None:
        session = self.session
        kp = self.ack_routes.get((addr, ack.tid))
        session.emit(AckReceived(kp, addr, ack.tid, ack.seq))
        if kp is None:
            session.stats.acks_unmatched += 1
            if ack.seq is None:  # a keepalive of no operation of the KP's there
                self._keepalive_answer(ack.tid, False, addr)
            return
        key = (kp, ack.tid)
        unacked = self.unacked.get(key)
        if unacked is None:
            if ack.seq is None:  # a keepalive: nothing owed; say whether the operation runs
                self._keepalive_answer(ack.tid, key in session.transactions.deliveries, addr)
            return
        d = session.transactions.deliveries.get(key)
        if d is None:
            return
        if ack.seq is None or not is_newer(d.seq, ack.seq):
            # Covers the newest IND (a bare ACK, R10, acknowledges the newest sent).
            del self.unacked[key]  # `_keep_ind(key, None)`, on the path of every ACK
            self.ind_bytes -= len(unacked.data)
            d.acknowledged()
            self.timers.cancel(key)
            if d.final:
                session.end_persistent(kp, ack.tid)
        else:
            # An older IND arrived: the KP is alive; the newest is still owed. Keep the schedule
            # (an ACK must not postpone a retransmission) but restart the retry budget.
            unacked.retries = 0
            unacked.timeout = session.timing.initial_timeout(session.rng)

    def _keepalive_answer(self, tid: int, active: bool, addr: Hashable) -> None:
        """RES OK to a keepalive of a running operation, 0x0b when there is none (§2.4)."""
        self.send(encode(Response(tid, _OK if active else _UNKNOWN), UDP), addr)

    def moved(self, kp: KPIdentity, addr: Hashable, now: float) -> None:
        """A KP ID heard from a new address (a device back from sleep, a new lease): its
        unacknowledged INDs go there at once, with a fresh retry budget, rather than at the next
        back-off step — which a device awake for moments would mostly sleep through."""
        for key in self.session.transactions.deliveries:
            if key[0] == kp and key in self.unacked:
                self._send_indication(key, addr)
                self._start_backoff(key, now)

    # -- retransmission ----------------------------------------------------------------------

    def _keep_ind(self, key: OpKey, data: bytes | None) -> None:
        """Set the IND kept for retransmission (None: none), counting its bytes."""
        unacked = self.unacked.get(key)
        if unacked is not None:
            self.ind_bytes -= len(unacked.data)
            if data is None:
                del self.unacked[key]
            else:
                unacked.data = data
        elif data is not None:
            self.unacked[key] = _Unacked(data)
        if data is not None:
            self.ind_bytes += len(data)

    def _shed(self, keep: OpKey, now: float) -> None:
        """Over `max_ind_bytes`: give up on the oldest unacknowledged INDs (their KPs are
        reported unreachable, as if their retries had run out), never the one just sent."""
        session = self.session
        for key, d in list(session.transactions.deliveries.items()):
            if self.ind_bytes <= self._options.max_ind_bytes:
                return
            if key != keep and key in self.unacked:
                self._unreachable(key, d, session.endpoint(key[0]) or d.endpoint, now)

    def _start_backoff(self, key: OpKey, now: float) -> None:
        """A new retransmission schedule for the IND just sent: full retry budget, first
        timeout drawn afresh."""
        unacked = self.unacked[key]
        unacked.retries = 0
        unacked.timeout = self.session.timing.initial_timeout(self.session.rng)
        self.timers.set(key, now + unacked.timeout)

    def _retry(self, key: OpKey, now: float) -> None:
        session = self.session
        d = session.transactions.deliveries.get(key)
        unacked = self.unacked.get(key)
        if d is None or unacked is None:
            return
        addr = session.endpoint(key[0])
        if addr is None:
            addr = d.endpoint
        if unacked.retries >= session.timing.max_retransmit or addr is None:
            self._unreachable(key, d, addr, now)
            return
        unacked.retries += 1
        unacked.timeout *= 2
        session.stats.ind_retransmissions += 1
        self._send_indication(key, addr)
        self.timers.set(key, now + unacked.timeout)

    def _unreachable(self, key: OpKey, d: Delivery, addr: Hashable | None, now: float) -> None:
        """Give up on the IND kept for `key`: `KPUnreachable`; the numbering stays, in case the
        SIB indicates again; a final IND leaves a tombstone."""
        session = self.session
        if d.final:
            unacked = self.unacked.get(key)
            self._bury(key, d, None if unacked is None else unacked.data, addr, now)
        self._keep_ind(key, None)
        self.timers.cancel(key)
        if d.final:
            session.end_persistent(*key)
        session.stats.kp_unreachable += 1
        session.emit(KPUnreachable(*key))

    def _send_indication(self, key: OpKey, addr: Hashable, data: bytes | None = None) -> None:
        if data is None:
            data = self.unacked[key].data
        if type(addr) is SealedAddr:
            self.send(data, addr)
        elif self.budgets is None or self.budgets.spend(addr, len(data)):
            self.datagrams.append((data, addr))
        else:
            self.session.stats.held_for_validation += 1
        self._route(addr, key[1], key[0])
        self._pin(key, addr)

    def _pin(self, key: OpKey, addr: Hashable | None) -> None:
        """Operation `key`'s INDs go to `addr` (None: no more): its validation is kept while
        they do (wire format 14.5), whatever other addresses validate meanwhile."""
        budgets = self.budgets
        if budgets is None:
            return
        pinned = self.pinned
        old = pinned.get(key)
        if old == addr:
            return
        if old is not None:
            budgets.unpin(old)
        if addr is None or type(addr) is SealedAddr:
            pinned.pop(key, None)
            return
        pinned[key] = addr
        budgets.pin(addr)

    def _route(self, addr: Hashable, tid: int, kp: KPIdentity) -> None:
        """ACKs (and keepalives) of `tid` from `addr` are `kp`'s."""
        routes = self.ack_routes
        route = (addr, tid)
        routes[route] = kp
        routes.move_to_end(route)
        while len(routes) > self._options.max_entries:
            routes.popitem(last=False)

    # -- tombstones: final INDs given up on ------------------------------------------------

    def expire(self, now: float) -> None:
        self.cache.expire(now)
        tombstones = self._tombstones
        while tombstones:
            key, t = next(iter(tombstones.items()))
            if t.expires > now:
                return
            if t.out:  # its retries stop too
                self.session.end_persistent(*key)
            if key in tombstones:
                self._unbury(key)

    def _bury(self, key: OpKey, d: Delivery, data: bytes | None, addr: Hashable | None,
              now: float) -> None:
        """Keep the final IND `data` of `d`, given up on, to send it again when its KP is heard
        from: once ACKed it is gone. One given up on again keeps its place and expiry, unless
        the KP was heard from meanwhile: a KP that talks but never ACKs it has forgotten that
        TID (it ACKs no IND of a transaction it does not know, R13)."""
        t = self._tombstones.get(key)
        if t is not None:
            if t.heard:
                self._unbury(key)
            t.out = t.heard = False
            return
        if data is None or self.tombstone_lifetime <= 0:
            return
        self._tombstones[key] = _Tombstone(d, data, addr, now + self.tombstone_lifetime)
        if addr is not None:
            self._tombstones_at.setdefault(addr, set()).add(key)
        self._tombstones_of.setdefault(key[0], set()).add(key)
        while len(self._tombstones) > self.session.max_entries:
            self._unbury(next(iter(self._tombstones)))

    def _unbury(self, key: OpKey) -> None:
        t = self._tombstones.pop(key)
        _unindex(self._tombstones_at, t.addr, key)
        _unindex(self._tombstones_of, key[0], key)

    def heard_from(self, addr: Hashable, now: float, request: Request | None = None,
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

    def heard_of(self, kp: KPIdentity, addr: Hashable, now: float) -> None:
        tombstones = self._tombstones
        for key in list(self._tombstones_of.get(kp, ()) if tombstones else ()):
            if not tombstones[key].out:
                self._revive(key, tombstones[key], addr, now)

    def _revive(self, key: OpKey, t: _Tombstone, addr: Hashable, now: float) -> None:
        """Send the tombstone's final IND to `addr`, with a fresh retry schedule."""
        if t.addr != addr:  # where the KP is now
            _unindex(self._tombstones_at, t.addr, key)
            self._tombstones_at.setdefault(addr, set()).add(key)
            t.addr = addr
        t.out = True
        self.session.transactions.put_back(key, t.delivery)
        self._keep_ind(key, t.data)
        self.session.stats.ends_resent += 1
        self._send_indication(key, addr)
        self._start_backoff(key, now)


class UdpSIBSession(SIBSession):
    """The SIB over UDP: the session over a `UdpMessageLayer`, one per socket; sealed datagrams
    are opened before anything else sees them (`receive_message`)."""

    LAYER = UdpMessageLayer
    TRANSPORT = UDP

    @property
    def tombstone_lifetime(self) -> float:
        """Seconds a final IND given up on is kept, to send it again when its KP is heard."""
        return self.layer.tombstone_lifetime

    @property
    def _cache(self) -> DuplicateCache:
        return self.layer.cache

    @property
    def _ind_bytes(self) -> int:
        return self.layer.ind_bytes

    def datagrams_to_send(self, now: float) -> list[tuple[bytes, Hashable]]:
        """(datagram, address) pairs."""
        out, self.layer.datagrams = self.layer.datagrams, []
        return out

    def receive_datagram(self, data: bytes, addr: Hashable, now: float) -> None:
        budgets = self.layer.budgets
        if budgets is not None:
            budgets.received(addr, len(data))
        self.receive_message(data, addr, now)
