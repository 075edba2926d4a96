"""Echo values and address validation (docs/wire-format.md 7.7, 14): why a SIB may answer a
request with ECHO REQUIRED (0x0f), and what it keeps to decide.

`EchoValues` makes and checks the SIB's echo values without keeping any: 4-byte time | 6-byte
HMAC-SHA256(a per-process secret, time | what the value binds), valid `lifetime` seconds. A value
binds a source address (address validation) or a KP ID (sealed freshness, 13.5); a new process
draws a new secret, so no value survives a restart. `AddressBudgets` holds, per source address,
what it sent and was sent until it is validated (3 × the bytes received at most), and the
validated addresses; both tables are bounded, least recently heard first out. `EchoedRequests`
holds the requests answered ECHO REQUIRED unexecuted, so a late copy of one never executes.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
import struct
from collections import OrderedDict
from collections.abc import Hashable

__all__ = ["EchoValues", "AddressBudgets", "EchoedRequests", "ECHO_LIFETIME", "address_binding",
           "kp_binding"]

#: Seconds an echo value stays valid (7.7).
ECHO_LIFETIME = 120.0
_TIME = struct.Struct("<I")
_MAC_SIZE = 6
ECHO_SIZE = _TIME.size + _MAC_SIZE  # 10: the smallest RES 0x0f (15 bytes) is 3 × a 5-byte REQ


def address_binding(addr: Hashable) -> bytes:
    """What an address-validation echo value binds: the source address and port."""
    return b"a" + repr(addr).encode()


def kp_binding(kp_id: bytes) -> bytes:
    """What a sealed-freshness echo value binds: the KP ID."""
    return b"k" + bytes(kp_id)


class EchoValues:
    """Stateless echo values: `make(binding, now)` and `verify(value, binding, now)`.
    `now`: any clock in seconds that only moves forward (the session's)."""

    def __init__(self, secret: bytes | None = None, lifetime: float = ECHO_LIFETIME) -> None:
        self._secret = secret if secret is not None else secrets.token_bytes(32)
        self.lifetime = lifetime

    def _mac(self, stamp: bytes, binding: bytes) -> bytes:
        return hmac.new(self._secret, stamp + binding, hashlib.sha256).digest()[:_MAC_SIZE]

    def make(self, binding: bytes, now: float) -> bytes:
        stamp = _TIME.pack(int(now) & 0xFFFFFFFF)
        return stamp + self._mac(stamp, binding)

    def verify(self, value: bytes, binding: bytes, now: float) -> bool:
        if len(value) != ECHO_SIZE:
            return False
        stamp = bytes(value[:_TIME.size])
        age = (int(now) - _TIME.unpack(stamp)[0]) & 0xFFFFFFFF
        return age <= self.lifetime and hmac.compare_digest(
            self._mac(stamp, binding), bytes(value[_TIME.size:]))


class AddressBudgets:
    """Per source address, until it is validated: bytes received and bytes sent, and sends
    allowed while sent ≤ `factor` × received (14). Validated addresses are sent anything.

    At most `max_addresses` validated and as many unvalidated ones, the least recently heard
    forgotten first (a forgotten budget allows nothing more, a forgotten validation is asked
    again) — and of them at most `host_share` per host, so that one host validating or probing
    from many ports forgets its own ports, not other hosts' addresses. An address `pin`ned (the
    endpoint of a running operation, whose INDs must reach it) is never forgotten while it is:
    pins are counted per address and bounded by the operations that hold them."""

    def __init__(self, factor: int = 3, max_addresses: int = 4096,
                 host_share: int | None = None) -> None:
        if factor < 1 or max_addresses < 1:
            raise ValueError("factor and max_addresses must be >= 1")
        self.factor = factor
        self.max_addresses = max_addresses
        self.host_share = host_share or min(max_addresses, max(16, max_addresses // 4))
        self._validated: OrderedDict[Hashable, None] = OrderedDict()
        # address -> [bytes received, bytes sent]
        self._budgets: OrderedDict[Hashable, list[int]] = OrderedDict()
        # host -> its addresses in each table, least recently heard first
        self._hosts: dict[tuple[int, Hashable], OrderedDict[Hashable, None]] = {}
        self._pins: dict[Hashable, int] = {}

    def __len__(self) -> int:
        return len(self._validated) + len(self._budgets)

    @property
    def validated_count(self) -> int:
        return len(self._validated)

    @property
    def budget_count(self) -> int:
        return len(self._budgets)

    def received(self, addr: Hashable, size: int) -> None:
        """A datagram of `size` bytes came from `addr`."""
        if addr in self._validated:
            self._validated.move_to_end(addr)
            self._heard(1, addr)
            return
        budget = self._budgets.get(addr)
        if budget is None:
            budget = self._budgets[addr] = [0, 0]
            self._admit(0, self._budgets, addr)
        else:
            self._budgets.move_to_end(addr)
            self._heard(0, addr)
        budget[0] += size

    def validate(self, addr: Hashable) -> None:
        """`addr` proved it receives (a verified echo value or sealed message)."""
        if self._budgets.pop(addr, None) is not None:
            self._leave(0, addr)
        if addr in self._validated:
            self._validated.move_to_end(addr)
            self._heard(1, addr)
            return
        self._validated[addr] = None
        self._admit(1, self._validated, addr)

    def is_validated(self, addr: Hashable) -> bool:
        return addr in self._validated

    def spend(self, addr: Hashable, size: int) -> bool:
        """Whether `size` more bytes may go to `addr` now (then counted as sent)."""
        if addr in self._validated:
            return True
        budget = self._budgets.get(addr)
        if budget is None or budget[1] + size > self.factor * budget[0]:
            return False
        budget[1] += size
        return True

    def pin(self, addr: Hashable) -> None:
        """An operation's INDs go to `addr`: keep its validation while they do."""
        self._pins[addr] = self._pins.get(addr, 0) + 1

    def unpin(self, addr: Hashable) -> None:
        count = self._pins.get(addr, 0) - 1
        if count > 0:
            self._pins[addr] = count
        else:
            self._pins.pop(addr, None)

    # -- the bounds ------------------------------------------------------------------------

    @staticmethod
    def _host(addr: Hashable) -> Hashable:
        return addr[0] if isinstance(addr, tuple) and addr else addr

    def _heard(self, table: int, addr: Hashable) -> None:
        ports = self._hosts.get((table, self._host(addr)))
        if ports is not None and addr in ports:
            ports.move_to_end(addr)

    def _leave(self, table: int, addr: Hashable) -> None:
        key = (table, self._host(addr))
        ports = self._hosts.get(key)
        if ports is not None:
            ports.pop(addr, None)
            if not ports:
                del self._hosts[key]

    def _admit(self, table: int, entries: OrderedDict, addr: Hashable) -> None:
        """`addr` is new in `entries`: over its host's share, that host's least recently heard
        unpinned address goes; over the table's bound, the table's."""
        key = (table, self._host(addr))
        ports = self._hosts.setdefault(key, OrderedDict())
        ports[addr] = None
        if len(ports) > self.host_share:
            self._forget_one(table, entries, ports)
        if len(entries) > self.max_addresses:
            self._forget_one(table, entries, entries)

    def _forget_one(self, table: int, entries: OrderedDict, order: OrderedDict) -> None:
        """Forget the first unpinned address of `order` (oldest first) from `entries`."""
        pins = self._pins
        for old in order:
            if old not in pins:
                break
        else:
            return  # every one runs an operation: kept (bounded by the operations)
        entries.pop(old, None)
        self._leave(table, old)


class EchoedRequests:
    """Requests answered ECHO REQUIRED without executing (wire format 7.7, 14), each kept
    `lifetime` seconds (EXCHANGE_LIFETIME) by (source address, TID, hash of its bytes).

    The KP retries under a new TID, so the first TID is finished; a copy of the first request
    (delayed, duplicated, or a retransmission whose 0x0f was lost) is answered ECHO REQUIRED
    again and never executed, even after the retry validated the address: executed, it would
    start an operation under a TID nobody waits on. At most `max_entries`, oldest first out:
    only unvalidated addresses add entries (one per request answered 0x0f), so a flood of them
    costs a bounded table, and an entry pushed out only loses that copy's protection."""

    __slots__ = ("lifetime", "max_entries", "entries")

    def __init__(self, lifetime: float, max_entries: int = 4096) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be >= 1")
        self.lifetime = lifetime
        self.max_entries = max_entries
        #: (address, TID, hash of the bytes) -> when it expires, oldest first (read-only: its
        #: emptiness is what the path of every request looks at).
        self.entries: OrderedDict[tuple[Hashable, int, int], float] = OrderedDict()

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, addr: Hashable, tid: int, data: bytes, now: float) -> None:
        """Request `data` (TID `tid`) from `addr` was answered ECHO REQUIRED at `now`. A copy
        keeps its first entry's expiry: copies of one request come within EXCHANGE_LIFETIME
        of it."""
        entries = self.entries
        key = (addr, tid, hash(data))
        if key in entries:
            return
        self.expire(now)
        entries[key] = now + self.lifetime
        if len(entries) > self.max_entries:
            entries.popitem(last=False)

    def answered(self, addr: Hashable, tid: int, data: bytes, now: float) -> bool:
        """Whether request `data` (TID `tid`) from `addr` is a copy of one answered ECHO
        REQUIRED within the lifetime."""
        expires = self.entries.get((addr, tid, hash(data)))
        return expires is not None and expires > now

    def expire(self, now: float) -> None:
        """Forget the entries past their lifetime."""
        entries = self.entries
        while entries and next(iter(entries.values())) <= now:
            entries.popitem(last=False)
