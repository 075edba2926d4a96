"""The live Smart Greenhouse dashboard, in Debian's headless Chromium: the
page the SIB serves subscribes over SEPA's WebSocket, and what it shows follows the readings
that the greenhouse's KPs write over KSP (UDP) and the states the SIB's rules derive."""
from __future__ import annotations

import asyncio

import pytest

from sib.testing import SibProcess
from tools.browser import Browser
from tools.greenhouse import DASHBOARD_SHOWS, Greenhouse

# slow: headless Chromium against a ksp-sib process
pytestmark = pytest.mark.slow

VALUE = "(document.querySelector('[data-sensor={0}] .value') || {{}}).textContent"
STATE = "(document.querySelector('[data-actuator={0}] .state') || {{}}).textContent"


def test_the_dashboard_follows_ksp_writes_through_a_sepa_subscription():
    with SibProcess("--memory", "--udp-port", "0", "--tcp-port", "-1", "--coap-port", "-1",
                    "--sepa-http-port", "0", "--sepa-ws-port", "0") as sib:
        asyncio.run(asyncio.wait_for(
            drive(f"udp://127.0.0.1:{sib.ports['udp']}",
                  f"http://127.0.0.1:{sib.ports['http']}/dashboard"), 180))


async def drive(url: str, dashboard: str) -> None:
    async with Browser() as browser:
        page = await browser.open(dashboard)
        await page.wait_for("document.getElementById('status').textContent === 'live'")
        assert await page.evaluate(VALUE.format("thermometer1")) == "—°C"  # nothing yet
        assert await page.evaluate("document.querySelectorAll('[data-actuator]').length") == 0

        async def shows(expression: str, want: str) -> None:
            await page.wait_for(f"{expression} === {want!r}")

        greenhouse = Greenhouse(url, say=lambda _line: None)
        try:
            await greenhouse.setup()  # the Preferences KP (actuators off) and the rules
            for actuator in ("fan1", "led1", "pump1"):
                await shows(STATE.format(actuator), "off")
            await greenhouse.publish("temperature", 22.0)
            await shows(VALUE.format("thermometer1"), "22°C")
            await greenhouse.publish("temperature", 26.5)  # above 25.7: a rule turns the fan on
            await shows(VALUE.format("thermometer1"), "26.5°C")
            await shows(STATE.format("fan1"), "ON")
            await greenhouse.publish("luminosity", 120.0)  # below 300: the LEDs
            await shows(VALUE.format("luxmeter1"), "120lx")
            await shows(STATE.format("led1"), "ON")
            await greenhouse.publish("temperature", 21.0)
            await page.wait_for(DASHBOARD_SHOWS.format(value=21.0))
            await shows(STATE.format("fan1"), "off")
            assert await page.evaluate(STATE.format("led1")) == "ON"
            assert await page.evaluate(STATE.format("pump1")) == "off"
            # each change arrived as a notification, none by polling: the page's count of
            # them, and the change log the notifications wrote
            assert int(await page.evaluate(
                "document.getElementById('notifications').textContent")) >= 8
            log = await page.evaluate("document.getElementById('log').textContent")
            assert "thermometer1: temperature 26.5" in log and "fan1: ON" in log
        finally:
            await greenhouse.close()


def test_the_demo_takes_the_dashboard_s_picture(tmp_path):
    """`ksp demo greenhouse --dashboard --screenshot` (how docs/dashboard.png is made): the
    demo's readings, then a PNG of the page showing the last of them."""
    import struct
    import subprocess
    import sys

    png = tmp_path / "dashboard.png"
    out = subprocess.run([sys.executable, "-m", "tools.cli", "demo", "greenhouse", "--dashboard",
                          "--interval", "0", "--screenshot", str(png)],
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert "Dashboard: http://127.0.0.1:" in out.stdout and f"screenshot: {png}" in out.stdout
    head = png.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", head[16:24]) == (1100, 600)
