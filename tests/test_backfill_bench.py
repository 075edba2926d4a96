"""Smoke test of the backfill benchmark (tools/bench/backfill.py) — no timing assertions: the
output it makes is the job's layout, its late copies are found stored and its new readings
added, and both measurements run."""
from __future__ import annotations

import pytest

pytest.importorskip("pyarrow")

from tools.bench import backfill as bench  # noqa: E402

# slow: the backfill benchmark
pytestmark = pytest.mark.slow


def test_half_the_letters_are_copies_and_the_backfill_adds_the_rest(tmp_path):
    rows = bench.run(devices=3, stored=50, sizes=[120], rounds=1, root=tmp_path)
    (row,) = rows
    assert row["late"] == 120 and row["added"] == 60  # the odd ones: on the next day
    # each device's 20 new readings lie 20 s apart from 5-15 s on: 7 minutes each
    assert row["minutes"] == 3 * 7
    for mode in ("baseline", "backfill"):
        assert row[mode]["rate"] > 0 and row[mode]["rss"] > 0
    headers, body = bench.table(rows)
    assert headers[-1] == "backfill ÷ baseline (time)" and body[0][:3] == ["120", "60", "21"]
