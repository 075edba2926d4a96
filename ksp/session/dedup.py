"""The SIB's duplicate cache: requests seen within EXCHANGE_LIFETIME, each copy answered from
its entry, and per KP what it no longer keeps, by request number (UDP's message layer, and the
CoAP server's; wire format 15).

At the rate one KP reaches the cache is full (`max_entries`, 65,536, every TID of the KP) for as
long as the SIB runs, so its entries are kept as objects the garbage collector does not track:
a flat tuple of numbers, bytes and the KP's own key for each (the exchange only while it
executes). As objects (five tracked objects each: ~330,000 for a full cache) they made each
full collection of an aged SIB take 0.1–0.34 s of its loop (`ksp bench soak --ab`,
docs/benchmarks.md)."""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING

from ..codes import Tx
from ..transactions import Exchange
from .events import KPIdentity

if TYPE_CHECKING:
    from .sib import SessionStats

__all__ = ["DuplicateCache", "Record", "LAST_EPOCH"]

#: The highest epoch a request number has (the EPOCH option is a u32).
LAST_EPOCH = 0xFFFFFFFF

_TERMINATE = Tx.TERMINATE

# An entry: (tx, hash of the request's bytes, number (-1: none, a TERMINATE), when it expires,
# its RES (bytes, or None until it is answered), its exchange while it executes (else None)).
# Plain ints, a float, bytes and None: once answered, a tuple the collector stops tracking.
_TX, _DIGEST, _NUMBER, _EXPIRES, _RESPONSE, _EXCHANGE = range(6)


class Record:
    """What a KP identity's requests left behind (wire format 15): the highest number taken as
    new, and the floor, the highest number of a request no longer kept (-1: none)."""

    __slots__ = ("highest", "floor")

    def __init__(self) -> None:
        self.highest = -1
        self.floor = -1

    def next_epoch(self) -> int:
        """The first epoch whose every number is new to the SIB; at most the last (a KP whose
        numbers reached it has what is left of it, wire format 15.3)."""
        return min((max(self.highest, self.floor) >> 16) + 1, LAST_EPOCH)


class DuplicateCache:
    """Requests seen within EXCHANGE_LIFETIME: a copy of one is a duplicate, answered from its
    entry and never executed again.

    Keys are (KP identity, TID, transaction type, hash of the request's bytes), the `key` of
    the `Exchange` an entry holds while it executes; an entry keeps its expiry and its RES, whose
    length counts against `max_bytes`. One entry per KP and TID (a TERMINATE apart: it carries
    its target's TID): a request with other bytes under a TID is a new request and takes the
    place of the one before, as the KP has moved on from it (R12). Oldest first, which is
    soonest to expire; over `max_entries` or `max_bytes` the oldest go. UDP's message layer
    keeps one, and so does CoAP's server, under which aiocoap is the message layer.

    Which of two requests is the newer, and whether one nothing is kept for was had before,
    their numbers say (wire format 15): `records` keeps per KP identity (at most
    `max_entries`, least recently heard first out) the highest number taken as new and the
    floor, the highest of a request whose entry went — expired, evicted or replaced — or that
    was answered without being executed (`spent`)."""

    __slots__ = ("lifetime", "max_entries", "max_bytes", "bytes", "_entries", "records")

    def __init__(self, lifetime: float, max_entries: int, max_bytes: int) -> None:
        self.lifetime = lifetime
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.bytes = 0
        # (KP ID, KP address, TID, is a TERMINATE) -> entry (the module's comment): the KP
        # identity spread out, a tuple of untracked parts (a KPIdentity is tracked).
        self._entries: OrderedDict[tuple, tuple] = OrderedDict()
        self.records: OrderedDict[Hashable, Record] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def _slot(key: tuple) -> tuple:
        kp = key[0]
        return kp[0], kp[1], key[1], key[2] is _TERMINATE

    def _entry(self, key: tuple) -> tuple | None:
        """The entry of request `key`: None if unseen, or if another request took its place."""
        entry = self._entries.get(self._slot(key))
        if entry is None or entry[_DIGEST] != key[3] or entry[_TX] != key[2]:
            return None
        return entry

    def get(self, key: tuple) -> Exchange | bool | None:
        """Whether request `key` is kept: its exchange while it executes, True once answered,
        None if unseen or if another request took its place."""
        entry = self._entry(key)
        return None if entry is None else entry[_EXCHANGE] or True

    def behind(self, key: tuple, number: int) -> int | None:
        """For request `key` numbered `number` (-1: none), not a copy: None when it is new,
        else the first epoch the KP's numbers are new from (NUMBER BEHIND): it is at or below
        the floor, or the request kept under its TID has a higher number, or the same one with
        other bytes."""
        if number < 0:
            return None
        record = self.records.get(key[0])
        entry = self._entries.get(self._slot(key))
        kept = -1 if entry is None else entry[_NUMBER]
        if kept < number and (record is None or number > record.floor):
            return None
        if record is None:  # an entry kept with no record: the record went first
            record = self._record(key[0])
        record.highest = max(record.highest, kept)
        return record.next_epoch()

    def add(self, key: tuple, exchange: Exchange, now: float, number: int = -1) -> None:
        """Remember `exchange` (request `number`) until `now` + lifetime, in the place of any
        request before it under the same TID."""
        entries = self._entries
        slot = self._slot(key)
        before = entries.pop(slot, None)
        if before is not None:
            self._drop(slot, before)
        entries[slot] = (int(key[2]), key[3], number, now + self.lifetime, None, exchange)
        if number >= 0:
            record = self._record(key[0])
            if number > record.highest:
                record.highest = number
        if len(entries) > self.max_entries or self.bytes > self.max_bytes:
            self._evict()

    def spent(self, kp: Hashable, number: int) -> None:
        """Request `number` of `kp` was answered without being executed and is not kept (ECHO
        REQUIRED): a copy of it must never execute."""
        if number >= 0:
            self._raise_floor(self._record(kp), number)

    @staticmethod
    def _raise_floor(record: Record, number: int) -> None:
        if number > record.floor:
            record.floor = number

    def _record(self, kp: Hashable) -> Record:
        records = self.records
        record = records.get(kp)
        if record is None:
            record = records[kp] = Record()
            if len(records) > self.max_entries:
                records.popitem(last=False)
        else:
            records.move_to_end(kp)
        return record

    def answered(self, exchange: Exchange, response: bytes | None) -> None:
        """`exchange`'s answer is `response` (None: nothing was sent, as for an OK NON), if its
        entry is still there: the entry keeps the RES and lets the exchange go."""
        entries = self._entries
        slot = self._slot(exchange.key)
        entry = entries.get(slot)
        if entry is not None and entry[_EXCHANGE] is exchange:
            entries[slot] = entry[:_RESPONSE] + (response, None)  # in its place in the order
            if response is not None:
                self.bytes += len(response)
                if self.bytes > self.max_bytes:
                    self._evict()

    def answer_copy(self, key: tuple, addr: Hashable, send: Callable[[bytes, Hashable], None],
                    stats: "SessionStats") -> bool:
        """Whether request `key` is a copy of one seen. If so, while it executes its exchange
        answers at `addr` from now on (the newest copy's address); once answered, its cached
        RES goes there again (`send`)."""
        entry = self._entry(key)
        if entry is None:
            return False
        exchange = entry[_EXCHANGE]
        if exchange is not None:  # a retransmission (or a duplicated datagram)
            exchange.addr = addr
            stats.duplicates_ignored += 1
        elif entry[_RESPONSE] is not None:
            stats.res_retransmissions_answered += 1
            send(entry[_RESPONSE], addr)
        else:
            stats.duplicates_ignored += 1
        return True

    def expire(self, now: float) -> None:
        entries = self._entries
        while entries:
            slot = next(iter(entries))
            entry = entries[slot]
            if entry[_EXPIRES] > now:
                return
            del entries[slot]
            self._drop(slot, entry)

    def _evict(self) -> None:
        entries = self._entries
        while entries and (len(entries) > self.max_entries or self.bytes > self.max_bytes):
            self._drop(*entries.popitem(last=False))

    def _drop(self, slot: tuple, entry: tuple) -> None:
        response = entry[_RESPONSE]
        if response is not None:
            self.bytes -= len(response)
        number = entry[_NUMBER]
        if number >= 0:  # not kept any more: its copies are behind the floor
            kp = KPIdentity(slot[0], slot[1])
            self._raise_floor(self.records.get(kp) or self._record(kp), number)
