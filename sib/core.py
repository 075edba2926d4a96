"""The SIB core: executes one request at a time against the store and runs the persistent
operations after every change. Synchronous and single-threaded by design — the scheduler
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

import heapq
import logging
import time
from collections import Counter
from collections.abc import Iterable

from ksp.codes import Status, Tx
from ksp.model import Request, Response
from ksp.session import KPIdentity
from ksp.terms import IRI, Literal

from .access import AccessPolicy
from .errors import RequestError
from .index import PatternIndex
from .journal import Journal, Saved, TrackedChannel
from .metrics import Metrics
from .oxterms import to_ox
from .pattern import Pattern
from .persistent import Channel, OpKey, QueryGroup, Rule, Subscription, group_key
from .query import evaluate
from .screen import could_use
from .shapes import evaluate_together, shape_of
from .store import Delta, QuadStore
from .updates import Fresh, data_delta, fresh_labels, management, template_delta
from .validate import check_request

log = logging.getLogger("ksp.sib")


class SibCore:
    def __init__(self, store: QuadStore, *, smart: bool = True, rule_firing_limit: int = 16,
                 cascade_limit: int = 1024, fresh: Fresh | None = None,
                 access: AccessPolicy | None = None, max_persistent_per_kp: int | None = None,
                 journal: Journal | None = None, metrics: Metrics | None = None) -> None:
        self.store = store
        self.access = access or AccessPolicy.open()
        self.max_persistent_per_kp = max_persistent_per_kp
        self.journal = journal
        self.metrics = metrics or Metrics()
        self._per_kp: Counter[KPIdentity] = Counter()
        self.smart = smart
        self.rule_firing_limit = rule_firing_limit
        self.cascade_limit = cascade_limit
        self._fresh = fresh or fresh_labels()
        self._groups: dict[object, QueryGroup] = {}
        self._group_by_id: dict[int, QueryGroup] = {}
        self._rules: dict[int, Rule] = {}
        self._ops: dict[OpKey, Subscription | Rule] = {}
        self._group_index = PatternIndex()
        self._rule_index = PatternIndex()
        self._next_id = 0
        # What the writes of the current request (and its cascade) changed and can affect.
        self._changed = False
        self._dirty_groups: set[int] = set()
        self.evaluations = 0  # pattern evaluations done for persistent operations (stats)
        self.evaluated_together = 0  # query groups evaluated with same-shape ones (stats)

    # -- public ---------------------------------------------------------------------------

    @property
    def persistent_count(self) -> int:
        return len(self._ops)

    def handle(self, request: Request, channel: Channel, since: float | None = None) -> None:
        """Execute `request`, answer it on `channel`, then run the persistent operations.
        `since`: when it arrived (perf_counter), for the latency histograms."""
        kp = channel.kp
        after = None
        self._changed = False
        self._dirty_groups.clear()
        inds_before = self.metrics.indications
        since = time.perf_counter() if since is None else since
        metrics = self.metrics
        metrics.requests[request.tx.name] += 1
        try:
            check_request(request)
            if kp.kp_id is not None and request.options.credentials is None:
                self.access.check_sealed(kp.kp_id, request)  # its envelope proved the KP ID
            else:
                self.access.check(request)
            response, after = self._dispatch(request, channel, kp)
        except RequestError as exc:
            log.info("%s %s tid %d: %s (%s)", self.access.who(kp), request.tx.name, request.tid,
                     exc.status.name, exc)
            if exc.status == Status.ACCESS_DENIED:
                metrics.denied += 1
            elif exc.status == Status.LIMIT_EXCEEDED:
                metrics.limited += 1
            response = Response(request.tid, exc.status)
        except Exception:  # a bug or an I/O error: the request changed nothing it reports
            log.exception("%s %s tid %d failed", self.access.who(kp), request.tx.name, request.tid)
            response = Response(request.tid, Status.INTERNAL_ERROR)
            after = None
        channel.respond(response)
        if request.tx.persistent and response.status == Status.OK:
            op = self._ops.get((kp, request.tid))
            if op is not None:
                op.channel.save()  # journaled: the KP has its first result
        is_update = not (request.tx.is_query or request.tx in (Tx.TERMINATE, Tx.RESET))
        if is_update:
            metrics.update_latency.observe(time.perf_counter() - since)
        if after is not None:
            try:
                self._propagate(*after)
            except Exception:  # the request itself is done and answered
                log.exception("persistent operations after %s tid %d", request.tx.name,
                              request.tid)
        if is_update and self.metrics.indications != inds_before:
            metrics.notification_latency.observe(time.perf_counter() - since)

    def drop_kp(self, kp: KPIdentity) -> None:
        """Forget every persistent operation of `kp` (RESET, or the KP became unreachable)."""
        for key in [k for k in self._ops if k[0] == kp]:
            self._remove(key).channel.end()

    def terminate_all(self) -> None:
        """The SIB shuts down: end every persistent operation with a TERMINATED IND, except
        those the journal keeps (they resume after the restart): their state is journaled once
        more, so that what the KPs ACKed by now is not sent again after the restart."""
        for key, op in list(self._ops.items()):
            if self.journal is not None and op.channel.journal is not None:
                op.channel.save()
                continue
            self._terminate(key)

    def restore(self, saved: Saved, channel: Channel) -> None:
        """Re-register a journaled persistent operation after a restart, without a RES: a
        query sends an IND when its current result is not the one last sent, or the last IND
        was not known to be ACKed when the SIB stopped; a rule takes its
        current solutions as seen (it does not fire again for a state it already acted on).

        It is checked first against the access policy in force, by its KP ID (the saved copy
        has no password): one the policy no longer allows ends with an ACCESS_DENIED IND."""
        req, kp = saved.request, saved.kp
        channel.restore(saved.state)  # numbering, endpoint and what the KP has, as they were
        tracked = TrackedChannel(channel, self.journal, self.metrics.indicated)
        try:
            self.access.check_by_id(kp.kp_id, req)
        except RequestError as exc:
            log.warning("%s tid %d: %s not restored: %s", self.access.who(kp), req.tid,
                        req.tx.name, exc)
            self.metrics.denied += 1
            if self.journal is not None:
                self.journal.remove(kp, req.tid)
            tracked.indicate(Response(req.tid, exc.status, indication=True))
            return
        pattern = Pattern(req)
        if req.tx.is_query:
            response = self._subscribe(req, tracked, kp, pattern, restored=True)
            # Sent if it changed while down or may never have arrived; the delivery drops it
            # if the KP ACKed this very result (`ksp.delivery.Delivery.redundant`).
            tracked.indicate(Response(req.tid, Status.OK, response.result, indication=True))
        else:
            rule = self._add_rule(req, tracked, kp, pattern, restored=True)
            rule.last = frozenset(pattern.solutions(self.store))
        log.info("%s tid %d: %s restored (%s, endpoint %s)", self.access.who(kp), req.tid,
                 req.tx.name, saved.transport, saved.endpoint)

    def set_access(self, access: AccessPolicy) -> int:
        """Put `access` in force (a reloaded configuration) and end, with an ACCESS_DENIED
        IND, every persistent operation it does not allow. Returns how many were ended."""
        self.access = access
        ended = 0
        for key, op in list(self._ops.items()):
            try:
                access.check_by_id(key[0].kp_id, _request_of(op))
            except RequestError as exc:
                log.warning("%s tid %d: ended by the new access policy: %s", access.who(key[0]),
                            key[1], exc)
                self.metrics.denied += 1
                self._terminate(key, exc.status)
                ended += 1
        return ended

    # -- dispatch -------------------------------------------------------------------------

    def _dispatch(self, req: Request, channel: Channel, kp: KPIdentity):
        tx = req.tx
        if tx is Tx.TERMINATE:
            op = self._ops.get((kp, req.tid))
            if op is None:
                raise RequestError(Status.UNKNOWN_TRANSACTION,
                                   f"no persistent transaction {req.tid}")
            self._remove((kp, req.tid)).channel.end()
            return Response(req.tid), None
        if tx is Tx.RESET:
            self.drop_kp(kp)
            return Response(req.tid), None
        if tx.is_data_update:
            rules = self._write(data_delta(self.store, req, self._fresh))
            return Response(req.tid), (rules, None)
        if tx.is_management:
            change = management(self.store, req)
            rules = self._write(change.delta, change.create, change.drop)
            self._end_ops_on_graphs(change.drop)
            return Response(req.tid), (rules, None)
        pattern = Pattern(req)
        if tx.is_query:
            if tx.persistent:
                return self._subscribe(req, channel, kp, pattern), None
            return Response(req.tid, Status.OK, evaluate(self.store, req, pattern)), None
        # pattern updates
        if tx.persistent:
            # Refuse what cannot be evaluated or written, before registering.
            pattern.solutions(self.store)
            for t in (*(req.delete or ()), *(req.insert or ())):
                for term in t:
                    if isinstance(term, (IRI, Literal)):
                        to_ox(term)
            rule = self._add_rule(req, channel, kp, pattern)
            return Response(req.tid), (set(), rule)
        delta = template_delta(self.store, req, pattern.solutions(self.store), self._fresh)
        return Response(req.tid), (self._write(delta), None)

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _admit(self, req: Request, channel: Channel, kp: KPIdentity,
               restored: bool) -> Channel:
        """The cap on persistent operations per KP; the channel, tracked and journaled."""
        key = (kp, req.tid)
        cap = self.max_persistent_per_kp
        if cap is not None and key not in self._ops and self._per_kp[kp] >= cap:
            raise RequestError(Status.LIMIT_EXCEEDED,
                               f"{cap} persistent operations per KP")
        self._replace(key)
        if restored:
            return channel
        channel = TrackedChannel(channel, self.journal, on_indicate=self.metrics.indicated)
        if channel.journal is not None:
            channel.journal.add(kp, req.tid, channel.transport, req)
        return channel

    def _registered(self, key: OpKey, op: Subscription | Rule) -> None:
        self._ops[key] = op
        self._per_kp[key[0]] += 1
        log.info("%s tid %d: persistent %s started", self.access.who(key[0]), key[1],
                 _request_of(op).tx.name)

    def _add_rule(self, req: Request, channel: Channel, kp: KPIdentity, pattern: Pattern,
                  restored: bool = False) -> Rule:
        channel = self._admit(req, channel, kp, restored)
        rule = Rule(self._new_id(), kp, req.tid, channel, req, pattern)
        self._rules[rule.id] = rule
        self._registered((kp, req.tid), rule)
        self._rule_index.add(rule.id, pattern.triples, pattern.graphs)
        return rule

    def _subscribe(self, req: Request, channel: Channel, kp: KPIdentity,
                   pattern: Pattern, restored: bool = False) -> Response:
        key = group_key(req, pattern)
        group = self._groups.get(key)
        result = evaluate(self.store, req, pattern) if group is None else None
        channel = self._admit(req, channel, kp, restored)  # after what can fail
        group = self._groups.get(key)  # `_admit` may have ended the last member of a group
        if group is None:
            if result is None:
                result = evaluate(self.store, req, pattern)
            group = QueryGroup(self._new_id(), req, pattern, result,
                               shape=shape_of(req, pattern))
            self._groups[key] = group
            self._group_by_id[group.id] = group
            self._group_index.add(group.id, pattern.triples, pattern.graphs)
        sub = Subscription(kp, req.tid, channel, group)
        group.members[(kp, req.tid)] = sub
        self._registered((kp, req.tid), sub)
        return Response(req.tid, Status.OK, group.result)

    def _replace(self, key: OpKey) -> None:
        """A KP reusing the TID of its active persistent transaction replaces it (R12)."""
        if key in self._ops:
            self._remove(key).channel.end()

    def _remove(self, key: OpKey) -> Subscription | Rule:
        op = self._ops.pop(key)
        self._per_kp[key[0]] -= 1
        if not self._per_kp[key[0]]:
            del self._per_kp[key[0]]
        if self.journal is not None:
            self.journal.remove(*key)
        log.info("%s tid %d: persistent operation ended", self.access.who(key[0]), key[1])
        if isinstance(op, Rule):
            op.ended = True
            del self._rules[op.id]
            self._rule_index.remove(op.id)
        else:
            group = op.group
            del group.members[key]
            if not group.members:
                del self._groups[group_key(group.request, group.pattern)]
                del self._group_by_id[group.id]
                self._group_index.remove(group.id)
        return op

    def _terminate(self, key: OpKey, status: Status = Status.TERMINATED) -> None:
        op = self._remove(key)
        op.channel.indicate(Response(op.tid, status, indication=True))

    def _end_ops_on_graphs(self, dropped: Iterable) -> None:
        dropped = set(dropped)
        if not dropped:
            return
        for key, op in list(self._ops.items()):
            opts = _request_of(op).options
            named = set(opts.query_graphs or ()) | set(opts.insert_graphs or ()) | set(
                opts.delete_graphs or ())
            if named & dropped:
                self._terminate(key)

    # -- propagation ----------------------------------------------------------------------

    def _write(self, delta: Delta, create=(), drop=()) -> set[int]:
        """Write `delta`; note the query groups it can affect; return the rules it can affect.
        Removed quads are screened against the state before the write, added ones after."""
        if not (delta or create or drop):
            return set()
        rules: set[int] = set()
        if self.smart:
            self._screen(delta.removed, rules)
        self.store.apply(delta, create, drop)
        if not delta:
            return rules
        self._changed = True
        if self.smart:
            self._screen(delta.added, rules)
        else:
            rules.update(self._rules)
        return rules

    def _screen(self, quads, rules: set[int]) -> None:
        if not quads:
            return
        for index, owners, found in ((self._group_index, self._group_by_id, self._dirty_groups),
                                     (self._rule_index, self._rules, rules)):
            for owner, position, quad in index.hits(quads):
                if owner not in found:
                    pattern = owners[owner].pattern
                    tp, others = pattern.probes[position]
                    if could_use(self.store, pattern.graphs, tp, others, quad):
                        found.add(owner)

    def _propagate(self, rules: set[int], new_rule: Rule | None) -> None:
        if new_rule is not None:
            rules = rules | {new_rule.id}
        if rules:
            self._cascade(sorted(rules))
        if self._changed:
            self._notify()

    def _cascade(self, current: list[int]) -> None:
        fired: Counter[int] = Counter()
        total = 0
        queued = set(current)
        heapq.heapify(current)
        while current:
            following: set[int] = set()
            while current:
                rid = heapq.heappop(current)
                queued.discard(rid)
                rule = self._rules.get(rid)
                if rule is None:
                    continue
                try:
                    solutions = rule.pattern.solutions(self.store)
                except Exception:
                    log.exception("rule %d of %s failed", rule.tid, self.access.who(rule.kp))
                    self._terminate((rule.kp, rule.tid), Status.INTERNAL_ERROR)
                    continue
                self.evaluations += 1
                now = frozenset(solutions)
                if now == rule.last:
                    continue
                rule.last = now
                if not now:
                    continue
                if fired[rid] >= self.rule_firing_limit or total >= self.cascade_limit:
                    log.warning("rule %d of %s ended: cascade limit", rule.tid,
                                self.access.who(rule.kp))
                    self._terminate((rule.kp, rule.tid))
                    continue
                fired[rid] += 1
                total += 1
                try:
                    d = template_delta(self.store, rule.request, solutions, self._fresh)
                    affected = self._write(d)
                except Exception:
                    log.exception("rule %d of %s failed", rule.tid, self.access.who(rule.kp))
                    self._terminate((rule.kp, rule.tid), Status.INTERNAL_ERROR)
                    continue
                for other in affected:
                    if other > rid:
                        if other not in queued:
                            queued.add(other)
                            heapq.heappush(current, other)
                    else:
                        following.add(other)
            current = sorted(following)
            queued = set(current)

    def _notify(self) -> None:
        if self.smart:
            ids = sorted(self._dirty_groups)
        else:
            ids = sorted(self._group_by_id)
        groups = [g for gid in ids if (g := self._group_by_id.get(gid)) is not None]
        results = self._evaluate_groups(groups) if self.smart else {}
        shared: dict = {}  # equal results as one object: the sessions encode it once
        last = None  # the latest result made shared (same-shape groups often repeat it)
        for group in groups:
            result = results.get(group.id)
            if result is None:
                self.evaluations += 1
                try:
                    result = evaluate(self.store, group.request, group.pattern)
                except Exception:
                    log.exception("persistent query group %d failed", group.id)
                    for key in list(group.members):
                        self._terminate(key, Status.INTERNAL_ERROR)
                    continue
            if result == group.result:
                continue
            if result is not last:
                result = last = shared.setdefault(result, result)
            group.result = result
            for sub in list(group.members.values()):
                sub.channel.indicate(Response(sub.tid, Status.OK, result, indication=True))

    def _evaluate_groups(self, groups: list[QueryGroup]) -> dict[int, object]:
        """Results of the groups that share a shape with another, one store query per shape
        (`sib.shapes`); the others (and any shape the store refuses) are left out."""
        by_shape: dict = {}
        for group in groups:
            if group.shape is not None:
                by_shape.setdefault(group.shape[0], []).append(group)
        results: dict[int, object] = {}
        for same in by_shape.values():
            if len(same) < 2:
                continue
            try:
                found = evaluate_together(
                    self.store, [(g.request, g.pattern, g.shape[1]) for g in same])
            except Exception:  # evaluated one by one instead, which reports the failure
                log.debug("shape of %d groups not evaluable together", len(same),
                          exc_info=True)
                continue
            self.evaluations += 1
            self.evaluated_together += len(same)
            results.update(zip((g.id for g in same), found))
        return results


def _request_of(op: Subscription | Rule) -> Request:
    return op.request if isinstance(op, Rule) else op.group.request
