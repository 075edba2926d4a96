"""KSP over CoAP (aiocoap): the binding of docs/coap-binding.md.

A KSP REQ (UDP layout) is the payload of a POST to `/ksp` with Content-Format 65000; the RES is
the payload of the CoAP response (piggybacked when the SIB answers within aiocoap's
EMPTY_ACK_DELAY, separate otherwise). A persistent operation that starts answers 2.01 Created
with a Location-Path `/ksp/p/<token>`: a per-transaction resource whose GET returns the newest
IND and which the KP observes (RFC 7641) to receive every further IND as a notification.
Reliability, retransmission and duplicate suppression of messages are CoAP's (message IDs, CON),
so no KSP-level ACKs travel; the INDs keep their sequence numbers so the KP drops stale ones. A
KSP transaction sent again in a new CoAP message (same KP, TID and type, within
EXCHANGE_LIFETIME) is a duplicate as over UDP: answered as the first copy was, never executed
twice.

Sealed messages (docs/wire-format.md section 13): the POST payload may be a sealed envelope;
the SIB opens it with the service's `sealers` (shared with UDP: one replay window per KP
whatever the transport) before anything else, answers 4.01 with no payload to one that does not
open (unknown KP, bad tag, replay: nothing of it is believed), and seals every answer and
notification to that KP.
"""
from __future__ import annotations

import asyncio
import logging
import secrets
from typing import Any

import aiocoap
import aiocoap.resource
from aiocoap.numbers.codes import Code

from ksp import (
    UDP, Ack, DecodeError, KPIdentity, Request, Response, Status, Timing, decode_kp_message,
    encode, peek_tid,
)
from ksp.delivery import Delivery, DeliveryState
from ksp.secure import MAGIC, SealedAddr, SealError, SealerTable
from ksp.session import DuplicateCache
from ksp.transactions import PERSISTENT, SibTransactions

from .service import Channel, Service

__all__ = ["CONTENT_FORMAT", "RESOURCE", "CoapServer", "CoapLink", "open_coap_link"]


def __getattr__(name: str):
    """The client (`transports.coap_client`) where it used to be."""
    if name in ("CoapLink", "open_coap_link"):
        from . import coap_client
        return getattr(coap_client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

log = logging.getLogger("transports.coap")

CONTENT_FORMAT = 65000
"""application/x-ksp: from CoAP's Experimental Use range (65000–65535, RFC 7252 §12.3), not
registered with IANA."""

RESOURCE = ("ksp",)
PERSISTENT_PREFIX = ("ksp", "p")
FINAL_LINGER = 60.0
"""Seconds an ended persistent transaction's resource keeps answering GET with its final IND."""


def _ksp_message(payload: bytes, code: Code = Code.CONTENT, **options: Any) -> aiocoap.Message:
    return aiocoap.Message(code=code, payload=payload, content_format=CONTENT_FORMAT, **options)


# ---------------------------------------------------------------------------------------------
# Server


class CoapChannel:
    """A `Channel` for one CoAP request: `respond` completes the POST; INDs go to the
    per-transaction resource's observers."""

    __slots__ = ("transport", "kp", "tid", "_server", "_future")

    durable = False  # an observation ends with the process: the KP observes anew

    def __init__(self, server: "CoapServer", kp: KPIdentity, tid: int,
                 future: asyncio.Future | None = None) -> None:
        self.transport = "coap"
        self.kp = kp
        self.tid = tid
        self._server = server
        self._future = future

    def respond(self, response: Response) -> None:
        if self._future is None or self._future.done():
            return  # rebuilt channel, or the CoAP exchange is gone: nothing waits for it
        self._future.set_result(response._replace(tid=self.tid))

    def indicate(self, response: Response) -> None:
        self._server._publish(self.kp, self.tid, response._replace(tid=self.tid))

    def end(self) -> None:
        self._server._end(self.kp, self.tid)

    def export(self) -> DeliveryState | None:
        d = self._server.transactions.deliveries.get((self.kp, self.tid))
        return d.export() if d is not None else None

    def restore(self, state: DeliveryState) -> None:
        """Nothing to take back: CoAP operations are not durable."""


class _PersistentResource(aiocoap.resource.ObservableResource):
    """`/ksp/p/<token>`: the newest IND of one persistent transaction, observable."""

    def __init__(self, server: "CoapServer", kp: KPIdentity, tid: int, token: str,
                 sealed: SealedAddr | None = None) -> None:
        super().__init__()
        self.server, self.kp, self.tid, self.token = server, kp, tid, token
        self.sealed = sealed  # the KP spoke sealed: every IND leaves sealed
        self.path = PERSISTENT_PREFIX + (token,)
        self.delivery: Delivery | None = None  # the operation's, held here too (`_forget`)
        self.latest = b""
        self.ended = False
        self.observed = False

    async def render_get(self, request: aiocoap.Message) -> aiocoap.Message:
        return _ksp_message(self.server._seal(self.latest, self.sealed))

    async def add_observation(self, request, serverobservation) -> None:
        if not self.ended:  # an ended one answers its final IND, unobserved
            await super().add_observation(request, serverobservation)

    def publish(self, data: bytes, final: bool) -> None:
        self.latest = data
        for observation in list(self._observations):
            observation.trigger(_ksp_message(self.server._seal(data, self.sealed)),
                                is_last=final)

    def update_observation_count(self, newcount: int) -> None:
        if newcount:
            self.observed = True
        elif self.observed and not self.ended:
            # Deregistered, or CON notifications went unacknowledged: nobody listens (as IND
            # retries running out over UDP). The owner decides; the SIB drops the operation.
            self.server._lost_observers(self.kp, self.tid)


class _RequestResource(aiocoap.resource.Resource):
    """`/ksp`: POST a KSP REQ, get its RES."""

    def __init__(self, server: "CoapServer") -> None:
        super().__init__()
        self.server = server

    async def render_post(self, request: aiocoap.Message) -> aiocoap.Message:
        return await self.server._handle(request)


#: How a request was answered: CoAP code, KSP payload (b"" for a bare 2.04), Location-Path.
_Answer = tuple[Code, bytes, "tuple[str, ...] | None"]


def _reply(answer: _Answer, seal=None) -> aiocoap.Message:
    code, payload, location = answer
    if payload and seal is not None:
        payload = seal(payload)
    if not payload:
        return aiocoap.Message(code=code)
    if location is not None:
        return _ksp_message(payload, code, location_path=location)
    return _ksp_message(payload, code)


class _CoapExchange:
    """A request in the duplicate cache: its answer, once there is one."""

    __slots__ = ("answer", "expires", "response")

    def __init__(self, answer: asyncio.Future) -> None:
        self.answer = answer
        self.expires = 0.0
        self.response: bytes | None = None  # the payload, for the cache's byte count


class CoapServer:
    """The SIB side over CoAP. Start with `await CoapServer.start(service, host, port)`.

    Besides CoAP's own deduplication (message IDs), KSP transactions are deduplicated as
    `SIBSession` does over UDP (`ksp.session.DuplicateCache`, docs/coap-binding.md)."""

    transport_name = "coap"

    def __init__(self, service: Service, timing: Timing | None = None,
                 max_entries: int = 65_536, max_cache_bytes: int = 8 << 20) -> None:
        self.service = service
        #: The service's sealers (`ksp.secure.SealerTable`; None: the sealed mode is off and a
        #: sealed payload is answered as a plain one would be, 0x01).
        self.sealers: SealerTable | None = getattr(service, "sealers", None)
        self.sealed_dropped = 0  # sealed payloads that did not open
        lifetime = (timing or Timing()).exchange_lifetime
        self._exchanges = DuplicateCache(lifetime, max_entries, max_cache_bytes)
        #: The transaction layer UDP and TCP share (`ksp.transactions`): the persistent
        #: lifecycle, the NON rule, MAX RESPONSE SIZE, IND numbering; CoAP's own reliability
        #: (aiocoap: CON, message IDs, Observe) is the message layer under it.
        self.transactions = SibTransactions(UDP, numbered=True, acked=False,
                                            max_entries=max_entries, on_forget=self._forget)
        self.duplicates = 0  # requests answered as duplicates (stats)
        self.port = 0
        self.site = aiocoap.resource.Site()
        self.site.add_resource(RESOURCE, _RequestResource(self))
        self.context: aiocoap.Context | None = None
        self._persistent: dict[tuple[KPIdentity, int], _PersistentResource] = {}
        self._lingering: dict[_PersistentResource, asyncio.TimerHandle] = {}

    @classmethod
    async def start(cls, service: Service, host: str = "127.0.0.1", port: int = 0, *,
                    timing: Timing | None = None, **cache_args) -> "CoapServer":
        """`timing`: its EXCHANGE_LIFETIME bounds the duplicate cache; `cache_args`:
        `max_entries`, `max_cache_bytes`."""
        self = cls(service, timing, **cache_args)
        self.context = await aiocoap.Context.create_server_context(
            self.site, bind=(host, port), transports=["udp6"])
        mi = self.context.request_interfaces[0].token_interface.message_interface
        self.port = mi._local_port()
        return self

    def channel(self, kp: KPIdentity, tid: int) -> Channel:
        return CoapChannel(self, kp, tid)

    def tap(self, pcap, host: str) -> None:
        """Write every CoAP datagram in and out (KSP in their payloads) to `pcap`, a
        `transports.pcap.PcapWriter`: aiocoap owns the socket, so its message interface's
        receive and send are wrapped (written before sending, as the UDP adapter does)."""
        mi = self.context.request_interfaces[0].token_interface.message_interface
        local = (host, self.port)
        received, send = mi.datagram_msg_received, mi.send

        def tapped_received(data, ancdata, flags, address):
            pcap.udp(address[:2], local, data)
            received(data, ancdata, flags, address)

        def tapped_send(message):
            pcap.udp(local, message.remote.sockaddr[:2], message.encode())
            send(message)

        mi.datagram_msg_received, mi.send = tapped_received, tapped_send

    async def close(self) -> None:
        for key in list(self._persistent):
            self._remove(*key)
        for resource, handle in list(self._lingering.items()):
            handle.cancel()
            self._unlink(resource)
        if self.context is not None:
            await self.context.shutdown()

    async def _handle(self, request: aiocoap.Message) -> aiocoap.Message:
        if request.opt.content_format not in (None, CONTENT_FORMAT):
            return aiocoap.Message(code=Code.UNSUPPORTED_CONTENT_FORMAT)
        data, sealed = request.payload, None
        if data[:1] == bytes((MAGIC,)) and self.sealers is not None:
            try:
                data, sealed = self.sealers.open(data, request.remote.hostinfo)
            except SealError:
                self.sealed_dropped += 1
                return aiocoap.Message(code=Code.UNAUTHORIZED)
        seal = None if sealed is None else (lambda payload: self._seal(payload, sealed))
        try:
            req = decode_kp_message(data, UDP)
        except DecodeError as exc:
            tid = exc.tid if exc.tid is not None else peek_tid(data)
            if tid is None:
                return aiocoap.Message(code=Code.BAD_REQUEST, payload=b"not a KSP request")
            return _reply((Code.CONTENT, encode(Response(tid, exc.status), UDP), None), seal)
        if isinstance(req, Ack):  # CoAP acknowledges notifications itself
            return _reply((Code.CONTENT, encode(Response(req.tid, Status.INVALID_MESSAGE_TYPE),
                                                UDP), None), seal)
        if sealed is not None:  # the envelope names the KP; a password has no place (13.5)
            refusal = Status.ACCESS_DENIED if req.options.credentials is not None else None
            kp = KPIdentity(sealed.kp_id, None)
        else:
            refusal = await self._authenticate(req, request.remote)
            kp = KPIdentity.of(req, request.remote.hostinfo)
        if refusal is not None:
            return _reply((Code.CONTENT, encode(Response(req.tid, refusal), UDP), None), seal)
        # KSP-level duplicates: the same transaction in another CoAP message (a new message
        # ID: a KP rebooted with its TIDs kept, a proxy) is answered as the first copy was.
        loop = asyncio.get_running_loop()
        key = (kp, req.tid, req.tx)
        self._exchanges.expire(loop.time())
        exchange = self._exchanges.get(key)
        if exchange is not None:
            self.duplicates += 1
            return _reply(await asyncio.shield(exchange.answer), seal)
        exchange = _CoapExchange(loop.create_future())
        self._exchanges.add(key, exchange, loop.time())
        try:
            answer = await self._execute(req, kp, sealed)
        except BaseException:
            self._exchanges.discard(key)  # not answered: a later copy is a new request
            exchange.answer.cancel()
            raise
        exchange.answer.set_result(answer)
        self._exchanges.answered(key, exchange, answer[1])
        return _reply(answer, seal)

    def _seal(self, payload: bytes, sealed: SealedAddr | None) -> bytes:
        """Sealed afresh for each message (a new counter), for a KP that spoke sealed."""
        if sealed is None or not payload or self.sealers is None:
            return payload
        return self.sealers.seal(payload, sealed)

    async def _authenticate(self, req: Request, remote) -> Status | None:
        """The service's verdict on the CREDENTIALS (None: accepted, or nothing to check),
        before the duplicate cache is looked at, as `SIBSession` asks it (`sib.auth`)."""
        creds = req.options.credentials
        auth = getattr(self.service, "authenticator", None)
        if creds is None or auth is None:
            return None
        kp_id, source = bytes(creds.kp_id), getattr(remote, "sockaddr", (remote.hostinfo,))[:2]
        verdict = auth.verdict(kp_id, creds.password, source)
        if verdict is None:
            await auth.verify(kp_id, creds.password, source)
            verdict = auth.verdict(kp_id, creds.password, source)
            if verdict is None:  # decided by a policy reload meanwhile: ask the client again
                verdict = Status.LIMIT_EXCEEDED
        return None if verdict == Status.OK else Status(verdict)

    async def _execute(self, req: Request, kp: KPIdentity,
                       sealed: SealedAddr | None = None) -> "_Answer":
        tid, tx = req.tid, req.tx
        future = asyncio.get_running_loop().create_future()
        resource = None
        if tx in PERSISTENT:
            if (kp, tid) in self._persistent:  # R12: an active TID is not reused
                return Code.CONTENT, encode(Response(tid, Status.INVALID_DATA_FORMAT), UDP), None
        self.transactions.begin(kp, req, None)
        if tx in PERSISTENT:
            resource = self._add(kp, tid, sealed)
        self.service.submit(req, CoapChannel(self, kp, tid, future))
        try:
            response = await future
        except asyncio.CancelledError:
            self.transactions.executing.pop((kp, tid), None)
            if resource is not None:
                self._end(kp, tid)
            raise
        # The RES starts or ends persistent operations (`on_forget` removes their resources).
        _, payload = self.transactions.answer(kp, tid, response._replace(tid=tid))
        if resource is not None and response.status == Status.OK:
            return Code.CREATED, payload, resource.path
        if payload is None:
            return Code.CHANGED, b"", None  # the paper's "no RES" for NON
        return Code.CONTENT, payload, None

    def _add(self, kp: KPIdentity, tid: int,
             sealed: SealedAddr | None = None) -> _PersistentResource:
        resource = _PersistentResource(self, kp, tid, secrets.token_urlsafe(9), sealed)
        resource.delivery = self.transactions.deliveries[(kp, tid)]
        self._persistent[(kp, tid)] = resource
        self.site.add_resource(resource.path, resource)
        return resource

    def _publish(self, kp: KPIdentity, tid: int, response: Response) -> None:
        resource = self._persistent.get((kp, tid))
        if resource is None or resource.ended:
            return
        d = self.transactions.delivery_for(kp, tid, resource.delivery)
        resource.publish(self.transactions.indication(d, response), d.final)
        if d.final:
            # The resource lingers with the final IND, so a KP whose observation was not yet
            # registered still reads how its operation ended.
            self._remove(kp, tid, notify=False, linger=True)
            self.transactions.end(kp, tid)

    def _end(self, kp: KPIdentity, tid: int) -> None:
        self.transactions.end(kp, tid)
        self._remove(kp, tid)

    def _forget(self, key: tuple[KPIdentity, int], d: Delivery, evicted: bool) -> None:
        """A delivery ended (TERMINATE, RESET, a failed start): its resource goes, its
        observers told 4.04 (`SibTransactions.on_forget`). An evicted one stays with its
        resource, which hands it back at the next IND."""
        if not evicted:
            self._remove(*key)

    def _remove(self, kp: KPIdentity, tid: int, notify: bool = True,
                linger: bool = False) -> None:
        """Forget a persistent transaction's resource; `notify`: end its observations with
        4.04 (not after a final IND, which ends them itself); `linger`: keep answering GET
        with the final IND for `FINAL_LINGER` seconds."""
        resource = self._persistent.pop((kp, tid), None)
        if resource is None:
            return
        resource.ended = True
        if linger:
            handle = asyncio.get_running_loop().call_later(
                FINAL_LINGER, self._unlink, resource)
            self._lingering[resource] = handle
        else:
            self._unlink(resource)
        for observation in list(resource._observations) if notify else ():
            observation.trigger(aiocoap.Message(code=Code.NOT_FOUND), is_last=True)

    def _unlink(self, resource: _PersistentResource) -> None:
        self._lingering.pop(resource, None)
        self.site.remove_resource(resource.path)

    def _lost_observers(self, kp: KPIdentity, tid: int) -> None:
        if (kp, tid) in self._persistent:
            self._end(kp, tid)
            self.service.kp_unreachable(kp, tid)
