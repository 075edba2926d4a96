"""Smoke test of the SEPA gate benchmark (tools/bench/sepa.py) — no timing assertions: it
runs through real sockets with both writers, both modes get every notification of every
update, and the smart mode evaluates less."""
from __future__ import annotations

import asyncio

import pytest

from tools.bench import sepa as bench

# slow: the SEPA gate benchmark
pytestmark = pytest.mark.slow


def test_both_modes_notify_every_affected_subscription_for_both_writers():
    rows = asyncio.run(asyncio.wait_for(bench.run(2_000, [10, 200], updates=12,
                                                  naive_updates=12), 300))
    assert [(r["n"], r["writer"]) for r in rows] == [
        (10, "http"), (10, "ksp"), (200, "http"), (200, "ksp")]
    for r in rows:
        smart, naive = r["smart"], r["naive"]
        assert smart["updates"] == naive["updates"] == 12
        per_update = max(1, r["n"] // bench.WATCHED)
        assert smart["notifications"] == naive["notifications"] == 12 * per_update
        assert smart["evaluations"] < naive["evaluations"]
        assert 0 < smart["p50"] <= smart["p99"]
    headers, body = bench.table(rows)
    assert len(body) == 4 and body[2][:2] == ["200", "http"]


def test_guarded_gate_admits_every_connection_of_both_writers():
    rows = asyncio.run(asyncio.wait_for(bench.run(2_000, [10], updates=8, naive_updates=8,
                                                  guard=True), 300))
    assert [(r["n"], r["writer"]) for r in rows] == [(10, "http"), (10, "http-new")]
    for r in rows:
        plain, guarded = r["plain"], r["guarded"]
        assert "held" not in plain
        assert plain["updates"] == guarded["updates"] == 8
        assert plain["notifications"] == guarded["notifications"] == 8
        # the guard holds the subscribers' WebSocket and, kept alive, the writer's connection;
        # each new connection's slot is freed (the last one's perhaps not yet)
        assert guarded["held"] == 2 if r["writer"] == "http" else guarded["held"] <= 2
        assert guarded["refused"] == 0
    headers, body = bench.table(rows)
    assert headers[-1] == "guarded ÷ plain" and body[1][1] == "http-new"
