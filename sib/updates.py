"""From an update request to the delta it makes, computed against the store before anything
is written (so a refusal changes nothing, and the delta is exact).

Semantics (§5.2, §5.3, §7.6): DELETE removes from the DELETE GRAPH graphs, else from every
graph; INSERT writes to the INSERT GRAPH graphs, else the default graph; UPDATE deletes then
inserts (a quad both deleted and inserted stays, and is no change). Blank nodes in DATA inserts
and insert templates are fresh per request (per solution for templates).
"""
from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterable

from ksp.codes import Status, Tx
from ksp.model import Request
from ksp.terms import DEFAULT_GRAPH, IRI, BNode, Literal, Triple, Var

from .errors import RequestError
from .oxterms import Quad, canonical
from .store import Delta, QuadStore

Fresh = Callable[[], str]


def fresh_labels() -> Fresh:
    """Blank-node labels no request can have used before (unique across restarts)."""
    prefix = uuid.uuid4().hex[:12]
    counter = itertools.count()
    return lambda: f"n{prefix}{next(counter)}"


def instantiate(t: Triple, solution: tuple, bnodes: dict[str, BNode] | None,
                fresh: Fresh | None) -> Triple | None:
    """The concrete triple of template `t` under `solution`; None when a variable is unbound
    or the result is not an RDF triple (SPARQL skips such template triples)."""
    out = []
    for term in t:
        if isinstance(term, Var):
            term = solution[term.index] if term.index < len(solution) else None
            if term is None:
                return None
        elif isinstance(term, BNode):
            if bnodes is None:
                return None  # blank nodes in a DELETE template match nothing
            node = bnodes.get(term.label)
            if node is None:
                node = bnodes[term.label] = BNode(fresh())
            term = node
        else:
            term = canonical(term)
        out.append(term)
    s, p, _ = out
    if isinstance(s, Literal) or not isinstance(p, IRI):
        return None
    return Triple(*out)


def _deletions(store: QuadStore, triples: Iterable[Triple], graphs) -> set[Quad]:
    found: set[Quad] = set()
    for s, p, o in triples:
        if graphs is None:
            found.update(store.match(s, p, o))
        else:
            found.update(q for g in graphs if store.contains(q := (s, p, o, g)))
    return found


def net_delta(store: QuadStore, removing: set[Quad], adding: Iterable[Quad]) -> Delta:
    """What `DELETE removing; INSERT adding` really changes (`removing` holds existing quads)."""
    added: dict[Quad, None] = {}
    for q in adding:
        if q not in added and q not in removing and not store.contains(q):
            added[q] = None
    adding_set = set(adding) if not isinstance(adding, (set, frozenset)) else adding
    removed = tuple(q for q in removing if q not in adding_set)
    return Delta(tuple(added), removed)


def _insert_graphs(req: Request) -> tuple[IRI, ...]:
    return tuple(req.options.insert_graphs or (DEFAULT_GRAPH,))


def data_delta(store: QuadStore, req: Request, fresh: Fresh) -> Delta:
    """DELETE DATA / INSERT DATA / UPDATE DATA."""
    removing: set[Quad] = set()
    if req.delete is not None:
        concrete = [Triple(*(canonical(x) for x in t)) for t in req.delete]
        removing = _deletions(store, concrete, req.options.delete_graphs)
    adding: list[Quad] = []
    if req.insert is not None:
        bnodes: dict[str, BNode] = {}
        targets = _insert_graphs(req)
        for t in req.insert:
            c = instantiate(t, (), bnodes, fresh)
            adding.extend((c.s, c.p, c.o, g) for g in targets)
    return net_delta(store, removing, adding)


def template_delta(store: QuadStore, req: Request, solutions: list[tuple], fresh: Fresh) -> Delta:
    """DELETE / INSERT / UPDATE (and a persistent rule's firing) over `solutions`."""
    removing: set[Quad] = set()
    adding: list[Quad] = []
    if req.delete is not None:
        concrete = {c for sol in solutions for t in req.delete
                    if (c := instantiate(t, sol, None, None)) is not None}
        removing = _deletions(store, concrete, req.options.delete_graphs)
    if req.insert is not None:
        targets = _insert_graphs(req)
        for sol in solutions:
            bnodes: dict[str, BNode] = {}
            for t in req.insert:
                c = instantiate(t, sol, bnodes, fresh)
                if c is not None:
                    adding.extend((c.s, c.p, c.o, g) for g in targets)
    return net_delta(store, removing, adding)


class GraphChange:
    """A graph-management request's effect: a delta plus named graphs created and dropped."""

    __slots__ = ("delta", "create", "drop")

    def __init__(self, delta: Delta, create=(), drop=()) -> None:
        self.delta, self.create, self.drop = delta, tuple(create), tuple(drop)


def _triples(store: QuadStore, g: IRI) -> set[Triple]:
    return {Triple(*q[:3]) for q in store.match(g=g)}


def management(store: QuadStore, req: Request) -> GraphChange:
    """CREATE / DROP / COPY / MOVE / ADD (§5.3, SPARQL 1.1 Update §3.2)."""
    tx = req.tx
    if tx is Tx.CREATE:
        names = list(req.graphs)
        if len(set(names)) != len(names) or any(store.graph_exists(g) for g in names):
            raise RequestError(Status.GRAPH_EXISTS, "CREATE of a graph that exists")
        return GraphChange(Delta(), create=names)
    if tx is Tx.DROP:
        names = list(dict.fromkeys(req.graphs))
        for g in names:
            if not store.graph_exists(g):
                raise RequestError(Status.NO_SUCH_GRAPH, f"DROP of {g!s}: no such graph")
        return emptied(store, names, drop=True)
    if not store.graph_exists(req.source):
        raise RequestError(Status.NO_SUCH_GRAPH, f"{tx.name} from {req.source!s}: no such graph")
    return transfer(store, tx.name, req.source, req.target)


def emptied(store: QuadStore, graphs: list[IRI], *, drop: bool) -> GraphChange:
    """CLEAR (`drop=False`) or DROP of existing graphs: their quads go, and DROP forgets the
    named ones too (the default graph always exists)."""
    removed = tuple(q for g in graphs for q in store.match(g=g))
    return GraphChange(Delta((), removed),
                       drop=[g for g in graphs if g != DEFAULT_GRAPH] if drop else ())


def transfer(store: QuadStore, kind: str, src: IRI, dst: IRI) -> GraphChange:
    """ADD, COPY or MOVE (`kind`) of an existing graph `src` to `dst` (SPARQL 1.1 Update
    §3.2.3-3.2.5): KSP's graph management and the SEPA gate's updates alike."""
    if src == dst:
        return GraphChange(Delta())
    source, target = _triples(store, src), _triples(store, dst)
    create = [dst] if dst != DEFAULT_GRAPH and not store.graph_exists(dst) else []
    added = tuple((*t, dst) for t in source - target)
    removed: tuple[Quad, ...] = ()
    drop: list[IRI] = []
    if kind in ("COPY", "MOVE"):
        removed = tuple((*t, dst) for t in target - source)
    if kind == "MOVE":
        removed += tuple((*t, src) for t in source)
        if src != DEFAULT_GRAPH:
            drop.append(src)
    return GraphChange(Delta(added, removed), create=create, drop=drop)
