"""A small in-test `ksp.service.Service`: a set of triples per graph that counts every
execution, answers SELECT/ASK/CONSTRUCT by basic graph-pattern matching, and sends each
subscriber an IND with the full current result whenever the store changes.

It stands in for the SIB (written elsewhere) so the tests exercise transports + sessions +
client; it is not a model of the SIB's semantics beyond that.
"""
from __future__ import annotations

import asyncio
from collections import Counter

from ksp import (
    AskResult, ConstructResult, IRI, KPIdentity, Request, Response, SelectResult, Status, Triple,
    Tx, Var,
)
from ksp.service import Service

DEFAULT = IRI("")


def _match(pattern: tuple, triples: set, binding: dict) -> list[dict]:
    if not pattern:
        return [binding]
    first, rest = pattern[0], pattern[1:]
    out = []
    for t in triples:
        b = dict(binding)
        for want, have in zip(first, t):
            if isinstance(want, Var):
                if b.setdefault(want.index, have) != have:
                    break
            elif want != have:
                break
        else:
            out.extend(_match(rest, triples, b))
    return out


class MemoryService(Service):
    def __init__(self, *, answer_later: bool = True, first_seq: int | None = None) -> None:
        self.graphs: dict[IRI, set[Triple]] = {DEFAULT: set()}
        self.executions: Counter = Counter()       # (tx, triple or tid) -> times executed
        self.requests: list[tuple[str, Request]] = []
        self.subs: dict[tuple[KPIdentity, int], tuple[Request, object]] = {}
        self.unreachable: list[tuple[KPIdentity, int]] = []
        self.indications_sent = 0
        self.answer_later = answer_later
        self.first_seq = first_seq
        self.changed = asyncio.Event()
        self.lost = asyncio.Event()  # set by kp_unreachable

    # -- Service ----------------------------------------------------------------------------

    def submit(self, request: Request, channel) -> None:
        self.requests.append((channel.transport, request))
        if self.answer_later:  # like the SIB: queue it, answer from the loop
            asyncio.get_running_loop().call_soon(self._execute, request, channel)
        else:
            self._execute(request, channel)

    def kp_unreachable(self, kp: KPIdentity, tid: int) -> None:
        self.unreachable.append((kp, tid))
        self.lost.set()
        entry = self.subs.pop((kp, tid), None)
        if entry is not None:
            entry[1].end()

    # -- execution --------------------------------------------------------------------------

    @property
    def store(self) -> set[Triple]:
        return self.graphs[DEFAULT]

    def _execute(self, req: Request, channel) -> None:
        tx = req.tx
        status, result, changed = Status.OK, None, False
        if tx is Tx.INSERT_DATA:
            for t in req.insert:
                self.executions[(tx, t)] += 1
            before = len(self.store)
            self.store.update(req.insert)
            changed = len(self.store) != before
        elif tx is Tx.DELETE_DATA:
            for t in req.delete:
                self.executions[(tx, t)] += 1
            before = len(self.store)
            self.store.difference_update(req.delete)
            changed = len(self.store) != before
        elif tx is Tx.UPDATE_DATA:
            self.store.difference_update(req.delete)
            self.store.update(req.insert)
            changed = True
        elif tx.is_query and not tx.persistent:
            result = self.evaluate(req)
        elif tx.persistent:
            self.subs[(channel.kp, channel.tid)] = (req, channel)
            result = self.evaluate(req) if tx.is_query else None
        elif tx is Tx.TERMINATE:
            entry = self.subs.pop((channel.kp, channel.tid), None)
            if entry is None:
                status = Status.UNKNOWN_TRANSACTION
            else:
                entry[1].end()
        elif tx is Tx.RESET:
            for key in [k for k in self.subs if k[0] == channel.kp]:
                self.subs.pop(key)[1].end()
        elif tx is Tx.CREATE:
            if any(g in self.graphs for g in req.graphs):
                status = Status.GRAPH_EXISTS
            else:
                for g in req.graphs:
                    self.graphs[g] = set()
        elif tx is Tx.DROP:
            if any(g not in self.graphs for g in req.graphs):
                status = Status.NO_SUCH_GRAPH
            else:
                for g in req.graphs:
                    if g == DEFAULT:
                        self.store.clear()
                    else:
                        del self.graphs[g]
                changed = True
        else:
            status = Status.INVALID_TRANSACTION_TYPE
        self.executions[(tx, req.tid, channel.kp)] += 1
        channel.respond(Response(req.tid, status, result))
        if changed:
            self.notify()

    def evaluate(self, req: Request):
        solutions = _match(req.where or (), self.store, {})
        base = req.tx.base
        if base is Tx.ASK:
            return AskResult(bool(solutions))
        if base is Tx.SELECT and req.projection == 0:  # a solution count (§5.1)
            return SelectResult(0, ((),) * len(solutions))
        if base is Tx.SELECT:
            rows = sorted({tuple(s.get(k) for k in range(req.projection)) for s in solutions},
                          key=repr)
            return SelectResult(req.projection, tuple(rows))
        if base is Tx.CONSTRUCT:
            out = {Triple(*(s[m.index] if isinstance(m, Var) else m for m in t))
                   for s in solutions for t in req.template}
            return ConstructResult(tuple(sorted(out, key=repr)))
        return None

    def notify(self) -> None:
        """Every subscriber gets the full current state."""
        for (kp, tid), (req, channel) in list(self.subs.items()):
            seq = None
            if self.first_seq is not None and self.indications_sent == 0:
                seq = self.first_seq
            channel.indicate(Response(tid, Status.OK, self.evaluate(req), seq=seq))
            self.indications_sent += 1
        self.changed.set()

    def end_all(self, status: Status = Status.TERMINATED) -> None:
        """The SIB ends every persistent operation (the final IND)."""
        for (kp, tid), (req, channel) in list(self.subs.items()):
            channel.indicate(Response(tid, status))
            del self.subs[(kp, tid)]
