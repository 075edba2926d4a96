"""The contract between the SIB session and its message layer.

`SIBSession` is the part every transport shares: credentials before anything else, where each
KP is, events, and the transaction layer (`ksp.transactions.SibTransactions`). How a message
reaches a KP, how a copy of a request is told from a new one and how an IND is known to have
arrived differ per transport: that is the message layer, one object passed to the session
(`SIBSession(layer=...)`), as aiocoap declares each of its layers in `interfaces.py` and as
aioquic's `H3Connection` composes the QUIC connection rather than subclassing it.

Three implement it: `ksp.session.sib_udp.UdpMessageLayer` (the duplicate cache, IND
retransmission until a KSP ACK covers it, tombstones), `ksp.session.sib_tcp.TcpMessageLayer`
(framed streams, one per connection) and the CoAP server's (`transports/coap.py`: aiocoap under
the duplicate cache, INDs as notifications).

Rules both ways: the session calls only the methods below; a layer calls only the session's
public methods and attributes (`seal`, `emit`, `end_persistent`, `endpoint`, `transactions`,
`stats`, `timing`, `rng`, `options`, `max_entries`). Every method but
`send` and `deliver` has a default that does nothing, right for a layer without that concern.
Keys: `key` of an operation is (KP identity, TID); a request's cache key is (KP identity, TID,
transaction type, hash of its bytes).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable
from typing import TYPE_CHECKING, ClassVar

from ..delivery import Delivery, DeliveryPolicy
from ..model import Ack, Request
from ..transactions import Exchange

if TYPE_CHECKING:
    from .events import KPIdentity
    from .sib import SIBSession

__all__ = ["SibMessageLayer"]


class SibMessageLayer(ABC):
    """A SIB session's message layer (see the module docstring for the rules)."""

    #: How this layer delivers INDs, which the transaction layer numbers and settles by.
    policy: ClassVar[DeliveryPolicy]
    #: Sealed messages (wire format 13) may arrive: an adapter gives the session its sealers.
    sealed: ClassVar[bool] = False
    #: A request waits behind one of its endpoint held for a verdict (a stream keeps order).
    ordered: ClassVar[bool] = False

    session: "SIBSession"

    def attach(self, session: "SIBSession") -> None:
        """Called once by the session this layer serves, when its tables are made."""
        self.session = session

    # -- what goes out ------------------------------------------------------------------------

    @abstractmethod
    def send(self, data: bytes, addr: Hashable, answering: tuple | None = None) -> None:
        """Send KSP message `data` to session address `addr` — sealed with `session.seal`
        (which may say the KP can no longer be reached: then nothing goes). `answering`: the
        cache key of the request it answers, if it is a RES."""

    @abstractmethod
    def deliver(self, key: tuple["KPIdentity", int], d: Delivery, addr: Hashable,
                data: bytes, now: float) -> None:
        """Send IND `data` (numbered as `policy` says) of delivery `d` to `addr`, and see to
        its arrival as this transport does: retransmitted until ACKed, or counted delivered.
        A final IND (`d.final`) that needs no acknowledgement ends its operation here
        (`session.end_persistent`)."""

    def answered(self, ex: Exchange, data: bytes | None) -> None:
        """Request `ex` is answered with RES `data` (sent next), or with nothing (None: an OK
        NON without result, which the paper does not send)."""

    def reachable(self, addr: Hashable) -> bool:
        """Whether anything sent to `addr` can arrive (False: a TCP connection gone; the
        session then reports `KPUnreachable` instead of indicating)."""
        return True

    # -- what comes in ------------------------------------------------------------------------

    def receiving(self, data: bytes, addr: Hashable) -> None:
        """A whole message from `addr` (opened, when it came sealed), before the session
        decodes it."""

    def admits(self, request: Request, addr: Hashable) -> bool:
        """Whether `request` from transport address `addr` may execute now; False: the
        session answers ECHO REQUIRED (a persistent request from an address not yet validated,
        wire format 14)."""
        return True

    def proven(self, addr: Hashable) -> None:
        """Transport address `addr` proved it receives: a verified echo value or sealed
        message came from it (wire format 14)."""

    def duplicate(self, key: tuple, addr: Hashable) -> bool:
        """Whether request `key` is a copy of one seen; if so the layer has dealt with it (its
        cached RES sent again to `addr`, or nothing while it executes) and the session drops
        it. Never true for a layer that cannot receive copies."""
        return False

    def behind(self, key: tuple, number: int) -> int | None:
        """For request `key` numbered `number` (wire format 15; -1: none), not a copy: None
        when it is new, else the first epoch the KP's numbers are new from (the session
        answers NUMBER BEHIND and executes nothing). Never anything but None for a layer that
        cannot receive copies."""
        return None

    def remember(self, key: tuple, ex: Exchange, now: float, number: int = -1) -> None:
        """Request `key` (numbered `number`) is new and executes as `ex`: remember it for its
        copies."""

    def spent(self, kp: "KPIdentity", number: int) -> None:
        """Request `number` of `kp` was answered ECHO REQUIRED, unexecuted: none of its copies
        may execute (wire format 15)."""

    def on_ack(self, ack: Ack, addr: Hashable, now: float) -> None:
        """A KSP ACK from `addr` (a layer whose INDs are ACKed settles them here; the session
        emits nothing for it)."""

    def heard_from(self, addr: Hashable, now: float, request: Request | None = None,
                   kp: "KPIdentity | None" = None) -> None:
        """A message came from `addr` (`request` of `kp`, once its credentials passed)."""

    def heard_of(self, kp: "KPIdentity", addr: Hashable, now: float) -> None:
        """KP ID `kp` is at `addr`: a request of it was answered there (not 0x08)."""

    def moved(self, kp: "KPIdentity", addr: Hashable, now: float) -> None:
        """KP ID `kp` was heard from at a new address `addr`: INDs owed to it go there."""

    # -- deliveries ending, time passing ------------------------------------------------------

    def forget(self, key: tuple["KPIdentity", int], d: Delivery, evicted: bool) -> None:
        """Delivery `d` ended, or was evicted from the session's full table (`evicted`: it
        lives on with its channel): drop what is held for it."""

    def ended(self, key: tuple["KPIdentity", int]) -> None:
        """`session.end_persistent` ended operation `key` (its delivery may be gone already)."""

    def awaiting_ack(self, key: tuple["KPIdentity", int]) -> bool:
        """Whether the newest IND of `key` is kept, unacknowledged."""
        return False

    def expire(self, now: float) -> None:
        """Drop what outlived its time (cache entries past EXCHANGE_LIFETIME, ...)."""

    def get_timer(self) -> float | None:
        """When `handle_timer` must next be called (None: nothing to wait for)."""
        return None

    def handle_timer(self, now: float) -> None:
        """The time is `now`: retransmit what is due, give up on what ran out."""

    def sizes(self) -> dict[str, int]:
        """Entries in this layer's tables, by the names `SIBSession.sizes` reports."""
        return {}
