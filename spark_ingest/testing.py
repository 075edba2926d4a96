"""For tests and benchmarks: a mosquitto of the project's own (Debian's `mosquitto` on a free
loopback port, with a persistent store and room for an ingest's backlog while it is away: the
default keeps 1,000 messages per offline client, then drops) and `ksp-ingest` as a process."""
from __future__ import annotations

import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

__all__ = ["IngestProcess", "Mosquitto", "until"]

ROOT = Path(__file__).resolve().parent.parent


class Mosquitto:
    """`with Mosquitto() as broker: broker.url` → `mqtt://127.0.0.1:PORT`."""

    def __init__(self, directory: str | Path | None = None) -> None:
        self._own = directory is None
        self.directory = Path(tempfile.mkdtemp(prefix="mosquitto-") if directory is None
                              else directory)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"mqtt://127.0.0.1:{self.port}"
        store = self.directory / "mqtt-store"
        store.mkdir(parents=True, exist_ok=True)
        conf = self.directory / "mosquitto.conf"
        conf.write_text(f"listener {self.port} 127.0.0.1\nallow_anonymous true\n"
                        f"persistence true\npersistence_location {store}/\n"
                        "max_queued_messages 1000000\nmax_inflight_messages 1000\n")
        self.proc = subprocess.Popen(["mosquitto", "-c", str(conf)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 1).close()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"mosquitto did not start: {self.proc.stderr.read()}")
                time.sleep(0.05)

    def __enter__(self) -> "Mosquitto":
        return self

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        if self._own:
            shutil.rmtree(self.directory, ignore_errors=True)


def until(predicate, timeout: float, what: str, every: float = 0.25) -> None:
    """Wait for `predicate()`; AssertionError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"not reached in {timeout} s: {what}"
        time.sleep(every)


class IngestProcess:
    """`ksp-ingest` as a real subprocess (`python -m spark_ingest.cli ARGS`), its log read on a
    thread; ready once its MQTT receiver has subscribed."""

    def __init__(self, *args: str, timeout: float = 180.0) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "spark_ingest.cli", *args],
                                     cwd=ROOT, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        self.log: list[str] = []
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.wait_for("subscribed to", timeout)

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
        """Block until a log line contains `text` (returns it); fails if the process ends."""
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
