"""`ksp bench validation` runs and reports every row (its figures are docs/benchmarks.md's)."""
from __future__ import annotations

import asyncio

import pytest

from tools.bench import validation
from tools.cli import BENCH_SUITES

# slow: a SIB with two listeners, sockets and session loops in processes of their own
pytestmark = pytest.mark.slow


def test_the_table_has_every_row():
    samples = asyncio.run(validation.measure(1, 2, None))
    rows = validation.table_rows(samples)
    assert [r[0] for r in rows] == [
        "first request, new address (echo round trip)", "same request, validated address",
        "1-row SELECT over sockets, limit on", "1-row SELECT over sockets, limit off",
        "1-row request, session only, limit on", "1-row request, session only, limit off"]
    assert all(float(r[1].replace(",", "")) > 0 for r in rows)
    assert BENCH_SUITES["validation"] == ".bench.validation"
