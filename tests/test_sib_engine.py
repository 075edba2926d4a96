"""The shared persistent-operation engine (`sib.engine`) on its own: the table of operations
with its caps, and a cascade's order and limits, driven by a table of rules (what each one's
solutions are, what a firing reaches) in place of a store or a broker."""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import pytest

from ksp.codes import Status, Tx
from ksp.model import Request, Response
from ksp.session import KPIdentity
from sib import RequestError
from sib.engine import (Cascade, Group as EngineGroup, Groups, Operation, Operations,
                        Restoring, Rules, Visit, indication, sees)


@dataclass
class Rule:
    last: Any = None


def drive(marked: set[int], reaches: dict[int, set[int]], solutions, *,
          rule_firing_limit: int = 16, cascade_limit: int = 1024):
    """Run a cascade as the SIB and the bridge do; `solutions(rid, visits)` is rule `rid`'s
    solution set at its `visits`-th visit. Returns the visits and the firings, in order, and
    the rules ended."""
    rules = {rid: Rule() for rid in reaches}
    cascade = Cascade(marked, rule_firing_limit=rule_firing_limit, cascade_limit=cascade_limit)
    visited, fired, ended = [], [], []
    while (rid := cascade.next()) is not None:
        if rid not in rules:
            continue
        visited.append(rid)
        visit = cascade.visit(rid, rules[rid], solutions(rid, visited.count(rid)))
        if visit is Visit.OVER_LIMIT:
            ended.append(rid)
            del rules[rid]
        elif visit is Visit.FIRE:
            fired.append(rid)
            cascade.marked.update(reaches[rid])
            cascade.spread(rid)
    return visited, fired, ended


def always_new(rid: int, visit: int) -> frozenset:
    return frozenset({(rid, visit)})


def test_a_result_is_news_once_and_only_when_it_changed():
    query = Rule()
    assert sees(query, "a") and query.last == "a"
    assert not sees(query, "a")
    assert sees(query, "b") and not sees(query, "b")
    assert indication(3, "b") == Response(3, Status.OK, "b", indication=True)


def test_later_rules_in_this_pass_earlier_ones_in_the_next():
    visited, fired, _ = drive({2}, {1: set(), 2: {1, 3}, 3: set()}, always_new)
    assert visited == [2, 3, 1]
    assert fired == [2, 3, 1]


def test_a_rule_fires_only_when_its_solutions_changed_and_are_not_empty():
    seen = {1: [frozenset({"a"}), frozenset({"a"})], 2: [frozenset()]}
    visited, fired, _ = drive({1, 2}, {1: {1}, 2: set()},
                              lambda rid, visit: seen[rid][visit - 1])
    assert visited == [1, 2, 1]
    assert fired == [1]


def test_the_firing_limit_per_rule_ends_a_runaway_rule():
    visited, fired, ended = drive({1}, {1: {1}}, always_new, rule_firing_limit=3)
    assert fired == [1, 1, 1]
    assert ended == [1] and visited == [1, 1, 1, 1]


def test_the_cascade_limit_ends_the_rule_that_would_pass_it():
    _, fired, ended = drive({1}, {1: {2}, 2: {1}}, always_new, cascade_limit=5)
    assert fired == [1, 2, 1, 2, 1]
    assert ended == [2]


def test_rules_marked_from_elsewhere_wait_for_the_next_firing_or_pass():
    """At the bridge, notifications from elsewhere mark rules between visits: they are taken
    with the next firing's (relative to it) or at the end of the pass."""
    marked = {1}
    cascade = Cascade(marked, rule_firing_limit=16, cascade_limit=1024)
    assert cascade.next() == 1
    marked.update({1, 4})  # not a firing's: 1 did not fire
    assert cascade.next() == 1  # the pass is over: the next one takes them
    assert cascade.next() == 4
    assert cascade.next() is None
    assert not marked


def test_operations_are_held_within_the_caps_per_kp_and_in_all():
    a, b = KPIdentity(kp_id=b"a"), KPIdentity(kp_id=b"b")
    ops: Operations[str] = Operations(max_per_kp=2, max_all=3, holder="the bridge")
    ops.admit((a, 1))
    ops.add((a, 1), "a1")
    ops.add((a, 2), "a2")
    ops.admit((a, 2))  # active: replaced, no new slot
    with pytest.raises(RequestError) as refused:
        ops.admit((a, 3))
    assert refused.value.status is Status.LIMIT_EXCEEDED
    ops.admit((b, 1))
    with pytest.raises(RequestError) as refused:
        ops.admit((b, 1), waiting=1)  # one more admitted, still waiting to be added
    assert "the bridge holds 3" in str(refused.value)
    assert ops.keys_of(a) == [(a, 1), (a, 2)] and ops.keys_of(b) == []
    assert ops.pop((a, 1)) == "a1" and len(ops) == 1 and (a, 1) not in ops
    ops.admit((a, 3))


def test_operations_without_caps_take_any_number():
    kp = KPIdentity(None, ("127.0.0.1", 1))
    ops: Operations[int] = Operations()
    for tid in range(100):
        ops.admit((kp, tid))
        ops.add((kp, tid), tid)
    assert len(ops.keys_of(kp)) == 100 and sorted(tid for _, tid in ops) == list(range(100))


def test_rules_are_numbered_in_registration_order_and_never_again():
    rules: Rules[str] = Rules()
    first, second = rules.number(), rules.number()
    rules.add(second, "b")
    rules.add(first, "a")
    assert first < second and list(rules) == [second, first]
    assert rules.pop(first) == "a" and first not in rules and rules.get(first) is None
    assert rules.number() > second and rules[second] == "b" and len(rules) == 1


def test_rules_may_share_their_count_with_other_numbered_things():
    count = itertools.count(1)
    rules: Rules[str] = Rules(count)
    assert (rules.number(), next(count), rules.number()) == (1, 2, 3)


@dataclass(eq=False)
class Group:
    members: dict = field(default_factory=dict)


def test_a_group_goes_with_its_last_member():
    a, b = (KPIdentity(b"a"), 1), (KPIdentity(b"b"), 1)
    groups: Groups[str, Group] = Groups()
    group = Group()
    groups.add("q", group)
    groups.join(group, a, "member a")
    groups.join(group, b, "member b")
    assert not groups.leave("q", group, a) and groups.get("q") is group
    assert groups.leave("q", group, b) and groups.get("q") is None and len(groups) == 0


def test_an_operation_in_a_group_sees_a_result_there_or_on_its_own():
    """At the SIB a group's members share the result it last sent; at the bridge each member
    keeps its own (they differ in form)."""
    kp = KPIdentity(b"a")
    groups: Groups[str, EngineGroup] = Groups()
    group = EngineGroup()
    groups.add("q", group)
    op = Operation(kp=kp, tid=1, request=Request(Tx.SELECT_PERSISTENT, 1), channel=None,
                   group=group)
    groups.join(group, (kp, 1), op)
    assert sees(group, "r") and not sees(group, "r") and op.last is None
    assert sees(op, "r") and op.number is None and group.members == {(kp, 1): op}
    assert groups.leave("q", op.group, (kp, 1)) and len(groups) == 0


def test_a_group_replaced_under_its_key_is_not_forgotten_for_the_old_one():
    old, new = Group(), Group()
    groups: Groups[str, Group] = Groups()
    groups.add("q", old)
    groups.add("q", new)  # the old one was let go of while it was being made
    groups.discard("q", old)
    assert not groups.leave("q", old, (KPIdentity(b"a"), 1))
    assert groups.get("q") is new and list(groups.values()) == [new]


@dataclass
class Channel:
    journal: object = None
    saved: int = 0

    def save(self) -> None:
        self.saved += 1


@dataclass
class Op:
    request: object
    channel: Channel = field(default_factory=Channel)


class Policy:
    """Allows what KP `a` asks, nothing of others'."""

    def check_by_id(self, kp_id, request) -> None:
        if kp_id != b"a":
            raise RequestError(Status.ACCESS_DENIED, f"{request} of {kp_id!r}")


def test_a_new_policy_names_the_operations_it_does_not_allow():
    a, b = KPIdentity(b"a"), KPIdentity(b"b")
    ops: Operations[Op] = Operations()
    for key in ((a, 1), (b, 1), (b, 2)):
        ops.add(key, Op(f"tid {key[1]}"))
    refused = ops.disallowed(Policy())
    assert [key for key, _ in refused] == [(b, 1), (b, 2)]
    assert all(exc.status is Status.ACCESS_DENIED for _, exc in refused)
    assert len(ops) == 3  # ending them is the server's


def test_closing_saves_what_the_journal_keeps_and_names_the_rest():
    kp = KPIdentity(b"a")
    kept, lost = Channel(journal="journal"), Channel()
    ops: Operations[Op] = Operations()
    ops.add((kp, 1), Op("kept", kept))
    ops.add((kp, 2), Op("lost", lost))
    assert ops.closing() == [(kp, 2)]
    assert (kept.saved, lost.saved) == (1, 0)


@dataclass
class Saved:
    kp: KPIdentity
    tid: int
    request: object
    state: str = "state"


@dataclass
class Reopened:
    restored: list = field(default_factory=list)
    sent: list = field(default_factory=list)

    def restore(self, state) -> None:
        self.restored.append(state)

    def indicate(self, response) -> None:
        self.sent.append(response)


@dataclass
class Forgetting:
    removed: list = field(default_factory=list)

    def remove(self, kp, tid) -> None:
        self.removed.append((kp, tid))


def query_request() -> Request:
    return Request(Tx.SELECT_PERSISTENT, 7)


def test_a_refused_restore_leaves_the_journal_with_a_final_ind():
    kp = KPIdentity(b"b")
    journal, channel = Forgetting(), Reopened()
    restoring = Restoring(Saved(kp, 7, query_request()), journal)
    restoring.reopen(channel)
    with pytest.raises(RequestError) as refused:
        restoring.check(Policy())
    restoring.refuse(refused.value.status, channel)
    assert channel.restored == ["state"] and journal.removed == [(kp, 7)]
    assert channel.sent == [Response(7, Status.ACCESS_DENIED, indication=True)]


def test_a_resumed_query_sends_its_result_and_a_rule_keeps_its_solutions():
    kp = KPIdentity(b"a")
    channel = Reopened()
    query = Restoring(Saved(kp, 7, query_request()), None)
    query.check(Policy())
    query.resume("result", channel.indicate)
    assert channel.sent == [Response(7, Status.OK, "result", indication=True)]
    rule, seen = Restoring(Saved(kp, 8, Request(Tx.UPDATE_PERSISTENT, 8)), None), Rule()
    rule.resume(frozenset({"s"}), channel.indicate, seen)
    assert seen.last == frozenset({"s"}) and len(channel.sent) == 1
