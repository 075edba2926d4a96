"""Propagation: what a write sets off, after every change (an update, a graph operation, a new
rule) — the rules' cascade, then the INDs of the query groups whose result changed. Both steps
and the smart/naive choice are described in `sib.core`'s docstring; this module holds them so
that the request runner (`sib.core`) and the registry (`sib.registry`) stay small. The cascade's
order and limits are `sib.engine.Cascade`, which the bridge drives too."""
from __future__ import annotations

import logging
import time
from typing import Protocol

from ksp.codes import Status
from ksp.ratelog import RateLimitedLog

from .budget import Deadline, OverBudget, timed, within
from .engine import Cascade, Visit, indication, sees
from .errors import RequestError
from .persistent import QueryGroup, Rule
from .query import evaluate
from .registry import Registry
from .screen import could_use
from .shapes import Prepared, run
from .store import Delta, QuadStore
from .updates import Fresh, template_delta

log = logging.getLogger("ksp.sib")
#: Lines a peer can set off, one per kind and minute (`ksp.ratelog`).
peer_log = RateLimitedLog(log, time.monotonic)


class Observer(Protocol):
    """Another kind of persistent operation (the SEPA gate's subscriptions, `sib.sepa.broker`)
    told of every write and, after the INDs, of the final state of each change."""

    def begin(self) -> None:
        """A new request: nothing written yet."""

    def written(self, delta: Delta, create, drop) -> None:
        """`delta` (and graphs created, dropped) was just written."""

    def changed(self) -> None:
        """The change is complete (rules run, INDs sent): look at the store."""


class Propagation:
    """Screens every write against the registry's indices and runs what it can affect."""

    def __init__(self, store: QuadStore, registry: Registry, fresh: Fresh, *,
                 smart: bool = True, rule_firing_limit: int = 16,
                 cascade_limit: int = 1024, max_quads: int | None = None,
                 budget: float | None = None) -> None:
        self.store = store
        #: Seconds a persistent query's or rule's evaluation may take (`sib.budget`): one past
        #: it ends with a LIMIT_EXCEEDED IND. None: no budget.
        self.budget = budget
        self.registry = registry
        self.fresh = fresh
        self.smart = smart
        self.rule_firing_limit = rule_firing_limit
        self.cascade_limit = cascade_limit
        #: The store's size cap: a write that would grow it past this many quads is refused
        #: (LIMIT_EXCEEDED) before anything of it is written; None: no cap.
        self.max_quads = max_quads
        # What the writes of the current request (and its cascade) changed and can affect.
        self._changed = False
        self._dirty_groups: set[int] = set()
        self.evaluations = 0  # pattern evaluations done for persistent operations (stats)
        self.evaluated_together = 0  # query groups evaluated with same-shape ones (stats)
        #: The queries of the same-shape group sets evaluated lately (`sib.shapes`), by ids.
        self.prepared = Prepared()
        #: Told of every write and change (`Observer`), after the INDs: they see the same
        #: final state.
        self.observers: list[Observer] = []

    def begin(self) -> None:
        """A new request: nothing written yet."""
        self._changed = False
        self._dirty_groups.clear()
        for observer in self.observers:
            observer.begin()

    def write(self, delta: Delta, create=(), drop=()) -> set[int]:
        """Write `delta`; note the query groups it can affect; return the rules it can affect.
        Removed quads are screened against the state before the write, added ones after.
        Within `max_quads`."""
        r = self.registry
        if not (delta or create or drop):
            return set()
        if self.max_quads is not None:
            growth = len(delta.added) - len(delta.removed)
            if growth > 0 and self.store.size + growth > self.max_quads:
                raise RequestError(Status.LIMIT_EXCEEDED,
                                   f"the store holds at most {self.max_quads} quads")
        rules: set[int] = set()
        if self.smart:
            self._screen(delta.removed, rules)
        self.store.apply(delta, create, drop)
        self._changed = True  # graph names change what observers' queries may read
        for observer in self.observers:
            observer.written(delta, create, drop)
        if not delta:
            return rules
        if self.smart:
            self._screen(delta.added, rules)
        else:
            rules.update(r.rules)
        return rules

    def _screen(self, quads, rules: set[int]) -> None:
        r = self.registry
        if not quads:
            return
        for index, owners, found in ((r.group_index, r.group_by_id, self._dirty_groups),
                                     (r.rule_index, r.rules, rules)):
            for quad, filed_by in index.keys(quads):
                g = quad[3]
                for owner, filed in filed_by.items():
                    if owner in found:
                        continue
                    for scope, position in filed:
                        if scope is not None and g not in scope:
                            continue
                        pattern = owners[owner].pattern
                        if position not in pattern.unconditional:
                            tp, others = pattern.probes[position]
                            if not could_use(self.store, pattern.graphs, tp, others, quad):
                                continue
                        found.add(owner)
                        break

    def propagate(self, rules: set[int], new_rule: Rule | None) -> None:
        if new_rule is not None:
            rules = rules | {new_rule.number}
        if rules:
            self._cascade(sorted(rules))
        if self._changed:
            self._notify()
            for observer in self.observers:
                try:
                    observer.changed()
                except Exception:
                    peer_log.exception("observer failed", "after a change: %r failed", observer)

    def _cascade(self, rules: list[int]) -> None:
        """Drive a `Cascade` (`sib.engine`) over the store: each visit evaluates the rule's
        pattern, each firing writes its templates over its solutions."""
        r = self.registry
        cascade = Cascade(set(rules), rule_firing_limit=self.rule_firing_limit,
                          cascade_limit=self.cascade_limit)
        while (rid := cascade.next()) is not None:
            rule = r.rules.get(rid)
            if rule is None:
                continue
            try:
                with timed(self.budget, "the rule's evaluation"):
                    solutions = rule.pattern.solutions(self.store)
            except OverBudget as exc:
                self._end_rule(rule, exc.status, "rule over budget", exc)
                continue
            except Exception:
                self._rule_failed(rule)
                continue
            self.evaluations += 1
            visit = cascade.visit(rid, rule, frozenset(solutions))
            if visit is Visit.SKIP:
                continue
            if visit is Visit.OVER_LIMIT:
                self._end_rule(rule, Status.TERMINATED, "cascade limit", "cascade limit")
                continue
            try:
                d = template_delta(self.store, rule.request, solutions, self.fresh)
                cascade.marked.update(self.write(d))
            except RequestError as exc:  # the store's cap: the rule ends, the rest goes on
                self._end_rule(rule, exc.status, "rule refused", exc)
                continue
            except Exception:
                self._rule_failed(rule)
                continue
            cascade.spread(rid)

    def _end_rule(self, rule: Rule, status: Status, kind: str, why: object) -> None:
        """End `rule` in a cascade, with a final IND of `status`; the cascade goes on. `kind`
        and `why`: its log line's."""
        r = self.registry
        peer_log.warning(kind, "rule %d of %s ended: %s", rule.tid, r.who(rule.kp), why)
        r.terminate((rule.kp, rule.tid), status)

    def _rule_failed(self, rule: Rule) -> None:
        """A rule's evaluation or firing raised (a bug): it ends with INTERNAL_ERROR, the
        cascade goes on."""
        r = self.registry
        peer_log.exception("rule failed", "rule %d of %s failed", rule.tid, r.who(rule.kp))
        r.terminate((rule.kp, rule.tid), Status.INTERNAL_ERROR)

    def _notify(self) -> None:
        r = self.registry
        if self.smart:
            ids = sorted(self._dirty_groups)
        else:
            ids = sorted(r.group_by_id)
        groups = [g for gid in ids if (g := r.group_by_id.get(gid)) is not None]
        results = self._evaluate_groups(groups) if self.smart else {}
        shared: dict = {}  # equal results as one object: the sessions encode it once
        last = None  # the latest result made shared (same-shape groups often repeat it)
        for group in groups:
            result = results.get(group.id)
            if result is None:
                self.evaluations += 1
                try:
                    with timed(self.budget, "the persistent query's evaluation"):
                        result = evaluate(self.store, group.request, group.pattern)
                except OverBudget as exc:
                    peer_log.warning("group over budget", "persistent query group %d ended: %s",
                                     group.id, exc)
                    for key in list(group.members):
                        r.terminate(key, exc.status)
                    continue
                except Exception:
                    peer_log.exception("group failed", "persistent query group %d failed", group.id)
                    for key in list(group.members):
                        r.terminate(key, Status.INTERNAL_ERROR)
                    continue
            if not sees(group, result):
                continue
            if result is not last:
                result = last = group.last = shared.setdefault(result, result)
            for sub in list(group.members.values()):
                sub.channel.indicate(indication(sub.tid, result))

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
                with within(Deadline(self.budget, "queries evaluated together")):
                    together = self.prepared.get(
                        tuple(g.id for g in same),
                        lambda: [(g.request, g.pattern, g.shape[1]) for g in same])
                    found = run(self.store, together, [g.request for g in same])
            except Exception:  # evaluated one by one instead, which reports the failure
                log.debug("shape of %d groups not evaluable together", len(same),
                          exc_info=True)
                continue
            self.evaluations += 1
            self.evaluated_together += len(same)
            results.update(zip((g.id for g in same), found))
        return results
