"""The SIB's duplicate cache: requests seen within EXCHANGE_LIFETIME, each copy answered from
its entry (UDP's message layer, and the CoAP server's)."""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING

from ..codes import Tx
from ..transactions import Exchange

if TYPE_CHECKING:
    from .sib import SessionStats

__all__ = ["DuplicateCache", "Seen"]

_TERMINATE = Tx.TERMINATE


class Seen:
    """A request in the cache: its exchange, when the entry expires and the RES it got (bytes,
    or None until it is answered)."""

    __slots__ = ("exchange", "expires", "response")

    def __init__(self, exchange: Exchange, expires: float) -> None:
        self.exchange = exchange
        self.expires = expires
        self.response: bytes | None = None


class DuplicateCache:
    """Requests seen within EXCHANGE_LIFETIME: a copy of one is a duplicate, answered from its
    entry and never executed again.

    Keys are (KP identity, TID, transaction type, hash of the request's bytes), the `key` of
    the `Exchange` each entry (`Seen`) holds with its expiry and its RES, whose length counts
    against `max_bytes`. One entry per KP and TID (a TERMINATE apart: it carries its target's
    TID): a request with other bytes under a TID is a new request and takes the place of the
    one before, as the KP has moved on from it (R12). Oldest first, which is soonest to expire;
    over `max_entries` or `max_bytes` the oldest go. UDP's message layer keeps one, and so does
    CoAP's server, under which aiocoap is the message layer."""

    __slots__ = ("lifetime", "max_entries", "max_bytes", "bytes", "_entries")

    def __init__(self, lifetime: float, max_entries: int, max_bytes: int) -> None:
        self.lifetime = lifetime
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[Hashable, Seen] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def _slot(key: tuple) -> tuple:
        return key[0], key[1], key[2] is _TERMINATE

    def get(self, key: tuple) -> Seen | None:
        """The entry of request `key`: None if unseen, or if another request took its place."""
        entry = self._entries.get(self._slot(key))
        return entry if entry is not None and entry.exchange.key == key else None

    def add(self, key: tuple, exchange: Exchange, now: float) -> None:
        """Remember `exchange` until `now` + lifetime, in the place of any request before it
        under the same TID."""
        entries = self._entries
        slot = self._slot(key)
        before = entries.pop(slot, None)
        if before is not None:
            self._drop(before)
        entries[slot] = Seen(exchange, now + self.lifetime)
        if len(entries) > self.max_entries or self.bytes > self.max_bytes:
            self._evict()

    def answered(self, exchange: Exchange, response: bytes) -> None:
        """`exchange`'s answer is `response` (if its entry is still there)."""
        entry = self._entries.get(self._slot(exchange.key))
        if entry is not None and entry.exchange is exchange:
            entry.response = response
            self.bytes += len(response)
            if self.bytes > self.max_bytes:
                self._evict()

    def answer_copy(self, key: tuple, addr: Hashable, send: Callable[[bytes, Hashable], None],
                    stats: "SessionStats") -> bool:
        """Whether request `key` is a copy of one seen. If so its exchange answers at `addr`
        from now on (the newest copy's address), and its cached RES goes there again (`send`),
        or nothing while it executes."""
        entry = self.get(key)
        if entry is None:
            return False
        entry.exchange.addr = addr  # a retransmission (or a duplicated datagram)
        if entry.response is not None:
            stats.res_retransmissions_answered += 1
            send(entry.response, addr)
        else:
            stats.duplicates_ignored += 1
        return True

    def expire(self, now: float) -> None:
        entries = self._entries
        while entries and next(iter(entries.values())).expires <= now:
            self._drop(entries.popitem(last=False)[1])

    def _evict(self) -> None:
        entries = self._entries
        while entries and (len(entries) > self.max_entries or self.bytes > self.max_bytes):
            self._drop(entries.popitem(last=False)[1])

    def _drop(self, entry: Seen) -> None:
        if entry.response is not None:
            self.bytes -= len(entry.response)
