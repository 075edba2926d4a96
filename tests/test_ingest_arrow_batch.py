"""A local master's batches are worked on in the driver as Arrow (`spark_ingest.arrow_batch`),
a cluster's by Spark's jobs (`Ingest.spark_outputs`): both give the same outputs for the same
batch — the observations' and dead letters' files, the N-Triples, the partial aggregates, the
counts per reason, and the SIB's refusals as dead letters."""
from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from spark_ingest.telemetry import reading, topic_of

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def spark():
    from spark_ingest.cli import spark_session

    session = spark_session("local[1]", "arrow-batch")
    yield session
    session.stop()


def _rows(messages: list[tuple]) -> list[tuple]:
    """The source's rows for (seq, topic, payload, received), as the stream gives them."""
    from spark_ingest import source

    reader = source._Reader({"buffer": "unused"})
    return [tuple(row.values()) for b in reader.read(source._Range(messages))
            for row in b.to_pylist()]


def _tables(out: Path) -> dict:
    """{table/partition: sorted rows} of every Parquet file and N-Triples file under `out`."""
    import pyarrow.parquet as pq

    found: dict[str, list] = {}
    for path in sorted(out.rglob("*.parquet")) + sorted(out.rglob("*.nt")):
        rel = str(path.parent.relative_to(out))
        if rel.startswith("_"):
            continue
        if path.suffix == ".nt":
            rows = path.read_text().splitlines()
        else:
            table = pq.read_table(path)
            rows = list(zip(*(table.column(n).to_pylist() for n in table.column_names)))
        found.setdefault(rel, []).extend(rows)
    return {rel: sorted(rows, key=repr) for rel, rows in found.items()}


def _same_partials(a: list[tuple], b: list[tuple]) -> None:
    key = lambda p: p[:3]  # noqa: E731 - (minute, device, property)
    a, b = sorted(a, key=key), sorted(b, key=key)
    assert [p[:3] for p in a] == [p[:3] for p in b]
    for x, y in zip(a, b):
        assert (x[3], x[4], x[6], x[7], x[8]) == (y[3], y[4], y[6], y[7], y[8])
        assert math.isclose(x[5], y[5], rel_tol=1e-12, abs_tol=1e-9)  # a sum's order


def _both(spark, tmp: Path, rows: list[tuple], *, refuse=None, ntriples=True):
    """Each path's (observations, dead letters, reasons, partials) and files for one batch."""
    from spark_ingest import source
    from spark_ingest.job import Ingest, IngestOptions

    frame = spark.createDataFrame(rows, source.SCHEMA)
    got = {}
    for name in ("spark", "arrow"):
        ingest = Ingest(spark, IngestOptions(out=str(tmp / name), ntriples=ntriples,
                                             sib=None if refuse is None else "udp://unused"))
        if refuse is not None:  # the SIB's refusal, given: no SIB refuses good names
            ingest._push = lambda latest: [(r, "KspStatusError") for r in latest
                                           if refuse(r)]
        outputs = getattr(ingest, f"{name}_outputs")(frame, 7)
        got[name] = (*outputs, _tables(tmp / name))
    return got["spark"], got["arrow"]


def _messages() -> list[tuple]:
    """Readings of three devices over two days and minutes apart (one before 1970), units or
    none, and dead letters of several reasons."""
    start = datetime(2026, 11, 27, 23, 58, 30, tzinfo=timezone.utc)
    out = []
    for k in range(240):
        device = f"s-{k % 3}"
        when = start + timedelta(seconds=k, milliseconds=k % 7)
        out.append((topic_of(device), reading(device, ["t", "h"][k % 2], k * 0.37 - 20,
                                              None if k % 5 == 0 else "Cel", when)))
    out.append((topic_of("old"), reading("old", "t", 1.25, "Cel",
                                         EPOCH - timedelta(milliseconds=1500))))
    out += [(topic_of("s-0"), b"not json"), ("elsewhere", reading("s-0", "t", 1.0)),
            (topic_of("s-1"), b"\xff\xfe"), (topic_of("s-2"), b'{"device": "s-2"}')]
    return [(seq, topic, payload, 1.8e9 + seq) for seq, (topic, payload) in
            enumerate(out, 1)]


def test_both_paths_write_the_same_files_and_counts(spark, tmp_path):
    spark_out, arrow_out = _both(spark, tmp_path, _rows(_messages()))
    assert spark_out[:3] == arrow_out[:3]  # observations, dead letters, per reason
    assert spark_out[0] == 241 and spark_out[1] == 4 and len(spark_out[2]) >= 2
    _same_partials(spark_out[3], arrow_out[3])
    assert spark_out[4] == arrow_out[4]
    tables = {rel.split("/")[0] for rel in arrow_out[4]}
    assert tables == {"observations", "dead_letters", "ntriples"}
    assert "observations/date=1969-12-31/device=old" in arrow_out[4]


def test_both_paths_make_the_same_dead_letters_of_the_sibs_refusals(spark, tmp_path):
    spark_out, arrow_out = _both(spark, tmp_path, _rows(_messages()),
                                 refuse=lambda r: r.device == "s-1", ntriples=False)
    assert spark_out[:3] == arrow_out[:3]
    assert arrow_out[2]["sib_refused"] == 2  # s-1's newest "t" and "h"
    assert spark_out[4] == arrow_out[4]


@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["a", "b.c", "d-9"]), st.sampled_from(["t", "h"]),
                          st.floats(-1e6, 1e6, allow_nan=False),
                          st.integers(-10**11, 4 * 10**12), st.booleans()),
                min_size=1, max_size=40, unique_by=lambda r: (r[0], r[1], r[3])),
       st.lists(st.binary(max_size=20), max_size=3))
def test_any_batch_gives_the_same_outputs_both_ways(spark, tmp_path_factory, readings, junk):
    messages = [(topic_of(d), reading(d, p, v, "Cel" if unit else None,
                                      EPOCH + timedelta(milliseconds=ms)))
                for d, p, v, ms, unit in readings]
    messages += [(topic_of("a"), payload) for payload in junk]
    rows = _rows([(seq, t, p, 1.7e9) for seq, (t, p) in enumerate(messages, 1)])
    spark_out, arrow_out = _both(spark, tmp_path_factory.mktemp("any"), rows)
    assert spark_out[:3] == arrow_out[:3]
    _same_partials(spark_out[3], arrow_out[3])
    assert spark_out[4] == arrow_out[4]
