"""The SEPA gate: the SPARQL 1.1 Protocol over HTTP (`/query`, `/update`, port 8000) and the
SPARQL 1.1 SE Protocol over WebSocket (`/subscribe`, port 9000), served by aiohttp in the SIB's
event loop. Every query, update and subscription runs on the SIB's scheduler (`Sib.call`), in
arrival order with the KSP requests (docs/sepa.md).

What the clients in the field send differs, so the gate is liberal in what it accepts: unknown
keys are ignored, graph URIs may be a string or a list, a Content-Type may carry parameters.
What it sends follows the reference broker (vaimee/SEPA): the first notification has sequence
0, the alias and the whole result as `addedResults` beside an empty `removedResults` that still
has `head.vars`; later ones count up from 1 and go only when something was added or removed.
"""
from __future__ import annotations

import asyncio
import functools
import heapq
import json
import logging
import os
import math
import time
from collections import Counter, deque
from collections.abc import Iterable, Mapping
import ssl
from dataclasses import dataclass
from pathlib import Path

import pyoxigraph as ox
from aiohttp import WSMsgType, web

from ksp.codes import Status
from ksp.kpid import kp_id_bytes
from ksp.terms import IRI
from ksp.ratelog import RateLimitedLog

from ..access import Grant
from ..budget import OverBudget
from ..fairness import Pace, ShareExceeded, client_party, current_party
from ..metrics import Histogram
from ..options import apply_keywords
from . import description
from .broker import SepaBroker, SepaError
from .graph_store import GRAPH_STORE, GraphStore
from .jsap import describe
from .negotiation import accepted as _accepted
from .outbound import Outbound
from .protocol import base_iri, operation
from .secure import REFUSED, Clients, RegisterTokens, Tokens, basic_credentials
from .update import Dataset

log = logging.getLogger("ksp.sib.sepa")
#: A client registered: ten lines a minute (`ksp.ratelog`).
registered_log = RateLimitedLog(log, time.monotonic, burst=10)
#: Lines a peer can set off, one per kind and minute (`ksp.ratelog`).
peer_log = RateLimitedLog(log, time.monotonic)

__all__ = ["SepaGate"]

DASHBOARD = Path(__file__).with_name("dashboard.html")
SPARQL_JSON = "application/sparql-results+json"
#: Result formats by media type: solutions and booleans, then graphs (CONSTRUCT, DESCRIBE).
SOLUTION_FORMATS = {
    SPARQL_JSON: ox.QueryResultsFormat.JSON,
    "application/json": ox.QueryResultsFormat.JSON,
    "application/sparql-results+xml": ox.QueryResultsFormat.XML,
    "application/xml": ox.QueryResultsFormat.XML,
    "text/csv": ox.QueryResultsFormat.CSV,
    "text/tab-separated-values": ox.QueryResultsFormat.TSV,
}
GRAPH_FORMATS = {
    "text/turtle": ox.RdfFormat.TURTLE,
    "application/n-triples": ox.RdfFormat.N_TRIPLES,
    "application/rdf+xml": ox.RdfFormat.RDF_XML,
}


def _graphs(values: Iterable[str] | str | None) -> tuple[IRI, ...] | None:
    if values is None:
        return None
    if isinstance(values, str):
        values = [values]
    if not isinstance(values, (list, tuple)) or not all(isinstance(v, str) for v in values):
        raise SepaError(400, "invalid_request", "graph URIs must be a string or a list of them")
    return tuple(IRI(v) for v in values)


def _dataset(default, named) -> Dataset:
    """A protocol request's dataset: when either list is given, the dataset is exactly the
    two (SPARQL 1.1 Protocol §2.1.4); else the store's own."""
    default, named = _graphs(default), _graphs(named)
    if default is None and named is None:
        return Dataset()
    return Dataset(default or (), named or ())


def _error(exc: SepaError) -> web.Response:
    response = web.json_response(exc.json(), status=exc.status)
    retry_after = getattr(exc, "retry_after", None)
    if retry_after is not None:
        response.headers["Retry-After"] = str(max(1, math.ceil(retry_after)))
    return response


def _held_back(wait: float) -> SepaError:
    """429 for a source that guessed wrong too often (`sib.guesses`), with its wait."""
    exc = SepaError(429, "too_many_requests", "too many wrong secrets from this address: "
                    f"try again in {math.ceil(wait)} s")
    exc.retry_after = wait
    return exc


class _Admitted(asyncio.Protocol):
    """aiohttp's protocol for one connection, behind the gate's connection limits: one over a
    limit is aborted at accept, before aiohttp reads a byte of it. `guard`: anything with
    `admit(conn, address) -> bool`, `heard(conn)` (each read: the guard, when full, reclaims a
    connection that has said the least) and `release(conn)` (`ksp-sib` passes
    `transports.limits.Guard`, as its KSP TCP listener has)."""

    __slots__ = ("factory", "guard", "inner", "transport")

    def __init__(self, factory, guard) -> None:
        self.factory, self.guard = factory, guard
        self.inner: asyncio.Protocol | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        peer = transport.get_extra_info("peername")
        if not self.guard.admit(self, peer[0] if peer else None):
            transport.abort()
            return
        self.transport, self.inner = transport, self.factory()
        self.inner.connection_made(transport)

    def connection_lost(self, exc) -> None:
        if self.inner is not None:
            self.guard.release(self)
            self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.inner is not None:
            self.guard.heard(self)
            self.inner.data_received(data)

    def eof_received(self):
        return None if self.inner is None else self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class _Socket:
    """One subscriber WebSocket: what the broker sends goes through a bounded queue to a
    writer task, so a client that never reads costs at most `max_queued` frames (beside what
    the transport buffers before it pushes back); then its connection is aborted (a close
    frame would wait behind what the client does not read) and its subscriptions end."""

    close_timeout = 1.0

    def __init__(self, ws: web.WebSocketResponse, max_queued: int, transport,
                 host: str | None = None) -> None:
        self.ws = ws
        self.transport = transport
        self.host = host  # the client's address: an anonymous subscriber's share
        self.max_queued = max_queued
        self.queue: deque[str] = deque()
        self.ready = asyncio.Event()
        self.closed = False
        self.overflowed = False
        self.writer = asyncio.create_task(self._pump())

    def send(self, message: dict) -> None:
        if self.closed:
            return
        if len(self.queue) < self.max_queued:
            self.queue.append(json.dumps(message, ensure_ascii=False))
            self.ready.set()
            return
        # The writer may be waiting on the client's TCP window for good, and a close frame
        # would wait behind it: the connection is aborted from here, and the handler's read
        # loop ends with it.
        peer_log.warning("not reading",
                         "subscriber socket not reading: aborted after %d queued frames",
                         self.max_queued)
        self.overflowed = self.closed = True
        self.queue.clear()
        self.writer.cancel()
        self.transport.abort()

    async def _pump(self) -> None:
        while True:
            await self.ready.wait()
            self.ready.clear()
            while self.queue:
                await self.ws.send_str(self.queue.popleft())

    async def finish(self, code: int, message: bytes) -> None:
        """Close after the frames queued so far are written (`close_timeout` at most)."""
        deadline = asyncio.get_running_loop().time() + self.close_timeout
        while self.queue and not self.closed and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        self.closed = True
        await self.shut(code, message)

    async def shut(self, code: int, message: bytes) -> None:
        """Close with `code`, then abort: a client that does not read would otherwise keep the
        connection open, holding what is buffered for it, after the close."""
        try:
            await asyncio.wait_for(self.ws.close(code=code, message=message), self.close_timeout)
        except (asyncio.TimeoutError, ConnectionError):
            pass
        if not self.transport_gone():
            self.transport.abort()

    def transport_gone(self) -> bool:
        """The connection's socket is closed (not merely closing with bytes still buffered)."""
        sock = self.transport.get_extra_info("socket")
        return sock is None or sock.fileno() == -1


@dataclass(frozen=True, slots=True, kw_only=True)
class GateListen:
    """Where the gate listens: a port below 0 is off, 0 asks for a free one. HTTPS and WSS
    (the secure mode: `/oauth/register`, `/oauth/token`, `/secure/query`, `/secure/update`,
    `/secure/data`, `/secure/subscribe`) only with an `ssl_context`."""
    host: str = "127.0.0.1"
    http_port: int = 8000
    ws_port: int = 9000
    ssl_context: ssl.SSLContext | None = None
    https_port: int = 8443
    wss_port: int = 9443
    #: The service base IRI of relative IRIs in queries and updates (None: the gate's root,
    #: `sib.sepa.protocol.base_iri`).
    base_iri: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class GateLimits:
    """How much the gate takes, from one client and from all."""
    max_body_bytes: int = 1 << 20
    max_frame_bytes: int = 64 << 10
    #: Subscriptions in all, on one socket, and of one secure client (or one address for
    #: anonymous ones) on all its sockets (None: only `max_subscriptions`).
    max_subscriptions: int = 10_000
    max_socket_subscriptions: int = 1_000
    max_subscriptions_per_identity: int | None = None
    #: Frames queued for one socket that does not read; past them it is aborted.
    max_socket_queue: int = 1_024
    #: Seconds between WebSocket pings.
    heartbeat: float = 30.0
    #: Seconds an HTTP connection may stay silent before its first request and between
    #: requests (`web.run_app`'s default; aiohttp's own is an hour).
    keepalive: float = 75.0
    #: The pace of one client's requests and frames (`sib.fairness.Pace`: a secure client's
    #: HTTP requests by its identity, the rest by address; None: any).
    requests_per_second_per_identity: float | None = None


class SepaGate:
    """Start with `await SepaGate(sib, ...).start()`; `http_port`/`ws_port` are the bound
    ports afterwards (0 asks for free ones)."""

    def __init__(self, sib, *, listen: GateListen = GateListen(),
                 limits: GateLimits = GateLimits(), clients: Clients | None = None,
                 tokens: Tokens | None = None, register_tokens: RegisterTokens | None = None,
                 ksp: Mapping[str, int] | None = None,
                 namespaces: Mapping[str, str] | None = None, connections=None,
                 outbound: Outbound | None = None, **settings) -> None:
        """`listen`: where (`GateListen`); `limits`: how much (`GateLimits`); `settings`: any
        of their fields by name, over theirs. With `listen.ssl_context` the secure mode is on,
        for the `clients` registered, the `tokens` they get and the `register_tokens` the
        operator issues (`sib.sepa.secure`); a secure subscription ends with its token.
        `GET /jsap` describes the SIB (`sib.sepa.jsap`): the ports, the KSP listeners' `ksp`
        ports by URL scheme, and `namespaces`. `connections`: the limits on the connections of
        all four listeners together (`_Admitted`; None: none). `outbound`: the SERVICE
        endpoints allowed, and how their queries run (`sib.sepa.outbound`; None: none
        allowed)."""
        listen, limits = apply_keywords("SepaGate", settings, listen, limits)
        self.sib = sib
        self.listen, self.limits = listen, limits
        self.host = listen.host
        #: The bound ports once started (None: that listener is off).
        self.http_port, self.ws_port = listen.http_port, listen.ws_port
        self.ssl_context = listen.ssl_context
        self.https_port, self.wss_port = ((listen.https_port, listen.wss_port)
                                          if listen.ssl_context else (None, None))
        self.clients = clients if clients is not None else Clients(None, ())
        self.tokens = tokens if tokens is not None else Tokens(None)
        self.register_tokens = (register_tokens if register_tokens is not None
                                else RegisterTokens(None))
        #: Secure subscriptions by spuid: (socket, client_id); and (expiry, spuid) by expiry.
        self._bound: dict[str, tuple[_Socket, str]] = {}
        self._expiries: list[tuple[float, str]] = []
        self._expiry_changed = asyncio.Event()
        self._expiry_task: asyncio.Task | None = None
        self.clients.on_forget.append(self._revoked)
        self.ksp = dict(ksp or {})
        self.namespaces = dict(namespaces or {})
        self.connections = connections
        self.outbound = outbound if outbound is not None else Outbound()
        self.pace = Pace(limits.requests_per_second_per_identity)
        self.broker = SepaBroker(sib.core, max_subscriptions=limits.max_subscriptions,
                                 max_per_owner=limits.max_socket_subscriptions,
                                 max_per_party=limits.max_subscriptions_per_identity)
        self.sockets: set[_Socket] = set()
        self._runners: list[web.AppRunner] = []
        self._servers: list[asyncio.Server] = []
        self.requests: Counter[str] = Counter()  # by kind (stats)
        self.errors: Counter[int] = Counter()  # error answers and frames, by status code
        self.overflowed = 0  # sockets aborted for not reading
        self.request_latency = Histogram()
        self._register_metrics(sib.core.metrics)
        self.outbound.register_metrics(sib.core.metrics)

    def _register_metrics(self, metrics) -> None:
        """Beside the KSP ones, on the same endpoint (`ksp-sib --metrics-port`)."""
        b = self.broker
        metrics.labelled["ksp_sepa_requests_total"] = (
            "SEPA requests, by kind (query, update, data, subscribe, unsubscribe, register, "
            "token, jsap, dashboard).",
            "kind", lambda: self.requests)
        metrics.labelled["ksp_sepa_errors_total"] = (
            "SEPA error answers and frames, by HTTP status code.", "status",
            lambda: self.errors)
        pace = self.pace
        metrics.counters["ksp_sepa_paced_total"] = (
            "SEPA requests and frames held back to their client's pace "
            "([sepa] requests_per_second_per_identity).", lambda: pace.waited)
        metrics.counters["ksp_sepa_pace_refused_total"] = (
            "SEPA requests and frames refused (429): their client far past its pace.",
            lambda: pace.refused)
        metrics.gauges["ksp_sepa_sockets"] = ("Open SEPA WebSockets.", lambda: len(self.sockets))
        guard = self.connections
        if guard is not None:
            metrics.gauges["ksp_sepa_connections"] = (
                "Open connections to the SEPA gate's listeners (HTTP and WebSocket).",
                lambda: len(guard))
            metrics.counters["ksp_sepa_connections_refused_total"] = (
                "Connections to the SEPA gate closed at accept by a connection limit.",
                lambda: sum(guard.refused.values()))
        metrics.gauges["ksp_sepa_subscriptions"] = (
            "SEPA subscriptions.", lambda: len(b.subscriptions))
        metrics.gauges["ksp_sepa_evaluations_shared"] = (
            "Distinct subscription queries (equal subscriptions share one).",
            lambda: b.queries)
        metrics.counters["ksp_sepa_notifications_total"] = (
            "SEPA notifications sent.", lambda: b.notifications)
        metrics.counters["ksp_sepa_evaluations_total"] = (
            "Subscription queries evaluated (first results and re-evaluations).",
            lambda: b.evaluations)
        metrics.counters["ksp_sepa_sockets_overflowed_total"] = (
            "SEPA WebSockets aborted for not reading their notifications.",
            lambda: self.overflowed)
        metrics.histograms["ksp_sepa_request_latency_seconds"] = (
            "SEPA HTTP query and update, from the request read to the answer.",
            self.request_latency)
        metrics.histograms["ksp_sepa_notification_latency_seconds"] = (
            "From the start of a change (KSP or SEPA) to its last SEPA notification queued.",
            b.latency)

    async def start(self) -> "SepaGate":
        http = web.Application(client_max_size=self.limits.max_body_bytes)
        for method in ("GET", "HEAD", "POST"):  # GET and HEAD of /update: its description
            http.router.add_route(method, "/query", self._query)
            http.router.add_route(method, "/update", self._update)
        http.router.add_get("/jsap", self._jsap)
        http.router.add_get("/dashboard", self._dashboard)
        graph_store = GraphStore(self.sib, self.broker)
        graph_store.add_routes(http, GRAPH_STORE, self._answer)
        self._page = DASHBOARD.read_bytes()  # once: a missing file is said at start
        ws = web.Application()
        ws.router.add_get("/subscribe", self._subscribe)
        https = web.Application(client_max_size=self.limits.max_body_bytes)
        for path in ("/oauth/register", "/register"):
            https.router.add_route("POST", path, self._register)
        for path in ("/oauth/token", "/token"):
            https.router.add_route("POST", path, self._token)
        for method in ("GET", "HEAD", "POST"):
            https.router.add_route(method, "/secure/query", self._secure_query)
            https.router.add_route(method, "/secure/update", self._secure_update)
        https.router.add_get("/jsap", self._jsap)
        graph_store.add_routes(https, "/secure" + GRAPH_STORE,
                               functools.partial(self._answer, secure=True))
        wss = web.Application()
        wss.router.add_get("/secure/subscribe", self._secure_subscribe)
        ports = []
        loop = asyncio.get_running_loop()
        for name, app, port, tls in (("http", http, self.http_port, None),
                                     ("ws", ws, self.ws_port, None),
                                     ("https", https, self.https_port, self.ssl_context),
                                     ("wss", wss, self.wss_port, self.ssl_context)):
            if port is None or port < 0:
                ports.append(None)
                continue
            runner = web.AppRunner(app, access_log=None, handle_signals=False,
                                   keepalive_timeout=self.limits.keepalive)
            await runner.setup()
            self._runners.append(runner)
            factory = runner.server  # what aiohttp's TCPSite listens with
            if self.connections is not None:
                factory = functools.partial(_Admitted, runner.server, self.connections)
            try:
                server = await loop.create_server(factory, self.host, port, ssl=tls)
            except OSError as exc:  # say which listener, in words (`listener`: which)
                reason = os.strerror(exc.errno) if exc.errno else str(exc)
                error = OSError(exc.errno, f"SEPA gate's {name.upper()} port {port} on "
                                f"{self.host}: {reason}")
                error.listener = name
                await self.close()
                raise error from exc
            self._servers.append(server)
            ports.append(server.sockets[0].getsockname()[1])
        self.http_port, self.ws_port, self.https_port, self.wss_port = ports
        self.broker.base_iri = base_iri(self.listen.base_iri, self.host, self.http_port,
                                        self.https_port)
        if self.ssl_context is not None:
            self._expiry_task = asyncio.create_task(self._end_expired())
        return self

    async def close(self) -> None:
        self.outbound.stop()  # a SERVICE query under way: answered now, not at its deadline
        if self._expiry_task is not None:
            self._expiry_task.cancel()
            self._expiry_task = None
        for server in self._servers:
            server.close()  # no new connections
        await asyncio.gather(*(s.shut(1001, b"SIB shutting down") for s in list(self.sockets)))
        for runner in self._runners:
            await runner.cleanup()
        for server in self._servers:
            await server.wait_closed()
        self._runners.clear()
        self._servers.clear()

    # -- HTTP -----------------------------------------------------------------------------

    async def _params(self, request: web.Request, field: str, direct: str):
        """(text, params) of a protocol request (`sib.sepa.protocol`); text None: a GET with
        no parameter (the service description)."""
        try:
            return await operation(request, field, direct)
        except web.HTTPRequestEntityTooLarge:
            raise SepaError(413, "request_too_large",
                            f"bodies are limited to {self.limits.max_body_bytes} bytes") from None

    async def _query(self, request: web.Request) -> web.Response:
        return await self._answer(request, self._run_query)

    async def _update(self, request: web.Request) -> web.Response:
        return await self._answer(request, self._run_update)

    async def _secure_query(self, request: web.Request) -> web.Response:
        return await self._answer(request, self._run_query, secure=True)

    async def _secure_update(self, request: web.Request) -> web.Response:
        return await self._answer(request, self._run_update, secure=True)

    async def _jsap(self, request: web.Request) -> web.Response:
        """The SIB's JSAP, with the host this client reached it by (its Host header). Over
        HTTPS, or with `?secure`, it describes the secure mode."""
        self.requests["jsap"] += 1
        return web.json_response(describe(
            request.url.host or self.host, http_port=self.http_port, ws_port=self.ws_port,
            https_port=self.https_port, wss_port=self.wss_port, ksp=self.ksp,
            namespaces=self.namespaces, secure=request.secure or "secure" in request.query),
            dumps=lambda data: json.dumps(data, indent=2))

    async def _dashboard(self, request: web.Request) -> web.Response:
        """The live Smart Greenhouse page (`dashboard.html`): static, fed by the WebSocket."""
        self.requests["dashboard"] += 1
        return web.Response(body=self._page, content_type="text/html", charset="utf-8")

    def _identity(self, authorization: object) -> str:
        """The registered client a token speaks for (401 without a valid token)."""
        return self._bearer(authorization)[0]

    def _bearer(self, authorization: object) -> tuple[str, str, float]:
        """(identity, client_id, expiry) of a valid token (401 otherwise)."""
        client_id, expires = self.tokens.claims(authorization)
        identity = self.clients.identity(client_id)
        if identity is None:
            raise SepaError(401, "invalid_token", "the token's client is no longer registered")
        return identity, client_id, expires

    def _grant_of(self, identity: str) -> Grant:
        """What a client may do under the policy in force: the grant of the KP entry named by
        its identity, else the anonymous grant."""
        policy = self.sib.core.access
        entry = policy.kps.get(kp_id_bytes(identity))
        return entry.grant if entry is not None else policy.anonymous_grant()

    async def _register(self, request: web.Request) -> web.Response:
        async def register(request, grant):
            try:
                body = json.loads(await request.text())
            except ValueError:
                body = None
            register = body.get("register") if isinstance(body, dict) else None
            if not isinstance(register, dict):
                raise SepaError(400, "invalid_request",
                                'register takes {"register": {"client_identity", '
                                '"grant_types"}}')
            identity = Clients.check_request(register.get("client_identity"),
                                             register.get("grant_types"))
            anew = await self._registration_secret(request, identity)
            client_id, secret = self.clients.register(identity, register["grant_types"],
                                                      anew=anew)
            registered_log.info("registered", "SEPA client %r registered", identity)
            return web.json_response({"credentials": {"client_id": client_id,
                                                      "client_secret": secret}}, status=201)
        return await self._answer(request, register)

    async def _registration_secret(self, request: web.Request, identity: str) -> bool:
        """Check the register request's secret (HTTP Basic `identity:secret`): a registration
        token (True: the identity may register anew) or the password of its `[[access.kp]]`
        entry (False). Every refusal is `REFUSED`; a source past its wrong guesses gets 429."""
        given = basic_credentials(request.headers.get("Authorization"))
        if given is None or given[0] != identity or not given[1]:
            raise REFUSED
        source, secret = request.remote, given[1]
        auth = self.sib.authenticator
        wait = auth.guesses.wait(source)
        if wait > 0:
            raise _held_back(wait)
        if identity in self.clients.identities and self.register_tokens.take(identity, secret):
            return True
        kp_id = kp_id_bytes(identity)
        if auth.policy.is_open:  # no passwords configured: only a registration token
            auth.guesses.failed(kp_id, source)
            raise REFUSED
        # A name without a KP entry costs the same scrypt run (`Authenticator`'s dummy hash).
        verdict = auth.verdict(kp_id, secret, source)
        if verdict is None:
            await auth.verify(kp_id, secret, source)
            verdict = auth.verdict(kp_id, secret, source)
        if verdict == Status.LIMIT_EXCEEDED:
            raise _held_back(max(auth.guesses.wait(source), 1.0))
        if verdict != Status.OK:
            raise REFUSED
        return False

    async def _token(self, request: web.Request) -> web.Response:
        async def token(request, grant):
            guesses = self.sib.authenticator.guesses
            wait = guesses.wait(request.remote)
            if wait > 0:
                raise _held_back(wait)
            header = request.headers.get("Authorization")
            try:
                client_id, _ = self.clients.authenticate(header)
            except SepaError:
                given = basic_credentials(header)
                if given is not None:
                    guesses.failed(("sepa client", given[0]), request.remote)
                raise
            return web.json_response(self.tokens.issue(client_id), status=201)
        return await self._answer(request, token)

    async def _answer(self, request: web.Request, handler, secure: bool = False,
                      kind: str | None = None) -> web.Response:
        """A protocol request's answer; every failure as a JSON error with its status. On a
        secure path the token is checked before anything of the request is read. `kind`: its
        label in the request counts (None: the path's last segment)."""
        self.requests[kind or request.path.rsplit("/", 1)[-1]] += 1
        start = time.perf_counter()
        try:
            identity = self._identity(request.headers.get("Authorization")) if secure else None
            grant = self._grant_of(identity) if secure else None
            # Its queued work counts against its share (`Sib.call`, `sib.fairness`).
            party = client_party(identity, request.remote)
            current_party.set(party)
            if not await self.pace.wait(party):
                raise self._too_fast()
            response = await handler(request, grant)
            if handler in (self._run_query, self._run_update):
                self.request_latency.observe(time.perf_counter() - start)
            return response
        except SepaError as exc:
            return self._error(exc)
        except ShareExceeded as exc:
            return self._error(SepaError(429, "too_many_requests", str(exc)))
        except asyncio.QueueFull:
            return self._error(SepaError(503, "busy", "the SIB's queue is full"))
        except Exception:  # a bug: said as one, the request changed nothing it reports
            peer_log.exception("request failed", "%s %s failed", request.method, request.path)
            return self._error(SepaError(500, "internal_error", "the SIB failed on this request"))

    def _too_fast(self) -> SepaError:
        return SepaError(429, "too_many_requests", "this client sends faster than its pace "
                         f"of {self.pace.rate:g} a second: send more slowly")

    def _error(self, exc: SepaError) -> web.Response:
        self.errors[exc.status] += 1
        return _error(exc)

    async def _run_query(self, request: web.Request, grant: Grant | None) -> web.Response:
        text, params = await self._params(request, "query", "application/sparql-query")
        if text is None:
            return self._description(request)
        dataset = _dataset(params.getall("default-graph-uri", None),
                           params.getall("named-graph-uri", None))
        accept = request.headers.get("Accept", "")

        def run():  # the result reads the store lazily: serialized on the reader thread too
            result = self.broker.query(text, dataset, grant)
            try:
                formats = (GRAPH_FORMATS if isinstance(result, ox.QueryTriples)
                           else SOLUTION_FORMATS)
                media = _accepted(accept, formats)
                if media is None:
                    raise SepaError(406, "not_acceptable",
                                    f"no result format for Accept: {accept}; this result comes "
                                    f"as {', '.join(formats)}")
                return media, result.serialize(format=formats[media])
            finally:
                del result  # here: pyoxigraph's results may not be dropped on another thread

        try:
            if self.outbound.screen(text, "query"):  # off the scheduler: it waits on the network
                media, body = await self.outbound.run(run)
            else:  # beside the writes, on a reader thread, under the query budget
                media, body = await self.sib.read(run)
        except OverBudget as exc:
            raise SepaError(503, "timeout", str(exc)) from None
        return web.Response(body=body, content_type=media, charset="utf-8")

    async def _run_update(self, request: web.Request, grant: Grant | None) -> web.Response:
        if request.method in ("GET", "HEAD"):  # an update is POSTed (SPARQL 1.1 Protocol 2.2)
            if request.query:
                raise SepaError(405, "method_not_allowed", "updates are sent by POST; a GET "
                                f"of {request.path} with no parameter is its description")
            return self._description(request, "SPARQL11Update")
        text, params = await self._params(request, "update", "application/sparql-update")
        default = params.getall("using-graph-uri", None)
        named = params.getall("using-named-graph-uri", None)
        using = None if default is None and named is None else _dataset(default, named)
        self.outbound.screen(text, "update")
        delta = await self.sib.call(lambda: self.broker.update(text, using, grant))
        return web.json_response({"added": len(delta.added), "removed": len(delta.removed)})

    def _description(self, request: web.Request, language: str = "SPARQL11Query"
                     ) -> web.Response:
        """The Service Description (`sib.sepa.description`) of the endpoint asked, which
        serves `language`, by the Accept header."""
        query = language == "SPARQL11Query"
        host = request.url.host or self.host
        host = f"[{host}]" if ":" in host else host
        subscribe = [f"{scheme}://{host}:{port}{path}" for scheme, port, path in (
            ("ws", self.ws_port, "/subscribe"), ("wss", self.wss_port, "/secure/subscribe"))
            if port is not None and query]
        media = _accepted(request.headers.get("Accept", ""), description.FORMATS) or "text/turtle"
        body = description.serialize(description.describe_service(
            str(request.url.with_query(None)), language=language,
            media=(*SOLUTION_FORMATS, *GRAPH_FORMATS) if query else (),
            subscribe=subscribe, federated=query and bool(self.outbound.endpoints)), media)
        return web.Response(body=body, content_type=media, charset="utf-8")

    # -- WebSocket ------------------------------------------------------------------------

    async def _secure_subscribe(self, request: web.Request) -> web.WebSocketResponse:
        return await self._subscribe(request, secure=True)

    async def _subscribe(self, request: web.Request, secure: bool = False
                         ) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(heartbeat=self.limits.heartbeat,
                                  max_msg_size=self.limits.max_frame_bytes)
        await ws.prepare(request)
        sock = _Socket(ws, self.limits.max_socket_queue, request.transport, request.remote)
        self.sockets.add(sock)
        try:
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:
                    await self._frame(sock, msg.data, secure)
                elif msg.type == WSMsgType.BINARY:
                    sock.send(SepaError(400, "invalid_request",
                                        "frames are JSON text, not binary").json())
                if sock.closed:
                    break
        finally:
            sock.closed = True
            self.sockets.discard(sock)
            self.overflowed += sock.overflowed
            try:
                await self.sib.call(lambda: self.broker.drop_owner(sock))
            except asyncio.QueueFull:
                self.broker.drop_owner(sock)  # between two awaits: the scheduler is not in it
            sock.writer.cancel()
        return ws

    async def _frame(self, sock: _Socket, data: str, secure: bool = False) -> None:
        alias = None
        try:
            if not await self.pace.wait(client_party(None, sock.host)):
                raise self._too_fast()  # the socket's frames: by its address
            try:
                message = json.loads(data)
            except ValueError as exc:
                raise SepaError(400, "invalid_request", f"not JSON: {exc}") from None
            if not isinstance(message, dict):
                raise SepaError(400, "invalid_request", "a frame is a JSON object")
            if "subscribe" in message:
                self.requests["subscribe"] += 1
                body = message["subscribe"]
                if not isinstance(body, dict):
                    raise SepaError(400, "invalid_request", "subscribe takes an object")
                alias = body.get("alias")
                alias = alias if isinstance(alias, str) else None
                identity = bearer = None
                if secure:  # in the subscribe or beside it, as clients differ
                    identity, *bearer = self._bearer(body.get("authorization",
                                                              message.get("authorization")))
                sub = await self._on_subscribe(sock, body, alias, identity)
                if bearer:
                    self._bind(sub.spuid, sock, *bearer)
            elif "unsubscribe" in message:
                self.requests["unsubscribe"] += 1
                body = message["unsubscribe"]
                spuid = body.get("spuid") if isinstance(body, dict) else None
                if not isinstance(spuid, str):
                    raise SepaError(400, "invalid_request", "unsubscribe needs a spuid")
                if not await self.sib.call(lambda: self.broker.unsubscribe(spuid, sock)):
                    raise SepaError(404, "not_found", f"no subscription {spuid} on this socket")
                sock.send({"unsubscribed": {"spuid": spuid}})
            else:
                raise SepaError(400, "invalid_request",
                                "unknown primitive: a frame is subscribe or unsubscribe")
        except SepaError as exc:
            self.errors[exc.status] += 1
            sock.send(exc.json(alias))
        except ShareExceeded as exc:
            self.errors[429] += 1
            sock.send(SepaError(429, "too_many_requests", str(exc)).json(alias))
        except asyncio.QueueFull:
            self.errors[503] += 1
            sock.send(SepaError(503, "busy", "the SIB's queue is full").json(alias))

    async def _on_subscribe(self, sock: _Socket, body: dict, alias: str | None,
                            identity: str | None = None):
        """`identity`: the secure client's (None: anonymous, on the plain port)."""
        sparql = body.get("sparql")
        if not isinstance(sparql, str) or not sparql.strip():
            raise SepaError(400, "invalid_request", "subscribe needs its sparql text")
        dataset = _dataset(body.get("default-graph-uri"), body.get("named-graph-uri"))
        grant_of = None if identity is None else (lambda: self._grant_of(identity))
        party = client_party(identity, sock.host)
        current_party.set(party)  # its queued work counts against its share (`Sib.call`)
        self.outbound.screen(sparql, "subscription")
        return await self.sib.call(lambda: self.broker.subscribe(
            sparql, dataset, alias, sock.send, sock, grant_of, party))

    # -- secure subscriptions end with their tokens ---------------------------------------

    @property
    def token_bound(self) -> int:
        """Entries kept to end secure subscriptions with their tokens: at most twice the live
        subscriptions and 64 (`_bind` drops those that ended otherwise)."""
        return max(len(self._bound), len(self._expiries))

    def _bind(self, spuid: str, sock: _Socket, client_id: str, expires: float) -> None:
        """`spuid` lives as long as the token it was made with: until it expires, or its
        client is forgotten (`Clients.forget`)."""
        live = self.broker.subscriptions
        if len(self._expiries) >= 2 * len(live) + 64:  # drop what ended otherwise
            self._expiries = [e for e in self._expiries if e[1] in live]
            heapq.heapify(self._expiries)
            self._bound = {k: v for k, v in self._bound.items() if k in live}
        self._bound[spuid] = (sock, client_id)
        if not self._expiries or expires < self._expiries[0][0]:
            self._expiry_changed.set()
        heapq.heappush(self._expiries, (expires, spuid))

    async def _end_expired(self) -> None:
        """End each secure subscription when its token expires."""
        while True:
            self._expiry_changed.clear()
            now = time.time()
            ended = []
            while self._expiries and self._expiries[0][0] <= now:
                ended.append(heapq.heappop(self._expiries)[1])
            if ended:
                await self._end_bound(ended, SepaError(401, "token_expired",
                                                       "the subscription's token has expired"))
                continue
            wait = self._expiries[0][0] - now if self._expiries else None
            try:
                await asyncio.wait_for(self._expiry_changed.wait(), wait)
            except asyncio.TimeoutError:
                pass

    def _revoked(self, client_ids: list[str]) -> None:
        """Clients forgotten: their subscriptions end."""
        gone = set(client_ids)
        spuids = [spuid for spuid, (_, cid) in self._bound.items() if cid in gone]
        if spuids:
            asyncio.get_running_loop().create_task(self._end_bound(spuids, SepaError(
                401, "invalid_token", "the subscription's client is no longer registered")))

    async def _end_bound(self, spuids: list[str], exc: SepaError) -> None:
        """Each subscription gets `exc` as an error frame with its spuid and alias, and ends;
        a socket left without subscriptions is closed after its frames (1008)."""
        def end() -> list[tuple[_Socket, dict]]:
            frames = []
            for spuid in spuids:
                bound = self._bound.pop(spuid, None)
                sub = self.broker.subscriptions.get(spuid)
                if bound is None or sub is None or not self.broker.unsubscribe(spuid):
                    continue
                frame = exc.json(sub.alias)
                frame["spuid"] = spuid
                frames.append((bound[0], frame))
            return frames

        try:
            frames = await self.sib.call(end)
        except asyncio.QueueFull:
            frames = end()  # between two awaits: the scheduler is not in it
        socks = []
        for sock, frame in frames:
            self.errors[exc.status] += 1
            sock.send(frame)
            if sock not in socks:
                socks.append(sock)
        for sock in socks:
            if not sock.closed and not self.broker.owns(sock):
                await sock.finish(1008, exc.error.encode())
