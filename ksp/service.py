"""The seam between the server adapters (`transports/`) and the SIB (`sib/`): both import it,
neither imports the other (`sib/cli.py`, the composition root, aside; tests/test_layers.py).

This docstring is the interface's documentation:

- An adapter decodes and deduplicates requests with `ksp.session.SIBSession` and hands each new
  one to a `Service` (`submit`) together with a `Channel` that routes its answers back.
  Retransmitted duplicates never reach the service: the session answers them from its cache.
- `submit` must not block: the service queues the request and answers through the channel
  later — exactly one `respond` per request, then for persistent operations any number of
  `indicate`, the last one with a non-OK status (e.g. TERMINATED) ending it, and `end`.
- Channels are bound to (transport, KP identity, TID), not to a socket, so a KP that changes
  address keeps its persistent operations (wire-format R12), and the SIB can rebuild one after
  a restart (`transports.Server.channel(...)`, then `channel.restore(state)`).
- Each persistent operation's delivery has one owner, a `ksp.delivery.Delivery` the channel's
  side holds: sequence number, endpoint, awaiting-ACK state, digest of the last result. The
  adapter does the rest of delivery (retransmission until ACKed, superseding older INDs); when
  IND retries run out it calls `Service.kp_unreachable(kp, tid)` and the service decides (the
  SIB ends the KP's operations, each with a final TERMINATED IND). A journal reads the state with `export()` and a restarted
  SIB hands it back with `restore(state)`; the SIB never asks a transport anything else.
- A new kind of KSP subscriber is a new `Channel` holding a `Delivery`, and nothing in the SIB
  changes (`sib.testing.RecordingChannel`, tests/test_delivery.py); the bridge is another
  `Service` behind the same transports and channels.
- The SEPA gate's WebSocket subscriptions are not channels: a SEPA notification is the
  difference from the one before, so none may be superseded, and `sib.sepa` delivers them with
  its own registry, sequence numbers and per-socket queue (docs/sepa.md, "How notifications
  reach a socket").
"""
from __future__ import annotations

from collections.abc import Hashable
from typing import Protocol

from .codes import Status
from .delivery import DeliveryState
from .model import Request, Response
from .secure import SealerTable
from .session import KPIdentity

__all__ = ["Authenticator", "Channel", "Service"]


class Channel(Protocol):
    """Where the answers to one request go."""

    transport: str  # "udp" | "tcp" | "coap"
    kp: KPIdentity
    tid: int

    def respond(self, response: Response) -> None:
        """The RES of this request; call exactly once per request (NON included: the session
        drops an OK RES without result for NON, as the paper says)."""

    def indicate(self, response: Response) -> None:
        """Persistent operations: an IND carrying the full current result (status OK), or with a
        non-OK status (e.g. Status.TERMINATED) the last IND that ends the operation. The session
        assigns sequence numbers, retransmits until ACKed, supersedes older INDs."""

    def end(self) -> None:
        """Forget this persistent op's delivery state (no more retransmissions); idempotent."""

    #: The most bytes one RES can hold over this channel (one datagram), or None: a SIB need
    #: not compute what cannot be sent. Optional (read with `getattr`).
    payload_cap: int | None

    #: Whether its delivery can outlive the process: a journal keeps it and a restarted SIB
    #: resumes it (UDP: the KP keeps its IDs); False where the KP re-subscribes anyway (a TCP
    #: connection, a CoAP observation, a WebSocket).
    durable: bool

    def export(self) -> DeliveryState | None:
        """The state of this persistent op's delivery (None: it has none yet), for a journal."""

    def restore(self, state: DeliveryState) -> None:
        """Take back a delivery `export` gave (after a restart), before any `indicate`."""


class Authenticator(Protocol):
    """A service's verdicts on CREDENTIALS, asked by the sessions before their duplicate caches
    (`ksp.session.Authenticate`); the SIB's is `sib.auth.Authenticator`."""

    def verdict(self, kp_id: bytes, password: str, source: Hashable) -> Status | None:
        """Cheap: OK, a refusal (ACCESS_DENIED, LIMIT_EXCEEDED), or None: not known yet."""

    async def verify(self, kp_id: bytes, password: str, source: Hashable) -> None:
        """The slow check, off the request path, after which `verdict` decides."""


class Service(Protocol):
    """What a server adapter feeds. The SIB and the bridge implement it; a class that derives
    from it explicitly gets the capabilities below as None (it has none of them)."""

    #: Who may speak, asked by every adapter before its duplicate cache; None: every KP ID is
    #: taken at its word.
    authenticator: Authenticator | None = None

    #: The sealed mode's state per KP (wire format 13), one table shared by the UDP and CoAP
    #: sessions so a KP has one replay window whatever the transport; None: no sealed mode.
    sealers: SealerTable | None = None

    def submit(self, request: Request, channel: Channel) -> None:
        """A new (deduplicated) request; must not block: queue it and answer via channel later.
        Retransmitted duplicates never reach submit (the session answers them from its cache)."""

    def kp_unreachable(self, kp: KPIdentity, tid: int) -> None:
        """IND retries for (kp, tid) ran out: the owner decides (the SIB ends the KP's ops, each
        with a final TERMINATED IND)."""
