"""SIB benchmark: subscription processing, smart (pattern index) against naive (re-evaluate
every persistent query after every update, as SEPA's broker does), in one run.

Run as ``python -m tools.bench.sib [--quick] [--triples N] [--queries 10,100,...]``.

Workload (in-process, through `Sib.submit` with an in-memory channel; the integrator extends it
to UDP on loopback): a store of ``--triples`` triples (default 100,000: 100 watched sensors, the
rest filler of the same shape), and for each size n of persistent queries, n distinct
``SELECT ?v WHERE { <sensor_k> :value ?v FILTER(?v > -j) }`` (query j watches sensor k = j mod
100; the FILTER makes every query distinct so none shares an evaluation). Each update is an
UPDATE DATA moving one watched sensor to a new value, so about 1 % of the queries (at least
one: with 10 queries, 10 %) are affected and each sends an IND.

With ``--scenario fixed`` exactly one query is affected by every update (query 0 watches sensor 0,
which every update moves; the others watch sensors 1–99): the cost of the unaffected ones.

All SIBs (every n, both modes) share the store and take their updates round-robin, so noise
hits them alike. Reported per n: updates/s (updates / time spent in them) for smart and naive
and their ratio, and the update-to-IND latency (submit → the last IND of that update recorded)
p50/p99 for each mode.
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time

from ksp.codes import Op, Tx
from ksp.model import Options, Request
from ksp.session import KPIdentity
from ksp.terms import DEFAULT_GRAPH, IRI, Literal, Triple, Var
from sib import QuadStore, Sib

EX = "http://example.org/bench#"
VALUE = IRI(EX + "value")
KIND = IRI(EX + "kind")
WATCHED = 100


def sensor(k: int) -> IRI:
    return IRI(f"{EX}sensor{k}")


def seed_store(triples: int) -> QuadStore:
    store = QuadStore()
    things = max(WATCHED, triples // 2)
    store.load(q for k in range(things) for q in (
        (sensor(k), VALUE, Literal.of(0), DEFAULT_GRAPH),
        (sensor(k), KIND, IRI(EX + f"kind{k % 10}"), DEFAULT_GRAPH)))
    return store


class _Channel:
    """Records only what the benchmark needs: when the latest IND was sent."""

    __slots__ = ("kp", "tid", "transport", "stats")

    def __init__(self, kp: KPIdentity, tid: int, stats: dict) -> None:
        self.kp, self.tid, self.transport, self.stats = kp, tid, "udp", stats

    def respond(self, response) -> None:
        pass

    def indicate(self, response) -> None:
        self.stats["inds"] += 1
        self.stats["last_ind"] = time.perf_counter()

    def end(self) -> None:
        pass


def watched(j: int, fixed: bool) -> int:
    """The sensor query j watches."""
    if fixed:
        return 0 if j == 0 else 1 + j % (WATCHED - 1)
    return j % WATCHED


def query(j: int, fixed: bool = False) -> Request:
    return Request(Tx.SELECT_PERSISTENT, j, projection=1,
                   where=(Triple(sensor(watched(j, fixed)), VALUE, Var(0)),),
                   options=Options(filters=((Var(0), Literal.of(-j), Op.GT),)))


class Contender:
    """One SIB (smart or naive) with n persistent queries over the shared store; `step` makes
    one update and times it (submit → drained; the latency is submit → last IND)."""

    def __init__(self, store: QuadStore, n: int, smart: bool, fixed: bool, shared: dict) -> None:
        self.store, self.n, self.smart, self.fixed, self.shared = store, n, smart, fixed, shared
        self.sib = Sib(store, smart=smart)
        self.stats = {"inds": 0, "last_ind": 0.0}
        self.writer = KPIdentity(addr=("writer", 1))
        self.latencies: list[float] = []
        self.busy = 0.0
        self.count = 0

    async def setup(self) -> None:
        kp = KPIdentity(addr=("bench", 1))
        for j in range(self.n):
            self.sib.submit(query(j, self.fixed), _Channel(kp, j, self.stats))
        await self.sib.drain()

    async def step(self) -> None:
        # a watched sensor: every update sends INDs
        k = 0 if self.fixed else self.count * 37 % min(self.n, WATCHED)
        values = self.shared.setdefault("values", {})
        old = values.get(k)
        if old is None:
            old = [q[2] for q in self.store.match(sensor(k), VALUE)]
        self.shared["next"] = new_value = self.shared.get("next", 0) + 1
        new = Literal.of(new_value)
        req = Request(Tx.UPDATE_DATA, self.count % 60000,
                      delete=tuple(Triple(sensor(k), VALUE, v) for v in old),
                      insert=(Triple(sensor(k), VALUE, new),))
        values[k] = [new]
        before = self.stats["inds"]
        t0 = time.perf_counter()
        self.sib.submit(req, _Channel(self.writer, req.tid, self.stats))
        await self.sib.drain()
        self.busy += time.perf_counter() - t0
        if self.stats["inds"] > before:
            self.latencies.append(self.stats["last_ind"] - t0)
        self.count += 1

    async def result(self) -> dict:
        await self.sib.close()
        lat = sorted(self.latencies)
        return {
            "updates": self.count, "rate": self.count / self.busy if self.busy else 0.0,
            "inds": self.stats["inds"],
            "p50": statistics.median(lat) if lat else float("nan"),
            "p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else float("nan"),
            "evaluations": self.sib.core.evaluations,
        }


async def run_contenders(contenders: list[Contender], budget: float, max_updates: int) -> None:
    """Round-robin, one update each per round, so that a slow phase of the machine hits every
    contender alike; a contender stops after `budget` seconds of its own work (at least 3
    updates) or `max_updates`."""
    for c in contenders:
        await c.setup()
    active = list(contenders)
    while active:
        for c in list(active):
            await c.step()
            if c.count >= max_updates or (c.count >= 3 and c.busy >= budget):
                active.remove(c)


async def run_mode(store: QuadStore, n: int, smart: bool, budget: float, max_updates: int,
                   fixed: bool = False, shared: dict | None = None) -> dict:
    """One contender alone (for tests); `shared` as for `Contender` (the sensors' values)."""
    c = Contender(store, n, smart, fixed, {} if shared is None else shared)
    await run_contenders([c], budget, max_updates)
    return await c.result()


def _ms(x: float) -> str:
    return f"{x * 1e3:.2f}"


async def bench(triples: int, sizes: list[int], budget: float, max_updates: int,
                fixed: bool = False) -> list[dict]:
    t0 = time.perf_counter()
    store = seed_store(triples)
    print(f"store: {len(store)} triples loaded in {time.perf_counter() - t0:.1f} s",
          file=sys.stderr)
    shared: dict = {}
    contenders = {(n, mode): Contender(store, n, mode == "smart", fixed, shared)
                  for n in sizes for mode in ("smart", "naive")}
    await run_contenders(list(contenders.values()), budget, max_updates)
    rows = []
    for n in sizes:
        row = {"n": n}
        for mode in ("smart", "naive"):
            row[mode] = await contenders[(n, mode)].result()
            print(f"n={n} {mode}: {row[mode]}", file=sys.stderr)
        rows.append(row)
    return rows


def table(rows: list[dict], fixed: bool = False) -> str:
    out = ["| persistent queries | affected / update | smart updates/s | naive updates/s | "
           "smart / naive | smart IND latency p50 / p99 ms | naive IND latency p50 / p99 ms |",
           "|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        s, nv = row["smart"], row["naive"]
        affected = 1 if fixed else max(1, row["n"] // WATCHED)
        out.append(f"| {row['n']:,} | {affected} | {s['rate']:,.0f} | {nv['rate']:,.1f} | "
                   f"{s['rate'] / nv['rate']:.1f}× | {_ms(s['p50'])} / {_ms(s['p99'])} | "
                   f"{_ms(nv['p50'])} / {_ms(nv['p99'])} |")
    return "\n".join(out)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    ap.add_argument("--triples", type=int, default=100_000)
    ap.add_argument("--queries", default="10,100,1000,10000",
                    help="comma-separated numbers of persistent queries")
    ap.add_argument("--budget", type=float, default=3.0, help="seconds of updates per mode")
    ap.add_argument("--max-updates", type=int, default=2000)
    ap.add_argument("--scenario", choices=("one-percent", "fixed"), default="one-percent",
                    help="about 1 %% of the queries affected per update, or exactly one")
    ap.add_argument("--quick", action="store_true", help="10,000 triples, short runs")
    args = ap.parse_args(argv)
    if args.quick:
        args.triples, args.budget, args.max_updates = 10_000, 0.5, 200
    sizes = [int(x) for x in args.queries.split(",")]
    fixed = args.scenario == "fixed"
    rows = asyncio.run(bench(args.triples, sizes, args.budget, args.max_updates, fixed))
    print(f"SIB subscription processing, in-process, {args.triples:,} triples "
          f"(`python -m tools.bench.sib {' '.join(argv or sys.argv[1:])}`)\n")
    print(table(rows, fixed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
