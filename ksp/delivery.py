"""The one owner of a persistent operation's delivery: what a KP was sent for (KP, TID).

A persistent operation's answers pass through three hands — the SIB decides *what* to send, a
transport decides *how*, a journal keeps it across a restart — and one `Delivery` holds what
all three need; they ask it:

- its sequence number (§9: 1, 2, …, 65535, 0, …), for a transport that numbers INDs;
- the KP's endpoint (where its most recent request came from, or where a journal last saw it);
- whether the KP is known to have the newest state (`delivered`: its RES, or an ACKed IND) —
  the negation of "awaiting an ACK";
- the digest of the newest result sent, of its *encoding* (so equal means byte-for-byte what
  the KP holds), taken only for a delivery that a journal keeps (`durable`).

`export()` gives a `DeliveryState` (plain data, for a journal); `Delivery.restore` takes one
back after a restart. A new kind of KSP subscriber owns one `Delivery` per operation and plugs
into the SIB through `ksp.service.Channel` unchanged (`sib.testing.RecordingChannel`). The SEPA
gate's WebSocket subscriptions do not use it: their notifications are differences, numbered and
queued by `sib.sepa` (docs/sepa.md).

Sans-I/O like the rest of `ksp/`: no clock, no socket.
"""
from __future__ import annotations

import hashlib
from collections.abc import Hashable
from dataclasses import dataclass
from typing import ClassVar

from .codec import UDP, encode, retag
from .codes import Status
from .model import Response
from .seqnum import FIRST_SEQ, next_seq

__all__ = ["Delivery", "DeliveryPolicy", "DeliveryState", "result_digest", "MAX_UDP_PAYLOAD"]

MAX_UDP_PAYLOAD = 65_507
"""The largest KSP message in one datagram (§2.3, the IPv4 UDP payload limit)."""


@dataclass(frozen=True, slots=True)
class DeliveryPolicy:
    """How one message layer delivers INDs: one value per transport, the transaction layer
    (`ksp.transactions.SibTransactions`) asks it. The three in use are named: `ACKED` (UDP),
    `STREAMED` (TCP), `OBSERVED` (CoAP); `UNJOURNALED` is the transaction layer's own default."""

    #: INDs carry sequence numbers (§9).
    numbered: bool = True
    #: Each IND is acknowledged at the KSP level (a KSP ACK); else it counts as delivered once
    #: sent (TCP's stream, or CoAP's own layer, which confirms or ends the observation).
    acked: bool = True
    #: A journal keeps the deliveries, so their result digests are taken.
    durable: bool = False

    ACKED: ClassVar["DeliveryPolicy"]
    STREAMED: ClassVar["DeliveryPolicy"]
    OBSERVED: ClassVar["DeliveryPolicy"]
    UNJOURNALED: ClassVar["DeliveryPolicy"]


DeliveryPolicy.ACKED = DeliveryPolicy(numbered=True, acked=True, durable=True)
"""UDP: numbered, retransmitted until a KSP ACK covers them, resumed by a restarted SIB."""
DeliveryPolicy.STREAMED = DeliveryPolicy(numbered=False, acked=False, durable=False)
"""TCP: unnumbered, delivered once on the stream (or the connection is gone)."""
DeliveryPolicy.OBSERVED = DeliveryPolicy(numbered=True, acked=False, durable=False)
"""CoAP: numbered notifications, which CoAP confirms or whose observation it ends."""
DeliveryPolicy.UNJOURNALED = DeliveryPolicy(numbered=True, acked=True, durable=False)
"""Numbered and ACKed as `ACKED`, but kept by no journal (no result digests taken): the
transaction layer used on its own, with no message layer naming its policy."""


@dataclass(frozen=True, slots=True)
class DeliveryState:
    """What a journal keeps of a `Delivery` (see the module docstring)."""

    seq: int | None = None
    endpoint: Hashable | None = None
    digest: bytes | None = None
    delivered: bool = False
    #: The request's MAX RESPONSE SIZE: INDs after a restart are cut as before it.
    max_size: int | None = None


def result_digest(response: Response, max_size: int | None = None) -> bytes:
    """The digest of `response`'s result as an IND carries it (TID and sequence number zeroed,
    cut to `max_size`): a RES and the IND of the same result have the same digest."""
    cap = MAX_UDP_PAYLOAD if max_size is None else min(max_size, MAX_UDP_PAYLOAD)
    data = encode(response._replace(tid=0, indication=True, seq=0), UDP, max_size=cap)
    return hashlib.sha256(data).digest()


def encoding_digest(ind: bytes) -> bytes:
    """`result_digest` of an IND already encoded over UDP (any TID and sequence number)."""
    return hashlib.sha256(retag(ind, 0, 0)).digest()


class Delivery:
    """The delivery state of one persistent operation (see the module docstring).

    `numbered`: the transport numbers its INDs (UDP, CoAP); over TCP they carry no number.
    `durable`: a journal keeps it, so the result digest is worth taking. What a message layer
    does to get an IND there (UDP: the IND kept for retransmission, its back-off) is the
    layer's own (`ksp.session.sib_udp.UdpMessageLayer`)."""

    __slots__ = ("kp", "tid", "endpoint", "max_size", "numbered", "durable", "seq", "digest",
                 "delivered", "final", "restored")

    def __init__(self, kp: Hashable, tid: int, endpoint: Hashable | None = None,
                 max_size: int | None = None, *, numbered: bool = True,
                 durable: bool = False) -> None:
        self.kp = kp
        self.tid = tid
        self.endpoint = endpoint
        self.max_size = max_size
        self.numbered = numbered
        self.durable = durable
        self.seq: int | None = None  # of the newest IND numbered
        self.digest: bytes | None = None  # of the newest result sent (durable only)
        self.delivered = False  # the KP has the newest state
        self.final = False  # the newest IND ended the operation
        self.restored = False  # from a journal, and no IND sent since

    @classmethod
    def restore(cls, kp: Hashable, tid: int, state: DeliveryState, *, numbered: bool = True,
                durable: bool = True) -> "Delivery":
        """A delivery as `state` left it (a journal's, after a restart): numbering goes on from
        its sequence number, so a KP that kept its IDs takes the next IND as new."""
        d = cls(kp, tid, state.endpoint, state.max_size, numbered=numbered, durable=durable)
        d.seq, d.digest, d.delivered = state.seq, state.digest, state.delivered
        d.restored = True
        return d

    def export(self) -> DeliveryState:
        return DeliveryState(self.seq, self.endpoint, self.digest, self.delivered, self.max_size)

    @property
    def awaiting_ack(self) -> bool:
        """The newest IND is sent and not known to be received."""
        return not self.delivered and self.seq is not None

    def next_seq(self, response: Response) -> int | None:
        """The sequence number of the IND `response` (its own `seq` if set: the numbering
        restarts there), and remember it; None for a transport that does not number."""
        if not self.numbered:
            return None
        if response.seq is not None:
            seq = response.seq
        else:
            seq = FIRST_SEQ if self.seq is None else next_seq(self.seq)
        self.seq = seq
        return seq

    def redundant(self, response: Response) -> bool:
        """After a restart, an OK IND whose result the KP is known to hold already (the state it
        had ACKed when the SIB stopped). Never true for an ending IND, nor once an IND went out
        since the restart (the SIB sends only changes: no digest is taken on that path)."""
        return (self.restored and self.delivered and self.digest is not None
                and response.status == Status.OK
                and response.result is not None
                and result_digest(response, self.max_size) == self.digest)

    def responded(self, response: Response) -> None:
        """The RES of the persistent request went out: the KP has the first result (it
        retransmits its request until it gets the RES)."""
        if self.durable and response.result is not None:
            self.digest = result_digest(response, self.max_size)
        self.delivered = True

    def indicated(self, response: Response, digest: bytes | None = None,
                  delivered: bool = False) -> None:
        """An IND went out (`delivered`: by a transport that cannot lose it unnoticed, TCP).
        `digest`: of its encoding, if the caller has it (shared by the subscribers of one
        result); else taken here for a durable delivery."""
        if self.durable and response.result is not None:
            self.digest = digest if digest is not None else result_digest(response, self.max_size)
        self.final = response.status != Status.OK
        self.delivered = delivered
        self.restored = False

    def acknowledged(self) -> None:
        self.delivered = True

    def __repr__(self) -> str:
        return (f"<Delivery {self.kp} tid={self.tid} seq={self.seq} "
                f"{'delivered' if self.delivered else 'awaiting'}>")
