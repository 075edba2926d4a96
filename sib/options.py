"""Settings grouped in frozen dataclasses (`sib.sepa.GateLimits`, `bridge.service.BridgeOptions`)
and the helper that lets a constructor taking such groups still take their fields one keyword
at a time, as callers wrote them before the groups existed."""
from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

__all__ = ["apply_keywords"]


def apply_keywords(owner: str, keywords: dict[str, Any], *groups: Any) -> list[Any]:
    """Each of `groups` (frozen dataclasses) with the `keywords` that name one of its fields put
    in; a keyword that names none is a TypeError, as Python raises for an unknown keyword."""
    left = dict(keywords)
    settled = []
    for group in groups:
        mine = {f.name: left.pop(f.name) for f in fields(group) if f.name in left}
        settled.append(replace(group, **mine) if mine else group)
    if left:
        raise TypeError(f"{owner}() got unexpected keyword arguments: {', '.join(sorted(left))}")
    return settled
