"""The knowledge base: a pyoxigraph store (on disk in a data directory, or in memory) whose
write path applies a precomputed delta atomically and reports exactly what changed.

The delta is computed *before* anything is written (`sib.updates`): existence checks for DATA
operations, instantiated templates for pattern updates, quad lists for graph management. So a
request that is refused changes nothing, and the quads a write reports are the quads that
really appeared or disappeared — what the persistent-operation index is fed with.
"""
from __future__ import annotations

import fcntl
import gc
import json
import logging
import math
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from typing import NamedTuple, NoReturn, TypeVar

import pyoxigraph as ox

from ksp.terms import DEFAULT_GRAPH, IRI, BNode, Term
from ksp.ratelog import RateLimitedLog

from .budget import check
from .errors import StoreUnwritable
from .oxterms import Quad, graph_from_ox, graph_to_ox, quad_from_ox, quad_to_ox, to_ox

T = TypeVar("T")
log = logging.getLogger("ksp.sib")
#: A store refusing writes says so once a minute, however many writes it refuses.
unwritable_log = RateLimitedLog(log, time.monotonic)
REOPEN_FREE_BYTES = 1 << 20
"""Free space a data directory's file system needs before a store whose writes failed is
reopened (an attempt at most once a second)."""


class Delta(NamedTuple):
    """Quads that appeared and disappeared in one write (disjoint; both really changed)."""

    added: tuple[Quad, ...] = ()
    removed: tuple[Quad, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.added or self.removed)

    @property
    def quads(self) -> tuple[Quad, ...]:
        return self.added + self.removed


EMPTY_DELTA = Delta()

TEMPORARY_PREFIX = "ksp-store-"
ABANDONED_AFTER = 60.0
"""Seconds a temporary store's directory must have been left alone before another SIB may
take it for abandoned (a younger one may belong to a SIB still opening it)."""
_ours: set[str] = set()  # this process's temporary stores: never probed (below)


def sweep_abandoned(parent: str | None = None, min_age: float = ABANDONED_AFTER) -> list[str]:
    """Delete the temporary stores (`ksp-sib --memory`) of SIBs that died without deleting
    them — killed with SIGKILL, by the OOM killer, by a power cut — so that a gateway that
    restarts now and then does not fill its temporary directory with copies of its store.

    A directory is abandoned when no process holds its RocksDB LOCK (a live store holds it for
    as long as it is open) and it was last changed over `min_age` seconds ago. This process's
    own stores are never probed: POSIX locks belong to the process, and closing the probe's
    descriptor would release the lock its own store holds. Returns the paths deleted."""
    parent = os.path.realpath(parent if parent is not None else tempfile.gettempdir())
    try:
        names = [n for n in os.listdir(parent) if n.startswith(TEMPORARY_PREFIX)]
    except OSError:
        return []
    gone = []
    now = time.time()
    for name in names:
        path = os.path.join(parent, name)
        try:
            if path in _ours or now - os.stat(path).st_mtime < min_age:
                continue
            fd = os.open(os.path.join(path, "LOCK"), os.O_RDWR)
        except FileNotFoundError:  # no LOCK: its SIB died before RocksDB opened it
            fd = None
        except OSError:
            continue
        try:
            if fd is not None:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # OSError: a SIB holds it
            shutil.rmtree(path)
        except OSError:
            continue
        finally:
            if fd is not None:
                os.close(fd)
        gone.append(path)
    if gone:
        log.info("deleted %d temporary store(s) in %s left by SIBs that did not exit",
                 len(gone), parent)
        log.debug("deleted: %s", ", ".join(gone))
    return gone


_BNODE = "urn:x-ksp:blank-node"
#: The function by which a write names a stored blank node (SPARQL's DATA blocks cannot: their
#: blank nodes are new ones): `<urn:x-ksp:blank-node>("label")` is the blank node `label`.
_FUNCTIONS = {ox.NamedNode(_BNODE): lambda label: ox.BlankNode(label.value)}


def _data_block(quads: Iterable[Quad]) -> str:
    lines = []
    for q in quads:
        triple = f"{to_ox(q[0])} {to_ox(q[1])} {to_ox(q[2])} ."
        lines.append(triple if q[3] == DEFAULT_GRAPH else f"GRAPH <{q[3]}> {{ {triple} }}")
    return "\n".join(lines)


def _cells(term: Term) -> str:
    """A subject's or object's two VALUES cells: the term, or its blank node's label."""
    if isinstance(term, BNode):  # to_ox: a label the store cannot hold is refused here
        return f"UNDEF {json.dumps(to_ox(term).value)}"
    return f"{to_ox(term)} UNDEF"


def _operations(verb: str, quads: tuple[Quad, ...], out: list[str]) -> bool:
    """Append to `out` SPARQL update operations that delete or insert (`verb`) exactly
    `quads`: a DATA block, and for quads with a blank node one operation per graph naming the
    nodes by label. Whether there were such."""
    plain: list[Quad] = []
    by_graph: dict[IRI, list[str]] = {}
    for q in quads:
        if isinstance(q[0], BNode) or isinstance(q[2], BNode):
            by_graph.setdefault(q[3], []).append(
                f"({_cells(q[0])} {to_ox(q[1])} {_cells(q[2])})")
        else:
            plain.append(q)
    if plain:
        out.append(f"{verb} DATA {{\n{_data_block(plain)}\n}}")
    for g, rows in by_graph.items():
        template = "?S ?p ?O" if g == DEFAULT_GRAPH else f"GRAPH <{g}> {{ ?S ?p ?O }}"
        out.append(f"{verb} {{ {template} }} WHERE {{ VALUES (?s ?sl ?p ?o ?ol) {{\n"
                   + "\n".join(rows) + f"\n}} BIND(IF(BOUND(?sl), <{_BNODE}>(?sl), ?s) AS ?S) "
                   f"BIND(IF(BOUND(?ol), <{_BNODE}>(?ol), ?o) AS ?O) }}")
    return bool(by_graph)


class QuadStore:
    """The store, in ksp terms. `path=None` keeps everything in memory; `temporary=True` puts
    the on-disk engine in a directory of its own that `close()` deletes (what `ksp-sib
    --memory` runs: nothing persists, and maintenance never pauses it, below).

    **Maintenance** (docs/sib.md, "Flat cost over time"). pyoxigraph keeps what a write
    removes: RocksDB as tombstones until compaction, the in-memory store as old versions for
    good; a sensor replacing one reading every period makes every later read of that quad
    slower, without bound. So after `maintain_after` removed quads — and at least as many as
    the store holds, which keeps the cost per write constant — or sooner when the removals
    pile up under one subject or one predicate (`maintain_hot`, below), `maintenance_due()`
    says so and
    the SIB's scheduler calls `maintain()` between two requests: an on-disk store is compacted
    (`Store.optimize`) in a background thread while requests go on (RocksDB allows it, and
    the call releases the GIL); an in-memory store is copied into a fresh one, which pauses
    the scheduler (about 190 ms for 100,000 quads).

    **A hot spot** (a sensor replacing its reading; docs/sib.md, "Flat cost over time"): what a
    read pays for is the removed quads under its own prefix, the subject or the predicate it
    names, not all of them; a maintenance costs about 14 ms plus 2 µs per quad held, each
    removed quad about 1 µs per update that reads past it. So maintenance is also due once one
    subject or one predicate has had `maintain_hot` removed quads (500), or the square root of
    4 × the quads held if more (2,000 for 1,000,000 quads): the two costs balanced. Waiting for
    10,000 removals let a reading replaced 10,000 times take 2.8 ms to read against 0.11 ms
    fresh, and an aged `ksp-sib` 1.3–1.4× a fresh one's CPU per update (`ksp bench soak --ab`).

    **Renewal**: RocksDB keeps state of its own that grows with the compactions themselves —
    most likely blocks of the files each one writes go into its block cache (32 MiB by default, a size
    pyoxigraph does not let one set) and stay there after the file is gone, until pushed out:
    a `ksp-sib` compacting every few hundred updates grew by about 2–3 MiB per 100,000 of them
    up to 1,000,000 (`ksp bench soak --ab`), which reopening the store gives back. So an
    on-disk store is reopened every `renew_after` maintenance runs (100: about 50,000 updates
    of a hot reading), between two requests and with no read under way (`renewal_due`,
    `renew`); it takes about 50 ms, the time RocksDB takes to open.

    **A failed write** (a full disk, an I/O error) writes nothing, and RocksDB then refuses
    every write until it is reopened; so the store refuses writes itself (`StoreUnwritable`,
    one log line a minute) while reads go on, and reopens itself at the next write once the file
    system has room again (`REOPEN_FREE_BYTES`): what was acknowledged is in RocksDB's log,
    which the reopening reads back."""

    def __init__(self, path: str | None = None, *, temporary: bool = False,
                 maintain_after: int | None = 10_000, maintain_hot: int | None = 500,
                 renew_after: int | None = 100) -> None:
        self._tmp = None
        if temporary:
            sweep_abandoned()
            # Errors ignored at cleanup: once its lock is let go, another SIB's sweep may
            # delete an idle store's directory first.
            self._tmp = tempfile.TemporaryDirectory(prefix=TEMPORARY_PREFIX,
                                                    ignore_cleanup_errors=True)
            path = self._tmp.name
            _ours.add(os.path.realpath(path))
        self.path = path
        self._store = ox.Store(path) if path is not None else ox.Store()
        self.maintain_after = maintain_after
        self.maintain_hot = maintain_hot
        self.renew_after = renew_after
        #: Reopenings done (`renew`), and `maintenance_runs` at the last one.
        self.renewals = 0
        self._renewed_at = 0
        self._size = len(self._store)  # kept up to date by the writes (len() may scan)
        #: Quads removed since the last maintenance; the most of them under one subject or one
        #: predicate, and the counts that tell it.
        self.removed = 0
        self.hot = 0
        self._removed_under: dict[tuple[int, Term], int] = {}
        #: Maintenance runs done, and the seconds the last one took.
        self.maintenance_runs = 0
        self.maintenance_seconds = 0.0
        self._compaction: threading.Thread | None = None
        #: Twice the writes begun, less one while a write is under way (odd): a read that
        #: takes more than one snapshot saw one state if this was even and unchanged from
        #: before its first to after its last (`stable`).
        self.writes = 0
        #: Why writes fail (None: they do not), and when a reopening may be tried next.
        self.unwritable: str | None = None
        self._reopen_at = 0.0

    @property
    def oxigraph(self) -> ox.Store:
        """The underlying pyoxigraph store (for query evaluation)."""
        return self._store

    # -- reads ----------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._store)

    @property
    def size(self) -> int:
        """Quads in the store, kept by the writes (`len()` may scan the whole store)."""
        return self._size

    def stable(self, read: Callable[[], T]) -> T:
        """`read()`, again until no write began or ended while it ran: for a read of more than
        one snapshot (each query and lookup takes its own), from a reader thread. Writes are
        short and one at a time; the budget in force (`sib.budget.check`) bounds the tries."""
        while True:
            before = self.writes
            if not before % 2:
                result = read()
                if self.writes == before:
                    return result
                del result
            check()
            time.sleep(0)

    def query(self, text: str, **kwargs):
        """pyoxigraph's answer to the SPARQL query `text` (`Store.query`'s arguments)."""
        return self._store.query(text, **kwargs)

    def contains(self, q: Quad) -> bool:
        return quad_to_ox(q) in self._store

    def match(self, s: Term | None = None, p: Term | None = None, o: Term | None = None,
              g: IRI | None = None) -> list[Quad]:
        """Quads matching the constants given (None = any; g=None = every graph)."""
        it = self._store.quads_for_pattern(
            None if s is None else to_ox(s), None if p is None else to_ox(p),
            None if o is None else to_ox(o), None if g is None else graph_to_ox(g))
        return [quad_from_ox(q) for q in it]

    def exists(self, s: Term | None = None, p: Term | None = None, o: Term | None = None,
               g: IRI | None = None) -> bool:
        """Is there at least one quad matching the constants given?"""
        it = self._store.quads_for_pattern(
            None if s is None else to_ox(s), None if p is None else to_ox(p),
            None if o is None else to_ox(o), None if g is None else graph_to_ox(g))
        return next(it, None) is not None

    def graph_exists(self, g: IRI) -> bool:
        """The default graph always exists; a named graph once created or written to."""
        return g == DEFAULT_GRAPH or self._store.contains_named_graph(graph_to_ox(g))

    def named_graphs(self) -> list[IRI]:
        return [graph_from_ox(g) for g in self._store.named_graphs()]

    # -- writes ---------------------------------------------------------------------------

    def apply(self, delta: Delta, create: Iterable[IRI] = (), drop: Iterable[IRI] = ()) -> None:
        """Write `delta` (quads removed, then added) and create/drop named graphs, as one
        transaction (a single SPARQL update, blank nodes named by their labels): a reader's
        snapshot holds all of it or none."""
        create, drop = list(create), list(drop)
        if not (delta or create or drop):
            return
        if self.unwritable is not None:
            self._reopen()
        self.writes += 1
        try:
            self._write(delta, create, drop)
        except OSError as exc:  # RocksDB: an I/O error, a full disk
            self._refuse(str(exc))
        finally:
            self.writes += 1
        self._counted(delta)

    def _write(self, delta: Delta, create: list[IRI], drop: list[IRI]) -> None:
        parts = [f"DROP SILENT GRAPH <{g}>" for g in drop]
        named = _operations("DELETE", delta.removed, parts)
        named = _operations("INSERT", delta.added, parts) or named
        parts += [f"CREATE SILENT GRAPH <{g}>" for g in create]
        self._store.update(" ;\n".join(parts), custom_functions=_FUNCTIONS if named else None)

    def _refuse(self, reason: str) -> NoReturn:
        """Writes fail from now on, until `_reopen` succeeds: raise `StoreUnwritable`."""
        self.unwritable = reason
        unwritable_log.error("unwritable", "store: writes refused until it can write again: %s",
                             reason)
        raise StoreUnwritable(reason) from None

    def _reopen(self) -> None:
        """Open the store again if its file system has room (RocksDB leaves the error state
        only so); else, or if that fails, refuse the write (`_refuse`). Reads go on throughout
        (a store that cannot be opened for writing is opened read-only)."""
        if self.path is None:  # in memory: no error state to leave
            self.unwritable = None
            return
        now = time.monotonic()
        try:
            stat = os.statvfs(self.path)
            room = stat.f_bavail * stat.f_frsize >= REOPEN_FREE_BYTES
        except OSError:
            room = False
        if now < self._reopen_at or not room:
            self._refuse(self.unwritable)
        self._reopen_at = now + 1.0
        failed = self._open_again()
        if failed is not None:
            self._refuse(failed)
        log.warning("store: writable again (reopened)")

    def _open_again(self, wait: float = 0.0) -> str | None:
        """Close RocksDB (and its error state, its caches with it) and open it again: None
        once it is open for writing, else why not (then it is open read-only). For up to
        `wait` seconds a failed opening is tried again: what still held the store open (a
        result not yet collected) lets go meanwhile."""
        self._wait_for_compaction()
        self._store = None
        deadline = time.monotonic() + wait
        while True:
            try:
                self._store = ox.Store(self.path)
                break
            except OSError as exc:
                if time.monotonic() >= deadline:
                    self._store = ox.Store.read_only(self.path)
                    return str(exc)
            gc.collect()
            time.sleep(0.01)
        self.unwritable = None
        return None

    def renewal_due(self) -> bool:
        """Whether an on-disk store is `renew_after` maintenance runs past its last reopening
        (and none runs now)."""
        every = self.renew_after
        return (every is not None and self.path is not None and self._compaction is None
                and self.unwritable is None
                and self.maintenance_runs - self._renewed_at >= every)

    def renew(self, wait: float = 5.0) -> None:
        """Reopen the store now, giving back what RocksDB's caches grew to. Only with nothing
        else holding it open (no read under way: the caller knows); what still does is waited
        for up to `wait` seconds, then the store refuses writes until a write finds it free
        (`_reopen`)."""
        started = time.perf_counter()
        self._renewed_at = self.maintenance_runs
        failed = self._open_again(wait)
        if failed is not None:
            self.unwritable = failed
            self._reopen_at = time.monotonic()
            log.error("store: not reopened, writes wait for it: %s", failed)
            return
        self.renewals += 1
        log.info("store renewed (reopened) in %.0f ms", (time.perf_counter() - started) * 1e3)

    def load(self, quads: Iterable[Quad]) -> None:
        """Bulk-load quads (no delta, no notifications): for seeding a store."""
        self._store.bulk_extend(quad_to_ox(q) for q in quads)
        self._size = len(self._store)

    def flush(self) -> None:
        """Write the memory tables out; on a store that cannot write, logged (what it
        acknowledged is in RocksDB's log, read back at the next start)."""
        self._wait_for_compaction()
        try:
            self._store.flush()
        except (OSError, RuntimeError) as exc:
            log.error("store not flushed (its log keeps every acknowledged write): %s", exc)

    def close(self) -> None:
        """Flush; a temporary store's directory is deleted."""
        self.flush()
        if self._tmp is not None:
            self._store = ox.Store()  # let go of the RocksDB files before deleting them
            self._tmp.cleanup()
            _ours.discard(os.path.realpath(self._tmp.name))
            self._tmp = None

    # -- maintenance ----------------------------------------------------------------------

    def _counted(self, delta: Delta) -> None:
        removed = delta.removed
        self.removed += len(removed)
        self._size += len(delta.added) - len(removed)
        if removed and self.maintain_hot is not None:
            under, hot = self._removed_under, self.hot
            for q in removed:
                for at in ((0, q[0]), (1, q[1])):
                    n = under[at] = under.get(at, 0) + 1
                    if n > hot:
                        hot = n
            self.hot = hot

    def maintenance_due(self) -> bool:
        after, hot = self.maintain_after, self.maintain_hot
        return (after is not None and self._compaction is None and self.unwritable is None
                and (self.removed >= max(after, self._size)
                     or (hot is not None and self.hot >= max(hot, math.isqrt(4 * self._size)))))

    def maintain(self) -> None:
        """Compact (on disk, in the background) or rebuild (in memory) now."""
        self.removed = self.hot = 0
        self._removed_under = {}
        if self.path is not None:
            self._compaction = threading.Thread(target=self._compact, name="ksp-compaction",
                                                daemon=True)
            self._compaction.start()
            return
        started = time.perf_counter()
        fresh = ox.Store()
        fresh.bulk_extend(self._store)
        for g in self._store.named_graphs():  # empty named graphs exist too
            fresh.add_graph(g)
        self._store = fresh
        self._done(started)

    def _compact(self) -> None:
        started = time.perf_counter()
        try:
            self._store.optimize()
        except Exception:  # a failed compaction costs speed, never data
            log.exception("store compaction failed")
        self._done(started)
        self._compaction = None

    def _done(self, started: float) -> None:
        self.maintenance_seconds = time.perf_counter() - started
        self.maintenance_runs += 1
        log.info("store maintenance: %s in %.0f ms", "compacted" if self.path else "rebuilt",
                 self.maintenance_seconds * 1e3)

    def _wait_for_compaction(self) -> None:
        thread = self._compaction
        if thread is not None:
            thread.join()
