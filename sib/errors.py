"""The SIB's refusal: an exception that knows its KSP status (as aiocoap's errors know their
response codes), raised anywhere below the scheduler and turned into the RES there."""
from __future__ import annotations

from ksp.codes import Status


class RequestError(Exception):
    def __init__(self, status: Status, message: str) -> None:
        super().__init__(message)
        self.status = status
