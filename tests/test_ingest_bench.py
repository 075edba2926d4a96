"""Smoke test of the ingest benchmark (tools/bench/ingest.py) — no timing assertions: both
consumers (and the ingest reading two shard processes) take every reading through a real
mosquitto, and the latency probe's readings reach a real SIB as INDs."""
from __future__ import annotations

import pytest

from tools.bench import ingest as bench

pytestmark = pytest.mark.spark


def test_both_consumers_take_every_reading_and_the_sib_indicates(tmp_path):
    pytest.importorskip("pyspark")
    from spark_ingest.testing import Mosquitto

    with Mosquitto(tmp_path / "mqtt") as broker:
        base = bench.baseline(broker.url, 2_000, tmp_path / "baseline")
        backlog = bench.baseline(broker.url, 2_000, tmp_path / "backlog", backlog=True)
        light = bench.baseline(broker.url, 2_000, tmp_path / "light", raw=True)
        job = bench.ingest(broker.url, 2_000, tmp_path / "ingest")
        remote = bench.sharded(broker.url, 2_000, tmp_path / "shards")
        alone = bench.drain(broker.url, 2_000, tmp_path / "drain")
        lat = bench.latency(broker.url, 1, tmp_path / "latency")
    import pyarrow.dataset as ds

    assert ds.dataset(str(tmp_path / "baseline")).count_rows() == 2_000
    assert ds.dataset(str(tmp_path / "backlog")).count_rows() == 2_000  # kept by its session
    assert ds.dataset(str(tmp_path / "light")).count_rows() == 2_000
    assert light["published"]["ok"] == 2_000
    assert backlog["published"]["ok"] == 2_000 and 0 < backlog["second_half"] <= backlog["seconds"]
    assert base["published"]["ok"] == job["published"]["ok"] == alone["published"]["ok"] == 2_000
    assert remote["published"]["ok"] == 2_000
    for observations in (tmp_path / "drain" / "observations",
                         tmp_path / "shards" / "job" / "observations"):
        assert ds.dataset(str(observations), partitioning="hive").count_rows() == 2_000
    assert 0 < base["seconds"] and 0 < job["seconds"]
    assert 0 <= alone["second_half"] <= alone["seconds"]
    assert len(lat) == 1 and lat[0] > 0
