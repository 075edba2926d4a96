"""Which of a device's updates can reach the bridge's subscriptions at all.

After an update the bridge reads the notifications it caused before it answers (`Subscriber.
flush`: one more round trip on the broker's socket), so that a device gets its INDs before
its RES, as from a SIB. An update none of whose written triples can match a triple pattern of
any subscription cannot change any result, so that round trip is skipped for it — a sensor
writing its own value does not wait on the subscriptions to other sensors.

A written triple (an INSERT or DELETE template; variables and blank nodes match anything) can
match a pattern (variables and blank nodes likewise) when they agree on every position where
both have a constant. Patterns are counted under their *mask* (the positions they fix) and,
for each part of that mask, the constants there; a written triple is checked once per mask in
use (at most 8) against the count of the part of the mask it fixes too. Graphs are not looked
at (a written triple in another graph is taken as a match), and graph management always
reads: both only cost a round trip, never a missed IND. Soundness: a result depends only on
the triples that match its patterns (sib/index.py says the same for the SIB's index).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from ksp.terms import BNode, Literal, Triple, Var
from sib import canonical

__all__ = ["Screen"]

#: mask -> every sub-mask of it (the positions a written triple fixes too).
_SUBMASKS = {m: tuple(s for s in range(8) if s & m == s) for m in range(8)}


#: Stands for a written literal where no pattern has a literal constant: it matches no key,
#: and the literal (a new reading, each time) is not canonicalised for nothing.
_UNMATCHED = object()


def _fixed(t: Triple, literals: Counter | None = None) -> tuple[int, tuple]:
    """(mask of constant positions, their canonical terms by position; None elsewhere).
    `literals`: for a written triple, the positions where patterns have literal constants."""
    mask, terms = 0, [None, None, None]
    for i, term in enumerate(t):
        if not isinstance(term, (Var, BNode)):
            mask |= 1 << i
            if literals is not None and isinstance(term, Literal) and not literals[i]:
                terms[i] = _UNMATCHED
            else:
                terms[i] = canonical(term)
    return mask, tuple(terms)


def _key(terms: tuple, part: int) -> tuple:
    return tuple(terms[i] for i in range(3) if part >> i & 1)


class Screen:
    def __init__(self) -> None:
        # (pattern mask, sub-mask) -> the constants at the sub-mask -> patterns counted
        self._counts: dict[tuple[int, int], Counter] = {}
        self._masks: Counter = Counter()  # pattern masks in use
        self._literals: Counter = Counter()  # position -> patterns with a literal there

    def __len__(self) -> int:
        """Triple patterns counted."""
        return sum(self._masks.values())

    def add(self, patterns: Iterable[Triple], sign: int = 1) -> None:
        for t in patterns:
            mask, terms = _fixed(t)
            for i, term in enumerate(t):
                if isinstance(term, Literal):
                    self._literals[i] += sign
            self._masks[mask] += sign
            if self._masks[mask] <= 0:
                del self._masks[mask]
            for part in _SUBMASKS[mask]:
                counts = self._counts.setdefault((mask, part), Counter())
                key = _key(terms, part)
                counts[key] += sign
                if counts[key] <= 0:
                    del counts[key]

    def remove(self, patterns: Iterable[Triple]) -> None:
        self.add(patterns, -1)

    def may_touch(self, written: Iterable[Triple]) -> bool:
        """Whether a triple matching one of `written` can match a pattern counted here."""
        for t in written:
            fixed, terms = _fixed(t, self._literals)
            for mask in self._masks:
                part = mask & fixed
                if self._counts[mask, part].get(_key(terms, part)):
                    return True
        return False
