"""The bridge's SE Protocol client: one WebSocket to the broker's `/subscribe`, many
subscriptions on it, each known by the spuid the broker gives in its first notification.

What the reference broker and the SIB's gate send alike (../shared/README.md): the first
notification of a subscription has `sequence` 0, the alias it was asked with and the whole
result as `addedResults`; later ones carry the spuid and what was added and removed; an error
frame carries the alias of the subscribe it refuses, or (the SIB's gate, when a new policy ends
one) the spuid of the subscription it ends.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import logging
from collections.abc import Callable

import aiohttp

from ksp.codes import Status

from .broker import STATUS_OF_HTTP, BrokerError

log = logging.getLogger("ksp.bridge")

__all__ = ["Subscriber"]

#: (spuid, addedResults, removedResults) of a notification after the first.
OnChange = Callable[[str, dict, dict], None]
#: (spuid or None for every subscription, KSP status): the broker ended it, or the socket.
OnEnd = Callable[[str | None, Status], None]


class Subscriber:
    def __init__(self, url: str, on_change: OnChange, on_end: OnEnd, *,
                 timeout: float = 10.0, authorization: str | None = None) -> None:
        self.url = url
        self.on_change, self.on_end = on_change, on_end
        self.timeout = timeout
        self.authorization = authorization
        self._aliases = (f"ksp-bridge-{n}" for n in itertools.count(1))
        self._pending: dict[str, asyncio.Future] = {}  # alias -> first notification
        self._http: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task | None = None
        self.notifications = 0  # after the first ones (stats)
        self._closing = False

    async def _connected(self) -> aiohttp.ClientWebSocketResponse:
        if self._ws is None or self._ws.closed:
            if self._http is None:
                self._http = aiohttp.ClientSession()
            try:
                self._ws = await asyncio.wait_for(
                    self._http.ws_connect(self.url, heartbeat=30.0), self.timeout)
            except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
                raise BrokerError(Status.INTERNAL_ERROR, f"{self.url}: {exc}") from None
            self._reader = asyncio.create_task(self._read(self._ws))
        return self._ws

    async def subscribe(self, sparql: str) -> tuple[str, dict]:
        """(spuid, the whole current result as SPARQL JSON) of a new subscription."""
        ws = await self._connected()
        alias = next(self._aliases)
        first = self._pending[alias] = asyncio.get_running_loop().create_future()
        body = {"sparql": sparql, "alias": alias}
        if self.authorization:
            body["authorization"] = self.authorization
        try:
            await ws.send_json({"subscribe": body})
            notification = await asyncio.wait_for(first, self.timeout)
        except asyncio.TimeoutError:
            raise BrokerError(Status.INTERNAL_ERROR, f"{self.url}: no first notification "
                                                     f"within {self.timeout} s") from None
        except (aiohttp.ClientError, ConnectionError) as exc:
            raise BrokerError(Status.INTERNAL_ERROR, f"{self.url}: {exc}") from None
        finally:
            self._pending.pop(alias, None)
        return notification["spuid"], notification.get("addedResults") or {}

    async def flush(self) -> None:
        """Return once every notification the broker queued on this socket before now has been
        read: a throwaway `ASK {}` subscription's first notification comes after them (one
        socket is one ordered stream). The bridge calls it after each update, so that the INDs
        an update causes reach the devices before the next request is forwarded, as in a SIB.
        A broker that notifies after answering the update (the reference broker may) can still
        be later than this."""
        spuid, _ = await self.subscribe("ASK {}")
        await self.unsubscribe(spuid)

    async def unsubscribe(self, spuid: str) -> None:
        if self._ws is not None and not self._ws.closed:
            try:
                await self._ws.send_json({"unsubscribe": {"spuid": spuid}})
            except (aiohttp.ClientError, ConnectionError):
                pass  # the socket's end ends it

    async def close(self) -> None:
        self._closing = True
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)
        if self._http is not None:
            await self._http.close()

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        try:
            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.TEXT:
                    try:
                        self._frame(json.loads(msg.data))
                    except (ValueError, KeyError, TypeError) as exc:
                        log.warning("%s: a frame the bridge cannot read: %s", self.url, exc)
        finally:
            for first in self._pending.values():
                if not first.done():
                    first.set_exception(BrokerError(Status.INTERNAL_ERROR,
                                                    f"{self.url}: the socket closed"))
            if not self._closing:
                log.warning("%s: the broker's socket closed", self.url)
                self.on_end(None, Status.INTERNAL_ERROR)

    def _frame(self, frame: dict) -> None:
        if "notification" in frame:
            n = frame["notification"]
            if n.get("sequence") == 0 and n.get("alias") in self._pending:
                first = self._pending[n["alias"]]
                if not first.done():
                    first.set_result(n)
                return
            self.notifications += 1
            self.on_change(n["spuid"], n.get("addedResults") or {},
                           n.get("removedResults") or {})
        elif "error" in frame:
            status = STATUS_OF_HTTP.get(frame.get("status_code"), Status.INTERNAL_ERROR)
            reason = f"{self.url}: {frame.get('error_description') or frame['error']}"
            first = self._pending.get(frame.get("alias"))
            if first is not None and not first.done():
                first.set_exception(BrokerError(status, reason))
            elif isinstance(frame.get("spuid"), str):
                log.warning("the broker ended %s: %s", frame["spuid"], reason)
                self.on_end(frame["spuid"], status)
