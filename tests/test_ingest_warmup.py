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
def test_readings_published_while_the_job_starts_are_kept_and_nothing_of_the_warm_up(tmp_path):
    """The receivers subscribe before Spark starts: what is published while it starts and
    warms up waits in the buffer and is stored; nothing of the warm-up is. SIGTERM to the
    job's process group (systemd's default stop) then stops it cleanly: exit 0, no py4j
    traceback (Spark's JVM is in a session of its own, stopped by the job)."""
    pa = pytest.importorskip("pyarrow.dataset")
    from spark_ingest.testing import IngestProcess, Mosquitto, until
    from tools.telemetry import messages, publish

    out = tmp_path / "data"
    sent = list(messages(200, devices=2, seed=5))
    early, later = sent[:100], sent[100:]
    with Mosquitto(tmp_path / "mqtt") as broker, IngestProcess(
            "--mqtt", broker.url, "--out", str(out), "--trigger", "500 milliseconds",
            "--warm-up", "2000", "--status", "1", ready="subscribed to", group=True) as ingest:
        publish(broker.url, early)
        assert "warmed up in" not in ingest.log()  # published before the warm-up's end
        ingest.wait_for("ingest ready", 240)
        log = ingest.log()
        assert log.index("subscribed to") < log.index("warmed up in") < log.index(
            "ingest ready")
        assert not (out / warmup.DIRECTORY).exists()
        publish(broker.url, later)
        ok = sum(kind == "ok" for _, _, kind in sent)

        def observations() -> int:
            path = out / "observations"
            return pa.dataset(str(path), partitioning="hive").count_rows() if (
                path.exists()) else 0

        ingest.stop_when(lambda: observations() >= ok, "the readings")
        log = ingest.log()
    assert "stopped: ingest:" in log and "Traceback" not in log and "ERROR" not in log, log
    rows = pa.dataset(str(out / "observations"), partitioning="hive").to_table().to_pylist()
    assert len(rows) == ok and not any(r["device"].startswith("warm-up") for r in rows)
    assert not (out / warmup.DIRECTORY).exists()


@pytest.mark.spark
@pytest.mark.slow  # Spark and mosquitto processes
@pytest.mark.parametrize("sig, status, said", [("SIGINT", 130, "interrupted"),
                                               ("SIGTERM", 0, "SIGTERM")])
def test_a_signal_to_the_process_group_during_the_warm_up_stops_the_job_in_one_line(
        tmp_path, sig, status, said):
    """Ctrl-C at a terminal, `timeout`, `kill -- -PGID` and a service manager's stop signal the
    job's whole process group while Spark warms up: a line that says so, the warm-up's
    directory removed, exit status 130 for SIGINT (a shell's) and 0 for SIGTERM (a stop asked
    for), no Python or py4j traceback."""
    import signal

    from spark_ingest.testing import IngestProcess, Mosquitto, until

    out = tmp_path / "data"
    with Mosquitto(tmp_path / "mqtt") as broker, IngestProcess(
            "--mqtt", broker.url, "--out", str(out), "--warm-up", str(warmup.MOST),
            ready="", group=True) as ingest:
        until(lambda: (out / warmup.DIRECTORY / "_mqtt").exists(), 240, "the warm-up")
        assert ingest.stop(getattr(signal, sig), timeout=240) == status, ingest.log()
        log = ingest.log()
    assert f"{said} while starting: stopped" in log and "Traceback" not in log, log
    assert "ingest ready" not in log
    assert not (out / warmup.DIRECTORY).exists()
