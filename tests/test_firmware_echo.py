"""The firmware validates its address transparently (device_firmware/kspfw), inside
real MicroPython (WebAssembly build under Node) and on CPython (tests/firmware/echo_checks.py).

The ECHO option (0x0a: u8 length 1-10 | value, after every other option) and the ECHO REQUIRED
RES (status 0x0f, Data field u8 length 1-10 | value) are checked against bytes laid out here by
hand from docs/wire-format.md; the client sends a request answered ECHO REQUIRED again once,
under a new TID (TERMINATE: its target's) with the value as ECHO, and a second ECHO REQUIRED is
the request's outcome; the actuator agent's subscription goes through the retry and follows
the INDs of the new TID, and the agents subscribe again when the retry is refused too; a late
copy of the first request that started it at the SIB (a SIB that executes such copies) is
TERMINATEd, while a real `ksp-sib` answers that copy ECHO REQUIRED again and starts nothing;
sealed, the retry carries the next counter.
"""
from __future__ import annotations

import json
import struct

import pytest

from firmware import harness
from ksp import Tx, decode_kp_message
from ksp.secure import derive_keys, open_sealed, seal

# slow: the firmware under MicroPython (WebAssembly, in Node)
pytestmark = pytest.mark.slow

RESET, TERMINATE, SELECT, ASK_PERSISTENT = 0x11, 0x10, 0x07, 0x0E
V, W = b"echo", bytes(range(10))  # W: the longest echo value (7.7)
KEY, KP_ID = bytes(range(32)), bytes.fromhex("00112233445566778899aabbccddeeff")
KEYS = derive_keys(KEY)
CREDS = bytes(range(16)) + b"\x02pw"


def req(tid: int, tx: int = RESET, opts: bytes = b"", count: int = 0) -> bytes:
    """A UDP CON REQ without a Data field (RESET, TERMINATE): header | OC | options."""
    return struct.pack("<BBHB", 1, 0x80 | tx, tid, count) + opts


def echo(value: bytes) -> bytes:
    return bytes((0x0A, len(value))) + value


def res(tid: int, status: int = 0, data: bytes = b"") -> bytes:
    return struct.pack("<BBH", 1, status, tid) + data


def ind(tid: int, seq: int, data: bytes = b"") -> bytes:
    return struct.pack("<BBHH", 1, 0x80, tid, seq) + data


def tcp(msg: bytes) -> bytes:
    return msg[:4] + struct.pack("<I", len(msg) + 4) + msg[4:]


def required(tid: int, value: bytes) -> bytes:
    return res(tid, 0x0F, bytes((len(value),)) + value)


#: [tx, tid, tcp, echo, with credentials] -> the bytes expected, or "ValueError".
ENCODE = [
    ([RESET, 0x1234, False, V.hex(), False], req(0x1234, opts=echo(V), count=1)),
    ([RESET, 0x1234, False, V.hex(), True], req(0x1234, opts=b"\x09" + CREDS + echo(V), count=2)),
    ([RESET, 5, True, "ff", False], tcp(req(5, opts=echo(b"\xff"), count=1))),
    ([RESET, 7, False, W.hex(), False], req(7, opts=echo(W), count=1)),
    ([RESET, 7, False, (W + b"!").hex(), False], "ValueError"),
    ([RESET, 7, False, "", False], req(7)),  # no value: no option
]
#: [hex, answers, tcp] -> [status, indication, value] or ["reject", status].
DECODE = [
    ([required(0x1234, V).hex(), RESET, False], [0x0F, 0, V.hex()]),
    ([required(0x1234, V).hex(), SELECT, False], [0x0F, 0, V.hex()]),  # no SELECT result
    ([required(9, W).hex(), ASK_PERSISTENT, False], [0x0F, 0, W.hex()]),
    ([tcp(required(9, V)).hex(), SELECT, True], [0x0F, 0, V.hex()]),
    ([res(9, 0x0F, b"\x00").hex(), RESET, False], ["reject", 4]),  # length 0
    ([res(9, 0x0F, bytes((11,)) + W + b"!").hex(), RESET, False], ["reject", 4]),  # over 10
    ([res(9, 0x0F, b"\x02\xaa").hex(), RESET, False], ["reject", 4]),  # truncated
    ([res(9, 0x0F, b"\x01\xaa\xbb").hex(), RESET, False], ["reject", 4]),  # trailing byte
    ([res(9, 0x0F).hex(), RESET, False], ["reject", 4]),  # no Data field
    # ECHO REQUIRED and NUMBER BEHIND are a RES's statuses, never an IND's (3.2)
    ([struct.pack("<BBHH", 1, 0x8F, 9, 1).hex(), ASK_PERSISTENT, False], ["reject", 4]),
    ([struct.pack("<BBHH", 1, 0x90, 9, 1).hex(), ASK_PERSISTENT, False], ["reject", 4]),
]


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    path = tmp_path_factory.mktemp("fw-echo") / "cases.json"
    sib = derive_keys(KEY).sib_to_kp
    path.write_text(json.dumps({
        "encode": [c for c, _ in ENCODE], "decode": [c for c, _ in DECODE],
        "oneshot": [required(1, V).hex(), res(2).hex()],
        "twice": [required(1, V).hex(), required(2, W).hex()],
        "tcp": [tcp(required(1, V)).hex(), tcp(res(2)).hex()],
        "terminate": [required(1, V).hex(), res(1).hex()],
        "actuator": {"1": [res(1).hex()], "2": [required(2, V).hex()],
                     "3": [res(3, 0, b"\x01").hex(),  # RES: true, then IND 1: false
                           struct.pack("<BBHHB", 1, 0x80, 3, 1, 0).hex()]},
        # the retry answered ECHO REQUIRED too (its echo value from before a SIB restart)
        "refused": {"1": [res(1).hex()], "2": [required(2, V).hex()],
                    "3": [required(3, W).hex()], "4": [required(4, V).hex()],
                    "5": [res(5, 0, b"\x01").hex()]},
        "late": {"firsts": [required(1, V).hex()],
                 "then": [res(2, 0, b"\x01").hex(), res(1, 0, b"\x01").hex(),  # 1 started late
                          ind(1, 1, b"\x00").hex(), res(1).hex()]},  # its IND; TERMINATE's RES
        "bound": {"firsts": [required(1, V).hex(), required(3, V).hex(), required(5, V).hex()],
                  "then": [res(1, 0, b"\x01").hex()]},
        "sealed": [seal(sib, KP_ID, 500, required(1, V)).hex(),
                   seal(sib, KP_ID, 501, res(2)).hex()],
        "key": KEY.hex(), "kp_id": KP_ID.hex()}))
    return path


@pytest.fixture(scope="module", params=["micropython", "cpython"])
def run(request, cases, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"fw-echo-{request.param}") / "out.json"
    if request.param == "micropython":
        proc = harness.run_mpy(harness.HERE / "echo_checks.py", "/fw", "/t", "/in/cases.json",
                               "/in/out.json", copies={"/t": harness.HERE, "/in": cases.parent},
                               fetch={"/in/out.json": out})
    else:
        proc = harness.run_cpython(harness.HERE / "echo_checks.py", str(harness.FIRMWARE),
                                   str(harness.HERE), str(cases), str(out))
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text())


def test_echo_option_encodes_last_with_its_length(run):
    assert run["encode"] == [w if w == "ValueError" else w.hex() for _, w in ENCODE]


def test_echo_required_res_decodes_to_its_value(run):
    assert run["decode"] == [w for _, w in DECODE]


def test_one_shot_request_is_sent_again_with_the_echo_under_a_new_tid(run):
    r = run["oneshot"]
    assert r["sent"] == [req(1).hex(), req(2, opts=echo(V), count=1).hex()]
    assert r["events"] == [["retry", 1, 2], ["res", 2, 0, None]] and r["pending"] == []


def test_a_second_echo_required_is_the_outcome(run):
    r = run["twice"]
    assert r["sent"] == [req(1).hex(), req(2, opts=echo(V), count=1).hex()]  # not a third
    assert r["events"] == [["retry", 1, 2], ["res", 2, 0x0F, W.hex()]] and r["pending"] == []


def test_over_tcp_the_retry_is_framed(run):
    r = run["tcp"]
    assert r["sent"] == [tcp(req(1)).hex(), tcp(req(2, opts=echo(V), count=1)).hex()]
    assert r["events"] == [["retry", 1, 2], ["res", 2, 0, None]]


def test_terminate_is_sent_again_under_its_targets_tid(run):
    r = run["terminate"]
    assert r["sent"] == [req(1, TERMINATE).hex(), req(1, TERMINATE, echo(V), 1).hex()]
    assert r["events"] == [["retry", 1, 1], ["res", 1, 0, None]]


def test_actuator_subscription_goes_through_the_retry(run):
    r = run["actuator"]
    sent = [bytes.fromhex(h) for h in r["sent"]]
    assert [struct.unpack_from("<H", m, 2)[0] for m in sent] == [1, 2, 3, 3]
    first, retry = sent[1], sent[2]
    assert first[1] == retry[1] == 0x80 | ASK_PERSISTENT
    # the same request but for its TID, one more option in the OC byte, and ECHO at the end
    assert retry.endswith(echo(V)) and len(retry) == len(first) + len(echo(V))
    diff = [i for i, (a, b) in enumerate(zip(first[4:], retry[4:])) if a != b]
    assert len(diff) == 1 and retry[4 + diff[0]] == first[4 + diff[0]] + 1
    assert sent[3] == struct.pack("<BBHH", 1, 0, 3, 1)  # the IND of TID 3 ACKed
    assert r["pin5"] == [False, True, False]  # off at boot, the RES, the IND
    assert r["persistent"] == [3] and r["calls"] == [3]


def test_sealed_retry_has_the_next_counter(run):
    r = run["sealed"]
    opened = [open_sealed(KEYS.kp_to_sib, bytes.fromhex(h)) for h in r["sent"]]
    assert [(o.kp_id, o.counter) for o in opened] == [(KP_ID, 0), (KP_ID, 1)]
    assert [o.inner for o in opened] == [req(1), req(2, opts=echo(V), count=1)]
    assert r["events"] == [["retry", 1, 2], ["res", 2, 0, None]] and r["ctr"] == 2



def test_retry_refused_too_subscribes_again(run):
    """A subscription whose retry is answered ECHO REQUIRED again (its echo value no longer
    valid: the SIB restarted in between) is made again, as a lost one is, with its own retry."""
    r = run["refused"]
    sent = [bytes.fromhex(h) for h in r["sent"]]
    assert [struct.unpack_from("<H", m, 2)[0] for m in sent] == [1, 2, 3, 4, 5]
    assert [m[1] for m in sent[1:]] == [0x80 | ASK_PERSISTENT] * 4
    assert sent[2].endswith(echo(V)) and sent[4].endswith(echo(V))  # each retry, once
    assert sent[3] == sent[1][:2] + sent[3][2:4] + sent[1][4:]  # the same request again
    assert r["pin5"] == [False, False, True]  # off at boot, off (refused), the new RES
    assert r["persistent"] == [5] and r["calls"] == [5]


def test_a_late_copy_that_started_the_first_tid_is_terminated(run):
    """A copy of the first request that reaches the SIB after the retry validated the address
    starts a subscription under the first TID: its RES OK is answered with its TERMINATE (with
    the request's credentials), once; its INDs are not ACKed."""
    r = run["late"]
    assert r["watched"] == [1]
    sent = [decode_kp_message(bytes.fromhex(h)) for h in r["sent"]]  # the reference codec
    assert [(m.tx, m.tid, m.options.echo) for m in sent] == [
        (Tx.ASK_PERSISTENT, 1, None), (Tx.ASK_PERSISTENT, 2, V), (Tx.TERMINATE, 1, None)]
    assert sent[2].options.credentials == sent[0].options.credentials
    assert sent[2].options.credentials.password == "pw"
    assert r["events"] == [["retry", 1, 2], ["res", 2, 0, None], ["res", 1, 0, None]]
    assert r["retired"] == [] and r["pending"] == [] and r["persistent"] == [2]


def test_watched_first_tids_are_bounded(run):
    """At most the last two first TIDs are watched: an older one's late RES is dropped."""
    r = run["bound"]
    assert r["watched"] == r["retired"] == [3, 5]
    assert len(r["sent"]) == 6 and r["persistent"] == [2, 4, 6]  # no TERMINATE


def test_sensor_subscribes_again_when_its_retry_is_refused_too():
    """The sensor agent's period subscription (CPython, simulated board, answers encoded by the
    reference codec): ECHO REQUIRED, the retry with the echo, ECHO REQUIRED again: a new
    subscription (no echo, a new TID), which goes through its own retry; the agent keeps the
    TID that runs."""
    harness.import_path()
    from kspfw import config
    from kspfw.sensor_agent import SensorAgent
    from simboard import SimBoard

    from ksp import Response, SelectResult, Status, encode

    gh = "http://example.org/gh#"
    board = SimBoard({gh + "temperature": 21.5})
    agent = SensorAgent(config.check({
        "agent": "sensor", "wifi": {"ssid": "x"}, "sib": {"host": "h"},
        "kp": {"id": "0f1e2d3c4b5a69788796a5b4c3d2e1f0", "password": "pw"},
        "device": gh + "t1", "period_property": gh + "period",
        "sensors": [{"type": "chip_temp", "property": gh + "temperature"}]}), board)
    sent = []
    agent.client.link = type("Link", (), {"send": lambda _, m: sent.append(
        decode_kp_message(bytes(m)))})()

    def answer(status=Status.OK, result=None):
        """Answer the last SELECT_PERSISTENT sent."""
        m = next(m for m in reversed(sent) if getattr(m, "tx", None) == Tx.SELECT_PERSISTENT)
        agent.client.feed(encode(Response(m.tid, status, result, epoch=m.options.epoch)),
                          board.now)  # naming its epoch, as a SIB does (wire format 15.6)
        return m

    agent.start()
    agent.client.feed(encode(Response(sent[0].tid, epoch=sent[0].options.epoch)), board.now)
    first = answer(Status.ECHO_REQUIRED, V)
    retry = answer(Status.ECHO_REQUIRED, W)
    again = answer(Status.ECHO_REQUIRED, V)
    last = answer(Status.OK, SelectResult(1, (), 0, ()))
    assert (first.options.echo, retry.options.echo, again.options.echo, last.options.echo) == (
        None, V, None, V)
    assert len({first.tid, retry.tid, again.tid, last.tid}) == 4
    assert list(agent.client.persistent) == [last.tid] and last.tid in agent.calls
    assert first.tid not in agent.calls and retry.tid not in agent.calls


def test_a_late_copy_at_a_real_sib_starts_nothing_and_the_subscription_goes_on():
    """Against a real `ksp-sib` (UDP on loopback): the actuator subscribes (ECHO REQUIRED, then
    the retry); a copy of its first request then comes from its socket, as one the network
    delayed would: the SIB answers it ECHO REQUIRED again (its first TID is finished, wire
    format 7.7) and starts nothing, so the board has nothing to TERMINATE, and its subscription
    under the retry's TID goes on."""
    from firmware.lab import GH, AgentThread, Checker, clock, fast, wait_until

    harness.import_path()
    from kspfw import config
    from kspfw.actuator_agent import ActuatorAgent
    from simboard import SimBoard

    from sib.testing import SibProcess

    with SibProcess("--memory", "--udp-port", "0", "--tcp-port", "-1", "--coap-port", "-1") as sib:
        checker = Checker(sib.ports["udp"])
        checker.update("INSERT DATA { gh:fan1 gh:on false }")
        board = SimBoard(clock=clock)
        agent = fast(ActuatorAgent(config.check({
            "agent": "actuator", "wifi": {"ssid": "lab"},
            "sib": {"host": "127.0.0.1", "port": sib.ports["udp"]},
            "kp": {"id": "0f1e2d3c4b5a69788796a5b4c3d2e1f0", "password": "pw"},
            "device": GH + "fan1",
            "outputs": [{"pin": 5, "ask": [[GH + "fan1", GH + "on", True]]}]}), board))
        thread = AgentThread(agent)
        thread.start()
        try:
            wait_until("subscribed through the retry",
                       lambda: board.outputs[5][-1:] == [False] and len(board.outputs[5]) == 2,
                       [thread])
            link = thread.links[-1]
            msgs = [decode_kp_message(m) for m in link.sent]
            first = next(i for i, m in enumerate(msgs) if getattr(m, "tx", None)
                         == Tx.ASK_PERSISTENT and m.options.echo is None)
            old, (sub,) = msgs[first].tid, agent.client.persistent
            assert agent.client.retired[0][0] == old != sub
            def asked() -> int:  # RES 0x0f to `old`, naming its epoch or not (15.6)
                return sum(len(m) >= 4 and not m[1] & 0x80 and m[1] & 0x3F == 0x0F
                           and struct.unpack_from("<H", m, 2)[0] == old
                           for m in list(link.received))

            before = asked()
            link.sock.sendto(link.sent[first], link.addr)

            def asked_again() -> bool:
                return asked() > before

            wait_until("the late copy answered ECHO REQUIRED again", asked_again, [thread])
            sent = [decode_kp_message(m) for m in link.sent]
            assert not [m for m in sent if getattr(m, "tx", None) == Tx.TERMINATE]
            checker.update("DELETE { gh:fan1 gh:on false } INSERT { gh:fan1 gh:on true } "
                           "WHERE { gh:fan1 gh:on false }")
            wait_until("the fan on", lambda: board.outputs[5][-1:] == [True], [thread])
            assert list(agent.client.persistent) == [sub]
            assert [r[0] for r in agent.client.retired] == [old]  # watched, never started
            thread.stop()
        finally:
            if thread.is_alive():
                thread.halt.set()
                thread.join(30)
