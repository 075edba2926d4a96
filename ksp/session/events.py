"""What a session tells its adapter (`next_event()`): frozen event dataclasses, and the KP
identity (R12) that keys every SIB table."""
from __future__ import annotations

import uuid
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import NamedTuple

from ..codec import peek_tid
from ..codes import Status
from ..model import Request, Response

__all__ = [
    "Event", "ResponseReceived", "IndicationReceived", "PersistentEnded", "RequestTimedOut",
    "ProtocolError", "KPIdentity", "RequestReceived", "AckReceived", "KPUnreachable",
    "CredentialsPending", "RequestRefused", "Authenticate", "PersistentLost",
]


@dataclass(frozen=True, slots=True)
class Event:
    """Base class of every session event."""


@dataclass(frozen=True, slots=True)
class ResponseReceived(Event):
    """The RES of pending request `tid` (its status may be an error)."""

    tid: int
    response: Response


@dataclass(frozen=True, slots=True)
class IndicationReceived(Event):
    """A new state of persistent transaction `tid` (UDP: newer than every one delivered before)."""

    tid: int
    response: Response


@dataclass(frozen=True, slots=True)
class PersistentEnded(Event):
    """The SIB ended persistent transaction `tid` with a non-OK IND (e.g. TERMINATED)."""

    tid: int
    status: Status | int


@dataclass(frozen=True, slots=True)
class PersistentLost(Event):
    """Persistent transaction `tid` was silent and the SIB answered none of the KP's
    keepalives (`Timing.keepalive`): the SIB is gone or cannot be reached. The KP no longer
    counts it active."""

    tid: int


@dataclass(frozen=True, slots=True)
class RequestRetried(Event):
    """The SIB answered request `tid` ECHO REQUIRED (wire format 7.7): the same request went
    again with the ECHO option as `new_tid` (the same TID for TERMINATE), and its RES, INDs and
    timeout now come under `new_tid`."""

    tid: int
    new_tid: int


@dataclass(frozen=True, slots=True)
class RequestTimedOut(Event):
    """CON request `tid` got no RES: UDP retransmissions ran out, or EXCHANGE_LIFETIME over TCP,
    or the TCP connection closed."""

    tid: int


@dataclass(frozen=True, slots=True)
class ProtocolError(Event):
    """Input that is not valid KSP. `fatal`: a TCP stream that cannot be resynchronised; the
    adapter closes the connection (after sending what `data_to_send` holds)."""

    status: Status
    message: str
    tid: int | None = None
    addr: Hashable | None = None
    fatal: bool = False


class KPIdentity(NamedTuple):
    """Whom a Transaction ID belongs to (R12): the CREDENTIALS KP ID, else the transport address
    (UDP: (host, port); TCP: the connection handle the adapter passes). A NamedTuple: it keys
    every session table, and tuple hashing is C code."""

    kp_id: bytes | None = None
    addr: Hashable | None = None

    @classmethod
    def of(cls, request: Request, addr: Hashable) -> "KPIdentity":
        creds = request.options.credentials
        return cls(bytes(creds.kp_id), None) if creds is not None else cls(None, addr)

    def __str__(self) -> str:
        if self.kp_id is None:
            return f"KP@{self.addr}"
        return f"KP {uuid.UUID(bytes=self.kp_id) if len(self.kp_id) == 16 else self.kp_id.hex()}"


@dataclass(frozen=True, slots=True)
class RequestReceived(Event):
    """A new request for the SIB to execute, then answer with `SIBSession.respond`."""

    kp: KPIdentity
    addr: Hashable
    request: Request


@dataclass(frozen=True, slots=True)
class AckReceived(Event):
    """An ACK from `addr`; `kp` is None when no IND with that TID was sent to that address."""

    kp: KPIdentity | None
    addr: Hashable
    tid: int
    seq: int | None


@dataclass(frozen=True, slots=True)
class KPUnreachable(Event):
    """IND retransmissions of (kp, tid) ran out without an ACK (UDP), or the KP's TCP connection
    is gone. The SIB usually ends the transaction (`end_persistent`)."""

    kp: KPIdentity
    tid: int


@dataclass(frozen=True, slots=True)
class CredentialsPending(Event):
    """The SIB's `authenticate` has no verdict yet on these credentials: the request waits in the
    session (bounded) until `SIBSession.resume`, which the adapter calls once it has verified
    them off the request path."""

    kp_id: bytes
    password: str
    addr: Hashable


@dataclass(frozen=True, slots=True)
class RequestRefused(Event):
    """A request refused before the duplicate cache (its CREDENTIALS failed `authenticate`, or
    too many requests wait for a verdict): answered with `status` at `addr`, nothing more."""

    kp_id: bytes
    addr: Hashable
    tid: int
    status: Status


Authenticate = Callable[[bytes, str, Hashable], "Status | None"]
"""A SIB's verdict on a request's CREDENTIALS (KP ID, password, source address), asked before the
session looks at its duplicate cache or at any state of that KP ID: `Status.OK` accepts, None
means "not known yet" (the session holds the request and reports `CredentialsPending`), any
other status refuses the request with that status. It must be cheap: slow checks (a password
hash) belong off the request path, answering None until they are done."""


def oversize_error(header: bytes, length: int, limit: int, addr: Hashable | None = None
                    ) -> ProtocolError:
    return ProtocolError(Status.LIMIT_EXCEEDED,
                         f"TCP message of {length} bytes exceeds the {limit}-byte limit; skipped",
                         peek_tid(header), addr)
