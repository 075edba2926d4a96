"""The registry of persistent operations: query groups (identical persistent queries share one
evaluation), rules, the pattern indices that find which ones a change can affect, the caps
(`sib.engine.Operations`, the bridge's too) and the journal. It registers, ends and looks up; it neither executes requests
(`sib.core`) nor decides what a change sets off (`sib.propagation`)."""
from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterable

from ksp.codes import Status
from ksp.model import Request, Response
from ksp.session import KPIdentity
from ksp.ratelog import RateLimitedLog

from .access import AccessPolicy
from .engine import Groups, Operation, Operations, Rules
from .index import PatternIndex
from .journal import Journal, TrackedChannel
from .metrics import Metrics
from .pattern import Pattern
from .persistent import Channel, OpKey, QueryGroup, Rule, group_key
from .query import evaluate
from .shapes import shape_of
from .store import QuadStore

log = logging.getLogger("ksp.sib")
#: A persistent operation started or ended: ten lines a minute (`ksp.ratelog`).
op_log = RateLimitedLog(log, time.monotonic, burst=10)


class Registry:
    """Every persistent operation, by (KP identity, TID) (`ops`), grouped (`groups`, `rules`)
    and indexed (`group_index`, `rule_index`). `access`: the policy in force, which names KPs
    in the log."""

    def __init__(self, store: QuadStore, *, access: AccessPolicy,
                 journal: Journal | None = None, metrics: Metrics | None = None,
                 max_persistent_per_kp: int | None = None,
                 max_persistent: int | None = None) -> None:
        self.store = store
        self.access = access
        self.journal = journal
        self.metrics = metrics or Metrics()
        #: By key, within `max_persistent_per_kp` per KP and `max_persistent` in all.
        self.ops: Operations[Operation] = Operations(
            max_per_kp=max_persistent_per_kp, max_all=max_persistent, holder="the SIB")
        self.groups: Groups[object, QueryGroup] = Groups()  # by `group_key`
        self.group_by_id: dict[int, QueryGroup] = {}
        #: Groups and rules are numbered from one count: each in its order of creation.
        self._ids = itertools.count(1)
        self.rules: Rules[Rule] = Rules(self._ids)
        self.group_index = PatternIndex()
        self.rule_index = PatternIndex()

    def __len__(self) -> int:
        return len(self.ops)

    def who(self, kp: KPIdentity) -> str:
        return self.access.who(kp)

    def get(self, key: OpKey) -> Operation | None:
        return self.ops.get(key)

    # -- registering ----------------------------------------------------------------------

    def add_rule(self, req: Request, channel: Channel, kp: KPIdentity, pattern: Pattern,
                 restored: bool = False) -> Rule:
        channel = self._admit(req, channel, kp, restored)
        rule = Rule(number=self.rules.number(), kp=kp, tid=req.tid, channel=channel,
                    request=req, pattern=pattern)
        self.rules.add(rule.number, rule)
        self._registered((kp, req.tid), rule)
        self.rule_index.add(rule.number, pattern.triples, pattern.graphs)
        return rule

    def subscribe(self, req: Request, channel: Channel, kp: KPIdentity, pattern: Pattern,
                  restored: bool = False) -> Response:
        """Join (or found) the query group of `req`; the RES carries the group's result."""
        key = group_key(req, pattern)
        group = self.groups.get(key)
        result = evaluate(self.store, req, pattern) if group is None else None
        channel = self._admit(req, channel, kp, restored)  # after what can fail
        group = self.groups.get(key)  # `_admit` may have ended the last member of a group
        if group is None:
            if result is None:
                result = evaluate(self.store, req, pattern)
            group = QueryGroup(id=next(self._ids), request=req, pattern=pattern, last=result,
                               shape=shape_of(req, pattern))
            self.groups.add(key, group)
            self.group_by_id[group.id] = group
            self.group_index.add(group.id, pattern.triples, pattern.graphs)
        sub = Operation(kp=kp, tid=req.tid, request=group.request, channel=channel, group=group)
        self.groups.join(group, (kp, req.tid), sub)
        self._registered((kp, req.tid), sub)
        return Response(req.tid, Status.OK, group.last)

    def _admit(self, req: Request, channel: Channel, kp: KPIdentity,
               restored: bool) -> Channel:
        """The caps on persistent operations, per KP and in all (reusing an active TID takes
        no new slot); the channel, tracked and journaled."""
        key = (kp, req.tid)
        self.ops.admit(key)
        self.replace(key)
        if restored:
            return channel
        channel = TrackedChannel(channel, self.journal, on_indicate=self.metrics.indicated)
        if channel.journal is not None:
            channel.journal.add(kp, req.tid, channel.transport, req)
        return channel

    def _registered(self, key: OpKey, op: Operation) -> None:
        self.ops.add(key, op)
        op_log.info("started", "%s tid %d: persistent %s started", self.who(key[0]), key[1],
                    op.request.tx.name)

    # -- ending ---------------------------------------------------------------------------

    def replace(self, key: OpKey) -> None:
        """A KP reusing the TID of its active persistent transaction replaces it (R12)."""
        if key in self.ops:
            self.remove(key).channel.end()

    def remove(self, key: OpKey) -> Operation:
        op = self.ops.pop(key)
        if self.journal is not None:
            self.journal.remove(*key)
        op_log.info("ended", "%s tid %d: persistent operation ended", self.who(key[0]), key[1])
        if isinstance(op, Rule):
            op.ended = True
            self.rules.pop(op.number)
            self.rule_index.remove(op.number)
        else:
            group = op.group
            if self.groups.leave(group_key(group.request, group.pattern), group, key):
                del self.group_by_id[group.id]
                self.group_index.remove(group.id)
        return op

    def terminate(self, key: OpKey, status: Status = Status.TERMINATED) -> None:
        """End the operation with a final IND of `status`."""
        op = self.remove(key)
        op.channel.indicate(Response(op.tid, status, indication=True))

    def drop_kp(self, kp: KPIdentity) -> None:
        """Forget every persistent operation of `kp`, without an IND (RESET: the KP asked)."""
        for key in self.keys_of(kp):
            self.remove(key).channel.end()

    def give_up(self, kp: KPIdentity) -> int:
        """`kp` became unreachable (an IND's retries ran out, its connection is gone, nobody
        observes over CoAP): end each of its operations with a final TERMINATED IND, which a
        KP back within the IND's retries (over UDP, back later too: the session keeps it to
        send again; over CoAP, re-registering while it lingers) still gets: an end it can tell,
        not silence. Returns how many ended."""
        keys = self.keys_of(kp)
        for key in keys:
            self.terminate(key)
        return len(keys)

    def keys_of(self, kp: KPIdentity) -> list[OpKey]:
        """The keys of `kp`'s operations (none looked for when it has none)."""
        return self.ops.keys_of(kp)

    def end_ops_on_graphs(self, dropped: Iterable) -> None:
        """End (TERMINATED) every operation that names a graph just dropped."""
        dropped = set(dropped)
        if not dropped:
            return
        for key, op in list(self.ops.items()):
            opts = op.request.options
            named = set(opts.query_graphs or ()) | set(opts.insert_graphs or ()) | set(
                opts.delete_graphs or ())
            if named & dropped:
                self.terminate(key)

    def terminate_all(self) -> None:
        """The SIB shuts down: end every persistent operation with a TERMINATED IND, except
        those the journal keeps (they resume after the restart): their state is journaled once
        more, so that what the KPs ACKed by now is not sent again after the restart."""
        for key in self.ops.closing():
            self.terminate(key)
