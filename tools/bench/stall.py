"""No request stalls the SIB: a sensor's update → IND latency through a real `ksp-sib`, quiet and
while other clients send it the heaviest and most hostile requests they can.

Run as ``python -m tools.bench.stall [--quick] [--markdown]`` or ``ksp bench stall``. One
``ksp-sib --memory`` (its own process) holding 40 triples; a sensor KP writes its reading over
UDP every 20 ms (UPDATE DATA) and a watcher KP's persistent query over UDP gets each new value
as an IND: the latency is from the update's send to its IND's arrival. Rounds alternate
between *quiet* (the sensor alone) and *hostile*, where meanwhile:

- a KP sends the four-pattern cross product (2.56 million rows; it held the SIB 28.7 s),
  again as soon as it is answered;
- a SEPA client POSTs ``COUNT(*)`` over the same cross product (one pyoxigraph step that
  cannot be stopped: its reader thread is held until it ends), again as soon as answered;
- a SEPA client POSTs a ``SERVICE`` query to a listener that never answers;
- one address opens WebSocket subscriptions as fast as it can (up to 10,000).

The hostile clients run in a process of their own, as other hosts would: in the sensor's
event loop their own work would be timed as the SIB's. Every hostile request's answer is
counted by status. Target: the sensor's p99 while
hostile within 2× of the quiet p99 of the same run, and every hostile request ended with its
status.
"""
from __future__ import annotations

import asyncio
import multiprocessing
import queue
import socket
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

from ksp import IRI, Literal, Request, Triple, Tx, Var
from ksp.terms import XSD_INTEGER

from .report import bench_parser, environment, percentile, print_report

EX = "http://example.org/stall/"
A, B, C, D, E, F, G, H, I, J, K, L = (Var(n) for n in range(12))
CROSS = Request(Tx.SELECT, 0, projection=12, where=(
    Triple(A, B, C), Triple(D, E, F), Triple(G, H, I), Triple(J, K, L)))
CROSS_TEXT = "?a ?b ?c . ?d ?e ?f . ?g ?h ?i . ?j ?k ?l"
SENSOR, READING = IRI(EX + "sensor"), IRI(EX + "reading")


@dataclass
class Phase:
    name: str
    latencies: list[float] = field(default_factory=list)
    lost: int = 0


def reading(v: int) -> Literal:
    return Literal(str(v), XSD_INTEGER)


async def sensor_round(url: str, count: int, phase: Phase, period: float = 0.02) -> None:
    """`count` readings from the sensor, each timed from its update to the watcher's IND."""
    from transports import connect

    loop = asyncio.get_running_loop()
    async with await connect(url) as sensor, await connect(url) as watcher:
        sent: dict[int, float] = {}
        seen: asyncio.Queue = asyncio.Queue()
        sub = watcher.subscribe(Request(Tx.SELECT_PERSISTENT, 0, projection=1,
                                        where=(Triple(SENSOR, READING, A),)))
        async with sub:
            async def watch():
                async for state in sub:
                    for row in state.result.rows:
                        v = int(row[0])
                        if v in sent:
                            await seen.put((v, loop.time()))
            watching = asyncio.ensure_future(watch())
            base = int(time.time() * 1000) % 1_000_000 * 1000
            last = None
            for k in range(count):
                v = base + k
                delete = () if last is None else (Triple(SENSOR, READING, reading(last)),)
                sent[v] = loop.time()
                await sensor.request(Request(Tx.UPDATE_DATA, 0, delete=delete,
                                             insert=(Triple(SENSOR, READING, reading(v)),)))
                last = v
                await asyncio.sleep(period)
            deadline = loop.time() + 30
            got: dict[int, float] = {}
            while len(got) < count and loop.time() < deadline:
                try:
                    v, at = await asyncio.wait_for(seen.get(), deadline - loop.time())
                except TimeoutError:
                    break
                got.setdefault(v, at)
            watching.cancel()
    # A state overtaken by the next before its IND left is not an IND of its own (each IND
    # is the whole current result): those count as lost, not as latency.
    for v, at in got.items():
        phase.latencies.append(at - sent[v])
    phase.lost += count - len(got)


class Hostile:
    """The hostile clients, running until `stop` is set; `statuses` counts their answers."""

    KINDS = ("cross", "count", "service", "flood")

    def __init__(self, ksp_url: str, http: str, ws: str, kinds=KINDS) -> None:
        self.ksp_url, self.http, self.ws, self.kinds = ksp_url, http, ws, kinds
        self.statuses: Counter = Counter()
        self.stop = asyncio.Event()
        self.silent = socket.socket()  # a SERVICE endpoint that never answers
        self.silent.bind(("127.0.0.1", 0))
        self.silent.listen(64)

    async def run(self) -> None:
        import aiohttp

        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as http:
            runs = {"cross": self.cross, "count": lambda: self.count(http),
                    "service": lambda: self.service(http), "flood": lambda: self.flood(http)}
            await asyncio.gather(*(runs[kind]() for kind in self.kinds))

    async def cross(self) -> None:
        from transports import connect
        from transports.errors import KspError

        async with await connect(self.ksp_url) as kp:
            while not self.stop.is_set():
                try:
                    response = await kp.request(CROSS)
                    self.statuses[f"KSP cross product: {response.status.name}"] += 1
                except KspError as exc:
                    self.statuses[f"KSP cross product: {type(exc).__name__} {exc}"] += 1

    async def _post(self, http, name: str, query: str) -> None:
        while not self.stop.is_set():
            try:
                async with http.post(self.http + "/query", data={"query": query}) as r:
                    body = await r.json(content_type=None)
                    error = body.get("error", "") if isinstance(body, dict) else ""
                    self.statuses[f"{name}: {r.status} {error}".rstrip()] += 1
            except Exception as exc:  # counted: a hostile request must end somehow
                self.statuses[f"{name}: {type(exc).__name__}"] += 1

    async def count(self, http) -> None:
        await self._post(http, "SEPA COUNT", f"SELECT (COUNT(*) AS ?n) WHERE {{ {CROSS_TEXT} }}")

    async def service(self, http) -> None:
        port = self.silent.getsockname()[1]
        await self._post(http, "SEPA SERVICE", "SELECT * WHERE { SERVICE "
                         f"<http://127.0.0.1:{port}/sparql> {{ ?s ?p ?o }} }}")

    async def flood(self, http, most: int = 10_000) -> None:
        async with http.ws_connect(self.ws) as ws:
            for k in range(most):
                if self.stop.is_set():
                    return
                await ws.send_json({"subscribe": {
                    "sparql": f"SELECT * WHERE {{ <{EX}flood{k}> ?p ?o }}", "alias": str(k)}})
                frame = await ws.receive_json()
                status = frame.get("status_code") or "subscribed"
                self.statuses[f"SEPA subscription flood: {status}"] += 1
            await self.stop.wait()


def hostile_process(ksp_url: str, http: str, ws: str, kinds, started, stop, out) -> None:
    """The hostile clients in a process of their own, as other hosts would be: in the
    sensor's event loop their own work (thousands of requests a second) would be timed as
    the SIB's. Runs until `stop` is set, then puts its `statuses` on `out`."""
    async def main() -> Counter:
        bad = Hostile(ksp_url, http, ws, kinds)
        task = asyncio.ensure_future(bad.run())
        started.set()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, stop.wait)
        bad.stop.set()
        try:
            await asyncio.wait_for(task, 120)
        except TimeoutError:
            bad.statuses["hostile clients still waiting after 120 s"] += 1
        bad.silent.close()
        return bad.statuses

    out.put(dict(asyncio.run(main())))


def measure(rounds: int, per_round: int, kinds=Hostile.KINDS) -> tuple[Phase, Phase, Counter]:
    from sib.testing import SibProcess

    quiet, hostile = Phase("quiet"), Phase("hostile")
    statuses: Counter = Counter()
    mp = multiprocessing.get_context("spawn")
    with SibProcess("--memory", "--udp-port", "0", "--tcp-port", "-1", "--coap-port", "-1",
                    "--sepa-http-port", "0", "--sepa-ws-port", "0", timeout=120) as sib:
        url = f"udp://127.0.0.1:{sib.ports['udp']}"
        http = f"http://127.0.0.1:{sib.ports['http']}"
        ws = f"ws://127.0.0.1:{sib.ports['ws']}/subscribe"

        async def main() -> None:
            from transports import connect

            loop = asyncio.get_running_loop()

            async with await connect(url) as kp:
                await kp.request(Request(Tx.INSERT_DATA, 0, insert=tuple(
                    Triple(IRI(f"{EX}s{i}"), IRI(EX + "p"), reading(i)) for i in range(40))))
            for r in range(rounds):
                await sensor_round(url, per_round, quiet)
                started, stop, out = mp.Event(), mp.Event(), mp.Queue()
                bad = mp.Process(target=hostile_process,
                                 args=(url, http, ws, kinds, started, stop, out), daemon=True)
                bad.start()
                await loop.run_in_executor(None, started.wait, 60)
                await asyncio.sleep(1.0)  # the hostile load under way
                await sensor_round(url, per_round, hostile)
                stop.set()
                try:
                    statuses.update(await loop.run_in_executor(None, out.get, True, 180))
                except queue.Empty:
                    statuses["hostile clients not ended after 180 s"] += 1
                bad.join(10)
                if bad.is_alive():
                    bad.kill()
                print(f"round {r + 1}: quiet p99 {percentile(quiet.latencies, 99) * 1e3:.1f} ms,"
                      f" hostile p99 {percentile(hostile.latencies, 99) * 1e3:.1f} ms",
                      file=sys.stderr, flush=True)

        asyncio.run(main())
        sib.stop()
    return quiet, hostile, statuses


HEADERS = ["sensor update → IND", "INDs", "lost (overtaken)", "p50 ms", "p99 ms", "max ms",
           "p99 ÷ quiet p99"]


def table_rows(quiet: Phase, hostile: Phase) -> list[list[str]]:
    base = percentile(quiet.latencies, 99)
    return [[p.name, f"{len(p.latencies):,}", f"{p.lost}",
             f"{percentile(p.latencies, 50) * 1e3:.2f}",
             f"{percentile(p.latencies, 99) * 1e3:.2f}", f"{max(p.latencies) * 1e3:.2f}",
             f"{percentile(p.latencies, 99) / base:.2f}"] for p in (quiet, hostile)]


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = bench_parser("tools.bench.stall", __doc__, prog, "2 rounds × 50 readings, not 5 × 200")
    parser.add_argument("--hostile", default=",".join(Hostile.KINDS),
                        help="which hostile clients run: " + ", ".join(Hostile.KINDS))
    args = parser.parse_args(argv)
    rounds, per_round = (2, 50) if args.quick else (5, 200)
    kinds = tuple(k.strip() for k in args.hostile.split(",") if k.strip())
    if set(kinds) - set(Hostile.KINDS):
        parser.error(f"--hostile: one of {', '.join(Hostile.KINDS)}")
    quiet, hostile, statuses = measure(rounds, per_round, kinds)
    env = environment("pyoxigraph", "aiohttp")
    print_report(f"The sensor's latency while others send hostile requests "
                 f"({rounds} rounds × {per_round}, {time.strftime('%Y-%m-%d')})", HEADERS,
                 table_rows(quiet, hostile), markdown=args.markdown, module="tools.bench.stall",
                 prog=prog, argv=argv, libraries=f"{env['python']}; {env['libraries']}")
    print("\nHostile requests, by how they ended:\n")
    for name, n in sorted(statuses.items()):
        print(f"- {name}: {n:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
