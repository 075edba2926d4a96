"""SIB benchmark: subscription processing, smart (pattern index) against naive (re-evaluate
every persistent query after every update, as SEPA's broker does), in one run.

Run as ``python -m tools.bench.sib [--quick] [--triples N] [--queries 10,100,...]``.

Workload (in-process through `Sib.submit` with an in-memory channel, or over UDP with
``--udp``): a store of ``--triples`` triples (default 100,000: 100 watched sensors, the rest
filler of the same shape), and for each size n of persistent queries, n distinct
``SELECT ?v WHERE { <sensor_k> :value ?v FILTER(?v > -j) }`` (query j watches sensor k = j mod
100; the FILTER makes every query distinct so none shares a group; the smart mode evaluates the
affected ones, which have one shape, in one store query — `sib.shapes`). Each update is an
UPDATE DATA moving one watched sensor to a new value, so about 1 % of the queries (at least
one: with 10 queries, 10 %) are affected and each sends an IND.

With ``--scenario fixed`` exactly one query is affected by every update (query 0 watches sensor 0,
which every update moves; the others watch sensors 1–99): the cost of the unaffected ones.

All SIBs (every n, both modes) have identical stores and take their updates round-robin, so
noise hits them alike. Reported per n: updates/s (updates / time spent in them) for smart and naive
and their ratio, the update-to-IND latency (submit → the last IND of that update recorded)
p50/p99 for each mode, and the smart SIB's CPU per update (this process's CPU time over its
updates: the SIB's own work, which the host's load changes far less than the rate — on this
2-core host the rate follows the CPU the SIB and the KPs get). The table's heading gives the
load average (1 min) before and after the run.

``--udp``: the same over UDP on loopback. Each SIB is served by a real `transports.UdpServer`;
the n persistent queries are sent by one subscriber KP socket (TIDs 0…n−1) that ACKs every IND,
and the updates by a writer KP socket (CON UPDATE DATA). An update is timed from sending its
datagram until its RES and all the INDs it causes have arrived (the next update is sent only
then); its latency is send → the last of its INDs received. Both KPs are minimal (they read the
4- or 6-byte header, enough to match RES/IND and ACK) and run, as devices do, outside the SIB:
in a process of their own (`RemoteKPs`, commanded over a pipe; both timestamps are taken there
with `time.monotonic_ns`). ``--kp-inprocess`` runs them in the SIB's process and event loop
instead, so that the numbers include both ends of the sockets. The machine's cores are shared
by the SIB and the KP process (the table's heading says how many there are). ``--plot FILE.png`` draws updates/s and
p99 latency against the number of persistent queries (needs the `bench` extra: matplotlib).
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import os
import socket
import statistics
import sys
import time

from ksp.codec import UDP, encode
from ksp.codes import Op, Tx, res_status
from ksp.model import Ack, Options, Request
from ksp.session import KPIdentity, SessionOptions
from ksp.terms import DEFAULT_GRAPH, IRI, Literal, Triple, Var
from sib import QuadStore, Sib

from ._remote import Remote
from .report import command_line

EX = "http://example.org/bench#"
VALUE = IRI(EX + "value")
KIND = IRI(EX + "kind")
WATCHED = 100

#: The simulated KPs subscribe with bare datagrams from loopback: address validation (wire
#: format 14) is off, as in `ksp bench fanout`; its cost is `ksp bench validation`'s.
NO_VALIDATION = SessionOptions(amplification_factor=0)


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

    durable = False  # nothing to journal: the benchmark has no data directory

    def __init__(self, kp: KPIdentity, tid: int, stats: dict) -> None:
        self.kp, self.tid, self.transport, self.stats = kp, tid, "udp", stats

    def respond(self, response) -> None:
        pass

    def indicate(self, response) -> None:
        self.stats["inds"] += 1
        self.stats["last_ind"] = time.perf_counter()

    def end(self) -> None:
        pass

    def export(self) -> None:
        return None

    def restore(self, state) -> None:
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
        self.cpu = 0.0  # this process's CPU seconds over the updates
        self.count = 0

    async def setup(self) -> None:
        kp = KPIdentity(addr=("bench", 1))
        for j in range(self.n):
            self.sib.submit(query(j, self.fixed), _Channel(kp, j, self.stats))
        await self.sib.drain()

    async def step(self) -> None:
        # a watched sensor: every update sends INDs
        k = 0 if self.fixed else self.count * 37 % min(self.n, WATCHED)
        req = self._update(k)
        before = self.stats["inds"]
        t0, c0 = time.perf_counter(), time.process_time()
        self.sib.submit(req, _Channel(self.writer, req.tid, self.stats))
        await self.sib.drain()
        self.busy += time.perf_counter() - t0
        self.cpu += time.process_time() - c0
        if self.stats["inds"] > before:
            self.latencies.append(self.stats["last_ind"] - t0)
        self.count += 1

    def _update(self, k: int) -> Request:
        """UPDATE DATA moving sensor k to the next value (the values are shared by all
        contenders, since they share the store)."""
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
        return req

    async def result(self) -> dict:
        await self.sib.close()
        lat = sorted(self.latencies)
        return {
            "updates": self.count, "rate": self.count / self.busy if self.busy else 0.0,
            "inds": self.stats["inds"], "cpu": self.cpu / self.count if self.count else 0.0,
            "p50": statistics.median(lat) if lat else float("nan"),
            "p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else float("nan"),
            "evaluations": self.sib.core.evaluations,
        }


class UdpKP:
    """A KP socket reduced to what the benchmark needs: RES matched by TID, every IND ACKed
    (by its sequence number) and counted, the arrival time (`time.monotonic_ns`) of the
    latest IND kept. A plain non-blocking socket drained on each wake-up: 100 INDs arriving
    together cost one event-loop turn, as on 100 devices they would cost none of each other's."""

    def __init__(self, port: int) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
        self.sock.connect(("127.0.0.1", port))
        self.sock.setblocking(False)
        self.loop = asyncio.get_running_loop()
        self.loop.add_reader(self.sock.fileno(), self._readable)
        self.res: dict[int, asyncio.Future] = {}
        self.inds = 0
        self.last_ind = 0
        self.target: tuple[int, asyncio.Future] | None = None

    def _readable(self) -> None:
        sock = self.sock
        while True:
            try:
                data = sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # ICMP unreachable after the SIB closed
                return
            self._received(data)

    def _received(self, data: bytes) -> None:
        now = time.monotonic_ns()
        kind, tid = data[1], data[2] | data[3] << 8
        if kind > 0x7F:  # IND: ACK it with its sequence number
            self.sock.send(encode(Ack(tid, data[4] | data[5] << 8), UDP))
            self.inds += 1
            self.last_ind = now
            if self.target is not None and self.inds >= self.target[0]:
                if not self.target[1].done():
                    self.target[1].set_result(None)
            return
        fut = self.res.pop(tid, None)
        if fut is not None and not fut.done():
            fut.set_result(res_status(kind))

    def send(self, request: Request) -> asyncio.Future:
        fut = self.loop.create_future()
        self.res[request.tid] = fut
        self.sock.send(encode(request, UDP))
        return fut

    def until_inds(self, count: int) -> asyncio.Future:
        fut = self.loop.create_future()
        if self.inds >= count:
            fut.set_result(None)
        self.target = (count, fut)
        return fut

    def close(self) -> None:
        self.loop.remove_reader(self.sock.fileno())
        self.sock.close()


TIMEOUT = 120.0  # generous: naive mode at 10,000 queries on a loaded 2-core machine


class KPs:
    """The KPs of every contender: per SIB port, a subscriber socket (its n persistent
    queries, TIDs 0…n−1, every IND ACKed) and a writer socket (CON UPDATE DATA). All times
    are `time.monotonic_ns()` (CLOCK_MONOTONIC: one clock for every process on Linux)."""

    def __init__(self) -> None:
        self.kps: dict[int, tuple[UdpKP, UdpKP]] = {}

    async def subscribe(self, port: int, n: int, fixed: bool) -> None:
        subscriber, writer = self.kps[port] = (UdpKP(port), UdpKP(port))
        window = 256  # requests in flight while subscribing
        for start in range(0, n, window):
            futs = [subscriber.send(query(j, fixed)) for j in range(start, min(n, start + window))]
            statuses = await asyncio.wait_for(asyncio.gather(*futs), TIMEOUT)
            assert not any(statuses), f"subscription refused: {statuses}"

    async def update(self, port: int, request: Request, inds: int) -> tuple[int, int, int, int]:
        """Send `request`, wait for its RES and `inds` more INDs: (status, sent, last IND
        received, done) times."""
        subscriber, writer = self.kps[port]
        until = subscriber.until_inds(subscriber.inds + inds)
        t0 = time.monotonic_ns()
        status = await asyncio.wait_for(writer.send(request), TIMEOUT)
        await asyncio.wait_for(until, TIMEOUT)
        return status, t0, subscriber.last_ind, time.monotonic_ns()

    async def close(self, port: int) -> int:
        """Close the KPs of `port`; the INDs they received."""
        subscriber, writer = self.kps.pop(port)
        subscriber.close()
        writer.close()
        return subscriber.inds


def _kp_process(conn) -> None:
    """The KPs in a process of their own, as devices are: commands (method name, args) from
    `conn`, each answered with its result (or the exception)."""
    async def serve() -> None:
        kps, loop = KPs(), asyncio.get_running_loop()
        commands: asyncio.Queue = asyncio.Queue()
        loop.add_reader(conn.fileno(), lambda: commands.put_nowait(conn.recv()))
        while (command := await commands.get()) is not None:
            name, args = command
            try:
                conn.send(await getattr(kps, name)(*args))
            except Exception as exc:  # reported to the benchmark, which raises it
                conn.send(exc)
    asyncio.run(serve())


class RemoteKPs(Remote):
    """`KPs` in another process (multiprocessing, spawned): the SIB's event loop does none of
    the KPs' work, as with real devices. One command at a time."""

    def __init__(self) -> None:
        super().__init__(_kp_process, TIMEOUT * 2)

    def __getattr__(self, name: str):
        if name not in ("subscribe", "update", "close"):
            raise AttributeError(name)
        return lambda *args: self.call(name, *args)


class UdpContender(Contender):
    """A `Contender` whose SIB is served over UDP on loopback and driven by `kps` (`KPs` in
    this process, or `RemoteKPs`)."""

    def __init__(self, *args, kps: KPs | RemoteKPs) -> None:
        super().__init__(*args)
        self.kps = kps

    async def setup(self) -> None:
        from transports import Server

        self.server = await Server.start(self.sib, udp=0, options=NO_VALIDATION)
        self.port = self.server.udp.port
        await self.kps.subscribe(self.port, self.n, self.fixed)
        self.watchers = [0] * WATCHED
        for j in range(self.n):
            self.watchers[watched(j, self.fixed)] += 1

    async def step(self) -> None:
        k = 0 if self.fixed else self.count * 37 % min(self.n, WATCHED)
        req = self._update(k)
        c0 = time.process_time()
        status, t0, last, done = await self.kps.update(self.port, req, self.watchers[k])
        self.cpu += time.process_time() - c0
        assert status == 0, f"update refused: {status}"
        self.busy += (done - t0) / 1e9
        self.latencies.append((last - t0) / 1e9)
        self.stats["inds"] += self.watchers[k]
        self.count += 1

    async def result(self) -> dict:
        await self.server.close()
        await self.kps.close(self.port)
        return await super().result()


async def run_contenders(contenders: list[Contender], budget: float, max_updates: int) -> None:
    """Round-robin, one update each per round, so that a slow phase of the machine hits every
    contender alike; a contender stops after `budget` seconds of its own work (at least 3
    updates) or `max_updates`."""
    for c in contenders:
        await c.setup()
    # What setting up left for the collector is not the updates' cost: collect it now, and
    # keep the long-lived objects (stores, subscriptions) out of later full collections.
    gc.collect()
    gc.freeze()
    try:
        active = list(contenders)
        while active:
            for c in list(active):
                await c.step()
                if c.count >= max_updates or (c.count >= 3 and c.busy >= budget):
                    active.remove(c)
    finally:
        gc.unfreeze()


async def run_mode(store: QuadStore, n: int, smart: bool, budget: float, max_updates: int,
                   fixed: bool = False, shared: dict | None = None) -> dict:
    """One contender alone (for tests); `shared` as for `Contender` (the sensors' values)."""
    c = Contender(store, n, smart, fixed, {} if shared is None else shared)
    await run_contenders([c], budget, max_updates)
    return await c.result()


def _ms(x: float) -> str:
    return f"{x * 1e3:.2f}"


async def bench(triples: int, sizes: list[int], budget: float, max_updates: int,
                fixed: bool = False, udp: bool = False, kp_process: bool = True) -> list[dict]:
    """`udp`: over UDP, the KPs in a process of their own (`kp_process`) or in this one."""
    t0 = time.perf_counter()
    kps = (RemoteKPs() if kp_process else KPs()) if udp else None

    def contender(n: int, mode: str) -> Contender:
        # One store per contender: with a shared store, a naive SIB would also see (and send
        # INDs for) the other contenders' updates, which it never executed.
        args = (seed_store(triples), n, mode == "smart", fixed, {})
        return UdpContender(*args, kps=kps) if udp else Contender(*args)

    contenders = {(n, mode): contender(n, mode) for n in sizes for mode in ("smart", "naive")}
    print(f"{len(contenders)} stores of {triples:,} triples loaded in "
          f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)
    try:
        await run_contenders(list(contenders.values()), budget, max_updates)
        rows = []
        for n in sizes:
            row = {"n": n}
            for mode in ("smart", "naive"):
                row[mode] = await contenders[(n, mode)].result()
                r = row[mode]
                print(f"{n:>6,} queries, {mode:5}: {r['updates']:,} updates, "
                      f"{r['rate']:,.0f}/s, p50 {r['p50'] * 1e3:.2f} ms, "
                      f"p99 {r['p99'] * 1e3:.2f} ms, {r['inds']:,} INDs, "
                      f"CPU {r['cpu'] * 1e3:.2f} ms/update", file=sys.stderr)
            rows.append(row)
    finally:
        if isinstance(kps, RemoteKPs):
            kps.shutdown()
    return rows


def table(rows: list[dict], fixed: bool = False) -> str:
    out = ["| persistent queries | affected / update | smart updates/s | naive updates/s | "
           "smart / naive | smart IND latency p50 / p99 ms | naive IND latency p50 / p99 ms | "
           "smart SIB CPU ms / update |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        s, nv = row["smart"], row["naive"]
        affected = 1 if fixed else max(1, row["n"] // WATCHED)
        out.append(f"| {row['n']:,} | {affected} | {s['rate']:,.0f} | {nv['rate']:,.1f} | "
                   f"{s['rate'] / nv['rate']:.1f}× | {_ms(s['p50'])} / {_ms(s['p99'])} | "
                   f"{_ms(nv['p50'])} / {_ms(nv['p99'])} | {_ms(s['cpu'])} |")
    return "\n".join(out)


def targets(rows: list[dict], fixed: bool) -> str:
    """The targets, checked against this run's numbers."""
    by_n = {r["n"]: r for r in rows}
    out = []
    if 1000 in by_n:
        r = by_n[1000]
        ratio = r["smart"]["rate"] / r["naive"]["rate"]
        out.append(f"- 1,000 persistent queries: smart {ratio:.1f}× the naive update rate "
                   f"(target ≥ 20×): {'met' if ratio >= 20 else 'NOT MET'}")
    if fixed and 100 in by_n and 10000 in by_n:
        cost = by_n[100]["smart"]["rate"] / by_n[10000]["smart"]["rate"]
        out.append(f"- 100 → 10,000 unaffected queries: each update costs {cost:.2f}× more "
                   f"(target < 2×): {'met' if cost < 2 else 'NOT MET'}")
    if not fixed and 10000 in by_n:
        s = by_n[10000]["smart"]
        met = s["rate"] >= 400 and s["p99"] < 0.020
        out.append(f"- 10,000 persistent queries, 100 affected per update: {s['rate']:,.0f} "
                   f"updates/s, IND p99 {_ms(s['p99'])} ms (target ≥ 400/s with p99 < 20 ms): "
                   f"{'met' if met else 'NOT MET'}")
    worst = max((r["smart"]["p99"] for r in rows), default=float("nan"))
    out.append(f"- smart p99 update-to-IND latency, worst size: {_ms(worst)} ms "
               f"(target < 10 ms): {'met' if worst < 0.010 else 'NOT MET'}")
    return "\n".join(out)


def plot(rows: list[dict], path: str, title: str) -> None:
    """Updates/s and p99 latency against n, smart and naive, log-log, into a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = [r["n"] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for mode, style in (("smart", "o-"), ("naive", "s--")):
        a.plot(ns, [r[mode]["rate"] for r in rows], style, label=mode)
        b.plot(ns, [r[mode]["p99"] * 1e3 for r in rows], style, label=mode)
    a.set(xscale="log", yscale="log", xlabel="persistent queries", ylabel="updates/s",
          title="update rate")
    b.set(xscale="log", yscale="log", xlabel="persistent queries",
          ylabel="p99 update-to-IND latency (ms)", title="notification latency")
    b.axhline(10, color="grey", linewidth=0.8, linestyle=":", label="target: 10 ms")
    for ax in (a, b):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    ap = argparse.ArgumentParser(prog=prog,
                                 description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--triples", type=int, default=100_000, help="triples in the store")
    ap.add_argument("--queries", default="10,100,1000,10000",
                    help="comma-separated numbers of persistent queries")
    ap.add_argument("--budget", type=float, default=3.0, help="seconds of updates per mode")
    ap.add_argument("--max-updates", type=int, default=2000,
                    help="at most this many updates per mode and size")
    ap.add_argument("--scenario", choices=("one-percent", "fixed"), default="one-percent",
                    help="about 1 %% of the queries affected per update, or exactly one")
    ap.add_argument("--quick", action="store_true", help="10,000 triples, short runs")
    ap.add_argument("--udp", action="store_true", help="over UDP on loopback (real sockets)")
    ap.add_argument("--kp-inprocess", action="store_true",
                    help="with --udp: the KP sockets in the SIB's process and event loop")
    ap.add_argument("--plot", metavar="FILE.png", help="also draw the results (matplotlib)")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = ap.parse_args(argv)
    if args.quick:
        args.triples, args.budget, args.max_updates = 10_000, 0.5, 200
    sizes = [int(x) for x in args.queries.split(",")]
    fixed = args.scenario == "fixed"
    load_before = os.getloadavg()[0]
    rows = asyncio.run(bench(args.triples, sizes, args.budget, args.max_updates, fixed,
                             args.udp, not args.kp_inprocess))
    where = "in-process"
    if args.udp:
        where = "over UDP on loopback, KPs in " + (
            "the SIB's process" if args.kp_inprocess else "a process of their own")
    print(f"SIB subscription processing, {where}, {args.triples:,} triples, "
          f"{os.cpu_count()} cores, load {load_before:.2f} → {os.getloadavg()[0]:.2f} "
          f"(`{command_line('tools.bench.sib', prog, argv)}`)\n")
    print(table(rows, fixed))
    print()
    print(targets(rows, fixed))
    if args.plot:
        scenario = ("one query affected per update" if fixed
                    else "about 1 % of the queries affected per update")
        plot(rows, args.plot, f"SIB, {where}, {args.triples:,} triples, {scenario}")
        print(f"\nplot: {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
