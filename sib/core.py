"""The SIB core: executes one request at a time against the store and runs the persistent
operations after every change. Three roles, three modules: this one runs requests (checks,
dispatch, the RES, restoring journaled operations, a new access policy); `sib.registry` holds
the persistent operations; `sib.propagation` works out what a write sets off. Synchronous and single-threaded by design — the scheduler
(`sib.service`) feeds it in arrival order, so every persistent operation is checked against
the same snapshot after each update, and nothing interleaves with a request.

After a change (an update, a graph operation, a new rule):

1. **Rules cascade.** Rules are visited in passes, in registration order. A visited rule's
   pattern is evaluated; if its solution set changed and is not empty, it fires (its templates
   over all its solutions, one atomic write). A firing's delta marks the rules it can affect:
   later ones are visited in this pass, earlier ones (and itself) in the next. The cascade ends
   when a pass fires nothing. **Cascade protection**: a rule may fire at most
   `rule_firing_limit` times per cascade, and a cascade at most `cascade_limit` times in all;
   the rule that would exceed either is ended with a TERMINATED IND instead of firing, and the
   cascade goes on without it.
2. **Subscriptions.** Each query group the changed quads (of the update and every firing) can
   affect is evaluated once against the final state; when its result differs from the last one
   sent, each member gets an IND with the full result.

Which rules and groups a write "can affect" comes from the pattern index, screened with the
changed quad bound (`sib.screen`; removed quads against the state before the write, added ones
after), in smart mode, or is simply all of them (naive mode, SEPA's broker: re-evaluate
everything after every update). The two send identical INDs; the naive mode is the oracle for
that and the benchmark baseline.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

from ksp.codes import Status, Tx
from ksp.model import Request, Response
from ksp.session import KPIdentity
from ksp.terms import IRI, Literal
from ksp.ratelog import RateLimitedLog

from .access import AccessPolicy
from .budget import Budgets, Deadline, timed, within
from .engine import Restoring
from .errors import RequestError
from .journal import Journal, Saved, TrackedChannel
from .metrics import Metrics
from .oxterms import to_ox
from .pattern import Pattern
from .persistent import Channel
from .propagation import Propagation
from .query import evaluate, evaluate_once
from .registry import Registry
from .simple import plan
from .store import QuadStore
from .updates import Fresh, data_delta, fresh_labels, management, template_delta
from .validate import check_request

log = logging.getLogger("ksp.sib")
_OK = Status.OK
#: Each transaction type's name, as the request counters have it (`Tx.name` is a property).
_NAMES = {tx: tx.name for tx in Tx}
#: Lines a peer can set off, one per kind and minute (`ksp.ratelog`).
peer_log = RateLimitedLog(log, time.monotonic)


class SibCore:
    """Runs requests one at a time (see the module docstring): `registry` holds the
    persistent operations, `propagation` runs what each write sets off."""

    def __init__(self, store: QuadStore, *, smart: bool = True, rule_firing_limit: int = 16,
                 cascade_limit: int = 1024, fresh: Fresh | None = None,
                 access: AccessPolicy | None = None, max_persistent_per_kp: int | None = None,
                 max_persistent: int | None = None, max_quads: int | None = None,
                 journal: Journal | None = None, metrics: Metrics | None = None,
                 budgets: Budgets | None = None) -> None:
        self.store = store
        #: How long evaluations may take (`sib.budget`; None: the defaults, 5 s each).
        self.budgets = budgets if budgets is not None else Budgets()
        self.journal = journal
        self.metrics = metrics or Metrics()
        self.registry = Registry(store, access=access or AccessPolicy.open(), journal=journal,
                                 metrics=self.metrics,
                                 max_persistent_per_kp=max_persistent_per_kp,
                                 max_persistent=max_persistent)
        self.propagation = Propagation(store, self.registry, fresh or fresh_labels(),
                                       smart=smart, rule_firing_limit=rule_firing_limit,
                                       cascade_limit=cascade_limit, max_quads=max_quads,
                                       budget=self.budgets.persistent)
        #: Called with each new policy, after the KSP operations are re-checked: other holders
        #: of persistent operations (the SEPA gate's subscriptions) end what it no longer
        #: allows, and return how many.
        self.access_checks: list[Callable[[AccessPolicy], int]] = []

    # -- public ---------------------------------------------------------------------------

    @property
    def access(self) -> AccessPolicy:
        """The access policy in force (`set_access` replaces it)."""
        return self.registry.access

    @access.setter
    def access(self, access: AccessPolicy) -> None:
        self.registry.access = access

    @property
    def persistent_count(self) -> int:
        return len(self.registry)

    @property
    def smart(self) -> bool:
        return self.propagation.smart

    @property
    def evaluations(self) -> int:
        """Pattern evaluations done for persistent operations (stats)."""
        return self.propagation.evaluations

    @property
    def evaluated_together(self) -> int:
        """Query groups evaluated with same-shape ones (stats)."""
        return self.propagation.evaluated_together

    def handle(self, request: Request, channel: Channel, since: float | None = None) -> None:
        """Execute `request`, answer it on `channel`, then run the persistent operations.
        `since`: when it arrived (perf_counter), for the latency histograms."""
        kp = channel.kp
        after = None
        self.propagation.begin()
        inds_before = self.metrics.indications
        since = time.perf_counter() if since is None else since
        metrics = self.metrics
        metrics.requests[request.tx.name] += 1
        try:
            check_request(request)
            self.access.check_from(kp.kp_id, request)
            response, after = self._dispatch(request, channel, kp)
        except Exception as exc:
            response, after = self._refused(request, kp, exc), None
        channel.respond(response)
        if request.tx.persistent and response.status == Status.OK:
            op = self.registry.get((kp, request.tid))
            if op is not None:
                op.channel.save()  # journaled: the KP has its first result
        is_update = not (request.tx.is_query or request.tx in (Tx.TERMINATE, Tx.RESET))
        if is_update:
            metrics.update_latency.observe(time.perf_counter() - since)
        if after is not None:
            try:
                self.propagation.propagate(*after)
            except Exception:  # the request itself is done and answered
                peer_log.exception("after a request", "persistent operations after %s tid %d",
                                   request.tx.name, request.tid)
        if is_update and self.metrics.indications != inds_before:
            metrics.notification_latency.observe(time.perf_counter() - since)

    def budget(self, kind: str, kp: KPIdentity | None) -> float | None:
        """The `kind` time budget (`query`, `update`) of `kp`: its access entry's if it sets
        one, else `budgets`'."""
        return self.access.budget(kp.kp_id if kp is not None else None, kind,
                                  getattr(self.budgets, kind))

    def read(self, request: Request, kp: KPIdentity, payload: int | None = None) -> Response:
        """The RES of a one-shot query (SELECT, ASK, CONSTRUCT), for a reader thread
        (`sib.readers`): it reads the store and the policy and changes nothing, under the query
        budget in force there. `payload`: the most bytes the transport carries in one RES."""
        self.metrics.requests[request.tx.name] += 1
        try:
            check_request(request)
            self.access.check_from(kp.kp_id, request)
            return Response(request.tid, Status.OK, evaluate_once(
                self.store, request, Pattern(request), payload))
        except Exception as exc:
            return self._refused(request, kp, exc)

    def read_at_once(self, request: Request, kp: KPIdentity, payload: int | None = None
                     ) -> Response | None:
        """The RES of a simple one-shot query (`sib.simple`: one triple pattern, a few rows),
        answered on the calling thread; None for any other, and for one the access policy
        refuses: `read` answers those, on a reader thread. (A simple read passes
        `check_request` by its shape.)"""
        simple = plan(request)
        if simple is None:
            return None
        try:
            self.registry.access.check_from(kp.kp_id, request)
            result = simple.answer(request, self.store, payload)
        except Exception:  # refused, or not evaluable so: `read` says how
            return None
        if result is None:
            return None
        self.metrics.requests[_NAMES[request.tx]] += 1
        return Response(request.tid, _OK, result)

    def _refused(self, request: Request, kp: KPIdentity, exc: Exception) -> Response:
        """The RES of a request that raised `exc` (a bug or an I/O error: INTERNAL_ERROR; the
        request changed nothing it reports)."""
        metrics = self.metrics
        if not isinstance(exc, RequestError):
            peer_log.error("request failed", "%s %s tid %d failed", self.access.who(kp),
                           request.tx.name, request.tid, exc_info=exc)
            return Response(request.tid, Status.INTERNAL_ERROR)
        peer_log.info(("refused", exc.status), "%s %s tid %d: %s (%s)", self.access.who(kp),
                      request.tx.name, request.tid, exc.status.name, exc)
        if exc.status == Status.ACCESS_DENIED:
            metrics.denied += 1
        elif exc.status == Status.LIMIT_EXCEEDED:
            metrics.limited += 1
        return Response(request.tid, exc.status)

    def drop_kp(self, kp: KPIdentity) -> None:
        """Forget every persistent operation of `kp` (RESET)."""
        self.registry.drop_kp(kp)

    def give_up(self, kp: KPIdentity) -> int:
        """`kp` became unreachable: end its persistent operations (`Registry.give_up`)."""
        return self.registry.give_up(kp)

    def terminate_all(self) -> None:
        """The SIB shuts down (`Registry.terminate_all`)."""
        self.registry.terminate_all()

    def restore(self, saved: Saved, channel: Channel) -> bool:
        """Re-register a journaled persistent operation after a restart, without a RES: a
        query sends an IND when its current result is not the one last sent, or the last IND
        was not known to be ACKed when the SIB stopped; a rule takes its
        current solutions as seen (it does not fire again for a state it already acted on).

        It is checked first against the access policy in force, by its KP ID (the saved copy
        has no password), and against the limits in force: one the policy no longer allows
        ends with an ACCESS_DENIED IND, one past a limit (lowered meanwhile) with
        LIMIT_EXCEEDED. Returns whether it was restored."""
        req, kp = saved.request, saved.kp
        restoring = Restoring(saved, self.journal)
        restoring.reopen(channel)
        tracked = TrackedChannel(channel, self.journal, self.metrics.indicated)
        pattern = Pattern(req)
        rule = None
        try:
            restoring.check(self.access)
            if req.tx.is_query:
                now = self.registry.subscribe(req, tracked, kp, pattern, restored=True).result
            else:
                rule = self.registry.add_rule(req, tracked, kp, pattern, restored=True)
        except RequestError as exc:
            log.warning("%s tid %d: %s not restored: %s", self.access.who(kp), req.tid,
                        req.tx.name, exc)
            if exc.status == Status.ACCESS_DENIED:
                self.metrics.denied += 1
            elif exc.status == Status.LIMIT_EXCEEDED:
                self.metrics.limited += 1
            restoring.refuse(exc.status, tracked)
            return False
        if rule is not None:
            now = frozenset(pattern.solutions(self.store))
        restoring.resume(now, tracked.indicate, rule)
        log.info("%s tid %d: %s restored (%s, endpoint %s)", self.access.who(kp), req.tid,
                 req.tx.name, saved.transport, saved.endpoint)
        return True

    def set_access(self, access: AccessPolicy) -> int:
        """Put `access` in force (a reloaded configuration) and end, with an ACCESS_DENIED
        IND, every persistent operation it does not allow. Returns how many were ended."""
        self.access = access
        ended = 0
        for key, exc in self.registry.ops.disallowed(access):
            log.warning("%s tid %d: ended by the new access policy: %s", access.who(key[0]),
                        key[1], exc)
            self.metrics.denied += 1
            self.registry.terminate(key, exc.status)
            ended += 1
        for check in self.access_checks:
            ended += check(access)
        return ended

    # -- dispatch -------------------------------------------------------------------------

    def _dispatch(self, req: Request, channel: Channel, kp: KPIdentity):
        tx = req.tx
        if tx is Tx.TERMINATE:
            op = self.registry.get((kp, req.tid))
            if op is None:
                raise RequestError(Status.UNKNOWN_TRANSACTION,
                                   f"no persistent transaction {req.tid}")
            self.registry.remove((kp, req.tid)).channel.end()
            return Response(req.tid), None
        if tx is Tx.RESET:
            self.drop_kp(kp)
            return Response(req.tid), None
        if tx.is_data_update:
            rules = self.propagation.write(data_delta(self.store, req, self.propagation.fresh))
            return Response(req.tid), (rules, None)
        if tx.is_management:
            change = management(self.store, req)
            rules = self.propagation.write(change.delta, change.create, change.drop)
            self.registry.end_ops_on_graphs(change.drop)
            return Response(req.tid), (rules, None)
        pattern = Pattern(req)
        budget = self.budget
        if tx.is_query:
            if tx.persistent:
                # Stopped at its budget, not refused after: it is registered by then.
                with within(Deadline(self.budgets.persistent, "the persistent query's first "
                                     "evaluation")):
                    return self.registry.subscribe(req, channel, kp, pattern), None
            with timed(budget("query", kp), "the query"):
                return Response(req.tid, Status.OK, evaluate(self.store, req, pattern)), None
        # pattern updates
        if tx.persistent:
            # Refuse what cannot be evaluated or written, before registering.
            with timed(self.budgets.persistent, "the rule's first evaluation"):
                pattern.solutions(self.store)
            for t in (*(req.delete or ()), *(req.insert or ())):
                for term in t:
                    if isinstance(term, (IRI, Literal)):
                        to_ox(term)
            rule = self.registry.add_rule(req, channel, kp, pattern)
            return Response(req.tid), (set(), rule)
        with timed(budget("update", kp), "the update's WHERE"):
            solutions = pattern.solutions(self.store)
        delta = template_delta(self.store, req, solutions, self.propagation.fresh)
        return Response(req.tid), (self.propagation.write(delta), None)
