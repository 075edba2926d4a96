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

``--guard`` compares instead the gate behind the connection limits `ksp-sib` gives it
(`sib.cli.sepa_connections` of the default configuration: 1,024 connections in all, 64 per
address) against the gate without them, both smart, with two HTTP writers: ``http`` (one
kept-alive connection, as above) and ``http-new`` (a new connection for each update, where
the guard's admission is paid). Reported: the guarded rate over the plain one.
"""
from __future__ import annotations

import asyncio
import gc
import json
import sys
import time

import aiohttp

from sib import Sib
from sib.cli import sepa_connections
from sib.config import Config
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
    """One SIB with its gate, n subscriptions and a writer; `guarded`: the gate behind the
    connection limits `ksp-sib` gives it."""

    def __init__(self, triples: int, n: int, smart: bool, guarded: bool = False) -> None:
        self.triples, self.n, self.smart = triples, n, smart
        self.guard = sepa_connections(Config()) if guarded else None
        self.latencies: list[float] = []  # ms, one per update
        self.received = 0  # notifications after the first ones
        self._waiting = 0
        self._done: asyncio.Event | None = None
        self._last = 0.0

    async def setup(self) -> None:
        self.sib = await Sib(seed_store(self.triples), smart=self.smart).start()
        self.gate = await SepaGate(self.sib, http_port=0, ws_port=0,
                                   max_subscriptions=max(10_000, self.n),
                                   max_socket_subscriptions=PER_SOCKET,
                                   connections=self.guard).start()
        self.server = await Server.start(self.sib, "127.0.0.1", udp=0)
        self.http = aiohttp.ClientSession()
        self.http_new = aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True))
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
        if writer in ("http", "http-new"):
            http = self.http if writer == "http" else self.http_new
            async with http.post(
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
        await self.http_new.close()
        await self.server.close()
        await self.gate.close()
        await self.sib.close()


MODES = {False: ("smart", "naive"), True: ("plain", "guarded")}
WRITERS = {False: ("http", "ksp"), True: ("http", "http-new")}


async def run(triples: int, sizes: list[int], updates: int, naive_updates: int,
              guard: bool = False) -> list[dict]:
    """Rows per n and writer; `guard`: plain against guarded (both smart, each `updates`
    updates) rather than smart against naive."""
    out = []
    first, second = MODES[guard]
    for n in sizes:
        for writer in WRITERS[guard]:
            sides = {mode: Side(triples, n, smart=mode != "naive", guarded=mode == "guarded")
                     for mode in (first, second)}
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
                             "p50": percentile(lat, 50), "p99": percentile(lat, 99),
                             "updates": len(lat), "evaluations": side.gate.broker.evaluations,
                             "notifications": side.received}
                if side.guard is not None:
                    row[mode]["held"] = len(side.guard)
                    row[mode]["refused"] = sum(side.guard.refused.values())
                await side.close()
            out.append(row)
            print(f"n={n} {writer}: {first} {row[first]['rate']:.0f}/s p99 "
                  f"{row[first]['p99']:.2f} ms, {second} {row[second]['rate']:.1f}/s",
                  file=sys.stderr)
    return out


def table(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Smart against naive (smart ÷ naive), or plain against guarded (guarded ÷ plain)."""
    guard = "guarded" in rows[0]
    first, second = MODES[guard]
    headers = ["subscriptions", "writer"]
    for mode in (first, second):
        headers += [f"{mode} updates/s", f"{mode} p50 ms", f"{mode} p99 ms"]
    headers.append("guarded ÷ plain" if guard else "smart ÷ naive")
    body = []
    for r in rows:
        s, v = r[first], r[second]
        ratio = f"{v['rate'] / s['rate']:.2f}" if guard else f"{s['rate'] / v['rate']:.1f}"
        body.append([f"{r['n']:,}", r["writer"], f"{s['rate']:,.0f}", f"{s['p50']:.2f}",
                     f"{s['p99']:.2f}", f"{v['rate']:,.{0 if guard else 1}f}",
                     f"{v['p50']:.2f}", f"{v['p99']:.2f}", f"**{ratio}×**"])
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
    parser.add_argument("--guard", action="store_true",
                        help="the gate behind ksp-sib's connection limits against without")
    args = parser.parse_args(argv)
    if args.quick:
        args.triples, args.subscriptions, args.updates, args.naive_updates = \
            10_000, "10,100", 20, 20
    sizes = [int(x) for x in args.subscriptions.split(",")]
    rows = asyncio.run(run(args.triples, sizes, args.updates, args.naive_updates, args.guard))
    headers, body = table(rows)
    env = environment("pyoxigraph", "aiohttp")
    what = ("behind its connection limits and without, HTTP update on a kept-alive or a new "
            "connection" if args.guard else "HTTP or KSP update")
    title = (f"SEPA gate: {what} → WebSocket notification, {args.triples:,} triples, ~1 % of "
             f"the subscriptions affected per update, clients in the SIB's process, "
             f"{env['python']}")
    print_report(title, headers, body, markdown=args.markdown, module="tools.bench.sepa", prog=prog,
                 argv=argv, libraries=env["libraries"])


if __name__ == "__main__":
    main()
