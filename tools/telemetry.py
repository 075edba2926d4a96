"""`ksp telemetry`: load for the ingest — N devices publishing readings over MQTT in the
telemetry format (spark_ingest/telemetry.py), at a rate, for a time or a count.

    ksp telemetry --mqtt mqtt://127.0.0.1:1883 --devices 100 --rate 10 --duration 60
    ksp telemetry --count 10000 --duplicates 0.05 --bad 0.01     # for tests: known faults

Each device publishes its properties in turn (temperature, humidity, luminosity), QoS 1, on
`ksp/<device>/telemetry`; values wander. `--duplicates` sends that share of readings twice
(as a retrying device does), `--bad` that share of broken messages (each kind of dead letter in
turn). The summary line says what was sent, so a test knows what the ingest must hold.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from datetime import datetime, timedelta, timezone

__all__ = ["add_parser", "messages", "publish"]

PROPERTIES = (("temperature", "Cel", 22.0), ("humidity", "%", 55.0),
              ("luminosity", "lx", 500.0))
#: Broken messages, one of each dead-letter reason in turn: (topic device, payload).
BAD = (lambda d: (d, b"{not json"),
       lambda d: (d, json.dumps({"device": "a b", "property": "t", "value": 1,
                                 "time": "2026-01-01T00:00:00Z"}).encode()),
       lambda d: ("other", json.dumps({"device": d, "property": "t", "value": 1,
                                       "time": "2026-01-01T00:00:00Z"}).encode()),
       lambda d: (d, json.dumps({"device": d, "value": 1,
                                 "time": "2026-01-01T00:00:00Z"}).encode()),
       lambda d: (d, json.dumps({"device": d, "property": "t", "value": "1",
                                 "time": "2026-01-01T00:00:00Z"}).encode()),
       lambda d: (d, json.dumps({"device": d, "property": "t", "value": 1, "unit": 5,
                                 "time": "2026-01-01T00:00:00Z"}).encode()),
       lambda d: (d, json.dumps({"device": d, "property": "t", "value": 1,
                                 "time": "yesterday"}).encode()))


def messages(count: int, devices: int = 10, *, duplicates: float = 0.0, bad: float = 0.0,
             seed: int = 1, start: datetime | None = None, step: float = 0.01):
    """(topic, payload, kind) for `count` readings ("ok"), plus duplicates ("duplicate") and
    broken messages ("bad") in the given shares. A device's readings are `step` seconds
    apart (their `time`), from `start` (now by default)."""
    from spark_ingest.telemetry import reading, topic_of

    rng = random.Random(seed)
    start = start or datetime.now(timezone.utc).replace(microsecond=0)
    broken = 0
    for n in range(count):
        device = f"sensor{n % devices}"
        name, unit, base = PROPERTIES[(n // devices) % len(PROPERTIES)]
        when = start + timedelta(seconds=step * (n // devices))
        payload = reading(device, name, round(base + rng.uniform(-5, 5), 2), unit, when)
        yield topic_of(device), payload, "ok"
        if rng.random() < duplicates:
            yield topic_of(device), payload, "duplicate"
        if rng.random() < bad:
            topic_device, junk = BAD[broken % len(BAD)](device)
            broken += 1
            yield topic_of(topic_device), junk, "bad"


def publish(url: str, items, *, rate: float | None = None, qos: int = 1,
            login: dict | None = None) -> dict:
    """Publish (topic, payload, kind) items, at most `rate` per second; waits until the broker
    has acknowledged every one. Returns the counts by kind. `login`: {ca, user, password}
    (`spark_ingest.mqtt.broker_login`) for an mqtts:// broker."""
    import paho.mqtt.client as mqtt

    from spark_ingest import mqtt as receiving

    host, port = receiving.broker_address(url)
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv311)
    receiving.login(client, url, **(login or {}))
    client.max_inflight_messages_set(1000)
    client.max_queued_messages_set(0)
    client.connect(host, port, keepalive=30)
    client.loop_start()
    counts: dict[str, int] = {}
    infos = []
    started = time.monotonic()
    try:
        for n, (topic, payload, kind) in enumerate(items):
            if rate:
                ahead = n / rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
            infos.append(client.publish(topic, payload, qos=qos))
            counts[kind] = counts.get(kind, 0) + 1
            if len(infos) >= 5000:
                for info in infos:
                    info.wait_for_publish(60)
                infos.clear()
        for info in infos:
            info.wait_for_publish(60)
    finally:
        client.disconnect()
        client.loop_stop()
    counts["seconds"] = round(time.monotonic() - started, 3)
    return counts


def add_parser(sub) -> None:
    p = sub.add_parser("telemetry", help="publish telemetry over MQTT: load for the ingest",
                       description=__doc__.split("\n\n")[0])
    from spark_ingest.mqtt import add_broker_flags

    p.add_argument("--mqtt", default="mqtt://127.0.0.1:1883", metavar="URL",
                   help="mqtt://HOST[:PORT], or mqtts://HOST[:PORT] (TLS)")
    add_broker_flags(p)
    p.add_argument("--devices", type=int, default=10)
    p.add_argument("--rate", type=float, default=0.0,
                   help="readings per second per device (0: as fast as the broker takes them)")
    p.add_argument("--count", type=int, help="readings in all (default: rate × devices × "
                                             "duration)")
    p.add_argument("--duration", type=float, default=10.0, metavar="S")
    p.add_argument("--duplicates", type=float, default=0.0, metavar="SHARE")
    p.add_argument("--bad", type=float, default=0.0, metavar="SHARE")
    p.add_argument("--seed", type=int, default=1)
    p.set_defaults(func=_command)


def _command(args: argparse.Namespace) -> int:
    count = args.count
    if count is None:
        if not args.rate:
            print("ksp telemetry: give --count, or --rate with --duration", file=sys.stderr)
            return 2
        count = int(args.rate * args.devices * args.duration)
    from spark_ingest.mqtt import broker_login

    try:
        login = broker_login(args)
        counts = publish(args.mqtt, messages(count, args.devices, duplicates=args.duplicates,
                                             bad=args.bad, seed=args.seed),
                         rate=args.rate * args.devices or None, login=login)
    except (OSError, ValueError) as exc:
        print(f"ksp telemetry: {args.mqtt}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(counts))
    return 0
