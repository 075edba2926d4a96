"""The index of persistent operations' triple patterns: from the quads an update changed to the
operations those quads can affect, at a cost that grows with the changed quads, not with the
number of operations.

A triple pattern is filed under its *mask* (which of s, p, o are constants; variables and blank
nodes are wildcards) and the tuple of its constants. A changed quad is looked up once per mask
in use (at most 8): the key is the quad projected on the mask. A hit is a candidate when the
quad's graph is in the pattern's scope (its QUERY GRAPH list; no list = every graph).

Soundness: a pattern's solutions depend only on quads that match one of its triple patterns in
scope; if no changed quad does, the solutions are unchanged. So evaluating only the candidates
sends exactly what evaluating everything would (checked by a randomized test against the naive
mode).
"""
from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator

from ksp.terms import IRI, BNode, Triple, Var

from .oxterms import Quad, canonical

_POSITIONS = {mask: tuple(i for i in range(3) if mask >> i & 1) for mask in range(8)}


def _mask_key(t: Triple) -> tuple[int, tuple]:
    mask = 0
    consts = []
    for i, term in enumerate(t):
        if not isinstance(term, (Var, BNode)):
            mask |= 1 << i
            consts.append(canonical(term))
    return mask, tuple(consts)


class PatternIndex:
    def __init__(self) -> None:
        # mask -> key -> owner -> graph scopes (None = every graph), one per pattern filed
        self._tables: dict[int, dict[tuple, dict[Hashable, list]]] = {}
        self._filed: dict[Hashable, list[tuple[int, tuple]]] = {}

    def __len__(self) -> int:
        return len(self._filed)

    def add(self, owner: Hashable, triples: Iterable[Triple],
            graphs: Iterable[IRI] | None) -> None:
        """File `owner`'s triple patterns; `hits` reports the position of the one matched."""
        scope = None if graphs is None else frozenset(graphs)
        filed = self._filed.setdefault(owner, [])
        for position, t in enumerate(triples):
            mask, key = _mask_key(t)
            owners = self._tables.setdefault(mask, {}).setdefault(key, {})
            owners.setdefault(owner, []).append((scope, position))
            filed.append((mask, key))

    def remove(self, owner: Hashable) -> None:
        for mask, key in self._filed.pop(owner, ()):
            table = self._tables.get(mask)
            if table is None:
                continue
            owners = table.get(key)
            if owners is not None and owners.pop(owner, None) is not None and not owners:
                del table[key]
                if not table:
                    del self._tables[mask]

    def candidates(self, quads: Iterable[Quad]) -> set[Hashable]:
        return {owner for owner, _, _ in self.hits(quads)}

    def hits(self, quads: Iterable[Quad]) -> Iterator[tuple[Hashable, int, Quad]]:
        """(owner, position of the triple pattern matched, quad) for each match in scope."""
        for q, owners in self.keys(quads):
            g = q[3]
            for owner, filed in owners.items():
                for scope, position in filed:
                    if scope is None or g in scope:
                        yield owner, position, q

    def keys(self, quads: Iterable[Quad]) -> Iterator[tuple[Quad, dict[Hashable, list]]]:
        """`hits` a key at a time: (quad, {owner: [(graph scope or None, position)]}) for each
        key a quad meets, its scopes not checked yet: a caller done with an owner (already a
        candidate) skips it without looking at its patterns."""
        tables = list(self._tables.items())
        for q in quads:
            for mask, table in tables:
                owners = table.get(tuple(q[i] for i in _POSITIONS[mask]))
                if owners:
                    yield q, owners
