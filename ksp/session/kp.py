"""The KP side: `KPSession` on the transaction layer (`ksp.transactions.KpTransactions`), and
its two message layers, `UdpKPSession` (CON retransmission with back-off, ACKs of INDs, sealing)
and `TcpKPSession` (framing, the end of the stream)."""
from __future__ import annotations

import random
from collections import deque

from ..codec import (
    TCP, UDP, Transport, decode_kp_message, decode_sib_message, encode, peek_tid,
)
from ..codes import RES_EPOCH, Status, Tx
from ..delivery import MAX_UDP_PAYLOAD
from ..errors import DecodeError, EncodeError
from ..framing import DEFAULT_MAX_TCP_MESSAGE, FRAME as _FRAME, OVERSIZE as _OVERSIZE, FrameReader
from ..model import Ack, Credentials, Request, Response
from ..secure import SealError, Sealer
from ..transactions import (
    PERSISTENT as _PERSISTENT, STATEFUL as _STATEFUL, KpTransactions, SessionError, epoch_of,
    random_start,
)
from .events import (
    Event, IndicationReceived, PersistentEnded, PersistentLost, ProtocolError, RequestRetried,
    RequestTimedOut, ResponseReceived, oversize_error,
)
from .timing import Timing, _Timers

__all__ = ["KPSession", "UdpKPSession", "TcpKPSession"]

_OK = Status.OK  # a global: `Status.OK` goes through the enum metaclass on every message
_TERMINATE = Tx.TERMINATE
_ECHO_REQUIRED = Status.ECHO_REQUIRED
_NUMBER_BEHIND = Status.NUMBER_BEHIND
_UNKNOWN = Status.UNKNOWN_TRANSACTION
_ALIVE = "keepalive"  # the timer key of a persistent transaction's keepalive: (_ALIVE, tid)


class _Pending:
    __slots__ = ("tx", "confirmable", "data", "timeout", "retransmits", "deadline", "echoed",
                 "number", "renumbered")

    def __init__(self, tx: Tx, confirmable: bool, data: bytes, number: int = -1) -> None:
        self.echoed = False  # it carries the SIB's echo value: another ECHO REQUIRED is final
        self.number = number  # its request number (wire format 15); -1: none (TERMINATE, TCP)
        self.renumbered = False  # sent again after NUMBER BEHIND: another is final
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
        self._sealer: Sealer | None = None
        self.sealed_dropped = 0
        self.max_message_size = max_message_size or self.DEFAULT_MAX_MESSAGE
        self.max_pending = max_pending
        self._rng = rng if rng is not None else random.Random()
        #: The transaction layer (TIDs, pending types, persistent operations, the stale-IND
        #: rule); this class is the message layer under it (UDP retransmission and ACKs, TCP
        #: framing).
        # A KP ID outlives this session's count: a random epoch keeps its numbers off those
        # of an earlier run that the SIB may remember (wire format 15).
        start = None if credentials is None else random_start(self._rng)
        self.transactions = KpTransactions(self._rng, lifetime=self.timing.exchange_lifetime,
                                           max_ended=max_ended, start=start)
        self._pending: dict[int, _Pending] = self.transactions.pending  # type: ignore[assignment]
        self._persistent = self.transactions.persistent
        self._ended = self.transactions.ended
        self._timers = _Timers()
        self._events: deque[Event] = deque()
        self._closed = False

    # -- state ------------------------------------------------------------------------------

    @property
    def sealer(self) -> Sealer | None:
        """Set: every datagram leaves sealed (wire format 13) and only sealed, verified
        datagrams are taken in; the others are counted in `sealed_dropped` and ignored. The
        envelope's KP ID is then the KP's identity, which outlives this session's count:
        numbering moves to a random epoch if nothing was sent yet (wire format 15)."""
        return self._sealer

    @sealer.setter
    def sealer(self, sealer: Sealer | None) -> None:
        if sealer is not None and self._sealer is None and self.credentials is None and (
                not self._pending and not self._persistent):
            self.transactions.restart_at(random_start(self._rng))
        self._sealer = sealer

    @property
    def _next(self) -> int:
        """The next TID `next_tid` tries (tests set it)."""
        return self.transactions.cursor

    @_next.setter
    def _next(self, tid: int) -> None:
        self.transactions.cursor = tid

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
        return its TID. Over UDP it is numbered (wire format 15: its EPOCH option set), under
        another TID from `next_tid` when its own is held (`KpTransactions.unheld`); `TidsBusy`
        when every TID is (nothing sent)."""
        tx, tid = request.tx, request.tid
        if type(tx) is not Tx:
            tx = Tx(tx)
        if self._closed:
            raise SessionError("the connection is closed")
        self.transactions.check(tid, tx)
        if not request.confirmable and tx in _PERSISTENT and self.transport is UDP:
            raise SessionError(f"{tx.name} is persistent: it goes CON over UDP, where a NON one "
                               "from an address not yet validated would silently never start "
                               "(wire format 14.4)")
        if len(self._pending) >= self.max_pending:
            raise SessionError(f"{len(self._pending)} requests pending, the limit")
        if self.credentials is not None and request.options.credentials is None:
            request = request._replace(
                options=request.options._replace(credentials=self.credentials))
        number = -1
        if tx is not _TERMINATE:  # TERMINATE's TID is its target's
            request, number = self._number(request, now)
            tid = request.tid
        data = encode(request, self.transport)
        if len(data) > self.max_message_size:
            raise EncodeError(f"request of {len(data)} bytes exceeds the "
                              f"{self.max_message_size}-byte message limit")
        p = _Pending(tx, bool(request.confirmable), data, number)
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
            if type(tid) is tuple:  # (_ALIVE, tid): a persistent transaction's keepalive
                self._keepalive_due(tid[1], now)
                continue
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
        if p is None:  # a late or duplicated RES, or a keepalive's answer
            self._unsolicited(tid, data, now)
            return
        if p.number > 0xFFFF or data[1] & RES_EPOCH or data[1] == _NUMBER_BEHIND:
            if not self._answers(p, data):
                return  # the answer to a late copy of an earlier request under this TID
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
            if response.status == _OK and tx in _PERSISTENT:
                self._heard(tid, now)
        if response.status == _ECHO_REQUIRED and not p.echoed:
            new_tid = self._again(p, now, echo=bytes(response.result))
            if new_tid is not None:
                self._pending[new_tid].echoed = True
                self._events.append(RequestRetried(tid, new_tid))
                return
        if response.status == _NUMBER_BEHIND and not p.renumbered:
            self.transactions.behind(response.result.next_epoch)
            new_tid = self._again(p, now)
            if new_tid is not None:
                self._pending[new_tid].renumbered = True
                self._events.append(RequestRetried(tid, new_tid))
                return
        self._events.append(ResponseReceived(tid, response))

    def _answers(self, p: _Pending, data: bytes) -> bool:
        """Whether RES `data` answers pending request `p` (wire format 15.6): it names `p`'s
        epoch (none for epoch 0), NUMBER BEHIND in its Data; a RES of a request the SIB could
        not decode (0x01-0x06) names none. Another is the answer to a late copy of an earlier
        request under the TID, and `p` still waits."""
        if p.number < 0:  # TERMINATE, or TCP: nothing numbered
            return True
        epoch, code = p.number >> 16, data[1]
        if code == _NUMBER_BEHIND:
            try:
                response = decode_sib_message(data, self.transport, answers=p.tx)
            except DecodeError:
                return True  # malformed: `p`'s answer, reported as such
            return response.result.epoch == epoch
        if code & RES_EPOCH:
            return len(data) >= 8 and int.from_bytes(data[4:8], "little") == epoch
        return epoch == 0 or 1 <= code <= 6

    def _again(self, p: _Pending, now: float, echo: bytes | None = None) -> int | None:
        """Send request `p` again as a new request (its next number, a new TID; its own for
        TERMINATE), with the ECHO option carrying `echo` if given: the TID it went under, or
        None when it cannot go (wire format 7.7, 15)."""
        try:
            request = decode_kp_message(p.data, self.transport)
            if type(request) is not Request:
                return None
            if echo is not None:
                request = request._replace(options=request.options._replace(echo=echo))
            if request.tx is not _TERMINATE:
                request = request._replace(tid=self.next_tid())
            return self.send(request, now)
        except (DecodeError, EncodeError, SessionError):
            return None

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
        self._heard(tid, now)
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

    def _number(self, request: Request, now: float) -> tuple[Request, int]:
        """`request` as it goes (its TID and EPOCH option), and its number (-1: none; TCP
        deduplicates nothing)."""
        return request, -1

    def _first_timeout(self, p: _Pending) -> float:
        return self.timing.exchange_lifetime

    def _retransmit(self, tid: int, p: _Pending, now: float) -> bool:
        """Whether request `tid`'s timer fired for a retransmission (else it is over)."""
        return False

    def _out(self, data: bytes) -> None:
        raise NotImplementedError

    def _unknown_indication(self, tid: int, data: bytes) -> None:
        """An IND of no active persistent transaction."""

    def _heard(self, tid: int, now: float) -> None:
        """Active persistent transaction `tid` was heard of (its RES OK, an IND)."""

    def _keepalive_due(self, tid: int, now: float) -> None:
        """Persistent transaction `tid` has been silent for `Timing.keepalive`, or its
        keepalive went unanswered for a timeout."""

    def _unsolicited(self, tid: int, data: bytes, now: float) -> None:
        """A RES under a TID no request waits on."""

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
        # Persistent transactions whose keepalive is out: tid -> [timeout, retransmissions].
        self._probes: dict[int, list] = {}
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

    def _number(self, request: Request, now: float) -> tuple[Request, int]:
        # The SIB tells a copy from a new request by its number (wire format 15): past the
        # first 65 536, the EPOCH option carries the number's upper part.
        transactions = self.transactions
        tid = transactions.unheld(request.tid, now)
        number = transactions.number(tid)
        epoch = epoch_of(number)
        if tid != request.tid or epoch != request.options.epoch:
            request = request._replace(tid=tid, options=request.options._replace(epoch=epoch))
        return request, number

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

    # -- keepalives: a KP that only listens learns that its operation ended or the SIB went --

    def _heard(self, tid: int, now: float) -> None:
        keepalive = self.timing.keepalive
        if keepalive:
            self._probes.pop(tid, None)
            self._timers.set((_ALIVE, tid), now + keepalive)

    def _keepalive_due(self, tid: int, now: float) -> None:
        tx = self.transactions.active(tid)
        if tx is None:  # ended meanwhile
            self._probes.pop(tid, None)
            return
        probe = self._probes.get(tid)
        if probe is None:
            probe = self._probes[tid] = [self.timing.initial_timeout(self._rng), 0]
        elif probe[1] >= self.timing.keepalive_retransmit:
            del self._probes[tid]
            self.transactions.gave_up(tid, tx, now)  # its INDs, if any come, go un-ACKed
            self._events.append(PersistentLost(tid))
            return
        else:
            probe[0] *= 2
            probe[1] += 1
        # A bare ACK of an operation that is owed nothing: the SIB answers RES OK while it
        # runs, 0x0b when it has none (and a final IND it kept for the KP comes again).
        self._datagrams.append(encode(Ack(tid)))
        self._timers.set((_ALIVE, tid), now + probe[0])

    def _unsolicited(self, tid: int, data: bytes, now: float) -> None:
        if tid not in self._probes or data[1] & 0x80:
            return
        if data[1] == _OK:
            self._heard(tid, now)
        elif data[1] == _UNKNOWN and self.transactions.active(tid) is not None:
            del self._probes[tid]
            self._timers.cancel((_ALIVE, tid))
            self.transactions.ended_by(tid, now)
            self._events.append(PersistentEnded(tid, Status.UNKNOWN_TRANSACTION))

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
                event = oversize_error(header, length, self.max_message_size)
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
