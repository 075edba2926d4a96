"""Screening index candidates with the changed quad bound.

The index matches one triple pattern at a time, so `?s :type :Temp . ?s :value ?v` is a
candidate for every `:value` change anywhere. Screening binds the changed quad into the triple
pattern it matched and asks whether every *other* pattern a solution would need (the rest of
the Where graph; for a pattern in an optional group, the Where graph plus the rest of that
group) still has at least one match under those bindings — a few `quads_for_pattern` existence
probes instead of a full evaluation.

Soundness: a solution that uses the quad must match each of those patterns under the quad's
bindings, so if one has no match at all, no solution uses the quad and the result cannot have
changed because of it. Removed quads are screened against the state *before* the write (the
solutions they could have been part of), added quads against the state after it. FILTER and
BIND only remove or extend solutions, so they are ignored here (that only makes screening more
permissive). Checked by the randomized smart-vs-naive test.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ksp.terms import BNode, IRI, Triple, Var

from .oxterms import Quad

if TYPE_CHECKING:
    from .pattern import Pattern
    from .store import QuadStore

Probe = tuple[Triple, tuple[Triple, ...]]


def probes(pattern: "Pattern") -> list[Probe]:
    """For each triple pattern: the other patterns any solution using it must also match."""
    out: list[Probe] = []
    where = pattern.where
    for i, t in enumerate(where):
        out.append((t, where[:i] + where[i + 1:]))
    for group in pattern.optional:
        for i, t in enumerate(group):
            out.append((t, where + group[:i] + group[i + 1:]))
    return out


def unconditional(probe: Probe) -> bool:
    """`could_use` is True for every quad the index matched to this probe's triple pattern: it
    needs no other pattern and binds no variable twice (so a match always binds it)."""
    tp, others = probe
    free = [term for term in tp if isinstance(term, (Var, BNode))]
    return not others and len(free) == len(set(free))


def _bindings(tp: Triple, quad: Quad) -> dict | None:
    bound: dict = {}
    for term, value in zip(tp, quad):
        if isinstance(term, (Var, BNode)):
            seen = bound.setdefault(term, value)
            if seen != value:
                return None  # ?x :p ?x against s ≠ o
    return bound


def could_use(store: "QuadStore", graphs, tp: Triple, others: tuple[Triple, ...],
              quad: Quad) -> bool:
    """May some solution of the pattern (in this store state) use `quad` for `tp`?"""
    bound = _bindings(tp, quad)
    if bound is None:
        return False
    for other in others:
        s, p, o = (bound.get(x) if isinstance(x, (Var, BNode)) else x for x in other)
        if s is not None and not isinstance(s, (IRI, BNode)) or (
                p is not None and not isinstance(p, IRI)):
            return False  # a literal bound into subject or predicate position matches nothing
        if graphs is None:
            if not store.exists(s, p, o):
                return False
        elif not any(store.exists(s, p, o, g) for g in graphs):
            return False
    return True
