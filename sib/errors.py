"""The SIB's refusal: an exception that knows its KSP status (as aiocoap's errors know their
response codes), raised anywhere below the scheduler and turned into the RES there."""
from __future__ import annotations

from ksp.codes import Status


class RequestError(Exception):
    def __init__(self, status: Status, message: str) -> None:
        super().__init__(message)
        self.status = status


class StoreUnwritable(RequestError):
    """A write the store could not make — a full disk, an I/O error — of which nothing was
    written: 0x07 INTERNAL_ERROR to a KSP KP (wire format: "SIB internal error"), 503 to a SEPA
    client (`sib.sepa.broker`). Writes are refused so until the store is writable again."""

    def __init__(self, reason: str) -> None:
        self.disk_full = "No space left" in reason or "disk is full" in reason
        super().__init__(Status.INTERNAL_ERROR,
                         f"{'disk full' if self.disk_full else 'the store cannot be written'}: "
                         f"{reason}")
