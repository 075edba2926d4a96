"""One writer of an output directory at a time: `ksp-ingest` holds `OUT/.lock` while it runs,
and `ksp-ingest backfill` while it writes. Two jobs on one `--out` would number their batches
alike and write over each other's files, share a buffer and a checkpoint; a backfill that
placed a file in a directory the job's compaction was exchanging would lose it.

An advisory `flock`: the kernel releases it when the holder exits, `kill -9` included, so no
stale lock is ever left to remove by hand.
"""
from __future__ import annotations

import fcntl
import os
from pathlib import Path

__all__ = ["Busy", "hold"]

NAME = ".lock"


class Busy(OSError):
    """The output directory is held by another process (`holder` says which, as it wrote)."""

    def __init__(self, out: Path, holder: str) -> None:
        super().__init__(f"{out} is in use by {holder or 'another process'}: one ksp-ingest "
                         f"job or backfill at a time")
        self.holder = holder


def hold(out: Path, what: str):
    """Take the lock on `out` (created if missing) for this process, or raise `Busy`. Returns
    the open lock file: the lock lasts until it is closed, or the process ends."""
    out.mkdir(parents=True, exist_ok=True)
    f = open(out / NAME, "a+", encoding="utf-8")  # not inherited by child processes (PEP 446)
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip()
        f.close()
        raise Busy(out, holder) from None
    except BaseException:
        f.close()
        raise
    f.seek(0)
    f.truncate()
    f.write(f"{what} (pid {os.getpid()})\n")
    f.flush()
    return f
