"""Log lines a remote peer can set off, at most one per kind and minute: a flooding KP, a
broker gone wrong or a full disk must not flood the log too (29,823 warnings in 26 s from one
KP past `max_queued`, before this). The SIB, the transports and the bridge log every refusal,
decode error, unreachable KP and failed request through one of these.

The kind is a key the caller names (`"queue full"`, `("refused", status)`); the first line of a
kind in a period is logged, the others counted, and the next line logged says how many were
left out. The clock is a parameter, as everywhere in `ksp` (tests inject one).
"""
from __future__ import annotations

import logging
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable

PERIOD = 60.0
MAX_KINDS = 1024
_every: weakref.WeakSet[RateLimitedLog] = weakref.WeakSet()


def reset() -> None:
    """Forget what every limiter logged (a new test starts with a full allowance)."""
    for limiter in list(_every):
        limiter._kinds.clear()


class RateLimitedLog:
    """`logger`'s lines, `burst` per kind and `period` seconds (the rest counted and said in
    the next line logged of that kind); at most `max_kinds` kinds are tracked (the one silent
    longest is forgotten first). `clock`: seconds of any monotonic clock (`time.monotonic`;
    `ksp` reads none itself, as the sessions take `now`)."""

    def __init__(self, logger: logging.Logger, clock: Callable[[], float], period: float = PERIOD,
                 burst: int = 1, max_kinds: int = MAX_KINDS) -> None:
        self.logger = logger
        self.period = period
        self.burst = burst
        self.clock = clock
        self.max_kinds = max_kinds
        self._kinds: OrderedDict[Hashable, list] = OrderedDict()  # kind -> [start, logged, left out]
        _every.add(self)

    def log(self, level: int, kind: Hashable, msg: str, *args, exc_info=None) -> bool:
        """Log `msg % args` at `level` unless `kind` had its `burst` this period; True if
        logged. `exc_info` (a traceback) goes with a logged line only."""
        if not self.logger.isEnabledFor(level):
            return False
        left_out = self.admit(kind)
        if left_out is None:
            return False
        if left_out:
            msg += " (%d more like it left out of the log)"
            args = (*args, left_out)
        self.logger.log(level, msg, *args, exc_info=exc_info)
        return True

    def admit(self, kind: Hashable) -> int | None:
        """Whether a line of `kind` may be logged now: None if not (it is counted), else how
        many of its kind were left out since the last one logged (to say so)."""
        now = self.clock()
        state = self._kinds.get(kind)
        if state is None or now - state[0] >= self.period:
            left_out = state[2] if state is not None else 0
            state = self._kinds[kind] = [now, 0, left_out]
            while len(self._kinds) > self.max_kinds:
                self._kinds.popitem(last=False)
        self._kinds.move_to_end(kind)
        if state[1] >= self.burst:
            state[2] += 1
            return None
        state[1] += 1
        left_out, state[2] = state[2], 0
        return left_out

    def info(self, kind: Hashable, msg: str, *args, exc_info=None) -> bool:
        return self.log(logging.INFO, kind, msg, *args, exc_info=exc_info)

    def warning(self, kind: Hashable, msg: str, *args, exc_info=None) -> bool:
        return self.log(logging.WARNING, kind, msg, *args, exc_info=exc_info)

    def error(self, kind: Hashable, msg: str, *args, exc_info=None) -> bool:
        return self.log(logging.ERROR, kind, msg, *args, exc_info=exc_info)

    def exception(self, kind: Hashable, msg: str, *args) -> bool:
        """An error with the traceback being handled (in an `except` block)."""
        return self.log(logging.ERROR, kind, msg, *args, exc_info=True)


class RateLimitFilter(logging.Filter):
    """The same limit for a library's own logger (aiocoap's, which a peer's malformed datagrams
    make speak): each record's kind is its logger and message template, `burst` of a kind a
    `period`, the rest counted and said with the next one let through. Attach with
    `logger.addFilter`."""

    def __init__(self, clock: Callable[[], float], period: float = PERIOD, burst: int = 1,
                 max_kinds: int = MAX_KINDS) -> None:
        super().__init__()
        self.limit = RateLimitedLog(logging.getLogger(__name__), clock, period, burst, max_kinds)

    def filter(self, record: logging.LogRecord) -> bool:
        left_out = self.limit.admit((record.name, record.levelno, str(record.msg)))
        if left_out is None:
            return False
        if left_out and not isinstance(record.args, dict):
            args = record.args or ()
            msg = str(record.msg) if args else str(record.msg).replace("%", "%%")
            record.msg = msg + " (%d more like it left out of the log)"
            record.args = (*args, left_out)
        return True
