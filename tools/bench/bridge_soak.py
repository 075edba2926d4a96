"""Bridge soak benchmark (`ksp bench bridge-soak`): sensors replacing their readings through
`ksp-bridge` for a long time, under persistent queries and a rule, with devices coming and going
— what a bridge does for months — and the cost per update and the bridge's tables watched over
time.

The broker is a `ksp-sib` process (in memory, its SEPA gate on); the bridge runs in this
process (so its tables can be read) with the devices, over real UDP. Each cycle is one UPDATE
DATA by one of 10 sensors (its old reading out, the new one in), timed from sending it to the
IND of the persistent SELECT that watches that sensor; a rule (persistent DELETE/INSERT) keeps
a fan's state equal to sensor 0's reading, so a tenth of the updates also fire it. Every
`--churn` cycles a new device comes, makes a persistent query of its own (a distinct one: a
new broker subscription), reads its first result, and goes (TERMINATE, then its socket
closes).

Reported per window of cycles: update → IND p50/p99, the resident memory of this process (the
bridge and the devices) and of the broker's, and the bridge's tables — persistent operations,
broker subscriptions, the subscriber's spuids, the screen's patterns, the requests its UDP
session remembers. The target: p99 of the last window within 1.5× of the first, the tables the
same size in every window, memory flat after warm-up.
"""
from __future__ import annotations

import asyncio
import sys

from .report import bench_parser, environment, print_report, rss_mib
from .sensors import SENSORS, drive


def tables(bridge, server) -> dict[str, int]:
    return {**bridge.sizes(), "recent": server.udp.session.sizes()["recent requests"]}


async def soak(cycles: int, window: int, churn: int) -> list[dict]:
    from bridge.broker import Broker
    from bridge.service import Bridge
    from sib.testing import SibProcess
    from transports import Server

    broker_process = await asyncio.to_thread(
        SibProcess, "--memory", "--udp-port", "-1", "--tcp-port", "-1", "--coap-port", "-1",
        "--sepa-http-port", "0", "--sepa-ws-port", "0")
    ports = broker_process.ports
    try:
        async with Broker(f"http://127.0.0.1:{ports['http']}") as broker:
            bridge = await Bridge(broker, f"ws://127.0.0.1:{ports['ws']}/subscribe").start()
            server = await Server.start(bridge, udp=0)
            rows = await drive(f"udp://127.0.0.1:{server.udp.port}", cycles, window, churn,
                               lambda: {"rss": rss_mib(),
                                        "broker_rss": rss_mib(broker_process.proc.pid),
                                        **tables(bridge, server)})
            await bridge.close()
            await server.close()
    finally:
        broker_process.__exit__()
    return rows


def table(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    headers = ["cycles", "update → IND p50 ms", "p99 ms", "RSS MiB", "broker RSS MiB",
               "operations", "subscriptions", "spuids", "patterns", "requests remembered"]
    return headers, [[f"{r['cycles']:,}", f"{r['p50'] * 1e3:.2f}", f"{r['p99'] * 1e3:.2f}",
                      f"{r['rss']:.0f}", f"{r['broker_rss']:.0f}", str(r["operations"]),
                      str(r["subscriptions"]), str(r["spuids"]), str(r["patterns"]),
                      f"{r['recent']:,}"] for r in rows]


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = bench_parser(__name__, __doc__, prog, "2,000 cycles, windows of 500")
    parser.add_argument("--cycles", type=int, default=50_000)
    parser.add_argument("--window", type=int, default=5_000, help="cycles per row")
    parser.add_argument("--churn", type=int, default=50,
                        help="a device comes, subscribes and goes every N cycles")
    args = parser.parse_args(argv)
    if args.quick:
        args.cycles, args.window = 2_000, 500
    rows = asyncio.run(soak(args.cycles, args.window, args.churn))
    env = environment("aiohttp", "pyoxigraph")
    growth = rows[-1]["p99"] / rows[0]["p99"]
    title = (f"Bridge soak: {SENSORS} sensors' updates through ksp-bridge, {SENSORS} persistent "
             f"queries and a rule, a device coming and going every {args.churn} cycles, "
             f"{env['python']}")
    print_report(title, *table(rows), markdown=args.markdown, module="tools.bench.bridge_soak",
                 prog=prog, argv=argv, libraries=env["libraries"])
    print(f"\np99 last window / first = {growth:.2f} (target ≤ 1.5): "
          f"{'met' if growth <= 1.5 else 'NOT MET'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
