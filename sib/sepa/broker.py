"""The SEPA broker's work inside the SIB: queries, updates and subscriptions in full SPARQL 1.1,
run by the SIB's scheduler (one at a time, in arrival order, between KSP requests) against the
same store, so an update from either side reaches the persistent operations of both.

- A SEPA update is cut into operations (`sib.sepa.update`), each worked out against the store
  as the ones before it leave it (`sib.staging`); their net exact delta is written once
  through `Propagation.write`, as a KSP update's is, so the rules' cascade, the KSP INDs and
  the SEPA notifications follow from the same delta, and a reader sees all of the request or
  none of it. If an operation fails, nothing has been written and nothing is notified.
- A subscription keeps its last result as a multiset; after a change that can affect it, its
  query is evaluated again and the notification carries the exact multiset difference (SELECT:
  rows added and removed; ASK: the boolean before and after; CONSTRUCT: triples added and
  removed). Nothing is sent when nothing changed. Equal subscriptions (same text and dataset)
  share one evaluation.
- Which changes can affect one: its query's triple patterns are filed in the SIB's pattern
  index (`sib.index`, as the KSP persistent queries'; `sib.sepa.screen` says why that is
  sound), and a written quad that matches none of them is not looked at again. Queries that
  cannot be screened, and every query when a graph is created or dropped, are evaluated after
  every change; so is everything in naive mode (`Propagation.smart` false), the oracle.
"""
from __future__ import annotations

import itertools
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import pyoxigraph as ox

from ksp.errors import SparqlSyntaxError
from ksp.ratelog import RateLimitedLog

from ..access import ALL, DEFAULT, Grant, graph_names
from ..budget import OverBudget, checked, timed
from ..errors import RequestError, StoreUnwritable
from ..fairness import Shares
from ..index import PatternIndex
from ..metrics import Histogram
from ..staging import Staged
from ..store import Delta
from .reads import graphs_read
from .screen import triple_patterns
from .update import Dataset, Operation, UpdateRefused, parse_update

log = logging.getLogger("ksp.sib.sepa")
#: Lines a peer can set off, one per kind and minute (`ksp.ratelog`).
peer_log = RateLimitedLog(log, time.monotonic)

__all__ = ["SepaBroker", "SepaError", "Subscription", "term_json"]

XSD_STRING = "http://www.w3.org/2001/XMLSchema#string"

Notify = Callable[[dict], None]


class SepaError(Exception):
    """Answered as `{"error", "status_code", "error_description"}` (HTTP: that status)."""

    def __init__(self, status: int, error: str, description: str) -> None:
        super().__init__(description)
        self.status, self.error, self.description = status, error, description

    def json(self, alias: str | None = None) -> dict:
        out = {"error": self.error, "status_code": self.status,
               "error_description": self.description}
        if alias is not None:
            out["alias"] = alias
        return out


def term_json(term) -> dict:
    """A pyoxigraph term in the SPARQL 1.1 Query Results JSON form."""
    if isinstance(term, ox.NamedNode):
        return {"type": "uri", "value": term.value}
    if isinstance(term, ox.BlankNode):
        return {"type": "bnode", "value": term.value}
    if isinstance(term, ox.Literal):
        out = {"type": "literal", "value": term.value}
        if term.language:
            out["xml:lang"] = term.language
        elif term.datatype.value != XSD_STRING:
            out["datatype"] = term.datatype.value
        return out
    return {"type": "triple", "value": {"subject": term_json(term.subject),
                                        "predicate": term_json(term.predicate),
                                        "object": term_json(term.object)}}


def _key(row: dict) -> tuple:
    return tuple(sorted((k, tuple(sorted(v.items()))) for k, v in row.items()))


@dataclass
class _Evaluation:
    """One query and dataset, with the subscriptions that share it."""

    text: str
    dataset: Dataset
    form: str = "select"  # select | ask | construct
    vars: list[str] = field(default_factory=list)
    rows: Counter = field(default_factory=Counter)  # key -> count
    row_of: dict = field(default_factory=dict)  # key -> the row's JSON
    boolean: bool | None = None
    members: dict[str, "Subscription"] = field(default_factory=dict)
    made: int = 0  # when it was made: changes notify in this order, as the naive mode does


@dataclass
class Subscription:
    spuid: str
    alias: str | None
    evaluation: _Evaluation
    notify: Notify
    owner: object  # what ends it with its socket
    sequence: int = 0
    #: Its subscriber's grant under the policy in force (None: anonymous), asked when it is
    #: made and again when the policy is replaced.
    grant_of: Callable[[], Grant | None] | None = None
    #: Whose share of the subscriptions it counts against (`sib.fairness`; None: nobody's).
    party: Hashable | None = None

    def grant(self) -> Grant | None:
        return self.grant_of() if self.grant_of is not None else None


class SepaBroker:
    """Queries, updates and subscriptions on a `SibCore` (call every method from the
    scheduler: `Sib.call`)."""

    def __init__(self, core, *, max_subscriptions: int = 10_000,
                 max_per_owner: int = 1_000, max_per_party: int | None = None,
                 base_iri: str | None = None) -> None:
        """`max_per_party`: subscriptions of one client identity, or one address for anonymous
        clients (`sib.fairness`), on all their sockets; None: no bound. `base_iri`: the
        service's base IRI, which relative IRIs in queries, updates and subscriptions resolve
        against, in the access checks as in the evaluation (None: relative IRIs are
        refused)."""
        self.core = core
        self.base_iri = base_iri
        self.store = core.store
        self.max_subscriptions = max_subscriptions
        self.max_per_owner = max_per_owner
        self.by_party = Shares(max_per_party)
        self.subscriptions: dict[str, Subscription] = {}
        self._owned: dict[object, set[str]] = {}  # owner (a socket) -> its spuids
        self._evaluations: dict[tuple, _Evaluation] = {}
        self._index = PatternIndex()  # evaluation key -> its triple patterns
        self._made = itertools.count()
        self._unscreened: set[tuple] = set()  # keys of evaluations run after every change
        self._dirty: set[tuple] | None = set()  # None: every evaluation
        self.notifications = 0  # sent (stats)
        self.evaluations = 0
        #: From the start of a change (`begin`) to its last notification queued.
        self.latency = Histogram()
        self._began = 0.0
        core.propagation.observers.append(self)
        core.access_checks.append(self.recheck)

    # -- access -----------------------------------------------------------------------------

    def _grant(self, grant: Grant | None) -> Grant | None:
        """None: everything is allowed (an open policy)."""
        if self.core.access.is_open:
            return None
        return grant if grant is not None else self.core.access.anonymous_grant()

    def _check_read(self, grant: Grant | None, dataset: Dataset, text: str | None) -> None:
        """`text`: the query (or an update's WHERE as a query) whose graphs it reads when the
        protocol's parameters do not say (`sib.sepa.reads`)."""
        grant = self._grant(grant)
        if grant is None:
            return
        if dataset.default is not None and dataset.named is not None:
            reads = graph_names((*dataset.default, *dataset.named))  # exactly these
        elif text is None:
            reads = {ALL}
        else:  # the text's FROM clauses, else the graphs its patterns reach (WITH: default)
            reads = graphs_read(text, graph_names(dataset.default, DEFAULT), self.base_iri)
        if not grant.allows("read", reads):
            raise SepaError(403, "forbidden", f"no read permission on {sorted(reads)}")

    def _check_write(self, grant: Grant | None, graphs) -> None:
        """`graphs`: IRIs, or None for every graph."""
        grant = self._grant(grant)
        names = graph_names(graphs)
        if grant is not None and names and not grant.allows("write", names):
            raise SepaError(403, "forbidden", f"no write permission on {sorted(names)}")

    # -- queries ----------------------------------------------------------------------------

    def query(self, text: str, dataset: Dataset, grant: Grant | None = None):
        """The pyoxigraph result of a query (solutions, boolean or triples)."""
        self._check_read(grant, dataset, text)
        return self._execute(text, dataset)

    def _execute(self, text: str, dataset: Dataset):
        try:
            return self.store.oxigraph.query(text, base_iri=self.base_iri,
                                             **dataset.for_store())
        except SyntaxError as exc:
            raise SepaError(400, "invalid_query", str(exc)) from None
        except (ValueError, OSError, RuntimeError) as exc:  # RuntimeError: pyoxigraph refused to
            raise SepaError(400, "query_failed", str(exc)) from None  # evaluate it (a function)

    # -- updates ----------------------------------------------------------------------------

    def update(self, text: str, using: Dataset | None = None,
               grant: Grant | None = None) -> Delta:
        """Apply an update, all of it or nothing; returns the net quads it changed."""
        try:
            ops = parse_update(text, using, self.base_iri)
        except SparqlSyntaxError as exc:
            raise SepaError(400, "invalid_update", str(exc)) from None
        except UpdateRefused as exc:
            raise SepaError(exc.status, exc.error, str(exc)) from None
        return self.apply(ops, grant)

    def apply(self, ops: list[Operation], grant: Grant | None = None,
              writes: tuple = ()) -> Delta:
        """Apply parsed operations (an update's, or a Graph Store request's:
        `sib.sepa.graph_store`) in order, all of them or nothing, as one write: each is worked
        out against the store as the ones before it leave it (`sib.staging.Staged`) and what
        they change in all is written once, so a reader never sees part of them, and a request
        that fails has written nothing. Returns the net quads they changed. `writes`: graphs
        checked for write beside those the operations name (a Graph Store POST of an empty
        body still needs the right to write its graph)."""
        self._check_write(grant, writes)
        staged = Staged(self.store)
        for op in ops:
            if op.reads:
                self._check_read(grant, _reads(op), op.where)
            self._check_write(grant, op.writes())  # covers every graph its change writes
            try:
                with timed(self.core.budgets.update, "the update's WHERE"):
                    staged.stage(op.change(staged))
            except UpdateRefused as exc:
                raise SepaError(exc.status, exc.error, str(exc)) from None
            except OverBudget as exc:
                raise SepaError(503, "timeout", str(exc)) from None
        net = staged.net()
        prop = self.core.propagation
        prop.begin()
        try:
            rules = prop.write(net.delta, net.create, net.drop)
        except StoreUnwritable as exc:  # a full disk: the next write may pass
            raise SepaError(503, "disk_full" if exc.disk_full else "store_unwritable",
                            str(exc)) from None
        except RequestError as exc:  # the store's cap (`[limits] max_quads`)
            raise SepaError(507, "insufficient_storage", str(exc)) from None
        dropped = staged.dropped
        if dropped:
            self.core.registry.end_ops_on_graphs(dropped)
        prop.propagate(rules, None)
        return net.delta

    # -- subscriptions ----------------------------------------------------------------------

    def subscribe(self, text: str, dataset: Dataset, alias: str | None, notify: Notify,
                  owner: object, grant_of: Callable[[], Grant | None] | None = None,
                  party: Hashable | None = None) -> Subscription:
        """Register a subscription and send its first notification (sequence 0, the whole
        result as added). `grant_of` gives its subscriber's grant under the policy in force
        (None, or no `grant_of`: anonymous), now and again under a new one (`recheck`);
        `party` whose share of the subscriptions it counts against (`max_per_party`)."""
        self._check_read(grant_of() if grant_of is not None else None, dataset, text)
        if len(self.subscriptions) >= self.max_subscriptions:
            raise SepaError(429, "too_many_subscriptions",
                            f"the SIB holds {self.max_subscriptions} subscriptions, its limit")
        owned = self._owned.get(owner, ())
        if len(owned) >= self.max_per_owner:
            raise SepaError(429, "too_many_subscriptions",
                            f"{self.max_per_owner} subscriptions on one socket, its limit")
        if party is not None and self.by_party.full(party):
            raise SepaError(429, "too_many_subscriptions",
                            f"{self.by_party.per_party} subscriptions of one client (its "
                            f"identity, else its address), its share of the SIB's "
                            f"{self.max_subscriptions}")
        key = (text, dataset)
        ev = self._evaluations.get(key)
        if ev is None:
            ev = _Evaluation(text, dataset, made=next(self._made))
            self._evaluate(ev)  # raises SepaError for a bad query: nothing registered
            self._evaluations[key] = ev
            patterns = triple_patterns(text, self.base_iri)
            if patterns is None:
                self._unscreened.add(key)
            else:
                self._index.add(key, patterns, None)
        sub = Subscription(f"sepa://subscription/{uuid.uuid4()}", alias, ev, notify, owner,
                           grant_of=grant_of, party=party)
        if party is not None:
            self.by_party.take(party)
        ev.members[sub.spuid] = sub
        self.subscriptions[sub.spuid] = sub
        self._owned.setdefault(owner, set()).add(sub.spuid)
        first = {"spuid": sub.spuid, "sequence": 0}
        if alias is not None:
            first["alias"] = alias
        first["addedResults"] = self._whole(ev)
        first["removedResults"] = self._empty(ev)
        self._send(sub, first)
        return sub

    def recheck(self, access) -> int:
        """A new access policy is in force (`SibCore.set_access`, SIGHUP): every subscription it
        no longer allows to read gets an error frame with its spuid and alias, and ends, as KSP
        persistent operations end with ACCESS_DENIED. Returns how many ended."""
        ended = 0
        for sub in list(self.subscriptions.values()):
            try:
                self._check_read(sub.grant(), sub.evaluation.dataset, sub.evaluation.text)
            except SepaError as exc:
                log.warning("SEPA subscription %s ended by the new access policy: %s",
                            sub.spuid, exc.description)
                frame = SepaError(exc.status, exc.error, "ended by the new access policy: "
                                  + exc.description).json(sub.alias)
                frame["spuid"] = sub.spuid
                sub.notify(frame)
                self.unsubscribe(sub.spuid)
                ended += 1
        return ended

    def unsubscribe(self, spuid: str, owner: object | None = None) -> bool:
        sub = self.subscriptions.get(spuid)
        if sub is None or (owner is not None and sub.owner is not owner):
            return False
        del self.subscriptions[spuid]
        if sub.party is not None:
            self.by_party.give(sub.party)
        owned = self._owned[sub.owner]
        owned.discard(spuid)
        if not owned:
            del self._owned[sub.owner]
        ev = sub.evaluation
        ev.members.pop(spuid, None)
        if not ev.members:
            key = (ev.text, ev.dataset)
            self._evaluations.pop(key, None)
            self._index.remove(key)
            self._unscreened.discard(key)
        return True

    @property
    def queries(self) -> int:
        """Distinct subscription queries (equal subscriptions share one evaluation)."""
        return len(self._evaluations)

    def owns(self, owner: object) -> bool:
        """Whether `owner` (a socket) has subscriptions."""
        return bool(self._owned.get(owner))

    def drop_owner(self, owner: object) -> int:
        """End every subscription of `owner` (its socket closed)."""
        spuids = list(self._owned.get(owner, ()))
        for spuid in spuids:
            self.unsubscribe(spuid)
        return len(spuids)

    def _send(self, sub: Subscription, body: dict) -> None:
        self.notifications += 1
        sub.notify({"notification": body})

    # -- `sib.propagation.Observer` ----------------------------------------------------------

    def begin(self) -> None:
        self._dirty = set()
        self._began = time.perf_counter()

    def written(self, delta: Delta, create, drop) -> None:
        if self._dirty is None:
            return
        if create or drop or not self.core.propagation.smart:
            self._dirty = None
        else:
            self._dirty |= self._index.candidates(delta.quads)

    def changed(self) -> None:
        """After a change: each evaluation it can affect once, its members notified of the
        exact difference."""
        dirty, self._dirty = self._dirty, set()
        sent = self.notifications
        if dirty is None:
            affected = list(self._evaluations.values())
        else:  # in the order they were made, as the naive mode goes (sockets see it)
            found = map(self._evaluations.get, dirty | self._unscreened)
            affected = sorted(filter(None, found), key=lambda ev: ev.made)
        for ev in affected:  # only an evaluation's own failure ends it in this loop
            try:
                diff = self._evaluate(ev)
            except SepaError as exc:
                peer_log.warning("subscription failed", "subscription query failed, ended: %s",
                                 exc.description)
                for sub in list(ev.members.values()):
                    frame = exc.json(sub.alias)
                    frame["spuid"] = sub.spuid
                    sub.notify(frame)
                    self.unsubscribe(sub.spuid)
                continue
            if diff is None:
                continue
            added, removed = diff
            for sub in list(ev.members.values()):
                sub.sequence += 1
                self._send(sub, {"spuid": sub.spuid, "sequence": sub.sequence,
                                 "addedResults": added, "removedResults": removed})
        if self.notifications != sent:
            self.latency.observe(time.perf_counter() - self._began)

    def _evaluate(self, ev: _Evaluation):
        """Evaluate again; (added, removed) in results JSON, or None if nothing changed. Past
        the persistent budget (`sib.budget`), stopped or finished late: 503 `timeout`, which
        ends the subscription."""
        try:
            with timed(self.core.budgets.persistent, "the subscription's evaluation"):
                return self._evaluate_now(ev)
        except OverBudget as exc:
            raise SepaError(503, "timeout", str(exc)) from None

    def _evaluate_now(self, ev: _Evaluation):
        self.evaluations += 1
        result = self._execute(ev.text, ev.dataset)  # its grant was checked at subscribe
        if isinstance(result, ox.QueryBoolean):
            value = bool(result)
            before, ev.form, ev.boolean = ev.boolean, "ask", value
            if before is None or before == value:
                return None
            return {"head": {}, "boolean": value}, {"head": {}, "boolean": before}
        if isinstance(result, ox.QuerySolutions):
            ev.form = "select"
            ev.vars = [v.value for v in result.variables]
            rows = [{name: term_json(t) for name in ev.vars
                     if (t := solution[name]) is not None} for solution in checked(result)]
        else:
            ev.form, ev.vars = "construct", ["subject", "predicate", "object"]
            rows = [{"subject": term_json(t.subject), "predicate": term_json(t.predicate),
                     "object": term_json(t.object)} for t in checked(result)]
        now: Counter = Counter()
        row_of = {}
        for row in rows:
            k = _key(row)
            now[k] += 1
            row_of[k] = row
        before, ev.rows = ev.rows, now
        old_rows, ev.row_of = ev.row_of, row_of
        added = now - before
        removed = before - now
        if not added and not removed:
            return None
        return (self._results(ev, added, row_of), self._results(ev, removed, old_rows))

    def _results(self, ev: _Evaluation, counts: Counter, row_of: dict) -> dict:
        rows = [row_of[k] for k, n in counts.items() for _ in range(n)]
        return {"head": {"vars": list(ev.vars)}, "results": {"bindings": rows}}

    def _whole(self, ev: _Evaluation) -> dict:
        if ev.form == "ask":
            return {"head": {}, "boolean": bool(ev.boolean)}
        return self._results(ev, ev.rows, ev.row_of)

    def _empty(self, ev: _Evaluation) -> dict:
        if ev.form == "ask":
            return {"head": {}}
        return {"head": {"vars": list(ev.vars)}, "results": {"bindings": []}}


def _reads(op: Operation) -> Dataset:
    if op.where is None:  # ADD / MOVE / COPY read their source
        return Dataset((op.source,), ())
    return op.dataset
