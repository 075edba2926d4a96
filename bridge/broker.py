"""The bridge's side of a SEPA broker: SPARQL 1.1 Protocol queries and updates over HTTP
(aiohttp), every failure turned into the KSP status a device gets for it.

What a failure becomes (docs/bridge.md has the table with the reasons):

| the broker's answer                          | KSP status          |
|----------------------------------------------|---------------------|
| 2xx                                          | OK                  |
| 400 (its SPARQL parser or request checks)    | INVALID_DATA_FORMAT |
| 401, 403                                     | ACCESS_DENIED       |
| 413, 429, 503                                | LIMIT_EXCEEDED      |
| any other status, a body that is not SPARQL JSON, no answer within `timeout`, a refused or broken connection | INTERNAL_ERROR |

The device learns only the status, as KSP carries nothing more; the bridge logs the broker's
`error_description` beside it. At most `max_concurrent` requests are in flight; more wait
(the bridge's own queue is bounded before them).
"""
from __future__ import annotations

import asyncio
import json
import logging
import time

import aiohttp

from ksp.codes import Status
from sib import Histogram

log = logging.getLogger("ksp.bridge")

__all__ = ["Broker", "BrokerError", "STATUS_OF_HTTP"]

STATUS_OF_HTTP = {400: Status.INVALID_DATA_FORMAT, 401: Status.ACCESS_DENIED,
                  403: Status.ACCESS_DENIED, 413: Status.LIMIT_EXCEEDED,
                  429: Status.LIMIT_EXCEEDED, 503: Status.LIMIT_EXCEEDED,
                  507: Status.LIMIT_EXCEEDED}


class BrokerError(Exception):
    """A request the broker did not carry out, with the KSP status it maps to."""

    def __init__(self, status: Status, reason: str, http_status: int | None = None) -> None:
        super().__init__(f"{status.name}: {reason}")
        self.status, self.reason, self.http_status = status, reason, http_status


class Broker:
    """`async with Broker("http://host:8000") as broker: await broker.query(text)`.
    `ssl`: an `ssl.SSLContext` for an https broker (None: the system's trust store)."""

    def __init__(self, url: str, *, query_path: str = "/query", update_path: str = "/update",
                 timeout: float = 10.0, max_concurrent: int = 16,
                 authorization: str | None = None, ssl: object = None) -> None:
        self.url = url.rstrip("/")
        self.query_url, self.update_url = self.url + query_path, self.url + update_path
        self.timeout = timeout
        self.authorization = authorization
        self.ssl = ssl
        self._slots = asyncio.Semaphore(max_concurrent)
        self._http: aiohttp.ClientSession | None = None
        #: Seconds from sending to the whole answer, of the requests the broker answered 2xx.
        self.latency = {"query": Histogram(), "update": Histogram()}

    async def __aenter__(self) -> "Broker":
        self._http = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=self.timeout),
            connector=aiohttp.TCPConnector(ssl=self.ssl if self.ssl is not None else True))
        return self

    async def __aexit__(self, *exc) -> None:
        if self._http is not None:
            await self._http.close()

    async def query(self, text: str, authorization: str | None = None) -> dict:
        """SPARQL 1.1 Query Results JSON of `text` (SELECT, ASK). `authorization`: the
        `Authorization` header for this request (a device's token), else the broker's."""
        body = await self._post(self.query_url, text, "application/sparql-query",
                                "application/sparql-results+json", self.latency["query"],
                                authorization)
        try:
            results = json.loads(body)
        except ValueError:
            results = None
        if not isinstance(results, dict) or not ("boolean" in results or "results" in results):
            raise BrokerError(Status.INTERNAL_ERROR, f"{self.query_url}: the answer is not "
                                                     "SPARQL JSON results")
        return results

    async def update(self, text: str, authorization: str | None = None) -> None:
        await self._post(self.update_url, text, "application/sparql-update", "*/*",
                         self.latency["update"], authorization)

    async def _post(self, url: str, text: str, kind: str, accept: str,
                    latency: Histogram, authorization: str | None) -> bytes:
        headers = {"Content-Type": kind, "Accept": accept}
        if authorization := authorization or self.authorization:
            headers["Authorization"] = authorization
        async with self._slots:
            try:
                sent = time.perf_counter()
                async with self._http.post(url, data=text.encode(), headers=headers) as answer:
                    body = await answer.read()
                    if answer.status < 300:
                        latency.observe(time.perf_counter() - sent)
                        return body
                    status = STATUS_OF_HTTP.get(answer.status, Status.INTERNAL_ERROR)
                    raise BrokerError(status, f"{url}: HTTP {answer.status}{_said(body)}",
                                      answer.status)
            except asyncio.TimeoutError:
                raise BrokerError(Status.INTERNAL_ERROR,
                                  f"{url}: no answer within {self.timeout} s") from None
            except aiohttp.ClientError as exc:
                raise BrokerError(Status.INTERNAL_ERROR, f"{url}: {exc}") from None


def _said(body: bytes) -> str:
    """The broker's own words: SEPA's `error_description`, else the start of the body."""
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("error_description"), str):
        return f" ({data['error_description']})"
    text = body[:200].decode(errors="replace").strip()
    return f" ({text})" if text else ""
