"""The knowledge base: a pyoxigraph store (on disk in a data directory, or in memory) whose
write path applies a precomputed delta atomically and reports exactly what changed.

The delta is computed *before* anything is written (`sib.updates`): existence checks for DATA
operations, instantiated templates for pattern updates, quad lists for graph management. So a
request that is refused changes nothing, and the quads a write reports are the quads that
really appeared or disappeared — what the persistent-operation index is fed with.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import pyoxigraph as ox

from ksp.terms import DEFAULT_GRAPH, IRI, BNode, Term

from .oxterms import Quad, graph_from_ox, graph_to_ox, quad_from_ox, quad_to_ox, to_ox


class Delta(NamedTuple):
    """Quads that appeared and disappeared in one write (disjoint; both really changed)."""

    added: tuple[Quad, ...] = ()
    removed: tuple[Quad, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.added or self.removed)

    @property
    def quads(self) -> tuple[Quad, ...]:
        return self.added + self.removed


EMPTY_DELTA = Delta()


def _has_bnode(quads: Iterable[Quad]) -> bool:
    return any(isinstance(t, BNode) for q in quads for t in q[:3])


def _data_block(quads: Iterable[Quad]) -> str:
    lines = []
    for q in quads:
        triple = f"{to_ox(q[0])} {to_ox(q[1])} {to_ox(q[2])} ."
        lines.append(triple if q[3] == DEFAULT_GRAPH else f"GRAPH <{q[3]}> {{ {triple} }}")
    return "\n".join(lines)


class QuadStore:
    """The store, in ksp terms. `path=None` keeps everything in memory."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path
        self._store = ox.Store(path) if path is not None else ox.Store()

    @property
    def oxigraph(self) -> ox.Store:
        """The underlying pyoxigraph store (for query evaluation)."""
        return self._store

    # -- reads ----------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._store)

    def contains(self, q: Quad) -> bool:
        return quad_to_ox(q) in self._store

    def match(self, s: Term | None = None, p: Term | None = None, o: Term | None = None,
              g: IRI | None = None) -> list[Quad]:
        """Quads matching the constants given (None = any; g=None = every graph)."""
        it = self._store.quads_for_pattern(
            None if s is None else to_ox(s), None if p is None else to_ox(p),
            None if o is None else to_ox(o), None if g is None else graph_to_ox(g))
        return [quad_from_ox(q) for q in it]

    def exists(self, s: Term | None = None, p: Term | None = None, o: Term | None = None,
               g: IRI | None = None) -> bool:
        """Is there at least one quad matching the constants given?"""
        it = self._store.quads_for_pattern(
            None if s is None else to_ox(s), None if p is None else to_ox(p),
            None if o is None else to_ox(o), None if g is None else graph_to_ox(g))
        return next(it, None) is not None

    def graph_exists(self, g: IRI) -> bool:
        """The default graph always exists; a named graph once created or written to."""
        return g == DEFAULT_GRAPH or self._store.contains_named_graph(graph_to_ox(g))

    def named_graphs(self) -> list[IRI]:
        return [graph_from_ox(g) for g in self._store.named_graphs()]

    # -- writes ---------------------------------------------------------------------------

    def apply(self, delta: Delta, create: Iterable[IRI] = (), drop: Iterable[IRI] = ()) -> None:
        """Write `delta` (quads removed, then added) and create/drop named graphs, as one
        transaction (a single SPARQL update). Blank nodes cannot be named in SPARQL update text,
        so a delta holding one is written quad by quad instead: still all-or-nothing for every
        refusal (those happen before this call), but not crash-atomic."""
        create, drop = list(create), list(drop)
        if not (delta or create or drop):
            return
        if _has_bnode(delta.quads):
            store = self._store
            for g in drop:
                store.remove_graph(graph_to_ox(g))
            for q in delta.removed:
                store.remove(quad_to_ox(q))
            store.extend(quad_to_ox(q) for q in delta.added)
            for g in create:
                store.add_graph(graph_to_ox(g))
            return
        parts = [f"DROP SILENT GRAPH <{g}>" for g in drop]
        if delta.removed:
            parts.append(f"DELETE DATA {{\n{_data_block(delta.removed)}\n}}")
        if delta.added:
            parts.append(f"INSERT DATA {{\n{_data_block(delta.added)}\n}}")
        parts += [f"CREATE SILENT GRAPH <{g}>" for g in create]
        self._store.update(" ;\n".join(parts))

    def load(self, quads: Iterable[Quad]) -> None:
        """Bulk-load quads (no delta, no notifications): for seeding a store."""
        self._store.bulk_extend(quad_to_ox(q) for q in quads)

    def flush(self) -> None:
        self._store.flush()
