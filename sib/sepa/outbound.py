"""Outbound requests: what in a SPARQL text would make the SIB open a connection, and the
runner for the queries an operator lets do so.

pyoxigraph evaluates `SERVICE <endpoint>` with its own HTTP client, blocking, without a
timeout, inside the call that evaluates the query: on the SIB's one scheduler that stalls every
KSP and SEPA request for as long as the endpoint takes (for ever, if it never answers; pointed
at the SIB's own `/query`, a deadlock). `LOAD` fetches too, but `sib.sepa.update` refuses it
(501; LOAD SILENT: no change) before pyoxigraph sees an update's text. Datasets do not fetch: FROM, FROM NAMED, USING,
`default-graph-uri` and `named-graph-uri` name graphs of the store (`tests/test_sepa_outbound.py`
checks each against a listener).

So the gate refuses SERVICE (403: valid SPARQL, refused by the operator's configuration, as the
access policy refuses with 403) unless every endpoint of the query is listed in `[sepa]
service_endpoints`, and even then only in a one-shot query: an update's WHERE would fetch
inside the write path, and a subscription again after every write. An allowed query runs on a
thread of its own, off the scheduler (pyoxigraph releases the GIL while it waits), at most
`workers` at once; its client gets 504 at the deadline. A thread cannot be stopped (pyoxigraph
has no cancellation): one past its deadline finishes on its own and holds its slot until then,
so a silent endpoint costs at most `workers` threads, and past them the answer is 503.
"""
from __future__ import annotations

import asyncio
import re
import threading
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

import pyoxigraph as ox

from ksp.errors import SparqlSyntaxError
from ksp.sparql.lexer import _tokens, unescape_codepoints

from ..oxterms import resolve_iri
from .broker import SepaError

__all__ = ["Service", "Outbound", "services"]

T = TypeVar("T")

#: What a text the lexer cannot read is refused for: the word anywhere in it.
_ANY_SERVICE = re.compile("service", re.I)


@dataclass(frozen=True, slots=True)
class Service:
    """One SERVICE of a text: its endpoint IRI, resolved (None when the text does not fix it:
    `SERVICE ?var`, an undeclared prefix, a text the lexer cannot read), as written."""

    endpoint: str | None
    written: str


def services(text: str) -> list[Service]:
    """Every SERVICE keyword of a query or update text, by a token scan (the SPARQL lexer's):
    the word inside a string literal, an IRI, a comment or a name is none. A text the lexer
    cannot read but that holds the word anywhere is taken to hold an unknown one."""
    try:
        toks = _tokens(unescape_codepoints(text))
    except SparqlSyntaxError as exc:
        if _ANY_SERVICE.search(text):
            return [Service(None, f"(a text the SIB's lexer cannot read: {exc})")]
        return []
    found: list[Service] = []
    base: str | None = None
    prefixes: dict[str, str] = {}
    for i, tok in enumerate(toks):
        if tok.kind != "name":
            continue
        word = tok.text.upper()
        after = toks[i + 1]
        if word == "BASE" and after.kind == "iri":
            base = _resolved(base, after.text[1:-1])
        elif word == "PREFIX" and after.kind == "pname" and toks[i + 2].kind == "iri":
            prefixes[after.text[:-1]] = _resolved(base, toks[i + 2].text[1:-1]) or ""
        elif word == "SERVICE":
            if after.kind == "name" and after.text.upper() == "SILENT":
                after = toks[i + 2]
            found.append(Service(_endpoint(after, base, prefixes), after.text or "(nothing)"))
    return found


def _resolved(base: str | None, iri: str) -> str | None:
    if base is None:
        return iri
    try:
        return resolve_iri(base, iri)
    except ValueError:
        return None


def _endpoint(tok, base: str | None, prefixes: dict[str, str]) -> str | None:
    if tok.kind == "iri":
        return _resolved(base, tok.text[1:-1])
    if tok.kind == "pname":
        prefix, _, local = tok.text.partition(":")
        ns = prefixes.get(prefix)
        return None if not ns else ns + local.replace("\\", "")
    return None


def check_endpoint(iri: object) -> str | None:
    """Why `iri` cannot be a configured endpoint (None: it can): an absolute http(s) IRI."""
    if not isinstance(iri, str):
        return f"{iri!r} is not a string"
    try:
        ox.NamedNode(iri)
    except ValueError as exc:
        return f"{iri!r}: {exc}"
    if not iri.lower().startswith(("http://", "https://")):
        return f"{iri!r}: pyoxigraph fetches http:// and https:// only"
    return None


def _clear_frames(exc: BaseException | None) -> None:
    """Drop the locals of the frames of `exc` and the exceptions it chains: a pyoxigraph
    result may only be dropped on the thread that made it."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        traceback.clear_frames(exc.__traceback__)
        exc = exc.__cause__ or exc.__context__


class Outbound:
    """The operator's allowed SERVICE endpoints, and the bounded runner for queries that use
    them. Methods are called on the event loop's thread."""

    def __init__(self, endpoints: Iterable[str] = (), *, deadline: float = 10.0,
                 workers: int = 2) -> None:
        self.endpoints = frozenset(endpoints)
        self.deadline, self.workers = deadline, workers
        self.held = 0  # threads running (finished or not, past their deadline or not)
        self.refused = 0  # requests refused for a SERVICE (stats)
        self.timeouts = 0  # queries answered 504
        self._waiting: set[asyncio.Future] = set()  # callers waiting for their thread
        self.stopped = False

    def screen(self, text: str, where: str) -> bool:
        """Whether `text` may run here: False when it has no SERVICE, True when it is a query
        (`where` "query") whose every SERVICE endpoint is allowed; else 403."""
        found = services(text)
        if not found:
            return False
        if where != "query":
            self.refused += 1
            why = ("a subscription is evaluated again after every write, and would fetch each "
                   "time" if where == "subscription" else
                   "an update's WHERE would fetch inside the SIB's write path")
            raise SepaError(403, "service_refused",
                            f"SERVICE {found[0].written} refused: the SIB runs SERVICE only in "
                            f"one-shot queries ({why})")
        for service in found:
            if service.endpoint not in self.endpoints:
                self.refused += 1
                what = (f"<{service.endpoint}>" if service.endpoint is not None
                        else f"{service.written} (its endpoint is not known from the text)")
                raise SepaError(403, "service_refused",
                                f"SERVICE {what} refused: the SIB opens no connection to an "
                                "endpoint its operator has not listed ([sepa] "
                                "service_endpoints)")
        return True

    async def run(self, work: Callable[[], T]) -> T:
        """`work()` on a thread of its own, at most `workers` at once (503 past them); 504 at
        the deadline, the thread left to finish (it holds its slot until then)."""
        if self.stopped:
            raise _stopping()
        if self.held >= self.workers:
            raise SepaError(503, "busy",
                            f"all {self.workers} threads for queries with SERVICE are held, "
                            "their endpoints not done yet ([sepa] service_workers)")
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()
        future.add_done_callback(lambda f: f.cancelled() or f.exception())  # read: no warning

        def done(ok: bool, value) -> None:
            self.held -= 1
            if not future.done():
                future.set_result(value) if ok else future.set_exception(value)

        def thread() -> None:
            try:
                ok, value = True, work()
            except BaseException as exc:  # handed to the caller
                ok, value = False, exc
                _clear_frames(exc)
            try:
                loop.call_soon_threadsafe(done, ok, value)
            except RuntimeError:  # the loop has closed: the SIB stopped
                pass

        self.held += 1
        try:
            threading.Thread(target=thread, name="ksp-sepa-service", daemon=True).start()
        except BaseException:
            self.held -= 1
            raise
        self._waiting.add(future)
        future.add_done_callback(self._waiting.discard)
        try:
            return await asyncio.wait_for(asyncio.shield(future), self.deadline)
        except asyncio.TimeoutError:
            self.timeouts += 1
            raise SepaError(504, "service_timeout",
                            f"the query's SERVICE endpoint did not answer within "
                            f"{self.deadline:g} s ([sepa] service_deadline)") from None
        except OSError as exc:  # the endpoint refused, reset, or answered what is no result
            raise SepaError(502, "service_failed", f"SERVICE: {exc}") from None

    def stop(self) -> None:
        """The SIB stops: every query waiting for its endpoint is answered 503 now (its thread,
        a daemon, is left to end), and every one asked for from now on."""
        self.stopped = True
        for future in list(self._waiting):
            if not future.done():
                future.set_exception(_stopping())

    def register_metrics(self, metrics) -> None:
        """Beside the gate's, on the same endpoint (`ksp-sib --metrics-port`)."""
        metrics.gauges["ksp_sepa_service_threads"] = (
            "Threads running a query with an allowed SERVICE (past their deadline too).",
            lambda: self.held)
        metrics.counters["ksp_sepa_service_refused_total"] = (
            "SEPA requests refused for a SERVICE (not allowed, or in an update or subscription).",
            lambda: self.refused)
        metrics.counters["ksp_sepa_service_timeouts_total"] = (
            "SEPA queries with SERVICE answered 504 at [sepa] service_deadline.",
            lambda: self.timeouts)


def _stopping() -> SepaError:
    return SepaError(503, "unavailable", "the SIB is stopping: the query was given up")
