"""The bridge as a `ksp.service.Service`: the transports and sessions of the SIB in front
(`transports.Server.start(bridge, udp=...)`), a SEPA broker behind (`bridge.broker.Broker`).

A request is checked as the SIB checks it (`sib.validate`), written as SPARQL with KSP's
meaning (`render(..., union=True)`: without graph options, the union of all graphs), sent over
HTTP, and answered as the SIB answers it: results in the SIB's canonical order
(`sib.query.results_of`), CONSTRUCT templates instantiated here from the solutions of every
variable (the blank nodes a SIB would make), so that a device cannot tell the two apart.

Requests run one at a time in arrival order, as in the SIB: a device's update is in the broker
before its next query is sent. The queue is bounded (`max_queued`); past it a request is
answered LIMIT_EXCEEDED at once. Persistent operations are not bridged yet (issue 12): they are
answered INVALID_TRANSACTION_TYPE, TERMINATE of an unknown one UNKNOWN_TRANSACTION.
"""
from __future__ import annotations

import asyncio
import logging

from ksp.codes import Status, Tx
from ksp.errors import NoSparqlEquivalent
from ksp.model import Options, Request, Response
from ksp.service import Channel
from ksp.session import KPIdentity
from ksp.terms import DEFAULT_GRAPH, Var
from ksp.sparql.render import render, render_term
from ksp.sparql.results import from_results_json
from sib.errors import RequestError
from sib.query import results_of
from sib.validate import check_request

from .broker import Broker, BrokerError

log = logging.getLogger("ksp.bridge")

__all__ = ["Bridge"]


class Bridge:
    def __init__(self, broker: Broker, *, max_queued: int = 10_000) -> None:
        self.broker = broker
        self.max_queued = max_queued
        self._queue: asyncio.Queue | None = None
        self._task: asyncio.Task | None = None
        self.forwarded = 0  # requests answered through the broker (stats)
        self.refused = 0  # answered LIMIT_EXCEEDED for a full queue

    # -- Service ----------------------------------------------------------------------------

    def submit(self, request: Request, channel: Channel) -> None:
        if self._queue is None:
            raise RuntimeError("start the bridge first: await Bridge(...).start()")
        try:
            self._queue.put_nowait((request, channel))
        except asyncio.QueueFull:
            self.refused += 1
            channel.respond(Response(request.tid, Status.LIMIT_EXCEEDED))

    def kp_unreachable(self, kp: KPIdentity, tid: int) -> None:
        """Nothing to free yet: no persistent operations are bridged."""

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> "Bridge":
        self._queue = asyncio.Queue(self.max_queued)
        self._task = asyncio.create_task(self._run())
        return self

    async def close(self) -> None:
        """Answer what is queued, then stop."""
        if self._task is None:
            return
        await self._queue.join()
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        self._task = None

    async def _run(self) -> None:
        while True:
            request, channel = await self._queue.get()
            try:
                channel.respond(await self.answer(request))
            except Exception:  # a bug: said as one, and the bridge goes on
                log.exception("%s tid %d failed", request.tx.name, request.tid)
                channel.respond(Response(request.tid, Status.INTERNAL_ERROR))
            finally:
                self._queue.task_done()

    # -- forwarding -------------------------------------------------------------------------

    async def answer(self, request: Request) -> Response:
        """The RES a SIB would give `request`, from the broker."""
        tx = request.tx
        try:
            check_request(request)
            if tx.persistent or tx in (Tx.TERMINATE, Tx.RESET):
                return self._not_bridged(request)
            if tx.is_query:
                return Response(request.tid, Status.OK, await self._query(request))
            if tx.is_management:
                await self._check_graphs(request)
            await self.broker.update(render(request, union=True))
            self.forwarded += 1
            return Response(request.tid)
        except RequestError as exc:
            return Response(request.tid, exc.status)
        except NoSparqlEquivalent as exc:  # valid KSP that one SPARQL request cannot say
            log.info("%s tid %d: %s", tx.name, request.tid, exc)
            return Response(request.tid, Status.INVALID_DATA_FORMAT)
        except BrokerError as exc:
            log.warning("%s tid %d: the broker: %s", tx.name, request.tid, exc)
            return Response(request.tid, exc.status)

    async def _query(self, request: Request):
        """SELECT and ASK ask the broker as they are; a CONSTRUCT asks for the solutions of
        every variable and builds its triples here, as the SIB does."""
        base = request.tx.base
        if base is Tx.ASK:
            asked = request
        else:
            asked = _solutions_query(request)
        results = await self.broker.query(render(asked, union=True))
        self.forwarded += 1
        if base is Tx.ASK:
            return from_results_json(results)
        names = [f"v{k}" for k in range(asked.projection or 0)]  # none: `?_`, empty rows
        return results_of(request, list(from_results_json(results, names=names).rows))

    async def _check_graphs(self, request: Request) -> None:
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
        found = await self.broker.query(f"SELECT ?g WHERE {{ VALUES ?g {{ {values} }} "
                                        "GRAPH ?g { } }")
        existing = {b["g"]["value"] for b in found.get("results", {}).get("bindings", ())
                    if isinstance(b.get("g"), dict)}
        if tx is Tx.CREATE and existing:
            raise RequestError(Status.GRAPH_EXISTS, "CREATE of a graph that exists")
        missing = [g for g in names if g not in existing]
        if tx is not Tx.CREATE and missing:
            raise RequestError(Status.NO_SUCH_GRAPH, f"{tx.name} of {missing[0]}: no such graph")

    @staticmethod
    def _not_bridged(request: Request) -> Response:
        if request.tx is Tx.TERMINATE:
            return Response(request.tid, Status.UNKNOWN_TRANSACTION)
        if request.tx is Tx.RESET:
            return Response(request.tid)
        return Response(request.tid, Status.INVALID_TRANSACTION_TYPE)


def _solutions_query(request: Request) -> Request:
    """A SELECT of variables 0 … n−1 with the request's pattern, options and modifiers: for a
    SELECT its projection as it is, for a CONSTRUCT every variable its template may use."""
    if request.tx.base is Tx.SELECT:
        return request._replace(tx=Tx.SELECT)
    used = set()
    for g in (request.where, *(request.optional or ()), request.template):
        for t in g or ():
            used.update(m.index for m in t if isinstance(m, Var))
    o = request.options
    return Request(Tx.SELECT, request.tid, where=request.where, optional=request.optional,
                   projection=max(used, default=-1) + 1,
                   options=Options(prefixes=o.prefixes, query_graphs=o.query_graphs,
                                   filters=o.filters, binds=o.binds, modifier=o.modifier,
                                   optional=o.optional))
