"""`ksp telemetry`'s publisher (`tools.telemetry.publish`) against a real mosquitto: every
message arrives, at the rate asked; a broker restarted mid-stream still gets every message
(at least once, QoS 1); a broker that stops answering is given up on with an error, not
waited on for ever; one that refuses the login is said so at once. The same for the raw
publisher (`publish_raw`, `ksp telemetry --raw`) where it applies."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from spark_ingest.testing import Mosquitto, Subscriber, until
from tools import telemetry
from tools.telemetry import messages, publish, publish_raw

# slow: mosquitto processes
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("publisher, batch", [(publish, 1), (publish_raw, 100)],
                         ids=["paho", "raw"])
def test_every_message_arrives_at_the_rate_asked(publisher, batch):
    """At most `rate` a second: the raw publisher writes a hundred at a time, each hundred
    at its time."""
    items = list(messages(1000, devices=3, duplicates=0.1, bad=0.05, seed=5))
    with Mosquitto() as broker:
        sub = Subscriber(broker.port)
        try:
            started = time.monotonic()
            counts = publisher(broker.url, items, rate=1000)
            took = time.monotonic() - started
            until(lambda: len(sub.got) >= len(items), 30, "every message")
        finally:
            sub.close()
    assert took >= (len(items) - batch) / 1000
    assert sorted(sub.got) == sorted(payload for _, payload, _ in items)
    assert counts["ok"] == 1000 and sum(v for k, v in counts.items()
                                        if k != "seconds") == len(items)


def test_a_broker_restarted_mid_stream_still_gets_every_message(tmp_path):
    items = list(messages(20_000, devices=10, seed=6))
    result: dict = {}

    def publishing(url: str) -> None:
        try:
            result["counts"] = publish(url, items, rate=4000)
        except Exception as exc:  # noqa: BLE001 — the test reports it
            result["error"] = exc

    broker = Mosquitto(tmp_path / "mqtt")
    port = broker.port
    sub = Subscriber(port)
    try:
        thread = threading.Thread(target=publishing, args=(broker.url,))
        thread.start()
        until(lambda: len(sub.got) > 2000, 30, "the stream under way")
        broker.proc.terminate()  # mosquitto writes its store on the way out
        broker.proc.wait(10)
        time.sleep(1)
        broker = Mosquitto(tmp_path / "mqtt", port=port)
        thread.join(120)
        assert not thread.is_alive() and "error" not in result, result
        until(lambda: set(sub.got) >= {p for _, p, _ in items}, 60,
              "every message after the restart")
    finally:
        sub.close()
        broker.__exit__()
    assert result["counts"]["ok"] == len(items)


@pytest.mark.parametrize("publisher, count", [(publish, 50_000), (publish_raw, 200_000)],
                         ids=["paho", "raw"])
def test_a_broker_that_stops_answering_is_given_up_on(monkeypatch, publisher, count):
    """Paused mid-stream, the broker acknowledges nothing: the publisher stops at
    `MAX_UNACKED` (publishing every 100 messages' worth past it at most), not at the end of
    its messages (more for the raw one, which is faster), and gives up after `ACK_TIMEOUT`."""
    import re

    monkeypatch.setattr(telemetry, "ACK_TIMEOUT", 2.0)
    items = list(messages(count, devices=10, seed=7))
    with Mosquitto() as broker:
        sub = Subscriber(broker.port)
        result: dict = {}

        def publishing() -> None:
            try:
                publisher(broker.url, items)
            except OSError as exc:
                result["error"] = exc

        thread = threading.Thread(target=publishing)
        try:
            thread.start()
            until(lambda: len(sub.got) > 1000, 30, "the stream under way")
            os.kill(broker.proc.pid, signal.SIGSTOP)
            thread.join(60)
        finally:
            os.kill(broker.proc.pid, signal.SIGCONT)
            thread.join(60)
            sub.close()
    assert not thread.is_alive()
    assert "no acknowledgement from the broker for 2 s" in str(result.get("error")), result
    unacknowledged, sent = map(int, re.search(r"\((\d+) of (\d+) messages unacknowledged\)",
                                               str(result["error"])).groups())
    assert unacknowledged <= telemetry.MAX_UNACKED + 100 and sent < len(items)


def test_a_refused_login_is_an_error_at_once(tmp_path):
    """The broker's refusal ends the call at its first CONNACK: one login tried, not a retry
    loop waiting for a timeout (the broker's log counts the refused logins)."""
    from spark_ingest.testing import secure_settings

    settings = secure_settings(tmp_path, "loader", "pw-of-loader")
    items = list(messages(10, devices=2, seed=8))
    outcome: dict = {}

    def refused_publish(url: str, ca: str) -> None:
        try:
            publish(url, items, login={"ca": ca, "user": "loader", "password": "not-it"})
        except OSError as exc:
            outcome["refused"] = str(exc)

    with Mosquitto(tmp_path / "broker", settings=settings) as broker:
        url = f"mqtts://127.0.0.1:{broker.port}"
        ca = str(tmp_path / "ca.pem")
        thread = threading.Thread(target=refused_publish, args=(url, ca), daemon=True)
        thread.start()
        thread.join(120)
        assert not thread.is_alive(), "the refused publisher is still trying"
        counts = publish(url, items, login={"ca": ca, "user": "loader",
                                            "password": "pw-of-loader"})
        log = broker.log.read_text(errors="replace")
    assert "refused the connection (Not authorized)" in outcome.get("refused", ""), outcome
    assert log.count("not authorised") == 1, log
    assert counts["ok"] == 10


def test_the_raw_publisher_delivers_every_message_once():
    """More messages than packet IDs (65,535) and than `MAX_UNACKED`: each arrives, once."""
    items = list(messages(70_000, devices=7, duplicates=0.01, bad=0.001, seed=8))
    with Mosquitto() as broker:
        sub = Subscriber(broker.port)
        try:
            counts = publish_raw(broker.url, items)
            until(lambda: len(sub.got) >= len(items), 60, "every message")
            time.sleep(0.5)
        finally:
            sub.close()
    assert sorted(sub.got) == sorted(payload for _, payload, _ in items)
    assert counts["ok"] == 70_000 and counts["duplicate"] > 0 and counts["bad"] > 0
    assert sum(v for k, v in counts.items() if k != "seconds") == len(items)


def test_raw_is_refused_with_a_login_or_over_tls(capsys):
    from tools.cli import main

    assert main(["telemetry", "--raw", "--count", "1", "--mqtt-user", "loader"]) == 1
    assert "--raw publishes to a broker with neither TLS nor a password" in \
        capsys.readouterr().err
    assert main(["telemetry", "--raw", "--count", "1", "--mqtt", "mqtts://127.0.0.1:1"]) == 1
    assert "plain mqtt:// only" in capsys.readouterr().err
