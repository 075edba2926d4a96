"""What the UDP and TCP server adapters share: one `SIBSession` driven by the event loop.

After every input (datagram, stream bytes, timer, or a `Channel` call from the service) the
adapter drains the session's events, transmits what it holds and re-arms its one timer with
`loop.call_at(session.get_timer())` — aioquic's asyncio adapter, applied to KSP.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Hashable

from ksp import (
    CredentialsPending, KPIdentity, KPUnreachable, ProtocolError, RequestReceived,
    RequestRefused, Response, SIBSession,
)
from ksp.codes import Tx
from ksp.delivery import Delivery, DeliveryState

from ._timer import SessionTimer
from .service import Channel, Service
from ksp.ratelog import RateLimitedLog

log = logging.getLogger("transports.server")
#: Lines a peer can set off, one per kind and minute (`ksp.ratelog`).
peer_log = RateLimitedLog(log, time.monotonic)


_PERSISTENT = frozenset(tx for tx in Tx if tx.persistent)


class SessionChannel:
    """A `Channel` over a `SIBSession`: bound to (transport, KP identity, TID), never to a socket,
    so the session routes each answer to the KP's current endpoint. A persistent operation's
    channel holds its `Delivery`, which the session may evict from its table and takes back at
    the next IND, numbering on."""

    __slots__ = ("transport", "kp", "tid", "durable", "payload_cap", "_adapter", "_delivery")

    def __init__(self, adapter: "SessionAdapter", kp: KPIdentity, tid: int,
                 delivery: Delivery | None = None) -> None:
        self.transport = adapter.transport_name
        self.kp = kp
        self.tid = tid
        #: UDP: the KP keeps its IDs across a SIB restart, which resumes its operations; a TCP
        #: connection ends with the process.
        self.durable = adapter.durable
        #: The most bytes one RES can hold here (one datagram; None: as the framing allows).
        self.payload_cap = adapter.payload_cap
        self._adapter = adapter
        self._delivery = delivery

    def respond(self, response: Response) -> None:
        a = self._adapter
        a.session.respond(self.kp, self.tid, _with_tid(response, self.tid), a.loop.time())
        if not a.draining:  # else the pump that called `submit` sends it
            a.pump()

    def indicate(self, response: Response) -> None:
        a = self._adapter
        a.session.indicate(self.kp, self.tid, _with_tid(response, self.tid), a.loop.time(),
                           self._delivery)
        if self._delivery is None:
            self._delivery = a.session.delivery(self.kp, self.tid)
        a.pump_soon()

    def export(self) -> DeliveryState | None:
        return self._adapter.session.export(self.kp, self.tid, self._delivery)

    def restore(self, state: DeliveryState) -> None:
        self._delivery = self._adapter.session.restore(self.kp, self.tid, state)

    def end(self) -> None:
        a = self._adapter
        a.session.end_persistent(self.kp, self.tid)
        if not a.draining:
            a.pump()

    def __repr__(self) -> str:
        return f"<{self.transport} channel {self.kp} tid={self.tid}>"


def _with_tid(response: Response, tid: int) -> Response:
    return response if response.tid == tid else response._replace(tid=tid)


class SessionAdapter:
    """Feeds one `SIBSession`, hands new requests to the `Service`, keeps the timer armed.
    Subclasses implement `transmit()` (send what the session holds) and `abort(addr)`."""

    transport_name = ""

    def __init__(self, service: Service, session: SIBSession) -> None:
        self.service = service
        self.session = session
        self.loop = asyncio.get_running_loop()
        #: What every channel of the session says of it (`SessionChannel`), read once.
        self.durable = session.transactions.policy.durable
        self.payload_cap = session.transactions.payload_cap
        #: The service's verdicts on CREDENTIALS, asked by the session before its duplicate
        #: cache (`Service.authenticator`; none: KP IDs are taken at their word).
        self.authenticator = service.authenticator
        if self.authenticator is not None and session.authenticate is None:
            session.authenticate = self.authenticator.verdict
        if session.sealers is None and session.layer.sealed:
            # One table per service, shared with CoAP: one replay window per KP, whatever the
            # transport a recorded message is replayed on.
            session.sealers = service.sealers
        self._verifying: set[asyncio.Task] = set()
        self.timer = SessionTimer(self.loop, session, self.pump)
        self._closed = False
        self._pump_due = False
        self.draining = False
        """Inside `pump`'s event loop: a channel answering from `submit` leaves the sending to
        that pump (one transmit and timer check per datagram, not two)."""

    def channel(self, kp: KPIdentity, tid: int) -> Channel:
        """The channel of (kp, tid), e.g. to resume a persistent operation after a restart."""
        return SessionChannel(self, kp, tid)

    def pump(self) -> None:
        """Drain events, transmit, re-arm the timer. The service may answer from inside
        `submit`: that answer leaves with this pump's transmit."""
        if self._closed:
            return
        session, service = self.session, self.service
        fatal: list[Hashable] = []
        self.draining = True
        try:
            while (event := session.next_event()) is not None:
                kind = type(event)
                if kind is RequestReceived:
                    request, kp = event.request, event.kp
                    delivery = (session.delivery(kp, request.tid)
                                if request.tx in _PERSISTENT else None)
                    service.submit(request, SessionChannel(self, kp, request.tid, delivery))
                elif kind is KPUnreachable:
                    service.kp_unreachable(event.kp, event.tid)
                elif kind is CredentialsPending:
                    self._verify(event)
                elif kind is RequestRefused:
                    peer_log.info(("refused", event.status),
                                  "%s: tid %d from %s refused before execution (%s)",
                                  self.transport_name, event.tid, event.addr, event.status.name)
                elif kind is ProtocolError:
                    log.debug("%s: %s from %s (status %s)", self.transport_name, event.message,
                              event.addr, event.status)
                    if event.fatal:
                        fatal.append(event.addr)
                # AckReceived: the session has done all there is to do.
        finally:  # what the service answered goes out even if it raised
            self.draining = False
            self.transmit()
            self.timer.rearm()
        for addr in fatal:
            self.abort(addr)

    def _verify(self, event: CredentialsPending) -> None:
        """Verify the held request's credentials off the request path, then look at the held
        requests again. At most the session's `max_held` of these run at once."""
        async def verify() -> None:
            try:
                await self.authenticator.verify(event.kp_id, event.password, event.addr)
            finally:
                self.session.resume(self.loop.time())
                self.pump()

        task = self.loop.create_task(verify())
        self._verifying.add(task)
        task.add_done_callback(self._verifying.discard)

    def pump_soon(self) -> None:
        """Pump once the current callback is done: the INDs a SIB sends for one update (one
        per subscriber) leave in one pump, not one pump (event drain, timer check) each."""
        if not self._pump_due:
            self._pump_due = True
            self.loop.call_soon(self._deferred_pump)

    def _deferred_pump(self) -> None:
        self._pump_due = False
        self.pump()

    def transmit(self) -> None:
        raise NotImplementedError

    def shut(self) -> None:
        """Stop reacting: no more events handled, no timer."""
        self._closed = True
        self.timer.stop()
        for task in self._verifying:
            task.cancel()

    def abort(self, addr: Hashable) -> None:
        """Close the stream `addr` after a fatal framing error (TCP only)."""


