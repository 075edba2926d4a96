"""The bridge's SE Protocol client: one WebSocket to the broker's `/subscribe`, many
subscriptions on it, each known by the spuid the broker gives in its first notification.

What the reference broker and the SIB's gate send alike (../shared/README.md): the first
notification of a subscription has `sequence` 0, the alias it was asked with and the whole
result as `addedResults`; later ones carry the spuid and what was added and removed; an error
frame carries the alias of the subscribe it refuses, or (the SIB's gate, when a new policy ends
one) the spuid of the subscription it ends.

A subscription outlives its socket. When the socket drops, the subscriber reconnects with
back-off (`backoff` doubling to `max_backoff`, with jitter, until `close`) and subscribes each
live subscription again; the new first notification is the whole result, which the owner gets
as `whole=True` and puts in place of what it had (the reconciliation: what changed while the
bridge was away shows as a difference). A broker that refuses one again ends only that one.

A broker that ends a subscription for its token (401: expired or revoked, as a `ksp-sib`
does) gets it made again with a token asked for anew, the same way.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiohttp

from ksp.codes import Status
from ksp.ratelog import RateLimitedLog

from .broker import STATUS_OF_HTTP, BrokerError

log = logging.getLogger("ksp.bridge")
#: Lines a peer can set off, one per kind and minute (`ksp.ratelog`).
peer_log = RateLimitedLog(log, time.monotonic)

__all__ = ["Subscriber", "Subscription"]

#: (addedResults, removedResults, whole): every notification of one subscription, in order.
#: `whole` is True for a first notification: `added` is then the whole result, to replace
#: what the owner had.
OnNotify = Callable[[dict, dict, bool], None]


#: What a subscribe carries as `authorization`, asked anew each time it is sent (a token may
#: have been renewed since): None for none.
Authorize = Callable[[], Awaitable[str | None]]


@dataclass(eq=False)
class Subscription:
    sparql: str
    on_notify: OnNotify
    spuid: str = ""  # the broker's name for it on the current socket
    authorize: Authorize | None = None


#: (subscription, KSP status): the broker ended it.
OnEnd = Callable[[Subscription, Status], None]


class Subscriber:
    def __init__(self, url: str, on_end: OnEnd, *, timeout: float = 10.0,
                 authorization: str | None = None, backoff: float = 0.25,
                 max_backoff: float = 15.0, ssl: object = None) -> None:
        """`ssl`: an `ssl.SSLContext` for a wss broker (None: the system's trust store)."""
        self.url = url
        self.ssl = ssl
        self.on_end = on_end
        self.timeout = timeout
        self.authorization = authorization
        self.backoff, self.max_backoff = backoff, max_backoff
        self._aliases = (f"ksp-bridge-{n}" for n in itertools.count(1))
        self._pending: dict[str, tuple[asyncio.Future, Subscription]] = {}  # by alias
        self._live: dict[Subscription, None] = {}  # in the order they were made
        self._by_spuid: dict[str, Subscription] = {}
        self._http: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task | None = None
        self._reconnecting: asyncio.Task | None = None
        self._closing = False
        self.notifications = 0  # after the first ones (stats)
        self.reconnects = 0  # sockets opened again after a drop (stats)
        self.up = asyncio.Event()  # set while a socket is open and every subscription on it

    @property
    def live(self) -> int:
        return len(self._live)

    @property
    def spuids(self) -> int:
        """Subscriptions known by the broker's id on the current socket."""
        return len(self._by_spuid)

    async def _open(self) -> aiohttp.ClientWebSocketResponse:
        if self._http is None:
            self._http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(
                ssl=self.ssl if self.ssl is not None else True))
        try:
            ws = await asyncio.wait_for(self._http.ws_connect(self.url, heartbeat=30.0),
                                        self.timeout)
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            raise BrokerError(Status.INTERNAL_ERROR, f"{self.url}: {exc or type(exc).__name__}"
                              ) from None
        self._ws = ws
        self._reader = asyncio.create_task(self._read(ws))
        return ws

    async def _connected(self) -> aiohttp.ClientWebSocketResponse:
        if self._ws is not None and not self._ws.closed:
            return self._ws
        if self._reconnecting is not None:
            raise BrokerError(Status.INTERNAL_ERROR, f"{self.url}: reconnecting")
        ws = await self._open()
        self.up.set()
        return ws

    async def subscribe(self, sparql: str, on_notify: OnNotify,
                        authorize: Authorize | None = None) -> Subscription:
        """A new subscription: its first notification (the whole result) has reached
        `on_notify` when this returns, and every later one will, in order. `authorize`: its
        token, asked for at each subscribe (None: the subscriber's `authorization`)."""
        sub = Subscription(sparql, on_notify, authorize=authorize)
        await self._send_subscribe(await self._connected(), sub)
        self._live[sub] = None
        return sub

    async def _send_subscribe(self, ws: aiohttp.ClientWebSocketResponse,
                              sub: Subscription) -> None:
        alias = next(self._aliases)
        first = asyncio.get_running_loop().create_future()
        # The socket's end fails it (`_read`) even while this still waits for the token or the
        # send, which then raise on their own: its error is read here, not left unretrieved.
        first.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._pending[alias] = (first, sub)
        body = {"sparql": sub.sparql, "alias": alias}
        try:
            authorization = (self.authorization if sub.authorize is None
                             else await sub.authorize())
            if authorization:
                body["authorization"] = authorization
            await ws.send_json({"subscribe": body})
            await asyncio.wait_for(first, self.timeout)
        except asyncio.TimeoutError:
            raise BrokerError(Status.INTERNAL_ERROR, f"{self.url}: no first notification "
                                                     f"within {self.timeout} s") from None
        except (aiohttp.ClientError, ConnectionError) as exc:
            raise BrokerError(Status.INTERNAL_ERROR, f"{self.url}: {exc}") from None
        finally:
            self._pending.pop(alias, None)

    async def flush(self, authorize: Authorize | None = None) -> None:
        """Return once every notification the broker queued on this socket before now has been
        read: a throwaway `ASK {}` subscription's first notification comes after them (one
        socket is one ordered stream). The bridge calls it after each update, so that the INDs
        an update causes reach the devices before the next request is forwarded, as in a SIB.
        A broker that notifies after answering the update (the reference broker may) can still
        be later than this."""
        sub = Subscription("ASK {}", lambda added, removed, whole: None, authorize=authorize)
        await self._send_subscribe(await self._connected(), sub)
        await self._unsubscribe_spuid(sub.spuid)

    async def unsubscribe(self, sub: Subscription) -> None:
        if sub in self._live:
            del self._live[sub]
            await self._unsubscribe_spuid(sub.spuid)

    async def _unsubscribe_spuid(self, spuid: str) -> None:
        self._by_spuid.pop(spuid, None)
        if spuid and self._ws is not None and not self._ws.closed:
            try:
                await self._ws.send_json({"unsubscribe": {"spuid": spuid}})
            except (aiohttp.ClientError, ConnectionError):
                pass  # the socket's end ends it

    async def close(self) -> None:
        self._closing = True
        if self._reconnecting is not None:
            self._reconnecting.cancel()
            await asyncio.gather(self._reconnecting, return_exceptions=True)
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)
        if self._http is not None:
            await self._http.close()

    # -- the socket -------------------------------------------------------------------------

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        try:
            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.TEXT:
                    try:
                        self._frame(json.loads(msg.data))
                    except (ValueError, KeyError, TypeError) as exc:
                        peer_log.warning("unreadable frame",
                                         "%s: a frame the bridge cannot read: %s", self.url, exc)
        finally:
            self.up.clear()
            for first, _ in self._pending.values():
                if not first.done():
                    first.set_exception(BrokerError(Status.INTERNAL_ERROR,
                                                    f"{self.url}: the socket closed"))
            self._by_spuid.clear()
            if not self._closing and self._reconnecting is None and self._live:
                peer_log.warning("socket closed",
                                 "%s: the broker's socket closed; %d subscriptions to make again",
                                 self.url, len(self._live))
                self._reconnecting = asyncio.create_task(self._reconnect())

    async def _reconnect(self) -> None:
        """Open the socket again and subscribe each live subscription anew, waiting longer
        after each failure; runs until it has or the subscriber closes."""
        delay = self.backoff
        while True:
            await asyncio.sleep(delay * random.uniform(0.8, 1.2))
            delay = min(delay * 2, self.max_backoff)
            try:
                ws = await self._open()
                for sub in list(self._live):
                    try:
                        await self._send_subscribe(ws, sub)
                    except BrokerError as exc:
                        if ws.closed:
                            raise
                        peer_log.warning("refused again", "the broker refused %s again: %s",
                                         sub.sparql[:80], exc)
                        self._live.pop(sub, None)
                        self.on_end(sub, exc.status)
            except BrokerError as exc:
                log.info("%s: not back yet (%s); next try in about %.1f s", self.url,
                         exc.reason, delay)
                continue
            if ws.closed:
                continue
            self.reconnects += 1
            log.info("%s: back; %d subscriptions made again", self.url, len(self._live))
            self._reconnecting = None
            self.up.set()
            return

    def _frame(self, frame: dict) -> None:
        if "notification" in frame:
            n = frame["notification"]
            if n.get("sequence") == 0 and n.get("alias") in self._pending:
                first, sub = self._pending[n["alias"]]
                if not first.done():
                    sub.spuid = n["spuid"]
                    self._by_spuid[sub.spuid] = sub
                    sub.on_notify(n.get("addedResults") or {}, {}, True)
                    first.set_result(None)
                return
            sub = self._by_spuid.get(n["spuid"])
            if sub is None:
                return  # unsubscribed meanwhile
            self.notifications += 1
            sub.on_notify(n.get("addedResults") or {}, n.get("removedResults") or {}, False)
        elif "error" in frame:
            status = STATUS_OF_HTTP.get(frame.get("status_code"), Status.INTERNAL_ERROR)
            reason = f"{self.url}: {frame.get('error_description') or frame['error']}"
            first, _ = self._pending.get(frame.get("alias"), (None, None))
            if first is None and frame.get("spuid") is None:
                # No alias and no spuid: the answer to the oldest subscribe still waiting (one
                # socket is answered in order), for a broker that does not echo the alias.
                first = next((f for f, _ in self._pending.values() if not f.done()), None)
            if first is not None and not first.done():
                first.set_exception(BrokerError(status, reason))
            elif (sub := self._by_spuid.pop(frame.get("spuid"), None)) is not None:
                if frame.get("status_code") == 401 and sub.authorize is not None:
                    log.info("%s ended for its token (%s): made again with a new one",
                             sub.spuid, reason)
                    asyncio.get_running_loop().create_task(self._renew(sub))
                    return
                peer_log.warning("ended", "the broker ended %s: %s", sub.spuid, reason)
                self._live.pop(sub, None)
                self.on_end(sub, status)

    async def _renew(self, sub: Subscription) -> None:
        """`sub` again on the current socket, its token asked for anew; if the socket closes
        meanwhile, reconnecting makes it again (it stays live)."""
        ws = self._ws
        if ws is None or ws.closed or sub not in self._live:
            return
        try:
            await self._send_subscribe(ws, sub)
        except BrokerError as exc:
            if ws.closed or sub not in self._live:
                return
            peer_log.warning("refused again", "the broker refused %s again: %s",
                             sub.sparql[:80], exc)
            self._live.pop(sub, None)
            self.on_end(sub, exc.status)
