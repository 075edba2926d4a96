"""Persistent operations that survive a restart: one sqlite table in the data directory.

Each durable persistent operation (`Channel.durable`: UDP) is a row: KP identity, TID,
transport, the request bytes (as the KP sent them, CREDENTIALS removed), and its delivery's
state as the channel exports it (`ksp.delivery.DeliveryState`): the KP's endpoint, the sequence
number and result digest of the last IND sent, and whether the KP is known to have that state
(its RES, or an ACKed IND). Rows are written in sqlite transactions (atomic), when an operation
starts, ends, after each answer, and once more at a clean stop (what was ACKed by then). On
start the SIB reloads them and hands each state back to a new channel (`channel.restore`), so
INDs resume to the KP's last endpoint, numbered on from the saved sequence number: the KP — a
sleeping device that kept its IDs — takes the next IND as new.

A TCP connection and a CoAP observation do not outlive the SIB process (their channels are not
durable), so their KPs re-subscribe anyway.

It also keeps each sealed KP's replay window and counter block (`ksp.secure.SealState`), so a
restart lets no recorded message in again (docs/wire-format.md 13.5).
"""
from __future__ import annotations

import json
import logging
import time
import sqlite3
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass

from ksp.codec import UDP, decode_kp_message, encode
from ksp.delivery import DeliveryState
from ksp.model import Request, Response
from ksp.secure import SealedAddr
from ksp.service import Channel
from ksp.session import KPIdentity
from ksp.ratelog import RateLimitedLog

from .errors import StoreUnwritable

FILE = "persistent.sqlite3"
log = logging.getLogger("ksp.sib")
#: A journal that cannot write says so once a minute.
unwritable_log = RateLimitedLog(log, time.monotonic)
MAX_PENDING_REMOVALS = 65_536


def _endpoint_json(endpoint: Hashable | None) -> str:
    """A KP that spoke sealed (wire format 13) is kept as such, so that after a restart its
    INDs leave sealed: it ignores every unsealed datagram."""
    if type(endpoint) is SealedAddr:
        return json.dumps({"sealed": endpoint.kp_id.hex(), "addr": endpoint.addr})
    return json.dumps(endpoint)


def _endpoint_of(text: str | None) -> Hashable | None:
    ep = json.loads(text) if text is not None else None
    if isinstance(ep, dict):
        addr = ep["addr"]
        return SealedAddr(bytes.fromhex(ep["sealed"]),
                          tuple(addr) if isinstance(addr, list) else addr)
    return tuple(ep) if isinstance(ep, list) else ep


def _kp_key(kp: KPIdentity) -> tuple[bytes, str]:
    return (kp.kp_id or b"", json.dumps(kp.addr) if kp.kp_id is None else "")


def _kp_of(kp_id: bytes, addr: str) -> KPIdentity:
    if kp_id:
        return KPIdentity(kp_id=kp_id)
    a = json.loads(addr)
    return KPIdentity(addr=tuple(a) if isinstance(a, list) else a)


_DELETE = "DELETE FROM ops WHERE kp_id = ? AND kp_addr = ? AND tid = ?"


@dataclass
class Saved:
    kp: KPIdentity
    tid: int
    transport: str
    endpoint: Hashable | None
    request: Request
    seq: int | None
    digest: bytes | None
    delivered: bool = False  # the KP has the state of `digest` (else: send it again)

    @property
    def state(self) -> DeliveryState:
        """What `Channel.restore` takes back (the request's MAX RESPONSE SIZE included)."""
        return DeliveryState(self.seq, self.endpoint, self.digest, self.delivered,
                             self.request.options.max_response_size)


class Journal:
    """The table. A write that fails (a full disk) writes nothing (each statement is its own
    sqlite transaction): a new operation is refused (`add` raises `StoreUnwritable`); a state
    not saved is logged — after a restart its KP gets the last state again, at least once; a
    removal not made is made at the next write that succeeds, so an ended operation does not
    come back."""

    def __init__(self, path: str) -> None:
        self._db = sqlite3.connect(path, isolation_level=None)
        self._unremoved: dict[tuple, None] = {}
        self._db.execute("PRAGMA journal_mode=WAL")
        # No fsync per commit: survives the death of the process, not a power loss — the same
        # stance as the store (docs/sib.md, Durability); one fsync per IND would cost ms.
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS ops (kp_id BLOB, kp_addr TEXT, tid INTEGER, "
            "transport TEXT, endpoint TEXT, request BLOB, seq INTEGER, digest BLOB, "
            "delivered INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (kp_id, kp_addr, tid))")
        # The sealed mode's state per KP (ksp.secure.SealState): replay window and the end of
        # the reserved block of SIB -> KP counters, for the key `key_id` names.
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS seal (kp_id BLOB PRIMARY KEY, key_id BLOB, "
            "highest INTEGER, out_limit INTEGER)")
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(ops)")}
        if "delivered" not in columns:  # a journal file whose ops table lacks it: added, 0
            self._db.execute("ALTER TABLE ops ADD COLUMN delivered INTEGER NOT NULL DEFAULT 0")

    def add(self, kp: KPIdentity, tid: int, transport: str, request: Request) -> None:
        request = request._replace(options=request.options._replace(credentials=None))
        key = (*_kp_key(kp), tid)
        if not self._write("INSERT OR REPLACE INTO ops VALUES (?, ?, ?, ?, NULL, ?, NULL, NULL, 0)",
                           (*key, transport, encode(request, UDP))):
            raise StoreUnwritable(f"the journal of persistent operations: {self.unwritable}")
        self._unremoved.pop(key, None)

    def sent(self, kp: KPIdentity, tid: int, seq: int | None, digest: bytes | None,
             endpoint: Hashable | None, delivered: bool) -> None:
        """After a RES (`delivered`: the KP retransmits its request until it has the RES) or an
        IND (not yet known to be ACKed): what the KP was sent, and where it was last seen."""
        self._write("UPDATE ops SET seq = ?, digest = ?, endpoint = ?, delivered = ? "
                    "WHERE kp_id = ? AND kp_addr = ? AND tid = ?",
                    (seq, digest, _endpoint_json(endpoint), int(delivered), *_kp_key(kp), tid))

    def save(self, kp: KPIdentity, tid: int, state: DeliveryState) -> None:
        """A channel's `export()`: what the KP was sent, and where it is."""
        self.sent(kp, tid, state.seq, state.digest, state.endpoint, state.delivered)

    def settle(self, awaiting_ack: Callable[[KPIdentity, int, str], bool]) -> None:
        """On a clean stop: mark delivered every operation whose last IND the transport saw
        ACKed (`awaiting_ack(kp, tid, transport)` false). After a crash nothing is settled, so
        a restarted SIB sends each last state again: at least once, never lost."""
        rows = self._db.execute("SELECT kp_id, kp_addr, tid, transport FROM ops "
                                "WHERE delivered = 0").fetchall()
        for kp_id, addr, tid, transport in rows:
            if not awaiting_ack(_kp_of(kp_id, addr), tid, transport):
                self._write("UPDATE ops SET delivered = 1 WHERE kp_id = ? AND kp_addr = ? "
                            "AND tid = ?", (kp_id, addr, tid))

    def remove(self, kp: KPIdentity, tid: int) -> None:
        key = (*_kp_key(kp), tid)
        if not self._write(_DELETE, key) and len(self._unremoved) < MAX_PENDING_REMOVALS:
            self._unremoved[key] = None

    #: Why the last write failed (None: it did not).
    unwritable: str | None = None

    def _write(self, sql: str, params: tuple) -> bool:
        """Execute one writing statement; False (logged) if sqlite could not."""
        try:
            self._db.execute(sql, params)
            while self._unremoved:
                key = next(iter(self._unremoved))
                self._db.execute(_DELETE, key)
                del self._unremoved[key]
        except sqlite3.OperationalError as exc:  # "database or disk is full", an I/O error
            self.unwritable = str(exc)
            unwritable_log.error("journal", "journal of persistent operations not written: %s",
                                 exc)
            return False
        self.unwritable = None
        return True

    def __iter__(self) -> Iterator[Saved]:
        rows = self._db.execute("SELECT kp_id, kp_addr, tid, transport, endpoint, request, seq, "
                                "digest, delivered FROM ops ORDER BY rowid").fetchall()
        for kp_id, addr, tid, transport, endpoint, data, seq, digest, delivered in rows:
            yield Saved(_kp_of(kp_id, addr), tid, transport, _endpoint_of(endpoint),
                        decode_kp_message(data, UDP), seq, digest, bool(delivered))

    def load_seal(self, kp_id: bytes, key_id: bytes) -> tuple[int, int] | None:
        row = self._db.execute("SELECT highest, out_limit FROM seal WHERE kp_id = ? "
                               "AND key_id = ?", (kp_id, key_id)).fetchone()
        return None if row is None else (row[0], row[1])

    def save_seal(self, kp_id: bytes, key_id: bytes, highest: int, out_limit: int) -> None:
        self._db.execute("INSERT OR REPLACE INTO seal VALUES (?, ?, ?, ?)",
                         (kp_id, key_id, highest, out_limit))

    def close(self) -> None:
        self._db.close()


class TrackedChannel:
    """Wraps the `Channel` of a persistent operation: counts its INDs and, when it is durable
    and there is a journal, journals its delivery's state after each answer. It neither numbers
    nor digests: the channel's delivery does (`ksp.delivery`)."""

    __slots__ = ("inner", "transport", "kp", "tid", "durable", "journal", "on_indicate")

    def __init__(self, inner: Channel, journal: Journal | None, on_indicate=None) -> None:
        self.inner = inner
        self.transport, self.kp, self.tid = inner.transport, inner.kp, inner.tid
        self.durable = inner.durable
        self.journal = journal if self.durable else None
        self.on_indicate = on_indicate

    def respond(self, response: Response) -> None:
        self.inner.respond(response)
        self.save()

    def indicate(self, response: Response) -> None:
        self.inner.indicate(response)
        self.save()
        if self.on_indicate is not None:
            self.on_indicate()

    def end(self) -> None:
        self.inner.end()

    def export(self) -> DeliveryState | None:
        return self.inner.export()

    def restore(self, state: DeliveryState) -> None:
        self.inner.restore(state)

    def save(self) -> None:
        """Journal what the KP was sent, and where it is."""
        if self.journal is not None and (state := self.inner.export()) is not None:
            self.journal.save(self.kp, self.tid, state)
