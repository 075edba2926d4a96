"""The ingest's output over time (`ksp bench ingest-files`): what months of micro-batches leave
in the tables, with the small files merged (`spark_ingest.compaction`, the default) and
without (`--compact-after 0`): the baseline, in the same run.

No Spark and no MQTT: each batch stages one Parquet file per device as Spark writes them
(INT96 timestamps, `ROWS` readings per device and batch) and places it, through the job's own
`place_batch`, into two tables side by side — one that `Compactor` merges after each batch,
one it does not — so that the machine's noise hits both alike. Per window of batches: the
files in each table, the milliseconds per batch writing and placing (both tables) and
merging, and a reader's cost — the milliseconds pyarrow takes to read one device's readings
so far from each table (`pyarrow.dataset` over its directory, as a query for one sensor
would). Targets: merged, the files stay bounded and the merging's cost per batch flat (the
second half of the run within 1.5× of the first); the reader's cost grows with the rows, not
with the batches.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from .report import bench_parser, command_line, environment, print_report

ROWS = 10  # readings per device and batch: a 1 s trigger, a reading every 100 ms
T0 = datetime(2026, 11, 26, tzinfo=timezone.utc)


def _rows(batch: int, device: int):
    import pyarrow as pa

    return pa.table({
        "observation": [f"obs/{device}/{batch}/{k}" for k in range(ROWS)],
        "hasSimpleResult": pa.array([float(k) for k in range(ROWS)], pa.float64()),
        "resultTime": pa.array([T0 + timedelta(seconds=batch, milliseconds=100 * k)
                                for k in range(ROWS)], pa.timestamp("ns"))})


def run(batches: int, devices: int, window: int, threshold: int, root: Path) -> list[dict]:
    """`batches` batches of `devices` devices into two tables side by side, one merged and one
    not (each batch's files written once, hard-linked into both, so the machine's noise hits
    both alike); a row per `window` batches."""
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    from spark_ingest.compaction import Compactor
    from spark_ingest.job import place_batch

    outs = {"merged": root / "merged", "not merged": root / "not-merged"}
    compactor = Compactor(outs["merged"], threshold=threshold, budget=60.0)
    rows, writing, merging = [], 0.0, 0.0
    for batch in range(batches):
        started = time.perf_counter()
        staged = root / "staged" / str(batch)
        files = []
        for device in range(devices):
            rel = Path("date=2026-11-26") / f"device=d{device}"
            path = staged / rel / "part-0.parquet"
            path.parent.mkdir(parents=True)
            pq.write_table(_rows(batch, device), path, use_deprecated_int96_timestamps=True)
            files.append((path, rel))
        for name, out in outs.items():
            copies = []
            for path, rel in files:
                copy = path.with_name(f"{name}.parquet")
                os.link(path, copy)
                copies.append((copy, rel))
            touched = place_batch(out, "observations", batch, copies)
        shutil.rmtree(staged)
        merge_started = time.perf_counter()
        compactor.after_batch(batch, [("observations", rel) for rel in touched])
        merging += time.perf_counter() - merge_started
        writing += merge_started - started
        if (batch + 1) % window == 0:
            row = {"batches": batch + 1, "write_ms": writing / window * 1e3,
                   "merge_ms": merging / window * 1e3}
            for name, out in outs.items():
                table = out / "observations"
                started = time.perf_counter()
                read = ds.dataset(str(table / "date=2026-11-26" / "device=d0"),
                                  format="parquet").to_table()
                row[f"read_ms {name}"] = (time.perf_counter() - started) * 1e3
                if read.num_rows != (batch + 1) * ROWS:
                    raise RuntimeError(f"{name}: device d0 has {read.num_rows} rows after "
                                       f"{batch + 1} batches")
                row[f"files {name}"] = sum(1 for _ in table.rglob("*.parquet"))
            rows.append(row)
            writing = merging = 0.0
    return rows


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = bench_parser("tools.bench.ingest_files", __doc__, prog,
                          "600 batches of 10 devices")
    parser.add_argument("--batches", type=int, default=5_000)
    parser.add_argument("--devices", type=int, default=20)
    parser.add_argument("--window", type=int, help="batches per row (default: a tenth)")
    parser.add_argument("--compact-after", type=int, default=64, metavar="N",
                        help="the merging's level size (default %(default)s)")
    args = parser.parse_args(argv)
    if args.quick:
        args.batches, args.devices = 600, 10
    window = args.window or max(1, args.batches // 10)
    with tempfile.TemporaryDirectory(prefix="ksp-bench-files-") as tmp:
        rows = run(args.batches, args.devices, window, args.compact_after, Path(tmp))
    body = [[f"{r['batches']:,}", f"{r['files not merged']:,}", f"{r['files merged']:,}",
             f"{r['write_ms']:.1f}", f"{r['merge_ms']:.1f}",
             f"{r['read_ms not merged']:.1f}", f"{r['read_ms merged']:.1f}",
             f"{r['read_ms merged'] / r['read_ms not merged']:.2f}×"] for r in rows]
    headers = ["batches", "files, not merged", "files, merged", "ms/batch writing and placing",
               "ms/batch merging", "read one device ms, not merged",
               "read one device ms, merged", "read merged ÷ not"]
    title = (f"Ingest output over time: {args.devices} devices, {ROWS} readings per device "
             f"and batch, merged at {args.compact_after} files per level")
    env = environment("pyarrow")
    print_report(title, headers, body, markdown=args.markdown, module="tools.bench.ingest_files",
                 prog=prog, argv=argv, libraries=f"{env['python']}, {env['libraries']}")
    half = len(rows) // 2
    first = sum(r["merge_ms"] for r in rows[:half]) / max(half, 1)
    last = sum(r["merge_ms"] for r in rows[half:]) / max(len(rows) - half, 1)
    print(f"\nMerging, ms per batch, second half of the run ÷ first half: "
          f"{last / first if first else float('nan'):.2f}× (target ≤ 1.5×); merging ÷ writing "
          f"and placing: {sum(r['merge_ms'] for r in rows) / sum(r['write_ms'] for r in rows):.2f}; "
          f"files at the end {rows[-1]['files merged']:,} against "
          f"{rows[-1]['files not merged']:,}.")
    if not args.markdown:
        print(f"command: {command_line('tools.bench.ingest_files', prog, argv)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
