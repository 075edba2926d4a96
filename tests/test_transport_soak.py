"""Smoke test of the transport soak benchmark (tools/bench/transport_soak.py) — no timing
assertions: over each real listener, every update's IND arrives with the new reading, devices
come and go, and the listener's tables stay within their bound, the ones of live operations the
same size in every window."""
from __future__ import annotations

import asyncio

import pytest

from tools.bench import transport_soak as bench
from tools.cli import BENCH_SUITES

BOUND = 64


@pytest.mark.parametrize("transport", bench.TRANSPORTS)
def test_the_tables_stay_bounded_while_devices_come_and_go(transport):
    rows = asyncio.run(asyncio.wait_for(
        bench.soak(transport, cycles=300, window=100, churn=5, max_entries=BOUND), 300))
    assert [r["cycles"] for r in rows] == [100, 200, 300]
    assert all(0 < r["p50"] <= r["p99"] for r in rows)
    for r in rows:
        tables = r["tables"]
        # 10 watchers and the rule; each visitor's operation gone with it, nothing waiting
        assert (tables["deliveries"], tables["executing"], tables["held"]) == (11, 0, 0)
        assert max(tables.values()) <= 2 * BOUND + 64  # timers: live ones, stale compacted
        if transport == "coap":
            assert (tables["resources"], tables["lingering"], tables["posts waiting"]) == \
                (11, 0, 0)
    # 300 updates and 60 visitors' subscriptions and TERMINATEs: UDP's and CoAP's duplicate
    # caches reach their bound and stay there; TCP has none.
    recent = [r["tables"]["recent requests"] for r in rows]
    assert recent[-1] == (0 if transport == "tcp" else BOUND)
    assert BENCH_SUITES["transport-soak"] == ".bench.transport_soak"
