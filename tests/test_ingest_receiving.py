"""`spark_ingest.receiving`: the job's receivers in a process of their own, with a real
mosquitto — what comes goes into the buffer, and the process stops with its job, however the
job ends."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from spark_ingest.buffer import Buffer
from spark_ingest.mqtt import SUBSCRIBED, subscription
from spark_ingest.receiving import spawn, stop
from spark_ingest.testing import until
from tools.telemetry import messages, publish

pytestmark = [pytest.mark.spark]


@pytest.fixture
def mosquitto(tmp_path):
    from spark_ingest.testing import Mosquitto

    with Mosquitto(tmp_path / "broker") as broker:
        yield broker.url


def options(url: str, directory: Path, client_id: str) -> dict[str, str]:
    return {"broker": url, "topic": "ksp/+/telemetry", "buffer": str(directory),
            "client_id": client_id}


def ended(pid: int) -> bool:
    """Whether process `pid` has exited (gone, or a zombie nobody has reaped yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_the_receivers_process_buffers_what_comes_and_stops_when_told(mosquitto, tmp_path):
    directory = tmp_path / "_mqtt"
    directory.mkdir()
    (directory / SUBSCRIBED).write_text("ok")  # an earlier run's answer: not this one's
    process = spawn(options(mosquitto, directory, "apart-test"))
    try:
        assert subscription(directory) is None
        until(lambda: subscription(directory) == "ok", 60, "the SUBACK")
        sent = list(messages(40, devices=4, seed=3))
        publish(mosquitto, sent)
        buffer = Buffer(directory)  # the job's view, from this process
        until(lambda: len(buffer) == 40, 60, "the messages in the buffer")
        assert [p for _, _, p, _ in buffer.read(0, buffer.last())] == [p for _, p, _ in sent]
        buffer.commit(buffer.last())
        buffer.close()
    finally:
        stop(process)
    assert process.returncode == 0


def test_a_job_killed_takes_its_receivers_process_with_it(mosquitto, tmp_path):
    """`kill -9` of the job's process: the receivers' sees its standard input end, stops its
    receivers (what they took is in the buffer) and exits; no receiver is left holding the
    broker's session against the job's next start."""
    import json

    directory = tmp_path / "_mqtt"
    job = subprocess.Popen(
        [sys.executable, "-c", "import json, sys, time\n"
         "from spark_ingest.receiving import spawn\n"
         "process = spawn(json.loads(sys.argv[1]))\n"
         "print(process.pid, flush=True)\n"
         "time.sleep(600)\n", json.dumps(options(mosquitto, directory, "apart-killed"))],
        stdout=subprocess.PIPE, text=True)
    try:
        child = int(job.stdout.readline())
        until(lambda: subscription(directory) == "ok", 60, "the SUBACK")
        os.kill(job.pid, signal.SIGKILL)
        job.wait(30)
        until(lambda: ended(child), 60, "the receivers' process to end")
    finally:
        job.kill()
        job.wait()
