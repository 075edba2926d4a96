"""The MQTT source's durable buffer: messages received and not yet processed by a committed
micro-batch, in SQLite (WAL), numbered in arrival order.

Why a buffer at all: MQTT has no offsets to go back to. A message is acknowledged to the broker
(QoS 1 PUBACK) only once it is in this file, and deleted from it only when Spark has committed
the micro-batch that read it (`commit`), so a job killed at any point finds every message it
had not finished either here or still at the broker (a persistent session redelivers what was
not acknowledged). The sequence numbers are Spark's offsets; a restarted job re-reads a batch
from the same numbers, so what it writes is the same.

Writes are batched (one transaction per `append`) and not fsynced (`synchronous=NORMAL`): safe
against a killed process, which is what the tests do; against a power cut, `durable=True`
fsyncs each transaction. The buffer is bounded (`max_messages`): when full, the receiver stops
acknowledging, and the broker stops sending once its in-flight window is used.
"""
from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

__all__ = ["Buffer", "shard_directory"]

FILE = "mqtt-buffer.sqlite3"


def shard_directory(directory: str | Path, k: int, shards: int) -> Path:
    """The directory of shard `k` of a buffer in `directory` split into `shards` (one per
    receiver): `directory` itself when there is one."""
    return Path(directory) if shards == 1 else Path(directory) / f"shard-{k}"


class Buffer:
    def __init__(self, directory: str | Path, *, max_messages: int = 1_000_000,
                 durable: bool = False, readonly: bool = False) -> None:
        self.path = Path(directory) / FILE
        self.max_messages = max_messages
        # One connection, used by the receiver's threads and the Spark reader's: one at a time.
        self._lock = threading.RLock()
        if readonly:
            self._db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True,
                                       check_same_thread=False, timeout=30)
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=30,
                                   isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
        with self._transaction():  # the receiver's process and the job's may open it at once
            self._db.execute("CREATE TABLE IF NOT EXISTS messages (seq INTEGER PRIMARY KEY "
                             "AUTOINCREMENT, topic TEXT NOT NULL, payload BLOB NOT NULL, "
                             "received REAL NOT NULL)")
            # Committed up to here, kept apart: AUTOINCREMENT never reuses a number, and an
            # empty buffer still knows where Spark is.
            self._db.execute("CREATE TABLE IF NOT EXISTS committed (seq INTEGER NOT NULL)")
            if self._db.execute("SELECT COUNT(*) FROM committed").fetchone()[0] == 0:
                self._db.execute("INSERT INTO committed VALUES (0)")

    def __len__(self) -> int:
        """Messages kept: read from the file, as another process (the job's, when the
        receiver runs apart) deletes what committed batches read."""
        with self._lock:  # one statement, one snapshot: `commit` deletes a prefix
            last, committed = self._db.execute(
                "SELECT (SELECT MAX(seq) FROM messages), (SELECT seq FROM committed)").fetchone()
        return 0 if last is None else last - committed

    @property
    def full(self) -> bool:
        return len(self) >= self.max_messages

    def append(self, messages: Sequence[tuple[str, bytes]], now: float | None = None) -> int:
        """Keep `messages` ((topic, payload), in arrival order) in one transaction; returns
        the last sequence number."""
        received = time.time() if now is None else now
        with self._lock, self._transaction():
            self._db.executemany("INSERT INTO messages (topic, payload, received) VALUES "
                                 "(?, ?, ?)", [(t, p, received) for t, p in messages])
        return self.last()

    def last(self) -> int:
        """The newest sequence number kept or committed (0: none yet)."""
        with self._lock:
            row = self._db.execute("SELECT MAX(seq) FROM messages").fetchone()[0]
            return row if row is not None else self.committed()

    def committed(self) -> int:
        with self._lock:
            return self._db.execute("SELECT seq FROM committed").fetchone()[0]

    def backlog(self, now: float | None = None) -> tuple[int, float]:
        """(messages waiting for a committed batch, seconds the oldest has waited)."""
        # Two lookups on the rowid, not a scan (a status line or a metrics scrape calls this
        # while the buffer may hold a million): `commit` only ever deletes a prefix, so what
        # is kept is every number from the first kept to the last, and the first came first.
        with self._lock:
            first = self._db.execute("SELECT seq, received FROM messages ORDER BY seq LIMIT 1"
                                     ).fetchone()
            if first is None:
                return 0, 0.0
            last = self._db.execute("SELECT MAX(seq) FROM messages").fetchone()[0]
        waited = (time.time() if now is None else now) - first[1]
        return last - first[0] + 1, max(0.0, waited)

    def read(self, after: int, upto: int) -> Iterator[tuple[int, str, bytes, float]]:
        """(seq, topic, payload, received) with after < seq <= upto, in order; read 1,000 at a
        time, the lock held for each read only."""
        while True:
            with self._lock:
                rows = self._db.execute("SELECT seq, topic, payload, received FROM messages "
                                        "WHERE seq > ? AND seq <= ? ORDER BY seq LIMIT 1000",
                                        (after, upto)).fetchall()
            if not rows:
                return
            yield from rows
            after = rows[-1][0]

    def commit(self, upto: int) -> None:
        """Spark committed every batch up to `upto`: those messages go."""
        with self._lock, self._transaction():
            self._db.execute("DELETE FROM messages WHERE seq <= ?", (upto,))
            self._db.execute("UPDATE committed SET seq = MAX(seq, ?)", (upto,))

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _transaction(self):
        db = self._db

        class _Tx:
            def __enter__(self):
                db.execute("BEGIN IMMEDIATE")

            def __exit__(self, kind, exc, tb):
                db.execute("COMMIT" if kind is None else "ROLLBACK")

        return _Tx()
