"""The Smart Greenhouse (KSP paper §IV, figure 13) against a real `ksp-sib` subprocess over UDP:
the actuators follow the readings, switched by the Autocontrol KP's persistent updates only."""
from __future__ import annotations

import asyncio

import pytest

from sib.testing import SibProcess, scrape
from tools import greenhouse as gh

# slow: the greenhouse against a ksp-sib process
pytestmark = pytest.mark.slow


def oracle(readings: dict[str, float]) -> dict:
    """Fan on above the maximum temperature; LED on below the minimum luminosity; pump on below
    the minimum humidity; off otherwise and before any reading."""
    p = gh.PREFERENCES
    t, h, lum = (readings.get(k) for k in ("temperature", "humidity", "luminosity"))
    return {gh.GH.fan1: t is not None and t > p["maxTemperature"],
            gh.GH.led1: lum is not None and lum < p["minLuminosity"],
            gh.GH.pump1: h is not None and h < p["minHumidity"]}


READINGS = gh.READINGS + [("temperature", 25.7), ("temperature", 25.8), ("luminosity", 300.0),
                          ("luminosity", 299.9), ("humidity", 40.0), ("humidity", 39.5)]


@pytest.mark.parametrize("via", ["sib", "bridge"])
def test_actuators_follow_the_readings(tmp_path, via):
    """Through a `ksp-sib`, and the same devices unchanged through `ksp-bridge` in front of a
    SIB's SEPA gate: both must match the oracle at every step, so the devices observe the same
    states either way (the Autocontrol rules are then the bridge's aggregators)."""
    said: list[str] = []
    if via == "bridge":
        from bridge.testing import BridgedSib

        running = BridgedSib("--metrics-port", "0")
        port, metrics_port = running.port, running.bridge.metrics_port
    else:
        running = SibProcess("--memory", "--udp-port", "0", "--tcp-port", "-1", "--coap-port",
                             "-1", "--metrics-port", "0")
        port, metrics_port = running.ports["udp"], running.ports["metrics"]
    with running:
        url = f"udp://127.0.0.1:{port}"

        async def scenario():
            history = await gh.Greenhouse(url, said.append).run(READINGS)
            return history, await scrape(metrics_port)

        history, metrics = asyncio.run(asyncio.wait_for(scenario(), 180))
        stopping = running.bridge if via == "bridge" else running
        assert stopping.stop() == 0
    readings: dict[str, float] = {}
    switched = 0
    for (quantity, value), (observed, stored) in zip(READINGS, history, strict=True):
        readings[quantity] = value
        want = oracle(readings)
        assert stored == want, (quantity, value)
        assert observed == want, (quantity, value)
    assert any(all(h[1].values()) for h in history)  # everything was on at some point
    for line in said:
        switched += "Actuator KP" in line and "ON" in line
    assert switched >= 5
    lines = metrics.splitlines()
    # Autocontrol: six persistent updates and nothing else changed an actuator.
    assert 'ksp_requests_total{type="UPDATE_PERSISTENT"} 6.0' in lines
    assert not any(f'type="{tx}"' in m for m in lines for tx in ("INSERT", "DELETE", "UPDATE"))
