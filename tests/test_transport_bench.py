"""Smoke test of the transport benchmark (tools/bench/transport.py): it runs end to end with
a real mosquitto and prints every row — no timing assertions (speed is the benchmark's job)."""
from __future__ import annotations

import pytest

from tools.bench import transport
from tools.cli import BENCH_SUITES

# slow: mosquitto and benchmark processes
pytestmark = pytest.mark.slow

ROWS = ["bare UDP echo", "KSP/UDP", "KSP/TCP", "KSP/CoAP", "KSP sessions, no sockets",
        "MQTT QoS 0", "MQTT QoS 1"]


def test_the_table_has_every_row():  # mosquitto comes from scripts/apt-packages.txt
    results, settings = transport.run(rounds=2, per_round=5)
    assert [r.name for r in results] == ROWS
    assert all(len(r.samples) == 10 and min(r.samples) > 0 for r in results)
    table = transport.render(results, settings, "cmd", markdown=True)
    for name in ROWS:
        assert f"| {name} |" in table
    assert "Target: KSP/UDP p50 within 3×" in table
    assert BENCH_SUITES["transport"] == ".bench.transport"


def test_without_coap_and_mqtt_neither_library_is_imported():
    """`--no-coap --no-mqtt` measures a plain KP's process: importing aiocoap or paho changed
    how glibc served asyncio's reads (transports/reads.py), so neither may be loaded then."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys; from tools.bench import transport; "
            "results, _ = transport.run(rounds=1, per_round=3, mqtt=False, coap=False); "
            "print([r.name for r in results], {'aiocoap', 'paho'} & set(sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True,
                         cwd=Path(__file__).parents[1]).stdout
    rows = [name for name in ROWS if name != "KSP/CoAP" and not name.startswith("MQTT")]
    assert out.strip() == f"{rows} set()"
