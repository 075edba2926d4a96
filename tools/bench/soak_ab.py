"""Aged against fresh `ksp-sib` (`ksp bench soak --ab`): does a process that has served a long
soak cost more per update than a freshly started one, measured alternately in the same run?

Two real `ksp-sib` processes at a time, each with its own two KPs over UDP on loopback and the
soak's workload (`tools/bench/sensors.py`: 10 sensors replacing their readings with UPDATE DATA,
a persistent SELECT watching each, a rule keeping a fan's state equal to sensor 0's; every update
sends an IND that the watcher ACKs). Process A is aged with `--age` cycles; process B is then
started fresh and given the same base data (the same 11 triples, subscriptions and rule: the
store contents A has), and warmed with `--per-round` cycles. Then `--rounds` rounds of
`--per-round` cycles each, one cycle of A's then one of B's (so whatever else the machine does
costs both alike): the SIB process's CPU time per update (its threads' time on a CPU,
/proc/PID/task/*/schedstat) and the update → IND latency p50/p99.
Run for `--memory` and for a data directory on disk (`--kind`).

Reported per kind: each round's aged/fresh ratio of CPU per update, and their min/median/max;
while A ages, its CPU per update per `--window` (does the cost grow with the cycles?). Target:
the median ratio within 1.2.
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

    def __init__(self, name: str, kind: str, root: str) -> None:
        from sib.testing import SibProcess

        where = (("--memory",) if kind == "memory"
                 else ("--data-dir", os.path.join(root, name)))
        self.name = name
        self.proc = SibProcess(*where, "--udp-port", "0", "--tcp-port", "-1",
                               "--coap-port", "-1", timeout=120)
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
    print(f"{a.name} {got[a].cpu * 1e6:.0f} µs, {b.name} {got[b].cpu * 1e6:.0f} µs CPU/update: "
          f"ratio {got[a].cpu / got[b].cpu:.2f}", file=sys.stderr, flush=True)
    return got[a], got[b]


async def ab(kind: str, age: int, window: int, rounds: int, per_round: int
             ) -> tuple[list[dict], list[tuple[Measure, Measure]]]:
    """Age A by `age` cycles (a row per `window`), start B fresh, then `rounds` alternating
    rounds: [(aged, fresh)] per round."""
    aging: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="ksp-soak-ab-") as root:
        a = await Contender("aged", kind, root).open()
        try:
            t0 = time.perf_counter()
            while a.cycles < age:
                m = await a.run(min(window, age - a.cycles))
                aging.append({"cycles": a.cycles, "cpu": m.cpu, "p50": m.p50, "p99": m.p99,
                              "rss": rss_mib(a.pid)})
                print(f"{kind} aging: {a.cycles:,} cycles, {m.cpu * 1e6:.0f} µs CPU/update, "
                      f"p99 {m.p99 * 1e3:.2f} ms, {aging[-1]['rss']:.0f} MiB, "
                      f"{time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
            b = await Contender("fresh", kind, root).open()
            try:
                await b.run(per_round)  # warm: first-use costs are not what is compared
                pairs = [await alternate(a, b, per_round) for _ in range(rounds)]
            finally:
                await b.close()
        finally:
            await a.close()
    return aging, pairs


def ratios(pairs: list[tuple[Measure, Measure]]) -> list[float]:
    return [aged.cpu / fresh.cpu for aged, fresh in pairs]


HEADERS = ["store", "round", "aged CPU µs/update", "fresh CPU µs/update", "aged/fresh CPU",
           "aged p50/p99 ms", "fresh p50/p99 ms"]


def table_rows(results: dict[str, tuple[list[dict], list]]) -> list[list[str]]:
    body = []
    for kind, (_, pairs) in results.items():
        for r, (aged, fresh) in enumerate(pairs, 1):
            body.append([kind, str(r), f"{aged.cpu * 1e6:.0f}", f"{fresh.cpu * 1e6:.0f}",
                         f"{aged.cpu / fresh.cpu:.2f}",
                         f"{aged.p50 * 1e3:.2f} / {aged.p99 * 1e3:.2f}",
                         f"{fresh.p50 * 1e3:.2f} / {fresh.p99 * 1e3:.2f}"])
        q = ratios(pairs)
        body.append([f"**{kind}**", "min / median / max", "", "",
                     f"**{spread(q)}**", "", ""])
    return body


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = bench_parser(__name__, __doc__, prog,
                          "age 20,000 cycles, 6 rounds of 1,000 (not 200,000, 10 of 2,000)")
    parser.add_argument("--ab", action="store_true", help="(as `ksp bench soak --ab`)")
    parser.add_argument("--age", type=int, default=200_000, help="cycles that age process A")
    parser.add_argument("--window", type=int, default=10_000, help="cycles per aging row")
    parser.add_argument("--rounds", type=int, default=10, help="alternating rounds")
    parser.add_argument("--per-round", type=int, default=2_000,
                        help="cycles of each process per round")
    parser.add_argument("--kind", nargs="+", choices=KINDS, default=list(KINDS),
                        help="the SIB's store: --memory, or a data directory on disk")
    args = parser.parse_args(argv)
    if args.quick:
        args.age, args.window, args.rounds, args.per_round = 20_000, 2_000, 6, 1_000
    load = os.getloadavg()
    results = {kind: asyncio.run(ab(kind, args.age, args.window, args.rounds, args.per_round))
               for kind in args.kind}
    env = environment("pyoxigraph")
    print_report(f"Aged against fresh ksp-sib over UDP: A aged {args.age:,} cycles, then "
                 f"{args.rounds} rounds of {args.per_round:,} cycles alternating with a fresh "
                 f"B ({time.strftime('%Y-%m-%d')}, load {load[0]:.2f} at the start, "
                 f"{os.getloadavg()[0]:.2f} at the end)", HEADERS, table_rows(results),
                 markdown=args.markdown, module="tools.bench.soak", prog=prog,
                 argv=argv if args.ab else ["--ab", *argv], libraries=f"{env['python']}; "
                 f"{env['libraries']}")
    print("\nA's CPU per update while it aged (µs, per window):\n")
    for kind, (aging, _) in results.items():
        print(f"- {kind}: " + ", ".join(f"{r['cycles']:,}: {r['cpu'] * 1e6:.0f}"
                                         for r in aging))
    print()
    for kind, (_, pairs) in results.items():
        med = statistics.median(ratios(pairs))
        print(f"{kind}: median aged/fresh CPU per update = {med:.2f} (target ≤ 1.2): "
              f"{'met' if med <= 1.2 else 'NOT MET'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
