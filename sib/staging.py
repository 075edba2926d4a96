"""A write request of several operations, worked out before anything of it is written.

A SEPA update may hold any number of operations, and a Graph Store PUT is three (CLEAR, CREATE,
INSERT DATA); each operation reads the store as the ones before it left it. `Staged` is that
view — the store plus what the request's operations so far change — and what they change in
all is then written as one transaction (`QuadStore.apply`). Reads run beside the writes on
snapshots (`sib.readers`), so a reader sees the store before a request or after it, never
between two of its operations, and nothing of a request that fails: a failed request has
written nothing, so nothing needs taking back.

Existence checks and graph contents come from the store corrected by the staged changes. A
WHERE (`query`) is evaluated by pyoxigraph: on the store itself when nothing staged can change
its solutions — no staged quad matches one of its triple patterns (`sib.sepa.screen`) and the
named graphs are the store's — else on a scratch store holding the quads its patterns can read
(the whole view, for a WHERE that cannot be screened).
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyoxigraph as ox

from ksp.terms import DEFAULT_GRAPH, IRI, Term, Triple

from .oxterms import Quad, graph_to_ox, quad_from_ox, quad_to_ox
from .store import Delta, QuadStore
from .updates import GraphChange

__all__ = ["Staged"]


def _matches(q: Quad, s: Term | None, p: Term | None, o: Term | None, g: IRI | None) -> bool:
    return ((s is None or q[0] == s) and (p is None or q[1] == p)
            and (o is None or q[2] == o) and (g is None or q[3] == g))


class Staged:
    """The store as a request's operations so far have changed it, with nothing written: the
    read side of `QuadStore` that operations work out their changes against (`stage` adds
    each), and their net effect (`net`) to write once."""

    def __init__(self, store: QuadStore) -> None:
        self.store = store
        self._added: dict[Quad, None] = {}
        self._removed: dict[Quad, None] = {}
        #: Named graphs whose existence the staged changes set: True made, False dropped.
        self._graphs: dict[IRI, bool] = {}
        #: Graphs created and dropped by the operations themselves (not by writing into one).
        self._created: dict[IRI, None] = {}
        self._dropped: dict[IRI, None] = {}

    # -- the read side of QuadStore --------------------------------------------------------

    @property
    def size(self) -> int:
        return self.store.size + len(self._added) - len(self._removed)

    def contains(self, q: Quad) -> bool:
        if q in self._added:
            return True
        return q not in self._removed and self.store.contains(q)

    def match(self, s: Term | None = None, p: Term | None = None, o: Term | None = None,
              g: IRI | None = None) -> list[Quad]:
        removed = self._removed
        found = [q for q in self.store.match(s, p, o, g) if q not in removed]
        found.extend(q for q in self._added if _matches(q, s, p, o, g))
        return found

    def exists(self, s: Term | None = None, p: Term | None = None, o: Term | None = None,
               g: IRI | None = None) -> bool:
        return bool(self.match(s, p, o, g))

    def graph_exists(self, g: IRI) -> bool:
        if g == DEFAULT_GRAPH:
            return True
        made = self._graphs.get(g)
        return self.store.graph_exists(g) if made is None else made

    def named_graphs(self) -> list[IRI]:
        graphs = dict.fromkeys(self.store.named_graphs())
        for g, made in self._graphs.items():
            if made:
                graphs[g] = None
            else:
                graphs.pop(g, None)
        return list(graphs)

    def query(self, text: str, **dataset):
        """pyoxigraph's answer to the query `text` (a WHERE as `SELECT *`) on this view."""
        if not (self._added or self._removed or self._graphs):
            return self.store.query(text, **dataset)
        from .sepa.screen import triple_patterns  # the gate's parsers: only when staged

        patterns = triple_patterns(text)
        if patterns is not None and not self._graph_set_changed() and not any(
                _matches(q, *_constants(tp), None)
                for tp in patterns for q in (*self._added, *self._removed)):
            return self.store.query(text, **dataset)
        return self._scratch(patterns).query(text, **dataset)

    def _graph_set_changed(self) -> bool:
        """Whether the named graphs are others than the store's (a WHERE may read their names:
        `GRAPH ?g {}`)."""
        store = self.store
        return any(made != store.graph_exists(g) for g, made in self._graphs.items())

    def _scratch(self, patterns: list[Triple] | None) -> ox.Store:
        """A store of the quads of this view that `patterns` can match (all of them for None
        or a pattern without a constant), and every named graph."""
        scratch = ox.Store()
        if patterns is None or any(_constants(tp) == (None, None, None) for tp in patterns):
            picked: Iterable[Quad] = self._all()
        else:
            picked = dict.fromkeys(q for tp in patterns for q in self.match(*_constants(tp)))
        scratch.extend(quad_to_ox(q) for q in picked)
        for g in self.named_graphs():
            scratch.add_graph(graph_to_ox(g))
        return scratch

    def _all(self) -> Iterator[Quad]:
        removed = self._removed
        for q in self.store.oxigraph:
            quad = quad_from_ox(q)
            if quad not in removed:
                yield quad
        yield from self._added

    # -- staging -----------------------------------------------------------------------------

    def stage(self, change: GraphChange) -> None:
        """One operation's change, worked out against this view: from now on part of it."""
        for g in change.drop:
            self._graphs[g] = False
            self._dropped[g] = None
        added, removed = self._added, self._removed
        for q in change.delta.removed:
            if q in added:
                del added[q]
            else:
                removed[q] = None
        for q in change.delta.added:
            if q in removed:
                del removed[q]
            else:
                added[q] = None
            if q[3] != DEFAULT_GRAPH:
                self._graphs[q[3]] = True  # writing into a graph makes it
        for g in change.create:
            self._graphs[g] = True
            self._created[g] = None

    @property
    def dropped(self) -> list[IRI]:
        """The graphs an operation dropped, made again since or not."""
        return list(self._dropped)

    def net(self) -> GraphChange:
        """What the staged operations change in all: the quads that appear and disappear, the
        graphs that come to exist (created, or written into, when no quad written now makes
        them) and those dropped that existed."""
        store = self.store
        filled = {q[3] for q in self._added}
        create = [g for g, made in self._graphs.items()
                  if made and (g in self._created or g not in filled)
                  and not store.graph_exists(g)]
        drop = [g for g in self._dropped
                if not self.graph_exists(g) and store.graph_exists(g)]
        return GraphChange(Delta(tuple(self._added), tuple(self._removed)), create, drop)


def _constants(tp: Triple) -> tuple:
    """A triple pattern's constants as `QuadStore.match` takes them (None: any)."""
    return tuple(t if isinstance(t, IRI) else None for t in tp)
