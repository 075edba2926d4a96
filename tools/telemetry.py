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

__all__ = ["add_parser", "messages", "poison", "publish", "publish_raw"]

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
                                 "time": "yesterday"}).encode()),
       lambda d: (d, json.dumps({"device": d, "property": "t", "value": 1,
                                 "time": "2999-01-01T00:00:00Z"}).encode()))


def poison(device: str, when: str = "2026-11-25T16:00:00.125Z") -> list[tuple[str, bytes, str]]:
    """Messages for `topic_of(device)` that each once made every batch fail, as
    (what, payload, the reason they are dead letters for)."""
    def body(**fields) -> bytes:
        return json.dumps({"device": device, "property": "t", "value": 1.5, "time": when,
                           **fields}).encode()

    return [
        ("a property ending in a newline", body(property="t\n"), "bad_property"),
        ("a device ending in a newline", body(device=device + "\n"), "bad_device"),
        ("a time ending in a newline", body(time=when + "\n"), "bad_time"),
        ("a value of 1 and 400 zeros",
         body(value=0).replace(b'"value": 0', b'"value": 1' + b"0" * 400), "bad_value"),
        ("100,000 [", b"[" * 100_000, "not_json"),
        ("a unit that is a lone surrogate",
         body().replace(b'"value"', b'"unit": "\\ud800", "value"'), "bad_unit"),
        ("year 1 an hour east of UTC", body(time="0001-01-01T00:00:00+01:00"), "bad_time"),
        ("a time in Arabic-Indic digits", body(time="\u0662\u0660\u0662\u0666-11-25T16:00:00Z"),
         "bad_time"),
        ("bytes that are not UTF-8", body()[:-1] + b"\xff\xfe}", "not_json"),
    ]


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


#: Messages published and not yet acknowledged at most: the publisher waits for the broker
#: rather than queueing without end.
MAX_UNACKED = 5000
#: Seconds without an acknowledgement before the broker is given up on.
ACK_TIMEOUT = 60.0


def publish(url: str, items, *, rate: float | None = None, qos: int = 1,
            login: dict | None = None) -> dict:
    """Publish (topic, payload, kind) items, at most `rate` per second; waits until the broker
    has acknowledged every one. Returns the counts by kind. `login`: {ca, user, password}
    (`spark_ingest.broker_args.broker_login`) for an mqtts:// broker.

    paho's loop runs in this thread, between publishes: with its network thread
    (`loop_start`) every publish also woke that thread through a socket pair, and the
    publisher took more CPU than the ingest's Python side (a profile of `ksp bench ingest`)."""
    import paho.mqtt.client as mqtt

    from spark_ingest import mqtt as receiving

    host, port = receiving.broker_address(url)
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv311)
    receiving.login(client, url, **(login or {}))
    client.max_inflight_messages_set(1000)
    client.max_queued_messages_set(0)
    acked = sent = 0
    refused = None

    def on_connect(client, userdata, flags, reason_code, properties) -> None:
        nonlocal refused
        if reason_code.is_failure:
            refused = str(reason_code)

    def on_publish(client, userdata, mid, reason_code, properties) -> None:
        nonlocal acked
        acked += 1

    def serve(timeout: float) -> None:
        """Take acknowledgements, send what waits; after a lost connection, connect again
        within `ACK_TIMEOUT` (paho sends the unacknowledged messages again)."""
        if client.loop(timeout) == mqtt.MQTT_ERR_SUCCESS:
            return
        if refused is not None:
            raise OSError(f"the broker refused the connection ({refused})")
        deadline = time.monotonic() + ACK_TIMEOUT
        while True:
            try:
                client.reconnect()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def settle(most: int) -> None:
        """Serve until at most `most` messages wait for their acknowledgement."""
        last, heard = acked, time.monotonic()
        while sent - acked > most:
            serve(0.1)
            if acked != last:
                last, heard = acked, time.monotonic()
            elif time.monotonic() - heard > ACK_TIMEOUT:
                raise OSError(f"no acknowledgement from the broker for {ACK_TIMEOUT:g} s "
                              f"({sent - acked} of {sent} messages unacknowledged)")

    client.on_connect, client.on_publish = on_connect, on_publish
    client.connect(host, port, keepalive=30)
    counts: dict[str, int] = {}
    started = time.monotonic()
    try:
        while not client.is_connected():  # the broker's CONNACK
            serve(0.1)
            if time.monotonic() - started > ACK_TIMEOUT:
                raise OSError(f"no CONNACK from the broker in {ACK_TIMEOUT:g} s")
        for topic, payload, kind in items:
            if rate:
                while (ahead := sent / rate - (time.monotonic() - started)) > 0:
                    serve(ahead)
            if client.publish(topic, payload, qos=qos).rc != mqtt.MQTT_ERR_SUCCESS:
                serve(0)  # the connection was lost: connected again, the message is sent then
            sent += 1
            counts[kind] = counts.get(kind, 0) + 1
            if sent % 100 == 0:
                serve(0)
                settle(MAX_UNACKED)
        settle(0)
    finally:
        client.disconnect()
    counts["seconds"] = round(time.monotonic() - started, 3)
    return counts


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        n, digit = n >> 7, n & 0x7F
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


def publish_raw(url: str, items, *, rate: float | None = None, client_id: str = "") -> dict:
    """`publish` for a plain `mqtt://` broker with neither TLS nor a password, as light as a
    publisher gets: MQTT 3.1.1 PUBLISH packets (QoS 1) written straight to the socket, a
    hundred per write (at most `rate` per second: a write waits for its time), at most
    `MAX_UNACKED` waiting for their PUBACK. paho spends most of a core on 10,000 messages/s;
    a benchmark whose publisher shares the cores with the consumer measures the publisher. No
    reconnection: a lost connection fails it. Same counts. An empty `client_id` (a clean
    session) lets the broker name it."""
    import socket
    import struct

    from spark_ingest import mqtt as receiving

    if not url.startswith("mqtt://"):
        raise ValueError("the raw publisher speaks plain mqtt:// only")
    host, port = receiving.broker_address(url)
    sock = socket.create_connection((host, port), timeout=ACK_TIMEOUT)
    ident = client_id.encode()
    body = b"\x00\x04MQTT\x04\x02" + struct.pack(">HH", 30, len(ident)) + ident
    sock.sendall(b"\x10" + _varint(len(body)) + body)
    connack = b""
    while len(connack) < 4:
        chunk = sock.recv(4 - len(connack))
        if not chunk:
            raise OSError("the broker closed the connection before its CONNACK")
        connack += chunk
    if connack[0] != 0x20 or connack[3] != 0:
        raise OSError(f"the broker refused the connection (CONNACK {connack.hex()})")
    pending = b""
    acked = sent = 0

    def take_acks(block: bool) -> None:
        nonlocal pending, acked
        sock.settimeout(ACK_TIMEOUT if block else 0.0)
        try:
            data = sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        finally:
            sock.settimeout(ACK_TIMEOUT)
        if not data:
            raise OSError(f"the broker closed the connection ({sent - acked} of {sent} "
                          "messages unacknowledged)")
        pending += data
        whole = len(pending) - len(pending) % 4  # PUBACK: 0x40 0x02 and a packet id
        if pending[0:whole:4].strip(b"\x40") or pending[1:whole:4].strip(b"\x02"):
            raise OSError(f"unexpected packet from the broker: {pending[:8].hex()}")
        acked += whole // 4
        pending = pending[whole:]

    counts: dict[str, int] = {}
    started = time.monotonic()
    out: list[bytes] = []

    def write() -> None:
        """The packets in `out`, at the time of the first of them."""
        if rate and (ahead := (sent - len(out)) / rate - (time.monotonic() - started)) > 0:
            time.sleep(ahead)
        sock.sendall(b"".join(out))
        out.clear()

    try:
        for topic, payload, kind in items:
            name = topic.encode()
            rest = struct.pack(">H", len(name)) + name + struct.pack(">H", sent % 65535 + 1)
            out.append(b"\x32" + _varint(len(rest) + len(payload)) + rest + payload)
            sent += 1
            counts[kind] = counts.get(kind, 0) + 1
            if len(out) == 100:
                write()
                take_acks(False)
                while sent - acked > MAX_UNACKED:
                    take_acks(True)
        write()
        while acked < sent:
            take_acks(True)
        sock.sendall(b"\xe0\x00")  # DISCONNECT
    except socket.timeout:
        raise OSError(f"no acknowledgement from the broker for {ACK_TIMEOUT:g} s "
                      f"({sent - acked} of {sent} messages unacknowledged)") from None
    finally:
        sock.close()
    counts["seconds"] = round(time.monotonic() - started, 3)
    return counts


def add_parser(sub) -> None:
    p = sub.add_parser("telemetry", help="publish telemetry over MQTT: load for the ingest",
                       description=__doc__.split("\n\n")[0])
    from spark_ingest.broker_args import add_broker_flags

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
    p.add_argument("--raw", action="store_true",
                   help="a minimal publisher (packets written straight to the socket, no "
                        "paho) for benchmarks: plain mqtt:// only")
    p.set_defaults(func=_command)


def _command(args: argparse.Namespace) -> int:
    count = args.count
    if count is None:
        if not args.rate:
            print("ksp telemetry: give --count, or --rate with --duration", file=sys.stderr)
            return 2
        count = int(args.rate * args.devices * args.duration)
    from spark_ingest.broker_args import broker_login

    rate = args.rate * args.devices or None  # in all
    began = time.time()  # the summary's: when the publishing began, for a paced benchmark
    try:
        login = broker_login(args)
        items = messages(count, args.devices, duplicates=args.duplicates, bad=args.bad,
                         seed=args.seed)
        if args.raw:
            if any(login.values()):
                raise ValueError("--raw publishes to a broker with neither TLS nor a "
                                 "password")
            counts = publish_raw(args.mqtt, items, rate=rate)
        else:
            counts = publish(args.mqtt, items, rate=rate, login=login)
    except (OSError, ValueError) as exc:
        print(f"ksp telemetry: {args.mqtt}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({**counts, "began": round(began, 3)}))
    return 0
