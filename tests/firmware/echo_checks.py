"""The firmware's ECHO (address validation) inside MicroPython (and on CPython): the
codec encodes the ECHO option and decodes ECHO REQUIRED RESs; the client sends a request again,
once, under a new TID with the echoed value; the actuator agent's subscription comes through it,
and is made again when the retry is refused too; a late copy that started a first TID is
TERMINATEd, the watched first TIDs bounded; sealed, the retry has a new counter. Inputs (messages as hex, the key) come from INPUT_FILE;
what the firmware sent and reported goes to OUTPUT_FILE as JSON, for tests/test_firmware_echo.py
to check against bytes laid out by hand from docs/wire-format.md and the reference codec.

    echo_checks.py FIRMWARE_DIR TESTS_FIRMWARE_DIR INPUT_FILE OUTPUT_FILE
"""
import json
import sys

sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[2])

from kspfw import codec, config  # noqa: E402
from kspfw.actuator_agent import ActuatorAgent  # noqa: E402
from kspfw.client import Client  # noqa: E402
from simboard import SimBoard  # noqa: E402

ASK_PERSISTENT = 0x0E


class FakeLink:
    def __init__(self):
        self.sent = []

    def send(self, msg):
        self.sent.append(bytes(msg).hex())


def log_events(log):
    def handler(kind, tid, r):
        if kind == "retry":
            log.append([kind, tid, r])
        else:
            log.append([kind, tid, None if r is None else r.status,
                        r.result.hex() if r is not None and isinstance(r.result, bytes) else None])

    return handler


def encodings(cases):
    """Each [tx, tid, tcp, echo hex, with credentials] as request bytes, or the ValueError."""
    out = []
    for tx, tid, tcp, echo, creds in cases:
        kw = {"credentials": (bytes(range(16)), "pw")} if creds else {}
        try:
            out.append(bytes(codec.request(tx, tid, tcp=tcp, echo=bytes.fromhex(echo),
                                           **kw)).hex())
        except ValueError:
            out.append("ValueError")
    return out


def decodings(cases):
    """Each [hex, answers, tcp] decoded: [status, ind, value hex or None], or ["reject", status]."""
    out = []
    for hexed, answers, tcp in cases:
        try:
            r = codec.decode(bytes.fromhex(hexed), answers, tcp)
        except codec.KspError as e:
            out.append(["reject", e.status])
            continue
        out.append([r.status, r.ind, r.result.hex() if isinstance(r.result, bytes) else None])
    return out


def exchange(answers, sealer=None, tx=codec.RESET, tcp=False):
    """One request (TID 1) answered by `answers` in turn, each fed once the client sent again."""
    link, log = FakeLink(), []
    client = Client(link, log_events(log), rand=lambda bits: 0, sealer=sealer, tcp=tcp)
    client.epoch = 0  # numbers of epoch 0 (no EPOCH option): the hand-laid bytes' (§15)
    client.send(0, tx)
    for hexed in answers:
        client.feed(bytes.fromhex(hexed), 10)
    return {"sent": link.sent, "events": log, "pending": sorted(client.pending)}


def late(answers):
    """Persistent ASKs with credentials, TIDs from 1 (one per answer list of `answers`, each
    answered ECHO REQUIRED so it is sent again), then the late answers fed in turn: what the
    client watches, and what it sent for a copy that started a first TID."""
    link, log = FakeLink(), []
    client = Client(link, log_events(log), rand=lambda bits: 0)
    client.epoch = 0
    for first in answers["firsts"]:
        client.send(0, ASK_PERSISTENT, graphs=([("http://e/s", "http://e/p", 0)],),
                    credentials=(bytes(range(16)), "pw"))
        client.feed(bytes.fromhex(first), 10)
    watched = [t for t, _ in client.retired]
    for hexed in answers["then"]:
        client.feed(bytes.fromhex(hexed), 20)
    return {"sent": link.sent, "events": log, "watched": watched,
            "retired": [t for t, _ in client.retired], "pending": sorted(client.pending),
            "persistent": sorted(client.persistent)}


def actuator(answers):
    """The actuator's cold boot with TIDs from 1: RESET, then its persistent ASK, answered by
    `answers` ({tid: [hex, ...]}), each fed after the message with that TID was sent."""
    cfg = config.check({"agent": "actuator", "wifi": {"ssid": "x"}, "sib": {"host": "h"},
                        "kp": {"id": "0f1e2d3c4b5a69788796a5b4c3d2e1f0", "password": "pw"},
                        "device": "http://example.org/gh#fan1",
                        "outputs": [{"pin": 5, "ask": [["http://example.org/gh#fan1",
                                                        "http://example.org/gh#on", True]]}]})
    board = SimBoard()
    agent = ActuatorAgent(cfg, board)
    link = agent.client.link = FakeLink()
    agent.client.tid = 0
    agent.client.epoch = 0
    agent.start()
    fed = 0
    while fed < len(link.sent):
        tid = codec.peek_tid(bytes.fromhex(link.sent[fed]))
        fed += 1
        for hexed in answers.pop(str(tid), ()):  # once: the ACK of an IND has its TID too
            agent.client.feed(bytes.fromhex(hexed), 10)
    return {"sent": link.sent, "pin5": board.outputs[5], "calls": sorted(agent.calls),
            "persistent": sorted(agent.client.persistent)}


def main():
    with open(sys.argv[3]) as f:
        cases = json.load(f)
    out = {"encode": encodings(cases["encode"]), "decode": decodings(cases["decode"]),
           "oneshot": exchange(cases["oneshot"]), "twice": exchange(cases["twice"]),
           "tcp": exchange(cases["tcp"], tcp=True),
           "terminate": exchange(cases["terminate"], tx=codec.TERMINATE),
           "actuator": actuator(cases["actuator"]),
           "refused": actuator(cases["refused"]),
           "late": late(cases["late"]), "bound": late(cases["bound"])}
    from kspfw.secure import Sealer

    sealer = Sealer(bytes.fromhex(cases["key"]), bytes.fromhex(cases["kp_id"]))
    out["sealed"] = exchange(cases["sealed"], sealer)
    out["sealed"]["ctr"] = sealer.ctr
    with open(sys.argv[4], "w") as f:
        json.dump(out, f)


main()
