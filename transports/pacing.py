"""`Pacer`: at most `count` sends in any `window` seconds, what is over it waiting its turn.

The CoAP server's notification budget (`transports.coap.NOTIFICATION_BUDGET`): aiocoap numbers
every message it originates from one 16-bit counter, and a peer takes a Message ID it saw
within EXCHANGE_LIFETIME for a duplicate. Sans-I/O, as the sessions: the caller passes the clock
and runs `release` when `next_release` says; so the arithmetic is tested without a network.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

__all__ = ["Pacer"]

T = TypeVar("T", bound=Hashable)
SLICES = 256
"""Sends are counted per 1/256 of the window: at most 257 entries, whatever the rate."""


class Pacer(Generic[T]):
    """Items (each a stream of states, of which only the newest matters) offered to be sent;
    `cost(item)`, read when it goes, is how many messages it sends. Over the budget an item
    waits; offered again while it waits, it keeps its place (its newest state goes then).
    Waiting items go oldest first."""

    def __init__(self, count: int, window: float, cost: Callable[[T], int]) -> None:
        if count < 1 or window <= 0:
            raise ValueError(f"a budget of {count} per {window} s sends nothing")
        self.count, self.window, self.cost = count, window, cost
        self._spent: deque[list] = deque()  # [start, sends] per slice of the window
        self._total = 0
        self._due: dict[T, None] = {}  # waiting, oldest first

    def __len__(self) -> int:
        """Items waiting."""
        return len(self._due)

    def __contains__(self, item: T) -> bool:
        return item in self._due

    def offer(self, item: T, now: float) -> bool:
        """Whether `item` goes now (then its cost is counted); else it waits."""
        if item in self._due:
            return False
        if not self._due and self.spend(self.cost(item), now):
            return True
        self._due[item] = None
        return False

    def release(self, now: float) -> Iterator[T]:
        """The waiting items that go now, oldest first, each counted as it is taken: lazily,
        so that what sending one does (another discarded, a cost changed) counts."""
        while self._due:
            item = next(iter(self._due))
            if not self.spend(self.cost(item), now):
                return
            del self._due[item]
            yield item

    def next_release(self, now: float) -> float | None:
        """When `release` next has something to give (None: nothing waits)."""
        if not self._due:
            return None
        if not self._spent:
            return now
        return max(now, self._spent[0][0] + self.window * (1 + 1 / SLICES))

    def free_at(self, now: float) -> float:
        """When one more send next fits the budget (`now` if it does)."""
        if self.spent(now) < self.count:
            return now
        return self._spent[0][0] + self.window * (1 + 1 / SLICES)

    def spent(self, now: float) -> int:
        """Sends counted in the window ending `now` (slices that have not left it)."""
        self.spend(0, now)
        return self._total

    def discard(self, item: T) -> None:
        """`item` no longer waits (it is gone, or its last state went another way)."""
        self._due.pop(item, None)

    def clear(self) -> None:
        self._due.clear()

    def spend(self, n: int, now: float, force: bool = False) -> bool:
        """Whether `n` more sends fit the budget now (then they are counted); with `force`,
        counted whether they fit or not. More than `count` at once count as `count`, so that
        they go in a window of their own rather than never."""
        step, spent = self.window / SLICES, self._spent
        while spent and spent[0][0] + step + self.window <= now:
            self._total -= spent.popleft()[1]
        n = min(n, self.count)
        if n and not force and self._total + n > self.count:
            return False
        if spent and now - spent[-1][0] < step:
            spent[-1][1] += n
        elif n:
            spent.append([now, n])
        self._total += n
        return True
