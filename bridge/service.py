"""The bridge as a `ksp.service.Service`: the transports and sessions of the SIB in front
(`transports.Server.start(bridge, udp=...)`), a SEPA broker behind (`bridge.broker.Broker`).

A request is checked as the SIB checks it (`sib.validate`), written as SPARQL with KSP's
meaning (`render(..., union=True)`: without graph options, the union of all graphs), sent over
HTTP, and answered as the SIB answers it: results in the SIB's canonical order
(`sib.query.results_of`), CONSTRUCT templates instantiated here from the solutions of every
variable (the blank nodes a SIB would make), so that a device cannot tell the two apart.

A device's requests run one at a time in arrival order, as in the SIB: its update is in the
broker before its next query is sent. Different devices' requests run side by side (at most
`Broker.max_concurrent` at the broker), so that a device waiting on a slow answer does not hold
up the others. Waiting requests are bounded (`max_queued` in all); past that a request is
answered LIMIT_EXCEEDED at once.

A persistent query is one SE Protocol subscription to the solutions it reads (`subscriber`);
equal ones share it. The bridge keeps each subscription's rows (the broker's added and removed
rows applied to them) and sends a member an IND with its full current result when that result
changed, as the SIB does; TERMINATE, RESET and a KP that stopped ACKing end members, and the
last member's end unsubscribes. When the broker's socket drops, the persistent queries stay:
the subscriber makes their subscriptions again once the broker is back, and a member whose
result changed meanwhile gets an IND with the new one.

A persistent update (a rule) is SEPA's aggregator pattern: a subscription to the solutions of
its pattern, and its plain update sent to the broker when they change and are not empty, with
the SIB's cascade order and protection (`_cascade`).

Devices prove who they are to the bridge as to a SIB (the SIB's `[access]`: CREDENTIALS checked
by `sib.auth` in the transports, sealed envelopes, the same grants), and a request the policy
refuses is answered ACCESS_DENIED without reaching the broker. At a secure broker
(`registrations`) each device then speaks under its own identity, with its own token
(`bridge.secure`), so the broker's policy applies to it too; equal persistent queries share a
subscription only within one identity, whose grants decide what it may see.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter, deque
from dataclasses import dataclass, field

from ksp.codes import Status, Tx
from ksp.errors import NoSparqlEquivalent
from ksp.model import Options, Request, Response
from ksp.secure import SealerTable
from ksp.service import Channel, Service
from ksp.session import KPIdentity
from ksp.terms import DEFAULT_GRAPH, Var
from ksp.sparql.render import render, render_term, solutions_query
from ksp.sparql.results import from_results_json
from sib import (AccessPolicy, Authenticator, Journal, Metrics, Pattern, RequestError,
                 TrackedChannel, check_request, results_of)
from sib.engine import (Cascade, Group, Groups, OpKey, Operation, Operations, Restoring,
                        Rules, Visit, indication, sees)
from sib.options import apply_keywords
from ksp.ratelog import RateLimitedLog

from .broker import Broker, BrokerError
from .options import BridgeOptions
from .screen import Screen
from .secure import Registrations
from .subscriber import Subscriber, Subscription

log = logging.getLogger("ksp.bridge")
#: Lines a peer can set off, one per kind and minute (`ksp.ratelog`).
peer_log = RateLimitedLog(log, time.monotonic)

__all__ = ["Bridge", "BridgeOptions"]


@dataclass(eq=False, kw_only=True)
class _Shared(Group):
    """One broker subscription: its solutions query, its rows, the persistent operations on it
    (`members`: queries, each with the result it was last sent, and rules)."""

    text: str
    names: list[str]
    ready: asyncio.Future  # done once the broker has made the subscription
    identity: str | None = None  # whom it was made for at a secure broker
    triples: tuple = ()  # its triple patterns (`bridge.screen`)
    sub: Subscription | None = None
    rows: Counter = field(default_factory=Counter)  # a binding's JSON -> how many
    row_of: dict = field(default_factory=dict)  # a binding's JSON -> its row of KSP terms

    def apply(self, added: dict, removed: dict, whole: bool) -> None:
        if whole:  # a first notification: the whole result, in place of what was kept
            self.rows.clear()
            self.row_of.clear()
        for results, sign in ((removed, -1), (added, 1)):
            for b in ((results or {}).get("results") or {}).get("bindings") or ():
                key = json.dumps(b, sort_keys=True)
                if key not in self.row_of:  # each distinct row read once
                    self.row_of[key] = from_results_json(
                        {"head": {"vars": self.names}, "results": {"bindings": [b]}},
                        names=self.names).rows[0]
                self.rows[key] += sign
                if self.rows[key] <= 0:
                    del self.rows[key], self.row_of[key]

    def result_for(self, request: Request):
        rows = [self.row_of[k] for k, n in self.rows.items() for _ in range(n)]
        return results_of(request, rows)


class Bridge(Service):
    def __init__(self, broker: Broker, subscribe_url: str | None = None, *,
                 options: BridgeOptions = BridgeOptions(), journal: Journal | None = None,
                 access: AccessPolicy | None = None,
                 registrations: Registrations | None = None,
                 anonymous_identity: str | None = None, auth_options: dict | None = None,
                 metrics: Metrics | None = None, **settings) -> None:
        """`subscribe_url`: the broker's SE Protocol endpoint (ws://HOST:9000/subscribe);
        without it persistent queries are answered INVALID_TRANSACTION_TYPE. `options`: its
        caps and pace of reconnection (`BridgeOptions`); `settings`: any of their fields by
        name, over theirs. `journal`: the SIB's, keeping the persistent operations of durable
        channels (UDP) across a restart of the bridge (`restore`). `access`: the SIB's access
        policy, applied before anything is forwarded (None: open). `registrations`: a secure
        broker's registrations and tokens, one identity per configured KP (its `id`);
        `anonymous_identity` is whom anonymous devices speak as there (None: they are refused).
        `metrics`: where the bridge counts (`ksp-bridge --metrics-port`)."""
        options, = apply_keywords("Bridge", settings, options)
        self.options = options
        self.broker = broker
        self.subscriber = None if subscribe_url is None else Subscriber(
            subscribe_url, self._ended, timeout=broker.timeout,
            authorization=broker.authorization, backoff=options.backoff,
            max_backoff=options.max_backoff, ssl=broker.ssl)
        self.access = access or AccessPolicy.open()
        #: What the transports ask about CREDENTIALS before their duplicate caches, and the
        #: sealed mode's state per KP: the SIB's (`sib.auth`, `ksp.secure`).
        self.authenticator = Authenticator(self.access, **(auth_options or {}))
        self.sealers = SealerTable(lambda kp_id: self.access.key_of(kp_id), time.time,
                                   state=journal)
        self.registrations = registrations
        self.anonymous_identity = anonymous_identity
        self.max_queued = options.max_queued
        self.max_subscriptions = options.max_subscriptions
        self.rule_firing_limit = options.rule_firing_limit
        self.cascade_limit = options.cascade_limit
        self.journal = journal
        #: By key, within `max_persistent_per_kp` per KP and `max_persistent` in all, as in
        #: the SIB (`sib.engine.Operations`).
        self.ops: Operations[Operation] = Operations(
            max_per_kp=options.max_persistent_per_kp, max_all=options.max_persistent,
            holder="the bridge")
        #: The broker subscriptions, by (identity, query text), as the SIB's query groups.
        self._shared: Groups[tuple, _Shared] = Groups()
        self._screen = Screen()  # the triple patterns of `_shared`'s subscriptions
        self.flushes_skipped = 0  # updates that could not reach a subscription (stats)
        self._joining = 0  # operations past the caps, waiting for their broker subscription
        self._waiting: dict[KPIdentity, deque] = {}  # a KP's requests, while its worker runs
        self._workers: dict[KPIdentity, asyncio.Task] = {}
        self._rules: Rules[Operation] = Rules()  # by number, in registration order
        self._pending_rules: set[int] = set()  # rules whose solutions may have changed
        self._cascade_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task] = set()
        self._restoring: asyncio.Task | None = None
        self.rule_firings = 0  # (stats)
        self.queued = 0  # requests waiting for their KP's earlier ones, all KPs
        self._running = False
        self.forwarded = 0  # requests answered through the broker (stats)
        self.broker_errors: Counter = Counter()  # KSP status name -> requests the broker failed
        self._last_ind: float | None = None
        self.metrics = metrics or Metrics()
        self._register_metrics(self.metrics)

    def _register_metrics(self, m: Metrics) -> None:
        """The bridge's own figures beside the SIB's names it shares (ksp_requests_total,
        ksp_limit_exceeded_total, ksp_indications_total, ksp_update_latency_seconds,
        ksp_notification_latency_seconds)."""
        sub = self.subscriber
        m.gauges.update({
            "ksp_bridge_queued": ("Requests waiting for their device's earlier ones.",
                                  lambda: self.queued),
            "ksp_bridge_persistent_queries": ("Persistent queries bridged.",
                                              lambda: len(self.ops)),
            "ksp_bridge_broker_subscriptions": ("SE Protocol subscriptions at the broker.",
                                                lambda: len(self._shared)),
            "ksp_bridge_broker_socket_up": (
                "1 while the WebSocket to the broker is open with every subscription on it.",
                lambda: 1 if sub is not None and sub.up.is_set() else 0)})
        m.counters.update({
            "ksp_bridge_forwarded_total": ("Requests answered through the broker.",
                                           lambda: self.forwarded),
            "ksp_bridge_broker_notifications_total": (
                "Notifications read from the broker after the first of each subscription.",
                lambda: 0 if sub is None else sub.notifications),
            "ksp_bridge_rule_firings_total": (
                "Rules fired: their update sent to the broker.", lambda: self.rule_firings),
            "ksp_bridge_broker_reconnects_total": (
                "Times the WebSocket to the broker was made again after it dropped.",
                lambda: 0 if sub is None else sub.reconnects),
            "ksp_bridge_broker_registrations_total": (
                "Client registrations made at a secure broker (one per identity, kept).",
                lambda: 0 if self.registrations is None else self.registrations.registered),
            "ksp_bridge_broker_tokens_total": (
                "Tokens obtained from a secure broker (each renewed before it expires).",
                lambda: 0 if self.registrations is None else self.registrations.tokens),
            "ksp_password_verifications_total": (
                "Passwords checked (scrypt), off the request path.",
                lambda: self.authenticator.verified),
            "ksp_credentials_denied_total": (
                "Requests refused by the transports for their CREDENTIALS (0x08).",
                lambda: self.authenticator.denied)})
        m.labelled["ksp_bridge_broker_errors_total"] = (
            "Requests the broker did not carry out, by the KSP status the device got.",
            "status", lambda: self.broker_errors)
        for kind, histogram in self.broker.latency.items():
            m.histograms[f"ksp_bridge_broker_{kind}_seconds"] = (
                f"From sending a {kind} to the broker to its whole answer (2xx only).",
                histogram)

    # -- Service ----------------------------------------------------------------------------

    def submit(self, request: Request, channel: Channel) -> None:
        if not self._running:
            raise RuntimeError("start the bridge first: await Bridge(...).start()")
        self.metrics.requests[request.tx.name] += 1
        if self.queued >= self.max_queued:
            self.metrics.limited += 1
            channel.respond(Response(request.tid, Status.LIMIT_EXCEEDED))
            return
        self.queued += 1
        kp = channel.kp
        self._waiting.setdefault(kp, deque()).append((request, channel))
        if kp not in self._workers:
            self._workers[kp] = asyncio.create_task(self._work(kp))

    def sizes(self) -> dict[str, int]:
        """How much the bridge holds (for soak benchmarks): persistent operations, broker
        subscriptions, the subscriber's spuids, the screen's triple patterns."""
        return {"operations": len(self.ops), "subscriptions": len(self._shared),
                "spuids": 0 if self.subscriber is None else self.subscriber.spuids,
                "patterns": len(self._screen)}

    def set_access(self, access: AccessPolicy) -> int:
        """Put `access` in force (a reloaded configuration, SIGHUP): the transports' verdicts
        from now on, and every persistent operation it no longer allows ended with an
        ACCESS_DENIED IND, as the SIB does. Returns how many were ended."""
        self.access = self.authenticator.policy = access
        ended = 0
        for key, exc in self.ops.disallowed(access):
            log.warning("%s tid %d: ended by the new access policy: %s", access.who(key[0]),
                        key[1], exc)
            self.metrics.denied += 1
            self._end(key, exc.status)
            ended += 1
        return ended

    def kp_unreachable(self, kp: KPIdentity, tid: int) -> None:
        """IND retries ran out: the KP's persistent queries end, as in the SIB."""
        peer_log.warning("unreachable",
                         "%s unreachable (no ACK for tid %d): dropping its persistent queries", kp,
                         tid)
        self._drop_kp(kp)

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> "Bridge":
        self._running = True
        return self

    async def close(self) -> None:
        """Answer what is queued, end every persistent operation with a TERMINATED IND but
        those the journal keeps (as the SIB does at shutdown), then stop."""
        if not self._running:
            return
        if self._restoring is not None:  # what is still waiting stays in the journal
            self._restoring.cancel()
            await asyncio.gather(self._restoring, return_exceptions=True)
        while self._workers or self._tasks:
            await asyncio.gather(*self._workers.values(), *self._tasks,
                                 return_exceptions=True)
        self._running = False
        for key in self.ops.closing():  # those the journal keeps resume after the restart
            self._end(key, Status.TERMINATED)
        if self.subscriber is not None:
            await self.subscriber.close()
        if self.registrations is not None:
            await self.registrations.close()

    async def _work(self, kp: KPIdentity) -> None:
        """One KP's requests, in order; the worker ends when none is left."""
        waiting = self._waiting[kp]
        try:
            while waiting:
                request, channel = waiting.popleft()
                self.queued -= 1
                try:
                    response = await self.answer(request, channel)
                except Exception:  # a bug: said as one, and the bridge goes on
                    peer_log.exception("request failed", "%s tid %d failed", request.tx.name,
                                       request.tid)
                    response = Response(request.tid, Status.INTERNAL_ERROR)
                channel.respond(response)
                if request.tx.persistent and response.status == Status.OK:
                    member = self.ops.get((channel.kp, request.tid))
                    if member is not None:
                        member.channel.save()  # journaled: the KP has its first result
                if self._pending_rules:  # a new rule's first visit, after its RES
                    try:
                        await self._cascade()
                    except Exception:
                        peer_log.exception("rules failed", "after %s tid %d: the rules failed",
                                           request.tx.name, request.tid)
        finally:
            del self._waiting[kp], self._workers[kp]

    # -- forwarding -------------------------------------------------------------------------

    async def answer(self, request: Request, channel: Channel) -> Response:
        """The RES a SIB would give `request`, from the broker."""
        tx = request.tx
        try:
            check_request(request)
            kp = channel.kp
            self.access.check_from(kp.kp_id, request)
            if tx is Tx.TERMINATE:
                return await self._terminate(channel.kp, request.tid)
            if tx is Tx.RESET:
                self._drop_kp(channel.kp)
                return Response(request.tid)
            if tx.persistent:
                if self.subscriber is None:
                    return Response(request.tid, Status.INVALID_TRANSACTION_TYPE)
                return await self._persist(request, channel)
            identity = self._identity(kp)
            if tx.is_query:
                return Response(request.tid, Status.OK, await self._query(request, identity))
            if tx.is_management:
                await self._check_graphs(request, identity)
            started = time.perf_counter()
            await self._at_broker(self.broker.update, render(request, union=True), identity)
            self.forwarded += 1
            if self._shared:
                if self._may_change(request):
                    await self._settle(started, identity)
                else:
                    self.flushes_skipped += 1
            self.metrics.update_latency.observe(time.perf_counter() - started)
            return Response(request.tid)
        except RequestError as exc:
            if exc.status is Status.LIMIT_EXCEEDED:
                self.metrics.limited += 1
            elif exc.status is Status.ACCESS_DENIED:
                self.metrics.denied += 1
                peer_log.info("refused", "%s %s tid %d: %s", self.access.who(channel.kp), tx.name,
                              request.tid, exc)
            return Response(request.tid, exc.status)
        except NoSparqlEquivalent as exc:  # valid KSP that one SPARQL request cannot say
            peer_log.info("undecodable", "%s tid %d: %s", tx.name, request.tid, exc)
            return Response(request.tid, Status.INVALID_DATA_FORMAT)
        except BrokerError as exc:
            peer_log.warning("broker error", "%s tid %d: the broker: %s", tx.name, request.tid, exc)
            self.broker_errors[exc.status.name] += 1
            return Response(request.tid, exc.status)

    def _may_change(self, request: Request) -> bool:
        """Whether `request` can change a subscription's result (`bridge.screen`): if not,
        there are no notifications of it to wait for."""
        written = (*(request.insert or ()), *(request.delete or ()))
        return request.tx.is_management or not written or self._screen.may_touch(written)

    def _identity(self, kp: KPIdentity) -> str | None:
        """Whom `kp` speaks as at a secure broker (None: the broker is not secure)."""
        if self.registrations is None:
            return None
        entry = None if kp.kp_id is None else self.access.kps.get(kp.kp_id)
        if entry is not None:
            return entry.name
        if self.anonymous_identity is None:
            raise RequestError(Status.ACCESS_DENIED, "anonymous devices have no identity at "
                                                     "the broker")
        return self.anonymous_identity

    async def _authorization(self, identity: str | None) -> str | None:
        if identity is None or self.registrations is None:
            return None
        return await self.registrations.authorization(identity)

    async def _at_broker(self, send, text: str, identity: str | None):
        """`send(text, authorization)` as `identity`; a token the broker refuses (401) is
        replaced once."""
        authorization = await self._authorization(identity)
        try:
            return await send(text, authorization)
        except BrokerError as exc:
            if authorization is None or exc.http_status != 401:
                raise
            peer_log.info("token refused",
                          "the broker refused %r's token (%s); asking for a new one", identity,
                          exc.reason)
            self.registrations.expire(identity, authorization)
            return await send(text, await self._authorization(identity))

    async def _query(self, request: Request, identity: str | None = None):
        """SELECT and ASK ask the broker as they are; a CONSTRUCT asks for the solutions of
        every variable and builds its triples here, as the SIB does."""
        base = request.tx.base
        if base is Tx.ASK:
            asked = request
        else:
            asked = _solutions_query(request)
        results = await self._at_broker(self.broker.query, render(asked, union=True), identity)
        self.forwarded += 1
        if base is Tx.ASK:
            return from_results_json(results)
        names = [f"v{k}" for k in range(asked.projection or 0)]  # none: `?_`, empty rows
        return results_of(request, list(from_results_json(results, names=names).rows))

    async def _check_graphs(self, request: Request, identity: str | None = None) -> None:
        """The SIB's graph statuses, which SPARQL Update has no words for (a broker answers a
        CREATE of an existing graph with a bare 400): which of the named graphs exist, asked
        first. A graph exists once created or written to, as in the SIB; a broker that forgets
        empty graphs makes a CREATE of one succeed twice."""
        tx = request.tx
        if tx is Tx.CREATE:
            names = list(request.graphs or ())
            if len(set(names)) != len(names):
                raise RequestError(Status.GRAPH_EXISTS, "CREATE of a graph twice")
        elif tx is Tx.DROP:
            names = list(dict.fromkeys(request.graphs or ()))
        else:
            names = [request.source]
        names = [g for g in names if g != DEFAULT_GRAPH]  # it always exists
        if not names:
            return
        values = " ".join(render_term(g) for g in names)
        found = await self._at_broker(self.broker.query, f"SELECT ?g WHERE {{ VALUES ?g "
                                      f"{{ {values} }} GRAPH ?g {{ }} }}", identity)
        existing = {b["g"]["value"] for b in found.get("results", {}).get("bindings", ())
                    if isinstance(b.get("g"), dict)}
        if tx is Tx.CREATE and existing:
            raise RequestError(Status.GRAPH_EXISTS, "CREATE of a graph that exists")
        missing = [g for g in names if g not in existing]
        if tx is not Tx.CREATE and missing:
            raise RequestError(Status.NO_SUCH_GRAPH, f"{tx.name} of {missing[0]}: no such graph")

    # -- persistent queries and rules -------------------------------------------------------

    async def _persist(self, request: Request, channel: Channel) -> Response:
        """A persistent query (its RES has the current result) or a rule (right after its RES,
        as in the SIB, it fires if its pattern has solutions)."""
        kp, key = channel.kp, (channel.kp, request.tid)
        if key in self.ops:  # the TID again: the old operation gives way, as in the SIB
            self._end(key, None)
        member = await self._register(request, channel)
        self.forwarded += 1
        if self.journal is not None and member.channel.journal is not None:
            self.journal.add(kp, request.tid, channel.transport, request)
        if request.tx.is_query:
            member.last = member.group.result_for(request)
            return Response(request.tid, Status.OK, member.last)
        self._pending_rules.add(member.number)  # its first visit follows its RES (`_work`)
        return Response(request.tid)

    async def _register(self, request: Request, channel: Channel) -> Operation:
        """Within the caps (those still waiting for their subscription count): a new
        operation, or one restored after a restart past a cap lowered meanwhile."""
        key = (channel.kp, request.tid)
        self.ops.admit(key, waiting=self._joining)
        self._joining += 1
        try:
            shared = await self._subscription(_solutions_query(request),
                                              self._identity(channel.kp))
        finally:
            self._joining -= 1
        member = Operation(kp=channel.kp, tid=request.tid, request=request,
                           channel=TrackedChannel(channel, self.journal), group=shared)
        self._shared.join(shared, key, member)
        self.ops.add(key, member)
        if not request.tx.is_query:
            member.number = self._rules.number()
            self._rules.add(member.number, member)
        return member

    async def restore(self, server) -> int:
        """After a restart: each journaled persistent operation on its channel of `server`
        again, as the SIB restores them (`SibCore.restore`): a query sends an IND with its
        current result unless the KP had ACKed that very result; a rule takes its current
        solutions as seen. Those the broker cannot be asked about now are tried again in the
        background, with back-off. Returns how many were restored now."""
        if self.journal is None:
            return 0
        waiting = []
        for saved in list(self.journal):
            if getattr(server, saved.transport, None) is None:
                log.warning("%s tid %d: its transport %s is off; forgotten", saved.kp,
                            saved.tid, saved.transport)
                self.journal.remove(saved.kp, saved.tid)
                continue
            waiting.append((saved, server.channel(saved.transport, saved.kp, saved.tid)))
        restored = await self._restore(waiting)
        if waiting:
            log.info("%d persistent operations wait for the broker", len(waiting))
            self._restoring = asyncio.create_task(self._restore_later(waiting))
        return restored

    async def _restore(self, waiting: list) -> int:
        """Restore what it can of `waiting` (removing those), stopping at the first the broker
        cannot be reached for."""
        restored = 0
        while waiting:
            saved, channel = waiting[0]
            request = saved.request
            restoring = Restoring(saved, self.journal)
            restoring.reopen(channel)
            try:
                check_request(request)
                restoring.check(self.access)  # the policy in force now
                if self.subscriber is None:
                    raise RequestError(Status.INVALID_TRANSACTION_TYPE,
                                       "no broker subscribe endpoint now")
                member = await self._register(request, channel)
            except BrokerError as exc:
                if exc.status is Status.INTERNAL_ERROR:
                    log.info("restoring: the broker: %s; trying again later", exc)
                    return restored
                log.warning("%s tid %d: not restored: %s", saved.kp, saved.tid, exc)
                restoring.refuse(exc.status, channel)
            except RequestError as exc:
                restoring.refuse(exc.status, channel)
            else:
                restored += 1
                if member.number is not None:
                    now = frozenset(member.group.rows)
                else:
                    now = member.group.result_for(request)
                restoring.resume(now, lambda ind: self._indicate(member.channel, ind), member)
                log.info("%s tid %d: %s restored", saved.kp, saved.tid, request.tx.name)
            waiting.pop(0)
        return restored

    async def _restore_later(self, waiting: list) -> None:
        delay = self.subscriber.backoff
        while waiting:
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.subscriber.max_backoff)
            await self._restore(waiting)

    async def _subscription(self, asked: Request, identity: str | None = None) -> _Shared:
        """The broker subscription to `asked`'s solutions for `identity`: the one there is,
        else a new one (other KPs asking the same meanwhile wait for it)."""
        text = render(asked, union=True)
        key = (identity, text)
        shared = self._shared.get(key)
        if shared is None:
            if len(self._shared) >= self.max_subscriptions:
                raise RequestError(Status.LIMIT_EXCEEDED, "broker subscriptions")
            shared = _Shared(
                text=text, names=[f"v{k}" for k in range(asked.projection or 0)],
                ready=asyncio.get_running_loop().create_future(), identity=identity,
                triples=Pattern(asked).triples)
            self._shared.add(key, shared)
            self._screen.add(shared.triples)
            try:
                shared.sub = await self.subscriber.subscribe(
                    text, lambda added, removed, whole: self._changed(shared, added, removed,
                                                                      whole),
                    None if identity is None else lambda: self._authorization(identity))
            except BaseException as exc:
                self._shared.discard(key, shared)
                self._screen.remove(shared.triples)
                shared.ready.set_exception(exc)
                shared.ready.exception()  # said to whoever waits, not to the loop's log
                raise
            shared.ready.set_result(None)
        else:
            await asyncio.shield(shared.ready)
        if self._shared.get(key) is not shared:  # its last member ended while it was made
            return await self._subscription(asked, identity)
        return shared

    def _changed(self, shared: _Shared, added: dict, removed: dict, whole: bool) -> None:
        shared.apply(added, removed, whole)
        results: dict = {}  # members of one subscription differ at most in form and template
        for member in list(shared.members.values()):
            if member.number is not None:  # fired, if its solutions changed, by the cascade
                self._pending_rules.add(member.number)
                continue
            form = (member.request.tx.base, member.request.template)
            result = results.get(form)
            if result is None:
                result = results[form] = shared.result_for(member.request)
            if sees(member, result):
                self._indicate(member.channel, indication(member.request.tid, result))
        if self._pending_rules and not self._cascade_lock.locked():
            # a change from elsewhere (another client of the broker, a reconnection): the
            # cascade runs on its own; after a device's update, `_settle` runs it
            self._background(self._cascade())

    async def _cascade(self) -> None:
        """Fire the rules whose solutions changed, as the SIB's cascade does: the same
        `sib.engine.Cascade` (its order and its limits) driven through the broker. A firing is
        the rule's plain update sent to the broker, and the notifications it causes (read by
        `Subscriber.flush`) mark the rules it reached; a rule past a limit ends with a
        TERMINATED IND."""
        async with self._cascade_lock:
            cascade = Cascade(self._pending_rules, rule_firing_limit=self.rule_firing_limit,
                              cascade_limit=self.cascade_limit)
            while (rid := cascade.next()) is not None:
                if await self._fire(rid, cascade):
                    cascade.spread(rid)

    async def _fire(self, rid: int, cascade: Cascade) -> bool:
        """One visit of a rule in a cascade; True if it fired."""
        member = self._rules.get(rid)
        if member is None:
            return False
        before = member.last
        visit = cascade.visit(rid, member, frozenset(member.group.rows))
        if visit is Visit.SKIP:
            return False
        key = (member.channel.kp, member.request.tid)
        if visit is Visit.OVER_LIMIT:
            peer_log.warning("cascade limit", "rule %d of %s ended: cascade limit", key[1], key[0])
            self._end(key, Status.TERMINATED)
            return False
        self.rule_firings += 1
        try:
            await self._at_broker(self.broker.update, render(
                member.request._replace(tx=member.request.tx.base), union=True),
                member.group.identity)
        except BrokerError as exc:
            self.broker_errors[exc.status.name] += 1
            if exc.status is Status.INTERNAL_ERROR:  # unreachable: it fires when it is back
                peer_log.warning("rule not fired", "rule %d of %s not fired: %s", key[1], key[0],
                                 exc)
                member.last = before
            else:  # refused: as a SIB ends a rule whose write fails
                peer_log.warning("rule refused", "rule %d of %s ended: the broker refused it: %s",
                                 key[1], key[0], exc)
                self._end(key, exc.status)
            return False
        await self._flush(member.group.identity)
        return True

    def _ended(self, sub: Subscription, status: Status) -> None:
        """The broker ended a subscription: its persistent queries end with an IND of
        `status`."""
        for key, member in list(self.ops.items()):
            if member.group.sub is sub:
                self._end(key, status)

    def _indicate(self, channel: Channel, ind: Response) -> None:
        self.metrics.indicated()
        self._last_ind = time.perf_counter()
        channel.indicate(ind)

    async def _flush(self, identity: str | None = None) -> None:
        try:
            await self.subscriber.flush(
                None if identity is None else lambda: self._authorization(identity))
        except BrokerError as exc:
            peer_log.warning("after an update", "after an update: %s", exc)

    async def _settle(self, started: float, identity: str | None = None) -> None:
        """The update's notifications read, the rules they reach fired, and the INDs of both
        sent, before the update's RES."""
        self._last_ind = None
        await self._flush(identity)
        await self._cascade()
        if self._last_ind is not None:  # the INDs it caused (another device's, at times)
            self.metrics.notification_latency.observe(self._last_ind - started)

    async def _terminate(self, kp: KPIdentity, tid: int) -> Response:
        if (kp, tid) not in self.ops:
            raise RequestError(Status.UNKNOWN_TRANSACTION, f"no persistent transaction {tid}")
        self._end((kp, tid), None)
        return Response(tid)

    def _drop_kp(self, kp: KPIdentity) -> None:
        for key in self.ops.keys_of(kp):
            self._end(key, None)

    def _end(self, key: OpKey, status: Status | None) -> None:
        """Forget a persistent query: with a last IND of `status`, or silently (TERMINATE,
        RESET); the subscription goes with its last member."""
        member = self.ops.pop(key)
        if self.journal is not None:
            self.journal.remove(*key)
        if status is not None:  # a last IND: the session delivers it, then forgets
            self._indicate(member.channel, Response(key[1], status, indication=True))
        else:
            member.channel.end()
        if member.number is not None:
            self._rules.pop(member.number)
        shared = member.group
        if self._shared.leave((shared.identity, shared.text), shared, key):
            self._screen.remove(shared.triples)
            self._background(self.subscriber.unsubscribe(shared.sub))

    def _background(self, work) -> None:
        """Work the bridge does on its own, awaited at `close`; a failure is logged."""
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            peer_log.error("work failed", "bridge work failed", exc_info=task.exception())


def _solutions_query(request: Request) -> Request:
    """What the broker is asked for a query: a SELECT as it is (persistent or not); for a
    CONSTRUCT or ASK, the solutions of every variable (`solutions_query`), which the bridge
    turns into the result as the SIB does."""
    if request.tx.base is Tx.SELECT:
        return request._replace(tx=Tx.SELECT)
    return solutions_query(request)
