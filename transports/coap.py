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
import itertools
import logging
import random
import secrets
from typing import Any

import aiocoap
import aiocoap.error
import aiocoap.resource
from aiocoap.numbers.codes import Code
from aiocoap.numbers.constants import TransportTuning

from ksp import (
    UDP, Ack, DecodeError, KPIdentity, Request, Response, Status, Timing, Tx, decode_kp_message,
    decode_sib_message, encode, is_newer, peek_tid,
)
from ksp.delivery import Delivery, DeliveryState
from ksp.secure import MAGIC, SealedAddr, SealError, Sealer, SealerTable
from ksp.session import MAX_UDP_PAYLOAD, DuplicateCache

from ._kplink import Link, Sink
from .errors import ClientError, KspConnectionError, KspTimeout
from .service import Channel, Service

__all__ = ["CONTENT_FORMAT", "RESOURCE", "CoapServer", "CoapLink", "open_coap_link"]

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

    __slots__ = ("transport", "kp", "tid", "_server", "_future", "_resource")

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
        resource = self._server._persistent.get((self.kp, self.tid))
        if resource is not None:
            resource.publish(response._replace(tid=self.tid))

    def end(self) -> None:
        self._server._remove(self.kp, self.tid)

    def export(self) -> DeliveryState | None:
        resource = self._server._persistent.get((self.kp, self.tid))
        return resource.delivery.export() if resource is not None else None

    def restore(self, state: DeliveryState) -> None:
        """Nothing to take back: CoAP operations are not durable."""


class _PersistentResource(aiocoap.resource.ObservableResource):
    """`/ksp/p/<token>`: the newest IND of one persistent transaction, observable."""

    def __init__(self, server: "CoapServer", kp: KPIdentity, tid: int, token: str,
                 max_size: int | None, sealed: SealedAddr | None = None) -> None:
        super().__init__()
        self.server, self.kp, self.tid, self.token = server, kp, tid, token
        self.sealed = sealed  # the KP spoke sealed: every IND leaves sealed
        self.max_size = MAX_UDP_PAYLOAD if max_size is None else min(max_size, MAX_UDP_PAYLOAD)
        self.delivery = Delivery(kp, tid, max_size=self.max_size)
        self.latest = b""
        self.ended = False
        self.observed = False

    async def render_get(self, request: aiocoap.Message) -> aiocoap.Message:
        return _ksp_message(self.server._seal(self.latest, self.sealed))

    async def add_observation(self, request, serverobservation) -> None:
        if not self.ended:  # an ended one answers its final IND, unobserved
            await super().add_observation(request, serverobservation)

    def publish(self, response: Response) -> None:
        if self.ended:
            return
        seq = self.delivery.next_seq(response)
        self.latest = encode(response._replace(indication=True, seq=seq), UDP,
                             max_size=self.max_size)
        self.delivery.indicated(response)
        final = response.status != Status.OK
        for observation in list(self._observations):
            observation.trigger(_ksp_message(self.server._seal(self.latest, self.sealed)),
                                is_last=final)
        if final:
            # The resource lingers with the final IND, so a KP whose observation was not yet
            # registered still reads how its operation ended.
            self.server._remove(self.kp, self.tid, notify=False, linger=True)

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
        if tx.persistent:
            if (kp, tid) in self._persistent:  # R12: an active TID is not reused
                return Code.CONTENT, encode(Response(tid, Status.INVALID_DATA_FORMAT), UDP), None
            resource = self._add(kp, tid, req.options.max_response_size, sealed)
        self.service.submit(req, CoapChannel(self, kp, tid, future))
        try:
            response = await future
        except asyncio.CancelledError:
            if resource is not None:
                self._remove(kp, tid)
            raise
        max_size = req.options.max_response_size
        max_size = MAX_UDP_PAYLOAD if max_size is None else min(max_size, MAX_UDP_PAYLOAD)
        payload = encode(response._replace(tid=tid), UDP, max_size=max_size)
        status = response.status
        if resource is not None:
            if status == Status.OK:
                return Code.CREATED, payload, resource.path
            self._remove(kp, tid)  # it never started
        elif tx is Tx.TERMINATE and status in (Status.OK, Status.UNKNOWN_TRANSACTION):
            self._remove(kp, tid)
        elif tx is Tx.RESET and status == Status.OK:
            for key in [k for k in self._persistent if k[0] == kp]:
                self._remove(*key)
        if not req.confirmable and status == Status.OK and response.result is None:
            return Code.CHANGED, b"", None  # the paper's "no RES" for NON
        return Code.CONTENT, payload, None

    def _add(self, kp: KPIdentity, tid: int, max_size: int | None,
             sealed: SealedAddr | None = None) -> _PersistentResource:
        token = secrets.token_urlsafe(9)
        resource = _PersistentResource(self, kp, tid, token, max_size, sealed)
        resource.path = PERSISTENT_PREFIX + (token,)
        self._persistent[(kp, tid)] = resource
        self.site.add_resource(resource.path, resource)
        return resource

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
            self._remove(kp, tid)
            self.service.kp_unreachable(kp, tid)


# ---------------------------------------------------------------------------------------------
# Client


async def _answer(pending) -> aiocoap.Message:
    """The response of an aiocoap request, shielded: cancelling the waiter must not cancel
    aiocoap's own future, which it later completes (InvalidStateError otherwise)."""
    return await asyncio.shield(pending.response)


def _tuning(timing: Timing | None) -> type[TransportTuning] | None:
    if timing is None:
        return None
    return type("KspTuning", (TransportTuning,), {
        "ACK_TIMEOUT": timing.ack_timeout, "ACK_RANDOM_FACTOR": timing.ack_random_factor,
        "MAX_RETRANSMIT": timing.max_retransmit})


class CoapLink(Link):
    """The KP side over CoAP: one POST per request, one observation per persistent
    transaction."""

    def __init__(self, context: aiocoap.Context, base: str, timing: Timing | None,
                 credentials, rng: random.Random | None = None,
                 sealer: Sealer | None = None) -> None:
        self.context = context
        #: Set: every request leaves sealed and only answers that open are believed (13).
        self.sealer = sealer
        self.base = base
        self.credentials = credentials
        tuning = _tuning(timing)
        self._tuning = tuning() if tuning is not None else None
        rng = rng or random.Random()
        self._tids = itertools.count(rng.randrange(0x10000))
        self._observers: dict[int, asyncio.Task] = {}
        self._background: set[asyncio.Task] = set()
        self._closed = False

    def _message(self, code: Code, uri: str, **kwargs: Any) -> aiocoap.Message:
        if self._tuning is not None:
            kwargs["transport_tuning"] = self._tuning
        return aiocoap.Message(code=code, uri=uri, **kwargs)

    def _next_tid(self) -> int:
        for _ in range(0x10000):
            tid = next(self._tids) & 0xFFFF
            if tid not in self._observers:
                return tid
        raise ClientError("every transaction ID is in use")

    async def request(self, request: Request, sink: Sink | None = None) -> Response | None:
        if self._closed:
            raise KspConnectionError("the client was closed")
        if request.tx is not Tx.TERMINATE:
            request = request._replace(tid=self._next_tid())
        if self.credentials is not None and request.options.credentials is None:
            request = request._replace(
                options=request.options._replace(credentials=self.credentials))
        data = encode(request, UDP)
        if self.sealer is not None:
            data = self.sealer.seal(data)
        if len(data) > MAX_UDP_PAYLOAD:
            raise ClientError(f"request of {len(data)} bytes exceeds {MAX_UDP_PAYLOAD}")
        msg = self._message(Code.POST, self.base + "/ksp", payload=data,
                            content_format=CONTENT_FORMAT)
        if not request.confirmable:
            msg.mtype = aiocoap.NON
        pending = self.context.request(msg)
        if not request.confirmable:
            task = asyncio.ensure_future(_answer(pending))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
            return None
        try:
            answer = await _answer(pending)
        except (aiocoap.error.ConRetransmitsExceeded, aiocoap.error.RequestTimedOut) as exc:
            raise KspTimeout(f"no RES for transaction {request.tid}: {exc}") from exc
        except aiocoap.error.NetworkError as exc:
            raise KspConnectionError(str(exc)) from exc
        if not answer.code.is_successful():
            raise ClientError(f"CoAP {answer.code} for transaction {request.tid}: "
                              f"{answer.payload[:200]!r}")
        payload = answer.payload
        if self.sealer is not None:
            try:
                payload = self.sealer.open(payload)
            except SealError as exc:
                raise ClientError(f"an answer to transaction {request.tid} that does not "
                                       f"open: {exc}") from exc
        response = decode_sib_message(payload, UDP, answers=request.tx)
        if (sink is not None and request.tx.persistent and response.status == Status.OK):
            path = answer.opt.location_path
            if not path:
                raise ClientError("a persistent RES without Location-Path")
            self._observers[response.tid] = asyncio.ensure_future(
                self._observe(response.tid, request.tx, "/".join(path), sink))
        return response

    async def _observe(self, tid: int, tx: Tx, path: str, sink: Sink) -> None:
        uri = f"{self.base}/{path}"
        pending = self.context.request(self._message(Code.GET, uri, observe=0))
        last: int | None = None

        async def consider(message: aiocoap.Message) -> bool:
            """Deliver one notification; True when it ended the transaction."""
            nonlocal last
            block2 = message.opt.block2
            if block2 is not None and block2.more:
                # An IND larger than one block: the notification carries the first block only
                # (RFC 7959 §2.6); a plain GET (Block2, reassembled by aiocoap) reads the whole
                # current representation — the newest IND.
                message = await _answer(self.context.request(self._message(Code.GET, uri)))
                if not message.code.is_successful():
                    sink.end(Status.TERMINATED)
                    return True
            if not message.payload:
                return False  # no IND yet: the RES was the state
            payload = message.payload
            if self.sealer is not None:
                try:
                    payload = self.sealer.open(payload)
                except SealError:
                    return False  # forged or replayed: ignored, as over UDP (13.3)
            ind = decode_sib_message(payload, UDP, answers=tx)
            if not is_newer(ind.seq, last):
                return False  # stale (§9)
            last = ind.seq
            if ind.status != Status.OK:
                sink.end(ind.status)
                return True
            sink.deliver(ind)
            return False

        try:
            first = await _answer(pending)
            if not first.code.is_successful():
                sink.end(Status.TERMINATED)  # gone: TERMINATE or RESET ended it
                return
            if await consider(first):
                return
            async for message in pending.observation:
                if not message.code.is_successful():
                    sink.end(Status.TERMINATED)  # gone: TERMINATE or RESET ended it
                    return
                if await consider(message):
                    return
            # aiocoap ends the iteration on a non-2.xx notification (4.04: TERMINATE or RESET
            # removed the resource) or when the server ends the observation.
            sink.end(Status.TERMINATED)
        except asyncio.CancelledError:
            pending.observation.cancel()
            raise
        except (aiocoap.error.Error, DecodeError) as exc:
            sink.fail(KspConnectionError(f"observation of transaction {tid}: {exc}"))
        finally:
            if self._observers.get(tid) is asyncio.current_task():
                del self._observers[tid]

    def forget(self, tid: int) -> None:
        task = self._observers.pop(tid, None)
        if task is not None:
            task.cancel()

    async def close(self) -> None:
        self._closed = True
        tasks = list(self._observers.values()) + list(self._background)
        self._observers.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.context.shutdown()


async def open_coap_link(host: str, port: int, *, timing: Timing | None = None,
                         credentials=None, rng: random.Random | None = None,
                         sealer: Sealer | None = None) -> CoapLink:
    context = await aiocoap.Context.create_client_context(transports=["udp6"])
    hostpart = f"[{host}]" if ":" in host else host
    return CoapLink(context, f"coap://{hostpart}:{port}", timing, credentials, rng, sealer)
