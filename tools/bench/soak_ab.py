"""Aged against fresh `ksp-sib` (`ksp bench soak --ab`): does a process that has served a long
soak cost more per update than a freshly started one, at every moment of its life?

Process A, a real `ksp-sib` with two KPs over UDP on loopback and the soak's workload
(`tools/bench/sensors.py`: 10 sensors replacing their readings with UPDATE DATA at the rate one
KP reaches, a persistent SELECT watching each, a rule keeping a fan's state equal to sensor 0's;
every update sends an IND that the watcher ACKs), ages continuously for `--cycles` cycles. At
each probe (`--first` cycles, then every `--every`) a process F is started fresh with the same
base data (the same 11 triples, subscriptions and rule: the store contents A has), warmed, and
then `--slices` slices of `--per-slice` cycles each run alternately, one cycle of A's then one
of F's (so whatever else the machine does costs both alike); F then stops. Measured per slice:
each SIB process's CPU time per update (its threads' time on a CPU,
/proc/PID/task/*/schedstat) and the update → IND latencies. Run for `--memory` and for a data
directory on disk (`--kind`).

Reported per probe: A's age, aged ÷ fresh CPU per update over the probe and min/median/max
over its slices, aged ÷ fresh p99 latency, both resident sizes; for the run, min/median/max of
the probes' ratios; and A's CPU per update, p99 and RSS per `--window` while it ages (the
saw-tooth a median hides). `--plot FILE.png` draws them. Targets: aged ÷ fresh CPU ≤ 1.2 at
every probe, p99 ≤ 1.2×, RSS flat after the first EXCHANGE_LIFETIME.
"""
from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field

from ksp.codes import Tx
from ksp.model import Request
from ksp.terms import Triple, Var

from .report import bench_parser, environment, percentile, print_report, rss_mib, spread
from .sensors import FAN, SENSORS, STATE, VALUE, reading, sensor, watch

KINDS = ("memory", "disk")

#: EXCHANGE_LIFETIME (seconds) as the SIB uses it: A's RSS is expected to settle after it.
LIFETIME = 247.0

#: The most RSS slope, MiB per 100,000 cycles, that counts as flat: a page of a cache's growth
#: is noise, a creep of a few MiB per 100,000 cycles (0.3 GiB in 10 million) is not.
FLAT_MIB = 0.5


def rss_slope(aging: list[dict], upto: int | None = None, lifetime: float = LIFETIME
              ) -> float | None:
    """A's RSS slope, MiB per 100,000 cycles (least squares), over the last half of its rows up
    to `upto` cycles (all: None) that come after its first `lifetime` seconds; None with fewer
    than 3 such rows (too young to tell)."""
    rows = [r for r in aging if (upto is None or r["cycles"] <= upto)]
    if not rows:
        return None
    half = rows[-1]["cycles"] / 2
    late = [r for r in rows if r["seconds"] >= lifetime and r["cycles"] > half]
    if len(late) < 3 or late[0]["cycles"] == late[-1]["cycles"]:
        return None
    fit = statistics.linear_regression([r["cycles"] for r in late], [r["rss"] for r in late])
    return fit.slope * 100_000


def cpu_seconds(pid: int) -> float:
    """CPU time of process `pid` so far, seconds: the sum of its threads' time on a CPU from
    /proc/PID/task/*/schedstat (nanoseconds, where /proc/PID/stat counts 10 ms ticks); threads
    that ended are not in it, and the SIB's (its loop, readers, RocksDB's) live as long as it."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended meanwhile
    return total / 1e9


@dataclass
class Measure:
    """One contender's cycles of one round."""
    cpu: float  # SIB CPU seconds per update
    latencies: list[float] = field(default_factory=list)

    @property
    def p50(self) -> float:
        return percentile(self.latencies, 50)

    @property
    def p99(self) -> float:
        return percentile(self.latencies, 99)


class Contender:
    """A `ksp-sib` process with the soak's KPs connected to it (`open`), run a number of cycles
    at a time (`run`)."""

    def __init__(self, name: str, kind: str, root: str, extra: tuple[str, ...] = ()) -> None:
        from sib.testing import SibProcess

        where = (("--memory",) if kind == "memory"
                 else ("--data-dir", os.path.join(root, name)))
        self.name = name
        self.proc = SibProcess(*where, "--udp-port", "0", "--tcp-port", "-1",
                               "--coap-port", "-1", *extra, timeout=120)
        self.url = f"udp://127.0.0.1:{self.proc.ports['udp']}"
        self.pid = self.proc.proc.pid
        self.cycles = 0
        self.last = {k: reading(0) for k in range(SENSORS)}

    async def open(self) -> "Contender":
        """The base data, the watcher's persistent SELECTs and the rule."""
        from transports import connect

        self.device, self.watcher = await connect(self.url), await connect(self.url)
        await self.device.request(Request(Tx.INSERT_DATA, insert=tuple(
            Triple(sensor(k), VALUE, self.last[k]) for k in range(SENSORS))
            + (Triple(FAN, STATE, self.last[0]),)))
        self.subs = [self.watcher.subscribe(watch(k)) for k in range(SENSORS)]
        for sub in self.subs:
            await sub.__aenter__()
            await asyncio.wait_for(anext(sub), 30)
        await self.device.request(Request(
            Tx.UPDATE_PERSISTENT, delete=(Triple(FAN, STATE, Var(1)),),
            insert=(Triple(FAN, STATE, Var(0)),),
            where=(Triple(sensor(0), VALUE, Var(0)), Triple(FAN, STATE, Var(1)))),
            persistent=True)
        return self

    async def cycle(self) -> float:
        """One update cycle: its update → IND latency, seconds."""
        self.cycles += 1
        n = self.cycles
        k = n % SENSORS
        new = reading(n)
        started = time.perf_counter()
        sent = asyncio.ensure_future(self.device.request(Request(
            Tx.UPDATE_DATA, delete=(Triple(sensor(k), VALUE, self.last[k]),),
            insert=(Triple(sensor(k), VALUE, new),))))
        ind = await asyncio.wait_for(anext(self.subs[k]), 30)
        latency = time.perf_counter() - started
        await sent
        assert [str(r[0]) for r in ind.result.rows] == [new.lexical], ind
        self.last[k] = new
        return latency

    async def run(self, count: int) -> Measure:
        """`count` update cycles: the SIB's CPU per update and each update → IND latency."""
        cpu0 = cpu_seconds(self.pid)
        latencies = [await self.cycle() for _ in range(count)]
        return Measure((cpu_seconds(self.pid) - cpu0) / count, latencies)

    async def close(self) -> None:
        for sub in self.subs:
            await sub.__aexit__(None, None, None)
        await self.device.close()
        await self.watcher.close()
        self.proc.stop()


async def alternate(a: Contender, b: Contender, count: int) -> tuple[Measure, Measure]:
    """`count` cycles of each, one of A's then one of B's: whatever else the machine does
    meanwhile costs both alike, which blocks of cycles one after the other do not ensure."""
    got = {c: Measure(cpu_seconds(c.pid)) for c in (a, b)}
    for _ in range(count):
        for c in (a, b):
            got[c].latencies.append(await c.cycle())
    for c in (a, b):
        got[c].cpu = (cpu_seconds(c.pid) - got[c].cpu) / count
    return got[a], got[b]


@dataclass
class Probe:
    """Aged A against a fresh F at one moment of A's life: the slices' (aged, fresh) pairs."""
    cycles: int  # A's cycles when the probe began
    slices: list[tuple[Measure, Measure]]
    rss: tuple[float, float]  # (aged, fresh) resident MiB at the probe's end
    slope: float | None = None  # A's RSS slope then, MiB per 100,000 cycles (`rss_slope`)

    @property
    def ratio(self) -> float:
        """Aged ÷ fresh CPU per update over the probe (its slices are of equal length)."""
        return (sum(a.cpu for a, _ in self.slices) / sum(f.cpu for _, f in self.slices))

    @property
    def slice_ratios(self) -> list[float]:
        return [a.cpu / f.cpu for a, f in self.slices]

    def p99(self, which: int) -> float:
        """p99 update → IND latency of the aged (0) or the fresh (1) over the probe."""
        return percentile([t for pair in self.slices for t in pair[which].latencies], 99)

    @property
    def p99_ratio(self) -> float:
        return self.p99(0) / self.p99(1)

    def p99_band(self, rounds: int = 200, seed: int = 0) -> tuple[float, float]:
        """The p99 ratio two processes alike would show with this probe's samples: the 2.5th
        and 97.5th percentiles of the ratio over `rounds` random splits of the aged and fresh
        latencies pooled. A ratio outside it is the aged process's own; inside, this machine's
        noise at this many samples (2,000 updates: their 20 slowest make the p99)."""
        import random

        aged = [t for a, _ in self.slices for t in a.latencies]
        pool = aged + [t for _, f in self.slices for t in f.latencies]
        shuffle = random.Random(seed).shuffle
        ratios = []
        for _ in range(rounds):
            shuffle(pool)
            ratios.append(percentile(pool[:len(aged)], 99) / percentile(pool[len(aged):], 99))
        ratios.sort()
        return ratios[int(rounds * 0.025)], ratios[int(rounds * 0.975) - 1]


def schedule(cycles: int, first: int, every: int) -> list[int]:
    """A's ages at which probes begin: `first`, then every `every`, below `cycles`."""
    return list(range(first, cycles, every)) if first < cycles else []


def slope_text(slope: float | None) -> str:
    """An RSS slope as the report gives it: MiB per 100,000 cycles, or why there is none."""
    return "too young" if slope is None else f"{slope:+.2f} MiB/100k"


async def ab(kind: str, cycles: int, every: int, slices: int, per_slice: int, window: int,
             first: int = 2_000, warm: int = 200, lifetime: float = LIFETIME,
             extra: tuple[str, ...] = ()) -> tuple[list[dict], list[Probe]]:
    """Age A for `cycles` cycles (a row per `window`: CPU per update, p50, p99, RSS, seconds),
    probing it against a fresh F at `schedule(cycles, first, every)`: `slices` alternating
    slices of `per_slice` cycles each, after `warm` cycles of F alone (first-use costs are not
    what is compared); each probe with A's RSS slope then (`rss_slope` after `lifetime`).
    `extra`: flags both `ksp-sib` processes get."""
    aging: list[dict] = []
    probes: list[Probe] = []
    at = schedule(cycles, first, every)
    with tempfile.TemporaryDirectory(prefix="ksp-soak-ab-") as root:
        a = await Contender("aged", kind, root, extra).open()
        t0 = time.perf_counter()
        try:
            while a.cycles < cycles:
                if at and a.cycles >= at[0]:
                    at.pop(0)
                    p = await probe(a, kind, root, len(probes), slices, per_slice, warm,
                                    extra)
                    p.slope = rss_slope(aging, lifetime=lifetime)
                    probes.append(p)
                    print(f"{kind} probe at {p.cycles:,} cycles: aged/fresh CPU {p.ratio:.2f} "
                          f"({spread(p.slice_ratios)}), p99 {p.p99(0) * 1e3:.2f} / "
                          f"{p.p99(1) * 1e3:.2f} ms = {p.p99_ratio:.2f}, RSS {p.rss[0]:.0f} / "
                          f"{p.rss[1]:.0f} MiB, A's RSS slope {slope_text(p.slope)}, load "
                          f"{os.getloadavg()[0]:.2f}", file=sys.stderr, flush=True)
                    continue
                step = min(window - a.cycles % window, cycles - a.cycles,
                           (at[0] - a.cycles) if at else cycles)
                m = await a.run(step)
                if a.cycles % window == 0 or a.cycles == cycles:
                    aging.append({"cycles": a.cycles, "cpu": m.cpu, "p50": m.p50, "p99": m.p99,
                                  "rss": rss_mib(a.pid), "seconds": time.perf_counter() - t0,
                                  "load": os.getloadavg()[0]})
                    if len(aging) % 10 == 0:
                        r = aging[-1]
                        print(f"{kind} aging: {r['cycles']:,} cycles, {r['cpu'] * 1e6:.0f} µs "
                              f"CPU/update, p99 {r['p99'] * 1e3:.2f} ms, {r['rss']:.0f} MiB, "
                              f"{r['seconds']:.0f} s", file=sys.stderr, flush=True)
        finally:
            await a.close()
    return aging, probes


async def probe(a: Contender, kind: str, root: str, n: int, slices: int, per_slice: int,
                warm: int, extra: tuple[str, ...] = ()) -> Probe:
    """A fresh F against `a`: `slices` alternating slices of `per_slice` cycles each."""
    began = a.cycles
    f = await Contender(f"fresh{n}", kind, root, extra).open()
    try:
        await f.run(warm)
        pairs = [await alternate(a, f, per_slice) for _ in range(slices)]
        return Probe(began, pairs, (rss_mib(a.pid), rss_mib(f.pid)))
    finally:
        await f.close()
        if kind == "disk":
            import shutil

            shutil.rmtree(os.path.join(root, f.name), ignore_errors=True)


HEADERS = ["store", "A's cycles", "aged CPU µs/update", "fresh CPU µs/update",
           "aged/fresh CPU", "per slice min / median / max", "aged/fresh p99",
           "alike: 95 % band", "p99 aged / fresh ms", "RSS aged / fresh MiB", "A's RSS slope MiB/100k"]


def table_rows(results: dict[str, tuple[list[dict], list[Probe]]]) -> list[list[str]]:
    body = []
    for kind, (_, probes) in results.items():
        for p in probes:
            n = len(p.slices)
            body.append([kind, f"{p.cycles:,}", f"{sum(a.cpu for a, _ in p.slices) / n * 1e6:.0f}",
                         f"{sum(f.cpu for _, f in p.slices) / n * 1e6:.0f}", f"{p.ratio:.2f}",
                         spread(p.slice_ratios), f"{p.p99_ratio:.2f}",
                         "{:.2f} – {:.2f}".format(*p.p99_band()),
                         f"{p.p99(0) * 1e3:.2f} / {p.p99(1) * 1e3:.2f}",
                         f"{p.rss[0]:.0f} / {p.rss[1]:.0f}",
                         "" if p.slope is None else f"{p.slope:+.2f}"])
        if probes:
            body.append([f"**{kind}**", "min / median / max", "", "",
                         f"**{spread([p.ratio for p in probes])}**", "",
                         f"**{spread([p.p99_ratio for p in probes])}**", "", "", "", ""])
    return body


def pooled_p99(probes: list[Probe]) -> tuple[float, float]:
    """p99 update → IND latency of the aged and of the fresh over every probe's updates."""
    return tuple(percentile([t for p in probes for pair in p.slices for t in pair[i].latencies],
                            99) for i in (0, 1))


def verdicts(results: dict[str, tuple[list[dict], list[Probe]]], lifetime: float = LIFETIME
             ) -> list[str]:
    """One line per store and target: every probe's CPU ratio and p99 ratio within 1.2, and
    A's RSS after its first `lifetime` seconds: its least and most, and flat or not
    (`rss_slope` over the last half of the run within `FLAT_MIB`)."""
    lines = []
    for kind, (aging, probes) in results.items():
        if probes:
            worst = max(probes, key=lambda p: p.ratio)
            lines.append(f"{kind}: aged/fresh CPU per update at every probe ≤ 1.2: worst "
                         f"{worst.ratio:.2f} at {worst.cycles:,} cycles: "
                         f"{'met' if worst.ratio <= 1.2 else 'NOT MET'}")
            slow = max(probes, key=lambda p: p.p99_ratio)
            pooled = pooled_p99(probes)
            above = sum(p.p99_ratio > p.p99_band()[1] for p in probes)
            lines.append(f"{kind}: aged/fresh p99 ≤ 1.2: over every probe's updates "
                         f"{pooled[0] * 1e3:.2f} / {pooled[1] * 1e3:.2f} ms = "
                         f"{pooled[0] / pooled[1]:.2f}: "
                         f"{'met' if pooled[0] <= 1.2 * pooled[1] else 'NOT MET'}; worst probe "
                         f"{slow.p99_ratio:.2f} at {slow.cycles:,} cycles; above the band two "
                         f"alike processes give: {above} of {len(probes)} probes (by chance: "
                         f"~{len(probes) * 0.025:.1f})")
        late = [r for r in aging if r["seconds"] >= lifetime]
        if late:
            rss = [r["rss"] for r in late]
            slope = rss_slope(aging, lifetime=lifetime)
            flat = ("too short to tell" if slope is None else
                    "met" if abs(slope) <= FLAT_MIB else "NOT MET")
            lines.append(f"{kind}: A's RSS flat after its first {lifetime:.0f} s (slope over the "
                         f"last half ≤ {FLAT_MIB} MiB/100k cycles): {slope_text(slope)}, "
                         f"{late[0]['rss']:.1f} MiB at {late[0]['cycles']:,} cycles → "
                         f"{late[-1]['rss']:.1f} at {late[-1]['cycles']:,} (least {min(rss):.1f}, "
                         f"most {max(rss):.1f}): {flat}")
    return lines


def plot(results: dict[str, tuple[list[dict], list[Probe]]], path: str) -> None:
    """Per store: each probe's aged/fresh CPU ratio (its slices' min–max as a bar) and p99
    ratio; A's CPU per update while it ages; A's RSS."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 3, figsize=(15, 4 * len(results)), squeeze=False)
    for (kind, (aging, probes)), (r, c, m) in zip(results.items(), axes):
        xs = [p.cycles for p in probes]
        med = [statistics.median(p.slice_ratios) for p in probes]
        r.errorbar(xs, [p.ratio for p in probes],
                   yerr=[[p.ratio - min(p.slice_ratios) for p in probes],
                         [max(p.slice_ratios) - p.ratio for p in probes]],
                   fmt="o-", capsize=3, label="CPU per update (bar: slices' min–max)")
        r.plot(xs, med, "_", color="C0", markersize=10, label="slices' median")
        r.plot(xs, [p.p99_ratio for p in probes], "s--", alpha=0.7, label="p99 latency")
        r.axhline(1.2, color="red", lw=0.8, ls=":", label="target 1.2")
        r.axhline(1.0, color="gray", lw=0.5)
        r.set(xlabel="A's update cycles", ylabel="aged ÷ fresh", title=f"{kind}: aged ÷ fresh")
        ax = [row["cycles"] for row in aging]
        c.plot(ax, [row["cpu"] * 1e6 for row in aging], ".-", label="CPU µs/update")
        c.plot(ax, [row["p99"] * 1e6 for row in aging], ".", alpha=0.5, label="p99 µs")
        c.set(xlabel="A's update cycles", ylabel="µs", yscale="log",
              title=f"{kind}: A while it ages")
        m.plot(ax, [row["rss"] for row in aging], ".-", label="A")
        m.plot(xs, [p.rss[1] for p in probes], "x", label="F at its probe")
        m.set(xlabel="A's update cycles", ylabel="RSS MiB", title=f"{kind}: resident memory",
              ylim=(0, None))
        for a in (r, c, m):
            a.grid(True, alpha=0.3)
            a.legend(fontsize=8)
    fig.suptitle("ksp-sib aged (A) against fresh (F) over UDP, 10 sensors under subscriptions "
                 "and a rule")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def load_json(path: str) -> dict[str, tuple[list[dict], list[Probe]]]:
    """The results a run wrote with --json (each probe's RSS slope from A's rows up to it)."""
    import json

    with open(path) as f:
        data = json.load(f)
    return {kind: (run["aging"], [
        Probe(p["cycles"], [(Measure(**s["aged"]), Measure(**s["fresh"])) for s in p["slices"]],
              tuple(p["rss"]), rss_slope(run["aging"], upto=p["cycles"]))
        for p in run["probes"]]) for kind, run in data.items()}


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = bench_parser(__name__, __doc__, prog, "30,000 cycles, a probe every 10,000 of 2 "
                          "slices of 250 (not 1,000,000, every 22,000, 4 of 500)")
    parser.add_argument("--ab", action="store_true", help="(as `ksp bench soak --ab`)")
    parser.add_argument("--cycles", type=int, default=1_000_000, help="cycles A ages")
    parser.add_argument("--first", type=int, default=2_000, help="A's age at the first probe")
    parser.add_argument("--every", type=int, default=22_000, help="cycles between probes")
    parser.add_argument("--slices", type=int, default=4, help="alternating slices per probe")
    parser.add_argument("--per-slice", type=int, default=500,
                        help="cycles of each process per slice")
    parser.add_argument("--window", type=int, default=2_000,
                        help="cycles per row of A's aging")
    parser.add_argument("--kind", nargs="+", choices=KINDS, default=list(KINDS),
                        help="the SIB's store: --memory, or a data directory on disk")
    parser.add_argument("--session-entries", type=int, metavar="N",
                        help="both SIBs' duplicate cache bound (`ksp-sib --max-session-entries`; "
                             "default its own, 65,536): the cache holds the requests of one "
                             "EXCHANGE_LIFETIME, so below ~265 cycles a second it never fills and "
                             "A's RSS follows the rate; a small bound fills it within seconds")
    parser.add_argument("--plot", metavar="FILE.png", help="draw the probes and A's aging")
    parser.add_argument("--json", metavar="FILE", help="write every row and probe as JSON")
    parser.add_argument("--from-json", metavar="FILE",
                        help="report (and plot) a run written by --json, running nothing")
    args = parser.parse_args(argv)
    if args.quick:
        args.cycles, args.every, args.slices, args.per_slice = 30_000, 10_000, 2, 250
    load = os.getloadavg()
    if args.from_json:  # the title's figures from the run itself
        results = load_json(args.from_json)
        aging, probes = next(iter(results.values()))
        args.cycles, args.first = aging[-1]["cycles"], probes[0].cycles
        args.every = probes[1].cycles - probes[0].cycles if len(probes) > 1 else 0
        args.slices, args.per_slice = len(probes[0].slices), len(probes[0].slices[0][0].latencies)
    else:
        extra = (() if args.session_entries is None
                 else ("--max-session-entries", str(args.session_entries)))
        results = {kind: asyncio.run(ab(kind, args.cycles, args.every, args.slices,
                                        args.per_slice, args.window, args.first, extra=extra))
                   for kind in args.kind}
    env = environment("pyoxigraph")
    print_report(f"Aged against fresh ksp-sib over UDP: A aged {args.cycles:,} cycles, a fresh F "
                 f"at {args.first:,} and every {args.every:,}, {args.slices} alternating slices "
                 f"of {args.per_slice:,} cycles each ({time.strftime('%Y-%m-%d')}, load "
                 f"{load[0]:.2f} at the start, {os.getloadavg()[0]:.2f} at the end)", HEADERS,
                 table_rows(results), markdown=args.markdown, module="tools.bench.soak",
                 prog=prog, argv=argv if args.ab else ["--ab", *argv],
                 libraries=f"{env['python']}; {env['libraries']}")
    print()
    for line in verdicts(results):
        print(line)
    if args.json:
        import json

        with open(args.json, "w") as f:
            json.dump({kind: {"aging": aging, "probes": [
                {"cycles": p.cycles, "rss": p.rss, "slope": p.slope, "slices": [
                    {"aged": vars(a), "fresh": vars(b)} for a, b in p.slices]}
                for p in probes]} for kind, (aging, probes) in results.items()}, f)
    if args.plot:
        plot(results, args.plot)
        print(f"\nplot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
