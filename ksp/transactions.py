"""The KSP transaction layer, transport-agnostic: what a request, its RES and the INDs of a
persistent operation mean, whatever carries them (UDP, TCP or CoAP).

Below it sit the message layers, which differ per transport: UDP's (CON retransmission with
back-off, ACKs, the duplicate cache: `ksp.session.sib_udp`), TCP's framing (`ksp.framing`,
`ksp.session.sib_tcp`), CoAP's (aiocoap's reliability and Observe: `transports.coap`), each
keeping the contract of `ksp.session.layer.SibMessageLayer` on the SIB side. They hand this
layer decoded requests and answers and get back bytes to send; this layer never sees an
address, a socket or a clock (sans-I/O, like the rest of `ksp/`).

Server side, `SibTransactions`:
- **matching a RES to its request** by (KP identity, TID): the table of executing requests;
- **the persistent-operation lifecycle**: one starts with its request and stays with an OK RES;
  a failed RES, an OK (or 0x0b) TERMINATE, an OK RESET (every operation of that KP) or a final
  IND ends it; its `ksp.delivery.Delivery` is the one owner of its numbering and state;
- **the NON rule**: an OK RES without a result to a NON request is not sent (the paper);
- **MAX RESPONSE SIZE**: every RES and IND is cut to the request's limit and the transport's
  payload cap (one datagram over UDP and CoAP);
- **IND numbering** (§9, for transports that number) and one encoding of a result shared by
  every subscriber of it (`ksp.codec.retag`).

Client side, `KpTransactions`: Transaction IDs (R12), the transaction type each pending TID
answers, the persistent operations the KP considers active, recently ended ones, and the
stale-IND rule (§9: only an IND newer than every one delivered is delivered).
"""
from __future__ import annotations

import random
from array import array
from collections import OrderedDict
from collections.abc import Callable, Hashable

from .codec import Transport, UDP, encode, retag
from .codes import Status, Tx
from .delivery import MAX_UDP_PAYLOAD, Delivery, DeliveryPolicy, DeliveryState, encoding_digest
from .errors import KspError
from .model import Request, Response
from .seqnum import is_newer

__all__ = ["SibTransactions", "KpTransactions", "Exchange", "SessionError", "TidsBusy",
           "PERSISTENT", "STATEFUL", "NUMBERS", "epoch_of", "random_start"]

# `tx in PERSISTENT` rather than the `Tx.persistent` property: a set lookup instead of a Python
# call, on every request and RES. STATEFUL: transactions whose RES starts or ends persistent
# transactions; one lookup spares the others `Tx.X` attribute reads, which go through the enum
# metaclass's __getattr__ hook on Python 3.11 (50 ns each, 7× a global).
PERSISTENT = frozenset(tx for tx in Tx if tx.persistent)
STATEFUL = PERSISTENT | {Tx.TERMINATE, Tx.RESET}
_OK = Status.OK
_ENDS = (Status.OK, Status.UNKNOWN_TRANSACTION)
_BEHIND = Status.NUMBER_BEHIND

OpKey = tuple[Hashable, int]
#: Request numbers are 48 bits: a u32 epoch (the EPOCH option) above the 16-bit TID.
NUMBERS = 1 << 48


class SessionError(KspError):
    """A call the session's state does not allow: the caller's fault, never the peer's."""


class TidsBusy(SessionError):
    """No TID may carry a request now: every one is held (`KpTransactions.hold`: its request was
    retransmitted or timed out within EXCHANGE_LIFETIME). Nothing was sent; send it again at
    `retry_at` (the clock of `now`). Only a KP with 65 536 such requests in EXCHANGE_LIFETIME
    meets this."""

    def __init__(self, retry_at: float) -> None:
        super().__init__("every transaction ID is held by a request retransmitted or timed "
                         "out within EXCHANGE_LIFETIME")
        self.retry_at = retry_at


def random_start(rng: random.Random) -> int:
    """Where a KP whose identity outlives its memory (a KP ID) starts counting: a random epoch
    of 1 … 2^31 − 1 and TID (wire format 15)."""
    return (rng.randrange(1, 1 << 31) << 16) | rng.randrange(0x10000)


def epoch_of(number: int) -> int | None:
    """The EPOCH option's value for request `number` (wire format 15): None for epoch 0."""
    return (number >> 16) or None


class Exchange:
    """One request of one KP identity: executing until answered. `key`: the message layer's
    for it (its duplicate cache's), `addr`: where its RES goes (a copy's moves it), `epoch`:
    its number's (wire format 15; None: 0), which its RES names."""

    __slots__ = ("key", "tx", "addr", "confirmable", "max_size", "serial", "epoch")

    def __init__(self, key: tuple, tx: Tx, addr: Hashable, confirmable: bool,
                 max_size: int | None, serial: int = 0, epoch: int | None = None) -> None:
        self.key = key
        self.tx = tx
        self.addr = addr
        self.confirmable = confirmable
        self.max_size = max_size
        self.serial = serial
        self.epoch = epoch


class SibTransactions:
    """The SIB's transaction layer for one message layer (see the module docstring).

    `transport`: the layout of what it encodes; `policy`: how the message layer delivers INDs
    (`DeliveryPolicy`: numbered, ACKed at the KSP level, kept by a journal; a SIB session
    passes its message layer's, `DeliveryPolicy.UNJOURNALED` when none is named). Tables hold
    at most `max_entries` each, oldest evicted; `on_forget(key, delivery, evicted)` is called
    for every delivery that ends or (`evicted`) leaves the full table, so the message layer
    drops what it holds for it (an IND kept for retransmission, an observation). An evicted
    delivery lives on where its holder keeps it (a channel, a CoAP resource) and comes back
    with its next IND (`delivery_for`).
    """

    def __init__(self, transport: Transport = UDP, *,
                 policy: DeliveryPolicy = DeliveryPolicy.UNJOURNALED,
                 max_entries: int = 65_536,
                 on_forget: Callable[[OpKey, Delivery, bool], None] | None = None) -> None:
        self.transport = transport
        self.payload_cap = MAX_UDP_PAYLOAD if transport is UDP else None
        self.policy = policy
        self.max_entries = max_entries
        self.on_forget = on_forget
        self.executing: OrderedDict[OpKey, Exchange] = OrderedDict()
        self.deliveries: OrderedDict[OpKey, Delivery] = OrderedDict()
        # The last IND encoded with a result: (result, (status, version, max_size), bytes).
        self._shared: tuple | None = None
        self._shared_digest: tuple[bytes, bytes] | None = None  # (encoding, its digest)

    # -- requests and their RES ------------------------------------------------------------

    def begin(self, kp: Hashable, request: Request, addr: Hashable, serial: int = 0,
              cache_key: tuple | None = None) -> Exchange:
        """A new request to execute; a persistent one gets (or keeps) its delivery, whose
        fallback endpoint is where the request came from. `cache_key`: the message layer's
        key for the exchange (its duplicate cache's), else (kp, tid, tx)."""
        options = request.options
        tid, tx, max_size = request.tid, request.tx, options.max_response_size
        key = (kp, tid)
        ex = Exchange(cache_key or (kp, tid, tx), tx, addr, request.confirmable, max_size,
                      serial, options.epoch if self.transport is UDP else None)
        executing = self.executing
        executing[key] = ex
        executing.move_to_end(key)
        while len(executing) > self.max_entries:
            executing.popitem(last=False)
        if tx in PERSISTENT:
            d = self.deliveries.get(key)
            if d is None or d.final:  # a new operation under the TID of one that ended
                self._adopt(key, self.new_delivery(kp, tid, addr, max_size))
            else:
                d.endpoint, d.max_size = addr, max_size
        return ex

    def answer(self, kp: Hashable, tid: int, response: Response
               ) -> tuple[Exchange | None, bytes | None]:
        """The RES of request `tid` of `kp`: the exchange it answers (None if unknown: evicted,
        or unsolicited) and its encoding, cut to MAX RESPONSE SIZE — None when the NON rule
        says nothing is sent. Settles the persistent operations the RES starts or ends."""
        if response.tid != tid or response.indication:
            raise SessionError(f"respond({tid}) needs a RES with TID {tid}")
        ex = self.executing.pop((kp, tid), None)
        if ex is None:
            return None, encode(response, self.transport, max_size=self.cap(None))
        status, tx = response.status, ex.tx
        data = None
        if ex.confirmable or status != _OK or response.result is not None:
            # The RES names the request it answers (wire format 15.6); not NUMBER BEHIND.
            named = response if ex.epoch is None or status == _BEHIND else response._replace(
                epoch=ex.epoch)
            data = encode(named, self.transport, max_size=self.cap(ex.max_size))
        if tx in STATEFUL:
            self._settle(kp, tid, tx, response)
        return ex, data

    def _settle(self, kp: Hashable, tid: int, tx: Tx, response: Response) -> None:
        status = response.status
        if tx in PERSISTENT:
            d = self.deliveries.get((kp, tid))
            if d is None:
                return
            if status == _OK:
                d.responded(response)
            elif d.seq is None:
                self.end(kp, tid)  # never started
        elif tx is Tx.TERMINATE:
            if status in _ENDS:
                self.end(kp, tid)
        elif tx is Tx.RESET and status == _OK:
            for key in [k for k in self.deliveries if k[0] == kp]:
                self.end(*key)

    # -- INDs ------------------------------------------------------------------------------

    def delivery_for(self, kp: Hashable, tid: int, held: Delivery | None = None) -> Delivery:
        """The delivery of (kp, tid) for an IND: the table's, else `held` (the caller's, evicted
        meanwhile) put back, else a new one. Refuses an operation that has ended."""
        key = (kp, tid)
        d = self.deliveries.get(key)
        if d is None:
            d = self._adopt(key, held if held is not None else self.new_delivery(kp, tid))
        else:
            self.deliveries.move_to_end(key)
        if d.final:
            raise SessionError(f"persistent transaction {tid} of {kp} has ended")
        return d

    def indication(self, d: Delivery, response: Response) -> bytes | None:
        """Encode the IND `response` of delivery `d`: numbered, cut to its MAX RESPONSE SIZE,
        recorded in `d`. None: after a restart, the state the KP had ACKed (nothing to send)."""
        if response.tid != d.tid:
            raise SessionError(f"indicate({d.tid}) needs an IND with TID {d.tid}")
        if d.restored and d.redundant(response):
            return None
        data, base = self._encode_indication(response, d.next_seq(response),
                                             self.cap(d.max_size))
        d.indicated(response, self._digest(base) if d.durable else None,
                    delivered=not self.policy.acked)
        return data

    def end(self, kp: Hashable, tid: int) -> Delivery | None:
        """Forget the delivery of (kp, tid) (no more INDs); idempotent."""
        d = self.deliveries.pop((kp, tid), None)
        if d is not None and self.on_forget is not None:
            self.on_forget((kp, tid), d, False)
        return d

    # -- the owner's state, for a journal ----------------------------------------------------

    def new_delivery(self, kp: Hashable, tid: int, endpoint: Hashable | None = None,
                     max_size: int | None = None) -> Delivery:
        return Delivery(kp, tid, endpoint, max_size, numbered=self.policy.numbered,
                        durable=self.policy.durable)

    def put_back(self, key: OpKey, d: Delivery) -> Delivery:
        """Take back a delivery the message layer kept after it ended (a final IND given up on,
        sent again when the KP is heard from)."""
        return self._adopt(key, d)

    def restore(self, kp: Hashable, tid: int, state: DeliveryState) -> Delivery:
        policy = self.policy
        return self._adopt((kp, tid), Delivery.restore(kp, tid, state, numbered=policy.numbered,
                                                       durable=policy.durable))

    def _adopt(self, key: OpKey, d: Delivery) -> Delivery:
        deliveries = self.deliveries
        old = deliveries.get(key)
        if old is not None and old is not d and self.on_forget is not None:
            self.on_forget(key, old, False)
        deliveries[key] = d
        deliveries.move_to_end(key)
        while len(deliveries) > self.max_entries:
            gone_key, gone = deliveries.popitem(last=False)
            if self.on_forget is not None:
                self.on_forget(gone_key, gone, True)
        return d

    # -- encoding --------------------------------------------------------------------------

    def cap(self, max_size: int | None) -> int | None:
        """A request's MAX RESPONSE SIZE within the transport's payload cap."""
        cap = self.payload_cap
        if cap is None:
            return max_size
        return cap if max_size is None else min(max_size, cap)

    def _encode_indication(self, response: Response, seq: int | None,
                           max_size: int | None) -> tuple[bytes, bytes]:
        """Subscribers of one result (the same object, as a SIB hands it to each) share its
        encoding: only the TID and sequence number differ (`ksp.codec.retag`). Returns the
        IND and the shared encoding it was made from (for its digest, taken once)."""
        result = response.result
        form = (response.status, response.version, max_size)
        shared = self._shared
        if result is not None and shared is not None and shared[0] is result and (
                shared[1] == form):
            return retag(shared[2], response.tid, seq), shared[2]
        data = encode(response._replace(indication=True, seq=seq), self.transport,
                      max_size=max_size)
        if result is not None:
            self._shared = (result, form, data)
        return data, data

    def _digest(self, base: bytes) -> bytes:
        """The digest of a shared IND encoding, taken once for all its subscribers."""
        cached = self._shared_digest
        if cached is None or cached[0] is not base:
            cached = self._shared_digest = (base, encoding_digest(base))
        return cached[1]


# ---------------------------------------------------------------------------------------------
# Client


class _Persistent:
    __slots__ = ("tx", "last_seq")

    def __init__(self, tx: Tx) -> None:
        self.tx = tx
        self.last_seq: int | None = None


class KpTransactions:
    """The KP's transaction layer (see the module docstring). `pending` maps each TID waiting
    for its RES to whatever the message layer keeps for it (it must have a `tx`).

    Request numbers (wire format 15): each new request gets a number above every one given
    before, N = epoch × 65 536 + TID, counting up from `start` (by default epoch 0 and a random
    TID, like CoAP's message IDs) and skipping numbers whose TID is taken (`next_tid`). The
    SIB tells by numbers a copy from a new request, whatever the delays."""

    def __init__(self, rng: random.Random | None = None, *, lifetime: float = 247.0,
                 max_ended: int = 256, start: int | None = None) -> None:
        self._rng = rng if rng is not None else random.Random()
        self.restart_at(self._rng.randrange(0x10000) if start is None else start)
        self.lifetime = lifetime
        self.max_ended = max_ended
        self.pending: dict[int, object] = {}
        self.persistent: dict[int, _Persistent] = {}
        # Recently ended persistent transactions: tid -> (expiry, ACK its late INDs?).
        self.ended: OrderedDict[int, tuple[float, bool]] = OrderedDict()
        # Per TID: the number `next_tid` gave out with it and not yet sent (-1: none), and until
        # when no request may go under it (`hold`). Fixed arrays of 65 536: bounded, one lookup
        # per request.
        self._issued = array("q", b"\xff" * (8 * 0x10000))
        self._held_until = array("d", bytes(8 * 0x10000))

    @property
    def cursor(self) -> int:
        """The TID `next_tid` tries first (the next number's). A KP that kept its place across a
        sleep or a restart (firmware keeps it in RTC RAM) goes on from there (`restart_at`)."""
        return (max(self.last_number, self.used) + 1) & 0xFFFF

    @cursor.setter
    def cursor(self, tid: int) -> None:
        if not 0 <= tid <= 0xFFFF:
            raise ValueError(f"a TID is 0 to 65535, not {tid}")
        base = max(self.last_number, self.used) + 1
        self.last_number = base + ((tid - base) & 0xFFFF) - 1

    def restart_at(self, start: int) -> None:
        """Count from number `start` on, as if nothing had been sent (a KP ID's random start,
        or a number kept across a restart)."""
        if not 0 <= start < NUMBERS:
            raise ValueError(f"a request number is 0 to 2^48 - 1, not {start}")
        self.last_number = start - 1  # the highest number `next_tid` gave out
        # Below every number a request went under: a TID the caller chose takes the next one
        # above it (the start's epoch, at first).
        self.used = ((start >> 16) << 16) - 1

    def next_tid(self) -> int:
        """The TID of the next number whose TID no pending request, active or recently ended
        persistent transaction uses (R12); the number is the request's when it is sent under
        that TID (`number`)."""
        n = max(self.last_number, self.used) + 1
        for _ in range(0x10000):
            tid = n & 0xFFFF
            if tid not in self.pending and tid not in self.persistent and tid not in self.ended:
                self.last_number = n
                self._issued[tid] = n
                return tid
            n += 1
        raise SessionError("every transaction ID is in use")

    def number(self, tid: int) -> int:
        """The number a new request sent under `tid` gets: the one `next_tid` gave out with
        it, else (a TID the caller chose) the first number with that TID above every number
        used."""
        n = self._issued[tid]
        if n > self.last_number - 0x10000 and n >= 0:
            self._issued[tid] = -1
        else:
            base = self.used + 1
            n = base + ((tid - base) & 0xFFFF)
            self.last_number = max(self.last_number, n)
        self.used = max(self.used, n)
        return n

    def behind(self, next_epoch: int) -> None:
        """The SIB takes numbers as new only from epoch `next_epoch` (RES 0x10, wire format
        15): count on from there."""
        self.last_number = max(self.last_number, (next_epoch << 16) - 1)
        self.used = max(self.used, (next_epoch << 16) - 1)

    def unheld(self, tid: int, now: float, tries: int = 64) -> int:
        """`tid`, or else the next TID (`next_tid`) that is not held now (`hold`). Raises
        `TidsBusy` after `tries` TIDs, the count left where it was, with the soonest end of
        their holds (`tid`'s is tried first again then)."""
        held = self._held_until
        if held[tid] <= now:
            return tid
        mark, soonest = self.last_number, held[tid]
        for _ in range(tries):
            candidate = self.next_tid()
            if held[candidate] <= now:
                return candidate
            soonest = min(soonest, held[candidate])
        self.last_number = mark
        raise TidsBusy(soonest)

    def hold(self, tid: int, now: float) -> None:
        """No request goes under `tid` for EXCHANGE_LIFETIME: its request timed out (the SIB may
        still be executing it, and would answer it for the next), or was sent more than once
        (the SIB answers each copy: a RES of it may still be on its way, which would be taken
        for the next request's)."""
        self._held_until[tid] = now + self.lifetime

    def check(self, tid: int, tx: Tx) -> None:
        """Refuse what R12 forbids before a request is sent."""
        if not 0 <= tid <= 0xFFFF:
            raise SessionError(f"transaction ID {tid} outside 0..65535")
        if tid in self.pending:
            raise SessionError(f"transaction {tid} is still waiting for its RES")
        if tid in self.persistent and tx is not Tx.TERMINATE:
            raise SessionError(f"transaction {tid} is an active persistent transaction "
                                   "(R12)")

    def sent(self, tid: int, tx: Tx, entry: object) -> None:
        """Request `tid` left: it waits for its RES; a persistent one is active from now."""
        self.pending[tid] = entry
        if tx in PERSISTENT:
            self.persistent[tid] = _Persistent(tx)
            self.ended.pop(tid, None)

    def answered(self, tid: int, tx: Tx, status: Status | int, now: float) -> None:
        """What the RES of a persistent request, TERMINATE or RESET does to the persistent
        transactions (call it for those three; the RES's pending entry is the caller's)."""
        if tx in PERSISTENT:
            if status != _OK:
                self.persistent.pop(tid, None)  # never started
        elif tx is Tx.TERMINATE:
            if status in _ENDS and self.persistent.pop(tid, None):
                self.tombstone(tid, now, ack=True)
        elif tx is Tx.RESET and status == _OK:
            for other in [t for t in self.persistent if t not in self.pending]:
                del self.persistent[other]
                self.tombstone(other, now, ack=True)

    def gave_up(self, tid: int, tx: Tx, now: float) -> None:
        """No RES will come for `tid`. Whether the SIB started a persistent one is unknown: its
        INDs go un-ACKed, so the SIB's retries run out and it ends the orphan; the TID is kept
        out of use meanwhile."""
        if tx in PERSISTENT and self.persistent.pop(tid, None) is not None:
            self.tombstone(tid, now, ack=False)
        self.hold(tid, now)

    def active(self, tid: int) -> Tx | None:
        """The type of active persistent transaction `tid` (its INDs are decoded by it), None
        when there is none (its INDs are not ACKed, so the SIB gives up on them, R13)."""
        sub = self.persistent.get(tid)
        return None if sub is None else sub.tx

    def fresh(self, tid: int, seq: int) -> bool:
        """The stale-IND rule (§9): whether an IND of active `tid` numbered `seq` is newer than
        every one delivered (then it is the newest); False: stale or a duplicate."""
        sub = self.persistent[tid]
        if not is_newer(seq, sub.last_seq):
            return False
        sub.last_seq = seq
        return True

    def ended_by(self, tid: int, now: float) -> None:
        """A non-OK IND ended persistent transaction `tid`."""
        if self.persistent.pop(tid, None) is not None:
            self.tombstone(tid, now, ack=True)

    def acks_late(self, tid: int) -> bool:
        """Whether a late IND of an ended `tid` is ACKed (its final IND sent again, or one sent
        before our TERMINATE): it stops the SIB retransmitting."""
        ended = self.ended.get(tid)
        return ended is not None and ended[1]

    def tombstone(self, tid: int, now: float, ack: bool) -> None:
        self.ended[tid] = (now + self.lifetime, ack)
        self.ended.move_to_end(tid)
        while len(self.ended) > self.max_ended:
            self.ended.popitem(last=False)

    def expire(self, now: float) -> None:
        ended = self.ended
        while ended and next(iter(ended.values()))[0] <= now:
            ended.popitem(last=False)
