"""The ingest's warm-up (`spark_ingest.warmup`): its synthetic messages are readings the job
takes (each its own for the de-duplication, a few dead letters), the count is bounded, and
with a real mosquitto and a real local Spark the job runs them before it subscribes, in a
directory it removes, so that nothing of them is in the tables, the buffer or the checkpoint
of the job itself."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from spark_ingest import warmup
from spark_ingest.telemetry import parse


def test_the_warm_up_s_messages_are_readings_each_its_own_with_a_few_dead_letters():
    now = datetime(2026, 11, 28, 10, 0, tzinfo=timezone.utc)
    sent = warmup.messages(1_000, now)
    parsed = [parse(topic, payload, now.timestamp()) for topic, payload in sent]
    dead = [p for p in parsed if p[5] is not None]
    assert len(sent) == 1_000 and len(dead) == 1_000 // warmup.DEAD_EVERY
    assert {p[5] for p in dead} == {"not_json"}
    keys = [(p[0], p[1], p[4]) for p in parsed if p[5] is None]
    assert len(set(keys)) == len(keys)  # none a duplicate of another: all go through
    assert len({p[0] for p in parsed if p[5] is None}) == warmup.DEVICES
    assert all(p[4] <= now for p in parsed if p[5] is None)


def test_a_warm_up_count_out_of_bounds_is_refused_before_spark_starts(capsys):
    from spark_ingest.cli import main

    for bad in (-1, warmup.MOST + 1):
        assert main(["--warm-up", str(bad)]) == 2
        assert f"--warm-up {bad}: 0 to {warmup.MOST:,}" in capsys.readouterr().err


@pytest.mark.spark
@pytest.mark.slow  # Spark and mosquitto processes
def test_the_job_warms_up_before_it_subscribes_and_keeps_nothing_of_it(tmp_path):
    pa = pytest.importorskip("pyarrow.dataset")
    from spark_ingest.testing import IngestProcess, Mosquitto, until
    from tools.telemetry import messages, publish

    out = tmp_path / "data"
    sent = list(messages(200, devices=2, seed=5))
    with Mosquitto(tmp_path / "mqtt") as broker, IngestProcess(
            "--mqtt", broker.url, "--out", str(out), "--trigger", "500 milliseconds",
            "--warm-up", "2000", "--status", "1") as ingest:
        log = ingest.log()
        assert log.index("warmed up in") < log.index("subscribed to") < log.index(
            "ingest ready")
        assert not (out / warmup.DIRECTORY).exists()
        publish(broker.url, sent)
        ok = sum(kind == "ok" for _, _, kind in sent)

        def observations() -> int:
            path = out / "observations"
            return pa.dataset(str(path), partitioning="hive").count_rows() if (
                path.exists()) else 0

        ingest.stop_when(lambda: observations() >= ok, "the readings")
    rows = pa.dataset(str(out / "observations"), partitioning="hive").to_table().to_pylist()
    assert len(rows) == ok and not any(r["device"].startswith("warm-up") for r in rows)
    assert not (out / warmup.DIRECTORY).exists()


def test_ctrl_c_during_the_warm_up_stops_the_job_without_a_traceback(tmp_path):
    """A user's Ctrl-C while Spark starts or the job warms up: a line that says so, the warm-up's
    directory removed, exit status 130 (a shell's for SIGINT), no Python traceback."""
    import signal

    from spark_ingest.cli import INTERRUPTED
    from spark_ingest.testing import IngestProcess, Mosquitto, until

    out = tmp_path / "data"
    with Mosquitto(tmp_path / "mqtt") as broker, IngestProcess(
            "--mqtt", broker.url, "--out", str(out), "--warm-up", str(warmup.MOST),
            ready="") as ingest:
        until(lambda: (out / warmup.DIRECTORY / "_mqtt").exists(), 180, "the warm-up")
        assert ingest.stop(signal.SIGINT, timeout=120) == INTERRUPTED, ingest.log()
        log = ingest.log()
    assert "interrupted while starting" in log and "Traceback" not in log, log
    assert "ingest ready" not in log
    assert not (out / warmup.DIRECTORY).exists()
