"""Client, configuration and agents of the firmware inside real MicroPython (WebAssembly build
under Node), with a fake link and a virtual clock (the WebAssembly port has no sockets; the
same client over real sockets: tests/test_firmware_client.py). tests/firmware/mpy_checks.py
runs once in MicroPython and once in CPython; the bytes the firmware sent are decoded here with
the reference codec, and both runs must agree."""
from __future__ import annotations

import json

import pytest

from firmware import harness
from ksp import (
    IRI, Ack, Literal, Request, Response, SelectResult, Status, Tx, Var, decode_kp_message, encode,
)

# slow: the firmware under MicroPython (WebAssembly, in Node)
pytestmark = pytest.mark.slow

EX = "http://example.org/gh#"
XSD_BOOLEAN = "http://www.w3.org/2001/XMLSchema#boolean"
XSD_FLOAT = "http://www.w3.org/2001/XMLSchema#float"
SEQS = ((65535, "true"), (0, "false"), (65535, "true"), (0, "false"), (32769, "true"),
        (1, "true"))

GOOD = {"agent": "actuator", "wifi": {"ssid": "gh", "password": ""},
        "sib": {"host": "10.0.0.2", "port": 10011, "transport": "tcp"},
        "kp": {"id": "0f1e2d3c4b5a69788796a5b4c3d2e1f0"}, "device": EX + "fan1",
        "outputs": [{"pin": 5, "ask": [[EX + "fan1", EX + "on", True]]}]}
BAD = [
    ([], ["config: the file must hold one JSON object"]),
    ({}, ["config: agent: missing", "config: wifi.ssid: missing", "config: sib.host: missing",
          "config: kp.id: missing", "config: device: missing"]),
    (dict(GOOD, sib={"host": "h", "port": 70000, "transport": "sctp"}),
     ["config: sib.port: must be an integer 1..65535, not 70000",
      "config: sib.transport: must be one of udp, tcp, not \"sctp\""]),
    (dict(GOOD, kp={"id": "not-a-uuid", "password": 5}),
     ["config: kp.id: must be a UUID (32 hex digits), not \"not-a-uuid\"",
      "config: kp.password: must be a string of at most 255 bytes, not 5"]),
    (dict(GOOD, outputs=[{"pin": 99, "ask": [[1, 2]]}, {"pin": 2}]),
     ["config: outputs[0].pin: must be a GPIO number 0..48, not 99",
      "config: outputs[0].ask: must be a non-empty list of [s, p, o] patterns, not [[1, 2]]",
      "config: outputs[1]: needs exactly one of ask, select (a list of [s, p, o] patterns)"]),
    (dict(GOOD, agent="sensor", sensors=[{"type": "thermistor"}, {"type": "bme280",
                                                                  "property": EX + "p",
                                                                  "sda": "21"}],
          period_s=0, deep_sleep="yes", max_response_size=10),
     ["config: period_s: must be an integer 1..86400, not 0",
      "config: deep_sleep: must be true or false, not \"yes\"",
      "config: max_response_size: must be an integer 64..65507, not 10",
      "config: sensors[0].type: must be one of chip_temp, dht22, bme280, light, not \"thermistor\"",
      "config: sensors[1].sda: must be a GPIO number 0..48, not \"21\"",
      "config: sensors[1].scl: must be a GPIO number 0..48"]),
    ({"agent": "actuator", "wifi": {"ssid": "gh"}, "device": EX + "fan 1",
      "mqtt": {"port": 0, "keepalive": -1, "password": 7},
      "outputs": [{"pin": 5, "ask": [[EX + "fan1", EX + "on", True]]}]},
     ["config: mqtt.host: missing",
      "config: mqtt.port: must be an integer 1..65535, not 0",
      "config: mqtt.password: must be a string of at most 255 bytes, not 7",
      "config: mqtt.keepalive: must be an integer 0..65535, not -1",
      "config: mqtt.device: must be 1-64 of A-Z a-z 0-9 . _ - (default: the end of device), "
      "not \"fan 1\"",
      "config: mqtt: only a sensor publishes telemetry (agent must be sensor)"]),
    ({"agent": "sensor", "wifi": {"ssid": "gh"}, "device": EX + "s1",
      "mqtt": {"host": "h", "user": "s1", "password": "secret"},
      "sensors": [{"type": "chip_temp", "property": EX + "t"}]},
     ["config: mqtt.password: would cross the network in clear: set mqtt.tls and mqtt.ca"]),
    ({"agent": "sensor", "wifi": {"ssid": "gh"}, "device": EX + "s1",
      "mqtt": {"host": "h", "tls": True}, "sensors": [{"type": "chip_temp", "property": EX + "t"}]},
     ["config: mqtt.ca: missing"]),
]


def _ind(seq, value, status=Status.OK):
    result = None if status else SelectResult(1, ((Literal(value, XSD_BOOLEAN),),), 1, ())
    return encode(Response(1, status, result, indication=True, seq=seq)).hex()


@pytest.fixture(scope="session")
def cases(tmp_path_factory):
    path = tmp_path_factory.mktemp("fw-cases") / "cases.json"
    inds = [_ind(s, v) for s, v in SEQS] + [_ind(2, None, Status.TERMINATED)]
    path.write_text(json.dumps({"inds": inds, "configs": [GOOD] + [c for c, _ in BAD]}))
    return path


@pytest.fixture(scope="session")
def mpy(cases, tmp_path_factory):
    out = tmp_path_factory.mktemp("fw-mpy-checks") / "out.json"
    proc = harness.run_mpy(harness.HERE / "mpy_checks.py", "/fw", "/t", "/in/cases.json",
                           "/in/out.json", copies={"/t": harness.HERE, "/in": cases.parent},
                           fetch={"/in/out.json": out})
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text())


@pytest.fixture(scope="session")
def cpy(cases, tmp_path_factory):
    out = tmp_path_factory.mktemp("fw-cpy-checks") / "out.json"
    proc = harness.run_cpython(harness.HERE / "mpy_checks.py", str(harness.FIRMWARE),
                               str(harness.HERE), str(cases), str(out))
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text())


@pytest.fixture(params=["mpy", "cpy"])
def run(request):
    return request.getfixturevalue(request.param)


def test_micropython_and_cpython_behave_the_same(mpy, cpy):
    assert mpy["retransmission"] == cpy["retransmission"]
    assert mpy["subscription"] == cpy["subscription"]
    assert mpy["configs"] == cpy["configs"]
    # agents draw random request numbers: compare what was sent apart from TIDs and epochs
    for key, part in (("actuator", "sent"), ("sensor", "cold"), ("sensor", "woken")):
        assert unnumbered(mpy[key][part]) == unnumbered(cpy[key][part])
    assert mpy["actuator"]["pin5"] == cpy["actuator"]["pin5"]
    assert mpy["sensor"]["slept"] == cpy["sensor"]["slept"]
    assert mpy["telemetry"] == cpy["telemetry"]
    assert mpy["tid_budget"] == cpy["tid_budget"]


def unnumbered(hexes: list[str]) -> list:
    """The messages of `hexes` with TIDs and epochs left out: what agents draw at random."""
    out = []
    for h in hexes:
        m = decode_kp_message(bytes.fromhex(h))
        if isinstance(m, Request):
            m = m._replace(options=m.options._replace(epoch=None))
        out.append(m._replace(tid=0))
    return out


def test_con_retransmission_schedule(run):
    r = run["retransmission"]
    assert r["times"] == [0, 2000, 6000, 14000, 30000]
    assert r["gave_up"] == 62000 and r["same_bytes"]
    assert [e[0] for e in r["events"]] == ["timeout"]


def test_inds_acked_and_stale_dropped_across_the_wrap(run):
    s = run["subscription"]
    assert s["tid"] == 1
    sent = [decode_kp_message(bytes.fromhex(h)) for h in s["sent"]]
    assert sent[0].tx == Tx.SELECT_PERSISTENT and sent[0].where == (
        (IRI(EX + "fan"), IRI(EX + "on"), Var(0)),)
    assert sent[1:] == [Ack(1, seq) for seq, _ in SEQS] + [Ack(1, 2)]
    assert s["delivered"] == [65535, 0, 1]
    assert s["events"][-1][:3] == ["end", 1, Status.TERMINATED] and s["persistent"] == []


def test_config_messages(run):
    missing, broken, *results = run["configs"]
    assert missing["errors"] == ["config: DIR/no-such-config.json not found: copy "
                                 "config.example.json to the board as config.json, with your "
                                 "settings"]
    assert broken["errors"] == ["config: DIR/bad-config.json is not valid JSON (check quotes, "
                                "commas and braces)"]
    # "auto": an ASK-only actuator receives no SELECT result, so 64 bytes, not 40000 / 8
    assert results[0] == {"ok": True, "max_size": 64}
    for (cfg, want), got in zip(BAD, results[1:]):
        assert not got["ok"]
        assert got["errors"] == want


def test_sensor_agent_cold_boot_deep_sleep_and_wake(run):
    s = run["sensor"]
    cold = [decode_kp_message(bytes.fromhex(h)) for h in s["cold"]]
    assert [m.tx for m in cold] == [Tx.RESET, Tx.DELETE, Tx.DELETE, Tx.UPDATE_DATA]
    assert all(m.options.credentials.kp_id == bytes.fromhex("0f1e2d3c4b5a69788796a5b4c3d2e1f0")
               for m in cold)
    assert cold[1].delete == cold[1].where == ((IRI(EX + "sensor42"), IRI(EX + "temperature"),
                                                Var(0)),)
    update = cold[3]
    assert update.delete == ()
    assert update.insert == (
        (IRI(EX + "sensor42"), IRI(EX + "temperature"), Literal("21.5", XSD_FLOAT)),
        (IRI(EX + "sensor42"), IRI(EX + "light"), Literal("0.1", XSD_FLOAT)))
    assert s["slept"] == 30000
    woken = [decode_kp_message(bytes.fromhex(h)) for h in s["woken"]]
    assert [m.tx for m in woken] == [Tx.UPDATE_DATA]  # no RESET, no DELETEs: state kept
    assert woken[0].delete == ((IRI(EX + "sensor42"), IRI(EX + "temperature"),
                                Literal("21.5", XSD_FLOAT)),
                               (IRI(EX + "sensor42"), IRI(EX + "light"), Literal("0.1", XSD_FLOAT)))
    assert woken[0].insert[0][2] == Literal("22.0", XSD_FLOAT)
    assert woken[0].tid != update.tid


def test_actuator_agent_follows_persistent_ask(run):
    a = run["actuator"]
    sent = [decode_kp_message(bytes.fromhex(h)) for h in a["sent"]]
    assert sent[0].tx == Tx.RESET and sent[1].tx == Tx.ASK_PERSISTENT
    assert sent[1].where == ((IRI(EX + "fan1"), IRI(EX + "on"), Literal("true", XSD_BOOLEAN)),)
    assert sent[2:] == [Ack(sent[1].tid, 1), Ack(sent[1].tid, 2), Ack(sent[1].tid, 1)]
    assert a["pin5"] == [False, True, False, True]  # off at boot, RES true, IND false, IND true


def test_request_into_a_preallocated_buffer(run):
    first, again, fresh = run["reuse"]
    assert first == again == fresh
    assert decode_kp_message(bytes.fromhex(first)).insert == (
        (IRI(EX + "s"), IRI(EX + "p"), IRI(EX + "o")),)


def test_telemetry_mode_publishes_what_the_ingest_accepts(run):
    """The MQTT mode's messages pass the ingest's own checks (spark_ingest.telemetry.parse):
    one per finite reading, none before the clock is set, and a message the broken connection
    did not deliver is sent first on the next one."""
    from datetime import datetime, timezone

    from spark_ingest.telemetry import parse

    t = run["telemetry"]
    assert t["mqtt"] == {"host": "10.0.0.3", "port": 1883, "tls": False, "ca": None,
                         "user": None, "password": "", "client_id": None, "keepalive": 0,
                         "device": None}
    assert t["before_clock"] == []
    sent = t["first"] + t["again"]
    assert [qos for _, _, qos in sent] == [1, 1]
    when = datetime(2026, 11, 25, 16, 0, 5, tzinfo=timezone.utc)
    assert [parse(topic, payload.encode()) for topic, payload, _ in sent] == [
        ("sensor7", "temperature", 21.7, "Cel", when, None),
        ("sensor7", "pressure", 1013.25, "hPa", when, None)]  # light inf, humidity failed
    assert t["left"] == [[topic, payload] for topic, payload, _ in t["again"]]
    assert t["published"] == 2 and t["first"] and sent[0][0] == "ksp/sensor7/telemetry"


def test_a_board_past_65536_requests_numbers_them_on(run):
    """The 65 537th request within a lifetime goes at once under TID 0 with the next epoch
    (wire format 15): nothing refused, and the agent's next reading goes as usual."""
    b = run["tid_budget"]
    assert b["burst"] == [65536, True, 65533, 7]  # TIDs 0..65535 of epoch 7, one each
    assert b["again"] == 0
    again, *_ = [decode_kp_message(bytes.fromhex(h)) for h in b["again sent"]]
    assert again.tid == 0 and again.options.epoch == 8, b["again sent"]
    update, *_ = [decode_kp_message(bytes.fromhex(h)) for h in b["update"]]
    assert update.tx == Tx.UPDATE_DATA and update.tid == 1 and update.options.epoch == 8
    assert b["pending"] == 1
