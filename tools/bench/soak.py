"""Soak benchmark (`ksp bench soak`): sensors replacing their readings for a long time under
persistent queries and rules — what a gateway does for months — with the cost per update
watched over time. In-process through `Sib.submit`, on the in-memory store and on the on-disk
engine (a temporary directory, as `ksp-sib --memory` runs).

Each cycle is one UPDATE DATA (a sensor's old reading out, the new one in) by one of 10
sensors; 10 persistent SELECTs watch one sensor each and one rule copies a fan state from the
readings, so every update evaluates a subscription and a rule and sends an IND. Reported per
window of cycles: update → IND latency p50/p99 (from submit to the IND, measured in the
scheduler's thread), and the process's resident memory. The target: p99 of the last window
within 1.5× of the first window's, RSS flat after warm-up. `--no-maintenance` turns the
store maintenance off (`QuadStore(maintain_after=None)`), the baseline that grows.
"""
from __future__ import annotations

import asyncio
import statistics
import sys
import time

from ksp.codes import Tx
from ksp.model import Options, Request
from ksp.terms import Literal, Triple, Var
from ksp.terms import XSD_INTEGER
from sib import QuadStore, Sib
from sib.testing import Client, ex
from .report import bench_parser, command_line, rss_mib

SENSORS = 10
VALUE, FAN, STATE = ex("value"), ex("fan"), ex("state")


def _reading(n: int) -> Literal:
    """A new value every cycle (as a sensor's counter or timestamped reading is)."""
    return Literal(str(2_000_000 + n), XSD_INTEGER)


async def soak(store: QuadStore, cycles: int, window: int, sensors: int = SENSORS,
               duration: float | None = None) -> list[dict]:
    """Run `cycles` update cycles of `sensors` sensors on a SIB over `store` (or stop at the
    first window boundary after `duration` seconds); one row per `window` cycles."""
    deadline = None if duration is None else time.monotonic() + duration
    sib = Sib(store)
    kp = Client(sib, "soak")
    last = {}
    try:
        for k in range(sensors):  # first readings, the subscriptions, the rule
            last[k] = _reading(0)
            await kp.call(Request(Tx.INSERT_DATA, 1, insert=(Triple(ex(f"s{k}"), VALUE,
                                                                     last[k]),)))
            await kp.call(Request(Tx.SELECT_PERSISTENT, 100 + k, projection=1,
                                  where=(Triple(ex(f"s{k}"), VALUE, Var(0)),)))
        # The rule: the fan's state follows sensor 0 (its old state out, the new one in).
        await kp.call(Request(Tx.INSERT_DATA, 2, insert=(Triple(FAN, STATE, last[0]),)))
        await kp.call(Request(Tx.UPDATE_PERSISTENT, 99, delete=(Triple(FAN, STATE, Var(1)),),
                              insert=(Triple(FAN, STATE, Var(0)),),
                              where=(Triple(ex("s0"), VALUE, Var(0)),
                                     Triple(FAN, STATE, Var(1)))))
        rows, latencies = [], []
        for n in range(1, cycles + 1):
            k = n % sensors
            new = _reading(n)
            before = len(kp.log)
            started = time.perf_counter()
            kp.submit(Request(Tx.UPDATE_DATA, n % 60000 + 1000, confirmable=True,
                              delete=(Triple(ex(f"s{k}"), VALUE, last[k]),),
                              insert=(Triple(ex(f"s{k}"), VALUE, new),), options=Options()))
            await sib.drain()
            assert any(kind == "ind" for kind, *_ in kp.log[before:]), "no IND for an update"
            latencies.append(time.perf_counter() - started)
            last[k] = new
            kp.log.clear()
            if n % window == 0:
                latencies.sort()
                rows.append({"cycles": n, "p50": statistics.median(latencies),
                             "p99": latencies[int(len(latencies) * 0.99)],
                             "rss": rss_mib(), "maintenance": store.maintenance_runs})
                latencies = []
                if deadline is not None and time.monotonic() > deadline:
                    break
        return rows
    finally:
        await sib.close()


def growth(rows: list[dict], key: str = "p99") -> float:
    """`key` (p99 or p50) of the last window over the first window's."""
    return rows[-1][key] / rows[0][key]


def table(results: dict[str, list[dict]], markdown: bool) -> str:
    head = ["store", "cycles", "p50 ms", "p99 ms", "RSS MiB", "maintenance runs"]
    lines = [f"| {' | '.join(head)} |", "|" + "---|" * len(head)]
    for name, rows in results.items():
        for r in rows:
            lines.append(f"| {name} | {r['cycles']:,} | {r['p50'] * 1e3:.3f} | "
                         f"{r['p99'] * 1e3:.3f} | {r['rss']:.0f} | {r['maintenance']} |")
    text = "\n".join(lines)
    return text if markdown else text.replace("|---", "|   ")


def plot(results: dict[str, list[dict]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for name, rows in results.items():
        xs = [r["cycles"] for r in rows]
        a.plot(xs, [r["p99"] * 1e3 for r in rows], "o-", label=f"{name} p99")
        a.plot(xs, [r["p50"] * 1e3 for r in rows], ".--", label=f"{name} p50")
        b.plot(xs, [r["rss"] for r in rows], "o-", label=name)
    a.set(xlabel="update cycles", ylabel="update → IND latency (ms)", yscale="log",
          title="cost per update over time")
    b.set(xlabel="update cycles", ylabel="resident memory (MiB)", title="memory")
    for ax in (a, b):
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.suptitle("SIB soak: sensors replacing readings under subscriptions and a rule")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--ab" in argv:  # aged against fresh ksp-sib processes: its own module
        from .soak_ab import main as ab

        return ab(argv, prog)
    parser = bench_parser("tools.bench.soak", __doc__, prog, "20,000 cycles, windows of 2,000")
    parser.add_argument("--cycles", type=int, default=200_000, help="update cycles per store")
    parser.add_argument("--window", type=int, default=10_000, help="cycles per row")
    parser.add_argument("--duration", type=float, metavar="S",
                        help="stop each store's run after S seconds (at a window's end)")
    parser.add_argument("--store", choices=("memory", "disk", "both"), default="both")
    parser.add_argument("--no-maintenance", action="store_true",
                        help="store maintenance off: the baseline that grows")
    parser.add_argument("--plot", metavar="FILE.png", help="draw latency and RSS over time")
    parser.add_argument("--ab", action="store_true",
                        help="an aged ksp-sib against a fresh one over UDP, alternating "
                             "(tools/bench/soak_ab.py; its options: --ab --help)")
    args = parser.parse_args(argv)
    if args.quick:
        args.cycles, args.window = 20_000, 2_000
    after = None if args.no_maintenance else 10_000
    results = {}
    for name in (("memory", "disk") if args.store == "both" else (args.store,)):
        store = QuadStore(temporary=name == "disk", maintain_after=after)
        t0 = time.perf_counter()
        results[name] = asyncio.run(soak(store, args.cycles, args.window,
                                         duration=args.duration))
        store.close()
        print(f"{name}: {results[name][-1]['cycles']:,} cycles in "
              f"{time.perf_counter() - t0:.0f} s", file=sys.stderr)
    print(f"SIB soak (`{command_line('tools.bench.soak', prog, argv)}`)\n")
    print(table(results, args.markdown))
    print()
    for name, rows in results.items():
        g = growth(rows)
        print(f"{name}: p99 last window / first = {g:.2f} (target ≤ 1.5): "
              f"{'met' if g <= 1.5 else 'NOT MET'}")
    if args.plot:
        plot(results, args.plot)
        print(f"\nplot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
