"""One board role's live heap, measured inside MicroPython's WebAssembly build by
tools/bench/firmware.py. MicroPython-compatible on purpose: no typing, no dataclasses.

    node run_mpy.mjs --step step ... firmware_roles.py BUNDLE_DIR SIMBOARD_DIR CONFIG INPUTS

BUNDLE_DIR holds what `ksp flash --config CONFIG` builds for the role, and nothing else on
sys.path is firmware, so a module the role needs but the build left out fails the import.
The role's modules are imported as main.py imports them (kspfw.config unloaded once the
settings are checked; not board.py nor the sensor drivers,
which need the board's `machine`: tests/firmware/simboard.py stands in for them), then the
agent runs as on a board: a KSP agent sends its cold-boot RESET and DELETEs, a reading and its
subscriptions, each answered (RES OK, an ASK's true, a SELECT's row from INPUTS) and followed
by one IND; the MQTT mode reads its sensors and publishes, its umqtt client made. The receive
buffer is what net.Link allocates (MAX RESPONSE SIZE).

This build's gc.collect() only asks for a collection, which runs once control is back in
JavaScript; so each `step()` is called from there (run_mpy.mjs --step) and reads
gc.mem_alloc() first: the live heap after the previous step, garbage collected. Prints one
JSON object: heap after import and while running (bytes over the heap before the import).
"""
import gc
import json
import struct
import sys

sys.path.insert(0, sys.argv[1] + "/lib")  # a board's /lib
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[2])
sys.path.append(sys.argv[4].rsplit("/", 1)[0])  # a stand-in for the board's built-in socket

from simboard import SimBoard  # noqa: E402

with open(sys.argv[3]) as f:
    RAW = json.load(f)
with open(sys.argv[4]) as f:
    INPUTS = json.load(f)
M = {}
HEAP = []


class Link:
    def __init__(self):
        self.sent = []

    def send(self, msg):
        self.sent.append(bytes(msg))


class Broker:
    """umqtt.simple's client as the telemetry agent calls it, the broker acknowledging."""

    def __init__(self):
        self.sock = self

    def settimeout(self, t):
        pass

    def publish(self, topic, msg, qos=0):
        pass


def load():
    from kspfw import config

    M["cfg"] = config.check(RAW, 64 * 1024)
    config.unload()  # as main.py does once the settings are checked
    if "mqtt" in RAW:
        from kspfw.telemetry_agent import TelemetryAgent, run  # noqa: F401

        M["kind"] = TelemetryAgent
        return
    if RAW["agent"] == "sensor":
        from kspfw.sensor_agent import SensorAgent as kind
    else:
        from kspfw.actuator_agent import ActuatorAgent as kind
    from kspfw.agent import run  # noqa: F401, F811

    M["kind"] = kind


def answer(agent, link):
    """Answer every request sent so far, then one IND per subscription."""
    c = agent.client
    done = 0
    while done < len(link.sent):
        msg = link.sent[done]
        done += 1
        if msg[1] & 0x7F == 0:
            continue  # an ACK
        tid, tx = msg[2] | msg[3] << 8, msg[1] & 0x7F
        body = b""
        if tx == 0x0E:
            body = b"\x01"
        elif tx == 0x0D:
            body = bytes.fromhex(INPUTS["select_body"])
        c.feed(struct.pack("<BBH", 1, 0, tid) + body, 0)
    for tid, p in list(c.persistent.items()):
        body = b"\x01" if p[0] == 0x0E else bytes.fromhex(INPUTS["select_body"])
        c.feed(struct.pack("<BBHH", 1, 0x80, tid, 1) + body, 0)


def run():
    cfg = M["cfg"]
    board = SimBoard({s["property"]: 21.5 for s in cfg.get("sensors") or []})
    agent = M["agent"] = M["kind"](cfg, board)
    if cfg["mqtt"]:
        from umqtt.simple import MQTTClient

        m = cfg["mqtt"]
        M["mqtt"] = MQTTClient(m["client_id"] or agent.device, m["host"], m["port"])
        board.utc_time = (2026, 11, 28, 4, 0, 0, 5, 332)
        agent.publish(Broker(), agent.readings())
        return
    M["buf"] = bytearray(cfg["max_size"])  # net.Link's receive buffer
    link = agent.client.link = Link()
    agent.start()
    answer(agent, link)
    if cfg["agent"] == "sensor":
        agent.tick(0)  # the first readings
        answer(agent, link)
    del link.sent[:]


STEPS = [None, load, run]


def step():
    HEAP.append(gc.mem_alloc())
    if len(HEAP) > len(STEPS):
        print(json.dumps({"heap_after_import": HEAP[2] - HEAP[1],
                          "heap_running": HEAP[3] - HEAP[1],
                          "max_size": M["cfg"]["max_size"]}))
        return False
    fn = STEPS[len(HEAP) - 1]
    if fn is not None:
        fn()
    gc.collect()
    return True
