"""`ksp-ingest backfill`: the late readings into the observations, each once.

A reading whose time was at or before the watermark when it came is a dead letter `late`
(`spark_ingest.job`): the stream can no longer tell it from a copy of a reading it stored, so
it does not guess. Offline, with the job stopped, that can be told exactly: this reads the
`late` dead letters, parses each as the stream would, and adds to the observations (and to the
N-Triples, when the job writes them) those whose (device, property, time) is not there yet —
once however often it runs, since what one run added the next finds stored. A late copy of a
stored reading (an MQTT redelivery after the watermark passed) is left where it is.

What it writes: one file per partition directory and run, `backfill-<ns>.parquet` (`.nt`),
written aside and renamed into place, with the schema of the job's own files (Spark's INT96
timestamps), so that every reader takes them as the job's. The job's compaction keeps them as
they are.

The aggregates: a minute the job closed without a row (every reading of it came late: a board
back from an outage) gets its row here, from every observation of it; one the job wrote keeps
the job's row (the readings that came in time), and one still open is the job's to write. So
each minute still has one row. Which minutes the job closed is its saved state after the last
committed batch (`aggregates.closed_after`); what an earlier backfill wrote in a partition is
replaced whole, the directory exchanged as compaction does.

It holds the output directory's lock (`spark_ingest.outlock`) while it runs, and refuses to
start while `ksp-ingest` runs on the same `--out`: the job's compaction exchanges whole
directories, which would lose a file placed in one meanwhile.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from .aggregates import MINUTE, closed_after
from .compaction import durable, parquet_schema, rebuild
from .job import IngestOptions, aggregate_table, last_committed, ntriples, observation_iri
from .outlock import hold
from .telemetry import LATE, parse

__all__ = ["Backfill", "backfill", "main"]

#: Late dead letters taken at once: a chunk's readings and the stored keys of the partitions
#: they fall in are what a run holds in memory.
CHUNK = 100_000


@dataclass
class Backfill:
    """What a run found and did."""

    late: int = 0  # late dead letters read
    stored: int = 0  # already an observation
    repeated: int = 0  # the same reading twice in a chunk of late ones (in two: `stored`)
    added: int = 0
    partitions: set[str] = field(default_factory=set)  # date=…/device=… written to
    minutes: int | None = None  # aggregate rows written; None: not looked at (a dry run, or
    # no committed batch: the job closed no minute)

    def __str__(self) -> str:
        n, m = len(self.partitions), self.minutes
        return (f"{self.late:,} late readings in the dead letters: {self.added:,} added to the "
                f"observations ({n:,} partition{'' if n == 1 else 's'}), {self.stored:,} "
                f"already there, {self.repeated:,} repeated; " + (
                    "aggregates not looked at" if m is None else
                    f"aggregates written for {m:,} minute{'' if m == 1 else 's'}"))


def backfill(out: Path, base: str = IngestOptions.base, *, dry_run: bool = False,
             chunk: int = CHUNK) -> Backfill:
    """Add the late readings of `out` to its observations (see the module docstring); `base`:
    the job's `--base`. Raises `outlock.Busy` while a job or another backfill holds `out`,
    ValueError when `out` is not a directory or `base` is not the one the stored observations
    were made with."""
    if not out.is_dir():
        raise ValueError(f"{out}: no such directory")
    lock = hold(out, "ksp-ingest backfill")
    try:
        shutil.rmtree(out / "_staging" / "backfill", ignore_errors=True)  # a crash's leftovers
        report = Backfill()
        writer = _Writer(out, base, dry_run)
        writer.check_base()
        for letters in _late_letters(out, chunk):
            report.late += len(letters)
            writer.add(letters, report)
        if not dry_run:
            writer.aggregates(report)
        return report
    finally:
        lock.close()


def _late_letters(out: Path, chunk: int) -> Iterator[list[tuple[str, bytes, float]]]:
    """The `late` dead letters as (topic, payload, received seconds), `chunk` at a time."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    if not (out / "dead_letters").is_dir():
        return
    table = ds.dataset(str(out / "dead_letters"), format="parquet", partitioning="hive")
    letters: list[tuple[str, bytes, float]] = []
    # File by file: the dataset's own scan read every file ahead (all of them in memory at the
    # first batch, whatever its readahead options said; `ksp bench backfill`).
    batches = (batch for fragment in table.get_fragments() for batch in fragment.to_batches(
        columns=["topic", "payload", "received"], filter=pc.field("reason") == LATE,
        batch_size=chunk, batch_readahead=1))
    for batch in batches:
        received = (ms / 1000 for ms in _ms(batch.column(2)))
        for topic, payload, at in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(),
                                      received):
            letters.append((topic, payload.encode() if isinstance(payload, str) else payload,
                            at))
            if len(letters) == chunk:
                yield letters
                letters = []
    if letters:
        yield letters


class _Writer:
    """Places a chunk's new observations, partition by partition."""

    def __init__(self, out: Path, base: str, dry_run: bool) -> None:
        self.out, self.base, self.dry_run = out, base, dry_run
        self.ntriples = (out / "ntriples").is_dir()
        self.schema = None  # the job's observation files' (found on the first write)

    def add(self, letters: list[tuple[str, bytes, float]], report: Backfill) -> None:
        partitions: dict[tuple[str, str], dict[tuple[str, int], tuple]] = {}
        for topic, payload, received in letters:
            device, prop, value, unit, when, reason = parse(topic, payload, received)
            if reason is not None:  # not a reading (a dead letter of another version)
                continue
            ms = round(when.timestamp() * 1000)
            day = when.strftime("%Y-%m-%d")
            readings = partitions.setdefault((day, device), {})
            if (prop, ms) in readings:
                report.repeated += 1
            else:
                readings[(prop, ms)] = (device, prop, value, unit, when, ms)
        adding: dict[tuple[str, str], list[tuple]] = {}
        for (day, device), readings in sorted(partitions.items()):
            stored = self._stored(day, device)
            new = [r for key, r in readings.items() if key not in stored]
            report.stored += len(readings) - len(new)
            if new:
                adding[(day, device)] = new
                report.added += len(new)
                report.partitions.add(f"date={day}/device={device}")
        if self.dry_run:
            return
        if self.ntriples:  # first: after a crash the next run, not finding the observations
            by_day: dict[str, list[tuple]] = {}  # stored, writes them again (the same triples)
            for (day, _), new in adding.items():
                by_day.setdefault(day, []).extend(new)
            for day, rows in by_day.items():
                self._write_ntriples(day, rows)
        for (day, device), new in adding.items():
            self._write_parquet(day, device, new)

    def aggregates(self, report: Backfill) -> None:
        """The aggregates of the minutes the job closed without writing them (every reading
        of theirs came late), in the partitions this run added to."""
        done = last_committed(self.out / "_checkpoint")
        closed = None if done is None else closed_after(self.out / "_aggregates_state", done)
        if closed is not None:
            report.minutes = sum(self._aggregate(rel, closed) for rel in sorted(
                report.partitions))

    def _aggregate(self, rel: str, closed: int) -> int:
        """Write the rows of `rel`'s minutes that ended by `closed` and have no row of the
        job's, computed from every observation of theirs; replaces what an earlier backfill
        wrote there (one file, the directory exchanged whole as compaction does). Returns the
        rows written."""
        import pyarrow.dataset as ds
        import pyarrow.parquet as pq

        device = rel.rpartition("device=")[2]
        obs = ds.dataset(str(self.out / "observations" / rel), format="parquet").to_table(
            columns=["observedProperty", "hasSimpleResult", "resultTime"])
        minutes: dict[tuple[int, str], list] = {}
        prefix = len(self.base)
        for prop, value, ms in zip(obs.column("observedProperty").to_pylist(),
                                   obs.column("hasSimpleResult").to_pylist(),
                                   _ms(obs.column("resultTime"))):
            minute = ms // MINUTE * MINUTE
            if minute + MINUTE > closed:  # still open in the job, or to come: the job's
                continue
            entry = minutes.setdefault((minute, prop[prefix:]), [value, value, 0.0, 0])
            entry[0], entry[1] = min(entry[0], value), max(entry[1], value)
            entry[2] += value
            entry[3] += 1
        directory = self.out / "aggregates" / rel
        written, earlier = set(), []
        for entry in os.scandir(directory) if directory.is_dir() else ():
            if entry.name.startswith("backfill-"):
                earlier.append(entry.name)
            elif entry.name.endswith(".parquet"):
                rows = pq.read_table(entry.path, columns=["minute", "observedProperty"])
                written.update(zip(_ms(rows.column("minute")),
                                   (p[prefix:] for p in rows.column("observedProperty")
                                    .to_pylist())))
        rows = [(minute, device, prop, lo, hi, total / n, n)
                for (minute, prop), (lo, hi, total, n) in sorted(minutes.items())
                if (minute, prop) not in written]
        if not rows and not earlier:
            return 0
        table = aggregate_table(self.base, rows)

        def write(path: Path) -> None:
            pq.write_table(table, path)

        if not earlier:
            self._place(directory, ".parquet", write)
        else:  # a reader sees the earlier rows or these, never both
            rebuild(directory, self.out / "_staging" / "backfill" / "aggregates", set(earlier),
                    f"backfill-{time.time_ns()}.parquet" if rows else None, write)
        return len(rows)

    def check_base(self) -> None:
        """ValueError unless the stored observations were made with `base` (the first file
        found stands for all: one job, one base), before anything is written with it."""
        first = next((self.out / "observations").rglob("*.parquet"), None)
        if first is not None:
            self._check(first.parent)

    def _check(self, directory: Path, table=None) -> None:
        import pyarrow.dataset as ds

        if table is None:
            table = ds.dataset(str(directory), format="parquet").to_table(
                columns=["madeBySensor"])
        device = directory.name.partition("=")[2]
        sensors = set(table.column("madeBySensor").unique().to_pylist())
        if sensors - {self.base + device}:
            raise ValueError(f"{directory} was made with another --base than {self.base!r} "
                             f"(its sensor: {sorted(sensors)[0]!r}): give the job's")

    def _stored(self, day: str, device: str) -> set[tuple[str, int]]:
        """(property, ms) of the observations stored for `device` on `day`."""
        import pyarrow.dataset as ds

        directory = self.out / "observations" / f"date={day}" / f"device={device}"
        if not directory.is_dir():
            return set()
        table = ds.dataset(str(directory), format="parquet").to_table(
            columns=["madeBySensor", "observedProperty", "resultTime"])
        self._check(directory, table)
        prefix = len(self.base)
        return set(zip((p[prefix:] for p in table.column("observedProperty").to_pylist()),
                       _ms(table.column("resultTime"))))

    def _job_schema(self):
        """The schema of the job's observation files (Spark's), or the same written anew."""
        import pyarrow as pa

        if self.schema is None:
            first = next((self.out / "observations").rglob("*.parquet"), None)
            if first is not None:
                self.schema = parquet_schema(first)
            else:
                self.schema = (pa.schema([
                    ("observation", pa.string()), ("madeBySensor", pa.string()),
                    ("observedProperty", pa.string()), ("hasSimpleResult", pa.float64()),
                    ("unit", pa.string()), ("resultTime", pa.timestamp("ns"))]), True)
        return self.schema

    def _write_parquet(self, day: str, device: str, rows: list[tuple]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema, int96 = self._job_schema()
        base = self.base
        time_type = schema.field("resultTime").type
        columns = {
            "observation": [observation_iri(base, d, p, ms) for d, p, _, _, _, ms in rows],
            "madeBySensor": [base + d for d, *_ in rows],
            "observedProperty": [base + p for _, p, *_ in rows],
            "hasSimpleResult": [v for _, _, v, *_ in rows],
            "unit": [u for _, _, _, u, _, _ in rows],
            "resultTime": pa.array([ms for *_, ms in rows], pa.int64()).cast(
                pa.timestamp("ms", time_type.tz)).cast(time_type)}
        table = pa.table({name: columns[name] for name in schema.names}, schema=schema)
        directory = self.out / "observations" / f"date={day}" / f"device={device}"
        self._place(directory, ".parquet", lambda path: pq.write_table(
            table, path, use_deprecated_int96_timestamps=int96))

    def _write_ntriples(self, day: str, rows: list[tuple]) -> None:
        base = self.base
        text = "".join(ntriples(observation_iri(base, d, p, ms), base + d, base + p, v,
                                _xsd(when)) for d, p, v, _, when, ms in rows)
        self._place(self.out / "ntriples" / f"date={day}", ".nt",
                    lambda path: path.write_text(text, encoding="utf-8"))

    def _place(self, directory: Path, suffix: str, write) -> None:
        """Write aside (`OUT/_staging/backfill/`), make it durable, rename into `directory`."""
        staging = self.out / "_staging" / "backfill"
        staging.mkdir(parents=True, exist_ok=True)
        name = f"backfill-{time.time_ns()}{suffix}"
        path = staging / name
        write(path)
        durable(path)
        directory.mkdir(parents=True, exist_ok=True)
        os.replace(path, directory / name)


def _ms(times) -> list[int]:
    """Milliseconds since the epoch of a timestamp column, whatever its unit (Spark's INT96
    reads as nanoseconds)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ticks = pc.cast(times, pa.int64()).to_pylist()
    per_ms = {"s": None, "ms": 1, "us": 1_000, "ns": 1_000_000}[times.type.unit]
    return [t * 1000 for t in ticks] if per_ms is None else [t // per_ms for t in ticks]


def _xsd(when: datetime) -> str:
    """As the job writes resultTime in N-Triples (Spark's yyyy-MM-dd'T'HH:mm:ss.SSSXXX)."""
    when = when.astimezone(timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ksp-ingest backfill", description=(
        "The late readings (dead letters 'late') into the observations, each once; run it "
        "with the job stopped."))
    p.add_argument("--out", default=IngestOptions.out, metavar="DIR",
                   help="the job's output directory (default %(default)s/)")
    p.add_argument("--base", default=IngestOptions.base, metavar="IRI",
                   help="the job's --base (default %(default)s)")
    p.add_argument("--dry-run", action="store_true", help="count, write nothing (a reading "
                   f"whose copies lie over {CHUNK:,} letters apart counts as added twice)")
    args = p.parse_args(argv)
    try:
        report = backfill(Path(args.out), args.base, dry_run=args.dry_run)
    except (OSError, ValueError) as exc:  # `Busy` (the job runs), a wrong --out or --base
        print(f"ksp-ingest backfill: {exc}", file=sys.stderr)
        return 2
    print(f"ksp-ingest backfill: {'(dry run) ' if args.dry_run else ''}{report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
