"""Persistent operations at the SIB: subscriptions (persistent SELECT/ASK/CONSTRUCT, each a
`sib.engine.Operation` in a `QueryGroup`, so that identical ones share one evaluation) and rules
(persistent DELETE/INSERT/UPDATE)."""
from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from ksp.model import Request
from ksp.service import Channel

from .engine import Group, OpKey, Operation
from .pattern import Pattern

__all__ = ["Channel", "OpKey", "QueryGroup", "Rule", "group_key"]


@dataclass(eq=False, kw_only=True)
class QueryGroup(Group):
    """Persistent queries asking exactly the same thing: one evaluation, one result (`last`, the
    one last sent), an IND to each member when the result changes (`sib.engine.sees`). `id`
    orders groups by creation."""

    id: int
    request: Request
    pattern: Pattern
    #: (shape key, constants) for evaluation with same-shape groups (`sib.shapes`), or None.
    shape: tuple | None = None


def group_key(request: Request, pattern: Pattern) -> Hashable:
    return (request.tx.base, request.projection, request.template, request.options.modifier,
            pattern.key)


@dataclass(eq=False, kw_only=True)
class Rule(Operation):
    """A persistent DELETE/INSERT/UPDATE. `last` is the solution set it last saw; it fires
    when the set changed and is not empty. `number` orders rules by registration."""

    pattern: Pattern
    ended: bool = False
