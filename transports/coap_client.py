"""The KP side of KSP over CoAP (aiocoap): the binding of docs/coap-binding.md, as
`transports.coap` serves it.

One POST per request, one observation (RFC 7641) per persistent transaction. The transaction
layer is the one the UDP and TCP clients use (`ksp.transactions.KpTransactions`: TIDs, the
persistent lifecycle, the stale-IND rule); aiocoap's reliability is the message layer.
"""
from __future__ import annotations

import asyncio
import random
from typing import Any

import aiocoap
import aiocoap.error
from aiocoap.numbers.codes import Code

from ksp import UDP, DecodeError, Request, Response, Status, Timing, Tx, decode_sib_message, encode
from ksp.delivery import MAX_UDP_PAYLOAD
from ksp.secure import SealError, Sealer
from ksp.transactions import (
    PERSISTENT, STATEFUL, KpTransactions, SessionError, epoch_of, random_start,
)

from ._kplink import Link, Sink
from .coap import CONTENT_FORMAT, transport_tuning
from .pacing import Pacer
from .errors import ClientError, KspConnectionError, KspTimeout, SubscriptionLost

__all__ = ["CoapLink", "open_coap_link"]

DEFAULT_MAX_AGE = 60
"""Max-Age (s) of a message without the option (RFC 7252 §5.10.5)."""

REQUEST_BUDGET = 60_000
"""Requests (POSTs and GETs) at most per EXCHANGE_LIFETIME: aiocoap numbers every message it
originates from one 16-bit counter, and the SIB takes a Message ID it saw within
EXCHANGE_LIFETIME for a duplicate (RFC 7252 §4.4) — past 65 536 a new request got an old
answer, or none. The rest of the counter is left to what aiocoap sends on its own."""


async def _answer(pending) -> aiocoap.Message:
    """The response of an aiocoap request, shielded: cancelling the waiter must not cancel
    aiocoap's own future, which it later completes (InvalidStateError otherwise)."""
    return await asyncio.shield(pending.response)


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
        self._tuning = transport_tuning(timing)
        #: The transaction layer UDP and TCP clients share (`ksp.transactions`): TIDs (R12),
        #: the persistent lifecycle, the stale-IND rule. aiocoap is the message layer.
        # A KP ID (CREDENTIALS, or the envelope's) outlives this client's count: a random
        # epoch keeps its numbers off those of an earlier run the SIB remembers (15).
        rng = rng if rng is not None else random.Random()
        start = random_start(rng) if credentials is not None or sealer is not None else None
        self.transactions = KpTransactions(rng, lifetime=(timing or Timing()).exchange_lifetime,
                                           start=start)
        self._observers: dict[int, asyncio.Task] = {}
        self._background: set[asyncio.Task] = set()
        self._closed = False
        #: Every message this client originates, within REQUEST_BUDGET per EXCHANGE_LIFETIME.
        self.budget: Pacer[int] = Pacer(REQUEST_BUDGET, self.transactions.lifetime,
                                        lambda _: 1)

    async def _turn(self) -> None:
        """Wait until one more request fits the budget (counted then)."""
        loop = asyncio.get_running_loop()
        while not self.budget.spend(1, loop.time()):
            await asyncio.sleep(self.budget.free_at(loop.time()) - loop.time())

    def _message(self, code: Code, uri: str, **kwargs: Any) -> aiocoap.Message:
        if self._tuning is not None:
            kwargs["transport_tuning"] = self._tuning
        return aiocoap.Message(code=code, uri=uri, **kwargs)

    async def request(self, request: Request, sink: Sink | None = None, *,
                      renumbered: bool = False) -> Response | None:
        """`renumbered`: sent again after NUMBER BEHIND (wire format 15): another is final."""
        if self._closed:
            raise KspConnectionError("the client was closed")
        await self._turn()
        if self._closed:
            raise KspConnectionError("the client was closed")
        tx, transactions = request.tx, self.transactions
        if not request.confirmable and tx in PERSISTENT:
            raise ClientError(f"{tx.name} is persistent: it goes CON over CoAP, where a NON one "
                              "from an address not yet validated would silently never start "
                              "(wire format 14.4)")
        try:
            if tx is not Tx.TERMINATE:  # numbered (wire format 15); TERMINATE names its target
                tid = transactions.next_tid()
                epoch = epoch_of(transactions.number(tid))
                request = request._replace(tid=tid, options=request.options._replace(
                    epoch=epoch)) if epoch != request.options.epoch else request._replace(tid=tid)
            transactions.check(request.tid, tx)
        except SessionError as exc:
            raise ClientError(str(exc)) from exc
        tid = request.tid
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
        transactions.sent(tid, tx, request)
        if not request.confirmable:
            task = asyncio.ensure_future(_answer(pending))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
            task.add_done_callback(lambda _: self._done(tid, tx, None))
            return None
        try:
            answer = await _answer(pending)
            if answer.code == Code.UNAUTHORIZED and answer.opt.echo is not None:
                # the SIB validates this address first (RFC 9175 §2.4, docs/coap-binding.md):
                # the same POST once more with its Echo value; the transaction it carries is
                # not executed twice (the SIB's duplicate cache answers it)
                again = self._message(Code.POST, self.base + "/ksp", payload=data,
                                      content_format=CONTENT_FORMAT)
                again.opt.echo = answer.opt.echo
                answer = await _answer(self.context.request(again))
        except (aiocoap.error.ConRetransmitsExceeded, aiocoap.error.RequestTimedOut) as exc:
            self._done(tid, tx, None)
            raise KspTimeout(f"no RES for transaction {tid}: {exc}") from exc
        except aiocoap.error.NetworkError as exc:
            self._done(tid, tx, None)
            raise KspConnectionError(str(exc)) from exc
        except BaseException:
            self._done(tid, tx, None)
            raise
        if not answer.code.is_successful():
            self._done(tid, tx, None)
            raise ClientError(f"CoAP {answer.code} for transaction {request.tid}: "
                              f"{answer.payload[:200]!r}")
        payload = answer.payload
        if self.sealer is not None:
            try:
                payload = self.sealer.open(payload)
            except SealError as exc:
                self._done(tid, tx, None)
                raise ClientError(f"an answer to transaction {tid} that does not "
                                  f"open: {exc}") from exc
        try:
            response = decode_sib_message(payload, UDP, answers=tx)
        except BaseException:
            self._done(tid, tx, None)
            raise
        self._done(tid, tx, response.status)
        if response.status == Status.ECHO_REQUIRED and request.options.echo is None:
            # the SIB asks this sealed KP to prove its request fresh (wire format 7.7, 13.5):
            # the same request once more, with the echo value, under a new TID
            echo = request.options._replace(echo=response.result)
            return await self.request(request._replace(options=echo), sink)
        if response.status == Status.NUMBER_BEHIND and not renumbered:
            # the SIB has had this number of this KP's, or numbers above it (wire format 15):
            # the same request once more under a number it takes as new
            transactions.behind(response.result.next_epoch)
            return await self.request(request, sink, renumbered=True)
        if (sink is not None and tx in PERSISTENT and response.status == Status.OK):
            path = answer.opt.location_path
            if not path:
                raise ClientError("a persistent RES without Location-Path")
            self._observers[response.tid] = asyncio.ensure_future(
                self._observe(response.tid, request.tx, "/".join(path), sink))
        return response

    def _done(self, tid: int, tx: Tx, status: Status | int | None) -> None:
        """Request `tid` is no longer pending; with the status of its RES, what that does to
        the persistent operations (None: no RES, whether it started is unknown)."""
        transactions = self.transactions
        if transactions.pending.pop(tid, None) is None and status is None:
            return
        now = asyncio.get_running_loop().time()
        if status is None:
            transactions.gave_up(tid, tx, now)
        elif tx in STATEFUL:
            transactions.answered(tid, tx, status, now)

    async def _observe(self, tid: int, tx: Tx, path: str, sink: Sink) -> None:
        """Follow persistent transaction `tid` until it ends: one observation of its resource,
        registered again (RFC 7641 §3.3.1) when nothing came for the Max-Age of the last
        message, or when the observation ended without a final IND — the SIB lost its
        observer (its CON notifications went unacknowledged) and keeps the operation for
        twice Max-Age, so the new registration gets the newest IND and the subscription
        converges. A final IND ends it with its status; a resource that is gone, with
        TERMINATED if this client asked for the end, else with `SubscriptionLost`."""
        uri = f"{self.base}/{path}"
        transactions = self.transactions

        async def consider(message: aiocoap.Message) -> bool:
            """Deliver one notification; True when it ended the transaction."""
            block2 = message.opt.block2
            if block2 is not None and block2.more:
                # An IND larger than one block: the notification carries the first block only
                # (RFC 7959 §2.6); a plain GET (Block2, reassembled by aiocoap) reads the whole
                # current representation — the newest IND.
                await self._turn()
                message = await _answer(self.context.request(self._message(Code.GET, uri)))
                if not message.code.is_successful():
                    self._gone(tid, sink, message.code)
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
            if transactions.active(tid) is None:
                return True  # ended meanwhile (TERMINATE, RESET)
            if not transactions.fresh(tid, ind.seq):
                return False  # stale (§9)
            if ind.status != Status.OK:
                transactions.ended_by(tid, asyncio.get_running_loop().time())
                sink.end(ind.status)
                return True
            sink.deliver(ind)
            return False

        try:
            while True:
                await self._turn()
                pending = self.context.request(self._message(Code.GET, uri, observe=0))
                try:
                    if await self._follow(pending, tid, sink, consider):
                        return
                finally:
                    # The response too, if it has not come: aiocoap 0.4.17 would otherwise
                    # report a 4.04 or unobserved answer to the cancelled observation, and
                    # raise from it in a task nobody awaits. Cancelling the response stops its
                    # runner.
                    pending.response.cancel()
                    if not pending.observation.cancelled:  # (that may have cancelled it)
                        pending.observation.cancel()
        except (aiocoap.error.Error, DecodeError) as exc:
            sink.fail(KspConnectionError(f"observation of transaction {tid}: {exc}"))
        finally:
            if self._observers.get(tid) is asyncio.current_task():
                del self._observers[tid]

    async def _follow(self, pending, tid: int, sink: Sink, consider) -> bool:
        """One registration: its first answer, then its notifications while they come within
        Max-Age. True when the transaction ended; False to register again."""
        message = await _answer(pending)
        notifications = aiter(pending.observation)
        while True:
            if not message.code.is_successful():
                self._gone(tid, sink, message.code)
                return True
            if await consider(message):
                return True
            max_age = DEFAULT_MAX_AGE if message.opt.max_age is None else message.opt.max_age
            if message.opt.observe is None:  # not observed: look again when it is stale
                await asyncio.sleep(max_age)
                return False
            try:
                message = await asyncio.wait_for(anext(notifications), max_age)
            except (TimeoutError, StopAsyncIteration):
                # Nothing within Max-Age, or the SIB ended the observation without a final IND
                # (a 4.04 among them: the new registration's answer says so).
                return False

    def _gone(self, tid: int, sink: Sink, code: Code) -> None:
        """The resource of `tid` answered `code`: 4.04, gone — ended as this client asked
        (TERMINATE of it, or a RESET, sent), or lost; 4.01, the KP's key was removed (nothing
        may reach it any more): ACCESS_DENIED."""
        transactions = self.transactions
        if (transactions.active(tid) is None or tid in transactions.pending
                or any(getattr(r, "tx", None) is Tx.RESET for r in transactions.pending.values())):
            sink.end(Status.TERMINATED)
        elif code == Code.UNAUTHORIZED:
            sink.end(Status.ACCESS_DENIED)
        else:
            sink.fail(SubscriptionLost(f"persistent transaction {tid}: CoAP {code} for its "
                                       "resource, and no final IND: the SIB ended it"))

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
