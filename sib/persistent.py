"""Persistent operations: subscriptions (persistent SELECT/ASK/CONSTRUCT, grouped so that
identical ones share one evaluation) and rules (persistent DELETE/INSERT/UPDATE)."""
from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from ksp.model import Request, Result
from ksp.session import KPIdentity
from ksp.service import Channel

from .engine import OpKey
from .pattern import Pattern


@dataclass(eq=False)
class Subscription:
    kp: KPIdentity
    tid: int
    channel: Channel
    group: "QueryGroup"

    @property
    def request(self) -> Request:
        return self.group.request


@dataclass(eq=False)
class QueryGroup:
    """Persistent queries asking exactly the same thing: one evaluation, one result, an IND
    to each member when the result changes (`sib.engine.sees`). `id` orders groups by
    creation; `last` is the result last sent."""

    id: int
    request: Request
    pattern: Pattern
    last: Result | None = None
    members: dict[OpKey, Subscription] = field(default_factory=dict)
    #: (shape key, constants) for evaluation with same-shape groups (`sib.shapes`), or None.
    shape: tuple | None = None


def group_key(request: Request, pattern: Pattern) -> Hashable:
    return (request.tx.base, request.projection, request.template, request.options.modifier,
            pattern.key)


@dataclass(eq=False)
class Rule:
    """A persistent DELETE/INSERT/UPDATE. `last` is the solution set it last saw; it fires
    when the set changed and is not empty. `id` orders rules by registration."""

    id: int
    kp: KPIdentity
    tid: int
    channel: Channel
    request: Request
    pattern: Pattern
    last: Any = None
    ended: bool = False
