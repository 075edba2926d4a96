"""Per-minute aggregates (min, max, mean, count per device and property), kept by the driver.

Each micro-batch adds its readings' partial aggregates (one small Spark aggregation, collected)
to the minutes still open; a minute closes, and is written once, when the watermark (the newest
reading's time minus the delay) has passed its end. A reading for a minute already written is
late (Spark's de-duplication drops most such readings before; one it kept, as its watermark
moves only between batches, is in the observations, not the aggregates).

Why not a second streaming query: it would read each batch's observations back through a
file stream, whose metadata log Spark never prunes (one entry per batch, the whole log
rewritten every tenth batch: it grows for as long as the job runs), and it would plan a second
micro-batch for every batch. Here the open minutes are at most the delay's worth per device
and property, bounded by `max_open` in all.

Exactly once across a crash: after each batch its changes to the open minutes are saved
(`OUT/_aggregates_state/delta-N.json`, or the whole state as `batch-N.json` once the changes
since the last whole one outweigh it; written aside and renamed). A batch that Spark runs
again starts from the state of the batch before it (the newest whole state and the changes
after it), so it closes the same minutes into the same file names.
"""
from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("ksp.ingest")

__all__ = ["Minutes", "closed_after", "interval_ms", "MAX_OPEN", "MAX_DELTAS", "write_atomic"]

MINUTE = 60_000

#: Batches' changes saved after a whole state at most; then a whole state again (and its load
#: reads at most this many files after it).
MAX_DELTAS = 100

MAX_OPEN = 200_000
"""Open (minute, device, property) entries at most. Over it, the oldest minutes close early
with what they have, and readings for them come late (a fleet of 1,000 devices with 10
properties and a 10-minute watermark keeps about 110,000 open)."""

_UNITS = {"millisecond": 1, "ms": 1, "second": 1000, "sec": 1000, "minute": 60_000,
          "min": 60_000, "hour": 3_600_000, "day": 86_400_000, "week": 604_800_000}
_INTERVAL = re.compile(r"(?:\s*\d+(?:\.\d+)?\s*[a-z]+)+\s*", re.IGNORECASE)
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]+)", re.IGNORECASE)


def interval_ms(text: str) -> int:
    """Spark's interval text ("10 minutes", "1 hour 30 minutes", "500 milliseconds") in ms."""
    body = re.sub(r"^\s*interval\s+", "", text, flags=re.IGNORECASE)
    parts = _PART.findall(body) if _INTERVAL.fullmatch(body) else []
    units = [_UNITS.get(unit.lower()) or _UNITS.get(unit.lower()[:-1]) for _, unit in parts]
    if not parts or None in units:
        raise ValueError(f"not an interval: {text!r} (e.g. '10 minutes', '30 seconds')")
    return int(sum(float(n) * unit for (n, _), unit in zip(parts, units)))


@dataclass
class _State:
    batch: int = -1  # the batch this state is after
    newest: int | None = None  # the newest reading's time, ms
    closed: int | None = None  # minutes ending at or before it are written, ms
    open: dict = field(default_factory=dict)  # (minute, device, property) -> [min, max, sum, n]


class Minutes:
    """The open minutes, their state files and the closing of each batch.

    A batch's cost follows what it changes, not how many minutes are open (a fleet of 1,000
    devices with 10 properties keeps about 110,000): the open minutes are indexed by minute,
    and `save` writes only the batch's changes (`delta-N.json`), a whole state
    (`batch-N.json`) once the changes written since the last one outweigh it, or after
    `MAX_DELTAS` batches."""

    def __init__(self, state_dir: Path, delay_ms: int, max_open: int = MAX_OPEN) -> None:
        self.dir = Path(state_dir)
        self.delay = delay_ms
        self.max_open = max_open
        self.late = 0  # readings for minutes already written (in the observations only)
        self._state = _State()
        self._by_minute: dict[int, set] = {}
        self._changes: dict = {}  # the batch's: key -> entry, or None (closed)
        self._since_whole = self._deltas = 0  # changes, and files, since the last whole state
        self._loaded = False

    def add(self, batch_id: int, partials) -> list[tuple]:
        """Add one batch's partials — rows (minute ms, device, property, min, max, sum, count,
        newest ms) — and return the minutes it closes: (minute ms, device, property, min, max,
        mean, count), oldest first. Call `save(batch_id)` once they are written."""
        if not self._loaded or batch_id <= self._state.batch:
            self._load(batch_id)  # a new process, or a batch run again
        s, changes = self._state, self._changes
        changes.clear()
        opened, by_minute = s.open, self._by_minute
        newest, closed = s.newest, s.closed
        for minute, device, prop, lo, hi, total, n, last in partials:
            newest = last if newest is None else max(newest, last)
            if closed is not None and minute + MINUTE <= closed:
                self.late += n
                continue
            key = (minute, device, prop)
            entry = opened.get(key)
            if entry is None:
                by_minute.setdefault(minute, set()).add(key)
                entry = [lo, hi, total, n]
            else:
                entry = [min(entry[0], lo), max(entry[1], hi), entry[2] + total, entry[3] + n]
            opened[key] = changes[key] = entry
        if newest is not None and (closed is None or newest - self.delay > closed):
            closed = newest - self.delay
        ending = [] if closed is None else sorted(m for m in by_minute if m + MINUTE <= closed)
        count = due = sum(len(by_minute[m]) for m in ending)
        if len(opened) - count > self.max_open:  # the oldest minutes close early
            rest = sorted(m for m in by_minute if closed is None or m + MINUTE > closed)
            early = []
            while len(opened) - count > self.max_open:
                early.append(rest.pop(0))
                count += len(by_minute[early[-1]])
            log.warning("aggregates: %d minutes open, over %d: the %d oldest closed early",
                        len(opened) - due, self.max_open, count - due)
            ending += early
            closed = early[-1] + MINUTE
        rows = []
        for key in sorted(k for m in ending for k in by_minute.pop(m)):
            lo, hi, total, n = opened.pop(key)
            changes[key] = None
            rows.append((*key, lo, hi, total / n, n))
        s.batch, s.newest, s.closed = batch_id, newest, closed
        return rows

    def save(self, batch_id: int) -> None:
        """The state after `batch_id`, as its changes or whole, written aside and renamed; of
        the files before, those that the state before `batch_id` is made of stay (a batch that
        Spark runs again starts from it) and the older go."""
        s, changes = self._state, self._changes
        self.dir.mkdir(parents=True, exist_ok=True)
        whole, delta = self._path("batch", batch_id), self._path("delta", batch_id)
        if (self._since_whole + len(changes) > len(s.open)
                or self._deltas >= MAX_DELTAS):
            _write(whole, {"newest": s.newest, "closed": s.closed,
                           "open": [[*key, *value] for key, value in s.open.items()]})
            delta.unlink(missing_ok=True)  # an earlier attempt's, the same state
            self._since_whole = self._deltas = 0
        else:
            _write(delta, {"newest": s.newest, "closed": s.closed, "set": [
                [*key, *value] for key, value in changes.items() if value is not None],
                "closed_keys": [list(key) for key, value in changes.items() if value is None]})
            whole.unlink(missing_ok=True)
            self._since_whole += len(changes)
            self._deltas += 1
        files = self._files()
        base = max((n for kind, n, _ in files if kind == "batch" and n < batch_id), default=None)
        for kind, n, path in files if base is not None else ():
            if n < base or (kind == "delta" and n == base):
                path.unlink(missing_ok=True)

    def open_count(self) -> int:
        """Minutes open after the last `add`."""
        return len(self._state.open)

    def _files(self) -> list[tuple[str, int, Path]]:
        found = []
        for path in self.dir.glob("*.json") if self.dir.is_dir() else ():
            m = re.fullmatch(r"(batch|delta)-(\d+)\.json", path.name)
            if m:
                found.append((m[1], int(m[2]), path))
        return sorted(found, key=lambda f: (f[1], f[0] == "delta"))

    def _path(self, kind: str, batch_id: int) -> Path:
        return self.dir / f"{kind}-{batch_id:012d}.json"

    def _load(self, batch_id: int) -> None:
        """The state after the batches before `batch_id`: the newest whole state before it
        and the changes after that one (none: empty)."""
        files = [f for f in self._files() if f[1] < batch_id]
        wholes = [n for kind, n, _ in files if kind == "batch"]
        base = max(wholes, default=-1)
        s = _State(batch_id - 1)
        self._since_whole = self._deltas = 0
        for kind, n, path in files:
            if n < base or (n == base and kind == "delta"):
                continue
            data = json.loads(path.read_text())
            s.newest, s.closed = data["newest"], data["closed"]
            if kind == "batch":
                s.open = {tuple(row[:3]): row[3:] for row in data["open"]}
                continue
            for row in data["set"]:
                s.open[tuple(row[:3])] = row[3:]
            for key in data["closed_keys"]:
                s.open.pop(tuple(key), None)
            self._since_whole += len(data["set"]) + len(data["closed_keys"])
            self._deltas += 1
        self._state, self._loaded = s, True
        self._by_minute = {}
        for key in s.open:
            self._by_minute.setdefault(key[0], set()).add(key)


def closed_after(state_dir: Path, batch_id: int) -> int | None:
    """The time (ms) at or before which the job had closed every minute after `batch_id` (a
    minute ending by then is written, or never will be: a reading for it is late), from the
    saved state; None if it saved none."""
    minutes = Minutes(state_dir, 0)
    minutes._load(batch_id + 1)
    return minutes._state.closed


def _write(path: Path, data: dict) -> None:
    write_atomic(path, json.dumps(data))


def write_atomic(path: Path, text: str) -> None:
    """`text` into `path`, written aside and renamed: a reader, or a process that starts after
    a crash, finds the old content or the new, whole (the job's manifests use it too)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
