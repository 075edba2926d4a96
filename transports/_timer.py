"""The one timer an adapter keeps for its session (`loop.call_at(session.get_timer())`)."""
from __future__ import annotations

import asyncio
from typing import Callable, Protocol


class _Timed(Protocol):
    def get_timer(self) -> float | None: ...
    def handle_timer(self, now: float) -> None: ...


class SessionTimer:
    """Wakes `session` at `get_timer()`, then calls `after` (the adapter's pump).

    Re-armed lazily: a handle already scheduled no later than the session's deadline is kept
    (firing early just finds nothing due and re-arms), so a request answered before its
    retransmission time costs no `call_at`/`cancel` pair — that churn was a measurable part of
    a loopback round trip.
    """

    __slots__ = ("loop", "session", "after", "_handle", "_at")

    def __init__(self, loop: asyncio.AbstractEventLoop, session: _Timed,
                 after: Callable[[], None]) -> None:
        self.loop, self.session, self.after = loop, session, after
        self._handle: asyncio.TimerHandle | None = None
        self._at: float | None = None

    def rearm(self) -> None:
        when = self.session.get_timer()
        if when is None or (self._at is not None and self._at <= when):
            return
        if self._handle is not None:
            self._handle.cancel()
        self._at = when
        self._handle = self.loop.call_at(when, self._fire)

    def _fire(self) -> None:
        at, self._handle, self._at = self._at, None, None
        self.session.handle_timer(max(self.loop.time(), at))
        self.after()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._at = None
