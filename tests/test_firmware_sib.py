"""The device firmware's agents against a real `ksp-sib` over a lossy link.

The sensor and actuator agents of device_firmware/kspfw run on CPython with the simulated
board (tests/firmware/simboard.py) behind the hal seam, on their own loop (`kspfw.agent.run`)
and UDP sockets, through a relay that drops 20 %, duplicates 10 % and delays/reorders 30 % of
the datagrams in each direction (seeded), to a `ksp-sib` subprocess that checks their
CREDENTIALS. Rules in the SIB (persistent DELETE/INSERT WHERE, as in the greenhouse) switch
the fan's state from the temperature; the actuator's GPIO follows it through its persistent
ASK. A checker KP (tests/firmware/lab.py) talks to the SIB directly. Every wait is on a
condition with a generous deadline.
"""
from __future__ import annotations

import queue
import signal
import socket
import subprocess
import sys
import threading

import pytest

from firmware import harness
from firmware.lab import (GH, PASSWORD, AgentThread, Checker, Lab, Links, clock, deadline,
                          fast, wait_until)

harness.import_path()

from kspfw import config  # noqa: E402
from kspfw.actuator_agent import ActuatorAgent  # noqa: E402
from kspfw.agent import run as run_agent  # noqa: E402
from kspfw.hal import flt  # noqa: E402
from kspfw.sensor_agent import SensorAgent  # noqa: E402
from simboard import DeepSleep, SimBoard  # noqa: E402

from ksp import Ack, AskResult, Tx, decode_kp_message, decode_sib_message, encode  # noqa: E402
from sib.testing import SibProcess  # noqa: E402

# slow: the firmware's agents against ksp-sib processes
pytestmark = pytest.mark.slow

KPS = {"sensor": "5e4503aa-0000-4000-8000-000000000001",
       "fan": "5e4503aa-0000-4000-8000-000000000002"}
SENSOR, FAN, TEMP = GH + "thermometer1", GH + "fan1", GH + "temperature"
THRESHOLD = 25.0
FAN_PIN = 5
#: The rules (the greenhouse's Autocontrol KP, figure 13 of the paper), and a recorder: every
#: temperature value that was ever in the store is kept as gh:seen.
def fan_rules(fan: str, state: str, temperature: str) -> list[str]:
    return [f"DELETE {{ <{fan}> <{state}> ?x }} INSERT {{ <{fan}> <{state}> {value} }} WHERE {{ "
            f"?s <{temperature}> ?v . <{fan}> <{state}> ?x . FILTER(?v {cmp} {THRESHOLD}) }}"
            for cmp, value in ((">", "true"), ("<=", "false"))]


RULES = fan_rules(FAN, GH + "on", TEMP)
RECORDER = "INSERT { ?s gh:seen ?v } WHERE { ?s gh:temperature ?v }"
RESTART = "restart the SIB"
#: Temperatures the sensor reads, in order (the fan: on above 25); the SIB restarts once.
STEPS = [20.0, 27.0, 26.0, 24.0, 30.5, RESTART, 19.0, 28.0, 21.0]


def settings(proxy_port: int, kind: str, **extra) -> dict:
    cfg = {"agent": kind, "wifi": {"ssid": "lab"},
           "sib": {"host": "127.0.0.1", "port": proxy_port},
           "kp": {"id": KPS[kind if kind == "sensor" else "fan"], "password": PASSWORD},
           "prefixes": [GH], "max_response_size": 512, **extra}
    return config.check(cfg)


def tids(sent: list[bytes], tx: Tx, echo: bool | None = None) -> set[int]:
    """The TIDs of the `tx` requests in `sent`; `echo`: only those with (True) or without
    (False) the ECHO option."""
    msgs = [decode_kp_message(m) for m in sent]
    return {m.tid for m in msgs if getattr(m, "tx", None) == tx
            and (echo is None or (m.options.echo is not None) is echo)}


def test_sensor_and_actuator_follow_a_rule_over_a_lossy_link_and_a_sib_restart(tmp_path):
    lab = Lab(tmp_path, KPS, seed=5)
    threads: list[AgentThread] = []
    try:
        lab.update("INSERT DATA { gh:fan1 gh:on false }")
        lab.update(*RULES, RECORDER, persistent=True)
        sensor_board = SimBoard({TEMP: STEPS[0]}, clock=clock)
        fan_board = SimBoard(clock=clock)
        sensor = fast(SensorAgent(settings(lab.proxy.port, "sensor", device=SENSOR, sensors=[
            {"type": "chip_temp", "property": TEMP}]), sensor_board))
        sensor.period = 100  # ms (config's period_s is whole seconds)
        fan = fast(ActuatorAgent(settings(lab.proxy.port, "actuator", device=FAN, outputs=[
            {"pin": FAN_PIN, "ask": [[FAN, GH + "on", True]]}]), fan_board))
        threads = [AgentThread(sensor), AgentThread(fan)]
        for t in threads:
            t.start()
        acked = []
        for step in STEPS:
            if step == RESTART:
                lab.restart_sib()
                assert "persistent operations restored" in lab.sib.log()
                continue
            sensor_board.values[TEMP] = step
            lexical = flt(step).value
            wait_until(f"reading {lexical} acknowledged",
                       lambda: sensor.last.get(TEMP) == lexical, threads)
            acked.append(step)
            on = step > THRESHOLD
            assert lab.ask("ASK { gh:fan1 gh:on true }") is on  # the rule ran on the reading
            wait_until(f"fan {'on' if on else 'off'} after {step}",
                       lambda: fan_board.outputs[FAN_PIN][-1:] == [on], threads)

        # A stale IND (an old "on", replayed to the actuator's socket) is ACKed and dropped.
        link = threads[1].links[-1]
        (sub,) = fan.client.persistent
        inds = [decode_sib_message(m, answers=Tx.ASK_PERSISTENT) for m in list(link.received)
                if m[1] & 0x80]
        old_on = min((r for r in inds if r.tid == sub and r.result == AskResult(True)),
                     key=lambda r: r.seq)
        drives = len(fan_board.outputs[FAN_PIN])
        ack = encode(Ack(sub, old_on.seq))
        n_acks = link.sent.count(ack)  # before the replay: the loop may ACK it at once
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(encode(old_on), ("127.0.0.1", link.sock.getsockname()[1]))
        wait_until("the stale IND ACKed", lambda: link.sent.count(ack) > n_acks, threads)
        assert len(fan_board.outputs[FAN_PIN]) == drives and fan_board.outputs[FAN_PIN][-1] is False

        for t in threads:
            t.stop()
        # Every acknowledged reading reached the store (the recorder rule saw it), nothing
        # else did, and the store holds exactly the last one.
        assert sorted(lab.values(SENSOR, GH + "seen")) == sorted(set(acked))
        assert lab.values(SENSOR, TEMP) == [acked[-1]]
        # One RESET and one subscription each: the SIB's restart cost the agents nothing. The
        # subscription went twice, as wire format 14 has it: from an address the SIB had not
        # validated it is answered ECHO REQUIRED, and sent again once with the ECHO.
        assert len(tids(threads[0].links.sent(), Tx.RESET)) == 1
        fan_sent = threads[1].links.sent()
        assert len(tids(fan_sent, Tx.ASK_PERSISTENT, echo=False)) == 1
        assert tids(fan_sent, Tx.ASK_PERSISTENT, echo=True) == {sub}
        history = fan_board.outputs[FAN_PIN]
        assert [on for i, on in enumerate(history) if i == 0 or on != history[i - 1]] == [
            False, True, False, True, False, True, False]
        stats = lab.proxy.stats
        assert stats["dropped"] and stats["duplicated"] and stats["delayed"], stats
    finally:
        for t in threads:
            if t.is_alive():
                t.halt.set()
                t.join(30)
        lab.close()


def boot(cfg: dict, board: SimBoard) -> tuple[SensorAgent, Links]:
    """A sensor's wake period (a new agent on the board, as after a reset), until it deep
    sleeps; its radio is off then."""
    agent, links = fast(SensorAgent(cfg, board)), Links()
    with pytest.raises(DeepSleep):
        run_agent(agent, links, deadline("deep sleep"))
    for link in links:
        link.close()
    return agent, links


def sleepy_settings(lab: Lab) -> dict:
    return settings(lab.proxy.port, "sensor", device=SENSOR, deep_sleep=True,
                    period_property=GH + "period", listen_ms=1500,
                    sensors=[{"type": "chip_temp", "property": TEMP}])


PERIOD_3 = ("DELETE { gh:thermometer1 gh:period ?p } INSERT { gh:thermometer1 gh:period 3 } "
            "WHERE { gh:thermometer1 gh:period ?p }")


def test_sleeping_sensor_keeps_its_subscription_across_sleep_and_a_sib_restart(tmp_path):
    """A deep-sleeping sensor with a period subscription: RESET only on the cold boot; each
    wake-up (a new agent on the same board: state restored through the seam, a new socket)
    keeps the KP ID and the subscription's TID; a period change made in the SIB while it
    sleeps (after a SIB restart) reaches it when it is awake again, by that TID."""
    lab = Lab(tmp_path, KPS, seed=11)
    try:
        lab.update("INSERT DATA { gh:thermometer1 gh:period 1 }")
        board = SimBoard({TEMP: 21.5}, clock=clock)
        cfg = sleepy_settings(lab)

        cold, links = boot(cfg, board)
        assert cold.period == 1000  # from the subscription's RES
        sent = links.sent()
        # One subscription, sent again once with the ECHO the SIB asked for (wire format 14:
        # a persistent request from an address not yet validated): the retry's TID is the one
        # the board keeps.
        assert len(tids(sent, Tx.RESET)) == len(tids(sent, Tx.SELECT_PERSISTENT, echo=False)) == 1
        (sub,) = tids(sent, Tx.SELECT_PERSISTENT, echo=True)
        assert [t for t, _, _ in board.state["client"][1]] == [sub]
        assert lab.values(SENSOR, TEMP) == [21.5]

        lab.restart_sib()  # while the board sleeps
        assert "1 persistent operations restored" in lab.sib.log()
        lab.update(PERIOD_3)
        wakes = []
        values = iter([22.0, 22.5, 23.0, 23.5, 24.0, 24.5, 25.0, 25.5] * 100)

        def period_applied() -> bool:
            board.values[TEMP] = next(values)
            agent, links = boot(cfg, board)
            wakes.append(links.sent())
            return agent.period == 3000 and board.state["period"] == 3000

        wait_until("the period change reached the woken sensor", period_applied)
        for sent in wakes:  # no RESET, no new subscription: only readings and IND ACKs
            msgs = [decode_kp_message(m) for m in sent]
            assert {getattr(m, "tx", "ack") for m in msgs} <= {Tx.UPDATE_DATA, "ack"}
            assert all(m.tid == sub for m in msgs if isinstance(m, Ack))
        assert any(isinstance(decode_kp_message(m), Ack) for m in wakes[-1])
        assert board.state["client"][1][0][0] == sub and board.state["client"][1][0][2] >= 1
        assert lab.values(SENSOR, TEMP) == [board.values[TEMP]]  # the last reading, once
    finally:
        lab.close()


def _sib_or_bridge(via: str):
    """A UDP port that speaks KSP: a `ksp-sib`'s, or a `ksp-bridge`'s in front of one's SEPA
    gate (`bridge.testing.BridgedSib`)."""
    if via == "bridge":
        from bridge.testing import BridgedSib

        lab = BridgedSib()
        return lab, lab.port
    sib = SibProcess("--memory", "--udp-port", "0", "--tcp-port", "-1", "--coap-port", "-1")
    return sib, sib.ports["udp"]


@pytest.mark.parametrize("via", ["sib", "bridge"])
def test_simulate_board_command_runs_both_agents_against_a_sib(tmp_path, via):
    """`ksp simulate-board` (device_firmware/simulate.py) with the two example configs: the
    sensor's readings land in a real `ksp-sib`, a rule switches the fan, the simulated
    actuator follows; it stops by itself after --readings N, and cleanly on SIGTERM. The same,
    unchanged, through `ksp-bridge` in front of the SIB's SEPA gate: the rule is then the
    bridge's (SEPA's aggregator pattern), the actuator's persistent ASK a broker
    subscription."""
    gh = "http://example.org/greenhouse#"
    running, port = _sib_or_bridge(via)
    with running:
        lab_sib = f"127.0.0.1:{port}"
        checker = Checker(port)
        checker.update(f"INSERT DATA {{ <{gh}fan1> <{gh}state> false }}")
        checker.update(*fan_rules(gh + "fan1", gh + "state", gh + "temperature"),
                       persistent=True)
        examples = harness.FIRMWARE
        cmd = [sys.executable, "-m", "tools.cli", "simulate-board", "--sib", lab_sib,
               "--period", "0.2"]

        done = subprocess.run(cmd + [str(examples / "config.example.json"), "--values", "21.5",
                                     "--readings", "2"],
                              cwd=harness.ROOT, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert done.stdout.count("sim sensor42: in the SIB:") >= 2
        assert checker.values(gh + "sensor42", gh + "temperature") == [21.5]
        assert checker.values(gh + "sensor42", gh + "light") == [21.5]

        proc = subprocess.Popen(cmd + [str(examples / "config.example.json"),
                                       str(examples / "config.actuator.example.json"),
                                       "--values", "30.5"],
                                cwd=harness.ROOT, stdout=subprocess.PIPE, text=True)
        lines: queue.Queue = queue.Queue()
        seen: list[str] = []
        threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()

        def printed(text: str) -> bool:
            while not lines.empty():
                seen.append(lines.get())
            return any(text in line for line in seen)

        try:
            wait_until("the simulated fan on", lambda: printed("actuator: output 0 (pin 5) on"))
            assert checker.values(gh + "sensor42", gh + "temperature") == [30.5]
            assert checker.ask(f"ASK {{ <{gh}fan1> <{gh}state> true }}") is True
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(60) == 0
            wait_until("the command's last line", lambda: printed("sim: stopped"))
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_an_ind_unacked_when_the_sib_stops_reaches_the_sleeping_sensor_after_the_restart(
        tmp_path):
    lab = Lab(tmp_path, KPS, seed=13, loss=0.0, duplicate=0.0, reorder=0.0)  # no loss: the bug alone
    try:
        lab.update("INSERT DATA { gh:thermometer1 gh:period 1 }")
        board = SimBoard({TEMP: 21.5}, clock=clock)
        cfg = sleepy_settings(lab)
        cold, _ = boot(cfg, board)
        assert cold.period == 1000
        lab.update(PERIOD_3)  # while it sleeps: the IND goes to its closed socket, unACKed
        assert lab.values(SENSOR, GH + "period") == [3.0]  # after the update's INDs (in order)
        lab.restart_sib()
        assert "1 persistent operations restored" in lab.sib.log()

        def period_applied() -> bool:
            agent, _ = boot(cfg, board)
            return agent.period == 3000

        wait_until("the period change reached the woken sensor", period_applied, timeout=30)
    finally:
        lab.close()


class WireLink:
    """A link that keeps what the agent sends, decoded by the reference codec."""

    def __init__(self) -> None:
        self.sent: list = []

    def send(self, msg) -> None:
        self.sent.append(decode_kp_message(bytes(msg)))


def test_sleeping_sensor_waits_for_its_subscription_and_keeps_it_on_a_resync():
    """The rules the lossy runs rely on, each forced (virtual clock, answers encoded by the
    reference codec): no deep sleep while the subscription's RES is still awaited (after the
    wake-up it would be taken for running); a timed-out UPDATE resyncs without a second
    subscription; a lost subscription is made again."""
    from ksp import Response, SelectResult, Status

    board = SimBoard({TEMP: 21.5})
    agent = SensorAgent(settings(9, "sensor", device=SENSOR, deep_sleep=True, period_s=30,
                                 period_property=GH + "period",
                                 sensors=[{"type": "chip_temp", "property": TEMP}]), board)
    link = agent.client.link = WireLink()

    def answer(tx: Tx, result=None) -> None:
        req = next(m for m in reversed(link.sent) if getattr(m, "tx", None) == tx)
        agent.client.feed(encode(Response(req.tid, Status.OK, result,
                                          epoch=req.options.epoch)), board.now)

    agent.start()
    answer(Tx.RESET)
    answer(Tx.DELETE)
    agent.tick(board.now)
    answer(Tx.UPDATE_DATA)  # the subscription's RES is still awaited: no deep sleep yet
    assert board.slept == [] and agent.tick(board.now) == 200
    answer(Tx.SELECT_PERSISTENT, SelectResult(1, (), 0, ()))
    with pytest.raises(DeepSleep):
        agent.tick(board.now)
    assert board.slept == [30000]

    agent = SensorAgent(agent.cfg, board)  # the wake-up
    link = agent.client.link = WireLink()
    # Its keepalives (tests/test_keepalive.py, the firmware's in test_firmware_client.py)
    # would end the subscription over ten minutes of a dead link: the resync is the point here.
    agent.client.keepalive = 0
    agent.start()
    (sub,) = agent.client.persistent
    agent.tick(board.now)
    board.now += 600000  # the UPDATE's retransmissions run out
    for _ in range(10):
        agent.client.poll(board.now)
        board.now += 60000
    assert [m.tx for m in link.sent] == [Tx.UPDATE_DATA] * 5 + [Tx.DELETE] * 5
    assert list(agent.client.persistent) == [sub]  # a resync, the subscription kept
    agent.tick(board.now)  # the resync's DELETE ran out too: tried again (once a period)
    assert [m.tx for m in link.sent[10:]] == [Tx.DELETE]
    answer(Tx.DELETE)
    board.now += 30000
    agent.tick(board.now)
    assert link.sent[-1].tx == Tx.UPDATE_DATA and link.sent[-1].delete == ()  # clean slate

    agent.client.persistent[sub][1] = 7  # and when the SIB ends it, it is made again
    agent.client.feed(encode(Response(sub, Status.TERMINATED, indication=True, seq=8)),
                      board.now)
    assert link.sent[-2:] == [Ack(sub, 8), link.sent[-1]]
    assert link.sent[-1].tx == Tx.SELECT_PERSISTENT and link.sent[-1].tid != sub
