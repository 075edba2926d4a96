"""`ksp bench soak --ab` in a tiny form against real `ksp-sib` processes: A aged, B fresh, both
served every cycle over UDP, and a ratio per round (their values are the benchmark's)."""
from __future__ import annotations

import asyncio

import pytest

from tools.bench.soak_ab import ab, ratios, table_rows

# slow: two ksp-sib processes
pytestmark = pytest.mark.slow


def test_an_aged_and_a_fresh_sib_are_measured_alternately():
    aging, pairs = asyncio.run(ab("memory", age=200, window=100, rounds=2, per_round=50))
    assert [row["cycles"] for row in aging] == [100, 200]
    assert len(pairs) == 2
    for aged, fresh in pairs:
        assert len(aged.latencies) == len(fresh.latencies) == 50
        assert aged.cpu > 0 and fresh.cpu > 0
    assert len(ratios(pairs)) == 2
    assert len(table_rows({"memory": (aging, pairs)})) == 3
