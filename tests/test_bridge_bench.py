"""Smoke test of the bridge benchmark (tools/bench/bridge.py) — no timing assertions: both
sides run every operation through real processes and sockets, and the table has each row."""
from __future__ import annotations

import asyncio

import pytest

from tools.bench import bridge as bench

# slow: the bridge benchmark: ksp-sib and ksp-bridge processes
pytestmark = pytest.mark.slow


def test_every_operation_runs_on_both_sides():
    rows = asyncio.run(asyncio.wait_for(bench.run(500, rounds=6, warmup=1), 300))
    assert [r["operation"] for r in rows] == [label for label, _ in bench.ROWS]
    for r in rows:
        assert r["n"] == 6
        assert 0 < r["direct_p50"] <= r["direct_p99"]
        assert 0 < r["bridge_p50"] <= r["bridge_p99"]
    headers, body = bench.table(rows)
    assert len(body) == len(bench.ROWS) and len(body[0]) == len(headers)
