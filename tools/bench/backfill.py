"""`ksp-ingest backfill`'s cost (`ksp bench backfill`): late readings per second and the memory
it takes, against the least any backfill must do — reading the late dead letters and parsing
each (the baseline) — in the same run.

No Spark and no MQTT: an output laid out as the job leaves it, made with pyarrow in the job's
schema (INT96 timestamps): `--devices` devices with `--stored` observations each on one day
(one merged file per device, as compaction leaves a day, and the job's aggregates of them),
and for each size L, L late dead letters across the devices, half of them late copies of
stored readings and half new readings of the next day, whose minutes the job closed without a
row (so the backfill writes their aggregates, reading each touched day's observations). Each
measurement runs in a process of its own (its peak RSS is its own), baseline and backfill
alternating over `--rounds`, each backfill on a fresh copy of the output. Reported per L: late
readings per second for each, the backfill's time over the baseline's, and the peak RSS of
each: with the letters taken `spark_ingest.backfill.CHUNK` at a time, the backfill's memory
should not grow with L.
"""
from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

from .report import bench_parser, environment, print_report

BASE = "http://example.org/greenhouse#"
DAY = datetime(2026, 11, 20, tzinfo=timezone.utc)
STEP_MS = 10_000  # a stored reading every 10 s


def make_output(out: Path, devices: int, stored: int, late: int) -> None:
    """The job's layout: `stored` observations per device, `late` late dead letters."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from spark_ingest.job import observation_iri
    from spark_ingest.telemetry import reading, topic_of

    for d in range(devices):
        device = f"s{d}"
        ms = [int(DAY.timestamp() * 1000) + k * STEP_MS for k in range(stored)]
        directory = out / "observations" / "date=2026-11-20" / f"device={device}"
        directory.mkdir(parents=True)
        pq.write_table(pa.table({
            "observation": [observation_iri(BASE, device, "t", m) for m in ms],
            "madeBySensor": [BASE + device] * stored, "observedProperty": [BASE + "t"] * stored,
            "hasSimpleResult": [float(k % 40) for k in range(stored)],
            "unit": ["Cel"] * stored,
            "resultTime": pa.array(ms, pa.int64()).cast(pa.timestamp("ms")).cast(
                pa.timestamp("ns"))}), directory / f"merged-1-000000000000-{stored:012d}.parquet",
            use_deprecated_int96_timestamps=True)
    received = DAY + timedelta(days=2)
    _job_state(out, devices, stored, received)
    directory = out / "dead_letters" / f"date={received:%Y-%m-%d}"
    directory.mkdir(parents=True)
    per_file = 100_000
    for first in range(0, late, per_file):
        topics, payloads = [], []
        for k in range(first, min(late, first + per_file)):
            device = f"s{k % devices}"
            step = (k // devices) % stored
            # even k: a copy of a stored reading; odd k: a new one, on the next day (no reading
            # of it came in time: the backfill writes its minutes' aggregates)
            when = DAY + timedelta(milliseconds=step * STEP_MS) + (
                timedelta(0) if k % 2 == 0 else timedelta(days=1, seconds=5))
            topics.append(topic_of(device))
            payloads.append(reading(device, "t", float(k % 40), "Cel", when).decode())
        n = len(topics)
        pq.write_table(pa.table({
            "seq": pa.array(range(first, first + n), pa.int64()), "topic": topics,
            "payload": payloads,
            "received": pa.array([received.replace(tzinfo=None)] * n, pa.timestamp("ns")),
            "reason": ["late"] * n}), directory / f"batch-{first:012d}.parquet",
            use_deprecated_int96_timestamps=True)


def _job_state(out: Path, devices: int, stored: int, closed: datetime) -> None:
    """What the job leaves beside: a committed batch, its minutes closed up to `closed`, and
    the aggregates it wrote for the stored readings (one file per device)."""
    import json

    import pyarrow.parquet as pq

    from spark_ingest.job import aggregate_table

    (out / "_checkpoint" / "commits").mkdir(parents=True)
    (out / "_checkpoint" / "commits" / "1").write_text("v1\n{}\n")
    (out / "_aggregates_state").mkdir()
    ms = int(closed.timestamp() * 1000)
    (out / "_aggregates_state" / "batch-000000000001.json").write_text(json.dumps(
        {"newest": ms, "closed": ms, "open": []}))
    first = int(DAY.timestamp() * 1000)
    minutes = sorted({(first + k * STEP_MS) // 60_000 * 60_000 for k in range(stored)})
    for d in range(devices):
        directory = out / "aggregates" / "date=2026-11-20" / f"device=s{d}"
        directory.mkdir(parents=True)
        pq.write_table(aggregate_table(BASE, [(m, f"s{d}", "t", 0.0, 39.0, 19.5, 6)
                                              for m in minutes]),
                       directory / "merged-1-000000000000-000000000001.parquet")


CHILD = """
import json, resource, sys, time
from pathlib import Path
out, mode = Path(sys.argv[1]), sys.argv[2]
started = time.perf_counter()
if mode == "baseline":
    from spark_ingest.backfill import CHUNK, _late_letters
    from spark_ingest.telemetry import parse
    n = 0
    for letters in _late_letters(out, CHUNK):
        for topic, payload, received in letters:
            parse(topic, payload, received)
            n += 1
    result = {"late": n}
else:
    from spark_ingest.backfill import backfill
    r = backfill(out, sys.argv[3])
    result = {"late": r.late, "added": r.added, "stored": r.stored, "repeated": r.repeated,
              "minutes": r.minutes}
result["seconds"] = time.perf_counter() - started
result["rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(result))
"""


def _measure(out: Path, mode: str) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, str(out), mode, BASE],
                          capture_output=True, text=True, timeout=3600, check=True)
    return json.loads(done.stdout)


def run(devices: int, stored: int, sizes: list[int], rounds: int, root: Path) -> list[dict]:
    rows = []
    for late in sizes:
        source = root / f"out-{late}"
        make_output(source, devices, stored, late)
        runs: dict[str, list[dict]] = {"baseline": [], "backfill": []}
        for _ in range(rounds):
            runs["baseline"].append(_measure(source, "baseline"))
            copy = root / "copy"
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(source, copy)
            runs["backfill"].append(_measure(copy, "backfill"))
        shutil.rmtree(source)
        b = runs["backfill"][-1]
        assert b["late"] == late and b["added"] + b["stored"] + b["repeated"] == late, b
        row = {"late": late, "added": b["added"], "minutes": b["minutes"]}
        for mode, results in runs.items():
            seconds = statistics.median(r["seconds"] for r in results)
            row[mode] = {"rate": late / seconds, "seconds": seconds,
                         "rss": max(r["rss_mib"] for r in results)}
        rows.append(row)
        print(f"{late:,} late: baseline {row['baseline']['rate']:,.0f}/s, backfill "
              f"{row['backfill']['rate']:,.0f}/s, {row['backfill']['rss']:.0f} MiB",
              file=sys.stderr)
    return rows


def table(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    headers = ["late letters", "added", "minutes aggregated", "baseline readings/s",
               "baseline peak RSS MiB", "backfill readings/s", "backfill peak RSS MiB",
               "backfill ÷ baseline (time)"]
    body = [[f"{r['late']:,}", f"{r['added']:,}", f"{r['minutes']:,}",
             f"{r['baseline']['rate']:,.0f}",
             f"{r['baseline']['rss']:.0f}", f"{r['backfill']['rate']:,.0f}",
             f"{r['backfill']['rss']:.0f}",
             f"**{r['backfill']['seconds'] / r['baseline']['seconds']:.2f}×**"]
            for r in rows]
    return headers, body


def main(argv: list[str] | None = None, prog: str | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    parser = bench_parser(__name__, __doc__, prog,
                          "10 devices, 1,000 stored each, 10,000 late letters, 1 round")
    parser.add_argument("--devices", type=int, default=100)
    parser.add_argument("--stored", type=int, default=8_640,
                        help="observations per device (a day at one per 10 s)")
    parser.add_argument("--late", default="100000,1000000", help="late letters, per row")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    if args.quick:
        args.devices, args.stored, args.late, args.rounds = 10, 1_000, "10000", 1
    sizes = [int(x) for x in args.late.split(",")]
    with tempfile.TemporaryDirectory(prefix="ksp-bench-backfill-") as tmp:
        rows = run(args.devices, args.stored, sizes, args.rounds, Path(tmp))
    headers, body = table(rows)
    env = environment("pyarrow")
    title = (f"ksp-ingest backfill: late dead letters into the observations, {args.devices:,} "
             f"devices with {args.stored:,} stored observations each, half the letters late "
             f"copies, each run a process of its own, {env['python']}")
    print_report(title, headers, body, markdown=args.markdown, module="tools.bench.backfill",
                 prog=prog, argv=argv, libraries=env["libraries"])


if __name__ == "__main__":
    main()
