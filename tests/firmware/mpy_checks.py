"""Client, configuration and agent behaviour of the firmware, run inside MicroPython (and on
CPython): a fake link records what the firmware sends, the clock is virtual, the board is
tests/firmware/simboard.py. Inputs (INDs encoded by the reference codec, configurations) come
from INPUT_FILE; everything observed goes to OUTPUT_FILE as JSON, for
tests/test_firmware_mpy.py to check with the reference codec.

    mpy_checks.py FIRMWARE_DIR TESTS_FIRMWARE_DIR INPUT_FILE OUTPUT_FILE
"""
import json
import struct
import sys

sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[2])

from kspfw import codec, config  # noqa: E402
from kspfw.actuator_agent import ActuatorAgent  # noqa: E402
from kspfw.client import Client  # noqa: E402
from kspfw.sensor_agent import SensorAgent  # noqa: E402
from simboard import DeepSleep, SimBoard  # noqa: E402


class FakeLink:
    def __init__(self):
        self.sent = []

    def send(self, msg):
        self.sent.append(bytes(msg).hex())


def events():
    log = []
    return log, lambda kind, tid, r: log.append([kind, tid, None if r is None else r.status,
                                                 None if r is None else r.seq])


def retransmission():
    link = FakeLink()
    log, handler = events()
    client = Client(link, handler, rand=lambda bits: 0)
    client.send(0, codec.RESET)
    times, gave_up = [], None
    for now in range(0, 100000, 250):
        before = len(link.sent)
        client.poll(now)
        if now == 0 or len(link.sent) > before:
            times.append(now)
        if log and gave_up is None:
            gave_up = now
    return {"times": times, "gave_up": gave_up, "events": log,
            "same_bytes": len(set(link.sent)) == 1}


def subscription(inds):
    link = FakeLink()
    log, handler = events()
    client = Client(link, handler, rand=lambda bits: 0)
    tid = client.send(0, 0x0D, vc=1, graphs=([("http://example.org/gh#fan",
                                               "http://example.org/gh#on", 0)],))
    values = []
    for hexed in inds:
        before = len(log)
        client.feed(bytes.fromhex(hexed), 0)
        if len(log) > before and log[-1][0] == "ind":
            values.append(log[-1][3])
    return {"tid": tid, "sent": link.sent, "delivered": values, "events": log,
            "persistent": sorted(client.persistent)}


def configs(items, scratch):
    out = []
    bad = scratch + "/bad-config.json"
    with open(bad, "w") as f:
        f.write('{"agent": "sensor"')  # unterminated (MicroPython's json allows a trailing comma)
    for path in (scratch + "/no-such-config.json", bad):
        try:
            config.load(path)
        except config.ConfigError as e:
            out.append({"ok": False, "errors": [m.replace(scratch, "DIR") for m in e.args[0]]})
    for cfg in items:
        try:
            checked = config.check(cfg, 40000)
            out.append({"ok": True, "max_size": checked["max_size"]})
        except config.ConfigError as e:
            out.append({"ok": False, "errors": e.args[0]})
    return out


CFG = {"agent": "sensor", "wifi": {"ssid": "greenhouse"}, "sib": {"host": "10.0.0.2"},
       "kp": {"id": "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "password": "pw"},
       "device": "http://example.org/gh#sensor42", "prefixes": ["http://example.org/gh#"],
       "period_s": 30, "deep_sleep": True,
       "sensors": [{"type": "chip_temp", "property": "http://example.org/gh#temperature"},
                   {"type": "light", "pin": 34, "property": "http://example.org/gh#light"}]}


def ok_res(tid, body=b"", epoch=0):
    """RES OK to request `tid`, naming its `epoch` as a SIB does (wire format 15.6)."""
    if epoch:
        return struct.pack("<BBHI", 1, 0x40, tid, epoch) + body
    return struct.pack("<BBH", 1, 0, tid) + body


def sensor():
    cfg = config.check(CFG, 80000)
    board = SimBoard({"http://example.org/gh#temperature": 21.5,
                      "http://example.org/gh#light": 0.1})
    link = FakeLink()
    agent = SensorAgent(cfg, board)
    agent.client.link = link
    agent.start()  # cold boot: RESET
    epoch = agent.client.epoch
    agent.client.feed(ok_res(codec.peek_tid(bytes.fromhex(link.sent[0])), b"", epoch))
    for hexed in link.sent[1:]:  # the DELETEs of old values
        agent.client.feed(ok_res(codec.peek_tid(bytes.fromhex(hexed)), b"", epoch))
    n = len(link.sent)
    agent.tick(0)  # the first readings
    update = link.sent[n]
    slept = None
    try:
        agent.client.feed(ok_res(codec.peek_tid(bytes.fromhex(update)), b"", epoch))
    except DeepSleep as e:
        slept = e.args[0]
    cold = list(link.sent)
    # wake-up: a new agent on the same board (its state survived), a new reading
    board.values["http://example.org/gh#temperature"] = 22.0
    link2 = FakeLink()
    woken = SensorAgent(cfg, board)
    woken.client.link = link2
    woken.start()
    woken.tick(0)
    return {"cold": cold, "slept": slept, "state": board.state, "woken": link2.sent}


def actuator():
    cfg = config.check({"agent": "actuator", "wifi": {"ssid": "x"}, "sib": {"host": "h"},
                        "kp": {"id": "0f1e2d3c4b5a69788796a5b4c3d2e1f0"},
                        "device": "http://example.org/gh#fan1",
                        "outputs": [{"pin": 5, "ask": [["http://example.org/gh#fan1",
                                                        "http://example.org/gh#on", True]]}]})
    board = SimBoard()
    link = FakeLink()
    agent = ActuatorAgent(cfg, board)
    agent.client.link = link
    agent.start()
    epoch = agent.client.epoch
    agent.client.feed(ok_res(codec.peek_tid(bytes.fromhex(link.sent[0])), b"", epoch))
    sub = codec.peek_tid(bytes.fromhex(link.sent[1]))
    agent.client.feed(ok_res(sub, b"\x01", epoch))  # RES: true
    for seq, value in ((1, 0), (2, 1), (1, 0)):  # IND false, IND true, stale IND false
        agent.client.feed(struct.pack("<BBHHB", 1, 0x80, sub, seq, value))
    return {"sent": link.sent, "pin5": board.outputs[5]}


class RecordingMQTT:
    """What the telemetry agent asks of umqtt.simple's client; the publish numbered `fail`
    breaks the connection (OSError) before the broker acknowledged it."""

    def __init__(self, fail=None):
        self.sock = self
        self.published, self.calls, self.fail = [], 0, fail

    def settimeout(self, t):
        pass

    def publish(self, topic, msg, qos=0):
        self.calls += 1
        if self.calls == self.fail:
            raise OSError(104, "ECONNRESET")
        self.published.append([topic, bytes(msg).decode(), qos])


def telemetry():
    """The MQTT mode: no message while the clock is not set; one per finite reading; what a
    broken connection did not deliver stays to be sent first."""
    from kspfw.telemetry_agent import TelemetryAgent

    gh = "http://example.org/gh#"
    cfg = config.check({"agent": "sensor", "wifi": {"ssid": "x"}, "mqtt": {"host": "10.0.0.3"},
                        "device": gh + "sensor7", "sensors": [
                            {"type": "dht22", "pin": 4, "property": gh + "temperature"},
                            {"type": "light", "pin": 34, "property": gh + "light"},
                            {"type": "bme280", "sda": 21, "scl": 22, "quantity": "pressure",
                             "property": gh + "pressure"},
                            {"type": "dht22", "pin": 4, "quantity": "humidity", "unit": "%RH",
                             "property": gh + "humidity"}]})
    board = SimBoard({gh + "temperature": 21.7, gh + "light": float("inf"),
                      gh + "pressure": 1013.25, gh + "humidity": OSError(110, "ETIMEDOUT")})
    agent = TelemetryAgent(cfg, board)
    before_clock = agent.readings()
    board.utc_time = (2026, 11, 25, 16, 0, 5, 2, 329)
    msgs = agent.readings()
    broken = RecordingMQTT(fail=2)
    try:
        agent.publish(broken, msgs)
    except OSError:
        pass
    left = [[t, bytes(p).decode()] for t, p in msgs]
    again = RecordingMQTT()
    agent.publish(again, msgs)
    return {"mqtt": cfg["mqtt"], "before_clock": before_clock, "first": broken.published,
            "left": left, "again": again.published, "published": agent.published}


def reuse():
    """codec.request into a caller's preallocated bytearray gives the same bytes."""
    g = ([("http://example.org/gh#s", "http://example.org/gh#p", "http://example.org/gh#o")],)
    buf = bytearray(256)
    first = bytes(codec.request(2, 1, graphs=g, out=buf))
    again = bytes(codec.request(2, 1, graphs=g, out=buf))
    return [first.hex(), again.hex(), bytes(codec.request(2, 1, graphs=g)).hex()]


class CountingLink:
    def __init__(self):
        self.n = 0

    def send(self, msg):
        self.n += 1


def tid_budget():
    """A sensor board over UDP sends 65 536 requests within a lifetime (the clock crossing the
    ticks' wrap): each has a number of its own (wire format 15), so the 65 537th goes at once
    under TID 0 again, with the next epoch in its EPOCH option, and the agent's next reading
    goes as usual."""
    cfg = config.check(dict(CFG, deep_sleep=False), 80000)
    board = SimBoard({"http://example.org/gh#temperature": 21.5,
                      "http://example.org/gh#light": 0.1})
    start = board.now = 0x40000000 - 30000
    agent = SensorAgent(cfg, board)
    c = agent.client
    c.restore([[0xFFFF, 6], []])  # the next number: TID 0 of epoch 7
    link = c.link = FakeLink()
    agent.start()  # RESET (TID 0), the DELETEs (1, 2)
    for hexed in link.sent:
        c.feed(ok_res(codec.peek_tid(bytes.fromhex(hexed)), b"", 7), start)
    tids = [codec.peek_tid(bytes.fromhex(h)) for h in link.sent]
    count = c.link = CountingLink()
    triple = [("http://example.org/gh#s", "http://example.org/gh#p", "http://example.org/gh#o")]
    out = {}

    def at(offset):
        board.now = (start + offset) & 0x3FFFFFFF
        c.poll(board.now)
        return board.now

    def send(offset):
        now = at(offset)
        tid = c.send(now, 0x02, graphs=(triple,))  # INSERT DATA
        c.feed(ok_res(tid, b"", c.epoch), now)
        return tid

    for i in range(3, 65536):  # one a millisecond
        tids.append(send(i))
    out["burst"] = [len(tids), tids == list(range(65536)), count.n, c.epoch]
    link = c.link = FakeLink()
    out["again"] = send(65536)  # TID 0 again, at once: epoch 8
    out["again sent"] = link.sent
    agent.tick(at(65537))  # the agent's next reading goes as usual
    out["update"] = link.sent[1:]
    out["pending"] = len(c.pending)
    return out


def main():
    with open(sys.argv[3]) as f:
        cases = json.load(f)
    out = {"retransmission": retransmission(), "subscription": subscription(cases["inds"]),
           "configs": configs(cases["configs"], sys.argv[4].rsplit("/", 1)[0]), "sensor": sensor(), "actuator": actuator(),
           "reuse": reuse(), "telemetry": telemetry(), "tid_budget": tid_budget()}
    with open(sys.argv[4], "w") as f:
        json.dump(out, f)


main()
