"""The client's exceptions: one root, `ClientError`, so an application can catch them all."""
from __future__ import annotations

from ksp import KspError, Status

__all__ = ["ClientError", "KspStatusError", "KspTimeout", "KspConnectionError",
           "KspProtocolError", "SubscriptionLost", "KspUsageError"]


class ClientError(KspError):
    """Root of the errors `transports.client` raises."""


class KspUsageError(ClientError, ValueError):
    """A request the called method does not send, found before anything is sent: a query given
    to `KP.update`, an update to `KP.query`, a one-shot transaction to `KP.subscribe`,
    `bindings` with text that names no query or update of the JSAP, or with a prepared
    `Statement` (its text is compiled already)."""


class KspStatusError(ClientError):
    """The SIB answered with a non-OK status; `status` says which (`ksp.Status` when known)."""

    def __init__(self, status: Status | int, message: str = "") -> None:
        try:
            status = Status(status)
        except ValueError:
            pass
        self.status = status
        name = status.name if isinstance(status, Status) else f"0x{status:02x}"
        super().__init__(f"{name} (0x{int(status):02x})" + (f": {message}" if message else ""))


class KspTimeout(ClientError, TimeoutError):
    """No RES came: retransmissions ran out (UDP, CoAP) or EXCHANGE_LIFETIME passed (TCP)."""


class KspConnectionError(ClientError, ConnectionError):
    """The connection closed (TCP, TLS) or the client was closed while waiting."""


class KspProtocolError(KspStatusError):
    """The SIB's answer was not valid KSP; `status` is the decoding error's status."""


class SubscriptionLost(KspStatusError):
    """The SIB no longer has a persistent transaction the KP did not end, and no final IND said
    why (over CoAP: its resource was gone when the KP re-registered — the SIB gave up on the KP
    as unreachable, or it ended the operation longer ago than the final IND lingers). `status`
    is UNKNOWN_TRANSACTION, as a TERMINATE of it would be answered."""

    def __init__(self, message: str = "") -> None:
        super().__init__(Status.UNKNOWN_TRANSACTION, message)
