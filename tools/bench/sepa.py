"""SEPA gate benchmark: update → WebSocket notification, smart (the SIB's pattern index screens
the subscriptions, `sib.sepa.screen`) against naive (every subscription evaluated after every
update, as SEPA's reference broker does), in one run.

Run as ``python -m tools.bench.sepa [--quick] [--triples N] [--subscriptions 10,100,...]``.

Workload: a store of ``--triples`` triples (100,000 by default: 100 watched sensors, the rest
filler of the same shape, as `tools.bench.sib`), and for each size n, n distinct SEPA
subscriptions ``SELECT ?v WHERE { <sensor_k> :value ?v FILTER(?v > -j) }`` (subscription j
watches sensor k = j mod 100) on sockets of at most 1,000 subscriptions each. Each update moves
one watched sensor to a new value (``DELETE … INSERT … WHERE``), so about 1 % of the
subscriptions (at least one: with 10, 10 %) are affected and each gets a notification.

Writers: ``http`` posts the update to the gate's ``/update``; ``ksp`` sends it as a KSP UPDATE
from a KP over UDP (a device writing, SEPA clients subscribed). An update is timed from sending
it until the last of its notifications has arrived (the next update is sent only then); the
clients run in the SIB's process and event loop, so the numbers include both ends of the
sockets. The smart and naive SIBs of each n take their updates alternately, so noise hits them
alike. Reported per n and writer: updates/s and p50/p99 latency for each mode, and the ratio of
the update rates.
"""
from __future__ import annotations

import asyncio
import gc
import json
import sys
import time

import aiohttp

from sib import Sib
from sib.sepa import SepaGate
from transports import Server
from transports.client import connect

from .report import bench_parser, environment, percentile, print_report
from .sib import EX, WATCHED, seed_store

PER_SOCKET = 1000
PRE = f"PREFIX b: <{EX}> "


def subscription(j: int) -> str:
    return PRE + f"SELECT ?v WHERE {{ b:sensor{j % WATCHED} b:value ?v FILTER(?v > -{j + 1}) }}"


def update(k: int, value: int) -> str:
    return PRE + (f"DELETE {{ b:sensor{k} b:value ?old }} INSERT {{ b:sensor{k} b:value {value} }}"
                  f" WHERE {{ b:sensor{k} b:value ?old }}")


class Side:
    """One SIB with its gate, n subscriptions and a writer."""

    def __init__(self, triples: int, n: int, smart: bool) -> None:
        self.triples, self.n, self.smart = triples, n, smart
        self.latencies: list[float] = []  # ms, one per update
        self.received = 0  # notifications after the first ones
        self._waiting = 0
        self._done: asyncio.Event | None = None
        self._last = 0.0

    async def setup(self) -> None:
        self.sib = await Sib(seed_store(self.triples), smart=self.smart).start()
        self.gate = await SepaGate(self.sib, http_port=0, ws_port=0,
                                   max_subscriptions=max(10_000, self.n),
                                   max_socket_subscriptions=PER_SOCKET).start()
        self.server = await Server.start(self.sib, "127.0.0.1", udp=0)
        self.http = aiohttp.ClientSession()
        self.kp = await connect(f"udp://127.0.0.1:{self.server.udp.port}")
        ws_url = f"ws://127.0.0.1:{self.gate.ws_port}/subscribe"
        self.sockets = []
        self.readers = []
        for first in range(0, self.n, PER_SOCKET):
            ws = await self.http.ws_connect(ws_url, max_msg_size=0)
            self.sockets.append(ws)
            for j in range(first, min(self.n, first + PER_SOCKET)):
                await ws.send_str(json.dumps({"subscribe": {"sparql": subscription(j),
                                                            "alias": str(j)}}))
                msg = json.loads((await ws.receive()).data)
                assert "notification" in msg, msg
            self.readers.append(asyncio.ensure_future(self._read(ws)))

    async def _read(self, ws) -> None:
        async for msg in ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                break
            self._last = time.perf_counter()
            self.received += 1
            self._waiting -= 1
            if self._waiting <= 0 and self._done is not None:
                self._done.set()

    async def one(self, writer: str, k: int, value: int) -> None:
        affected = len(range(k, self.n, WATCHED))
        self._waiting, self._done = affected, asyncio.Event()
        start = time.perf_counter()
        if writer == "http":
            async with self.http.post(
                    f"http://127.0.0.1:{self.gate.http_port}/update", data=update(k, value),
                    headers={"Content-Type": "application/sparql-update"}) as r:
                assert r.status == 200, await r.text()
        else:
            await self.kp.update(update(k, value))
        await asyncio.wait_for(self._done.wait(), 600)
        self.latencies.append((self._last - start) * 1e3)

    async def close(self) -> None:
        for ws in self.sockets:
            await ws.close()
        for task in self.readers:
            task.cancel()
        await self.kp.close()
        await self.http.close()
        await self.server.close()
        await self.gate.close()
        await self.sib.close()


async def run(triples: int, sizes: list[int], updates: int, naive_updates: int) -> list[dict]:
    out = []
    for n in sizes:
        for writer in ("http", "ksp"):
            sides = {mode: Side(triples, n, mode == "smart") for mode in ("smart", "naive")}
            for side in sides.values():
                await side.setup()
            gc.collect()
            value = 1
            for i in range(updates):
                for mode, side in sides.items():
                    if mode == "naive" and i >= naive_updates:
                        continue
                    value += 1
                    await side.one(writer, i % min(n, WATCHED), value)
            row = {"n": n, "writer": writer}
            for mode, side in sides.items():
                lat = side.latencies
                row[mode] = {"rate": len(lat) / (sum(lat) / 1e3),  # updates / time in them
                             "p50": percentile(lat, 50), "p99": percentile(lat, 99), "updates": len(lat),
                             "evaluations": side.gate.broker.evaluations,
                             "notifications": side.received}
                await side.close()
            out.append(row)
            print(f"n={n} {writer}: smart {row['smart']['rate']:.0f}/s p99 "
                  f"{row['smart']['p99']:.2f} ms, naive {row['naive']['rate']:.1f}/s",
                  file=sys.stderr)
    return out


def table(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    headers = ["subscriptions", "writer", "smart updates/s", "smart p50 ms", "smart p99 ms",
               "naive updates/s", "naive p50 ms", "naive p99 ms", "smart ÷ naive"]
    body = []
    for r in rows:
        s, v = r["smart"], r["naive"]
        body.append([f"{r['n']:,}", r["writer"], f"{s['rate']:,.0f}", f"{s['p50']:.2f}",
                     f"{s['p99']:.2f}", f"{v['rate']:,.1f}", f"{v['p50']:.2f}",
                     f"{v['p99']:.2f}", f"**{s['rate'] / v['rate']:.1f}×**"])
    return headers, body


def main(argv: list[str] | None = None, prog: str | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    parser = bench_parser(__name__, __doc__, prog,
                          "10,000 triples, 10 and 100 subscriptions, 20 updates")
    parser.add_argument("--triples", type=int, default=100_000)
    parser.add_argument("--subscriptions", default="10,100,1000,10000")
    parser.add_argument("--updates", type=int, default=200,
                        help="updates per mode and writer (the smart side)")
    parser.add_argument("--naive-updates", type=int, default=40,
                        help="at most this many for the naive side (it is slow)")
    args = parser.parse_args(argv)
    if args.quick:
        args.triples, args.subscriptions, args.updates, args.naive_updates = \
            10_000, "10,100", 20, 20
    sizes = [int(x) for x in args.subscriptions.split(",")]
    rows = asyncio.run(run(args.triples, sizes, args.updates, args.naive_updates))
    headers, body = table(rows)
    env = environment("pyoxigraph", "aiohttp")
    title = (f"SEPA gate: HTTP or KSP update → WebSocket notification, {args.triples:,} "
             f"triples, ~1 % of the subscriptions affected per update, clients in the SIB's "
             f"process, {env['python']}")
    print_report(title, headers, body, markdown=args.markdown, module="tools.bench.sepa", prog=prog,
                 argv=argv, libraries=env["libraries"])


if __name__ == "__main__":
    main()
