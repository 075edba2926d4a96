"""How much the bridge takes and how it waits for its broker: `Bridge(broker, options=...)`."""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BridgeOptions"]


@dataclass(frozen=True, slots=True, kw_only=True)
class BridgeOptions:
    """The bridge's caps and its pace of reconnection (`ksp-bridge`'s configuration)."""

    #: Requests waiting for their KP's earlier ones, all KPs; past it LIMIT_EXCEEDED.
    max_queued: int = 10_000
    #: Persistent operations of one KP and of all (equal queries share a broker
    #: subscription, but each is an operation).
    max_persistent_per_kp: int = 256
    max_persistent: int = 50_000
    #: Subscriptions made at the broker.
    max_subscriptions: int = 10_000
    #: The first and the longest wait between attempts to reach the broker's socket again.
    backoff: float = 0.25
    max_backoff: float = 15.0
    #: The SIB's cascade protection (docs/sib.md).
    rule_firing_limit: int = 16
    cascade_limit: int = 1024
