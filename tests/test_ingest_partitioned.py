"""`spark_ingest.partitioned`: the files a local master's driver writes are the ones Spark's
partitioned writer makes of the same rows, as a reader sees them — the same partition
directories, the same rows in each, the same Parquet physical types (timestamps INT96) — and
Spark reads them back."""
from __future__ import annotations

from datetime import date, datetime, timezone

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

SCHEMA = ("observation string, hasSimpleResult double, unit string, resultTime timestamp, "
          "date date, device string")


def _rows() -> list[tuple]:
    rows = []
    for k in range(300):
        day = date(2026, 11, 27 + k % 2)
        rows.append((f"o{k}", k / 7, None if k % 5 == 0 else "Cel",
                     datetime(2026, 11, 27 + k % 2, 10, 0, k % 60, 1000 * k,
                              tzinfo=timezone.utc), day, f"sensor-{k % 7}.a_b"))
    rows.append(("no device", 1.5, "Cel", datetime(2026, 11, 27, tzinfo=timezone.utc),
                 date(2026, 11, 27), None))
    return rows


def _content(directory):
    """{partition directory: (sorted rows, physical types)} of every Parquet file under it."""
    import pyarrow.parquet as pq

    out = {}
    for path in sorted(directory.rglob("*.parquet")):
        rel = str(path.parent.relative_to(directory))
        f = pq.ParquetFile(path)
        rows = sorted(map(tuple, zip(*(f.read().column(n).to_pylist()
                                       for n in f.schema_arrow.names))), key=repr)
        types = [(c.name, c.physical_type) for c in f.schema]
        kept = out.setdefault(rel, ([], types))
        assert kept[1] == types
        kept[0].extend(rows)
    return {rel: (sorted(rows, key=repr), types) for rel, (rows, types) in out.items()}


def test_the_driver_writes_what_sparks_partitioned_writer_writes(tmp_path):
    from spark_ingest.cli import spark_session
    from spark_ingest.partitioned import write_partitioned

    spark = spark_session("local[1]", "partitioned")
    try:
        frame = spark.createDataFrame(_rows(), SCHEMA)
        frame.write.partitionBy("date", "device").parquet(str(tmp_path / "spark"))
        written = write_partitioned(frame.toArrow(), tmp_path / "ours", ["date", "device"])
        flat = write_partitioned(frame.toArrow(), tmp_path / "staged", ["date", "device"],
                                 flat=True)
        for path, rel, _ in flat:  # a batch's staging, then placed as `place_batch` does
            (tmp_path / "placed" / rel).mkdir(parents=True, exist_ok=True)
            path.rename(tmp_path / "placed" / rel / "part.parquet")
        back = sorted(map(tuple, spark.read.parquet(str(tmp_path / "ours")).select(
            *frame.columns).collect()), key=repr)
        expected = sorted(map(tuple, frame.collect()), key=repr)
    finally:
        spark.stop()
    ours, theirs = _content(tmp_path / "ours"), _content(tmp_path / "spark")
    assert sorted(ours) == sorted(theirs)  # the same directories, a null as Hive names it
    assert "date=2026-11-27/device=__HIVE_DEFAULT_PARTITION__" in ours
    assert ours == theirs  # the same rows and physical types in each (INT96 timestamps)
    assert len(written) == len(ours) and sum(n for _, _, n in written) == len(expected)
    assert all(path.parent.relative_to(tmp_path / "ours") == rel for path, rel, _ in written)
    assert back == expected  # and Spark reads them as the rows it was given
    # Staged flat: every file side by side (no directory made per partition), each with its
    # partition's rows, as the partitioned layout has them.
    assert [(path.parent, rel, n) for path, rel, n in flat] == [
        (tmp_path / "staged", rel, n) for _, rel, n in written]
    assert _content(tmp_path / "placed") == ours


def test_an_empty_table_writes_nothing(tmp_path):
    import pyarrow as pa

    from spark_ingest.partitioned import write_partitioned

    table = pa.table({"device": pa.array([], pa.string()), "value": pa.array([], pa.float64())})
    assert write_partitioned(table, tmp_path / "out", ["device"]) == []
    assert not (tmp_path / "out").exists()
