"""`Ingest.count_dropped`: the rows Spark's de-duplication drops as late, read from a real
query's progress reports at each batch as the job reads them, each report counted once."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.spark]
pytest.importorskip("pyspark")


def test_the_rows_spark_drops_as_late_are_counted_once(tmp_path):
    from spark_ingest.cli import spark_session
    from spark_ingest.job import Ingest, IngestOptions

    spark = spark_session("local[1]", "late-count")
    ingest = Ingest(spark, IngestOptions(out=str(tmp_path / "out")))
    source = tmp_path / "in"
    source.mkdir()
    (source / "1.json").write_text('{"k": "a", "time": "2026-11-28T12:00:00Z"}\n')
    # Spark's own de-duplication with a watermark; each batch starts as the job's does.
    frame = (spark.readStream.schema("k string, time timestamp").json(str(source))
             .withWatermark("time", "1 minute").dropDuplicatesWithinWatermark(["k"]))
    def each(batch, batch_id: int) -> None:
        ingest.count_dropped()
        batch.count()  # the whole batch, so that its state is committed

    query = (frame.writeStream.foreachBatch(each)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    try:
        ingest.queries = [query]
        query.processAllAvailable()
        # Two hours behind the watermark (11:59 after the first batch): dropped as late.
        (source / "2.json").write_text('{"k": "b", "time": "2026-11-28T10:00:00Z"}\n'
                                       '{"k": "c", "time": "2026-11-28T12:00:30Z"}\n')
        query.processAllAvailable()
        (source / "3.json").write_text('{"k": "d", "time": "2026-11-28T12:01:00Z"}\n')
        query.processAllAvailable()
    finally:
        query.stop()
    ingest.count_dropped()  # the last batch's report, as the job reads it once stopped
    ingest.count_dropped()
    try:
        dropped = sum(op.numRowsDroppedByWatermark for p in query.recentProgress
                      for op in p.stateOperators)
    finally:
        spark.stop()
    assert dropped == 1  # what Spark reports, batch by batch
    assert ingest.stats["late_dropped"] == 1
