"""The SIB side: `SIBSession` on the transaction layer (`ksp.transactions.SibTransactions`):
credentials before anything else, where each KP is, events; over its message layer, one object
that keeps the contract of `ksp.session.layer.SibMessageLayer` (UDP's in
`ksp.session.sib_udp`, TCP's in `ksp.session.sib_tcp`, CoAP's in `transports/coap.py`)."""
from __future__ import annotations

import itertools
import random
from collections import OrderedDict, deque
from collections.abc import Hashable
from dataclasses import dataclass
from typing import ClassVar

from ..codec import UDP, Transport, decode_kp_message, encode, peek_tid
from ..codes import Status, Tx
from ..delivery import MAX_UDP_PAYLOAD, Delivery, DeliveryState
from ..errors import DecodeError
from ..model import Ack, Behind, Request, Response
from ..secure import MAGIC, NoWindow, SealedAddr, SealError, SealerTable
from ..transactions import SessionError, SibTransactions
from .events import (
    Authenticate, CredentialsPending, Event, KPIdentity, KPUnreachable, ProtocolError,
    RequestReceived, RequestRefused,
)
from .layer import SibMessageLayer
from .options import SessionOptions
from .timing import Timing
from .validation import EchoedRequests, EchoValues, address_binding, kp_binding

__all__ = ["SIBSession", "SessionStats"]

_OK = Status.OK  # a global: `Status.OK` goes through the enum metaclass on every message
_ECHO_REQUIRED = Status.ECHO_REQUIRED
_NUMBER_BEHIND = Status.NUMBER_BEHIND
_TERMINATE = Tx.TERMINATE


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
    #: Answers held back until their address is validated (wire format 14): RESs replaced by
    #: ECHO REQUIRED, persistent requests answered with it, INDs not sent (UDP).
    held_for_validation: int = 0
    #: Sealed requests of a KP with no replay window answered ECHO REQUIRED (13.5).
    sealed_echo_required: int = 0
    #: Requests answered NUMBER BEHIND, unexecuted: late copies, or a KP's numbering behind
    #: the SIB's record of it (wire format 15).
    behind: int = 0


class SIBSession:
    """The SIB side of KSP: every KP of one UDP socket, or every connection of a TCP listener,
    or of a CoAP server.

    `SIBSession(UDP)` is a `UdpSIBSession` and `SIBSession(TCP)` a `TcpSIBSession`, each with
    its transport's message layer and input methods; `SIBSession(UDP, layer=...)` runs over
    the layer given (CoAP's). This class is what they share on top of the transaction layer
    (`self.transactions`): credentials before anything else, where each KP is, events; what
    differs is the layer's (`self.layer`, the contract in `ksp.session.layer`). A transport's
    input side gives it whole messages (`receive_message`), input that is none (`reject`) and
    endpoints gone (`drop_held`)."""

    DEFAULT_MAX_MESSAGE = MAX_UDP_PAYLOAD
    #: The message layer a subclass runs over, and its transport (None: `layer` is given).
    LAYER: ClassVar[type[SibMessageLayer] | None] = None
    TRANSPORT: ClassVar[Transport | None] = None

    def __new__(cls, transport: Transport | str = UDP, *, layer: SibMessageLayer | None = None,
                **kwargs):
        if cls is SIBSession and layer is None:  # modules that import this one
            from .sib_tcp import TcpSIBSession
            from .sib_udp import UdpSIBSession
            cls = UdpSIBSession if Transport(transport) is UDP else TcpSIBSession
        return super().__new__(cls)

    def __init__(self, transport: Transport | str = UDP, *, layer: SibMessageLayer | None = None,
                 options: SessionOptions | None = None, timing: Timing | None = None,
                 rng: random.Random | None = None, max_message_size: int | None = None,
                 authenticate: Authenticate | None = None) -> None:
        """`options`: the bounds of its tables (`SessionOptions()` when None); `timing`:
        retransmission; `max_message_size`: the largest KSP message (None: the transport's)."""
        if layer is None:
            if self.LAYER is None:
                raise SessionError("a SIBSession needs its message layer: SIBSession(transport) "
                                   "makes UDP's or TCP's")
            if Transport(transport) is not self.TRANSPORT:
                raise ValueError(f"a {type(self).__name__} is a {self.TRANSPORT.name} session")
            layer = self.LAYER()
        self.transport = Transport(transport)
        #: The message layer (`ksp.session.layer.SibMessageLayer`).
        self.layer = layer
        #: The bounds of its tables, and how long a tombstone is kept (`SessionOptions`).
        self.options = options if options is not None else SessionOptions()
        #: Checks CREDENTIALS before anything else looks at a request (None: every KP ID is
        #: taken at its word, as by a SIB without access control). Without it, anyone who
        #: names a KP ID would get that KP's cached answers and move its exchanges.
        self.authenticate = authenticate
        #: Opens and seals the authenticated envelope (wire format 13) per KP ID; None: a
        #: sealed datagram is decoded as plain KSP and answered 0x01 (version not supported).
        self.sealers: SealerTable | None = None
        #: Makes and checks this process's echo values (wire format 7.7).
        self.echoes = EchoValues()
        #: The latest time the session was given (what an echo value made in `send` carries).
        self.now = 0.0
        self.timing = timing if timing is not None else Timing()
        self.max_message_size = max_message_size or self.DEFAULT_MAX_MESSAGE
        self.stats = SessionStats()
        #: Draws the retransmission timeouts (seeded in tests).
        self.rng = rng if rng is not None else random.Random()
        self._serial = itertools.count(1)
        #: The transaction layer (`ksp.transactions`): executing requests, the persistent
        #: lifecycle, the NON rule, MAX RESPONSE SIZE, IND numbering, one `Delivery` per
        #: operation, as the layer's `policy` says.
        self.transactions = SibTransactions(self.transport, max_entries=self.max_entries,
                                            on_forget=layer.forget, policy=layer.policy)
        self._executing = self.transactions.executing
        # KP-ID identity -> (serial of the request that set it, endpoint).
        self._bindings: OrderedDict[KPIdentity, tuple[int, Hashable]] = OrderedDict()
        self._deliveries = self.transactions.deliveries
        self._events: deque[Event] = deque()
        # Requests waiting for a verdict on their credentials, in arrival order.
        self._held: deque[tuple[Request, Hashable, bytes]] = deque()
        # Requests answered ECHO REQUIRED unexecuted: their copies get it again (7.7).
        self._echoed = EchoedRequests(self.timing.exchange_lifetime, self.options.max_addresses)
        layer.attach(self)

    # -- API --------------------------------------------------------------------------------

    @property
    def max_entries(self) -> int:
        """Entries in each of its tables (`options.max_entries`)."""
        return self.options.max_entries

    def sizes(self) -> dict[str, int]:
        """Entries in each table (timers: heap entries, stale ones included), for soak
        benchmarks and metrics: each is bounded, by `max_entries`, `max_held` or
        `max_addresses`."""
        tables = {"recent requests": 0, "executing": len(self._executing),
                  "deliveries": len(self._deliveries), "ack routes": 0,
                  "bindings": len(self._bindings), "timers": 0, "held": len(self._held),
                  "echoed requests": len(self._echoed)}
        tables.update(self.layer.sizes())
        return tables

    def respond(self, kp: KPIdentity, tid: int, response: Response, now: float) -> None:
        """Answer request `tid` of `kp` (call it for every RequestReceived, NON included).

        The RES goes to the address the request came from, is kept for duplicates until
        EXCHANGE_LIFETIME, and is cut to the request's MAX RESPONSE SIZE (and, over UDP, to
        one datagram). For a NON request an OK RES without a result is not sent (the paper).
        """
        self.now = now
        ex, data = self.transactions.answer(kp, tid, response)
        if ex is None:  # evicted, or an unsolicited answer (e.g. to a stray ACK)
            addr = self._endpoint(kp)
            if addr is None:
                raise SessionError(f"no request {tid} of {kp} and no known address")
            self.layer.send(data, addr)
            return
        self.layer.answered(ex, data)
        if data is not None:
            self.layer.send(data, ex.addr, ex.key)
        if kp.kp_id is not None and response.status != Status.ACCESS_DENIED:
            self._bind(kp, ex.addr, ex.serial, now)
            self.layer.heard_of(kp, ex.addr, now)

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
        if not self.layer.reachable(addr):  # TCP: the KP's connection is gone
            self.end_persistent(kp, tid)
            self._events.append(KPUnreachable(kp, tid))
            return
        data = self.transactions.indication(d, response)
        if data is None:  # after a restart: the KP had ACKed this very state
            return
        self.stats.inds_sent += 1
        self.layer.deliver(key, d, addr, data, now)

    def end_persistent(self, kp: KPIdentity, tid: int) -> None:
        """Forget the IND state of (kp, tid): no more retransmissions. `respond` does this itself
        for an OK TERMINATE or RESET."""
        self.transactions.end(kp, tid)
        self.layer.ended((kp, tid))

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
        endpoint = state.endpoint if state.endpoint is not None else kp.addr
        if endpoint is not None:  # a persistent request is admitted from a validated address only
            self.layer.proven(endpoint.addr if type(endpoint) is SealedAddr else endpoint)
        return self.transactions.restore(kp, tid, state)

    def awaiting_ack(self, kp: KPIdentity, tid: int) -> bool:
        """Whether the newest IND of (kp, tid) is still unacknowledged (UDP) — e.g. for a SIB
        that stops and must send that state again after its restart."""
        return self.layer.awaiting_ack((kp, tid))

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

    def emit(self, event: Event) -> None:
        """Report `event` (`next_event`): for the message layer."""
        self._events.append(event)

    def get_timer(self) -> float | None:
        return self.layer.get_timer()

    def handle_timer(self, now: float) -> None:
        self.now = now
        self.layer.expire(now)
        self.layer.handle_timer(now)

    def receive_message(self, data: bytes, addr: Hashable, now: float) -> None:
        """One whole KSP message from session address `addr` (a datagram's, a TCP frame's, a
        CoAP POST's): a sealed one is opened first, before anything else sees it, and dropped
        unverified (`stats.sealed_dropped`)."""
        self.now = now
        self.layer.expire(now)
        if data and data[0] == MAGIC and self.sealers is not None:
            try:  # verified before anything else sees it: a replay moves no exchange
                data, addr = self.sealers.open(data, addr)
            except NoWindow as unproved:
                self._unproved(unproved, now)
                return
            except SealError:
                self.stats.sealed_dropped += 1
                return
            self.layer.proven(addr.addr)
        self._on_message(bytes(data), addr, now)

    def echo_required(self, tid: int, addr: Hashable, now: float,
                      epoch: int | None = None) -> bytes:
        """RES ECHO REQUIRED to request `tid` (of `epoch`, wire format 15.6) from `addr`, its
        echo value binding that address (or, for a sealed one, the KP ID)."""
        binding = kp_binding(addr.kp_id) if type(addr) is SealedAddr else address_binding(addr)
        return encode(Response(tid, _ECHO_REQUIRED, self.echoes.make(binding, now),
                               epoch=self._epoch(epoch)), self.transport)

    def _epoch(self, epoch: int | None) -> int | None:
        """The epoch a RES names: its request's, over UDP (wire format 15.6)."""
        return epoch if self.transport is UDP else None

    def reject(self, event: ProtocolError) -> None:
        """Report input that is no KSP message (`event`: undecodable, or a frame over the size
        limit) and answer it with its status at `event.addr` when it has a TID: for the message
        layer's input side, and for `receive_message`."""
        self._events.append(event)
        if event.tid is not None:
            self.layer.send(encode(Response(event.tid, event.status), self.transport),
                            event.addr)

    def drop_held(self, addr: Hashable) -> None:
        """Forget the requests from `addr` held for a verdict on their credentials, unanswered:
        for an input side whose endpoint is gone (a closed TCP connection)."""
        if any(item[1] == addr for item in self._held):
            self._held = deque(item for item in self._held if item[1] != addr)

    def seal(self, data: bytes, addr: Hashable) -> tuple[bytes, Hashable] | None:
        """What goes on the wire for message `data` to session address `addr`, and to which
        transport address: to a KP that spoke sealed (a `SealedAddr`) sealed afresh (a new
        counter), as every message to it must be; else as it is. None when that KP's key was
        removed meanwhile: nothing of it may reach the KP."""
        if type(addr) is not SealedAddr:
            return data, addr
        if not data:  # nothing to seal (a resource with no IND yet)
            return data, addr.addr
        try:
            return self.sealers.seal(data, addr), addr.addr
        except SealError:
            return None

    # -- internals --------------------------------------------------------------------------

    def _unproved(self, unproved: NoWindow, now: float) -> None:
        """A verified sealed message of a KP with no replay window, at a SIB that keeps none
        (13.5): a request carrying this process's echo value for that KP opens the window
        closed at its counter and goes on; another request is answered ECHO REQUIRED, sealed,
        executing nothing; anything else is dropped."""
        to = unproved.to
        try:
            msg = decode_kp_message(unproved.inner, self.transport)
        except DecodeError:
            msg = None
        if type(msg) is not Request:
            self.stats.sealed_dropped += 1
            return
        echo = msg.options.echo
        if echo is not None and self.echoes.verify(echo, kp_binding(to.kp_id), now):
            self.sealers.admit(to.kp_id, unproved.counter)
            self.layer.proven(to.addr)
            self._on_message(bytes(unproved.inner), to, now)
            return
        self.stats.sealed_echo_required += 1
        self.layer.receiving(unproved.inner, to)  # (CoAP: its POST waits for the answer)
        self.layer.send(self.echo_required(msg.tid, to, now, msg.options.epoch), to)

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
                self.layer.moved(kp, addr, now)

    def _on_message(self, data: bytes, addr: Hashable, now: float) -> None:
        self.layer.receiving(data, addr)
        try:
            msg = decode_kp_message(data, self.transport)
        except DecodeError as exc:
            tid = exc.tid if exc.tid is not None else peek_tid(data)
            self.layer.heard_from(addr, now)
            self.reject(ProtocolError(exc.status, str(exc), tid, addr))
            return
        if isinstance(msg, Ack):
            self.layer.heard_from(addr, now)
            self.layer.on_ack(msg, addr, now)
        else:
            self._on_request(msg, addr, now, data)

    def _on_request(self, request: Request, addr: Hashable, now: float, data: bytes) -> None:
        """`data`: the request's bytes (opened, if it came sealed), which tell a copy of a
        request from a new request under the same TID (R12)."""
        options = request.options
        creds = options.credentials
        if self._held and self.layer.ordered and any(item[1] == addr for item in self._held):
            self._hold(request, addr, data)  # a stream keeps its order behind one still held
            return
        sealed = type(addr) is SealedAddr
        if options.echo is not None and not sealed:
            if self.echoes.verify(options.echo, address_binding(addr), now):
                self.layer.proven(addr)
        echoed = self._echoed
        tid, tx = request.tid, request.tx
        # Its number (wire format 15): TERMINATE has none, it names its target.
        number = -1 if tx is _TERMINATE else ((options.epoch or 0) << 16) | tid
        if echoed.entries and echoed.answered(addr, request.tid, data, now):
            # A copy of a request answered 0x0f: that TID is finished (7.7), even once the
            # retry validated the address; it gets 0x0f again and executes nothing.
            self.stats.held_for_validation += 1
            self.layer.send(self.echo_required(request.tid, addr, now, options.epoch), addr)
            return
        if not self.layer.admits(request, addr):  # wire format 14
            self.stats.held_for_validation += 1
            echoed.add(addr, request.tid, data, now)
            if creds is None and not sealed:  # its number is spent, whatever `echoed` forgets
                self.layer.spent(KPIdentity.of(request, addr), number)
            self.layer.send(self.echo_required(request.tid, addr, now, options.epoch), addr)
            return
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
        self.layer.heard_from(addr, now, request, kp)
        # A copy is byte for byte the same request; whether another request is new or one the
        # SIB has had, its number says (wire format 15, R12).
        key = (kp, tid, tx, hash(data))
        if self.layer.duplicate(key, addr):
            return
        next_epoch = self.layer.behind(key, number)
        if next_epoch is not None:
            self.stats.behind += 1
            self.layer.send(encode(Response(tid, _NUMBER_BEHIND, Behind(
                number >> 16, next_epoch)), self.transport), addr)
            return
        ex = self.transactions.begin(kp, request, addr, next(self._serial), key)
        self.layer.remember(key, ex, now, number)
        self._events.append(RequestReceived(kp, addr, request))

    def _hold(self, request: Request, addr: Hashable, data: bytes) -> None:
        if len(self._held) >= self.options.max_held:
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
        self.layer.send(encode(Response(request.tid, status, epoch=self._epoch(
            request.options.epoch)), self.transport), addr)

    # -- the transport's input and output (`UdpSIBSession`, `TcpSIBSession`) -----------------

    def datagrams_to_send(self, now: float) -> list[tuple[bytes, Hashable]]:
        raise SessionError(f"this is a {self.transport.name} session")

    def receive_datagram(self, data: bytes, addr: Hashable, now: float) -> None:
        raise SessionError(f"this is a {self.transport.name} session")

    def data_to_send(self) -> list[tuple[bytes, Hashable]]:
        raise SessionError(f"this is a {self.transport.name} session")

    def receive_data(self, data: bytes, conn: Hashable, now: float) -> None:
        raise SessionError(f"this is a {self.transport.name} session")
