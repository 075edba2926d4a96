"""`ksp bench soak --ab` in a tiny form against real `ksp-sib` processes: A aging throughout, a
fresh F started for each probe, both served every cycle over UDP; per probe the slices' ratios,
the p99s and both resident sizes, and the report's rows, verdicts and plot (their values are
the benchmark's: no timing is checked here)."""
from __future__ import annotations

import asyncio

import pytest

from tools.bench.soak_ab import (FLAT_MIB, Measure, Probe, ab, plot, rss_slope, schedule,
                                 table_rows, verdicts)

# slow: three ksp-sib processes, one after the other beside A
pytestmark = pytest.mark.slow


def test_schedule_probes_at_first_then_every():
    assert schedule(100_000, 2_000, 22_000) == [2_000, 24_000, 46_000, 68_000, 90_000]
    assert schedule(1_000, 2_000, 22_000) == []


def rows(rss: list[float], every: int = 10_000, seconds: float = 100.0) -> list[dict]:
    """A's aging rows: one per `every` cycles, `seconds` apart, with these resident sizes."""
    return [{"cycles": (i + 1) * every, "rss": r, "seconds": (i + 1) * seconds}
            for i, r in enumerate(rss)]


def test_rss_slope_is_per_100k_cycles_over_the_last_half_after_the_lifetime():
    # 1 MiB per 10,000 cycles throughout: 10 MiB per 100,000
    assert rss_slope(rows([float(i) for i in range(20)])) == pytest.approx(10.0)
    # a fill in the first half (the duplicate cache), then flat: flat
    filling = rows([50.0 + 5 * i for i in range(10)] + [100.0] * 10)
    assert rss_slope(filling) == pytest.approx(0.0)
    assert abs(rss_slope(filling)) <= FLAT_MIB
    # a creep of 0.2 MiB per 10,000 cycles (2 MiB per 100,000) is not flat
    creep = rows([100.0 + 0.2 * i for i in range(20)])
    assert rss_slope(creep) == pytest.approx(2.0) and rss_slope(creep) > FLAT_MIB
    # up to a probe's age; rows within the lifetime do not count; too few rows: no slope
    assert rss_slope(creep, upto=100_000) == pytest.approx(2.0)
    assert rss_slope(rows([1.0, 2.0, 3.0, 4.0], seconds=60.0), lifetime=247.0) is None
    assert rss_slope([]) is None


def test_p99_band_tells_noise_from_an_aged_process_own_slowness():
    import random

    rand = random.Random(1)
    alike = [(Measure(1.0, [rand.expovariate(1) for _ in range(500)]),
              Measure(1.0, [rand.expovariate(1) for _ in range(500)])) for _ in range(4)]
    probe = Probe(2_000, alike, (1.0, 1.0))
    low, high = probe.p99_band()
    assert low < 1.0 < high and low <= probe.p99_ratio <= high
    slower = Probe(2_000, [(Measure(1.0, [2 * t for t in a.latencies]), f) for a, f in alike],
                   (1.0, 1.0))
    assert slower.p99_ratio > slower.p99_band()[1]


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
    # A's RSS slope at each probe once it has rows enough past the lifetime (0 here); flags
    # both SIBs get (a duplicate cache of 256 entries, full within the run)
    aged = asyncio.run(ab("memory", cycles=400, every=150, slices=1, per_slice=10,
                          window=50, first=300, warm=10, lifetime=0.0,
                          extra=("--max-session-entries", "256")))[1]
    assert [p.cycles for p in aged] == [300] and aged[0].slope is not None
    results = {"memory": (aging, probes)}
    assert len(table_rows(results)) == len(probes) + 1  # and min / median / max
    lines = verdicts(results, lifetime=0.0)
    assert len(lines) == 3 and all(line.startswith("memory: ") for line in lines)
    assert "A's RSS flat after" in lines[2] and "MiB/100k" in lines[2]
    pytest.importorskip("matplotlib")
    plot(results, str(tmp_path / "ab.png"))
    assert (tmp_path / "ab.png").stat().st_size > 10_000
