"""How large a SIB session's tables grow and how long it keeps what it gave up on
(`SessionOptions`): one frozen value, made once (e.g. from a SIB's configuration) and passed
as it is by every adapter to every session it starts."""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SessionOptions"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionOptions:
    """The bounds of a `SIBSession` (`ksp.session.SIBSession(options=...)`); every table is
    bounded, the oldest entry goes first. `transports.Server.start(options=...)` gives the
    same value to each listener. Retransmission timing is `Timing`'s, passed beside it."""

    #: Entries in each table (executing requests, deliveries, bindings, the duplicate cache,
    #: ACK routes, tombstones): at least the number of persistent operations the SIB holds.
    max_entries: int = 65_536
    #: Bytes of cached RES in the duplicate cache.
    max_cache_bytes: int = 8 << 20
    #: Requests held waiting for a verdict on their credentials; over it, refused (0x0a).
    max_held: int = 1024
    #: Bytes of unacknowledged INDs kept for retransmission (UDP), across every KP: past it the
    #: oldest one is given up on (`KPUnreachable`), so memory is bounded in bytes too.
    max_ind_bytes: int = 64 << 20
    #: Seconds a final IND given up on is kept, to send it again when its KP is heard from
    #: (UDP; 0: not kept).
    tombstone_lifetime: float = 86_400.0
    #: Until a source address is validated, at most this many times the bytes received from it
    #: are sent to it (UDP, wire format 14; 0: no limit, every address taken as validated).
    amplification_factor: int = 3
    #: Validated addresses kept, as many budgets of unvalidated ones, and as many requests
    #: answered ECHO REQUIRED unexecuted, whose copies get it again (UDP).
    max_addresses: int = 4096

    def __post_init__(self) -> None:
        if self.max_entries < 1:
            raise ValueError(f"max_entries {self.max_entries} must be >= 1")
        if self.max_addresses < 1:
            raise ValueError(f"max_addresses {self.max_addresses} must be >= 1")
        for name in ("max_cache_bytes", "max_held", "max_ind_bytes", "amplification_factor"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} {getattr(self, name)} must be >= 0")
