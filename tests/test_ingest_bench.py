"""Smoke test of the ingest benchmark (tools/bench/ingest.py) — no timing assertions: both
consumers (and the ingest reading two shard processes) take every reading through a real
mosquitto, also from the paced publisher of the steady-stream rows, and the latency probe's
readings reach a real SIB as INDs. What `steady` makes of a paced run's samples, on made-up
timelines: a consumer that keeps up, one that falls behind; which runs a sweep makes. Readings
the broker dropped over a consumer's queue: counted, and not waited for."""
from __future__ import annotations

import pytest

from lengths import LONG
from tools.bench import ingest as bench

# slow: the ingest benchmark: mosquitto and Spark
pytestmark = pytest.mark.slow


def test_steady_tells_a_consumer_that_keeps_up_from_one_that_falls_behind():
    rate, seconds, count = 1000.0, 40.0, 40_000
    # rows written every second, two seconds behind the pace, the last 2 s after the end;
    # the publisher began 0.5 s after the consumer's clock
    keeping = [(t + 0.5, max(0, rate * (t - 2))) for t in range(0, 43)]
    kept = bench.steady(keeping, rate, seconds, count, late=0.5, total=42.5, publishing=40)
    assert kept["kept"] == pytest.approx(1000)
    assert kept["lag_q3"] == kept["lag_q4"] == kept["lag_max"] == pytest.approx(2)
    assert kept["catch_up"] == pytest.approx(2)
    # 800 rows/s: a fifth of a second more behind with each second
    falling = [(float(t), 800.0 * t) for t in range(0, 51)]
    fell = bench.steady(falling, rate, seconds, count, late=0.0, total=50, publishing=40)
    assert fell["kept"] == pytest.approx(800)
    assert fell["lag_q4"] - fell["lag_q3"] == pytest.approx(0.2 * 10)
    assert fell["lag_max"] == pytest.approx(0.2 * 40)
    # polled every 0.1 s, a batch of 5,000 rows every 5 s: the rate is batch to batch
    polled = [(k / 10, 5000.0 * (k // 50)) for k in range(0, 431)]
    batches = bench.steady(polled, rate, seconds, count, late=0.0, total=43, publishing=40)
    assert batches["kept"] == pytest.approx(1000)
    assert batches["lag_max"] == pytest.approx(5 - 0.1)
    # ahead of the pace (a hundred written at once) is no lag; too few samples, no rate
    ahead = bench.steady([(20.0, 20_100), (40.0, 40_000)], rate, seconds, count, 0, 40, 40)
    assert ahead["lag_max"] == 0 and ahead["kept"] == pytest.approx(995)
    assert bench.steady([(40.0, 40_000)], rate, seconds, count, 0, 40, 40)["kept"] is None


def test_a_sweep_runs_each_rate_through_the_consumers_asked_for():
    runs = bench.sustained_runs([10_000.0, 20_000.0], "local2, paho")
    assert [(rate, consumer, master) for rate, _, consumer, master in runs] == [
        (10_000.0, "ingest", "local[2]"), (10_000.0, "baseline", "local[2]"),
        (20_000.0, "ingest", "local[2]"), (20_000.0, "baseline", "local[2]")]
    assert [row for _, row, *_ in runs[:2]] == ["ksp-ingest (Spark local[2]), 10,000/s asked",
                                                "paho + pyarrow, one process, 10,000/s asked"]
    assert [row for _, row, *_ in bench.sustained_runs([1.0], "local1")] == [
        "ksp-ingest, one executor core (local[1])"]  # one rate: it is in the title
    assert [m for *_, m in bench.sustained_runs([1.0], "local1")] == ["local[1]"]
    assert len(bench.sustained_runs([1.0], ",".join(bench.SUSTAINED))) == 3
    for rates, consumers in (([1.0], "local3"), ([1.0], ""), ([0.0], "paho"), ([-5.0], "paho")):
        with pytest.raises(SystemExit):
            bench.sustained_runs(rates, consumers)


@pytest.mark.spark
def test_both_consumers_take_every_reading_and_the_sib_indicates(tmp_path):
    pytest.importorskip("pyspark")
    from spark_ingest.testing import Mosquitto

    import pyarrow.dataset as ds

    # The shortened form: each consumer once, a burst and a paced run of the job; the whole
    # form (KSP_LONG_TESTS=1) every path of the benchmark, each Spark start ~20-40 s here.
    with Mosquitto(tmp_path / "mqtt") as broker:
        base = bench.baseline(broker.url, 2_000, tmp_path / "baseline")
        job = bench.ingest(broker.url, 2_000, tmp_path / "ingest")
        paced = {consumer: bench.sustained(broker.url, 1000, 3, tmp_path / f"paced-{consumer}",
                                           consumer)
                 for consumer in (("baseline", "ingest") if LONG else ("ingest",))}
        if LONG:
            backlog = bench.baseline(broker.url, 2_000, tmp_path / "backlog", backlog=True)
            light = bench.baseline(broker.url, 2_000, tmp_path / "light", raw=True)
            remote = bench.sharded(broker.url, 2_000, tmp_path / "shards")
            alone = bench.drain(broker.url, 2_000, tmp_path / "drain")
            lat = bench.latency(broker.url, 1, tmp_path / "latency")
    assert ds.dataset(str(tmp_path / "baseline")).count_rows() == 2_000
    assert base["published"]["ok"] == job["published"]["ok"] == 2_000
    assert 0 < base["seconds"] and 0 < job["seconds"]
    # 3,000 readings at 1,000/s: each in Parquet, once; the paced ingest reuses the client ID
    # of `job` above, whose session was ended after it (readings published since, not kept)
    for r in paced.values():
        assert r["published"]["ok"] == r["stored"] == 3_000
        assert r["published"]["seconds"] >= 2.9 and r["catch_up"] >= 0
    if not LONG:
        return
    assert ds.dataset(str(tmp_path / "backlog")).count_rows() == 2_000  # kept by its session
    assert ds.dataset(str(tmp_path / "light")).count_rows() == 2_000
    assert light["published"]["ok"] == 2_000
    assert backlog["published"]["ok"] == 2_000 and 0 < backlog["second_half"] <= backlog["seconds"]
    assert alone["published"]["ok"] == remote["published"]["ok"] == 2_000
    for observations in (tmp_path / "drain" / "observations",
                         tmp_path / "shards" / "job" / "observations"):
        assert ds.dataset(str(observations), partitioning="hive").count_rows() == 2_000
    assert 0 <= alone["second_half"] <= alone["seconds"]
    assert len(lat) == 1 and lat[0] > 0


@pytest.mark.spark
def test_readings_the_broker_dropped_are_counted_and_not_waited_for(tmp_path):
    # A backlog over the broker's queue for the consumer: mosquitto keeps 500 and drops the
    # rest, says how many in $SYS, and each consumer's run ends with the 500 it got.
    pytest.importorskip("pyspark")
    import pyarrow.dataset as ds

    from spark_ingest.testing import Mosquitto

    with Mosquitto(tmp_path / "mqtt", max_queued=500) as broker:
        base_dropped = broker.drops_from_now()
        base = bench.baseline(broker.url, 2_000, tmp_path / "backlog", backlog=True,
                              dropped=base_dropped)
        assert base_dropped() == 1_500
        job_dropped = broker.drops_from_now()  # this run's, not the one's before
        job = bench.drain(broker.url, 2_000, tmp_path / "drain", dropped=job_dropped)
        assert job_dropped() == 1_500
    assert base["published"]["ok"] == job["published"]["ok"] == 2_000
    assert ds.dataset(str(tmp_path / "backlog")).count_rows() == 500
    observations = ds.dataset(str(tmp_path / "drain" / "observations"), partitioning="hive")
    assert observations.count_rows() == 500
    assert 0 < job["seconds"] < bench.STALLED  # stopped at the 500, not given up on


def test_rounds_report_a_spread_and_a_paced_run_s_rate_from_first_publish_to_last_row():
    assert bench.spread([3.0, 1.0, 2.0, 10.0], ".1f") == "1.0 / 2.5 / 10.0"
    run = {"stored": 60_000, "published": {"seconds": 10.0}, "catch_up": 2.0}
    assert bench.achieved(run) == pytest.approx(5_000)
