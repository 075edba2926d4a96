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


class SparqlError(KspError, ValueError):
    """Root of the KSP ⇄ SPARQL translation errors (`ksp.sparql`, `ksp.sparql`)."""


class NoSparqlEquivalent(SparqlError):
    """A KSP request (or a part of it) that SPARQL 1.1 text cannot say; `feature` names it."""

    def __init__(self, feature: str, message: str):
        self.feature = feature
        super().__init__(message)


class UnsupportedSparql(SparqlError):
    """Valid SPARQL outside the subset KSP can express; `feature` names what is unsupported."""

    def __init__(self, feature: str, message: str | None = None):
        self.feature = feature
        super().__init__(message or f"{feature} {'are' if feature.endswith('s') else 'is'} "
                                    "not supported by KSP")


class SparqlSyntaxError(SparqlError):
    """Text that is not SPARQL 1.1; `line`/`column` locate the fault when known (1-based)."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        self.line = line
        self.column = column
        where = f" (line {line}, column {column})" if line is not None else ""
        super().__init__(f"SPARQL syntax error{where}: {message}")
