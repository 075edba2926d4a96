"""Merging a table's small files as they pile up: every batch writes one file per partition
directory it touches, so with a 1 s trigger a device's directory gains 86,400 files a day and a
fleet's tables millions, which every reader then lists and opens one by one. Parquet files are
merged into one Parquet file; N-Triples files (`--ntriples`) by concatenation.

Levels: a batch's file is level 0 (`batch-N.parquet`); once a partition directory holds
`threshold` committed files of one level they become one file of the next
(`merged-L-FIRST-LAST.parquet`: level L, holding the batches FIRST..LAST). A row is rewritten
at most once per level (log_threshold of the batches), and a directory keeps at most
`threshold` files per level: with 64, a device-day at one batch a second ends in fewer than
100 files instead of 86,400.

A merge never shows a reader half of itself: the directory's new content (the merged file and
hard links to the files it keeps) is built under `OUT/_staging/compaction/` and exchanged with
the partition directory in one `renameat2(RENAME_EXCHANGE)`; the old content, in staging after
the exchange, is deleted. A crash anywhere leaves the old or the new directory in the table and
only garbage in staging, which `Compactor` deletes when it starts. Only committed batches' files
are merged: the running batch's own file stays as it is, because Spark runs that batch again
after a crash and the new attempt replaces the file by its name (`job.place_batch`).

A reader that listed a directory before an exchange and opens one of its files after it finds
the file gone (Spark: FileNotFoundException, list again); no reader sees a row twice or misses
one. Without `renameat2` (not Linux, or a file system without RENAME_EXCHANGE) or hard links,
nothing is merged, with one warning; so after any other error of the file system while merging
(a full disk): the stream goes on, with its files as they were.
"""
from __future__ import annotations

import ctypes
import errno
import logging
import os
import re
import shutil
import time
from collections import OrderedDict
from pathlib import Path
from typing import Callable, Iterable, NamedTuple

log = logging.getLogger("ksp.ingest")

__all__ = ["Compactor", "merge_directory", "exchange", "THRESHOLD"]

#: Files of one level that make a merge (`--compact-after`).
THRESHOLD = 64
#: Seconds of merging per batch at most; the directories left wait for the next batches.
BUDGET_SECONDS = 0.5
#: Partition directories waiting to be looked at, at most (the oldest are dropped: they are
#: looked at again when a batch next writes to them).
MAX_WAITING = 100_000

_NAME = re.compile(r"(?:batch-(\d+)|merged-(\d+)-(\d+)-(\d+))(\.parquet|\.nt)")


class Part(NamedTuple):
    """A file of a partition directory: its level and the batches it holds."""
    level: int
    first: int
    last: int
    name: str
    suffix: str  # .parquet, or .nt (N-Triples: merged by concatenation)


def parts(directory: Path) -> list[Part]:
    """The directory's batch and merged files (other names are left alone)."""
    found = []
    with os.scandir(directory) as entries:
        for entry in entries:
            m = _NAME.fullmatch(entry.name)
            if m is None:
                continue
            if m.group(1) is not None:
                n = int(m.group(1))
                found.append(Part(0, n, n, entry.name, m.group(5)))
            else:
                found.append(Part(int(m.group(2)), int(m.group(3)), int(m.group(4)),
                                  entry.name, m.group(5)))
    return found


# -- the exchange ------------------------------------------------------------------------------

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_libc = ctypes.CDLL(None, use_errno=True) if os.name == "posix" else None


def exchange(a: Path, b: Path) -> None:
    """Swap two directories in one step (Linux's renameat2 with RENAME_EXCHANGE): at every
    moment each path names one of them, whole. OSError when the system or the file system
    cannot (ENOSYS, EINVAL)."""
    renameat2 = getattr(_libc, "renameat2", None)
    if renameat2 is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available here")
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(a), None, str(b))


# -- one directory -----------------------------------------------------------------------------

def merge_directory(directory: Path, staging: Path, running: int,
                    threshold: int = THRESHOLD) -> int:
    """Merge, level by level, the committed files (of batches before `running`) of
    `directory` while a level has `threshold` of them; `staging` is where the new content is
    built (on the same file system; removed after). Returns how many files were merged away."""
    if threshold < 2:
        raise ValueError(f"a level of {threshold} files: at least 2")
    merged = 0
    while True:
        levels: dict[tuple[int, str], list[Part]] = {}
        for part in parts(directory):
            if part.last < running:
                levels.setdefault((part.level, part.suffix), []).append(part)
        full = [level for level, group in levels.items() if len(group) >= threshold]
        if not full:
            return merged
        group = sorted(levels[min(full)], key=lambda p: p.first)
        name = _merged_name(group)
        if (directory / name).exists():  # would be written through its link
            raise FileExistsError(f"{directory}: {name} exists: batch ids went back (a new "
                                  f"checkpoint over this output?)")
        _replace(directory, staging, group, name)
        merged += len(group) - 1


def _merged_name(group: list[Part]) -> str:
    return (f"merged-{group[0].level + 1}-{group[0].first:012d}-"
            f"{max(p.last for p in group):012d}{group[0].suffix}")


def _replace(directory: Path, staging: Path, group: list[Part], name: str) -> None:
    paths = [directory / p.name for p in group]

    def merge(target: Path) -> None:
        if group[0].suffix == ".nt":
            with open(target, "wb") as merged:
                for path in paths:
                    with open(path, "rb") as f:
                        shutil.copyfileobj(f, merged)
        else:
            _merge_parquet(paths, target)

    # the running batch's file is kept as it is
    rebuild(directory, staging, {p.name for p in group}, name, merge)


def rebuild(directory: Path, staging: Path, drop: set[str], name: str | None,
            write: Callable[[Path], None]) -> None:
    """Give `directory` its content without the files `drop` and with a file `name` made by
    `write(path)` (none if `name` is None), in one step: the new content is built in `staging`
    (hard links to what stays), exchanged with the directory, and the old content deleted.
    The backfill replaces its own aggregates files so too."""
    shutil.rmtree(staging, ignore_errors=True)  # an earlier attempt's
    staging.mkdir(parents=True)
    for entry in os.scandir(directory):
        if entry.name not in drop:
            os.link(entry.path, staging / entry.name)
    if name is not None:
        write(staging / name)
        durable(staging / name)  # before the files it replaces are deleted
    exchange(staging, directory)
    shutil.rmtree(staging)  # the old content now


def durable(path: Path) -> None:
    """`path`'s content on disk (fsync)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def parquet_schema(path: Path):
    """(arrow schema, whether it has INT96 columns) of a Parquet file: Spark writes timestamps
    as INT96 (pyarrow reads them as nanoseconds, which Spark could not read back as INT64), so
    a file written beside the job's keeps the physical types of the job's."""
    import pyarrow.parquet as pq

    f = pq.ParquetFile(path)
    try:
        return f.schema_arrow, any(column.physical_type == "INT96" for column in f.schema)
    finally:
        f.close()


def _merge_parquet(paths: list[Path], target: Path) -> None:
    """The files' rows in one file, with every column any of them has (a file an older
    version wrote lacks the newer columns: null in its rows)."""
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    schemas = [parquet_schema(p) for p in paths]
    schema = pa.unify_schemas([s for s, _ in schemas])
    int96 = any(i for _, i in schemas)
    table = ds.dataset([str(p) for p in paths], format="parquet",
                       schema=schema).to_table(use_threads=False)
    pq.write_table(table, target, use_deprecated_int96_timestamps=int96)


# -- per batch ---------------------------------------------------------------------------------

class Compactor:
    """Looks, after each batch, at the partition directories it wrote to, and merges where a
    level is full — within `budget` seconds per batch, the rest in the next batches."""

    def __init__(self, out: Path, threshold: int = THRESHOLD,
                 budget: float = BUDGET_SECONDS) -> None:
        if threshold == 1 or threshold < 0:
            raise ValueError(f"compact after {threshold} files: 0 (never) or at least 2")
        self.out, self.threshold, self.budget = out, threshold, budget
        self.staging = out / "_staging" / "compaction"
        shutil.rmtree(self.staging, ignore_errors=True)  # a crash's leftovers: garbage
        self.waiting: OrderedDict[tuple[str, Path], None] = OrderedDict()
        self.enabled = threshold > 0
        self.merged = 0  # files merged away since the start
        self.clock = time.monotonic

    def after_batch(self, batch_id: int, touched: Iterable[tuple[str, Path]]) -> int:
        """`touched`: (table, partition directory relative to it) the batch wrote to.
        Returns the files merged away now."""
        if not self.enabled:
            return 0
        import pyarrow as pa

        waiting = self.waiting
        for key in touched:
            waiting[key] = None
            waiting.move_to_end(key)
        while len(waiting) > MAX_WAITING:
            waiting.popitem(last=False)
        started, merged = self.clock(), 0
        while waiting and self.clock() - started < self.budget:
            table, rel = waiting.popitem(last=False)[0]
            directory = self.out / table / rel
            try:
                merged += merge_directory(directory, self.staging, batch_id, self.threshold)
            except FileNotFoundError:
                continue  # gone (a re-run's stale partition)
            except FileExistsError as exc:  # left as it is: nothing of it is lost
                log.warning("not merged: %s", exc)
            except pa.ArrowException as exc:  # a damaged file: the stream goes on without
                log.warning("%s not merged: %s", directory, exc)  # merging it
            except OSError as exc:  # no exchange or no hard links here, a full disk...:
                log.warning("small files are not merged: %s", exc)  # the stream goes on
                self.enabled = False
                break
        self.merged += merged
        return merged
