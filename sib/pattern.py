"""A request's graph pattern (Where graph, optional groups, FILTER, BIND, QUERY GRAPH) and its
evaluation on the store to solutions: tuples indexed by variable index (None = unbound).

The SPARQL text comes from the project's one renderer, `ksp.sparql.render`, of a SELECT
request carrying the pattern; the dataset (union of all graphs, or the QUERY GRAPH list, which
may name the default graph) is given to pyoxigraph through its API, not as FROM clauses."""
from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property

from ksp.codes import Status
from ksp.errors import NoSparqlEquivalent, SparqlError
from ksp.model import Expression, Options, Request, SolutionModifier
from ksp.codes import Tx
from ksp.terms import IRI, Triple, Var
from ksp.sparql import render

from .budget import checked
from .errors import RequestError
from .oxterms import from_ox, graph_to_ox
from .screen import Probe, probes, unconditional
from .store import QuadStore

Solution = tuple  # tuple[Term | None, ...], index = variable index

#: `NoSparqlEquivalent.feature` values that come from an option (status 0x06, not 0x04).
_OPTION_FEATURES = frozenset({"BIND", "expression", "SOLUTION MODIFIER", "variable name"})


def _expr_vars(expr: Expression):
    return (t.index for t in expr if isinstance(t, Var))


class Pattern:
    """The matching part of a query or pattern update. Hashable by content, so identical
    persistent queries (same pattern, same modifiers) share one evaluation."""


    def __init__(self, request: Request) -> None:
        opts = request.options
        self.where: tuple[Triple, ...] = tuple(request.where or ())
        optional = request.optional if request.tx.is_query else opts.optional
        self.optional: tuple[tuple[Triple, ...], ...] = tuple(tuple(g) for g in optional or ())
        self.filters: tuple[Expression, ...] = tuple(opts.filters or ())
        self.binds = tuple(opts.binds or ())
        self.graphs: tuple[IRI, ...] | None = (
            None if opts.query_graphs is None else tuple(opts.query_graphs))
        self.nvars = 1 + max(_all_var_indexes(request), default=-1)
        self.key = (self.where, self.optional, self.filters, self.binds, self.graphs)
        self._texts: dict = {}

    @cached_property
    def triples(self) -> tuple[Triple, ...]:
        """Every triple pattern whose matches can change the solutions (for the index), in
        the order of `sib.screen.probes`."""
        return self.where + tuple(t for g in self.optional for t in g)

    @cached_property
    def probes(self) -> list[Probe]:
        """`sib.screen.probes`, by position in `triples`."""
        return probes(self)

    @cached_property
    def unconditional(self) -> frozenset[int]:
        """Positions in `triples` whose every match the screen lets through
        (`sib.screen.unconditional`)."""
        return frozenset(i for i, probe in enumerate(self.probes) if unconditional(probe))

    def sparql(self, projection: int, modifier: SolutionModifier | None) -> str:
        """SELECT text projecting variables 0 … projection-1 (cached per projection/modifier)."""
        text = self._texts.get((projection, modifier))
        if text is None:
            request = Request(Tx.SELECT, 0, projection=projection, where=self.where,
                              optional=self.optional, options=Options(
                                  filters=self.filters or None, binds=self.binds or None,
                                  modifier=modifier))
            try:
                text = render(request, dataset_clauses=False)
            except NoSparqlEquivalent as exc:
                status = (Status.INVALID_OPTION_FORMAT
                          if exc.feature in _OPTION_FEATURES else Status.INVALID_DATA_FORMAT)
                raise RequestError(status, str(exc)) from None
            except SparqlError as exc:
                raise RequestError(Status.INVALID_DATA_FORMAT, str(exc)) from None
            self._texts[(projection, modifier)] = text
        return text

    def solutions(self, store: QuadStore, projection: int | None = None,
                  modifier: SolutionModifier | None = None) -> list[Solution]:
        """Solutions projected on variables 0 … projection-1 (default: every variable)."""
        return list(self.rows(store, projection, modifier))

    def rows(self, store: QuadStore, projection: int | None = None,
             modifier: SolutionModifier | None = None) -> Iterator[Solution]:
        """`solutions`, one at a time as the store yields them."""
        if projection is None:
            projection = self.nvars
        rows = self.store_rows(store, projection, modifier)
        if not projection:
            return (() for _ in rows)
        return map(row_from_ox, rows)

    def store_rows(self, store: QuadStore, projection: int,
                   modifier: SolutionModifier | None = None) -> Iterator:
        """`rows` as pyoxigraph gives them (`row_from_ox` turns one into a `Solution`): a
        reader keeps only the few it answers with, never a term object for the rest."""
        text = self.sparql(projection, modifier)
        if self.graphs is None:
            kwargs = {"use_default_graph_as_union": True}
        else:
            kwargs = {"default_graph": [graph_to_ox(g) for g in self.graphs]}
        try:
            rows = store.oxigraph.query(text, **kwargs)
        except SyntaxError as exc:  # e.g. BIND to a variable the pattern already binds
            raise RequestError(Status.INVALID_OPTION_FORMAT, f"not evaluable: {exc}") from None
        return checked(rows)  # the time budget in force (`sib.budget`)


def row_from_ox(row) -> Solution:
    return tuple([None if t is None else from_ox(t) for t in row])


def _all_var_indexes(request: Request):
    opts = request.options
    graphs = [request.where, request.template, request.delete, request.insert,
              *(request.optional or ()), *(opts.optional or ())]
    for g in graphs:
        for t in g or ():
            for term in t:
                if isinstance(term, Var):
                    yield term.index
    for expr in opts.filters or ():
        yield from _expr_vars(expr)
    for b in opts.binds or ():
        yield b.var
        yield from _expr_vars(b.expr)
    if request.projection:
        yield request.projection - 1
    mod = opts.modifier
    if mod is not None and mod.order_var is not None:
        yield mod.order_var
