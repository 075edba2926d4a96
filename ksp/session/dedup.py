"""The SIB's duplicate cache: requests seen within EXCHANGE_LIFETIME, each copy answered from
its entry (UDP's message layer, and CoAP's server over it)."""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

from ..codes import Tx

__all__ = ["DuplicateCache"]

_TERMINATE = Tx.TERMINATE


class DuplicateCache:
    """Requests seen within EXCHANGE_LIFETIME: a copy of one is a duplicate, answered from its
    entry and never executed again.

    Keys are (KP identity, TID, transaction type, hash of the request's bytes) and entries
    `Exchange`s (their `key`, an `expires` time and a `response`: bytes, or None until the
    answer is known, whose length counts against `max_bytes`). One entry per KP and TID (a
    TERMINATE apart: it carries its target's TID): a request with other bytes under a TID is a
    new request and takes the place of the one before, as the KP has moved on from it (R12).
    Oldest first, which is soonest to expire; over `max_entries` or `max_bytes` the oldest go.
    UDP's message layer keeps one (so does CoAP's server, which runs that layer over
    aiocoap)."""

    __slots__ = ("lifetime", "max_entries", "max_bytes", "bytes", "_entries")

    def __init__(self, lifetime: float, max_entries: int, max_bytes: int) -> None:
        self.lifetime = lifetime
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[Hashable, object] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def _slot(key: tuple) -> tuple:
        return key[0], key[1], key[2] is _TERMINATE

    def get(self, key: tuple):
        """The entry of request `key`: None if unseen, or if another request took its place."""
        entry = self._entries.get(self._slot(key))
        return entry if entry is not None and entry.key == key else None

    def add(self, key: tuple, entry, now: float) -> None:
        """Remember `entry` (its `expires` set from `now`), in the place of any request before
        it under the same TID."""
        entry.expires = now + self.lifetime
        entries = self._entries
        slot = self._slot(key)
        before = entries.pop(slot, None)
        if before is not None:
            self._drop(before)
        entries[slot] = entry
        if len(entries) > self.max_entries or self.bytes > self.max_bytes:
            self._evict()

    def answered(self, key: tuple, entry, response: bytes) -> None:
        """`entry`'s answer is `response` (if the entry is still there)."""
        if self._entries.get(self._slot(key)) is entry:
            entry.response = response
            self.bytes += len(response)
            if self.bytes > self.max_bytes:
                self._evict()

    def expire(self, now: float) -> None:
        entries = self._entries
        while entries and next(iter(entries.values())).expires <= now:
            self._drop(entries.popitem(last=False)[1])

    def _evict(self) -> None:
        entries = self._entries
        while entries and (len(entries) > self.max_entries or self.bytes > self.max_bytes):
            self._drop(entries.popitem(last=False)[1])

    def _drop(self, entry) -> None:
        if entry is not None and entry.response is not None:
            self.bytes -= len(entry.response)
