"""One exception tree for the protocol core.

Decode errors carry the status code a SIB answers with and the path of the failing field, so
that a server turns any `DecodeError` into a RES without knowing why it happened.
"""
from __future__ import annotations

from .codes import Status


class KspError(Exception):
    """Root of every error raised by `ksp`."""


class DecodeError(KspError):
    """Bytes that are not a valid KSP message; `status` is the answer the SIB must give."""

    def __init__(self, status: Status, message: str, path: str = "", tid: int | None = None):
        self.status = Status(status)
        self.path = path
        self.tid = tid
        super().__init__(f"{self.status.name} at {path or 'message'}: {message}")


class EncodeError(KspError, ValueError):
    """A message the wire format cannot carry (too many triples, a variable in DATA, ...)."""
