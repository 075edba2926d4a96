"""The Python KP client: one API over UDP, TCP, TLS and CoAP.

    async with await connect("udp://127.0.0.1:7000", kp_id="…", password="…") as kp:
        rows = await kp.query(select_request)           # or SPARQL text
        await kp.insert_data([(s, p, o)])                 # rdflib terms
        async with kp.subscribe(persistent_select) as sub:
            async for ind in sub:                         # the full current state, newest only
                ...                                       # leaving the block TERMINATEs

Requests are `ksp.Request` objects (their TID is assigned here; rdflib terms allowed in the
data fields), SPARQL text, compiled by `ksp.sparql` (through each KP's bounded compile cache,
`KP.compiled`), or a `Statement`: text compiled once by `KP.prepare`. Results come back as
rdflib terms.
A non-OK status raises `KspStatusError` carrying the `ksp.Status`; no answer raises
`KspTimeout`; SPARQL outside the compiled subset raises `ksp.errors.UnsupportedSparql` naming
the feature. Reliability (retransmission, ACKs, stale-IND suppression) is the session's.
"""
from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import ssl as _ssl
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Iterable, NamedTuple
from urllib.parse import urlsplit

import rdflib

from ksp import (
    AskResult, ConstructResult, Credentials, Options, Order, Request, Response, SelectResult,
    SolutionModifier, Status, Timing, Tx,
)
from ksp.kpid import kp_id_bytes

from ._kplink import Link
from .errors import (
    KspConnectionError, KspStatusError, KspTimeout, KspUsageError, SubscriptionLost,
)
from .jsap import Jsap
from .rdfterms import from_ksp, graph_name, request_to_ksp, triple_from_ksp, triple_to_ksp
from .statements import CompileCache, Statement
from ksp.ratelog import RateLimitedLog

__all__ = ["connect", "KP", "Subscription", "Indication", "SelectRows", "Row", "Triples",
           "Statement", "kp_id_bytes"]

log = logging.getLogger("transports.client")
#: Lines a peer can set off, one per kind and minute (`ksp.ratelog`).
peer_log = RateLimitedLog(log, time.monotonic)

DEFAULT_COAP_PORT = 5683
MAX_QUEUED = 1024
"""States a `Subscription` keeps for an iteration that falls behind, by default."""
_OK = Status.OK  # a global read: `Status.X` goes through EnumType.__getattr__'s hook (3.11)

# What `KP.update` accepts, as one set lookup instead of four Tx properties per call.
_TRANSIENT_UPDATES = frozenset(tx for tx in Tx if (
    tx.is_data_update or tx.is_pattern_update or tx.is_management) and not tx.persistent)
# What `KP.query` accepts.
_ONE_SHOT_QUERIES = frozenset(tx for tx in Tx if tx.is_query and not tx.persistent)


class Row(tuple):
    """One SELECT solution: by position (`row[0]`), or by variable name (`row["s"]`,
    `row["?s"]`, `row.s`), as rdflib's `ResultRow` and pyoxigraph's `QuerySolution`. Equal to
    the plain tuple of its values."""

    __slots__ = ()
    _index: dict[str, int] = {}

    def __getitem__(self, key):
        if isinstance(key, str):
            try:
                key = self._index[key[1:] if key[:1] in "?$" else key]
            except KeyError:
                raise KeyError(f"no variable {key!r} (the variables: "
                               f"{', '.join(self._index) or 'none'})") from None
        return tuple.__getitem__(self, key)

    def __getattr__(self, name: str):
        try:
            return tuple.__getitem__(self, self._index[name])
        except KeyError:
            raise AttributeError(f"no variable {name!r}") from None

    def asdict(self) -> dict[str, Any]:
        """{variable name: term}, unbound variables left out."""
        return {n: v for n, i in self._index.items() if (v := tuple.__getitem__(self, i))
                is not None}


_row_classes: collections.OrderedDict[tuple[str, ...], type[Row]] = collections.OrderedDict()


def _row_class(names: tuple[str, ...]) -> type[Row]:
    """A `Row` subclass that knows `names` (the last 256 kept)."""
    cls = _row_classes.get(names)
    if cls is None:
        cls = _row_classes[names] = type("Row", (Row,), {
            "__slots__": (), "_index": {n: i for i, n in enumerate(names)}})
        if len(_row_classes) > 256:
            _row_classes.popitem(last=False)
    return cls


_shapes: collections.OrderedDict[tuple, tuple[tuple[rdflib.Variable, ...], type[Row]]] = (
    collections.OrderedDict())


def _shape(names: tuple[str, ...] | None, count: int
           ) -> tuple[tuple[rdflib.Variable, ...], type[Row]]:
    """(the rdflib variables, the `Row` class) of a SELECT result of `count` variables named
    `names` (else `?v{k}`, §4.5): made once per shape (the last 256 kept), not per result."""
    key = (names, count)
    shape = _shapes.get(key)
    if shape is None:
        variables = tuple(rdflib.Variable(names[k] if names and k < len(names) else f"v{k}")
                          for k in range(count))
        shape = _shapes[key] = (variables, _row_class(tuple(map(str, variables))))
        if len(_shapes) > 256:
            _shapes.popitem(last=False)
    return shape


class SelectRows(NamedTuple):
    """A SELECT result: `rows[i][k]` (or `rows[i]["name"]`, `rows[i].name`: a `Row`) is the
    rdflib binding of `variables[k]` (None: unbound); `total` is the SIB's total row count
    (TRC, saturating at 65 535)."""

    variables: tuple[rdflib.Variable, ...]
    rows: tuple[tuple[Any, ...], ...]
    total: int | None = None

    @property
    def truncated(self) -> bool:
        """The SIB cut the result to the request's MAX RESPONSE SIZE or to one datagram:
        `total` rows exist, fewer came. `KP.query_all` fetches the rest."""
        return self.total is not None and self.total > len(self.rows)


class Triples(list):
    """A CONSTRUCT result: a list of rdflib triples, with the SIB's `total` (TRC)."""

    def __init__(self, triples=(), total: int | None = None) -> None:
        super().__init__(triples)
        self.total = total

    @property
    def truncated(self) -> bool:
        """The SIB cut the result: `total` triples exist, fewer came (over TCP with a larger
        MAX RESPONSE SIZE, or narrower queries, get them all)."""
        return self.total is not None and self.total > len(self)


class Indication(NamedTuple):
    """One state of a persistent operation: `result` as `KP.query` would return it (None for a
    persistent update). `seq` is the IND's sequence number (UDP/CoAP), None for the initial
    state carried by the RES."""

    tid: int
    result: Any
    seq: int | None = None


def convert_result(result, names: tuple[str, ...] | None = None) -> Any:
    """A `ksp` result as rdflib terms: SelectRows, bool (ASK) or a list of triples. `names`:
    the SPARQL names of the variables (from compiled text), else `?v{k}` (§4.5)."""
    if result is None:
        return None
    if isinstance(result, SelectResult):
        variables, row = _shape(names, result.variables)
        return SelectRows(variables, tuple([row(map(from_ksp, r)) for r in result.rows]),
                          result.total)
    if isinstance(result, AskResult):
        return result.value
    if isinstance(result, ConstructResult):
        return Triples((triple_from_ksp(t) for t in result.triples), result.total)
    raise TypeError(f"unknown result {result!r}")


class KP:
    """A connected KP. Build it with `connect()`; close it with `close()` or `async with`."""

    def __init__(self, link: Link, url: str, prefixes: dict[str, str] | None = None, *,
                 keep_persistent: bool = False, jsap: Jsap | None = None) -> None:
        self._link = link
        self.url = url
        self.jsap = jsap
        """Named queries and updates (`transports.jsap`), used by name in `query`, `update`,
        `subscribe` and `request`."""
        self.prefixes = prefixes if prefixes is not None or jsap is None else (
            jsap.namespaces or None)
        """Prefix names (name → namespace) SPARQL text may use without PREFIX lines (by
        default the JSAP's namespaces)."""
        self.every_graph = False
        """Whether SPARQL text that names no graph reads and deletes every graph (KSP's
        option-less form, wire format 7.6) rather than the default graph, as SPARQL reads it
        (`ksp.sparql.compile`)."""
        self.keep_persistent = keep_persistent
        """Whether `close()` leaves this KP's persistent operations at the SIB (a sleeping
        device with a KP ID picks them up again); by default it TERMINATEs them."""
        self.compiled = CompileCache()
        """The compiles of the SPARQL text this KP was given last (`transports.statements`:
        at most 256 texts of at most 16 KiB each; reused only with the same prefix names,
        `every_graph` and form). Replace it with a `CompileCache` of other bounds, or of
        `max_entries=0` to compile every time."""
        self._subscriptions: set[Subscription] = set()
        self._persistent: set[int] = set()  # TIDs of persistent operations started here

    @property
    def link(self) -> Link:
        """The transport link under this KP, to inspect what the connection holds.

        A session link (UDP, TCP, CoAP) has its `session`, `transport` and `lost_with`."""
        return self._link

    async def __aenter__(self) -> "KP":
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()

    async def close(self, *, keep_persistent: bool | None = None) -> None:
        """TERMINATE the persistent operations started here that are still active (unless
        `keep_persistent`, default the KP's: R12 lets a KP with a KP ID keep them across
        reconnects), then close the transport. A SIB that does not answer within
        `CLOSE_TIMEOUT` seconds is not waited for."""
        keep = self.keep_persistent if keep_persistent is None else keep_persistent
        active = self._persistent | {s.tid for s in self._subscriptions if s.tid is not None}
        try:
            if active and not keep:
                ends = [self._link.request(Request(Tx.TERMINATE, tid)) for tid in sorted(active)]
                try:
                    await asyncio.wait_for(asyncio.gather(*ends, return_exceptions=True),
                                           CLOSE_TIMEOUT)
                except TimeoutError:
                    log.info("%s: no answer to TERMINATE on close", self.url)
        finally:
            self._persistent.clear()
            await self._link.close()

    # -- any request ------------------------------------------------------------------------

    def prepare(self, text: str, *, persistent: bool = False,
                bindings: Mapping[str, Any] | None = None) -> Statement:
        """SPARQL text compiled now, once, into a `Statement` to give to `query`, `query_all`,
        `update`, `subscribe` or `request` as often as wanted (with this KP's prefix names and
        `every_graph`; `persistent`: the persistent form, for `subscribe`). `text` may name a
        query or update of the KP's JSAP, with `bindings` for its forced bindings. Raises
        `ksp.errors.UnsupportedSparql` (naming the feature) or `SparqlSyntaxError` here, not
        when the statement is used; `KspUsageError` for `bindings` without a JSAP name."""
        if not isinstance(text, str):
            raise TypeError(f"prepare takes SPARQL text, not {type(text).__name__}")
        return self._statement(text, persistent, bindings)

    def _statement(self, text: str, persistent: bool,
                   bindings: Mapping[str, Any] | None) -> Statement:
        jsap = self.jsap
        if jsap is not None and (text in jsap.queries or text in jsap.updates):
            text = jsap.text(text, bindings)
        elif bindings:
            raise KspUsageError(f"bindings need a JSAP query or update name, not {text!r}")
        return self.compiled.compile(text, persistent=persistent, prefixes=self.prefixes,
                                     every_graph=self.every_graph)

    async def request(self, request: Request | str | Statement, *, persistent: bool = False,
                      confirmable: bool | None = None,
                      bindings: Mapping[str, Any] | None = None) -> Response | None:
        """Send one request and return its RES (None for NON: no RES waited for). Raises
        `KspStatusError` for a non-OK status. The TID is the client's: any given is replaced.
        `persistent` compiles text in the persistent form (a `Statement` has its form)."""
        req = self._prepare(request, persistent, bindings)[0]
        response = await self._send(req, confirmable)
        if req.tx.persistent and response is not None:
            self._persistent.add(response.tid)  # ended by `terminate`, `reset` or `close`
        return response

    async def _send(self, req: Request, confirmable: bool | None = None) -> Response | None:
        if confirmable is not None and req.confirmable != confirmable:
            req = req._replace(confirmable=confirmable)
        return _checked(await self._link.request(req))

    def _prepare(self, request: Request | str | Statement, persistent: bool = False,
                 bindings: Mapping[str, Any] | None = None
                 ) -> tuple[Request, tuple[str, ...] | None]:
        """(KSP request, SPARQL variable names or None). A string naming a query or update of
        the KP's JSAP is that text with `bindings` filled in; any other string is SPARQL."""
        kind = type(request)
        if kind is Statement:
            if bindings:
                raise KspUsageError("a prepared statement takes no bindings (prepare the "
                                    "JSAP name with them)")
            return request.request, request.names
        if kind is str or isinstance(request, str):
            statement = self._statement(request, persistent, bindings)
            return statement.request, statement.names
        if not isinstance(request, Request):
            raise TypeError(f"a ksp.Request, SPARQL text or a Statement, not {kind.__name__}")
        return request_to_ksp(request), None

    # -- queries and updates ----------------------------------------------------------------

    async def query(self, query: Request | str | Statement, *,
                    bindings: Mapping[str, Any] | None = None) -> Any:
        """SELECT → `SelectRows`, ASK → bool, CONSTRUCT → list of rdflib triples. `query` may
        name a query of the KP's JSAP, with `bindings` for its forced bindings."""
        req, names = self._prepare(query, bindings=bindings)
        if req.tx not in _ONE_SHOT_QUERIES:
            raise KspUsageError(f"{req.tx.name} is not a query (persistent ones: subscribe)")
        if req.confirmable != True:  # noqa: E712 - as `_send` compares
            req = req._replace(confirmable=True)
        # `_send` inlined: one coroutine fewer to create and resume per query.
        return convert_result(_checked(await self._link.request(req)).result, names)

    async def query_all(self, query: Request | str | Statement, *,
                        bindings: Mapping[str, Any] | None = None) -> SelectRows:
        """A SELECT's whole result, however often the SIB had to cut it (to the request's MAX
        RESPONSE SIZE, or to one datagram over UDP): the rest is fetched page by page with
        OFFSET (and what remains of the query's own LIMIT), as §6.4 says. A query without
        ORDER BY is ordered by its first variable, so that the pages follow one order (the
        store gives none otherwise); rows tied on it, or a store that changes between the
        pages, can still move rows across a page boundary, as with any paging."""
        req, names = self._prepare(query, bindings=bindings)
        if req.tx is not Tx.SELECT:
            raise KspUsageError(f"query_all pages SELECT results, not {req.tx.name}")
        modifier = req.options.modifier or SolutionModifier()
        if modifier.order is Order.NONE and req.projection:
            modifier = dataclasses.replace(modifier, order=Order.ASC, order_var=0)
        start, limit = modifier.offset or 0, modifier.limit
        rows: list = []
        while True:
            page_limit = None if limit is None else limit - len(rows)
            page = req._replace(options=req.options._replace(modifier=dataclasses.replace(
                modifier, offset=start + len(rows) or None, limit=page_limit)))
            result = convert_result((await self._send(page, confirmable=True)).result, names)
            rows.extend(result.rows)
            if not result.truncated or not result.rows or (
                    limit is not None and len(rows) >= limit):
                return SelectRows(result.variables, tuple(rows), len(rows))

    async def update(self, update: Request | str | Statement, *, confirmable: bool = True,
                     bindings: Mapping[str, Any] | None = None) -> None:
        """Any transient update (DATA or pattern form, or graph management: SPARQL Update's
        CREATE/DROP/COPY/MOVE/ADD). NON (`confirmable=False`) returns at once: the SIB answers
        a NON update only when it fails, and nothing waits for that."""
        req = self._prepare(update, bindings=bindings)[0]
        if req.tx not in _TRANSIENT_UPDATES:
            raise KspUsageError(f"{req.tx.name} is not an update (persistent ones: subscribe)")
        if req.confirmable != confirmable:
            req = req._replace(confirmable=confirmable)
        # `_send` inlined: one coroutine fewer to create and resume (a sensor's hot path).
        _checked(await self._link.request(req))

    async def insert_data(self, triples: Iterable, graph: Any = None, *,
                          confirmable: bool = True) -> None:
        await self._data(Tx.INSERT_DATA, "insert", triples, graph, confirmable)

    async def delete_data(self, triples: Iterable, graph: Any = None, *,
                          confirmable: bool = True) -> None:
        await self._data(Tx.DELETE_DATA, "delete", triples, graph, confirmable)

    async def _data(self, tx: Tx, field: str, triples: Iterable, graph: Any,
                    confirmable: bool) -> None:
        options = Options()
        if graph is not None:
            key = "insert_graphs" if tx is Tx.INSERT_DATA else "delete_graphs"
            options = options._replace(**{key: (graph_name(graph),)})
        req = Request(tx, 0, confirmable, options=options,
                      **{field: tuple(triple_to_ksp(t) for t in triples)})
        await self._send(req)

    # -- graph management -------------------------------------------------------------------

    async def create(self, *graphs: Any) -> None:
        await self._send(Request(Tx.CREATE, 0, graphs=tuple(graph_name(g) for g in graphs)))

    async def drop(self, *graphs: Any) -> None:
        await self._send(Request(Tx.DROP, 0, graphs=tuple(graph_name(g) for g in graphs)))

    async def copy(self, source: Any, target: Any) -> None:
        await self._transfer(Tx.COPY, source, target)

    async def move(self, source: Any, target: Any) -> None:
        await self._transfer(Tx.MOVE, source, target)

    async def add(self, source: Any, target: Any) -> None:
        await self._transfer(Tx.ADD, source, target)

    async def _transfer(self, tx: Tx, source: Any, target: Any) -> None:
        await self._send(Request(tx, 0, source=graph_name(source), target=graph_name(target)))

    # -- persistent operations --------------------------------------------------------------

    def subscribe(self, request: Request | str | Statement, *,
                  bindings: Mapping[str, Any] | None = None,
                  max_queued: int = MAX_QUEUED) -> "Subscription":
        """A persistent SELECT/ASK/CONSTRUCT or update, as an async context manager that is an
        async iterator of `Indication`s. SPARQL text is compiled as persistent. `max_queued`:
        states kept for an iteration that falls behind (see `Subscription`)."""
        req, names = self._prepare(request, persistent=True, bindings=bindings)
        if not req.tx.persistent:
            raise KspUsageError(f"{req.tx.name} is not a persistent transaction")
        return Subscription(self, req._replace(confirmable=True), names, max_queued)

    async def terminate(self, tid: int) -> None:
        """End persistent transaction `tid` (raises `KspStatusError` UNKNOWN_TRANSACTION if the
        SIB has none)."""
        try:
            await self._send(Request(Tx.TERMINATE, tid))
        finally:
            self._persistent.discard(tid)
            self._link.forget(tid)
            for sub in [s for s in self._subscriptions if s.tid == tid]:
                sub._finish(Status.TERMINATED)

    async def reset(self) -> None:
        """End every persistent transaction of this KP (R13)."""
        await self._send(Request(Tx.RESET, 0))
        self._persistent.clear()
        for sub in list(self._subscriptions):
            sub._finish(Status.TERMINATED)


def _checked(response: Response | None) -> Response | None:
    if response is not None and response.status != _OK:
        raise KspStatusError(response.status)
    return response


class Subscription:
    """One persistent transaction. Iterating yields its states, newest last, never a stale one:
    first the RES's initial state (unless an IND overtook it), then each IND. Iteration stops
    when the SIB ends it with TERMINATED (its graph dropped, the SIB shutting down or giving
    up on the KP as unreachable; `status` says so); another final status (ACCESS_DENIED,
    LIMIT_EXCEEDED, ...) raises `KspStatusError`; an operation the SIB no longer has without
    saying why (CoAP, docs/coap-binding.md) raises `SubscriptionLost`; a lost TCP connection
    raises `KspConnectionError`.

    States wait for the iteration in a queue of at most `max_queued`: an application that
    reads them slower than they come (or not at all for a while) loses the oldest, counted in
    `dropped`, never the newest. Each state is the whole result, so what it reads next is
    still current; only intermediate states are gone. The SIB cannot be asked to wait: its
    INDs are acknowledged as they arrive, or it would end the operation as unreachable."""

    def __init__(self, kp: KP, request: Request, names: tuple[str, ...] | None = None,
                 max_queued: int = MAX_QUEUED) -> None:
        if max_queued < 1:
            raise ValueError(f"max_queued must be at least 1, not {max_queued}")
        self._kp = kp
        self._request = request
        self._names = names
        self.tid: int | None = None
        self.initial: Any = None
        self.status: Status | int | None = None  # set when it has ended
        self.dropped = 0
        """States dropped unread because `max_queued` were waiting."""
        self._queue: collections.deque[Indication] = collections.deque(maxlen=max_queued)
        self._error: BaseException | None = None
        self._wakeup = asyncio.Event()
        self._delivered_any = False

    # -- Sink (called by the link) ------------------------------------------------------------

    def deliver(self, response: Response) -> None:
        self._delivered_any = True
        if len(self._queue) == self._queue.maxlen:  # the deque's bound drops the oldest
            if not self.dropped:
                peer_log.warning("states too fast",
                                 "%s: persistent transaction %s: states come faster than they are "
                                                    "read; the oldest of %d waiting are dropped",
                                 self._kp.url, self.tid, self._queue.maxlen)
            self.dropped += 1
        self._queue.append(Indication(response.tid, convert_result(response.result, self._names),
                                      response.seq))
        self._wakeup.set()

    def end(self, status: Status | int) -> None:
        self._finish(status)

    def fail(self, exc: BaseException) -> None:
        if self.status is None:
            self._error = exc
            self._wakeup.set()

    def _finish(self, status: Status | int) -> None:
        if self.status is None:
            self.status = status
            self._kp._subscriptions.discard(self)
            self._wakeup.set()

    # -- context manager and iterator ---------------------------------------------------------

    async def __aenter__(self) -> "Subscription":
        response = _checked(await self._kp._link.request(self._request, sink=self))
        self.tid = response.tid
        self.initial = convert_result(response.result, self._names)
        if not self._delivered_any:
            self._queue.appendleft(Indication(response.tid, self.initial, None))
            self._wakeup.set()
        self._kp._subscriptions.add(self)
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        if self.status is not None or self.tid is None or self._error is not None:
            return
        self.status = Status.TERMINATED
        self._kp._subscriptions.discard(self)
        try:
            response = await self._kp._link.request(Request(Tx.TERMINATE, self.tid))
            if response.status not in (Status.OK, Status.UNKNOWN_TRANSACTION):
                raise KspStatusError(response.status, f"TERMINATE {self.tid}")
        except (KspTimeout, KspConnectionError) as err:
            if exc is None:
                raise
            log.debug("TERMINATE %s failed while leaving on an error: %s", self.tid, err)
        finally:
            self._kp._link.forget(self.tid)

    def __aiter__(self) -> "Subscription":
        return self

    async def __anext__(self) -> Indication:
        while True:
            if self._queue:
                return self._queue.popleft()
            if self._error is not None:
                raise self._error
            if self.status is not None:
                if self.status in (Status.TERMINATED, Status.OK):
                    raise StopAsyncIteration
                if self.status == Status.UNKNOWN_TRANSACTION:  # a keepalive's answer (UDP)
                    raise SubscriptionLost(f"the SIB no longer has persistent transaction "
                                           f"{self.tid}")
                raise KspStatusError(self.status, f"persistent transaction {self.tid} ended")
            self._wakeup.clear()
            await self._wakeup.wait()

    def latest(self) -> Indication | None:
        """Drop every queued state but the newest and return it (None if none is queued):
        for applications that only want the current state."""
        if not self._queue:
            return None
        last = self._queue[-1]
        self._queue.clear()
        return last


CLOSE_TIMEOUT = 5.0


class _Connecting:
    """What `connect` returns: awaitable (`kp = await connect(...)`) and an async context
    manager (`async with connect(...) as kp:`, closed on leaving)."""

    def __init__(self, opening) -> None:
        self._opening = opening
        self._kp: KP | None = None

    def __await__(self):
        return self._opening.__await__()

    async def __aenter__(self) -> KP:
        self._kp = await self._opening
        return self._kp

    async def __aexit__(self, *exc_info) -> None:
        await self._kp.close()


def connect(url: str | None = None, *, kp_id: Any = None, password: str = "",
            timing: Timing | None = None, ssl: _ssl.SSLContext | None = None,
            prefixes: dict[str, str] | None = None, keep_persistent: bool = False,
            jsap: "Jsap | str | None" = None, key: bytes | str | None = None,
            counter: int | None = None, **link_args) -> _Connecting:
    """Connect to a SIB: `udp://host:port`, `tcp://host:port`, `tcps://host:port` (TLS, with
    `ssl` or the system's trust store), `coap://host[:port]`. With `kp_id` every request
    carries CREDENTIALS (the KP identity of R12), with `password`. `keep_persistent`: see
    `KP.close`. `jsap`: a JSAP file (or `Jsap`) whose queries and updates can then be used by
    name, its namespaces as prefixes; without `url`, its SIB (`ksp-sib jsap`). With `key`
    instead of a password (udp:// or coap://) every message is sealed (docs/wire-format.md
    section 13) from `counter` on (`ksp.secure.initial_counter` of the clock if omitted). Use
    it as `kp = await connect(...)` or `async with connect(...) as kp:`. A SIB that cannot be reached raises
    `KspConnectionError` naming the URL."""
    if isinstance(jsap, (str, Path)):
        jsap = Jsap.load(jsap)
    if url is None:
        if jsap is None:
            raise TypeError("connect() needs the SIB's URL, or a JSAP that names it")
        url = jsap.url()
    return _Connecting(_open(url, kp_id, password, timing, ssl, prefixes, keep_persistent,
                             jsap, dict(link_args, key=key, counter=counter)))


async def _open(url: str, kp_id: Any, password: str, timing: Timing | None,
                ssl: _ssl.SSLContext | None, prefixes: dict[str, str] | None,
                keep_persistent: bool, jsap: "Jsap | None", link_args: dict) -> KP:
    try:
        link = await _open_link(url, kp_id, password, timing, ssl, link_args)
    except OSError as exc:  # refused, no route, no such host, a TLS handshake that failed
        raise KspConnectionError(f"{url}: {exc.strerror or exc}") from exc
    return KP(link, url, prefixes, keep_persistent=keep_persistent, jsap=jsap)


async def _open_link(url: str, kp_id: Any, password: str, timing: Timing | None,
                     ssl: _ssl.SSLContext | None, link_args: dict) -> Link:
    key, counter = link_args.pop("key", None), link_args.pop("counter", None)
    parts = urlsplit(url)
    scheme, host, port = parts.scheme.lower(), parts.hostname, parts.port
    if not host:
        raise ValueError(f"no host in {url!r}")
    credentials = None
    if key is not None:
        if kp_id is None or password or scheme not in ("udp", "coap"):
            raise ValueError("a key needs a kp_id, no password, and udp:// or coap://")
        from ksp.secure import Sealer, initial_counter, parse_key
        sealer = Sealer(parse_key(key) if isinstance(key, str) else bytes(key),
                        kp_id_bytes(kp_id), sib=False,
                        counter=initial_counter(time.time()) if counter is None else counter)
    elif kp_id is not None:
        credentials = Credentials(kp_id_bytes(kp_id), password)
    elif password:
        raise ValueError("a password needs a kp_id")
    if scheme == "udp":
        from .udp import open_udp_link
        link: Link = await open_udp_link(host, _port(port, url), timing=timing,
                                         credentials=credentials, **link_args)
        if key is not None:
            link.session.sealer = sealer
    elif scheme in ("tcp", "tcps"):
        from .tcp import open_tcp_link
        if scheme == "tcps" and ssl is None:
            ssl = _ssl.create_default_context()
        elif scheme == "tcp" and ssl is not None:
            raise ValueError("an ssl context needs tcps://")
        link = await open_tcp_link(host, _port(port, url), ssl=ssl, timing=timing,
                                   credentials=credentials, **link_args)
    elif scheme == "coap":
        from .coap_client import open_coap_link
        link = await open_coap_link(host, port or DEFAULT_COAP_PORT, timing=timing,
                                    credentials=credentials,
                                    sealer=sealer if key is not None else None, **link_args)
    else:
        raise ValueError(f"unknown scheme in {url!r}: udp, tcp, tcps or coap")
    return link


def _port(port: int | None, url: str) -> int:
    if port is None:
        raise ValueError(f"no port in {url!r} (KSP has no default port)")
    return port
