"""KSP sessions, sans-I/O: request matching, retransmission, duplicate detection, IND delivery.

Theory of operation
-------------------
A session is a state machine driven by three inputs only: API calls (`send`; `respond`,
`indicate`), bytes received (`receive_datagram` over UDP, `receive_data` over TCP) and the clock
(`handle_timer(now)`). It answers with three outputs: bytes to transmit (`datagrams_to_send(now)`
/ `data_to_send()`), events (`next_event()`, frozen dataclasses) and the time it next wants to
be woken (`get_timer()`). It never reads a clock, opens a socket or sleeps; `now` is any
monotonic time in seconds. An adapter, after every input::

    while (event := session.next_event()) is not None:
        handle(event)                       # may call send / respond / indicate
    for datagram in session.datagrams_to_send(now):
        sock.sendto(datagram, sib_addr)     # SIBSession: (datagram, addr) pairs
    rearm(session.get_timer())              # when it fires: session.handle_timer(loop.time())

Both sides stand on the transaction layer every transport shares (`ksp.transactions`: RES
matching, the persistent lifecycle, the NON rule, MAX RESPONSE SIZE, IND numbering in one
`ksp.delivery.Delivery` per operation, TIDs and the stale-IND rule); this module holds the message
layers under it: `UdpKPSession`/`UdpSIBSession` (CON retransmission with back-off, ACKs, the
duplicate cache, sealing) and `TcpKPSession`/`TcpSIBSession` (framing, `ksp.framing`).
`KPSession(transport)` and `SIBSession(transport)` build the one for the transport.

`KPSession` is the client: one per KP and transport endpoint. It allocates Transaction IDs,
remembers which transaction type each pending TID answers (the RES Data field depends on it),
retransmits CON requests over UDP with CoAP's exponential back-off (RFC 7252 §4.2), ACKs every
UDP IND and delivers only newer ones (§9 serial arithmetic).

`SIBSession` is the server: one per UDP socket, or one for all the TCP connections of a listener.
It keys everything on the KP identity (R12: the CREDENTIALS KP ID, else the transport address),
surfaces each request once (a retransmission within EXCHANGE_LIFETIME gets the cached RES, or
nothing while the first copy is still executing), answers undecodable input itself, numbers
INDs and retransmits the newest unacknowledged one until an ACK covers it (R10).

Every table is bounded; the oldest entry goes first. State machines, timers and defaults:
docs/sessions.md.
"""
from __future__ import annotations

import heapq
import itertools
import random
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import NamedTuple

from .codec import (
    TCP, UDP, Transport, decode_kp_message, decode_sib_message, encode, peek_tid, retag,
)
from .codes import Status, Tx
from .delivery import MAX_UDP_PAYLOAD, Delivery, DeliveryState
from .errors import DecodeError, EncodeError
from .framing import DEFAULT_MAX_TCP_MESSAGE, FRAME as _FRAME, OVERSIZE as _OVERSIZE, FrameReader
from .model import Ack, Credentials, Request, Response
from .secure import MAGIC, SealedAddr, SealError, Sealer, SealerTable
from .transactions import (
    STATEFUL as _STATEFUL, Exchange, KpTransactions, SessionError, SibTransactions, TidsBusy,
    request_digest,
)
from .transactions import _Persistent  # noqa: F401  (where tests plant a kept TID)
from .seqnum import is_newer

__all__ = [
    "Timing", "KPIdentity", "KPSession", "SIBSession", "SessionError", "MAX_UDP_PAYLOAD",
    "DEFAULT_MAX_TCP_MESSAGE", "Event", "ResponseReceived", "IndicationReceived",
    "RequestTimedOut", "PersistentEnded", "ProtocolError", "RequestReceived", "AckReceived",
    "KPUnreachable", "SessionStats", "DuplicateCache", "Authenticate", "CredentialsPending",
    "RequestRefused", "UdpKPSession", "TcpKPSession", "UdpSIBSession", "TcpSIBSession",
    "TidsBusy",
]

_OK = Status.OK  # a global: `Status.OK` goes through the enum metaclass on every message
_TERMINATE = Tx.TERMINATE


# ---------------------------------------------------------------------------------------------
# Timers and their defaults


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

    def __post_init__(self) -> None:
        if not self.ack_timeout > 0:
            raise ValueError(f"ack_timeout {self.ack_timeout} must be > 0")
        if not self.ack_random_factor >= 1:
            raise ValueError(f"ack_random_factor {self.ack_random_factor} must be >= 1")
        if self.max_retransmit < 0:
            raise ValueError(f"max_retransmit {self.max_retransmit} must be >= 0")
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


# ---------------------------------------------------------------------------------------------
# Events


@dataclass(frozen=True, slots=True)
class Event:
    """Base class of every session event."""


@dataclass(frozen=True, slots=True)
class ResponseReceived(Event):
    """The RES of pending request `tid` (its status may be an error)."""

    tid: int
    response: Response


@dataclass(frozen=True, slots=True)
class IndicationReceived(Event):
    """A new state of persistent transaction `tid` (UDP: newer than every one delivered before)."""

    tid: int
    response: Response


@dataclass(frozen=True, slots=True)
class PersistentEnded(Event):
    """The SIB ended persistent transaction `tid` with a non-OK IND (e.g. TERMINATED)."""

    tid: int
    status: Status | int


@dataclass(frozen=True, slots=True)
class RequestTimedOut(Event):
    """CON request `tid` got no RES: UDP retransmissions ran out, or EXCHANGE_LIFETIME over TCP,
    or the TCP connection closed."""

    tid: int


@dataclass(frozen=True, slots=True)
class ProtocolError(Event):
    """Input that is not valid KSP. `fatal`: a TCP stream that cannot be resynchronised; the
    adapter closes the connection (after sending what `data_to_send` holds)."""

    status: Status
    message: str
    tid: int | None = None
    addr: Hashable | None = None
    fatal: bool = False


class KPIdentity(NamedTuple):
    """Whom a Transaction ID belongs to (R12): the CREDENTIALS KP ID, else the transport address
    (UDP: (host, port); TCP: the connection handle the adapter passes). A NamedTuple: it keys
    every session table, and tuple hashing is C code."""

    kp_id: bytes | None = None
    addr: Hashable | None = None

    @classmethod
    def of(cls, request: Request, addr: Hashable) -> "KPIdentity":
        creds = request.options.credentials
        return cls(bytes(creds.kp_id), None) if creds is not None else cls(None, addr)

    def __str__(self) -> str:
        if self.kp_id is None:
            return f"KP@{self.addr}"
        return f"KP {uuid.UUID(bytes=self.kp_id) if len(self.kp_id) == 16 else self.kp_id.hex()}"


@dataclass(frozen=True, slots=True)
class RequestReceived(Event):
    """A new request for the SIB to execute, then answer with `SIBSession.respond`."""

    kp: KPIdentity
    addr: Hashable
    request: Request


@dataclass(frozen=True, slots=True)
class AckReceived(Event):
    """An ACK from `addr`; `kp` is None when no IND with that TID was sent to that address."""

    kp: KPIdentity | None
    addr: Hashable
    tid: int
    seq: int | None


@dataclass(frozen=True, slots=True)
class KPUnreachable(Event):
    """IND retransmissions of (kp, tid) ran out without an ACK (UDP), or the KP's TCP connection
    is gone. The SIB usually ends the transaction (`end_persistent`)."""

    kp: KPIdentity
    tid: int


@dataclass(frozen=True, slots=True)
class CredentialsPending(Event):
    """The SIB's `authenticate` has no verdict yet on these credentials: the request waits in the
    session (bounded) until `SIBSession.resume`, which the adapter calls once it has verified
    them off the request path."""

    kp_id: bytes
    password: str
    addr: Hashable


@dataclass(frozen=True, slots=True)
class RequestRefused(Event):
    """A request refused before the duplicate cache (its CREDENTIALS failed `authenticate`, or
    too many requests wait for a verdict): answered with `status` at `addr`, nothing more."""

    kp_id: bytes
    addr: Hashable
    tid: int
    status: Status


Authenticate = Callable[[bytes, str, Hashable], "Status | None"]
"""A SIB's verdict on a request's CREDENTIALS (KP ID, password, source address), asked before the
session looks at its duplicate cache or at any state of that KP ID: `Status.OK` accepts, None
means "not known yet" (the session holds the request and reports `CredentialsPending`), any
other status refuses the request with that status. It must be cheap: slow checks (a password
hash) belong off the request path, answering None until they are done."""


def _oversize_error(header: bytes, length: int, limit: int, addr: Hashable | None = None
                    ) -> ProtocolError:
    return ProtocolError(Status.LIMIT_EXCEEDED,
                         f"TCP message of {length} bytes exceeds the {limit}-byte limit; skipped",
                         peek_tid(header), addr)


# ---------------------------------------------------------------------------------------------
# Client


class _Pending:
    __slots__ = ("tx", "confirmable", "data", "timeout", "retransmits", "deadline")

    def __init__(self, tx: Tx, confirmable: bool, data: bytes) -> None:
        self.tx = tx
        self.confirmable = confirmable
        self.data = data
        self.timeout = 0.0
        self.retransmits = 0
        self.deadline = 0.0


class KPSession:
    """The KP side of KSP over one transport endpoint (see the module docstring).

    `KPSession(UDP)` is a `UdpKPSession` and `KPSession(TCP)` a `TcpKPSession`: this class is
    what both share on top of the transaction layer (`self.transactions`); each subclass is its
    transport's message layer (UDP: CON retransmission with back-off, ACKs of INDs, sealing;
    TCP: framing and the end of the stream)."""

    DEFAULT_MAX_MESSAGE = MAX_UDP_PAYLOAD

    def __new__(cls, transport: Transport | str = UDP, **kwargs):
        if cls is KPSession:
            cls = UdpKPSession if Transport(transport) is UDP else TcpKPSession
        return super().__new__(cls)

    def __init__(self, transport: Transport | str = UDP, *, timing: Timing | None = None,
                 rng: random.Random | None = None, credentials: Credentials | None = None,
                 max_message_size: int | None = None, max_pending: int = 1024,
                 max_ended: int = 256) -> None:
        self.transport = Transport(transport)
        self.timing = timing if timing is not None else Timing()
        self.credentials = credentials
        """Added to every request sent without CREDENTIALS (the KP identity of R12)."""
        self.sealer: Sealer | None = None
        """Set: every datagram leaves sealed (wire format 13) and only sealed, verified
        datagrams are taken in; the others are counted in `sealed_dropped` and ignored."""
        self.sealed_dropped = 0
        self.max_message_size = max_message_size or self.DEFAULT_MAX_MESSAGE
        self.max_pending = max_pending
        self._rng = rng if rng is not None else random.Random()
        #: The transaction layer (TIDs, pending types, persistent operations, the stale-IND
        #: rule); this class is the message layer under it (UDP retransmission and ACKs, TCP
        #: framing).
        self.transactions = KpTransactions(self._rng, lifetime=self.timing.exchange_lifetime,
                                           max_ended=max_ended)
        self._pending: dict[int, _Pending] = self.transactions.pending  # type: ignore[assignment]
        self._persistent = self.transactions.persistent
        self._ended = self.transactions.ended
        self._timers = _Timers()
        self._events: deque[Event] = deque()
        self._closed = False

    # -- state ------------------------------------------------------------------------------

    @property
    def _next(self) -> int:
        """The next TID `next_tid` tries (tests set it)."""
        return self.transactions._next

    @_next.setter
    def _next(self, tid: int) -> None:
        self.transactions._next = tid

    @property
    def pending(self) -> frozenset[int]:
        """TIDs of requests waiting for their RES."""
        return frozenset(self._pending)

    @property
    def persistent(self) -> frozenset[int]:
        """TIDs of persistent transactions this KP considers active (requested, not ended)."""
        return frozenset(self._persistent)

    def next_tid(self) -> int:
        """A TID no pending request, active or recently ended persistent transaction uses (R12,
        `KpTransactions.next_tid`)."""
        return self.transactions.next_tid()

    # -- API --------------------------------------------------------------------------------

    def give_up(self, now: float) -> None:
        """Stop retransmitting every pending request, each reported `RequestTimedOut` — e.g.
        when the OS says nothing listens at the SIB's address (ICMP port unreachable), so that
        no update the caller was told failed is applied later by a retransmission."""
        for tid, p in list(self._pending.items()):
            del self._pending[tid]
            self._timers.cancel(tid)
            self._give_up(tid, p, now)

    def send(self, request: Request, now: float) -> int:
        """Queue `request` (its TID from `next_tid`, or for TERMINATE the target's TID) and
        return its TID. Over UDP that is another TID from `next_tid` when the SIB may still
        hold the same request under this one (`KpTransactions.fit`); `TidsBusy` when none
        may carry it yet (nothing sent)."""
        tx, tid = request.tx, request.tid
        if type(tx) is not Tx:
            tx = Tx(tx)
        if self._closed:
            raise SessionError("the connection is closed")
        self.transactions.check(tid, tx)
        if len(self._pending) >= self.max_pending:
            raise SessionError(f"{len(self._pending)} requests pending, the limit")
        if self.credentials is not None and request.options.credentials is None:
            request = request._replace(
                options=request.options._replace(credentials=self.credentials))
        data = encode(request, self.transport)
        if len(data) > self.max_message_size:
            raise EncodeError(f"request of {len(data)} bytes exceeds the "
                              f"{self.max_message_size}-byte message limit")
        if tx is not _TERMINATE:  # TERMINATE's TID is its target's
            tid, data = self._place(tid, data, now)
        p = _Pending(tx, bool(request.confirmable), data)
        # NON: a RES may never come; TCP: no retransmission, but no waiting forever
        p.timeout = self._first_timeout(p)
        p.deadline = now + p.timeout
        self.transactions.sent(tid, tx, p)
        self._timers.set(tid, p.deadline)
        self._out(data)
        return tid

    def next_event(self) -> Event | None:
        return self._events.popleft() if self._events else None

    def get_timer(self) -> float | None:
        """When `handle_timer` must next be called (None: nothing to wait for)."""
        return self._timers.next()

    def handle_timer(self, now: float) -> None:
        self._expire_ended(now)
        for tid in self._timers.pop_due(now):
            p = self._pending.get(tid)
            if p is None or self._retransmit(tid, p, now):
                continue
            del self._pending[tid]
            if p.confirmable:
                self._give_up(tid, p, now)

    # -- internals --------------------------------------------------------------------------

    def _give_up(self, tid: int, p: _Pending, now: float) -> None:
        self.transactions.gave_up(tid, p.tx, now)
        self._events.append(RequestTimedOut(tid))

    def _expire_ended(self, now: float) -> None:
        self.transactions.expire(now)

    def _on_message(self, data: bytes, now: float) -> None:
        if len(data) < 4:
            self._events.append(ProtocolError(Status.INVALID_DATA_FORMAT,
                                              f"{len(data)} bytes: shorter than any header"))
            return
        tid = peek_tid(data)
        if data[1] & 0x80:
            self._on_indication(tid, data, now)
        else:
            self._on_response(tid, data, now)

    def _on_response(self, tid: int, data: bytes, now: float) -> None:
        p = self._pending.get(tid)
        if p is None:
            return  # a late or duplicated RES: nothing waits for it
        del self._pending[tid]
        self._timers.cancel(tid)
        if p.retransmits:  # the SIB answers every copy: another RES of it may be on its way
            self.transactions.hold(tid, now)
        tx = p.tx
        try:
            response = decode_sib_message(data, self.transport, answers=tx)
        except DecodeError as exc:
            self._events.append(ProtocolError(exc.status, str(exc), tid))
            return
        if tx in _STATEFUL:
            self.transactions.answered(tid, tx, response.status, now)
        self._events.append(ResponseReceived(tid, response))

    def _on_indication(self, tid: int, data: bytes, now: float) -> None:
        tx = self.transactions.active(tid)
        if tx is None:
            self._unknown_indication(tid, data)
            return  # unknown: not ACKed, so the SIB gives up on it (R13)
        try:
            response = decode_sib_message(data, self.transport, answers=tx)
        except DecodeError as exc:
            self._events.append(ProtocolError(exc.status, str(exc), tid))
            return
        if not self._fresh(tid, response):
            return
        if response.status != _OK:
            self.transactions.ended_by(tid, now)
            self._events.append(PersistentEnded(tid, response.status))
        else:
            self._events.append(IndicationReceived(tid, response))

    # -- the message layer's part (`UdpKPSession`, `TcpKPSession`) ---------------------------

    def datagrams_to_send(self, now: float) -> list[bytes]:
        raise SessionError(f"this is a {self.transport.name} session")

    def receive_datagram(self, data: bytes, now: float) -> None:
        raise SessionError(f"this is a {self.transport.name} session")

    def data_to_send(self) -> bytes:
        raise SessionError(f"this is a {self.transport.name} session")

    def receive_data(self, data: bytes, now: float) -> None:
        raise SessionError(f"this is a {self.transport.name} session")

    def _place(self, tid: int, data: bytes, now: float) -> tuple[int, bytes]:
        """The TID request `data` goes under, and its bytes with that TID."""
        return tid, data

    def _first_timeout(self, p: _Pending) -> float:
        return self.timing.exchange_lifetime

    def _retransmit(self, tid: int, p: _Pending, now: float) -> bool:
        """Whether request `tid`'s timer fired for a retransmission (else it is over)."""
        return False

    def _out(self, data: bytes) -> None:
        raise NotImplementedError

    def _unknown_indication(self, tid: int, data: bytes) -> None:
        """An IND of no active persistent transaction."""

    def _fresh(self, tid: int, response: Response) -> bool:
        """Whether the IND is delivered (after what the message layer does with it)."""
        return True


class UdpKPSession(KPSession):
    """The KP's UDP message layer: CON requests retransmitted with back-off, every IND ACKed
    and only newer ones delivered (§9), datagrams sealed when a `sealer` is set."""

    def __init__(self, transport: Transport | str = UDP, **kwargs) -> None:
        if Transport(transport) is not UDP:
            raise ValueError("a UdpKPSession is a UDP session")
        self._datagrams: list[bytes] = []
        super().__init__(UDP, **kwargs)

    def datagrams_to_send(self, now: float) -> list[bytes]:
        out, self._datagrams = self._datagrams, []
        if self.sealer is not None:
            out = [self.sealer.seal(d) for d in out]
        return out

    def receive_datagram(self, data: bytes, now: float) -> None:
        if self._ended:
            self._expire_ended(now)
        if self.sealer is not None:
            try:  # an unsealed answer could come from anyone: not even its status is believed
                data = self.sealer.open(data)
            except SealError:
                self.sealed_dropped += 1
                return
        self._on_message(bytes(data), now)

    def _place(self, tid: int, data: bytes, now: float) -> tuple[int, bytes]:
        # The SIB's duplicate cache remembers each request for EXCHANGE_LIFETIME: a TID may
        # come back within it (past 65 536 requests), but not for a request of the same bytes.
        transactions = self.transactions
        digest = request_digest(data)
        placed = transactions.fit(tid, digest, now)
        if placed != tid:
            data = retag(data, placed)
        transactions.kept(placed, digest, now)
        return placed, data

    def _first_timeout(self, p: _Pending) -> float:
        if p.confirmable:
            return self.timing.initial_timeout(self._rng)
        return self.timing.exchange_lifetime

    def _retransmit(self, tid: int, p: _Pending, now: float) -> bool:
        if not p.confirmable or p.retransmits >= self.timing.max_retransmit:
            return False
        p.retransmits += 1
        p.timeout *= 2
        p.deadline = now + p.timeout
        self._timers.set(tid, p.deadline)
        self._datagrams.append(p.data)
        return True

    def _out(self, data: bytes) -> None:
        self._datagrams.append(data)

    def _unknown_indication(self, tid: int, data: bytes) -> None:
        if self.transactions.acks_late(tid) and len(data) >= 6:
            # A retransmission of the final IND, or one sent before TERMINATE: stop the SIB.
            self._datagrams.append(encode(Ack(tid, int.from_bytes(data[4:6], "little"))))

    def _fresh(self, tid: int, response: Response) -> bool:
        self._datagrams.append(encode(Ack(tid, response.seq)))
        # a duplicate or older state: ACKed, not delivered (§9)
        return self.transactions.fresh(tid, response.seq)


class TcpKPSession(KPSession):
    """The KP's TCP message layer: requests framed on one stream, RESs and INDs cut from it by
    their Length field (`ksp.framing`); no retransmission, no ACKs; the end of the stream fails
    every pending request."""

    DEFAULT_MAX_MESSAGE = DEFAULT_MAX_TCP_MESSAGE

    def __init__(self, transport: Transport | str = TCP, **kwargs) -> None:
        if Transport(transport) is not TCP:
            raise ValueError("a TcpKPSession is a TCP session")
        self._stream = bytearray()
        super().__init__(TCP, **kwargs)
        self._reader = FrameReader(self.max_message_size)

    def data_to_send(self) -> bytes:
        out = bytes(self._stream)
        self._stream.clear()
        return out

    def receive_data(self, data: bytes, now: float) -> None:
        """Bytes from the TCP stream, in any pieces; b"" is the end of the stream."""
        if self._closed:
            return
        self._expire_ended(now)
        if not data:
            self._close(now)
            return
        for item in self._reader.feed(data):
            if item[0] == _FRAME:
                self._on_message(item[1], now)
            elif item[0] == _OVERSIZE:
                header, length = item[1], item[2]
                event = _oversize_error(header, length, self.max_message_size)
                self._events.append(event)
                if not header[1] & 0x80 and self._pending.pop(event.tid, None) is not None:
                    self._timers.cancel(event.tid)  # answered, unreadably: don't wait on
            else:
                exc = item[1]
                self._events.append(ProtocolError(exc.status, str(exc), exc.tid, fatal=True))

    def _out(self, data: bytes) -> None:
        self._stream += data

    def _close(self, now: float) -> None:
        self._closed = True
        if self._reader.buf or self._reader.skip:
            self._events.append(ProtocolError(Status.INVALID_DATA_FORMAT,
                                              "the stream ended inside a message", fatal=True))
        for tid, p in list(self._pending.items()):
            self._timers.cancel(tid)
            del self._pending[tid]
            if p.confirmable:
                self._give_up(tid, p, now)


# ---------------------------------------------------------------------------------------------
# Server


class DuplicateCache:
    """Requests seen within EXCHANGE_LIFETIME: a copy of one is a duplicate, answered from its
    entry and never executed again.

    Keys are (KP identity, TID, transaction type, hash of the request's bytes) and entries
    `Exchange`s (their `key`, an `expires` time and a `response`: bytes, or None until the
    answer is known, whose length counts against `max_bytes`). One entry per KP and TID (a
    TERMINATE apart: it carries its target's TID): a request with other bytes under a TID is a
    new request and takes the place of the one before, as the KP has moved on from it (R12).
    Oldest first, which is soonest to expire; over `max_entries` or `max_bytes` the oldest go.
    UDP's message layer keeps one (so does CoAP's server, which runs that layer over
    aiocoap)."""

    __slots__ = ("lifetime", "max_entries", "max_bytes", "bytes", "_entries")

    def __init__(self, lifetime: float, max_entries: int, max_bytes: int) -> None:
        self.lifetime = lifetime
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[Hashable, object] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def _slot(key: tuple) -> tuple:
        return key[0], key[1], key[2] is _TERMINATE

    def get(self, key: tuple):
        """The entry of request `key`: None if unseen, or if another request took its place."""
        entry = self._entries.get(self._slot(key))
        return entry if entry is not None and entry.key == key else None

    def add(self, key: tuple, entry, now: float) -> None:
        """Remember `entry` (its `expires` set from `now`), in the place of any request before
        it under the same TID."""
        entry.expires = now + self.lifetime
        entries = self._entries
        slot = self._slot(key)
        before = entries.pop(slot, None)
        if before is not None:
            self._drop(before)
        entries[slot] = entry
        if len(entries) > self.max_entries or self.bytes > self.max_bytes:
            self._evict()

    def answered(self, key: tuple, entry, response: bytes) -> None:
        """`entry`'s answer is `response` (if the entry is still there)."""
        if self._entries.get(self._slot(key)) is entry:
            entry.response = response
            self.bytes += len(response)
            if self.bytes > self.max_bytes:
                self._evict()

    def expire(self, now: float) -> None:
        entries = self._entries
        while entries and next(iter(entries.values())).expires <= now:
            self._drop(entries.popitem(last=False)[1])

    def _evict(self) -> None:
        entries = self._entries
        while entries and (len(entries) > self.max_entries or self.bytes > self.max_bytes):
            self._drop(entries.popitem(last=False)[1])

    def _drop(self, entry) -> None:
        if entry is not None and entry.response is not None:
            self.bytes -= len(entry.response)


@dataclass(slots=True)
class SessionStats:
    """What a `SIBSession` did, for metrics (counters only grow)."""

    #: INDs sent (first transmissions; a newer IND replacing an unacknowledged one counts).
    inds_sent: int = 0
    #: INDs sent again from the timer, for want of an ACK (UDP).
    ind_retransmissions: int = 0
    #: Duplicate requests answered with the cached RES (UDP).
    res_retransmissions_answered: int = 0
    #: Duplicate requests dropped: still executing, or a NON with nothing to answer (UDP).
    duplicates_ignored: int = 0
    #: ACKs that matched no IND route (stray, or for a route evicted over `max_entries`).
    acks_unmatched: int = 0
    #: (KP, TID) pairs given up on after the last retransmission (`KPUnreachable`).
    kp_unreachable: int = 0
    #: Requests refused before the duplicate cache (`RequestRefused`).
    refused: int = 0
    #: Sealed datagrams dropped unverified: no key, bad tag, replay (`ksp.secure`).
    sealed_dropped: int = 0
    #: Final INDs given up on and sent again when their KP was heard from (UDP, `_Tombstone`).
    ends_resent: int = 0


class SIBSession:
    """The SIB side of KSP: every KP of one UDP socket, or every connection of a TCP listener.

    `SIBSession(UDP)` is a `UdpSIBSession` and `SIBSession(TCP)` a `TcpSIBSession`: this class
    is what both share on top of the transaction layer (`self.transactions`): credentials before
    anything else, where each KP is, events and timers; each subclass is its transport's message
    layer (UDP: the duplicate cache, IND retransmission until ACKed, sealing; TCP: framing and
    the connections)."""

    DEFAULT_MAX_MESSAGE = MAX_UDP_PAYLOAD
    #: How this message layer delivers INDs (`SibTransactions`): numbered and ACKed over UDP,
    #: where a restarted SIB resumes them (durable); neither over TCP.
    IND_DELIVERY = {"numbered": False, "acked": False, "durable": False}

    def __new__(cls, transport: Transport | str = UDP, **kwargs):
        if cls is SIBSession:
            cls = UdpSIBSession if Transport(transport) is UDP else TcpSIBSession
        return super().__new__(cls)

    def __init__(self, transport: Transport | str = UDP, *, timing: Timing | None = None,
                 rng: random.Random | None = None, max_message_size: int | None = None,
                 max_entries: int = 65_536, max_cache_bytes: int = 8 << 20,
                 authenticate: Authenticate | None = None, max_held: int = 1024,
                 max_ind_bytes: int = 64 << 20) -> None:
        self.transport = Transport(transport)
        #: Bytes of unacknowledged INDs kept for retransmission (UDP), across every KP: past
        #: it the oldest one is given up on (`KPUnreachable`), so memory is bounded in bytes,
        #: not only by `max_entries`.
        self.max_ind_bytes = max_ind_bytes
        self._ind_bytes = 0
        #: Checks CREDENTIALS before anything else looks at a request (None: every KP ID is
        #: taken at its word, as by a SIB without access control). Without it, anyone who
        #: names a KP ID would get that KP's cached answers and move its exchanges.
        self.authenticate = authenticate
        #: Opens and seals the authenticated envelope (wire format 13) per KP ID; None: a
        #: sealed datagram is decoded as plain KSP and answered 0x01 (version not supported).
        self.sealers: SealerTable | None = None
        self.max_held = max_held
        self.timing = timing if timing is not None else Timing()
        self.max_message_size = max_message_size or self.DEFAULT_MAX_MESSAGE
        self.max_entries = max_entries
        self.max_cache_bytes = max_cache_bytes
        self.stats = SessionStats()
        self._rng = rng if rng is not None else random.Random()
        self._serial = itertools.count(1)
        #: The transaction layer (`ksp.transactions`): executing requests, the persistent
        #: lifecycle, the NON rule, MAX RESPONSE SIZE, IND numbering, one `Delivery` per
        #: operation. This class is the message layer under it: UDP's duplicate cache,
        #: retransmission and ACKs, or TCP's framing, and where each KP is.
        self.transactions = SibTransactions(self.transport, max_entries=max_entries,
                                            on_forget=self._forget, **self.IND_DELIVERY)
        # (kp, tid, tx, hash of the bytes) -> exchange. Only UDP's message layer adds to it.
        self._cache = DuplicateCache(self.timing.exchange_lifetime, max_entries, max_cache_bytes)
        self._executing = self.transactions.executing
        # KP-ID identity -> (serial of the request that set it, endpoint).
        self._bindings: OrderedDict[KPIdentity, tuple[int, Hashable]] = OrderedDict()
        self._deliveries = self.transactions.deliveries
        self._ack_routes: OrderedDict[tuple[Hashable, int], KPIdentity] = OrderedDict()
        self._timers = _Timers()
        self._events: deque[Event] = deque()
        # Requests waiting for a verdict on their credentials, in arrival order.
        self._held: deque[tuple[Request, Hashable, bytes]] = deque()

    # -- API --------------------------------------------------------------------------------

    def sizes(self) -> dict[str, int]:
        """Entries in each table (timers: heap entries, stale ones included), for soak
        benchmarks and metrics: each is bounded, by `max_entries` or `max_held`."""
        return {"recent requests": len(self._cache), "executing": len(self._executing),
                "deliveries": len(self._deliveries), "ack routes": len(self._ack_routes),
                "bindings": len(self._bindings), "timers": len(self._timers._heap),
                "held": len(self._held)}

    def respond(self, kp: KPIdentity, tid: int, response: Response, now: float) -> None:
        """Answer request `tid` of `kp` (call it for every RequestReceived, NON included).

        The RES goes to the address the request came from, is kept for duplicates until
        EXCHANGE_LIFETIME, and is cut to the request's MAX RESPONSE SIZE (and, over UDP, to
        one datagram). For a NON request an OK RES without a result is not sent (the paper).
        """
        ex, data = self.transactions.answer(kp, tid, response)
        if ex is None:  # evicted, or an unsolicited answer (e.g. to a stray ACK)
            addr = self._endpoint(kp)
            if addr is None:
                raise SessionError(f"no request {tid} of {kp} and no known address")
            self._send(data, addr)
            return
        if data is not None:
            self._cache.answered(ex.key, ex, data)
            self._send(data, ex.addr)
        if kp.kp_id is not None and response.status != Status.ACCESS_DENIED:
            self._bind(kp, ex.addr, ex.serial, now)
            self._heard_of(kp, ex.addr, now)

    def indicate(self, kp: KPIdentity, tid: int, response: Response, now: float,
                 delivery: Delivery | None = None) -> None:
        """Send a new state (or, with a non-OK status, the end) of persistent transaction `tid`.

        Over UDP the IND gets the next sequence number (1, 2, …, 65535, 0, …; `response.seq`,
        if set, restarts the numbering there) and is retransmitted until ACKed; a newer IND
        replaces an unacknowledged older one. It goes to the endpoint of the KP's most recent
        request. `delivery`: the operation's `Delivery` as the caller holds it (a channel): put
        back if this session's table evicted it, so the numbering never restarts. After a
        restart, an OK IND of the state the KP had ACKed is not sent again (`Delivery.redundant`).
        """
        if response.tid != tid:
            raise SessionError(f"indicate({tid}) needs an IND with TID {tid}")
        key = (kp, tid)
        d = self.transactions.delivery_for(kp, tid, delivery)
        addr = self._endpoint(kp)
        if addr is None:
            addr = d.endpoint
        if addr is None:
            raise SessionError(f"no known address for {kp}")
        if not self._reachable(addr):  # TCP: the KP's connection is gone
            self.end_persistent(kp, tid)
            self._events.append(KPUnreachable(kp, tid))
            return
        data = self.transactions.indication(d, response)
        if data is None:  # after a restart: the KP had ACKed this very state
            return
        self.stats.inds_sent += 1
        self._deliver(key, d, addr, data, now)

    def end_persistent(self, kp: KPIdentity, tid: int) -> None:
        """Forget the IND state of (kp, tid): no more retransmissions. `respond` does this itself
        for an OK TERMINATE or RESET."""
        self.transactions.end(kp, tid)
        self._timers.cancel((kp, tid))

    def _forget(self, key: tuple[KPIdentity, int], d: Delivery, evicted: bool) -> None:
        """A delivery ended or was evicted (`SibTransactions.on_forget`): no IND of it is kept
        for retransmission any more."""
        self._timers.cancel(key)

    def endpoint(self, kp: KPIdentity) -> Hashable | None:
        """Where INDs for `kp` go: its address, or for a KP ID the endpoint of its most recent
        request (None if it has not been seen)."""
        return self._endpoint(kp)

    def bind(self, kp: KPIdentity, endpoint: Hashable) -> None:
        """Where a KP with a KP ID was last seen, e.g. from a SIB's journal after a restart:
        INDs go there until the KP's next request (which always moves it). A KP without a KP
        ID is its address and cannot be bound."""
        if kp.kp_id is None:
            raise SessionError(f"{kp} has no KP ID: its endpoint is its address")
        self._bind(kp, endpoint, 0)  # serial 0: older than any request of this session

    def delivery(self, kp: KPIdentity, tid: int) -> Delivery | None:
        """The `Delivery` of persistent transaction (kp, tid), if this session holds one."""
        return self.transactions.deliveries.get((kp, tid))

    def export(self, kp: KPIdentity, tid: int, delivery: Delivery | None = None
               ) -> DeliveryState | None:
        """The state of (kp, tid)'s delivery for a journal, with the KP's current endpoint."""
        d = self._deliveries.get((kp, tid), delivery)
        if d is None:
            return None
        state = d.export()
        endpoint = self._endpoint(kp)
        if endpoint is not None and endpoint != state.endpoint:
            d.endpoint = endpoint
            state = d.export()
        return state

    def restore(self, kp: KPIdentity, tid: int, state: DeliveryState) -> Delivery:
        """Take back a delivery as a journal saved it (a SIB after a restart): INDs go to its
        endpoint until the KP's next request, numbered on from its sequence number."""
        if kp.kp_id is not None and state.endpoint is not None:
            self.bind(kp, state.endpoint)
        return self.transactions.restore(kp, tid, state)

    def awaiting_ack(self, kp: KPIdentity, tid: int) -> bool:
        """Whether the newest IND of (kp, tid) is still unacknowledged (UDP) — e.g. for a SIB
        that stops and must send that state again after its restart."""
        d = self._deliveries.get((kp, tid))
        return d is not None and d.data is not None

    def resume(self, now: float) -> None:
        """Look again at the requests held for `authenticate`'s verdict (call it when a
        verification is done); those still without a verdict stay held, in order."""
        held, self._held = self._held, deque()
        for request, addr, data in held:
            self._on_request(request, addr, now, data)

    @property
    def held(self) -> int:
        """Requests waiting for a verdict on their credentials."""
        return len(self._held)

    def next_event(self) -> Event | None:
        return self._events.popleft() if self._events else None

    def get_timer(self) -> float | None:
        return self._timers.next()

    def handle_timer(self, now: float) -> None:
        self._expire(now)
        for key in self._timers.pop_due(now):
            self._retry(key, now)

    # -- internals --------------------------------------------------------------------------

    def _send(self, data: bytes, addr: Hashable) -> None:
        if type(addr) is SealedAddr:  # the KP spoke sealed: so is every answer to it
            try:
                data, addr = self.sealers.seal(data, addr), addr.addr
            except SealError:  # its key was removed meanwhile: nothing may reach it
                return
        self._out(data, addr)

    def _endpoint(self, kp: KPIdentity) -> Hashable | None:
        if kp.kp_id is None:
            return kp.addr
        binding = self._bindings.get(kp)
        return None if binding is None else binding[1]

    def _bind(self, kp: KPIdentity, addr: Hashable, serial: int, now: float | None = None) -> None:
        binding = self._bindings.get(kp)
        if binding is None or serial >= binding[0]:
            self._bindings[kp] = (serial, addr)
            self._bindings.move_to_end(kp)
            while len(self._bindings) > self.max_entries:
                self._bindings.popitem(last=False)
            if now is not None and binding is not None and binding[1] != addr:
                self._resend_to(kp, addr, now)

    def _expire(self, now: float) -> None:
        self._cache.expire(now)

    def _reject(self, event: ProtocolError) -> None:
        """Report undecodable input and answer it with its status (when it has a TID)."""
        self._events.append(event)
        if event.tid is not None:
            self._send(encode(Response(event.tid, event.status), self.transport), event.addr)

    def _on_message(self, data: bytes, addr: Hashable, now: float) -> None:
        try:
            msg = decode_kp_message(data, self.transport)
        except DecodeError as exc:
            tid = exc.tid if exc.tid is not None else peek_tid(data)
            self._heard_from(addr, now)
            self._reject(ProtocolError(exc.status, str(exc), tid, addr))
            return
        if isinstance(msg, Ack):
            self._heard_from(addr, now)
            self._on_ack(msg, addr, now)
        else:
            self._on_request(msg, addr, now, data)

    def _on_request(self, request: Request, addr: Hashable, now: float, data: bytes) -> None:
        """`data`: the request's bytes (opened, if it came sealed), which tell a copy of a
        request from a new request under the same TID (R12)."""
        options = request.options
        creds = options.credentials
        if self._held and self._behind_held(addr):
            self._hold(request, addr, data)  # a stream keeps its order behind one still held
            return
        sealed = type(addr) is SealedAddr
        if sealed and creds is not None:  # the envelope names the KP (wire format 13.6)
            self._refuse(request, addr, Status.ACCESS_DENIED)
            return
        if creds is not None and self.authenticate is not None and not sealed:
            # Before the duplicate cache and every table keyed by the KP ID: a claimed identity
            # gets nothing of that KP's (cached answers, its exchanges, its address) unproven.
            verdict = self.authenticate(bytes(creds.kp_id), creds.password, addr)
            if verdict is None:
                self._hold(request, addr, data)
                return
            if verdict != _OK:
                self._refuse(request, addr, Status(verdict))
                return
        kp = KPIdentity(addr.kp_id, None) if sealed else KPIdentity.of(request, addr)
        tid, tx = request.tid, request.tx
        self._heard_from(addr, now, request, kp)
        # A copy is byte for byte the same request: another request under a TID (a KP past
        # 65 536 requests per EXCHANGE_LIFETIME) is a new exchange, executed (R12).
        key = (kp, tid, tx, hash(data))
        if self._duplicate(key, addr):
            return
        ex = self.transactions.begin(kp, request, addr, next(self._serial),
                                     now + self.timing.exchange_lifetime, key)
        self._remember(key, ex, now)
        self._events.append(RequestReceived(kp, addr, request))

    def _hold(self, request: Request, addr: Hashable, data: bytes) -> None:
        if len(self._held) >= self.max_held:
            self._refuse(request, addr, Status.LIMIT_EXCEEDED)
            return
        creds = request.options.credentials
        new = creds is not None and not any(
            item[0].options.credentials == creds for item in self._held)
        self._held.append((request, addr, data))
        if new:  # one verification for every request that waits on the same credentials
            self._events.append(CredentialsPending(bytes(creds.kp_id), creds.password, addr))

    def _refuse(self, request: Request, addr: Hashable, status: Status) -> None:
        """Answer `status` at `addr` and keep nothing: no cache entry, exchange or binding."""
        self.stats.refused += 1
        creds = request.options.credentials
        self._events.append(RequestRefused(bytes(creds.kp_id) if creds else b"", addr,
                                           request.tid, status))
        self._send(encode(Response(request.tid, status), self.transport), addr)

    def _on_ack(self, ack: Ack, addr: Hashable, now: float) -> None:
        """An ACK (only UDP has them: the TCP codec refuses one)."""

    # -- the message layer's part (`UdpSIBSession`, `TcpSIBSession`) --------------------------

    def datagrams_to_send(self, now: float) -> list[tuple[bytes, Hashable]]:
        raise SessionError(f"this is a {self.transport.name} session")

    def receive_datagram(self, data: bytes, addr: Hashable, now: float) -> None:
        raise SessionError(f"this is a {self.transport.name} session")

    def data_to_send(self) -> list[tuple[bytes, Hashable]]:
        raise SessionError(f"this is a {self.transport.name} session")

    def receive_data(self, data: bytes, conn: Hashable, now: float) -> None:
        raise SessionError(f"this is a {self.transport.name} session")

    def _out(self, data: bytes, addr: Hashable) -> None:
        raise NotImplementedError

    def _deliver(self, key: tuple[KPIdentity, int], d: Delivery, addr: Hashable, data: bytes,
                 now: float) -> None:
        """Send the IND `data` of delivery `d` to `addr`."""
        raise NotImplementedError

    def _reachable(self, addr: Hashable) -> bool:
        return True

    def _retry(self, key: tuple[KPIdentity, int], now: float) -> None:
        """The timer of delivery `key` fired."""

    def _resend_to(self, kp: KPIdentity, addr: Hashable, now: float) -> None:
        """A KP ID heard from a new address."""

    def _behind_held(self, addr: Hashable) -> bool:
        """Whether a request from `addr` must wait behind one held for a verdict."""
        return False

    def _heard_from(self, addr: Hashable, now: float, request: Request | None = None,
                    kp: KPIdentity | None = None) -> None:
        """A datagram came from `addr` (`request` of `kp`, once its credentials passed)."""

    def _heard_of(self, kp: KPIdentity, addr: Hashable, now: float) -> None:
        """KP ID `kp` is at `addr`: a request of it was answered there (not 0x08)."""

    def _duplicate(self, key: tuple, addr: Hashable) -> bool:
        """Whether request `key` is a copy of one seen (then answered here)."""
        return False

    def _remember(self, key: tuple, ex: Exchange, now: float) -> None:
        """Request `key` is new: remember it for its copies."""


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

    IND_DELIVERY = {"numbered": True, "acked": True, "durable": True}

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


class TcpSIBSession(SIBSession):
    """The SIB's TCP message layer: one stream per connection (each its own endpoint handle),
    cut into messages by their Length field (`ksp.framing`); no duplicates, no ACKs, an IND
    delivered or its connection gone (then `KPUnreachable`); a request waits behind one of its
    stream held for a verdict, so the stream keeps its order."""

    DEFAULT_MAX_MESSAGE = DEFAULT_MAX_TCP_MESSAGE

    def __init__(self, transport: Transport | str = TCP, **kwargs) -> None:
        if Transport(transport) is not TCP:
            raise ValueError("a TcpSIBSession is a TCP session")
        self._streams: dict[Hashable, bytearray] = {}
        self._readers: dict[Hashable, FrameReader] = {}
        super().__init__(TCP, **kwargs)

    def data_to_send(self) -> list[tuple[bytes, Hashable]]:
        """(bytes, connection) pairs, one per connection with something to send."""
        out = [(bytes(buf), conn) for conn, buf in self._streams.items() if buf]
        self._streams.clear()
        return out

    def receive_data(self, data: bytes, conn: Hashable, now: float) -> None:
        """Bytes of connection `conn` (any hashable handle), in any pieces; b"" = closed."""
        if not data:
            self.connection_lost(conn)
            return
        self._expire(now)
        reader = self._readers.get(conn)
        if reader is None:
            reader = self._readers[conn] = FrameReader(self.max_message_size)
        for item in reader.feed(data):
            if item[0] == _FRAME:
                self._on_message(item[1], conn, now)
            elif item[0] == _OVERSIZE:
                event = _oversize_error(item[1], item[2], self.max_message_size, conn)
                self._reject(event)
            else:
                exc = item[1]
                self._reject(ProtocolError(exc.status, str(exc), exc.tid, conn, fatal=True))

    def buffered(self, conn: Hashable) -> int:
        """Bytes of an unfinished message held for connection `conn` (for a server's bound
        on buffered bytes, and its slow-frame timeout)."""
        reader = self._readers.get(conn)
        return len(reader.buf) if reader is not None else 0

    def connection_lost(self, conn: Hashable) -> None:
        """Forget connection `conn`: INDs for KPs last seen there report KPUnreachable."""
        self._readers.pop(conn, None)
        self._streams.pop(conn, None)
        if any(item[1] == conn for item in self._held):
            self._held = deque(item for item in self._held if item[1] != conn)

    def _out(self, data: bytes, addr: Hashable) -> None:
        if addr in self._readers:  # else the connection is gone: nowhere to send
            self._streams.setdefault(addr, bytearray()).extend(data)

    def _deliver(self, key: tuple[KPIdentity, int], d: Delivery, addr: Hashable, data: bytes,
                 now: float) -> None:
        self._send(data, addr)
        if d.final:
            self.end_persistent(*key)

    def _reachable(self, addr: Hashable) -> bool:
        return addr in self._readers

    def _behind_held(self, addr: Hashable) -> bool:
        return any(item[1] == addr for item in self._held)
