"""Simple reads, answered at once: a one-shot SELECT or ASK of one triple pattern is matched
with one index lookup of the store (`quads_for_pattern`) on the scheduler's thread, instead of
SPARQL text evaluated on a reader thread (`sib.pattern`, `sib.readers`): a sensor's
``SELECT ?v WHERE { <sensor_k> <value> ?v }`` costs a few microseconds instead of the text's
rendering and parsing and two thread hand-offs.

*Simple* is decided from the request alone (`plan`): one triple pattern, no OPTIONAL, FILTER,
BIND or solution modifier, the union of all graphs or one QUERY GRAPH, no variable twice and no
blank node, no field a query does not have; constants that the renderer writes
(`ksp.sparql.render_term`) and pyoxigraph holds. Such a request passes `sib.validate`'s checks
by its shape alone (the test file checks that too), so they are not run again; the access
policy's are. Anything else takes the normal path, and so does every refusal: `plan` returning
None is never an answer.

*Bounded*: one lookup and at most `MOST_ROWS` + 1 quads read; a pattern matching more takes
the normal path (under its time budget, beside the writes), having cost that many quads here.

*Exact*: the same rows as the SPARQL evaluation — a triple held by k graphs matches k times in
the union, as in pyoxigraph's union default graph — in the same canonical order and under the
same RES size cap (`sib.query.select`). tests/test_sib_simple_reads.py checks the answers
against the normal path's on generated stores and requests.
"""
from __future__ import annotations

from functools import lru_cache
from itertools import islice
from operator import attrgetter

from ksp.codes import Tx
from ksp.errors import KspError
from ksp.model import AskResult, Request, Result, SelectResult
from ksp.sparql import render_term
from ksp.terms import IRI, Literal, Var

from .errors import RequestError
from .oxterms import CACHED, CACHED_CHARS, from_ox, graph_to_ox, to_ox
from .query import most_rows, select
from .store import QuadStore

__all__ = ["MOST_ROWS", "PLANS_CACHED", "Plan", "plan", "plans_cached"]

MOST_ROWS = 32
"""Rows a simple read answers at most; one matching more takes the normal path."""

_POSITIONS = (attrgetter("subject"), attrgetter("predicate"), attrgetter("object"))
# The options a simple read has none of: it may carry PREFIX (resolved by the decoder),
# QUERY GRAPH, MAX RESPONSE SIZE and CREDENTIALS (checked by the caller).
_others = attrgetter("delete_graphs", "insert_graphs", "optional", "filters", "modifier",
                     "binds")
_NONE = (None,) * 6
# The fields of a request that a query has none of (`sib.validate` checks the first three).
_fields = attrgetter("delete", "insert", "template", "graphs", "source", "target")
_NO_FIELDS = (None,) * 6


class Plan:
    """A simple read's plan (see the module docstring), the same for every request of its
    shape: the store terms of its pattern (None where a variable is) and, per projected
    variable, where its value is in a matching quad."""

    __slots__ = ("terms", "graph", "columns", "ask", "single")

    def __init__(self, tx: Tx, terms: tuple, graph, columns: tuple) -> None:
        self.terms, self.graph, self.columns = terms, graph, columns
        self.ask = tx is Tx.ASK
        #: The one projected variable's getter, when there is one and the pattern binds it.
        self.single = columns[0] if len(columns) == 1 else None

    def answer(self, request: Request, store: QuadStore, payload: int | None = None
               ) -> Result | None:
        """The result of `request` (of this plan's shape), or None when the pattern matches
        more than `MOST_ROWS` quads. `payload`: the most bytes the transport carries in one
        RES (`sib.query.select`)."""
        s, p, o = self.terms
        quads = store.oxigraph.quads_for_pattern(s, p, o, self.graph)
        if self.ask:
            return AskResult(next(quads, None) is not None)
        found = list(islice(quads, MOST_ROWS + 1))
        if len(found) > MOST_ROWS:
            return None
        get = self.single
        if get is not None:
            if len(found) == 1 and most_rows(request, payload, 1) >= 1:  # `select`'s answer
                return SelectResult(1, ((from_ox(get(found[0])),),))
            return select(request, [(get(q),) for q in found], payload)
        columns = self.columns
        rows = [tuple([None if get is None else get(q) for get in columns]) for q in found]
        return select(request, rows, payload)


PLANS_CACHED = 4096
"""Shapes whose plan (or None: not simple) `plan` keeps; when full it starts afresh."""
_plans: dict[tuple, Plan | None] = {}
_UNSEEN = object()


def plan(request: Request) -> Plan | None:
    """The plan of `request` if it is a simple read, else None (the normal path answers it,
    whatever its status). Kept per shape (transaction, pattern, projection, QUERY GRAPH): a
    device polling its few values plans each once. (Terms of different kinds never compare
    equal — an IRI is a `str`, a literal, a blank node and a variable tuples of 3 strings, 1
    string, 1 integer — so a shape's key is its plan's.)"""
    tx = request.tx
    if tx is not Tx.SELECT and tx is not Tx.ASK:
        return None
    where, opts = request.where, request.options
    if (where is None or len(where) != 1 or request.optional or _others(opts) != _NONE
            or _fields(request) != _NO_FIELDS):
        return None
    key = (tx, where[0], request.projection, opts.query_graphs)
    try:
        made = _plans.get(key, _UNSEEN)
    except TypeError:  # a term that is no ksp term (unhashable): never simple
        return None
    if made is _UNSEEN:
        made = _plan(tx, where[0], request.projection or 0, opts.query_graphs)
        if len(_plans) >= PLANS_CACHED:
            _plans.clear()
        _plans[key] = made
    return made


def plans_cached() -> int:
    """Shapes `plan` keeps now (at most `PLANS_CACHED`)."""
    return len(_plans)


def _plan(tx: Tx, pattern: tuple, projection: int, graphs: tuple | None) -> Plan | None:
    graph = None
    if graphs is not None:
        if len(graphs) != 1 or (graph := _store_term(graphs[0], graph=True)) is None:
            return None
    terms, where_var = [], {}
    for position, term in enumerate(pattern):
        kind = type(term)
        if kind is Var:
            if term.index in where_var:
                return None
            where_var[term.index] = _POSITIONS[position]
            terms.append(None)
        elif kind is IRI or (kind is Literal and position == 2):
            if (stored := _store_term(term)) is None:
                return None
            terms.append(stored)
        else:
            return None
    columns = tuple([where_var.get(k) for k in range(projection)])
    return Plan(tx, tuple(terms), graph, columns)


def _store_term(term: IRI | Literal, graph: bool = False):
    """The pyoxigraph term of a constant, else None: of a pattern's constant that the renderer
    writes (the normal path's SPARQL text holds it), of a QUERY GRAPH (given to pyoxigraph
    as a term by the normal path too)."""
    size = len(term) if isinstance(term, str) else len(term.lexical) + len(term.datatype)
    if size <= CACHED_CHARS:
        return _cached_store_term(term, graph)
    return _convert(term, graph)


def _convert(term: IRI | Literal, graph: bool):
    try:
        if graph:
            return graph_to_ox(term)
        render_term(term)
        return to_ox(term)
    except (KspError, RequestError, ValueError, TypeError):
        return None


_cached_store_term = lru_cache(maxsize=CACHED)(_convert)
