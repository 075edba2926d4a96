"""How long `ksp-ingest`'s Spark driver takes to start, with its class archive
(`spark_ingest.class_archive`) and without, in one run.

Run as ``python -m tools.bench.spark_start [--rounds N] [--markdown]`` or ``ksp bench
spark-start``. Each round starts a `local[2]` session as the job does (`spark_session`, its JVM
apart), runs one small job and stops, once with `--class-cache off` (the baseline) and once with
an archive the run made first, in alternating order so both see the same load. Reported per
mode: seconds to the session, seconds to the first job's answer, and the JVM's CPU seconds at
that point (user + system, from /proc: what a loaded machine changes least), median and worst.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

START = """
import os, sys, time
t = time.monotonic()
from spark_ingest.cli import spark_session
spark = spark_session("local[2]", "spark-start", apart=True, class_cache=sys.argv[1])
session = time.monotonic() - t
spark.range(1000).selectExpr("sum(id)").collect()
first = time.monotonic() - t
jvm = spark.sparkContext._gateway.proc.pid
fields = open(f"/proc/{jvm}/stat").read().rsplit(")", 1)[1].split()
cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
print(session, first, cpu, jvm, flush=True)
spark.stop()
"""


def start(cache: str) -> tuple[float, float, float, int]:
    done = subprocess.run([sys.executable, "-c", START, cache], cwd=ROOT, text=True,
                          capture_output=True, timeout=900)
    if done.returncode:
        raise RuntimeError(done.stderr[-2000:])
    session, first, cpu, jvm = done.stdout.split()
    return float(session), float(first), float(cpu), int(jvm)


def gone(pid: int, timeout: float = 900) -> None:
    """Until the JVM `pid` has exited (an archive's maker writes it then)."""
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.5)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="spark-start-") as cache:
        *_, maker = start(cache)  # makes the archive at its JVM's exit
        gone(maker)
        runs: dict[str, list[tuple[float, float, float]]] = {"off": [], "archive": []}
        for k in range(args.rounds):
            for mode in (("off", "archive") if k % 2 == 0 else ("archive", "off")):
                session, first, cpu, jvm = start("off" if mode == "off" else cache)
                runs[mode].append((session, first, cpu))
                gone(jvm, 60)
    rows = []
    for mode, label in (("off", "no archive (`--class-cache off`)"),
                        ("archive", "class archive")):
        columns = list(zip(*runs[mode]))
        rows.append([label] + [f"{statistics.median(c):.1f} / {max(c):.1f}" for c in columns])
    base = [statistics.median(c) for c in zip(*runs["off"])]
    arch = [statistics.median(c) for c in zip(*runs["archive"])]
    rows.append(["archive ÷ none (median)"] + [f"**{a / b:.2f}**" for a, b in zip(arch, base)])
    head = ["driver", "session, s (median / worst)", "first job, s", "JVM CPU, s"]
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for row in rows:
            print("| " + " | ".join(row) + " |")
    else:
        for row in [head, *rows]:
            print("  ".join(f"{c:<34}" for c in row))
    print(f"{args.rounds} rounds each, alternating", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
