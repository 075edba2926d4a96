"""Smoke test of the SIB benchmark (tools/bench/sib.py) — no timing assertions: it runs, both
modes do the same work (same INDs for the same updates), and the smart mode evaluates less."""
from __future__ import annotations

import asyncio

import pytest

from tools.bench import sib as bench

# slow: the SIB benchmark, with its KPs in processes
pytestmark = pytest.mark.slow


def test_bench_modes_send_the_same_indications_for_the_same_updates():
    store = bench.seed_store(2_000)
    results, shared = {}, {}
    for mode, smart in (("smart", True), ("naive", False)):
        results[mode] = asyncio.run(bench.run_mode(store, 200, smart, budget=60.0,
                                                   max_updates=20, shared=shared))
    smart, naive = results["smart"], results["naive"]
    assert smart["updates"] == naive["updates"] == 20
    assert smart["inds"] == naive["inds"] == 20 * 2 + 200  # 2 affected per update + TERMINATED
    assert smart["evaluations"] < naive["evaluations"]
    table = bench.table([{"n": 200, "smart": smart, "naive": naive}])
    assert table.count("\n") == 2 and "| 200 | 2 |" in table
    assert smart["cpu"] > 0 and table.rstrip().endswith(f"| {smart['cpu'] * 1e3:.2f} |")


def test_bench_updates_keep_one_value_per_sensor():
    store = bench.seed_store(1_000)
    shared: dict = {}
    contenders = [bench.Contender(store, n, smart, False, shared) for n, smart in
                  ((10, True), (100, False), (50, True))]
    asyncio.run(bench.run_contenders(contenders, budget=60.0, max_updates=30))
    assert [c.count for c in contenders] == [30, 30, 30]
    for k in range(bench.WATCHED):
        assert len(store.match(bench.sensor(k), bench.VALUE)) == 1


def test_fixed_scenario_affects_exactly_one_query_per_update():
    store = bench.seed_store(1_000)
    r = asyncio.run(bench.run_mode(store, 300, True, budget=60.0, max_updates=10, fixed=True))
    assert r["inds"] == 10 + 300 and r["evaluations"] == 10


@pytest.mark.parametrize("kp_process", [True, False], ids=["kp-process", "kp-inprocess"])
def test_udp_mode_over_loopback_same_inds_in_both_modes(tmp_path, kp_process):
    """The --udp mode: real UdpServers and KP sockets (in a spawned process of their own, or
    in this one); every update's INDs arrive and are ACKed; smart and naive send the same
    INDs, naive evaluates more."""
    rows = asyncio.run(asyncio.wait_for(
        bench.bench(1_000, [10, 200], budget=60.0, max_updates=12, udp=True,
                    kp_process=kp_process), 300))
    for row in rows:
        smart, naive = row["smart"], row["naive"]
        assert smart["updates"] == naive["updates"] == 12
        per_update = max(1, row["n"] // bench.WATCHED)
        assert smart["inds"] == naive["inds"] == 12 * per_update
        assert smart["evaluations"] < naive["evaluations"]
        assert 0 < smart["p50"] <= smart["p99"]
    text = bench.table(rows)
    assert text.count("\n") == 3 and "| 200 | 2 |" in text
    assert "smart p99 update-to-IND latency" in bench.targets(rows, False)
    pytest.importorskip("matplotlib")  # the `bench` extra
    png = tmp_path / "sib.png"
    bench.plot(rows, str(png), "smoke")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_help_progress_and_plot_read_well(tmp_path, capsys):
    """`--help` says the whole first paragraph; progress lines are words, not dicts; the plot
    names the scenario and labels the 10 ms target."""
    with pytest.raises(SystemExit):
        bench.main(["--help"], prog="ksp bench sib")
    assert "as SEPA's broker does), in one run." in " ".join(capsys.readouterr().out.split())
    png = tmp_path / "sib.png"
    assert bench.main(["--quick", "--queries", "10", "--max-updates", "5", "--scenario",
                       "fixed", "--plot", str(png)], prog="ksp bench sib") == 0
    err = capsys.readouterr().err
    progress = [line for line in err.splitlines() if "queries," in line]
    assert len(progress) == 2 and all("{" not in line and "updates," in line
                                      for line in progress)
    assert png.stat().st_size > 0
    import matplotlib.pyplot as plt

    titles, labels = [], []
    original = bench.plot

    def capture(rows, path, title):
        original(rows, path, title)
        titles.append(title)

    bench.plot = capture
    try:
        real_legend = plt.Axes.legend

        def spy(self, *a, **kw):
            labels.extend(h.get_label() for h in self.get_legend_handles_labels()[0])
            return real_legend(self, *a, **kw)

        plt.Axes.legend = spy
        bench.main(["--quick", "--queries", "10", "--max-updates", "5", "--plot", str(png)])
    finally:
        bench.plot = original
        plt.Axes.legend = real_legend
    assert "about 1 % of the queries affected per update" in titles[0]
    assert "target: 10 ms" in labels
