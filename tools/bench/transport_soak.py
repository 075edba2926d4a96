"""Transport soak benchmark (`ksp bench transport-soak`): sensors replacing their readings over
KSP/UDP, KSP/TCP and KSP/CoAP for a long time, under persistent queries and a rule, with
devices coming and going — what a gateway's listeners do for months — and the cost per update
and the listener's tables watched over time.

The SIB runs in this process on its in-memory store (so the listener's tables can be read),
behind one real listener on loopback; the workload is the bridge soak's (`tools/bench/sensors.py`:
10 sensors, a persistent SELECT watching each, a rule, every `--churn` cycles a new device with
its own persistent query), through `transports.connect` clients. Over a long run the tables
keyed by address and by (KP, TID) see a new entry per device, and TIDs wrap.

Reported per window of cycles: update → IND p50/p99, this process's resident memory, and the
listener's tables (`SIBSession.sizes()`; over CoAP `CoapServer.sizes()`). The target: p99 of
the last window within 1.5× of the first, every table bounded (by `max_entries`, which the run
sets low so that a long run reaches it), memory flat after warm-up.
"""
from __future__ import annotations

import asyncio
import sys
import time

from .report import bench_parser, environment, print_report, rss_mib
from .sensors import SENSORS, drive

TRANSPORTS = ("udp", "tcp", "coap")
#: Each listener table's bound in the run: low, so that a run of minutes fills the tables a
#: gateway fills in days (the default is 65,536), and a table that outgrows it shows.
MAX_ENTRIES = 2_048


async def soak(transport: str, cycles: int, window: int, churn: int,
               max_entries: int = MAX_ENTRIES, rate: float | None = None) -> list[dict]:
    from ksp.session import SessionOptions
    from sib import QuadStore, Sib
    from transports import Server

    store = QuadStore(maintain_after=10_000)
    sib = await Sib(store).start()
    server = await Server.start(sib, **{transport: 0},
                                options=SessionOptions(max_entries=max_entries))
    listener = getattr(server, transport)
    tables = listener.sizes if transport == "coap" else listener.session.sizes
    try:
        return await drive(f"{transport}://127.0.0.1:{listener.port}", cycles, window, churn,
                           lambda: {"rss": rss_mib(), "tables": tables()}, rate)
    finally:
        await server.close()
        await sib.close()
        store.close()


def table(results: dict[str, list[dict]]) -> tuple[list[str], list[list[str]]]:
    names = list(dict.fromkeys(name for rows in results.values() for r in rows
                               for name in r["tables"]))
    headers = ["transport", "cycles", "update → IND p50 ms", "p99 ms", "RSS MiB", *names]
    body = []
    for transport, rows in results.items():
        for r in rows:
            body.append([transport, f"{r['cycles']:,}", f"{r['p50'] * 1e3:.2f}",
                         f"{r['p99'] * 1e3:.2f}", f"{r['rss']:.0f}",
                         *(f"{r['tables'][name]:,}" if name in r["tables"] else ""
                           for name in names)])
    return headers, body


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = bench_parser(__name__, __doc__, prog, "2,000 cycles per transport, windows of 500")
    parser.add_argument("--cycles", type=int, default=50_000, help="update cycles per transport")
    parser.add_argument("--window", type=int, default=5_000, help="cycles per row")
    parser.add_argument("--churn", type=int, default=10,
                        help="a device comes, subscribes and goes every N cycles")
    parser.add_argument("--transport", nargs="+", choices=TRANSPORTS, default=list(TRANSPORTS))
    parser.add_argument("--rate", type=float, metavar="R",
                        help="at most R cycles a second (CoAP: see docs/coap-binding.md's "
                             "limit on notifications)")
    args = parser.parse_args(argv)
    if args.quick:
        args.cycles, args.window = 2_000, 500
    results = {}
    for transport in args.transport:
        t0 = time.perf_counter()
        results[transport] = asyncio.run(soak(transport, args.cycles, args.window, args.churn,
                                              rate=args.rate))
        print(f"{transport}: {args.cycles:,} cycles in {time.perf_counter() - t0:.0f} s",
              file=sys.stderr)
    env = environment("aiocoap", "pyoxigraph")
    title = (f"Transport soak: {SENSORS} sensors' updates to an in-process SIB over each "
             f"listener, {SENSORS} persistent queries and a rule, a device coming and going "
             f"every {args.churn} cycles, tables bounded at {MAX_ENTRIES:,}"
             + (f", at most {args.rate:g} cycles/s" if args.rate else "")
             + f", {env['python']}")
    print_report(title, *table(results), markdown=args.markdown,
                 module="tools.bench.transport_soak", prog=prog, argv=argv,
                 libraries=env["libraries"])
    print()
    for transport, rows in results.items():
        growth = rows[-1]["p99"] / rows[0]["p99"]
        print(f"{transport}: p99 last window / first = {growth:.2f} (target ≤ 1.5): "
              f"{'met' if growth <= 1.5 else 'NOT MET'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
