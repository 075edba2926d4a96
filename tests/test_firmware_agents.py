"""The agents' loop (device_firmware/kspfw/agent.run) on CPython with the simulated board and
real loopback UDP sockets: a cold start, Wi-Fi that is down at boot and lost later (the link is
rebuilt with back-off, no second RESET), and an actuator output following INDs."""
from __future__ import annotations

import time

from firmware import harness

harness.import_path()

from firmware.sib_stub import UdpSib, ok_answer  # noqa: E402
from kspfw import config, net  # noqa: E402
from kspfw.actuator_agent import ActuatorAgent  # noqa: E402
from kspfw.agent import run  # noqa: E402
from kspfw.sensor_agent import SensorAgent  # noqa: E402
from simboard import SimBoard  # noqa: E402

from ksp import Ack, AskResult, Literal, Response, Status, Tx, encode  # noqa: E402

EX = "http://example.org/gh#"
DEADLINE = 60.0  # seconds; generous for a loaded machine


def clock():
    return int(time.monotonic() * 1000)


def settings(port, **extra):
    cfg = {"wifi": {"ssid": "gh"}, "sib": {"host": "127.0.0.1", "port": port},
           "kp": {"id": "0f1e2d3c4b5a69788796a5b4c3d2e1f0", "password": "pw"},
           "device": EX + "sensor42", "prefixes": [EX], "max_response_size": 512}
    cfg.update(extra)
    return config.check(cfg)


def link_factory(cfg):
    return net.Link(cfg["host"], cfg["port"], cfg["transport"] == "tcp", cfg["max_size"])


def until(condition):
    start = time.monotonic()

    def stop():
        if time.monotonic() - start > DEADLINE:
            raise AssertionError("condition not reached in time")
        return condition()

    return stop


def txs(sib):
    return [m.tx for m in sib.received if hasattr(m, "tx")]


def test_sensor_survives_wifi_down_at_boot_and_lost_later(capsys):
    sib = UdpSib(ok_answer).start()
    try:
        cfg = settings(sib.port, agent="sensor", period_s=1,
                       sensors=[{"type": "chip_temp", "property": EX + "temperature"}])
        board = SimBoard({EX + "temperature": 21.5}, clock=clock)
        board.network_up = False
        agent = SensorAgent(cfg, board)

        def wifi_back_after_three_tries():
            if board.attempts >= 3:
                board.network_up = True
            return Tx.UPDATE_DATA in txs(sib)

        run(agent, link_factory, until(wifi_back_after_three_tries))
        assert board.sleeps[:3] == [1000, 2000, 4000]  # back-off while Wi-Fi is down
        assert txs(sib)[:2] == [Tx.RESET, Tx.DELETE]
        updates = [m for m in sib.received if getattr(m, "tx", None) == Tx.UPDATE_DATA]
        assert updates[0].insert[0][2] == Literal("21.5", "http://www.w3.org/2001/XMLSchema#float")
        assert updates[0].options.credentials.kp_id == bytes.fromhex(
            "0f1e2d3c4b5a69788796a5b4c3d2e1f0")

        # Wi-Fi lost (the loop notices it on its next turn), down for a while, then back.
        board.network_up = False
        old_link = agent.client.link
        board.values[EX + "temperature"] = 22.0
        seen = len(sib.received)

        def back_and_reporting():
            if board.attempts >= 6:
                board.network_up = True
            return any(getattr(m, "tx", None) == Tx.UPDATE_DATA for m in sib.received[seen:])

        run(agent, link_factory, until(back_and_reporting))
        later = [m for m in sib.received[seen:] if getattr(m, "tx", None) == Tx.UPDATE_DATA]
        assert later[0].insert[0][2].lexical == "22.0"
        assert txs(sib).count(Tx.RESET) == 1  # the agent's state outlived the link
        assert "link down" in capsys.readouterr().out
        assert agent.client.link is not old_link and old_link.sock.fileno() == -1
    finally:
        sib.close()


def test_actuator_output_follows_the_sib():
    sib = UdpSib(lambda req: Response(req.tid, Status.OK, AskResult(True))
                 if req.tx == Tx.ASK_PERSISTENT else ok_answer(req)).start()
    try:
        cfg = settings(sib.port, agent="actuator", device=EX + "fan1",
                       outputs=[{"pin": 5, "ask": [[EX + "fan1", EX + "on", True]]}])
        board = SimBoard(clock=clock)
        agent = ActuatorAgent(cfg, board)
        run(agent, link_factory, until(lambda: board.outputs[5][-1:] == [True]))
        sub = next(m for m in sib.received if getattr(m, "tx", None) == Tx.ASK_PERSISTENT)
        sib.send(encode(Response(sub.tid, Status.OK, AskResult(False), True, 1)))
        run(agent, link_factory, until(lambda: board.outputs[5][-1:] == [False]))
        run(agent, link_factory, until(lambda: Ack(sub.tid, 1) in sib.received))
        assert board.outputs[5] == [False, True, False]
    finally:
        sib.close()
