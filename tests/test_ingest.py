"""`ksp-ingest` (issue 13) with real parts: Debian's mosquitto on a free loopback port, a real
local Spark (the ingest as a process, `local[2]`), a real `ksp-sib`; the telemetry published
by `ksp telemetry`'s code with known duplicates and broken messages. Marked `spark`: the
default test command runs them."""
from __future__ import annotations

import asyncio
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from spark_ingest.telemetry import REASONS, parse
from tools.telemetry import messages, publish

pytestmark = pytest.mark.spark
pa = pytest.importorskip("pyarrow.dataset")  # the spark extra brings it

ROOT = Path(__file__).resolve().parent.parent
BASE = "http://example.org/greenhouse#"


@pytest.fixture
def mosquitto(tmp_path):
    """mosquitto on a free port, with a persistent store and room for a stopped ingest's
    backlog (its default keeps 1,000 messages per offline client, then drops)."""
    from sib.testing import free_port

    port = free_port("tcp")
    conf = tmp_path / "mosquitto.conf"
    (tmp_path / "mqtt-store").mkdir()
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence true\n"
                    f"persistence_location {tmp_path / 'mqtt-store'}/\n"
                    "max_queued_messages 1000000\nmax_inflight_messages 1000\n")
    proc = subprocess.Popen(["mosquitto", "-c", str(conf)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    import socket

    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            break
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.05)
    yield f"mqtt://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(10)


class IngestProcess:
    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "spark_ingest.cli", *args],
                                     cwd=ROOT, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        self.log: list[str] = []
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.wait_for("subscribed to", 180)

    def stop_when(self, ready, what: str) -> None:
        """Wait for `ready()`, a batch more (nothing else may come), then SIGTERM: exit 0."""
        until(ready, 240, what)
        time.sleep(2)
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(120) == 0, "".join(self.log[-40:])

    def __enter__(self) -> "IngestProcess":
        return self

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.log.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def wait_for(self, text: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                line = ""
            assert line is not None, "".join(self.log[-40:])
            if text in line:
                return line
            assert time.monotonic() < deadline, f"no {text!r}:\n" + "".join(self.log[-40:])


def table(out: Path, name: str):
    path = out / name
    if not path.exists():
        return None
    return pa.dataset(str(path), format="parquet", partitioning="hive").to_table()


def count(out: Path, name: str) -> int:
    t = table(out, name)
    return 0 if t is None else t.num_rows  # files appear whole (moved into place)


def until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.25)


def ingest_args(mqtt: str, out: Path, *more: str) -> list[str]:
    return ["--mqtt", mqtt, "--out", str(out), "--trigger", "500 milliseconds",
            "--status", "1", *more]


def test_readings_become_observations_duplicates_go_and_bad_messages_are_dead_letters(
        mosquitto, tmp_path):
    from sib.testing import SibProcess
    from transports import connect

    out = tmp_path / "data"
    sent = list(messages(600, devices=6, duplicates=0.1, bad=0.05, seed=3))
    with SibProcess("--memory", "--udp-port", "0", "--tcp-port", "-1",
                    "--coap-port", "-1") as sib:
        with IngestProcess(*ingest_args(mosquitto, out, "--sib",
                                        f"udp://127.0.0.1:{sib.ports['udp']}",
                                        "--ntriples", "--metrics-port", "0")) as ingest:
            counts = publish(mosquitto, sent)
            assert counts["ok"] == 600 and counts["duplicate"] > 0 and counts["bad"] > 0
            until(lambda: count(out, "observations") >= 600
                  and count(out, "dead_letters") >= counts["bad"], 240,
                  "the observations and dead letters")
            port = int(re.search(r"metrics on http://[^:]+:(\d+)", "".join(ingest.log))[1])

            def scrape() -> dict:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
                    return {line.split(" ")[0]: float(line.split(" ")[1])
                            for line in r.read().decode().splitlines()
                            if line and not line.startswith("#")}

            until(lambda: scrape()["ksp_ingest_observations_total"] == 600, 60,
                  "the batch's figures")  # counted once its SIB update is sent
            figures = scrape()
            ingest.stop_when(lambda: True, "the end")

        async def in_the_sib():
            async with connect(f"udp://127.0.0.1:{sib.ports['udp']}") as kp:
                rows = await kp.query("SELECT ?s ?p ?v WHERE { ?s ?p ?v }")
                return {(str(r[0]), str(r[1])): float(r[2]) for r in rows.rows}

        state = asyncio.run(asyncio.wait_for(in_the_sib(), 60))

    readings = [parse(t, p) for t, p, kind in sent if kind == "ok"]
    obs = table(out, "observations").to_pylist()
    assert len(obs) == 600  # every reading once: the duplicates dropped
    keys = {(o["madeBySensor"], o["observedProperty"], o["resultTime"]) for o in obs}
    assert len(keys) == 600
    assert sorted((o["madeBySensor"], o["observedProperty"], o["hasSimpleResult"])
                  for o in obs) == sorted((BASE + d, BASE + p, v)
                                          for d, p, v, _, _, _ in readings)
    assert {o["device"] for o in obs} == {f"sensor{k}" for k in range(6)}  # the partitions
    dead = table(out, "dead_letters").to_pylist()
    assert len(dead) == counts["bad"]
    assert {d["reason"] for d in dead} <= set(REASONS) and len({d["reason"] for d in dead}) > 3
    newest = {}
    for d, p, v, _, when, _ in readings:
        if (BASE + d, BASE + p) not in newest or newest[BASE + d, BASE + p][0] < when:
            newest[BASE + d, BASE + p] = (when, v)
    assert state == {k: v for k, (_, v) in newest.items()}
    nt = "".join(f.read_text() for f in sorted((out / "ntriples").glob("*.nt")))
    assert nt.count("\n") == 5 * 600 and nt.count("sosa/Observation>") == 600
    assert any(re.search(r"ingest: .* readings/s, .* lag [\d,]+ messages \([\d.]+ s\)",
                         line) for line in ingest.log)
    assert figures["ksp_ingest_observations_total"] == 600
    assert figures["ksp_ingest_dead_letters_total"] == counts["bad"]
    assert figures["ksp_ingest_sib_updates_total"] >= 1
    assert "ksp_ingest_lag_messages" in figures and "process_resident_memory_bytes" in figures


def test_killed_and_restarted_mid_stream_nothing_lost_nothing_twice(mosquitto, tmp_path):
    """kill -9 while readings arrive, then the same command again: every reading is in the
    observations exactly once (what was buffered and not committed is read again from the
    buffer; what was not acknowledged comes again from the broker's persistent session)."""
    out = tmp_path / "data"
    sent = list(messages(1500, devices=5, seed=7))
    args = ingest_args(mosquitto, out)
    first = IngestProcess(*args)
    publisher = threading.Thread(target=publish, args=(mosquitto, sent), kwargs={"rate": 75},
                                 daemon=True)
    publisher.start()
    try:
        until(lambda: count(out, "observations") >= 1, 240, "the first observations")
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(30)
        killed_at = count(out, "observations")
        publishing = publisher.is_alive()
        with IngestProcess(*args) as second:
            publisher.join(120)
            second.stop_when(lambda: count(out, "observations") >= 1500, "every observation")
    finally:
        if first.proc.poll() is None:
            first.proc.kill()
    obs = table(out, "observations").to_pylist()
    seen = Counter((o["device"], o["observedProperty"], o["resultTime"]) for o in obs)
    assert len(seen) == 1500 and max(seen.values()) == 1  # none lost, none twice
    assert 1 <= killed_at < 1500 and publishing  # it was killed mid-stream
    assert os.path.exists(out / "_checkpoint")


def test_per_minute_aggregates_are_final_and_written_once(mosquitto, tmp_path):
    """Readings a second apart over six minutes: every minute the watermark (30 s) has passed
    is in the aggregates once, with the min, max, mean and count of its readings."""
    from datetime import datetime, timedelta, timezone

    out = tmp_path / "data"
    start = datetime.now(timezone.utc).replace(second=0, microsecond=0) - timedelta(hours=1)
    sent = list(messages(720, devices=2, seed=11, start=start, step=1.0))
    with IngestProcess(*ingest_args(mosquitto, out, "--watermark", "30 seconds")) as ingest:
        publish(mosquitto, sent)
        until(lambda: count(out, "observations") >= 720, 240, "the observations")
        newest = start + timedelta(seconds=359)
        closed = (newest - timedelta(seconds=30)).replace(second=0)  # minutes ending by then
        want: dict = {}
        for topic, payload, _ in sent:
            d, p, v, _, when, _ = parse(topic, payload)
            minute = when.replace(second=0, microsecond=0)
            if minute + timedelta(minutes=1) <= closed:
                want.setdefault((d, BASE + p, minute), []).append(v)
        ingest.stop_when(lambda: count(out, "aggregates") >= len(want), "the closed minutes")
    rows = table(out, "aggregates").to_pylist()
    got = {(r["device"], r["observedProperty"], r["minute"].replace(tzinfo=timezone.utc)): r
           for r in rows}
    assert len(got) == len(rows)  # each minute once
    assert set(got) == set(want)  # the open minute not yet
    assert len(want) == 2 * 3 * 5  # two devices, three properties, five closed minutes
    for key, values in want.items():
        r = got[key]
        assert (r["count"], r["min"], r["max"]) == (len(values), min(values), max(values))
        assert r["mean"] == pytest.approx(sum(values) / len(values))
