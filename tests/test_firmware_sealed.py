"""The firmware speaks the authenticated mode (docs/wire-format.md section 13)
against a real `ksp-sib` that requires it for both boards' KP IDs (`require_auth`).

The firmware's sensor and actuator agents (device_firmware/kspfw, with `kp.key` in their config
and no password) run their real loop and sockets on CPython, as in tests/test_firmware_sib.py,
through the lossy relay (loss, duplicates, reordering) to a `ksp-sib` subprocess that restarts
once. The seal/open module they use is the one tests/test_firmware_secure.py checks on real
MicroPython. What is checked from the bytes on the wire: every datagram the boards send is
sealed with their key, carries no CREDENTIALS, and no counter is ever used twice (a
retransmission is sealed afresh); what they receive unsealed is ignored. Then, as an attacker
on the path: every datagram a board sent, replayed to the SIB from another address, executes
nothing and is counted as dropped; a board's clear password is refused.
"""
from __future__ import annotations

import asyncio
import re
import socket
import time

import pytest

from firmware import harness
from firmware.lab import GH, AgentThread, Lab, clock, wait_until

harness.import_path()

from kspfw import config  # noqa: E402
from kspfw.actuator_agent import ActuatorAgent  # noqa: E402
from kspfw.hal import flt  # noqa: E402
from kspfw.sensor_agent import SensorAgent  # noqa: E402
from simboard import SimBoard  # noqa: E402

from ksp import Ack, Status, Tx, decode_kp_message, decode_sib_message  # noqa: E402
from ksp.secure import MAGIC, derive_keys, new_key, open_sealed, parse_key  # noqa: E402
from sib.testing import scrape  # noqa: E402
from transports import KspStatusError, connect  # noqa: E402
from test_firmware_sib import FAN, KPS, RECORDER, RULES, SENSOR, TEMP, THRESHOLD, fast  # noqa: E402

# slow: the firmware's agents against a ksp-sib process that restarts
pytestmark = pytest.mark.slow

KEYS = {kp_id: new_key() for kp_id in KPS.values()}
FAN_PIN = 5
STEPS = [20.0, 27.0, 24.0, "restart", 30.5, 19.0]


def sealed_settings(port: int, kind: str, **extra) -> dict:
    kp_id = KPS["sensor" if kind == "sensor" else "fan"]
    return config.check({"agent": kind, "wifi": {"ssid": "lab"},
                         "sib": {"host": "127.0.0.1", "port": port},
                         "kp": {"id": kp_id, "key": KEYS[kp_id]},
                         "prefixes": [GH], "max_response_size": 512, **extra})


def opened(sent: list[bytes], kp_id: str) -> list:
    """Every datagram a board sent, opened with its key (raises if one is not sealed by it)."""
    keys = derive_keys(parse_key(KEYS[kp_id]))
    return [open_sealed(keys.kp_to_sib, m) for m in sent]


def test_firmware_agents_speak_sealed_to_a_sib_that_requires_it(tmp_path):
    lab = Lab(tmp_path, KPS, seed=7, keys=KEYS)
    threads: list[AgentThread] = []
    try:
        lab.update("INSERT DATA { gh:fan1 gh:on false }")
        lab.update(*RULES, RECORDER, persistent=True)
        sensor_board, fan_board = SimBoard({TEMP: 20.0}, clock=clock), SimBoard(clock=clock)
        sensor = fast(SensorAgent(sealed_settings(lab.proxy.port, "sensor", device=SENSOR,
                                                  sensors=[{"type": "chip_temp",
                                                            "property": TEMP}]), sensor_board))
        sensor.period = 100
        fan = fast(ActuatorAgent(sealed_settings(lab.proxy.port, "actuator", device=FAN, outputs=[
            {"pin": FAN_PIN, "ask": [[FAN, GH + "on", True]]}]), fan_board))
        assert sensor.client.sealer is not None and fan.client.sealer is not None
        threads = [AgentThread(sensor), AgentThread(fan)]
        for t in threads:
            t.start()
        acked = []
        for step in STEPS:
            if step == "restart":  # the SIB forgets its replay windows; counters go on
                lab.restart_sib()
                continue
            sensor_board.values[TEMP] = step
            lexical = flt(step).value
            wait_until(f"reading {lexical} acknowledged",
                       lambda: sensor.last.get(TEMP) == lexical, threads)
            acked.append(step)
            on = step > THRESHOLD
            assert lab.ask("ASK { gh:fan1 gh:on true }") is on
            wait_until(f"fan {'on' if on else 'off'} after {step}",
                       lambda: fan_board.outputs[FAN_PIN][-1:] == [on], threads)

        # An unsealed IND (anyone could have sent it) to the actuator's socket is ignored:
        # not even ACKed. The relay is cut first: an IND the SIB sends again for a lost ACK
        # would otherwise be read (and ACKed) around it.
        lab.proxy.loss = 1.0
        time.sleep(0.5)  # what the relay still holds back (reordering) arrives
        link = threads[1].links[-1]
        plain = decode_sib_message(_last_ind(link, KPS["fan"]), answers=Tx.ASK_PERSISTENT)
        received, before = len(link.received), len(link.sent)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(_reencode_plain(plain), ("127.0.0.1", link.sock.getsockname()[1]))
        wait_until("the plain datagram read", lambda: any(
            m[0] != MAGIC for m in link.received[received:]), threads)
        assert len(link.sent) == before

        for t in threads:
            t.stop()
        assert sorted(lab.values(SENSOR, GH + "seen")) == sorted(set(acked))
        stats = lab.proxy.stats
        assert stats["dropped"] and stats["duplicated"], stats

        for name, kp_id in (("sensor", KPS["sensor"]), ("fan", KPS["fan"])):
            sent = threads[0 if name == "sensor" else 1].links.sent()
            envelopes = opened(sent, kp_id)  # each sealed with the board's own key
            counters = [e.counter for e in envelopes]
            assert len(set(counters)) == len(counters), f"{name}: a counter was used twice"
            assert counters == sorted(counters)
            inner = [decode_kp_message(e.inner) for e in envelopes]
            assert all(isinstance(m, Ack) or m.options.credentials is None for m in inner)
            assert any(isinstance(m, Ack) for m in inner) or name == "sensor"
            # counters come in blocks reserved in the board's "flash" before use: one write
            # per 1024 messages, each block end above every counter sent
            writes = (sensor_board if name == "sensor" else fan_board).counter_writes
            assert writes == [1024 * (i + 1) for i in range(len(writes))]
            assert counters[0] == 0 and counters[-1] < writes[-1]

        # The attacker: every datagram the sensor sent, replayed to the SIB from elsewhere,
        # twice. The first pass may carry datagrams the relay dropped on the way (the SIB never
        # had them, so they are not replays to it: each is taken once, and is a retransmitted
        # request's duplicate or an ACK, so nothing executes again); the second pass is all
        # replays: dropped unanswered, before the duplicate cache.
        sent = threads[0].links.sent()
        seen_before = sorted(lab.values(SENSOR, GH + "seen"))
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(1.0)
            answers = []
            for attempt in range(2):
                dropped_before = _dropped(lab)
                for m in sent:
                    s.sendto(m, ("127.0.0.1", lab.port))
                if attempt == 0:  # some are taken, unanswered (ACKs): wait until it settles
                    wait_until("the first pass read", lambda: _settled(lab, s, answers))
                else:  # all replays: every one dropped (an answer, kept, ends no wait early)
                    wait_until("the replays read", lambda: (
                        _drain(s, answers), _dropped(lab) >= dropped_before + len(sent))[1])
                    assert _dropped(lab) == dropped_before + len(sent)
            assert not _drain(s, answers)
            assert all(a[0] == MAGIC for a in answers)  # whatever went out left sealed
        assert sorted(lab.values(SENSOR, GH + "seen")) == seen_before
        assert lab.values(SENSOR, TEMP) == [acked[-1]]

        # The board's KP ID with a clear password (any): refused, the mode is required.
        async def plain_kp():
            async with connect(f"udp://127.0.0.1:{lab.port}", kp_id=KPS["sensor"],
                               password="guess") as kp:
                return await kp.request(f"INSERT DATA {{ <{SENSOR}> <{TEMP}> 99 }}")

        with pytest.raises(KspStatusError) as refused:
            asyncio.run(asyncio.wait_for(plain_kp(), 60))
        assert refused.value.status == Status.ACCESS_DENIED
        assert lab.values(SENSOR, TEMP) == [acked[-1]]
    finally:
        for t in threads:
            if t.is_alive():
                t.halt.set()
                t.join(30)
        lab.close()


def _last_ind(link, kp_id: str) -> bytes:
    """The inner bytes of the last IND the actuator received (opened with the SIB's key)."""
    keys = derive_keys(parse_key(KEYS[kp_id]))
    inds = [open_sealed(keys.sib_to_kp, m).inner for m in link.received if m[:1] == bytes([MAGIC])]
    return [m for m in inds if m[1] & 0x80][-1]


def _reencode_plain(response) -> bytes:
    from ksp import encode
    return encode(response._replace(seq=(response.seq + 1) & 0xFFFF))


def _drain(s: socket.socket, into: list) -> bool:
    """Read what the socket has (no wait); whether anything came."""
    s.setblocking(False)
    try:
        n = len(into)
        while True:
            into.append(s.recvfrom(65535)[0])
    except BlockingIOError:
        return len(into) > n
    finally:
        s.settimeout(1.0)


def _settled(lab: Lab, s: socket.socket, answers: list, quiet: float = 1.0) -> bool:
    """Whether the SIB has read a pass of datagrams: no answer and no drop for `quiet` s."""
    before = _dropped(lab)
    time.sleep(quiet)
    return not _drain(s, answers) and _dropped(lab) == before


def _dropped(lab: Lab) -> float:
    text = asyncio.run(scrape(lab.sib.ports["metrics"]))
    return float(re.search(r"^ksp_sealed_dropped_total (\S+)$", text, re.M)[1])
