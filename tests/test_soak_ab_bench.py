"""`ksp bench soak --ab` in a tiny form against real `ksp-sib` processes: A aging throughout, a
fresh F started for each probe, both served every cycle over UDP; per probe the slices' ratios,
the p99s and both resident sizes, and the report's rows, verdicts and plot (their values are
the benchmark's: no timing is checked here)."""
from __future__ import annotations

import asyncio

import pytest

from tools.bench.soak_ab import ab, plot, schedule, table_rows, verdicts

# slow: three ksp-sib processes, one after the other beside A
pytestmark = pytest.mark.slow


def test_schedule_probes_at_first_then_every():
    assert schedule(100_000, 2_000, 22_000) == [2_000, 24_000, 46_000, 68_000, 90_000]
    assert schedule(1_000, 2_000, 22_000) == []


def test_an_aged_sib_is_probed_against_a_fresh_one_each_time(tmp_path):
    aging, probes = asyncio.run(ab("memory", cycles=400, every=150, slices=2, per_slice=20,
                                   window=100, first=50, warm=10))
    # A's rows at every window; its probe cycles count towards its age
    assert [row["cycles"] for row in aging] == [100, 200, 300, 400]
    assert all(row["cpu"] > 0 and row["rss"] > 0 for row in aging)
    assert [p.cycles for p in probes] == [50, 200, 350]
    for p in probes:
        assert len(p.slices) == 2
        for aged, fresh in p.slices:
            assert len(aged.latencies) == len(fresh.latencies) == 20
            assert aged.cpu > 0 and fresh.cpu > 0
        assert len(p.slice_ratios) == 2 and p.ratio > 0 and p.p99_ratio > 0
        assert p.rss[0] > 0 and p.rss[1] > 0
    results = {"memory": (aging, probes)}
    assert len(table_rows(results)) == len(probes) + 1  # and min / median / max
    lines = verdicts(results, lifetime=0.0)
    assert len(lines) == 3 and all(line.startswith("memory: ") for line in lines)
    pytest.importorskip("matplotlib")
    plot(results, str(tmp_path / "ab.png"))
    assert (tmp_path / "ab.png").stat().st_size > 10_000
