"""Per-minute aggregates (min, max, mean, count per device and property), kept by the driver.

Each micro-batch adds its readings' partial aggregates (one small Spark aggregation, collected)
to the minutes still open; a minute closes, and is written once, when the watermark (the newest
reading's time minus the delay) has passed its end. A reading for a minute already written is
late (Spark's de-duplication drops most such readings before; one it kept, as its watermark
moves only between batches, is in the observations, not the aggregates).

Why not a second streaming query, as before: it read each batch's observations back through a
file stream, whose metadata log Spark never prunes (one entry per batch, the whole log
rewritten every tenth batch: it grows for as long as the job runs), and it planned a second
micro-batch for every batch. Here the open minutes are at most the delay's worth per device
and property, bounded by `max_open` in all.

Exactly once across a crash: after each batch the open minutes are saved as that batch's state
(`OUT/_aggregates_state/batch-N.json`, written aside and renamed). A batch that Spark runs
again starts from the state of the batch before it, so it closes the same minutes into the same
file names.
"""
from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("ksp.ingest")

__all__ = ["Minutes", "interval_ms", "MAX_OPEN"]

MINUTE = 60_000

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
    """The open minutes, their state files and the closing of each batch."""

    def __init__(self, state_dir: Path, delay_ms: int, max_open: int = MAX_OPEN) -> None:
        self.dir = Path(state_dir)
        self.delay = delay_ms
        self.max_open = max_open
        self.late = 0  # readings for minutes already written (in the observations only)
        self._state = self._pending = _State()
        self._loaded = False

    def add(self, batch_id: int, partials) -> list[tuple]:
        """Add one batch's partials — rows (minute ms, device, property, min, max, sum, count,
        newest ms) — and return the minutes it closes: (minute ms, device, property, min, max,
        mean, count), oldest first. Call `save(batch_id)` once they are written."""
        if not self._loaded or batch_id <= self._state.batch:  # a new process, or a re-run
            self._state, self._loaded = self._load(batch_id), True
        s = self._state
        opened = dict(s.open)  # the entries are replaced, never changed: `s` stays as it was
        newest, closed = s.newest, s.closed
        for minute, device, prop, lo, hi, total, n, last in partials:
            newest = last if newest is None else max(newest, last)
            if closed is not None and minute + MINUTE <= closed:
                self.late += n
                continue
            key = (minute, device, prop)
            entry = opened.get(key)
            opened[key] = [lo, hi, total, n] if entry is None else [
                min(entry[0], lo), max(entry[1], hi), entry[2] + total, entry[3] + n]
        if newest is not None and (closed is None or newest - self.delay > closed):
            closed = newest - self.delay
        done = [] if closed is None else sorted(k for k in opened if k[0] + MINUTE <= closed)
        if len(opened) - len(done) > self.max_open:  # the oldest minutes close early
            rest = sorted(k for k in opened if closed is None or k[0] + MINUTE > closed)
            last_early = rest[len(rest) - self.max_open - 1][0]
            early = [k for k in rest if k[0] <= last_early]
            log.warning("aggregates: %d minutes open, over %d: the %d oldest closed early",
                        len(rest), self.max_open, len(early))
            done += early
            closed = last_early + MINUTE
        rows = []
        for key in done:
            lo, hi, total, n = opened.pop(key)
            rows.append((*key, lo, hi, total / n, n))
        self._pending = _State(batch_id, newest, closed, opened)
        return rows

    def save(self, batch_id: int) -> None:
        """The state after `batch_id`, written aside and renamed; of the older ones only the
        newest stays (a batch that Spark runs again starts from the state before it)."""
        s = self._pending
        self.dir.mkdir(parents=True, exist_ok=True)
        target = self.dir / f"batch-{batch_id:012d}.json"
        tmp = target.with_suffix(".tmp")
        tmp.write_text(json.dumps({"newest": s.newest, "closed": s.closed, "open": [
            [*key, *value] for key, value in s.open.items()]}))
        os.replace(tmp, target)
        self._state = s
        older = sorted(p for p in self.dir.glob("batch-*.json") if _batch_of(p) < batch_id)
        for old in older[:-1]:
            old.unlink(missing_ok=True)

    def open_count(self) -> int:
        """Minutes open after the last `add`."""
        return len(self._pending.open)

    def _load(self, batch_id: int) -> _State:
        """The state saved by the newest batch before `batch_id` (none: empty)."""
        saved = [p for p in self.dir.glob("batch-*.json") if _batch_of(p) < batch_id]
        if not saved:
            return _State(batch_id - 1)
        path = max(saved, key=_batch_of)
        data = json.loads(path.read_text())
        return _State(batch_id - 1, data["newest"], data["closed"],
                      {tuple(row[:3]): row[3:] for row in data["open"]})


def _batch_of(path: Path) -> int:
    try:
        return int(path.stem.split("-", 1)[1])
    except (IndexError, ValueError):
        return -1
