"""Smoke test of the bridge soak benchmark (tools/bench/bridge_soak.py) — no timing
assertions: through a broker process and real UDP, every update's IND arrives with the new
reading, devices come and go, and the bridge's tables are the same size in every window."""
from __future__ import annotations

import asyncio

from tools.bench import bridge_soak as bench


def test_the_tables_stay_the_same_size_while_devices_come_and_go():
    rows = asyncio.run(asyncio.wait_for(bench.soak(cycles=60, window=20, churn=5), 300))
    assert [r["cycles"] for r in rows] == [20, 40, 60]
    # 10 watchers and the rule; each visitor's query gone with it.
    sizes = {(r["operations"], r["subscriptions"], r["spuids"]) for r in rows}
    assert sizes == {(11, 11, 11)}
    assert all(0 < r["p50"] <= r["p99"] for r in rows)
