"""Time budgets: how long one evaluation may take before it is given up (`[limits]
query_seconds`, `update_seconds`, `persistent_seconds`).

pyoxigraph cannot be interrupted, but its results come lazily: the loops that turn them into
rows (`sib.pattern`, `sib.sepa.update`) check the budget in force (`check`) every few hundred
rows and stop there with `OverBudget`. What one step of pyoxigraph computes before its first
row (a sort, an aggregate over a large join) runs to its end; a read doing that holds a reader
thread meanwhile (`sib.readers`), never the scheduler.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager

from ksp.codes import Status

from .errors import RequestError

__all__ = ["OverBudget", "Deadline", "Budgets", "within", "timed", "check", "checked",
           "stop_all", "CHECK_EVERY", "Gate"]

CHECK_EVERY = 256
"""Rows between two looks at the clock."""
GIVE_WAY_EVERY = 16
"""Rows between two looks at a reader's gate (`Deadline.gate`)."""


class OverBudget(RequestError):
    """An evaluation past its time budget (or given up: its caller stopped waiting). Over KSP
    LIMIT_EXCEEDED (0x0a); over SEPA 503 `timeout`."""

    def __init__(self, message: str) -> None:
        super().__init__(Status.LIMIT_EXCEEDED, message)


class Deadline:
    """One evaluation's budget: `seconds` from now; `cancel` ends it at once (the caller
    stopped waiting, the SIB stops)."""

    __slots__ = ("seconds", "at", "what", "gate")

    def __init__(self, seconds: float | None, what: str = "the query",
                 gate: "Gate | None" = None) -> None:
        self.seconds = seconds
        self.at = float("inf") if seconds is None else time.monotonic() + seconds
        self.what = what
        #: Where an evaluation on a reader thread gives way to the write path (`Gate`).
        self.gate = gate

    def cancel(self) -> None:
        self.at = float("-inf")

    @property
    def over(self) -> bool:
        return time.monotonic() >= self.at

    def check(self) -> None:
        if time.monotonic() >= self.at or _stopping:
            if _stopping:
                raise OverBudget(f"{self.what} was given up: the SIB is stopping")
            if self.at == float("-inf"):
                raise OverBudget(f"{self.what} was given up")
            raise OverBudget(f"{self.what} took longer than its {self.seconds:g} s budget")


_local = threading.local()
_stopping = False


def stop_all() -> None:
    """The process is stopping: every evaluation under a budget ends at its next look at the
    clock (from a signal handler, which runs between two bytecodes of the main thread even
    while an evaluation keeps the event loop busy)."""
    global _stopping
    _stopping = True


@contextmanager
def within(deadline: Deadline | None):
    """`deadline` is the budget in force in this thread for the block (None: none)."""
    before = getattr(_local, "deadline", None)
    _local.deadline = deadline
    try:
        yield deadline
    finally:
        _local.deadline = before


def checked(rows):
    """`rows`, the budget in force checked every `CHECK_EVERY` of them, and its gate (if
    any) every `GIVE_WAY_EVERY`."""
    deadline = getattr(_local, "deadline", None)
    gate = deadline.gate if deadline is not None else None
    for n, row in enumerate(rows, 1):
        yield row
        if not n % GIVE_WAY_EVERY:
            if gate is not None:
                gate.give_way()
            if not n % CHECK_EVERY and deadline is not None:
                deadline.check()


class Gate:
    """Reads give way to the write path: while the SIB applies a write and sends what it
    sets off (`close` … `open`, from the event loop's thread), a reader thread turning rows
    into terms waits at its next look (`give_way`) instead of taking the GIL from the event
    loop at every one of its system calls, each a wait of Python's switch interval. Waits
    of at most `longest` seconds, then `rows` rows are read before the next: a steady
    stream of writes slows the reads, never stops them (their budgets still run)."""

    __slots__ = ("_open", "_closed", "longest", "rows", "_left")

    def __init__(self, longest: float = 0.02, rows: int = 256) -> None:
        self._open = threading.Event()
        self._open.set()
        self._closed = 0
        self.longest = longest
        self.rows = rows
        self._left = 0

    def close(self) -> None:
        self._closed += 1
        self._open.clear()

    def open(self) -> None:
        self._closed -= 1
        if self._closed <= 0:
            self._closed = 0
            self._open.set()

    @property
    def is_open(self) -> bool:
        return self._open.is_set()

    def give_way(self) -> None:
        if self._open.is_set():
            return
        if self._left > 0:
            self._left -= GIVE_WAY_EVERY
            return
        if not self._open.wait(self.longest):
            self._left = self.rows


def check() -> None:
    """Raise `OverBudget` if the budget in force in this thread is spent."""
    deadline = getattr(_local, "deadline", None)
    if deadline is not None:
        deadline.check()


class Budgets:
    """The SIB's time budgets in seconds (None: no budget). `query`: a one-shot query (KSP,
    SEPA /query), run beside the writes; `update`: an update's WHERE, on the write path;
    `persistent`: a persistent query's or rule's evaluation (its first, and after each write):
    one past it is ended with a LIMIT_EXCEEDED IND, whether it was stopped or finished late,
    rather than left to slow every write."""

    __slots__ = ("query", "update", "persistent")

    def __init__(self, query: float | None = 5.0, update: float | None = 5.0,
                 persistent: float | None = 5.0) -> None:
        self.query, self.update, self.persistent = query, update, persistent


@contextmanager
def timed(seconds: float | None, what: str):
    """A block under a budget of `seconds` that raises `OverBudget` also when it finished
    past it (one step of pyoxigraph is not stopped)."""
    deadline = Deadline(seconds, what)
    with within(deadline):
        yield deadline
    if deadline.over:
        deadline.check()
