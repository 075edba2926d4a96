"""Merging the ingest's small files (`spark_ingest.compaction`), without Spark: files written
as Spark writes them (INT96 timestamps, Spark's schema metadata), placed by the job's own
`place_batch`, merged level by level; killed at every step of a merge and started again, with
the batch Spark would run again; the running batch's file never merged; a file system without
the exchange, a damaged file, the limits. The job with real Spark merging under kill -9:
tests/test_ingest.py."""
from __future__ import annotations

import errno
import logging
import os
import random
import shutil
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

pa = pytest.importorskip("pyarrow")
import pyarrow.dataset as ds  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from spark_ingest import compaction  # noqa: E402
from spark_ingest.compaction import Compactor, exchange, merge_directory, parts  # noqa: E402
from spark_ingest.job import place_batch  # noqa: E402

T0 = datetime(2026, 11, 26, tzinfo=timezone.utc)
_write = pq.write_table  # as the job's Spark writes them (a test patches pq's to kill)
SPARK_META = {b"org.apache.spark.version": b"4.3.0",
              b"org.apache.spark.sql.parquet.row.metadata": b'{"type":"struct"}'}


def rows_of(batch: int, device: str, n: int) -> pa.Table:
    """`n` readings of one batch and device, each unique, as Spark's observation files hold
    them (the partition columns are in the path)."""
    times = [T0 + timedelta(seconds=batch, milliseconds=k) for k in range(n)]
    table = pa.table({
        "observation": [f"obs/{device}/{batch}/{k}" for k in range(n)],
        "hasSimpleResult": pa.array([batch + k / 1000 for k in range(n)], pa.float64()),
        "resultTime": pa.array(times, pa.timestamp("ns"))})
    return table.replace_schema_metadata(SPARK_META)


def write_batch(out: Path, staging: Path, batch: int, devices: list[str], n: int = 3
                ) -> list[Path]:
    """Batch `batch`'s files, staged and placed as the job places them."""
    files = []
    for device in devices:
        rel = Path("date=2026-11-26") / f"device={device}"
        path = staging / str(batch) / rel / "part-0.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        _write(rows_of(batch, device, n), path, use_deprecated_int96_timestamps=True)
        files.append((path, rel))
    return place_batch(out, "observations", batch, files)


def observations(out: Path) -> Counter:
    table = ds.dataset(str(out / "observations"), format="parquet",
                       partitioning="hive").to_table()
    return Counter(table.column("observation").to_pylist())


def expected(batches: dict[int, list[str]], n: int = 3) -> Counter:
    return Counter(f"obs/{d}/{b}/{k}" for b, devices in batches.items() for d in devices
                   for k in range(n))


def test_a_full_level_becomes_one_file_each_row_once_as_spark_wrote_it(tmp_path):
    out, staging = tmp_path / "data", tmp_path / "staged"
    compactor = Compactor(out, threshold=4, budget=60)
    written: dict[int, list[str]] = {}
    for batch in range(21):
        written[batch] = ["a", "b"]
        touched = write_batch(out, staging, batch, ["a", "b"])
        compactor.after_batch(batch, [("observations", rel) for rel in touched])
        assert observations(out) == expected(written)  # after every batch: each row once
    directory = out / "observations" / "date=2026-11-26" / "device=a"
    names = sorted(p.name for p in parts(directory))
    # batches 0-15 in one level-2 file (four of level 1, four batches each); 16-19 are a
    # full level 0 again, merged when batch 20 runs; batch 20 is the running one's
    assert names == ["batch-000000000020.parquet", "merged-1-000000000016-000000000019.parquet",
                     "merged-2-000000000000-000000000015.parquet"]
    assert compactor.merged == 2 * (16 - 1 + 4 - 1)  # files merged away, both devices
    merged = pq.ParquetFile(directory / names[-1])
    assert [c.physical_type for c in merged.schema] == ["BYTE_ARRAY", "DOUBLE", "INT96"]
    assert merged.schema_arrow.metadata == SPARK_META  # Spark reads it as it wrote it
    assert merged.metadata.num_rows == 16 * 3
    assert not (out / "_staging" / "compaction").exists()  # nothing left over


def test_the_running_batch_is_never_merged_and_its_rerun_replaces_it(tmp_path):
    """Spark runs an uncommitted batch again after a crash: its file must still be its own,
    replaced by name, never a row twice."""
    out, staging = tmp_path / "data", tmp_path / "staged"
    compactor = Compactor(out, threshold=3, budget=60)
    directory = out / "observations" / "date=2026-11-26" / "device=a"
    for batch in range(3):
        compactor.after_batch(batch, [("observations", r)
                                      for r in write_batch(out, staging, batch, ["a"])])
    assert len(parts(directory)) == 3  # three files, but batch 2's is not committed
    # batch 3 runs: 0-2 are committed and merge; 3 stays as it is
    compactor.after_batch(3, [("observations", r) for r in write_batch(out, staging, 3, ["a"])])
    assert sorted(p.name for p in parts(directory)) == [
        "batch-000000000003.parquet", "merged-1-000000000000-000000000002.parquet"]
    again = Compactor(out, threshold=3, budget=60)  # the process was killed; batch 3 again
    again.after_batch(3, [("observations", r) for r in write_batch(out, staging, 3, ["a"])])
    assert observations(out) == expected({b: ["a"] for b in range(4)})


class Killed(BaseException):
    """kill -9 at a step of a merge (BaseException: nothing in the code catches it)."""


STEPS = ("link", "write", "exchange before", "exchange after", "remove old")


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schedule=st.lists(st.sets(st.sampled_from("abc"), min_size=1), min_size=4,
                         max_size=14),
       kill=st.tuples(st.integers(0, 8), st.sampled_from(STEPS)),
       threshold=st.integers(2, 4))
def test_killed_at_any_step_of_a_merge_every_row_stays_once(tmp_path_factory, monkeypatch,
                                                            schedule, kill, threshold):
    out = tmp_path_factory.mktemp("data")
    staging = tmp_path_factory.mktemp("staged")
    calls = Counter()
    target, step = kill

    def at(name: str) -> None:
        calls[name] += 1
        if name == step and calls[name] == target + 1:
            raise Killed

    real_link, real_write, real_rmtree = os.link, pq.write_table, shutil.rmtree

    def link(a, b):
        at("link")
        real_link(a, b)

    def write(table, path, **kw):
        at("write")
        real_write(table, path, **kw)

    def swap(a, b):
        at("exchange before")
        exchange(a, b)
        at("exchange after")

    def rmtree(path, ignore_errors=False):
        if not ignore_errors:  # the old content's removal, after the exchange
            at("remove old")
        real_rmtree(path, ignore_errors=ignore_errors)

    monkeypatch.setattr(compaction.os, "link", link)
    monkeypatch.setattr(compaction, "exchange", swap)
    monkeypatch.setattr(compaction.shutil, "rmtree", rmtree)
    import pyarrow.parquet
    monkeypatch.setattr(pyarrow.parquet, "write_table", write)
    written: dict[int, list[str]] = {}
    compactor = Compactor(out, threshold=threshold, budget=60)
    killed = False
    for batch, devices in enumerate(schedule):
        written[batch] = sorted(devices)
        touched = write_batch(out, staging, batch, sorted(devices))
        try:
            compactor.after_batch(batch, [("observations", r) for r in touched])
        except Killed:  # a new process; Spark runs the uncommitted batch again
            killed = True
            compactor = Compactor(out, threshold=threshold, budget=60)
            touched = write_batch(out, staging, batch, sorted(devices))
            compactor.after_batch(batch, [("observations", r) for r in touched])
        assert observations(out) == expected(written)
    monkeypatch.undo()
    Compactor(out, threshold=threshold)  # the leftovers of a kill: gone at the start
    assert not (out / "_staging" / "compaction").exists()
    if killed:
        assert observations(out) == expected(written)
    for device in "abc":  # at most `threshold` files per level (the last batch's one more)
        directory = out / "observations" / "date=2026-11-26" / f"device={device}"
        if directory.exists():
            levels = Counter(p.level for p in parts(directory))
            assert all(n <= threshold for n in levels.values())


def test_n_triples_files_are_merged_by_concatenation(tmp_path):
    out, staging = tmp_path / "data", tmp_path / "staged"
    compactor = Compactor(out, threshold=3, budget=60)
    lines = []
    for batch in range(5):
        rel = Path("date=2026-11-26")
        path = staging / str(batch) / rel / "part.nt"
        path.parent.mkdir(parents=True)
        text = "".join(f"<obs/{batch}/{k}> <p> <o> .\n" for k in range(4))
        path.write_text(text)
        lines.extend(text.splitlines())
        touched = place_batch(out, "ntriples", batch, [(path, rel)], ".nt")
        compactor.after_batch(batch, [("ntriples", r) for r in touched])
    directory = out / "ntriples" / "date=2026-11-26"
    assert sorted(p.name for p in directory.iterdir()) == [
        "batch-000000000003.nt", "batch-000000000004.nt", "merged-1-000000000000-000000000002.nt"]
    merged = (directory / "merged-1-000000000000-000000000002.nt").read_text().splitlines()
    assert merged == lines[:12]  # whole lines, in batch order
    assert sorted(line for f in directory.iterdir() for line in f.read_text().splitlines()) == \
        sorted(lines)


def test_exchange_swaps_two_directories(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "one").write_text("1")
    (tmp_path / "b" / "two").write_text("2")
    exchange(tmp_path / "a", tmp_path / "b")
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["two"]
    assert [p.name for p in (tmp_path / "b").iterdir()] == ["one"]
    with pytest.raises(FileNotFoundError):
        exchange(tmp_path / "a", tmp_path / "missing")


def test_without_the_exchange_nothing_is_merged_with_one_warning(tmp_path, monkeypatch,
                                                                 caplog):
    out, staging = tmp_path / "data", tmp_path / "staged"

    def unsupported(a, b):
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(compaction, "exchange", unsupported)
    compactor = Compactor(out, threshold=2, budget=60)
    with caplog.at_level(logging.WARNING, "ksp.ingest"):
        for batch in range(5):
            touched = write_batch(out, staging, batch, ["a", "b"])
            assert compactor.after_batch(batch, [("observations", r) for r in touched]) == 0
    assert not compactor.enabled
    assert [r.getMessage() for r in caplog.records] == [
        "small files are not merged: [Errno 22] Invalid argument"]
    assert observations(out) == expected({b: ["a", "b"] for b in range(5)})


def test_a_damaged_file_is_left_alone_and_the_rest_merged(tmp_path, caplog):
    out, staging = tmp_path / "data", tmp_path / "staged"
    compactor = Compactor(out, threshold=3, budget=60)
    for batch in range(3):
        write_batch(out, staging, batch, ["a", "b"])
    bad = out / "observations" / "date=2026-11-26" / "device=a" / "batch-000000000001.parquet"
    bad.write_bytes(bad.read_bytes()[:40])  # cut short (a disk that filled, a power cut)
    touched = write_batch(out, staging, 3, ["a", "b"])
    with caplog.at_level(logging.WARNING, "ksp.ingest"):
        assert compactor.after_batch(3, [("observations", r) for r in touched]) == 2
    assert "device=a not merged" in caplog.text
    assert len(list(bad.parent.iterdir())) == 4  # as it was
    assert len(list((bad.parent.parent / "device=b").iterdir())) == 2  # merged, and batch 3


def test_merging_is_spread_over_batches_within_its_budget(tmp_path, monkeypatch):
    out, staging = tmp_path / "data", tmp_path / "staged"
    devices = [f"d{k}" for k in range(6)]
    clock = iter(range(0, 10_000, 5))  # each look at the clock: 5 s later
    compactor = Compactor(out, threshold=2, budget=12)  # two directories per batch
    compactor.clock = lambda: next(clock)
    for batch in range(2):
        write_batch(out, staging, batch, devices)
    touched = write_batch(out, staging, 2, devices)
    assert compactor.after_batch(2, [("observations", r) for r in touched]) == 2  # 0+1 each
    assert len(compactor.waiting) == 4  # the others wait for the next batches
    assert compactor.after_batch(3, []) == 4  # 0+1+2 in each of two
    assert len(compactor.waiting) == 2
    assert compactor.after_batch(4, []) == 4
    assert not compactor.waiting
    monkeypatch.setattr(compaction, "MAX_WAITING", 3)
    touched = write_batch(out, staging, 5, devices)
    compactor.budget = 0
    compactor.after_batch(5, [("observations", r) for r in touched])
    assert [key[1].name for key in compactor.waiting] == ["device=d3", "device=d4",
                                                         "device=d5"]  # the newest kept


@pytest.mark.parametrize("threshold", [1, -1])
def test_a_level_of_one_file_is_refused(tmp_path, threshold):
    with pytest.raises(ValueError):
        Compactor(tmp_path, threshold=threshold)
    with pytest.raises(ValueError):
        merge_directory(tmp_path, tmp_path / "s", 0, threshold)


def test_the_cli_refuses_a_level_of_one_file(capsys):
    from spark_ingest.cli import main

    assert main(["--compact-after", "1"]) == 2
    assert "--compact-after 1: 0 (never) or at least 2" in capsys.readouterr().err


@pytest.mark.slow
def test_the_output_soak_benchmark_runs_both_ways(tmp_path, capsys):
    """`ksp bench ingest-files` in small (no timing asserted): every reading of device d0
    read back from both tables after each window, and far fewer files merged."""
    from tools.bench import ingest_files
    from tools.cli import BENCH_SUITES

    assert BENCH_SUITES["ingest-files"] == ".bench.ingest_files"
    assert ingest_files.main(["--batches", "80", "--devices", "2", "--window", "40",
                              "--compact-after", "4"]) == 0
    report = capsys.readouterr().out
    assert "files, merged" in report and "second half of the run" in report
    rows = ingest_files.run(80, 2, 40, 4, tmp_path)
    assert [r["batches"] for r in rows] == [40, 80]
    assert rows[-1]["files not merged"] == 2 * 80
    assert rows[-1]["files merged"] <= 2 * 3 * 4  # at most 4 per level, 3 levels, 2 devices


def test_batch_ids_that_go_back_merge_nothing_over_an_earlier_merge(tmp_path, caplog):
    """A new checkpoint over an old output numbers its batches from 0 again: the merge that
    would be named as an existing file (hard-linked into the new content, so written through
    to the old one) is not made."""
    out, staging = tmp_path / "data", tmp_path / "staged"
    compactor = Compactor(out, threshold=2, budget=60)
    for batch in range(3):
        compactor.after_batch(batch, [("observations", r)
                                      for r in write_batch(out, staging, batch, ["a"])])
    directory = out / "observations" / "date=2026-11-26" / "device=a"
    before = {p.name: p.read_bytes() for p in directory.iterdir()}
    assert "merged-1-000000000000-000000000001.parquet" in before
    (directory / "batch-000000000002.parquet").rename(directory / "batch-000000000001.parquet")
    (directory / "batch-000000000001.parquet").rename(directory / "batch-000000000000.parquet")
    os.link(directory / "batch-000000000000.parquet", directory / "batch-000000000001.parquet")
    with caplog.at_level(logging.WARNING, "ksp.ingest"):
        assert compactor.after_batch(2, [("observations", Path("date=2026-11-26/device=a"))]) == 0
    assert "batch ids went back" in caplog.text
    merged = "merged-1-000000000000-000000000001.parquet"
    assert (directory / merged).read_bytes() == before[merged]  # untouched


def test_files_of_an_older_version_merge_with_newer_columns_kept(tmp_path):
    """A dead-letter file written before `payload_bytes` existed, merged with one after: the
    merged file has the column, null in the older rows, the bytes in the newer."""
    directory, staging = tmp_path / "dead_letters" / "date=2026-11-26", tmp_path / "staged"
    directory.mkdir(parents=True)
    old = pa.table({"seq": pa.array([1], pa.int64()), "payload": ["{"]})
    new = pa.table({"seq": pa.array([2], pa.int64()), "payload": ["\ufffd"],
                    "payload_bytes": pa.array([b"\xff"], pa.binary())})
    for batch, table in enumerate([old, new, old, new]):
        _write(table, directory / f"batch-{batch:012d}.parquet")
    assert merge_directory(directory, staging, running=9, threshold=4) == 3
    merged = ds.dataset(str(directory), format="parquet").to_table().sort_by("seq")
    assert merged.column("payload_bytes").to_pylist() == [None, None, b"\xff", b"\xff"]
