"""KSP over CoAP (aiocoap): the binding of docs/coap-binding.md.

A KSP REQ (UDP layout) is the payload of a POST to `/ksp` with Content-Format 65000; the RES is
the payload of the CoAP response (piggybacked when the SIB answers within aiocoap's
EMPTY_ACK_DELAY, separate otherwise). A persistent operation that starts answers 2.01 Created
with a Location-Path `/ksp/p/<token>`: a per-transaction resource whose GET returns the newest
IND and which the KP observes (RFC 7641) to receive every further IND as a notification.

An adapter like the UDP and TCP ones: a `SIBSession` does everything KSP (sealed envelopes
opened first, credentials before the duplicate cache, a transaction sent again in a new CoAP
message answered as the first copy was, the transaction layer), under which aiocoap is the
message layer: CON retransmission, message-ID deduplication and confirmed notifications, so no
KSP ACK travels and no IND waits for one. The INDs keep their sequence numbers.

Address validation (docs/coap-binding.md, wire format 14) uses CoAP's own Echo option (RFC 9175
§2.4): until a source address has returned an Echo value the SIB gave it (or sent a verified
sealed payload), its answers' payloads are at most 3 × its requests' payloads; a larger answer,
and any persistent request, gets 4.01 Unauthorized with an Echo option instead. The client sends
the same POST again with that Echo; the KSP transaction it carries is answered from the
duplicate cache, not executed again.
"""
from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Hashable
from typing import Any

import aiocoap
import aiocoap.resource
from aiocoap.numbers.codes import Code
from aiocoap.numbers.constants import TransportTuning
from aiocoap.numbers.types import ACK
from aiocoap.transports.udp6 import UDP6EndpointAddress

from ksp import UDP, KPIdentity, Response, Status, Timing, encode, peek_tid
from ksp.delivery import Delivery, DeliveryPolicy
from ksp.ratelog import RateLimitFilter
from ksp.secure import MAGIC
from ksp.session import DuplicateCache, SessionOptions, SibMessageLayer, SIBSession
from ksp.session.validation import AddressBudgets, address_binding
from ksp.transactions import PERSISTENT, Exchange

from ._sibadapter import SessionAdapter, peer_log
from .pacing import Pacer
from .service import Service

__all__ = ["CONTENT_FORMAT", "RESOURCE", "CoapServer"]

CONTENT_FORMAT = 65000
"""application/x-ksp: from CoAP's Experimental Use range (65000–65535, RFC 7252 §12.3), not
registered with IANA."""

AIOCOAP_LOG = "ksp.coap.aiocoap"
"""aiocoap's logger in a CoAP server: every line a peer's datagrams can make it say (an
unparsable message, a request for no resource) goes through the one rate limit of the peer's
lines (`ksp.ratelog`)."""
logging.getLogger(AIOCOAP_LOG).addFilter(RateLimitFilter(time.monotonic))

RESOURCE = ("ksp",)
PERSISTENT_PREFIX = ("ksp", "p")
FINAL_LINGER = 60.0
"""Seconds an ended persistent transaction's resource keeps answering GET with its final IND, at
least (twice `max_age` when that is longer: a KP re-registers within one)."""
MAX_AGE = 60
"""Max-Age (s) of every IND a persistent resource sends: an observer that hears nothing for that
long re-registers (RFC 7641 §3.3.1). A resource left without observers (its notifications went
unacknowledged, or they deregistered) waits twice that for a new registration before its
operation is given up as unreachable. 60 is CoAP's default Max-Age."""
MAX_LINGERING = 1024
"""Ended transactions' resources lingering at once; over it, the oldest is unlinked early."""
NOTIFICATION_BUDGET = (2_400, 10.0)
"""Messages numbered anew in any 10 s at most, so at most 60,000 in any 247 s
(EXCHANGE_LIFETIME, 25 such windows). aiocoap numbers every message it originates from one
16-bit counter, for all peers, and a peer takes a Message ID it saw within EXCHANGE_LIFETIME for
a duplicate (RFC 7252 4.4); 5,536 IDs are left as a margin. Separate responses and the codes
that end observations are counted as they go; over the budget a resource's newest IND waits,
superseding older ones, as KSP states may; a short window keeps that wait short."""
MAX_COPIES = 8
"""POSTs of one transaction (its copies in new CoAP messages) waiting for its answer at once;
over it, the oldest is answered 5.03. The transactions waiting are at most the session's
`max_entries` (as its table of executing requests); over it, the oldest's POSTs get 5.03."""


def transport_tuning(timing: Timing | None) -> TransportTuning | None:
    """aiocoap's retransmission parameters for the CON messages a peer originates, from KSP's
    `Timing` (None: aiocoap's defaults, which are CoAP's, as `Timing()`'s)."""
    if timing is None:
        return None
    return type("KspTuning", (TransportTuning,), {
        "ACK_TIMEOUT": timing.ack_timeout, "ACK_RANDOM_FACTOR": timing.ack_random_factor,
        "MAX_RETRANSMIT": timing.max_retransmit})()


def _ksp_message(payload: bytes, code: Code = Code.CONTENT, **options: Any) -> aiocoap.Message:
    if not payload:
        return aiocoap.Message(code=code, **options)
    return aiocoap.Message(code=code, payload=payload, content_format=CONTENT_FORMAT, **options)


def _unavailable(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(aiocoap.Message(code=Code.SERVICE_UNAVAILABLE))


class _CoapLayer(SibMessageLayer):
    """The SIB session's message layer over aiocoap: the duplicate cache (a transaction sent
    again in a new CoAP message is answered as the first copy was); what the session sends
    completes the POSTs waiting for it; INDs go to the resources' observers (counted delivered:
    CoAP confirms or ends the observation); a KSP ACK is answered 0x03.

    It asks its server only through the server's methods for it (`CoapServer`, "what its
    message layer asks"): `wait_for_answer`, `answer`, `answer_empty`, `move_waiting`,
    `add_resource`, `publish`, `remove_resource`; the server gives it a POST with `take`."""

    policy = DeliveryPolicy.OBSERVED
    sealed = True

    def __init__(self, server: "CoapServer") -> None:
        self.server = server
        self._post: asyncio.Future | None = None  # the POST `take` is giving the session

    def take(self, post: asyncio.Future, payload: bytes, addr: Hashable, now: float) -> bool:
        """Give the session the payload of a POST from `addr`; `post` is completed with its
        answer (it waits from the moment the session opened the message, so an answer the
        session sends at once reaches it). False: a sealed payload that did not open (the POST
        waits for nothing)."""
        self._post = post
        try:
            self.session.receive_message(payload, addr, now)
            return self._post is None
        finally:
            self._post = None

    def attach(self, session: SIBSession) -> None:
        super().attach(session)
        self.cache = DuplicateCache(session.timing.exchange_lifetime, session.max_entries,
                                    session.options.max_cache_bytes)

    def sizes(self) -> dict[str, int]:
        return {"recent requests": len(self.cache)}

    def receiving(self, data: bytes, addr: Hashable) -> None:
        post, self._post = self._post, None
        if post is not None:
            self.server.wait_for_answer(post, addr, peek_tid(data))

    def send(self, data: bytes, addr: Hashable, answering: tuple | None = None) -> None:
        self.server.answer(data, addr, answering)

    def answered(self, ex: Exchange, data: bytes | None) -> None:
        self.cache.answered(ex, data)
        if data is None:  # the NON rule sent nothing
            self.server.answer_empty((ex.addr, ex.key[1]))

    def duplicate(self, key: tuple, addr: Hashable) -> bool:
        seen = self.cache.get(key)  # its exchange while it executes, True once answered
        if seen is None:
            return False
        if seen is not True and seen.addr != addr:  # the KP moved: its copies wait here now
            self.server.move_waiting((seen.addr, key[1]), (addr, key[1]))
        self.cache.answer_copy(key, addr, lambda data, to: self.send(data, to, key),
                               self.session.stats)
        if key[:2] not in self.session.transactions.executing:  # answered: with nothing, 2.04
            self.server.answer_empty((addr, key[1]))
        return True

    def behind(self, key: tuple, number: int) -> int | None:
        return self.cache.behind(key, number)

    def spent(self, kp: KPIdentity, number: int) -> None:
        self.cache.spent(kp, number)

    def remember(self, key: tuple, ex: Exchange, now: float, number: int = -1) -> None:
        self.cache.add(key, ex, now, number)
        if ex.tx in PERSISTENT:  # before the service sees it: its RES may come at once
            self.server.add_resource(key[0], key[1], ex.addr)

    def expire(self, now: float) -> None:
        self.cache.expire(now)

    def deliver(self, key, d: Delivery, addr: Hashable, data: bytes, now: float) -> None:
        self.server.publish(key, data, d.final)
        if d.final:
            self.session.end_persistent(*key)

    def ended(self, key: tuple[KPIdentity, int]) -> None:
        self.server.remove_resource(*key)  # also when its delivery was evicted from the table

    def forget(self, key, d: Delivery, evicted: bool) -> None:
        if not evicted:  # an evicted delivery stays with its channel and resource
            self.server.remove_resource(*key)

    def on_ack(self, ack, addr: Hashable, now: float) -> None:
        self.send(encode(Response(ack.tid, Status.INVALID_MESSAGE_TYPE)), addr)


class _PersistentResource(aiocoap.resource.ObservableResource):
    """`/ksp/p/<token>`: the newest IND of one persistent transaction, observable."""

    def __init__(self, server: "CoapServer", key: tuple[KPIdentity, int], addr: Hashable) -> None:
        super().__init__()
        self.server, self.key = server, key
        self.addr = addr  # a SealedAddr: the KP spoke sealed, every IND leaves sealed
        self.path = PERSISTENT_PREFIX + (secrets.token_urlsafe(9),)
        self.latest = b""
        self.final = False  # `latest` is the final IND: its notification ends the observations
        self.ended = False
        self.observed = False
        self.unheard: asyncio.TimerHandle | None = None  # no observer: the SIB gives up then

    async def render_get(self, request: aiocoap.Message) -> aiocoap.Message:
        sealed = self.server.session.seal(self.latest, self.addr)
        if sealed is None:  # its KP's key was removed meanwhile
            return aiocoap.Message(code=Code.UNAUTHORIZED)
        return _ksp_message(sealed[0], max_age=self.server.max_age)

    async def add_observation(self, request, serverobservation) -> None:
        if not self.ended:
            await super().add_observation(request, serverobservation)
        else:  # its final IND, unobserved (aiocoap 0.4.17's render needs it accepted)
            serverobservation.accept(lambda: None)
            serverobservation.deregister()

    def publish(self, data: bytes, final: bool) -> None:
        self.latest, self.final = data, final
        self.server._notify(self)

    def notify(self) -> None:
        """Send the newest IND to every observer; if its KP's key was removed meanwhile, end
        the observations with 4.01, which carries nothing of it (as `answer`), and the SIB
        drops the operation as one nobody listens to."""
        for observation in list(self._observations):  # sealed afresh for each
            sealed = self.server.session.seal(self.latest, self.addr)
            if sealed is None:
                observation.trigger(aiocoap.Message(code=Code.UNAUTHORIZED), is_last=True)
            else:
                observation.trigger(_ksp_message(sealed[0], **self.server.notifying),
                                    is_last=self.final)

    def update_observation_count(self, newcount: int) -> None:
        if newcount:
            self.observed = True
            self.heard()
        elif self.observed and not self.ended and self.unheard is None:
            self.server.observers_lost += 1
            # Deregistered, or a CON notification went unacknowledged: a KP that still
            # listens re-registers within Max-Age and gets the newest IND. One that does not
            # within twice that is given up as unreachable (as when IND retries run out over
            # UDP): the owner decides (the SIB ends its operations).
            self.unheard = self.server.loop.call_later(
                2 * self.server.max_age, self.server._lost_observers, self.key)

    def heard(self) -> None:
        if self.unheard is not None:
            self.unheard.cancel()
            self.unheard = None


def bad_request(data: bytes) -> aiocoap.Message | None:
    """The 4.00 Bad Request that acknowledges the confirmable request `data` whose options
    cannot be read (header and token are enough: RFC 7252 §3), None for any other."""
    if len(data) < 4 or data[0] >> 6 != 1 or (data[0] >> 4) & 3 != 0:  # version 1, CON
        return None
    token_length = data[0] & 0x0F
    if token_length > 8 or len(data) < 4 + token_length or not 1 <= data[1] < 32:
        return None  # a reserved token length, cut short, or no request
    return aiocoap.Message(mtype=ACK, mid=int.from_bytes(data[2:4], "big"),
                           token=data[4:4 + token_length], code=Code.BAD_REQUEST)


class CoapServer(SessionAdapter, aiocoap.resource.Resource):
    """The SIB side over CoAP, and its resource `/ksp` (POST a REQ, get its RES). Start with
    `await CoapServer.start(service, host, port)`."""

    transport_name = "coap"

    def __init__(self, service: Service, timing: Timing | None = None, *,
                 max_lingering: int = MAX_LINGERING,
                 notification_budget: tuple[int, float] = NOTIFICATION_BUDGET,
                 max_age: int = MAX_AGE, options: SessionOptions | None = None) -> None:
        self.layer = _CoapLayer(self)
        super().__init__(service, SIBSession(UDP, layer=self.layer, options=options,
                                             timing=timing))
        self.max_lingering = max_lingering
        self.max_age = max_age
        self.linger = max(FINAL_LINGER, 2.0 * max_age)
        self.observers_lost = 0
        """Times a resource was left without observers (stats)."""
        #: Options of every notification: its Max-Age; CON ones retransmitted as `timing` says.
        self.notifying: dict[str, Any] = {"max_age": max_age}
        tuning = transport_tuning(timing)
        if tuning is not None:
            self.notifying["transport_tuning"] = tuning
        #: Notifications to send within NOTIFICATION_BUDGET: a resource's newest IND waits
        #: its turn there; `_release_at`, when the next that waits goes.
        self.pacer: Pacer[_PersistentResource] = Pacer(
            *notification_budget, cost=lambda resource: len(resource._observations))
        aiocoap.resource.Resource.__init__(self)
        self.port = 0
        self.site = aiocoap.resource.Site()
        self.site.add_resource(RESOURCE, self)
        self.context: aiocoap.Context | None = None
        self._waiting: dict[tuple[Hashable, int], list[asyncio.Future]] = {}
        self._persistent: dict[tuple[KPIdentity, int], _PersistentResource] = {}
        self._lingering: dict[_PersistentResource, asyncio.TimerHandle] = {}
        self._release_at: asyncio.TimerHandle | None = None
        options = self.session.options
        #: Payload bytes received and sent per unvalidated address, and the validated ones
        #: (None: no limit, `amplification_factor` 0).
        self.budgets = (AddressBudgets(options.amplification_factor, options.max_addresses)
                        if options.amplification_factor else None)

    @classmethod
    async def start(cls, service: Service, host: str = "127.0.0.1", port: int = 0, *,
                    timing: Timing | None = None, max_lingering: int = MAX_LINGERING,
                    notification_budget: tuple[int, float] = NOTIFICATION_BUDGET,
                    max_age: int = MAX_AGE,
                    options: SessionOptions | None = None) -> "CoapServer":
        """`timing`: its EXCHANGE_LIFETIME bounds the duplicate cache, and the SIB's CON
        notifications are retransmitted as it says; `max_age`: see `MAX_AGE`; `options`: the
        bounds of the `SIBSession`'s tables (`ksp.session.SessionOptions`)."""
        self = cls(service, timing, max_lingering=max_lingering,
                   notification_budget=notification_budget, max_age=max_age, options=options)
        self.context = await aiocoap.Context.create_server_context(
            self.site, bind=(host, port), transports=["udp6"], loggername=AIOCOAP_LOG)
        self.port = self._interface()._local_port()
        self._count_originated(self._manager())
        self._refuse_undecodable(self._interface())
        return self

    def _refuse_undecodable(self, interface) -> None:
        """A datagram whose option aiocoap cannot decode (text that is not UTF-8, which it
        lets through as an exception with a traceback on every datagram) is answered 4.00 Bad
        Request if confirmable, with one line a minute in the log."""
        received = interface.datagram_msg_received

        def guarded(data, ancdata, flags, address):
            try:
                received(data, ancdata, flags, address)
            except UnicodeDecodeError:
                peer_log.info("coap option", "CoAP from %s: an option that is not UTF-8, "
                              "answered 4.00", address[0])
                answer = bad_request(data)
                if answer is not None:
                    answer.remote = UDP6EndpointAddress(address, interface)
                    interface.send(answer)

        interface.datagram_msg_received = guarded

    def _count_originated(self, manager) -> None:
        """Count in the budget every message aiocoap's message manager numbers anew that is
        not a notification (those the budget counts before they go): separate responses, and
        the 4.04 or 4.01 that ends observations. Piggybacked answers reuse the request's ID."""
        send = manager.send_message

        def counted(message, *args, **kwargs):
            send(message, *args, **kwargs)
            if (message.mid is not None and message.mtype is not ACK
                    and message.opt.observe is None):
                self.pacer.spend(1, self.loop.time(), force=True)

        manager.send_message = counted

    def _manager(self):
        """aiocoap's message manager: it numbers the messages this server originates."""
        return self.context.request_interfaces[0].token_interface

    def _interface(self):
        return self._manager().message_interface

    def tap(self, pcap, host: str) -> None:
        """Write every CoAP datagram in and out (KSP in their payloads) to `pcap`, a
        `transports.pcap.PcapWriter`: aiocoap owns the socket, so its message interface's
        receive and send are wrapped (written before sending, as the UDP adapter does)."""
        mi, local = self._interface(), (host, self.port)
        received, send = mi.datagram_msg_received, mi.send

        def tapped_received(data, ancdata, flags, address):
            pcap.udp(address[:2], local, data)
            received(data, ancdata, flags, address)

        def tapped_send(message):
            pcap.udp(local, message.remote.sockaddr[:2], message.encode())
            send(message)

        mi.datagram_msg_received, mi.send = tapped_received, tapped_send

    async def close(self) -> None:
        if self._release_at is not None:
            self._release_at.cancel()
        self.pacer.clear()
        for key in list(self._persistent):
            self.remove_resource(*key)
        for resource in list(self._lingering):
            self._unlink(resource)
        self.shut()
        if self.context is not None:
            await self.context.shutdown()

    def sizes(self) -> dict[str, int]:
        """The session's tables and this server's: POSTs waiting, resources of active and of
        ended (lingering) transactions, notifications waiting for the budget."""
        return {**self.session.sizes(), "posts waiting": len(self._waiting),
                "resources": len(self._persistent), "lingering": len(self._lingering),
                "notifications waiting": len(self.pacer)}

    def transmit(self) -> None:
        """Nothing held: every answer completed its POST as the session sent it."""

    # -- requests --------------------------------------------------------------------------

    async def render_post(self, request: aiocoap.Message) -> aiocoap.Message:
        if request.opt.content_format not in (None, CONTENT_FORMAT):
            return aiocoap.Message(code=Code.UNSUPPORTED_CONTENT_FORMAT)
        answer = self.loop.create_future()
        addr = getattr(request.remote, "sockaddr", (request.remote.hostinfo,))[:2]
        payload, now = request.payload, self.loop.time()
        budgets = self.budgets if payload[:1] != bytes((MAGIC,)) else None  # sealed: verified
        if budgets is not None and not self._admits(budgets, request, addr, now):
            return self._echo(addr, now)
        if not self.layer.take(answer, payload, addr, now):
            return aiocoap.Message(code=Code.UNAUTHORIZED)  # a sealed payload that did not open
        self.pump()
        message = await answer
        if budgets is not None and not budgets.spend(addr, len(message.payload)):
            return self._echo(addr, now)  # the RES stays in the duplicate cache for the retry
        return message

    def _admits(self, budgets: AddressBudgets, request: aiocoap.Message, addr: Hashable,
                now: float) -> bool:
        """Count the POST's payload in `addr`'s budget, validate `addr` if it returned a
        verifying Echo; False for a persistent request from an address not validated."""
        payload = request.payload
        budgets.received(addr, len(payload))
        echo = request.opt.echo
        if echo is not None and self.session.echoes.verify(echo, address_binding(addr), now):
            budgets.validate(addr)
        return (budgets.is_validated(addr) or len(payload) < 2
                or (payload[1] & 0x7F) not in PERSISTENT)

    def _echo(self, addr: Hashable, now: float) -> aiocoap.Message:
        """4.01 Unauthorized with an Echo option binding `addr` (RFC 9175 §2.4)."""
        self.session.stats.held_for_validation += 1
        message = aiocoap.Message(code=Code.UNAUTHORIZED)
        message.opt.echo = self.session.echoes.make(address_binding(addr), now)
        return message

    # -- what its message layer asks (`_CoapLayer`) --------------------------------------------

    def wait_for_answer(self, post: asyncio.Future, addr: Hashable, tid: int | None) -> None:
        """POST `post`, whose KSP message the session opened, waits for what goes to (addr,
        tid); one without a TID is answered 4.00 at once."""
        if tid is None:
            post.set_result(aiocoap.Message(code=Code.BAD_REQUEST,
                                            payload=b"not a KSP request"))
        else:
            self._wait((addr, tid), [post])

    def _wait(self, key: tuple[Hashable, int], futures) -> None:
        """`futures` (POSTs) wait on `key`, within `MAX_COPIES` and `max_entries`."""
        waiting = self._waiting.setdefault(key, [])
        waiting.extend(futures)
        while len(waiting) > MAX_COPIES:
            _unavailable(waiting.pop(0))
        if len(self._waiting) > self.session.max_entries:
            for future in self._waiting.pop(next(iter(self._waiting))):
                _unavailable(future)

    def answer(self, data: bytes, addr: Hashable, answering: tuple | None) -> None:
        """Answer the POSTs waiting on (addr, TID of `data`) with KSP message `data`, sealed
        for `addr` (4.01 if it no longer can be); 2.01 with the resource's Location-Path when
        it is the RES that starts persistent transaction `answering` (the request's cache
        key)."""
        resource = None
        if answering is not None and answering[2] in PERSISTENT:
            resource = self._persistent.get(answering[:2])  # gone if it did not start
        location = {} if resource is None else {"location_path": resource.path}
        sealed = self.session.seal(data, addr)
        if sealed is None:
            message = aiocoap.Message(code=Code.UNAUTHORIZED)
        else:
            message = _ksp_message(sealed[0], Code.CREATED if location else Code.CONTENT,
                                   **location)
        self._complete((addr, peek_tid(data)), message)

    def answer_empty(self, key: tuple[Hashable, int]) -> None:
        """The NON rule sent nothing for (addr, TID) `key`: CoAP still answers the POSTs
        waiting on it, 2.04 without payload."""
        if key in self._waiting:
            self._complete(key, aiocoap.Message(code=Code.CHANGED))

    def _complete(self, key: tuple[Hashable, int], message: aiocoap.Message) -> None:
        """Answer the POSTs waiting on `key` with `message`."""
        for n, future in enumerate(self._waiting.pop(key, ())):
            if not future.done():  # copies of a duplicate's POST get a message each
                future.set_result(message.copy() if n else message)

    def move_waiting(self, key: tuple[Hashable, int], to: tuple[Hashable, int]) -> None:
        """The POSTs waiting on `key` wait on `to` (their KP's new address) now."""
        self._wait(to, self._waiting.pop(key, ()))

    # -- persistent operations (`add_resource`, `publish`, `remove_resource`: for the layer) --

    def add_resource(self, kp: KPIdentity, tid: int, addr: Hashable) -> None:
        """Persistent transaction (kp, tid) starts: its resource `/ksp/p/<token>` is made
        (kept if the TID is active already); its INDs leave sealed if `addr` is sealed."""
        if (kp, tid) not in self._persistent:  # R12: a request for an active TID keeps it
            resource = self._persistent[(kp, tid)] = _PersistentResource(self, (kp, tid), addr)
            self.site.add_resource(resource.path, resource)

    def publish(self, key: tuple[KPIdentity, int], data: bytes, final: bool) -> None:
        """IND `data` of persistent transaction `key` goes to its resource's observers; a
        final one ends their observations and leaves the resource lingering with it."""
        resource = self._persistent.get(key)
        if resource is not None and not resource.ended:
            resource.publish(data, final)
            if final:  # lingers with the final IND, for a KP whose observation is on its way
                self.remove_resource(*key, notify=False, linger=True)

    def remove_resource(self, kp: KPIdentity, tid: int, notify: bool = True,
                        linger: bool = False) -> None:
        """Forget a persistent transaction's resource; `notify`: end its observations with
        4.04 (not after a final IND, which ends them itself); `linger`: keep answering GET
        with the final IND for `self.linger` seconds."""
        resource = self._persistent.pop((kp, tid), None)
        if resource is None:
            return
        resource.ended = True
        resource.heard()  # nothing left to give up
        if notify:  # its pending IND is moot: the 4.04 below ends its observations
            self.pacer.discard(resource)
        if linger:
            self._lingering[resource] = self.loop.call_later(self.linger, self._unlink,
                                                             resource)
            if len(self._lingering) > self.max_lingering:
                self._unlink(next(iter(self._lingering)))
        else:
            self._unlink(resource)
        for observation in list(resource._observations) if notify else ():
            observation.trigger(aiocoap.Message(code=Code.NOT_FOUND), is_last=True)

    def _unlink(self, resource: _PersistentResource) -> None:
        """Take `resource` off the site, and off the lingering ones (its timer cancelled: a
        no-op when it is the timer that calls)."""
        handle = self._lingering.pop(resource, None)
        if handle is not None:
            handle.cancel()
        self.site.remove_resource(resource.path)

    def _lost_observers(self, key: tuple[KPIdentity, int]) -> None:
        """Nobody re-registered in time: the service decides. The resource stays until the
        operation ends, so that its final IND lingers for a KP that comes back."""
        resource = self._persistent.get(key)
        if resource is not None:
            resource.unheard = None
            self.service.kp_unreachable(*key)

    # -- the notification budget (NOTIFICATION_BUDGET) ---------------------------------------

    def _notify(self, resource: _PersistentResource) -> None:
        """Notify `resource`'s observers now if the budget allows and nothing waits before it;
        else its newest IND waits (an IND published meanwhile supersedes it)."""
        if self.pacer.offer(resource, self.loop.time()):
            resource.notify()
        else:
            self._schedule()

    def _release(self) -> None:
        """Send what waits, oldest first, as far as the budget allows."""
        self._release_at = None
        for resource in self.pacer.release(self.loop.time()):
            resource.notify()
        self._schedule()

    def _schedule(self) -> None:
        at = self.pacer.next_release(self.loop.time())
        if at is not None and self._release_at is None:
            self._release_at = self.loop.call_at(at, self._release)
