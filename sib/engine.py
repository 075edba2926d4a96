"""The persistent-operation engine shared by the SIB (`sib.registry`, `sib.propagation`) and the
bridge (`bridge.service`), with no I/O in it: a persistent operation and a group of those
asking the same thing (`Operation`, `Group`: the SIB's groups hold the store's result, the
bridge's a broker subscription's rows), the table of operations with its caps (`Operations`),
the groups by what they ask (`Groups`), the rules by number (`Rules`), whether a result is news
and the IND that says it (`sees`, `indication`), the steps of restoring a journaled operation
after a restart (`Restoring`), and the rules' cascade — its order and its protection
(`Cascade`).

An operation is known by its KP's identity and its TID. A KP may hold `max_per_kp` of them and
the server `max_all` in all (a KP identity is only an address when it gives no KP ID, so the
per-KP cap alone would not bound a server open to anyone); a KP reusing the TID of an active
operation replaces it and takes no new slot.

A cascade does not evaluate patterns or write anything: its driver does (the SIB against its
store, synchronously; the bridge through its broker, awaiting each firing). The driver asks
`Cascade.next` which rule to visit, tells `Cascade.visit` the rule's solutions now (the cascade
decides whether it fires, within the limits), carries out a firing, puts the rules the firing
reached in `Cascade.marked` and calls `Cascade.spread`. Both drivers are that loop, so the order
and the ends are the same in both and a device cannot tell the bridge from a SIB:

- rules are visited in passes, in registration order (their numbers);
- a visited rule fires when its solution set differs from the one it last saw and is not
  empty; the rules a firing reached are visited later in this pass when they come after it,
  in the next pass otherwise (itself included); the cascade ends when a pass fires nothing;
- a rule may fire at most `rule_firing_limit` times per cascade and a cascade at most
  `cascade_limit` times in all: the rule that would exceed either is ended (TERMINATED) instead
  of firing, and the cascade goes on without it.
"""
from __future__ import annotations

import enum
import heapq
import itertools
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from ksp.codes import Status
from ksp.delivery import DeliveryState
from ksp.model import Request, Response
from ksp.session import KPIdentity

from .errors import RequestError

__all__ = ["Cascade", "Group", "Grouped", "Groups", "OpKey", "Operation", "Operations",
           "Persistent", "Restoring", "Rules", "Visit", "Watching", "indication", "sees"]

#: A persistent operation's key: its KP's identity and its TID.
OpKey = tuple[KPIdentity, int]
Op = TypeVar("Op", bound="Persistent")
K = TypeVar("K")
G = TypeVar("G", bound="Grouped")
R = TypeVar("R")


@dataclass(eq=False, kw_only=True)
class Operation:
    """A persistent operation as both servers hold it: whose (`kp`, `tid`), what it asked, the
    channel its INDs go on (a `sib.TrackedChannel`), the `Group` it shares with those asking
    the same (None: a SIB's rule), what it last saw (`sees`) and, a rule, its `number`
    (`Rules`). What it last saw: a rule's solution set; at the bridge, a query's result (its
    members differ in form); at the SIB a query's is its group's."""

    kp: KPIdentity
    tid: int
    request: Request
    channel: Any
    group: Group | None = None
    last: Any = None
    number: int | None = None


@dataclass(eq=False, kw_only=True)
class Group:
    """Persistent operations asking the same thing, answered once for all: at the SIB one
    evaluation of the store, whose result is `last`, the one last sent to every member; at the
    bridge one broker subscription and its rows, from which each member's result is made."""

    members: dict[OpKey, Operation] = field(default_factory=dict)
    last: Any = None


class Persistent(Protocol):
    """An operation as `Operations` sees it: what it asked, and the channel its INDs go on (a
    `sib.TrackedChannel`: `journal` is not None when the journal keeps it)."""

    @property
    def request(self) -> Request: ...

    channel: Any


class Checks(Protocol):
    """An access policy as `Operations.disallowed` asks it (`sib.AccessPolicy`)."""

    def check_by_id(self, kp_id: bytes | None, request: Request) -> None:
        """Raise RequestError if the KP of `kp_id` may not make `request`."""


class Operations(Generic[Op]):
    """Every persistent operation of a server by key (`OpKey`), counted per KP, held within the
    caps (`admit`). `holder` names the server in a refusal ("the SIB")."""

    def __init__(self, *, max_per_kp: int | None = None, max_all: int | None = None,
                 holder: str = "the SIB") -> None:
        self.max_per_kp = max_per_kp
        self.max_all = max_all
        self.holder = holder
        self._ops: dict[OpKey, Op] = {}
        self._per_kp: Counter[KPIdentity] = Counter()

    def admit(self, key: OpKey, waiting: int = 0) -> None:
        """Raise LIMIT_EXCEEDED if a new operation `key` would pass a cap; `waiting`: those
        admitted but not added yet, which count in all. An active `key` takes no new slot."""
        if key in self._ops:
            return
        cap = self.max_per_kp
        if cap is not None and self._per_kp[key[0]] >= cap:
            raise RequestError(Status.LIMIT_EXCEEDED, f"{cap} persistent operations per KP")
        cap = self.max_all
        if cap is not None and len(self._ops) + waiting >= cap:
            raise RequestError(Status.LIMIT_EXCEEDED,
                               f"{self.holder} holds {cap} persistent operations, its limit")

    def add(self, key: OpKey, op: Op) -> None:
        self._ops[key] = op
        self._per_kp[key[0]] += 1

    def pop(self, key: OpKey) -> Op:
        """Forget operation `key` (KeyError if there is none) and return it."""
        op = self._ops.pop(key)
        self._per_kp[key[0]] -= 1
        if not self._per_kp[key[0]]:
            del self._per_kp[key[0]]
        return op

    def get(self, key: OpKey) -> Op | None:
        return self._ops.get(key)

    def disallowed(self, access: Checks) -> list[tuple[OpKey, RequestError]]:
        """The operations `access` (a policy put in force) does not allow, each with why: to be
        ended with an IND of that status."""
        found = []
        for key, op in self._ops.items():
            try:
                access.check_by_id(key[0].kp_id, op.request)
            except RequestError as exc:
                found.append((key, exc))
        return found

    def closing(self) -> list[OpKey]:
        """The server stops: each operation the journal keeps has its state journaled once more
        (it resumes after the restart, and what its KP ACKed by now is not sent again); returns
        the others, to be ended with a TERMINATED IND."""
        ending = []
        for key, op in self._ops.items():
            if op.channel.journal is not None:
                op.channel.save()
            else:
                ending.append(key)
        return ending

    def keys_of(self, kp: KPIdentity) -> list[OpKey]:
        """The keys of `kp`'s operations (none looked for when it has none)."""
        return [k for k in self._ops if k[0] == kp] if kp in self._per_kp else []

    def items(self):
        return self._ops.items()

    def __contains__(self, key: object) -> bool:
        return key in self._ops

    def __iter__(self) -> Iterator[OpKey]:
        return iter(self._ops)

    def __len__(self) -> int:
        return len(self._ops)


class Grouped(Protocol):
    """A group as `Groups` sees it: its members by operation."""

    members: dict[OpKey, Any]


class Groups(Generic[K, G]):
    """Persistent operations asking the same thing share a group (at the SIB one evaluation, at
    the bridge one broker subscription), filed under what they ask; a group goes with its last
    member (`leave`)."""

    def __init__(self) -> None:
        self._by_key: dict[K, G] = {}

    def get(self, key: K) -> G | None:
        return self._by_key.get(key)

    def add(self, key: K, group: G) -> None:
        """File a new group (no members yet) under `key`."""
        self._by_key[key] = group

    def discard(self, key: K, group: G) -> None:
        """Forget `group` if it is still the one filed under `key` (one never finished)."""
        if self._by_key.get(key) is group:
            del self._by_key[key]

    def join(self, group: G, op: OpKey, member: Any) -> None:
        group.members[op] = member

    def leave(self, key: K, group: G, op: OpKey) -> bool:
        """Operation `op` leaves `group`, filed under `key`; True if it was the last member: the
        group is gone (its owner lets go of what it held for it)."""
        group.members.pop(op, None)
        if group.members or self._by_key.get(key) is not group:
            return False
        del self._by_key[key]
        return True

    def values(self):
        return self._by_key.values()

    def __len__(self) -> int:
        return len(self._by_key)


class Rules(Generic[R]):
    """The rules by number. A rule is numbered when it registers (`number`), so numbers are
    registration order, the order a cascade visits rules in. `numbers`: where the numbers come
    from (the SIB numbers its query groups from the same count); by default 1, 2, 3..."""

    def __init__(self, numbers: Iterator[int] | None = None) -> None:
        self._numbers = itertools.count(1) if numbers is None else numbers
        self._by_number: dict[int, R] = {}

    def number(self) -> int:
        """The number of a rule registering now: past every number given before."""
        return next(self._numbers)

    def add(self, rid: int, rule: R) -> None:
        self._by_number[rid] = rule

    def pop(self, rid: int) -> R:
        """Forget rule `rid` (KeyError if there is none) and return it."""
        return self._by_number.pop(rid)

    def get(self, rid: int) -> R | None:
        return self._by_number.get(rid)

    def __getitem__(self, rid: int) -> R:
        return self._by_number[rid]

    def __contains__(self, rid: object) -> bool:
        return rid in self._by_number

    def __iter__(self) -> Iterator[int]:
        return iter(self._by_number)

    def __len__(self) -> int:
        return len(self._by_number)


class Watching(Protocol):
    """What a change is told to (`sees`): a rule, with the solution set it last saw; a
    persistent query, with the result its KP was last sent (None: none yet)."""

    last: Any


def sees(op: Watching, now: Any) -> bool:
    """`op` sees `now` (a result, a solution set): True if it differs from what `op` last saw,
    which `now` becomes — a query's KP is then sent an IND with it (`indication`), a rule may
    fire (`Cascade.visit`)."""
    if now == op.last:
        return False
    op.last = now
    return True


def indication(tid: int, result: Any) -> Response:
    """The IND of a persistent query's new result: the full result, not what changed."""
    return Response(tid, Status.OK, result, indication=True)


class Journaled(Protocol):
    """A journaled operation as `Restoring` sees it (`sib.journal.Saved`)."""

    kp: KPIdentity
    tid: int
    request: Request

    @property
    def state(self) -> DeliveryState: ...


class Reopens(Protocol):
    """The channel of an operation being restored (`ksp.service.Channel`)."""

    def restore(self, state: DeliveryState) -> None: ...

    def indicate(self, response: Response) -> None: ...


class Forgets(Protocol):
    """The journal as `Restoring` asks it (`sib.Journal`)."""

    def remove(self, kp: KPIdentity, tid: int) -> None: ...


class Restoring:
    """One journaled operation restored after a restart, without a RES, in the same steps at
    the SIB and at the bridge: its channel takes back its numbering, endpoint and what its KP
    has (`reopen`); it is checked against the access policy in force (`check`, by KP ID: the
    saved copy has no password); the driver registers it (against its store, or through its
    broker: the limits in force apply there); then either it is `refuse`d — it leaves the
    journal and its KP gets a final IND of the status, an end it can tell — or it is
    `resume`d: a query sends an IND with its current result (the delivery drops it when the KP
    ACKed that very result, `ksp.delivery.Delivery.redundant`), a rule takes its current
    solutions as seen (it does not fire again for a state it already acted on)."""

    def __init__(self, saved: Journaled, journal: Forgets | None) -> None:
        self.saved = saved
        self.journal = journal

    def reopen(self, channel: Reopens) -> None:
        channel.restore(self.saved.state)

    def check(self, access: Checks) -> None:
        """Raise RequestError if the policy in force no longer allows the operation."""
        access.check_by_id(self.saved.kp.kp_id, self.saved.request)

    def refuse(self, status: Status, channel: Reopens) -> None:
        saved = self.saved
        if self.journal is not None:
            self.journal.remove(saved.kp, saved.tid)
        channel.indicate(Response(saved.tid, status, indication=True))

    def resume(self, now: Any, indicate: Callable[[Response], None],
               op: Watching | None = None) -> None:
        """`now`: a query's current result, a rule's current solution set; `op`, when given,
        keeps it as what it last saw."""
        if op is not None:
            op.last = now
        if self.saved.request.tx.is_query:
            indicate(indication(self.saved.tid, now))


class Visit(enum.Enum):
    """What a visit of a rule comes to (`Cascade.visit`): SKIP (its solutions did not change,
    or there are none), FIRE (its update over its solutions; the firing is counted) or
    OVER_LIMIT (firing would pass a limit: end it with a TERMINATED IND)."""

    SKIP = "skip"
    FIRE = "fire"
    OVER_LIMIT = "over limit"


class Cascade:
    """One cascade: which rule to visit next, whether a visited rule fires.

    `marked`: the rules whose solutions may have changed, by number. The driver adds to it (the
    rules a firing reached; at the bridge also those a change from elsewhere reached, at any
    time between visits); the cascade takes them out: all of them when it starts and when a
    pass ends, and those a firing reached at `spread`."""

    def __init__(self, marked: set[int], *, rule_firing_limit: int,
                 cascade_limit: int) -> None:
        self.marked = marked
        self.rule_firing_limit = rule_firing_limit
        self.cascade_limit = cascade_limit
        self.fired: Counter[int] = Counter()  # firings per rule in this cascade
        self.total = 0  # firings in all
        self._current = sorted(marked)  # this pass's rules still to visit (a heap)
        self._queued = set(self._current)
        self._following: set[int] = set()  # the next pass's
        marked.clear()

    def next(self) -> int | None:
        """The number of the next rule to visit (None: the cascade is over)."""
        if not self._current:
            self._current = sorted(self._following | self.marked)
            self._queued = set(self._current)
            self._following.clear()
            self.marked.clear()
            if not self._current:
                return None
        rid = heapq.heappop(self._current)
        self._queued.discard(rid)
        return rid

    def visit(self, rid: int, rule: Watching, now: frozenset) -> Visit:
        """Rule `rid`'s solutions are `now`: they become what it last saw; FIRE (counted) when
        they changed and are not empty, within the limits."""
        if not sees(rule, now) or not now:
            return Visit.SKIP
        if self.fired[rid] >= self.rule_firing_limit or self.total >= self.cascade_limit:
            return Visit.OVER_LIMIT
        self.fired[rid] += 1
        self.total += 1
        return Visit.FIRE

    def spread(self, rid: int) -> None:
        """Rule `rid` fired and the rules it reached are in `marked`: those after it are
        visited in this pass, the others in the next."""
        for other in self.marked:
            if other > rid:
                if other not in self._queued:
                    self._queued.add(other)
                    heapq.heappush(self._current, other)
            else:
                self._following.add(other)
        self.marked.clear()
