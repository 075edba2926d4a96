"""The client side shared by UDP and TCP: one `KPSession` driven by the event loop.

A `Link` turns the session's events into awaitable results: a future per pending TID and a
sink per persistent transaction. The CoAP link (`transports.coap`) offers the same methods.
"""
from __future__ import annotations

import asyncio
from typing import Protocol

from ksp import (
    IndicationReceived, KPSession, PersistentEnded, ProtocolError, Request, RequestTimedOut,
    Response, ResponseReceived, Status, TidsBusy, Tx,
)

from ksp.session import PersistentLost, RequestRetried

from ._timer import SessionTimer
from .errors import KspConnectionError, KspProtocolError, KspTimeout


def _with_tid(request: Request, tid: int) -> Request:
    """`request._replace(tid=tid)` without NamedTuple's keyword machinery (a third of the
    time; once per request). Fields: tx, tid, the rest."""
    return _new_tuple(type(request), (request[0], tid, *request[2:]))


_new_tuple = tuple.__new__
_TERMINATE = Tx.TERMINATE  # a global read: `Tx.X` goes through EnumType.__getattr__'s hook (3.11)


class Sink(Protocol):
    """Receives the INDs of one persistent transaction (see `client.Subscription`)."""

    def deliver(self, response: Response) -> None: ...
    def end(self, status: Status | int) -> None: ...
    def fail(self, exc: BaseException) -> None: ...


class Link:
    """What `client.KP` needs from a transport."""

    async def request(self, request: Request, sink: Sink | None = None) -> Response | None:
        """Send `request` (its TID is assigned here); the RES, or None for a NON request.
        With `sink`, the INDs of the persistent transaction go there."""
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError


class SessionLink(Link):
    """A `Link` over a `KPSession`; subclasses implement `transmit()` and `_close_transport()`."""

    def __init__(self, session: KPSession) -> None:
        self.session = session
        self.loop = asyncio.get_running_loop()
        self._waiters: dict[int, asyncio.Future[Response]] = {}
        self._sinks: dict[int, Sink] = {}
        self.timer = SessionTimer(self.loop, session, self.pump)
        self._lost: BaseException | None = None
        #: The SIB's URL, for error messages (set by `open_*_link`).
        self.peer = "the SIB"
        self._unreachable: str | None = None  # why pending requests were given up on

    async def request(self, request: Request, sink: Sink | None = None) -> Response | None:
        if self._lost is not None:
            raise KspConnectionError(str(self._lost)) from self._lost
        session = self.session
        if request.tx is not _TERMINATE:
            request = _with_tid(request, session.next_tid())
        while True:
            try:  # the TID the request went under: another if the SIB may still hold its twin
                tid = session.send(request, self.loop.time())
                break
            except TidsBusy as busy:  # the same request 65 536 times in EXCHANGE_LIFETIME
                await asyncio.sleep(max(0.0, busy.retry_at - self.loop.time()))
                if self._lost is not None:
                    raise KspConnectionError(str(self._lost)) from self._lost
        fut: asyncio.Future[Response] | None = None
        if request.confirmable:
            fut = self.loop.create_future()
        if fut is not None:
            self._waiters[tid] = fut
        if sink is not None:
            self._sinks[tid] = sink
        self.pump()
        if fut is None:
            return None
        try:
            response = await fut
        finally:
            if self._waiters.get(tid) is fut:
                del self._waiters[tid]
            elif fut.cancelled():  # perhaps moved to another TID (`_move`): find it there
                for key in [k for k, waiter in self._waiters.items() if waiter is fut]:
                    del self._waiters[key]
        if sink is not None and response.status != Status.OK:
            self._sinks.pop(response.tid, None)
        return response

    def forget(self, tid: int) -> None:
        """Stop routing INDs of `tid` to its sink (after TERMINATE or RESET)."""
        self._sinks.pop(tid, None)

    def pump(self) -> None:
        session = self.session
        while (event := session.next_event()) is not None:
            kind = type(event)
            if kind is IndicationReceived:
                sink = self._sinks.get(event.tid)
                if sink is not None:
                    sink.deliver(event.response)
            elif kind is ResponseReceived:
                self._resolve(event.tid, event.response, None)
            elif kind is RequestRetried:  # the SIB asked for its echo value: same request
                self._move(event.tid, event.new_tid)
            elif kind is PersistentEnded:
                sink = self._sinks.pop(event.tid, None)
                if sink is not None:
                    sink.end(event.status)
            elif kind is PersistentLost:
                sink = self._sinks.pop(event.tid, None)
                if sink is not None:
                    sink.fail(KspConnectionError(
                        f"{self.peer}: persistent transaction {event.tid} was silent and the "
                        "SIB answered none of its keepalives: it is gone or cannot be reached"))
            elif kind is RequestTimedOut:
                self._sinks.pop(event.tid, None)
                if self._lost is not None:
                    exc: Exception = KspConnectionError(str(self._lost))
                elif self._unreachable is not None:
                    exc = KspConnectionError(self._unreachable)
                else:
                    exc = KspTimeout(f"{self.peer}: no RES for transaction {event.tid}")
                self._resolve(event.tid, None, exc)
            elif kind is ProtocolError and event.tid is not None:
                self._resolve(event.tid, None, KspProtocolError(event.status, event.message))
        self.transmit()
        if self._lost is None:
            self.timer.rearm()

    def _move(self, tid: int, new_tid: int) -> None:
        """Request `tid` goes on as `new_tid`: its waiter and sink follow it."""
        fut = self._waiters.pop(tid, None)
        if fut is not None:
            self._waiters[new_tid] = fut
        sink = self._sinks.pop(tid, None)
        if sink is not None:
            self._sinks[new_tid] = sink

    def _resolve(self, tid: int, response: Response | None, exc: BaseException | None) -> None:
        fut = self._waiters.pop(tid, None)
        if fut is None or fut.done():
            return
        if exc is None:
            fut.set_result(response)
        else:
            fut.set_exception(exc)

    def transmit(self) -> None:
        raise NotImplementedError

    def unreachable(self, reason: str) -> None:
        """The OS says the SIB cannot be reached now: fail what is pending at once (the link
        stays usable: a SIB that comes up later answers the next request)."""
        self._unreachable = f"{self.peer}: {reason}"
        try:
            self.session.give_up(self.loop.time())
            self.pump()
        finally:
            self._unreachable = None

    @property
    def lost_with(self) -> BaseException | None:
        """Why the transport is gone (`lost`, also on `close`); None while it is up."""
        return self._lost

    def lost(self, exc: BaseException) -> None:
        """The transport is gone: fail every waiter and every persistent transaction."""
        if self._lost is not None:
            return
        self._lost = exc
        for tid in list(self._waiters):
            self._resolve(tid, None, KspConnectionError(str(exc)))
        sinks, self._sinks = self._sinks, {}
        for sink in sinks.values():
            sink.fail(KspConnectionError(str(exc)))
        self.timer.stop()


