"""Bridge benchmark: KSP through `ksp-bridge` against SEPA's HTTP and WebSocket directly, in one
run, in front of the same broker.

Run as ``python -m tools.bench.bridge [--quick] [--rounds N] [--triples N]``.

The broker is a `ksp-sib` process (in memory, its SEPA gate on); the bridge a `ksp-bridge`
process in front of it (UDP); the clients run in this process: an aiohttp session for the
direct side, KSP KPs over UDP for the bridged one. So each side crosses the same sockets a
deployment has, and the bridge's side crosses one process more — what the bridge adds.

Workload: a store of ``--triples`` triples (100 sensors with a value, the rest filler). Each
round times one of each operation on each side, the direct and the bridged sides alternating
which goes first so that noise hits both alike:

- **query**: ``SELECT ?v WHERE { :sensorK :value ?v }`` — HTTP POST ``/query`` (its JSON read)
  against a KSP SELECT over UDP (its RES decoded);
- **update**: ``DELETE { :sensorK :value ?o } INSERT { … } WHERE { … }`` on a sensor no one
  watches — HTTP POST ``/update`` against a KSP UPDATE. First with no persistent query at the
  bridge (it only forwards), then with one held (a device's persistent SELECT on another
  sensor): the bridge then reads the notifications an update caused before it answers
  (`Subscriber.flush`, one more round trip on its WebSocket), as a SIB answers an update after
  its INDs;
- **update → notification / IND**: the same update on the watched sensor, timed to the SEPA
  WebSocket notification (the direct side's subscription) against the KSP IND (the device's
  persistent SELECT through the bridge, whose subscription at the broker is the bridge's).

The KSP requests are compiled before the clock starts (a device sends prepared bytes).
Reported: p50 and p99 of each side in ms, what the bridge adds at p50 (target: at most 1 ms)
and the ratio of the p50s.
"""
from __future__ import annotations

import asyncio
import gc
import json
import sys
import time

import aiohttp

from ksp import compile_sparql
from transports.client import connect

from .report import bench_parser, environment, percentile, print_report

EX = "http://example.org/bench#"
PRE = f"PREFIX b: <{EX}> "
SENSORS = 100
WATCHED = 0  # the sensor the subscriptions watch


def query(k: int) -> str:
    return PRE + f"SELECT ?v WHERE {{ b:sensor{k} b:value ?v }}"


def update(k: int, value: int) -> str:
    return PRE + (f"DELETE {{ b:sensor{k} b:value ?old }} INSERT {{ b:sensor{k} b:value {value} }}"
                  f" WHERE {{ b:sensor{k} b:value ?old }}")


def seed(triples: int) -> list[str]:
    """INSERT DATA texts of about 10,000 triples each: the sensors, then filler."""
    lines = [f"b:sensor{k} b:value 0 ." for k in range(SENSORS)]
    lines += [f"b:thing{i} b:weight {i} ." for i in range(max(0, triples - SENSORS))]
    return [PRE + "INSERT DATA { " + " ".join(lines[i:i + 10_000]) + " }"
            for i in range(0, len(lines), 10_000)]


class Lab:
    """The broker and the bridge as processes, and both sides' clients."""

    async def setup(self, triples: int) -> None:
        from bridge.testing import BridgedSib

        self.procs = await asyncio.to_thread(BridgedSib)
        ports = self.procs.broker.ports
        self.base = f"http://127.0.0.1:{ports['http']}"
        self.http = aiohttp.ClientSession()
        for text in seed(triples):
            await self._post("/update", text, "application/sparql-update")
        self.ws = await self.http.ws_connect(f"ws://127.0.0.1:{ports['ws']}/subscribe")
        await self.ws.send_json({"subscribe": {"sparql": query(WATCHED), "alias": "bench"}})
        first = json.loads((await self.ws.receive()).data)
        assert "notification" in first, first
        url = f"udp://127.0.0.1:{self.procs.port}"
        self.kp = await connect(url)
        self.watcher = await connect(url)
        self.sub = None

    async def watch(self) -> None:
        """The device's persistent SELECT on the watched sensor, through the bridge."""
        self.sub = self.watcher.subscribe(query(WATCHED))
        await self.sub.__aenter__()
        await asyncio.wait_for(anext(self.sub), 30)  # its first result

    async def close(self) -> None:
        if self.sub is not None:
            await self.sub.__aexit__(None, None, None)
        await self.watcher.close()
        await self.kp.close()
        await self.ws.close()
        await self.http.close()
        self.procs.__exit__()

    async def _post(self, path: str, text: str, kind: str) -> bytes:
        async with self.http.post(self.base + path, data=text.encode(),
                                  headers={"Content-Type": kind}) as r:
            body = await r.read()
            assert r.status == 200, body
            return body

    # -- one timed operation each, in ms ----------------------------------------------------

    async def http_query(self, k: int) -> float:
        text = query(k)
        start = time.perf_counter()
        json.loads(await self._post("/query", text, "application/sparql-query"))
        return (time.perf_counter() - start) * 1e3

    async def ksp_query(self, k: int) -> float:
        request = compile_sparql(query(k))
        start = time.perf_counter()
        await self.kp.request(request)
        return (time.perf_counter() - start) * 1e3

    async def http_update(self, k: int, value: int) -> float:
        text = update(k, value)
        start = time.perf_counter()
        await self._post("/update", text, "application/sparql-update")
        return (time.perf_counter() - start) * 1e3

    async def ksp_update(self, k: int, value: int) -> float:
        request = compile_sparql(update(k, value))
        start = time.perf_counter()
        await self.kp.request(request)
        return (time.perf_counter() - start) * 1e3

    async def _notification(self) -> None:
        while "notification" not in json.loads(
                (await asyncio.wait_for(self.ws.receive(), 30)).data):
            pass

    async def http_notified(self, value: int) -> float:
        text = update(WATCHED, value)
        start = time.perf_counter()
        await self._post("/update", text, "application/sparql-update")
        await self._notification()
        elapsed = (time.perf_counter() - start) * 1e3
        await asyncio.wait_for(anext(self.sub), 30)  # the bridged device's IND of it
        return elapsed

    async def ksp_indicated(self, value: int) -> float:
        request = compile_sparql(update(WATCHED, value))
        start = time.perf_counter()
        sent = asyncio.ensure_future(self.kp.request(request))
        await asyncio.wait_for(anext(self.sub), 30)
        elapsed = (time.perf_counter() - start) * 1e3
        await sent  # its RES follows the IND
        await self._notification()  # the direct subscriber's notification of it
        return elapsed


#: (row label, series key) in the table's order.
ROWS = (("query", "query"), ("update", "update"),
        ("update, a persistent query held at the bridge", "update held"),
        ("update → notification / IND", "notify"))


async def run(triples: int, rounds: int, warmup: int = 10) -> list[dict]:
    lab = Lab()
    await lab.setup(triples)
    series: dict[str, list[float]] = {}
    value = 1

    async def pair(i: int, name: str, direct, bridged) -> None:
        """Both sides once, which goes first alternating; kept after the warm-up."""
        if i % 2:
            d, b = await direct(), await bridged()
        else:
            b, d = await bridged(), await direct()
        if i >= warmup:
            series.setdefault(f"{name} http", []).append(d)
            series.setdefault(f"{name} ksp", []).append(b)

    try:
        for phase in ("forwarding", "held"):
            if phase == "held":
                await lab.watch()
            gc.collect()
            for i in range(warmup + rounds):
                k = 1 + i % (SENSORS - 1)  # an unwatched sensor
                value += 2
                v = value
                if phase == "forwarding":
                    await pair(i, "query", lambda: lab.http_query(k), lambda: lab.ksp_query(k))
                    await pair(i, "update", lambda: lab.http_update(k, v),
                               lambda: lab.ksp_update(k, v + 1))
                else:
                    await pair(i, "update held", lambda: lab.http_update(k, v),
                               lambda: lab.ksp_update(k, v + 1))
                    await pair(i, "notify", lambda: lab.http_notified(v),
                               lambda: lab.ksp_indicated(v + 1))
                if i and i % 200 == 0:
                    print(f"{phase}: round {i}/{warmup + rounds}", file=sys.stderr)
    finally:
        await lab.close()
    rows = []
    for label, name in ROWS:
        d, b = series[f"{name} http"], series[f"{name} ksp"]
        rows.append({"operation": label, "n": len(d),
                     "direct_p50": percentile(d, 50), "direct_p99": percentile(d, 99),
                     "bridge_p50": percentile(b, 50), "bridge_p99": percentile(b, 99)})
    return rows


def table(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    headers = ["operation", "SEPA direct p50 ms", "p99 ms", "KSP via bridge p50 ms", "p99 ms",
               "added at p50", "bridge ÷ direct (p50)"]
    body = []
    for r in rows:
        added = r["bridge_p50"] - r["direct_p50"]
        body.append([r["operation"], f"{r['direct_p50']:.2f}", f"{r['direct_p99']:.2f}",
                     f"{r['bridge_p50']:.2f}", f"{r['bridge_p99']:.2f}",
                     f"**{added:+.2f} ms**", f"{r['bridge_p50'] / r['direct_p50']:.2f}×"])
    return headers, body


def main(argv: list[str] | None = None, prog: str | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    parser = bench_parser(__name__, __doc__, prog, "1,000 triples, 40 rounds")
    parser.add_argument("--triples", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=1_000,
                        help="timed rounds (each: one of every operation on each side)")
    args = parser.parse_args(argv)
    if args.quick:
        args.triples, args.rounds = 1_000, 40
    env = environment("aiohttp", "pyoxigraph")
    title = (f"Bridge: KSP over UDP through ksp-bridge against SEPA HTTP/WebSocket directly, "
             f"same ksp-sib broker, {args.triples:,} triples, {args.rounds:,} rounds, broker, "
             f"bridge and clients in three processes on loopback, {env['python']}")
    print_report(title, *table(asyncio.run(run(args.triples, args.rounds))),
                 markdown=args.markdown, module="tools.bench.bridge", prog=prog, argv=argv,
                 libraries=env["libraries"])


if __name__ == "__main__":
    main()
