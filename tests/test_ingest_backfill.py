"""`ksp-ingest backfill` on an output laid out as the job writes it (files of the job's schema,
made here with pyarrow; `tests/test_ingest.py` runs it on a real job's output), and the lock
that keeps it and the job apart."""
from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from spark_ingest import outlock
from spark_ingest.backfill import backfill
from spark_ingest.job import aggregate_table, ntriples, observation_iri
from spark_ingest.telemetry import reading, topic_of

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
ds = pytest.importorskip("pyarrow.dataset")

ROOT = Path(__file__).resolve().parent.parent
BASE = "http://example.org/greenhouse#"
DAY = datetime(2026, 11, 20, 10, 0, tzinfo=timezone.utc)
OBSERVATION = pa.schema([("observation", pa.string()), ("madeBySensor", pa.string()),
                         ("observedProperty", pa.string()), ("hasSimpleResult", pa.float64()),
                         ("unit", pa.string()), ("resultTime", pa.timestamp("ns"))])
LETTER = pa.schema([("seq", pa.int64()), ("topic", pa.string()), ("payload", pa.string()),
                    ("received", pa.timestamp("ns")), ("reason", pa.string())])


def naive(when: datetime) -> datetime:
    return when.astimezone(timezone.utc).replace(tzinfo=None)


def stored(out: Path, device: str, prop: str, value: float, when: datetime,
           base: str = BASE) -> None:
    """One observation as the job stores it (Spark: INT96 timestamps)."""
    ms = round(when.timestamp() * 1000)
    directory = out / "observations" / f"date={when:%Y-%m-%d}" / f"device={device}"
    directory.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({
        "observation": [observation_iri(base, device, prop, ms)],
        "madeBySensor": [base + device], "observedProperty": [base + prop],
        "hasSimpleResult": [value], "unit": ["Cel"], "resultTime": [naive(when)]},
        schema=OBSERVATION), directory / "batch-000000000001.parquet",
        use_deprecated_int96_timestamps=True)


def letters(out: Path, rows: list[tuple[str, bytes, str]], batch: int = 2) -> None:
    """Dead letters (topic, payload, reason), received an hour after DAY."""
    received = naive(DAY + timedelta(hours=1))
    directory = out / "dead_letters" / f"date={received:%Y-%m-%d}"
    directory.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({
        "seq": list(range(len(rows))), "topic": [t for t, _, _ in rows],
        "payload": [p.decode() for _, p, _ in rows], "received": [received] * len(rows),
        "reason": [r for _, _, r in rows]}, schema=LETTER),
        directory / f"batch-{batch:012d}.parquet", use_deprecated_int96_timestamps=True)


def observations(out: Path) -> list[dict]:
    return ds.dataset(str(out / "observations"), format="parquet",
                      partitioning="hive").to_table().to_pylist()


def late(device: str, prop: str, value: float, when: datetime) -> tuple[str, bytes, str]:
    return topic_of(device), reading(device, prop, value, "Cel", when), "late"


@pytest.fixture
def out(tmp_path):
    out = tmp_path / "data"
    stored(out, "s1", "t", 20.0, DAY)
    letters(out, [
        late("s1", "t", 21.0, DAY + timedelta(seconds=1)),  # new
        late("s1", "t", 20.0, DAY),  # a late copy of the stored reading
        late("s1", "t", 22.0, DAY + timedelta(seconds=2)),  # new, and
        late("s1", "t", 22.0, DAY + timedelta(seconds=2)),  # its copy
        late("s2", "h", 55.5, DAY - timedelta(days=1)),  # another device and day
        (topic_of("s1"), b'{"device": "s1"}', "bad_property"),  # not late: not a reading
    ])
    return out


def test_late_readings_become_observations_once(out):
    report = backfill(out, BASE)
    assert (report.late, report.stored, report.repeated, report.added) == (5, 1, 1, 3)
    assert report.partitions == {"date=2026-11-20/device=s1", "date=2026-11-19/device=s2"}
    rows = observations(out)
    got = {(r["device"], r["observedProperty"], r["resultTime"]): r for r in rows}
    assert len(got) == len(rows) == 4  # each once
    new = got[("s1", BASE + "t", naive(DAY + timedelta(seconds=2)))]
    ms = round((DAY + timedelta(seconds=2)).timestamp() * 1000)
    assert new["observation"] == observation_iri(BASE, "s1", "t", ms)
    assert (new["madeBySensor"], new["hasSimpleResult"], new["unit"]) == (BASE + "s1", 22.0,
                                                                           "Cel")
    assert got[("s2", BASE + "h", naive(DAY - timedelta(days=1)))]["hasSimpleResult"] == 55.5
    # the job's file schema, INT96 timestamps included: every reader takes them alike
    job = pq.ParquetFile(next((out / "observations").rglob("batch-*.parquet")))
    for path in (out / "observations").rglob("backfill-*.parquet"):
        assert pq.ParquetFile(path).schema == job.schema
    assert not list((out / "_staging" / "backfill").iterdir())  # all moved into place
    again = backfill(out, BASE)  # what it added is stored now
    assert (again.late, again.stored, again.repeated, again.added) == (5, 4, 1, 0)
    assert len(observations(out)) == 4


def test_ntriples_too_when_the_job_writes_them(out):
    import rdflib

    (out / "ntriples").mkdir()
    backfill(out, BASE)
    files = list((out / "ntriples").rglob("backfill-*.nt"))
    assert sorted(p.parent.name for p in files) == ["date=2026-11-19", "date=2026-11-20"]
    text = next(p for p in files if p.parent.name == "date=2026-11-19").read_text()
    when = DAY - timedelta(days=1)
    ms = round(when.timestamp() * 1000)
    assert text == ntriples(observation_iri(BASE, "s2", "h", ms), BASE + "s2", BASE + "h",
                            55.5, "2026-11-19T10:00:00.000Z")
    graph = rdflib.Graph()
    for path in files:
        graph.parse(path, format="nt")
    assert len(graph) == 3 * 5  # five triples an observation


def test_dry_run_and_another_base_write_nothing(out):
    def files() -> list[str]:
        return sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.name != ".lock")

    before = files()
    report = backfill(out, BASE, dry_run=True)
    assert (report.added, report.partitions) == (3, {"date=2026-11-20/device=s1",
                                                     "date=2026-11-19/device=s2"})
    with pytest.raises(ValueError, match="another --base"):
        backfill(out, "http://example.org/other#")
    assert files() == before


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "spark_ingest.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_a_running_job_keeps_a_backfill_and_a_second_job_out(out):
    lock = outlock.hold(out, "ksp-ingest")  # as the job holds it while it runs
    try:
        with pytest.raises(outlock.Busy):
            backfill(out, BASE)
        refused = cli("backfill", "--out", str(out))
        assert refused.returncode == 2
        assert "in use by ksp-ingest (pid" in refused.stderr
        second = cli("--out", str(out), "--mqtt", "mqtt://127.0.0.1:9")  # before Spark starts
        assert second.returncode == 2 and "in use by ksp-ingest" in second.stderr
        assert len(observations(out)) == 1
    finally:
        lock.close()
    done = cli("backfill", "--out", str(out))  # released: it runs
    assert done.returncode == 0, done.stderr
    assert "5 late readings in the dead letters: 3 added" in done.stdout
    assert len(observations(out)) == 4


def job_closed(out: Path, batch: int, closed: datetime, minutes: list[tuple] = ()) -> None:
    """The job's state after committing `batch`: minutes ending by `closed` closed, and
    `minutes` — (minute, device, property, min, max, mean, count) — the rows it wrote."""
    import json

    (out / "_checkpoint" / "commits").mkdir(parents=True)
    (out / "_checkpoint" / "commits" / str(batch)).write_text("v1\n{}\n")
    (out / "_aggregates_state").mkdir()
    ms = round(closed.timestamp() * 1000)
    (out / "_aggregates_state" / f"batch-{batch:012d}.json").write_text(json.dumps(
        {"newest": ms + 60_000, "closed": ms, "open": []}))
    for row in minutes:
        day = datetime.fromtimestamp(row[0] / 1000, timezone.utc)
        directory = out / "aggregates" / f"date={day:%Y-%m-%d}" / f"device={row[1]}"
        directory.mkdir(parents=True, exist_ok=True)
        pq.write_table(aggregate_table(BASE, [row]), directory / f"batch-{batch:012d}.parquet")


def aggregates(out: Path) -> dict:
    rows = ds.dataset(str(out / "aggregates"), format="parquet",
                      partitioning="hive").to_table().to_pylist()
    got = {(r["device"], r["observedProperty"], r["minute"]): r for r in rows}
    assert len(got) == len(rows)  # each minute once
    return got


def test_minutes_the_job_never_wrote_get_their_aggregates_once(tmp_path):
    out = tmp_path / "data"
    minute = round(DAY.timestamp() * 1000)
    stored(out, "s1", "t", 20.0, DAY)  # in time: the job wrote its minute
    job_closed(out, 3, DAY + timedelta(hours=1), [(minute, "s1", "t", 20.0, 20.0, 20.0, 1)])
    at = DAY + timedelta(minutes=5)
    letters(out, [late("s1", "t", 25.0, DAY + timedelta(seconds=30)),  # the job's minute
                  late("s2", "h", 50.0, at + timedelta(seconds=10)),  # a minute with no row
                  late("s2", "h", 60.0, at + timedelta(seconds=20)),
                  late("s2", "h", 70.0, DAY + timedelta(hours=1, minutes=1))])  # still open
    report = backfill(out, BASE)
    assert (report.added, report.minutes) == (4, 1)
    rows = aggregates(out)
    assert set(rows) == {("s1", BASE + "t", DAY), ("s2", BASE + "h", at)}
    assert rows[("s1", BASE + "t", DAY)]["count"] == 1  # the job's row, as it was
    r = rows[("s2", BASE + "h", at)]
    assert (r["count"], r["min"], r["max"], r["mean"]) == (2, 50.0, 60.0, 55.0)
    # a later reading of the same minute: the backfill's row replaced, still one
    letters(out, [late("s2", "h", 40.0, at + timedelta(seconds=40))], batch=7)
    again = backfill(out, BASE)
    assert (again.added, again.minutes) == (1, 1)
    r = aggregates(out)[("s2", BASE + "h", at)]
    assert (r["count"], r["min"], r["max"], r["mean"]) == (3, 40.0, 60.0, 50.0)
    directory = out / "aggregates" / f"date={at:%Y-%m-%d}" / "device=s2"
    assert len(list(directory.glob("backfill-*.parquet"))) == 1
    assert len(aggregates(out)) == 2


def test_no_aggregates_without_a_committed_batch_nor_in_a_dry_run(out):
    report = backfill(out, BASE)
    assert report.minutes is None and "aggregates not looked at" in str(report)
    assert not (out / "aggregates").exists()
    job_closed(out, 3, DAY + timedelta(days=1))
    dry = backfill(out, BASE, dry_run=True)
    assert dry.minutes is None and not (out / "aggregates").exists()
