"""Sealed KSP messages: the authenticated envelope of `docs/wire-format.md` section 13 (sans-I/O).

A sealed message wraps a whole, unchanged KSP message (header included, so RES and IND, which
carry no options, are covered too) with the sender's KP ID, a sender counter and a truncated
HMAC-SHA256 tag. The per-KP key never travels; the CREDENTIALS password is not needed. Each
direction has its own key derived from the KP's key, so a message reflected back to its sender
never verifies. Replays are stopped by `ReplayWindow` (highest counter + 64-bit bitmap, as in
RFC 4303 / RFC 6479). stdlib `hmac`/`hashlib` only, so the board can do the same in a few lines.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import struct
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from .codes import Status

__all__ = [
    "MAGIC", "KEY_SIZE", "TAG_SIZE", "OVERHEAD", "COUNTER_MAX", "KP_TO_SIB", "SIB_TO_KP",
    "SealError", "DirectionKeys", "Opened", "ReplayWindow", "derive_keys", "seal", "open_sealed",
    "is_sealed", "parse_key", "new_key", "Sealer", "peek_kp_id", "SealedAddr",
    "SealerTable", "KeyLookup", "initial_counter", "SealState", "OUT_BLOCK", "NoWindow",
]

#: First byte of a sealed message. A plain KSP message starts with its Version (0x01); a SIB
#: that does not know the envelope reads 0xA1 as a version and answers 0x01 (version not
#: supported) without looking further, so the sender learns the mode is off.
MAGIC = 0xA1
KEY_SIZE = 32
KP_ID_SIZE = 16
TAG_SIZE = 8
_HEAD = struct.Struct("<B16sI")  # magic, KP ID, counter (little-endian as every KSP field)
HEAD_SIZE = _HEAD.size  # 21
OVERHEAD = HEAD_SIZE + TAG_SIZE  # 29 bytes per message
COUNTER_MAX = 0xFFFF_FFFF
WINDOW_BITS = 64

KP_TO_SIB = b"ksp-seal kp->sib"
SIB_TO_KP = b"ksp-seal sib->kp"


class SealError(ValueError):
    """A sealed message that does not open: malformed, wrong key or tag, or a replay. `status`
    is what a receiver may answer (unauthenticated, so a KP treats such answers as hints)."""

    def __init__(self, message: str, status: Status = Status.ACCESS_DENIED) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class DirectionKeys:
    """The two keys derived from one KP key; the raw key itself is never used for a tag."""

    kp_to_sib: bytes
    sib_to_kp: bytes


@dataclass(frozen=True, slots=True)
class Opened:
    kp_id: bytes
    counter: int
    inner: bytes


def derive_keys(key: bytes) -> DirectionKeys:
    """HMAC(key, label) per direction: a message reflected to its sender fails its tag."""
    if len(key) != KEY_SIZE:
        raise ValueError(f"a KP key has {KEY_SIZE} bytes, not {len(key)}")
    return DirectionKeys(hmac.new(key, KP_TO_SIB, hashlib.sha256).digest(),
                         hmac.new(key, SIB_TO_KP, hashlib.sha256).digest())


def _tag(dir_key: bytes, data: bytes) -> bytes:
    return hmac.new(dir_key, data, hashlib.sha256).digest()[:TAG_SIZE]


def is_sealed(data: bytes) -> bool:
    return len(data) > 0 and data[0] == MAGIC


def seal(dir_key: bytes, kp_id: bytes, counter: int, inner: bytes) -> bytes:
    """The envelope around `inner` (any encoded KSP message), tagged with one direction's key."""
    if len(kp_id) != KP_ID_SIZE:
        raise ValueError(f"a KP ID has {KP_ID_SIZE} bytes, not {len(kp_id)}")
    if not 0 <= counter <= COUNTER_MAX:
        raise ValueError(f"counter {counter} outside 0..{COUNTER_MAX}")
    body = _HEAD.pack(MAGIC, kp_id, counter) + inner
    return body + _tag(dir_key, body)


def peek_kp_id(data: bytes) -> bytes:
    """The claimed (unverified) KP ID of a sealed message: which key to open it with."""
    if len(data) < OVERHEAD or data[0] != MAGIC:
        raise SealError(f"not a sealed message ({len(data)} bytes)", Status.INVALID_DATA_FORMAT)
    return bytes(data[1:1 + KP_ID_SIZE])


def open_sealed(dir_key: bytes, data: bytes) -> Opened:
    """Check the tag (constant time) and split the envelope. No replay check: see ReplayWindow,
    which the caller updates only after this succeeded (a forged counter moves nothing)."""
    if len(data) < OVERHEAD or data[0] != MAGIC:
        raise SealError(f"not a sealed message ({len(data)} bytes)", Status.INVALID_DATA_FORMAT)
    body, tag = data[:-TAG_SIZE], data[-TAG_SIZE:]
    if not hmac.compare_digest(_tag(dir_key, bytes(body)), bytes(tag)):
        raise SealError("bad tag (wrong key, tampered or reflected message)")
    _, kp_id, counter = _HEAD.unpack_from(body)
    return Opened(kp_id, counter, bytes(body[HEAD_SIZE:]))


class ReplayWindow:
    """Highest verified counter and a 64-bit bitmap of the 64 counters up to it.

    `check` says whether a counter is new (without changing anything); `accept` records it and
    must be called only for a verified message. Counters more than 63 below the highest are
    refused as too old: a KP's counters only grow, reordering by more than 64 messages is not
    expected of one KP."""

    __slots__ = ("highest", "bitmap")

    def __init__(self) -> None:
        self.highest = -1
        self.bitmap = 0  # bit i set: counter highest - i was seen

    def check(self, counter: int) -> bool:
        if counter > self.highest:
            return True
        offset = self.highest - counter
        return offset < WINDOW_BITS and not (self.bitmap >> offset) & 1

    def accept(self, counter: int) -> bool:
        if not self.check(counter):
            return False
        if counter > self.highest:
            shift = counter - self.highest
            self.bitmap = ((self.bitmap << shift) | 1) & ((1 << WINDOW_BITS) - 1) \
                if shift < WINDOW_BITS else 1
            self.highest = counter
        else:
            self.bitmap |= 1 << (self.highest - counter)
        return True


class Sealer:
    """One side of one KP's sealed exchanges: seals outgoing messages with the next counter
    and opens incoming ones with the other direction's key and a replay window."""

    def __init__(self, key: bytes, kp_id: bytes, *, sib: bool, counter: int = 0) -> None:
        keys = derive_keys(key)
        self.kp_id = bytes(kp_id)
        self._out = keys.sib_to_kp if sib else keys.kp_to_sib
        self._in = keys.kp_to_sib if sib else keys.sib_to_kp
        self.counter = counter  # next counter to send
        self.window = ReplayWindow()

    def seal(self, inner: bytes) -> bytes:
        if self.counter > COUNTER_MAX:
            raise SealError("sender counter exhausted: a new key is needed",
                            Status.LIMIT_EXCEEDED)
        out = seal(self._out, self.kp_id, self.counter, inner)
        self.counter += 1
        return out

    def verify(self, data: bytes) -> Opened:
        """The envelope's parts once its tag verified, without the replay check."""
        opened = open_sealed(self._in, data)
        if opened.kp_id != self.kp_id:
            raise SealError("sealed for another KP ID")
        return opened

    def open(self, data: bytes) -> bytes:
        opened = open_sealed(self._in, data)
        if opened.kp_id != self.kp_id:
            raise SealError("sealed for another KP ID")
        if not self.window.accept(opened.counter):
            raise SealError(f"replayed or too old counter {opened.counter}")
        return opened.inner


#: 2026-01-01T00:00:00Z, the origin of `initial_counter`.
COUNTER_EPOCH = 1_767_225_600


def initial_counter(now: float) -> int:
    """A starting counter for a KP that keeps no counter across restarts (a host process):
    16 per second since 2026-01-01. Above every counter an earlier run used, as long as runs
    send at most 16 messages per second on average; it lasts until 2034. A board keeps its
    counter instead (13.5). `now`: Unix time (this module reads no clock)."""
    return min(COUNTER_MAX, max(0, int((now - COUNTER_EPOCH) * 16)))


def parse_key(text: str) -> bytes:
    """A key as written in a configuration: 64 hex digits or base64 of 32 bytes."""
    text = text.strip()
    try:
        key = bytes.fromhex(text) if len(text) == 2 * KEY_SIZE else \
            base64.b64decode(text, validate=True)
    except (ValueError, binascii.Error) as exc:
        raise ValueError(f"a KP key is 64 hex digits or base64 of 32 bytes: {exc}") from None
    if len(key) != KEY_SIZE:
        raise ValueError(f"a KP key has {KEY_SIZE} bytes, not {len(key)}")
    return key


def new_key() -> str:
    """A fresh random key, as hex (what `ksp-sib new-key` would print)."""
    import secrets
    return secrets.token_hex(KEY_SIZE)


class NoWindow(SealError):
    """A verified sealed message from a KP a SIB without state has no replay window for
    (13.5): it may be a recording from before a restart. Nothing was accepted; the inner
    message, its counter and the address to answer at say what to ask."""

    def __init__(self, inner: bytes, counter: int, to: "SealedAddr") -> None:
        super().__init__("no replay window for this KP: freshness unproved")
        self.inner = inner
        self.counter = counter
        self.to = to


class SealedAddr(NamedTuple):
    """The session address of a KP that spoke sealed: its verified KP ID and transport address.
    Every session table keyed by address (exchanges, bindings, ACK routes) then tells sealed
    from plain traffic, and whatever the session sends there leaves sealed."""

    kp_id: bytes
    addr: Hashable


KeyLookup = Callable[[bytes], "bytes | None"]
"""The key configured for a KP ID (None: that KP has no key; its sealed messages are dropped)."""


#: SIB → KP counters reserved per write to a `SealState` (as a board does in flash, 13.5).
OUT_BLOCK = 1024


class SealState(Protocol):
    """Where a SIB keeps each KP's replay window and sending counter across restarts (13.5):
    `sib.journal.Journal` with a data directory. `key_id` names the key the state belongs to
    (a new key starts afresh)."""

    def load_seal(self, kp_id: bytes, key_id: bytes) -> "tuple[int, int] | None":
        """(highest counter accepted, first SIB → KP counter not yet used)."""

    def save_seal(self, kp_id: bytes, key_id: bytes, highest: int, out_limit: int) -> None:
        """Durably (a process crash must not lose it) before the message it covers acts."""


class SealerTable:
    """The SIB's `Sealer` per KP ID (its counter and replay window), at most `max_entries`,
    the least recently used forgotten first. With a `state` (a SIB with a data directory) the
    highest counter is saved after every verified message, before it acts, and the sending
    counter in blocks of OUT_BLOCK; a window loaded back is closed (every counter up to the
    highest taken as seen), since the duplicate cache that would catch a late copy of a request
    is gone. So neither a restart nor an eviction lets a recorded message in again or reuses a
    counter; without a state a forgotten KP starts a new window (13.5)."""

    def __init__(self, key_for: KeyLookup, wall_clock: Callable[[], float],
                 max_entries: int = 65_536, state: SealState | None = None) -> None:
        self.key_for = key_for
        self.wall_clock = wall_clock  # Unix time, for the counters' start (`initial_counter`)
        self.max_entries = max_entries
        self.state = state
        # kp_id -> (key, sealer, key_id, [out_limit])
        self._sealers: OrderedDict[bytes, tuple[bytes, Sealer, bytes, list[int]]] = OrderedDict()

    def _entry(self, kp_id: bytes) -> tuple[bytes, Sealer, bytes, list[int]]:
        key = self.key_for(kp_id)
        if key is None:
            self._sealers.pop(kp_id, None)
            raise SealError("no key for this KP ID")
        entry = self._sealers.get(kp_id)
        if entry is None or entry[0] != key:  # new, or its key changed (configuration reload)
            # Its counter from the clock at least: a KP that outlives a SIB restart (or this
            # entry's eviction) must see counters above the ones it already took (13.5).
            sealer = Sealer(key, kp_id, sib=True, counter=initial_counter(self.wall_clock()))
            key_id = hashlib.sha256(b"ksp-seal state" + key).digest()[:8]
            saved = self.state.load_seal(kp_id, key_id) if self.state is not None else None
            if saved is not None:
                sealer.window.highest, sealer.window.bitmap = saved[0], (1 << WINDOW_BITS) - 1
                sealer.counter = max(sealer.counter, saved[1])
            entry = self._sealers[kp_id] = (key, sealer, key_id, [sealer.counter])
        self._sealers.move_to_end(kp_id)
        while len(self._sealers) > self.max_entries:
            self._sealers.popitem(last=False)
        return entry

    def _save(self, entry: tuple[bytes, Sealer, bytes, list[int]]) -> None:
        assert self.state is not None
        self.state.save_seal(entry[1].kp_id, entry[2], entry[1].window.highest, entry[3][0])

    def open(self, data: bytes, addr: Hashable) -> tuple[bytes, SealedAddr]:
        """The verified inner message and the address to answer it at; SealError otherwise,
        `NoWindow` for a verified message of a KP this table has no replay window for and keeps
        no state (13.5: its freshness must be proved by an echo, `admit`)."""
        kp_id = peek_kp_id(data)
        entry = self._entry(kp_id)
        if self.state is None and entry[1].window.highest < 0:
            opened = entry[1].verify(data)
            raise NoWindow(opened.inner, opened.counter, SealedAddr(kp_id, addr))
        inner = entry[1].open(data)
        if self.state is not None:
            self._save(entry)
        return inner, SealedAddr(kp_id, addr)

    def admit(self, kp_id: bytes, counter: int) -> None:
        """Open `kp_id`'s replay window closed at `counter`: its freshness was proved (a
        verified echo value in the message of that counter, 13.5)."""
        window = self._entry(kp_id)[1].window
        window.highest, window.bitmap = counter, (1 << WINDOW_BITS) - 1

    def seal(self, data: bytes, to: SealedAddr) -> bytes:
        entry = self._entry(to.kp_id)
        sealer, limit = entry[1], entry[3]
        if self.state is not None and sealer.counter >= limit[0]:
            limit[0] = sealer.counter + OUT_BLOCK
            self._save(entry)
        return sealer.seal(data)

    def __len__(self) -> int:
        return len(self._sealers)
