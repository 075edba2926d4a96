"""The firmware's MQTT mode on CPython (`ksp simulate-board --mqtt`: the firmware's telemetry
agent and loop, micropython-lib's umqtt.simple over real sockets) against a real mosquitto;
what a subscriber receives passes the ingest's checks. In real MicroPython (no sockets in the
WebAssembly port): tests/test_firmware_mpy.py."""
from __future__ import annotations

import re
from pathlib import Path
import subprocess
import sys
import time

import pytest

from spark_ingest.telemetry import parse
from spark_ingest.testing import Mosquitto, Subscriber, secure_settings, until

# slow: mosquitto and the firmware under MicroPython
pytestmark = pytest.mark.slow

EXAMPLE = "device_firmware/config.example.json"


def simulate(url: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tools.cli", "simulate-board", EXAMPLE,
                             "--mqtt", url, "--period", "1", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def published(output: str) -> int:
    """What the board counted as published (PUBACKed), from its last line."""
    return int(re.search(r"(\d+) readings published in all", output)[1])


def test_simulated_board_publishes_valid_telemetry(tmp_path):
    with Mosquitto(tmp_path) as broker:
        watcher = Subscriber(broker.port, keep=parse)
        try:
            proc = simulate(broker.url, "--readings", "3")
            out, _ = proc.communicate(timeout=60)
            assert proc.returncode == 0, out
            until(lambda: len(watcher.got) >= 15, 10, "fifteen readings")
        finally:
            watcher.close()
    assert published(out) == len(watcher.got) == 15  # 3 rounds of the example's 5 sensors
    assert all(reason is None for *_, reason in watcher.got), watcher.got
    assert {(d, p) for d, p, *_ in watcher.got} == {
        ("sensor42", p) for p in ("chipTemperature", "temperature", "humidity", "pressure",
                                  "light")}
    assert len({(d, p, when) for d, p, _, _, when, _ in watcher.got}) == 15  # each its own
    units = {p: u for _, p, _, u, _, _ in watcher.got}
    assert units == {"chipTemperature": "Cel", "temperature": "Cel", "humidity": "%",
                     "pressure": "hPa", "light": "1"}


def test_broker_down_at_start_and_restarted_mid_stream_loses_nothing_published(tmp_path):
    """The board starts before its broker, and the broker restarts under it: it keeps trying
    (with back-off), and every reading it counted as published (PUBACKed) reaches a
    subscriber with a persistent session; a reading in flight at the break is sent again
    (the same time: the ingest drops the copy)."""
    broker = Mosquitto(tmp_path)
    port = broker.port
    watcher = Subscriber(port, keep=parse)  # its session kept in the broker's store from now on
    broker.__exit__(None, None, None)  # down at start
    proc = simulate(f"mqtt://127.0.0.1:{port}")
    try:
        time.sleep(2)
        assert proc.poll() is None
        broker = Mosquitto(tmp_path, port)
        until(lambda: len(watcher.got) >= 10, 60, "readings after the broker came up")
        broker.__exit__(None, None, None)  # down mid-stream, its store kept
        time.sleep(1.5)
        broker = Mosquitto(tmp_path, port)
        until(lambda: len(watcher.got) >= 30, 60, "readings after the restart")
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
        time.sleep(1)
        watcher.close()
        broker.__exit__(None, None, None)
    assert proc.returncode == 0, out
    assert "MQTT 127.0.0.1:%d down" % port in out
    got = {(d, p, when) for d, p, _, _, when, _ in watcher.got}
    assert all(reason is None for *_, reason in watcher.got)
    assert len(got) == published(out) >= 30  # the readings it counted, each at least once


def test_a_password_goes_only_over_tls_to_a_broker_the_board_checked(tmp_path):
    """The board's MQTT password crosses the network only inside TLS (a config with one and
    no TLS is refused, tests/test_firmware_mpy.py); a broker whose certificate the board's CA
    did not sign gets nothing, not even the connection's password."""
    import json

    settings = secure_settings(tmp_path, "sensor42", "s3cret-pw")
    config = json.loads((Path(EXAMPLE)).read_text())
    with Mosquitto(tmp_path / "broker", settings=settings) as broker:
        watcher = Subscriber(broker.port, tls=True, keep=parse, ca=str(tmp_path / "ca.pem"),
                             user="sensor42", password="s3cret-pw")
        got = watcher.got
        try:
            for ca, name in (("other-ca.pem", "untrusted"), ("ca.pem", "trusted")):
                path = tmp_path / f"{name}.json"
                path.write_text(json.dumps(dict(config, mqtt={
                    "host": "127.0.0.1", "port": broker.port, "tls": True,
                    "ca": str(tmp_path / ca), "user": "sensor42", "password": "s3cret-pw"})))
                proc = subprocess.Popen([sys.executable, "-m", "tools.cli", "simulate-board",
                                         str(path), "--period", "1", "--readings", "2"],
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True)
                try:
                    out, _ = proc.communicate(timeout=8 if name == "untrusted" else 60)
                except subprocess.TimeoutExpired:
                    proc.terminate()
                    out, _ = proc.communicate(timeout=30)
                if name == "untrusted":
                    assert "CERTIFICATE_VERIFY_FAILED" in out and published(out) == 0, out
                    assert got == []
                else:
                    assert proc.returncode == 0 and published(out) == 10, out
            until(lambda: len(got) >= 10, 10, "the readings over TLS")
        finally:
            watcher.close()
    assert all(reason is None for *_, reason in got) and len(got) == 10
