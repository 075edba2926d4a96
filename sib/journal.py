"""Persistent operations that survive a restart: one sqlite table in the data directory.

Each UDP persistent operation is a row: KP identity, TID, transport, the KP's endpoint, the
request bytes (as the KP sent them, CREDENTIALS removed), and the sequence number and result
digest of the last IND sent, and whether the KP is known to have that state (its RES, or an
IND the transport saw ACKed when the SIB stopped). Rows are written in sqlite transactions
(atomic), when an operation starts, ends, and after each IND. On start the SIB reloads them and resumes sending INDs to the
KP's last endpoint (`Server.channel`), numbering on from the saved sequence number so that the
KP — a sleeping device that kept its IDs — takes the next IND as new.

Only UDP operations are kept: a TCP connection and a CoAP observation do not outlive the SIB
process, so their KPs re-subscribe anyway.

It also keeps each sealed KP's replay window and counter block (`ksp.secure.SealState`), so a
restart lets no recorded message in again (docs/wire-format.md 13.5).
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass

from ksp.codec import UDP, decode_kp_message, encode
from ksp.model import Request, Response
from ksp.secure import SealedAddr
from ksp.seqnum import FIRST_SEQ, next_seq
from ksp.session import KPIdentity

FILE = "persistent.sqlite3"
JOURNALED = frozenset({"udp"})


def result_digest(response: Response) -> bytes:
    """A digest of a result, to tell after a restart whether the KP has seen it."""
    return hashlib.sha256(repr(response.result).encode()).digest()


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


class Journal:
    def __init__(self, path: str) -> None:
        self._db = sqlite3.connect(path, isolation_level=None)
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
        if "delivered" not in columns:  # a journal written before the column existed
            self._db.execute("ALTER TABLE ops ADD COLUMN delivered INTEGER NOT NULL DEFAULT 0")

    def add(self, kp: KPIdentity, tid: int, transport: str, request: Request) -> None:
        request = request._replace(options=request.options._replace(credentials=None))
        self._db.execute("INSERT OR REPLACE INTO ops VALUES (?, ?, ?, ?, NULL, ?, NULL, NULL, 0)",
                         (*_kp_key(kp), tid, transport, encode(request, UDP)))

    def sent(self, kp: KPIdentity, tid: int, seq: int | None, digest: bytes | None,
             endpoint: Hashable | None, delivered: bool) -> None:
        """After a RES (`delivered`: the KP retransmits its request until it has the RES) or an
        IND (not yet known to be ACKed): what the KP was sent, and where it was last seen."""
        self._db.execute("UPDATE ops SET seq = ?, digest = ?, endpoint = ?, delivered = ? "
                         "WHERE kp_id = ? AND kp_addr = ? AND tid = ?",
                         (seq, digest, _endpoint_json(endpoint), int(delivered), *_kp_key(kp),
                          tid))

    def settle(self, awaiting_ack: Callable[[KPIdentity, int, str], bool]) -> None:
        """On a clean stop: mark delivered every operation whose last IND the transport saw
        ACKed (`awaiting_ack(kp, tid, transport)` false). After a crash nothing is settled, so
        a restarted SIB sends each last state again: at least once, never lost."""
        rows = self._db.execute("SELECT kp_id, kp_addr, tid, transport FROM ops "
                                "WHERE delivered = 0").fetchall()
        for kp_id, addr, tid, transport in rows:
            if not awaiting_ack(_kp_of(kp_id, addr), tid, transport):
                self._db.execute("UPDATE ops SET delivered = 1 WHERE kp_id = ? AND kp_addr = ? "
                                 "AND tid = ?", (kp_id, addr, tid))

    def remove(self, kp: KPIdentity, tid: int) -> None:
        self._db.execute("DELETE FROM ops WHERE kp_id = ? AND kp_addr = ? AND tid = ?",
                         (*_kp_key(kp), tid))

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
    """Wraps a `Channel`: numbers UDP INDs (1, 2, …, explicit `seq`) and records each in the
    journal. The SIB owns the numbering, not the transport session: the numbers go on across a
    restart, and after the session evicted the operation's delivery state (it keeps
    `max_entries` of them), where it would start again at 1 and the KP would drop the IND as
    stale."""

    __slots__ = ("inner", "transport", "kp", "tid", "journal", "seq", "digest", "on_indicate",
                 "endpoint")

    def __init__(self, inner, journal: Journal | None, seq: int | None = None,
                 digest: bytes | None = None, on_indicate=None, endpoint=None) -> None:
        self.inner = inner
        self.transport, self.kp, self.tid = inner.transport, inner.kp, inner.tid
        self.journal = journal if inner.transport in JOURNALED else None
        self.seq = seq
        self.digest = digest
        self.on_indicate = on_indicate
        self.endpoint = endpoint  # (transport, kp) -> the KP's endpoint now

    def respond(self, response: Response) -> None:
        self.inner.respond(response)
        self.responded(delivered=True)

    def indicate(self, response: Response) -> None:
        if self.transport == "udp":
            if response.seq is not None:
                self.seq = response.seq
            else:
                self.seq = FIRST_SEQ if self.seq is None else next_seq(self.seq)
                response = response._replace(seq=self.seq)
        if self.journal is not None:
            self.digest = result_digest(response)
        self.inner.indicate(response)
        self.responded(delivered=False)
        if self.on_indicate is not None:
            self.on_indicate()

    def end(self) -> None:
        self.inner.end()

    def responded(self, delivered: bool) -> None:
        """Journal what the KP was sent, and where it is."""
        if self.journal is not None:
            endpoint = self.endpoint(self.transport, self.kp) if self.endpoint else self.kp.addr
            self.journal.sent(self.kp, self.tid, self.seq, self.digest, endpoint, delivered)
