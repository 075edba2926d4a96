"""HTTP content negotiation for the gate: which of the media types it can send an Accept
header prefers (the query results of `sib.sepa.gate`, the graphs of `sib.sepa.graph_store`)."""
from __future__ import annotations

from collections.abc import Iterable

__all__ = ["accepted"]


def accepted(header: str, offers: Iterable[str]) -> str | None:
    """The offer the Accept header likes best (the first offer on a tie); None if none."""
    offers = list(offers)
    if not header.strip():
        return offers[0]
    best, best_q = None, 0.0
    for part in header.split(","):
        fields = [f.strip() for f in part.split(";")]
        media, q = fields[0].lower(), 1.0
        for f in fields[1:]:
            if f.startswith("q="):
                try:
                    q = float(f[2:])
                except ValueError:
                    q = 0.0
        if q <= best_q:
            continue
        if media in ("*/*", ""):
            match = offers[0]
        elif media.endswith("/*"):
            match = next((o for o in offers if o.startswith(media[:-1])), None)
        else:
            match = media if media in offers else None
        if match is not None:
            best, best_q = match, q
    return best
