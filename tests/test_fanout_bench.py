"""Smoke test of the fan-out benchmark (tools/bench/fanout.py): it runs end to end, 100 KSP
subscribers and 100 paho subscribers of a real mosquitto, and prints every row — no timing
assertions (speed is the benchmark's job)."""
from __future__ import annotations

import pytest

from tools.bench import fanout
from tools.cli import BENCH_SUITES

# slow: mosquitto and a devices process
pytestmark = pytest.mark.slow


def test_every_row_and_every_receipt():  # mosquitto comes from scripts/apt-packages.txt
    ind, vs = fanout.run(rounds=3)
    assert list(ind) == ["bare sendto + recvfrom", "asyncio datagram pair", "KSP UdpServer"]
    assert all(len(samples) == 3 for samples in ind.values())
    assert list(vs) == ["KSP/UDP", "MQTT QoS 1"]
    for samples in vs.values():
        assert len(samples) == 3
        assert all(len(receipts) == fanout.SUBSCRIBERS and min(receipts) >= sent
                   for sent, receipts in samples)
    headers, rows, line = fanout.mqtt_table(vs)
    assert "Target: KSP median last ≤ 1.5×" in line
    assert "Target: KSP CPU per IND" in fanout.ind_table(ind)[2]
    assert BENCH_SUITES["fanout"] == ".bench.fanout"
