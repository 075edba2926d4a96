"""What a silent subscription costs on the wire per hour with keepalives (wire format §2.4).

Run as ``python -m tools.bench.keepalive [--seconds S] [--keepalive K] [--markdown]`` or ``ksp
bench keepalive``. An in-process `Sib` on a UDP socket on loopback; one KP subscribes through a
relay that counts every datagram and byte each way, then nothing changes for `--seconds`
(default 30) with keepalives every `--keepalive` seconds (default 1: many periods in a short
run). Reported: datagrams and KSP bytes per keepalive period (the KP's bare ACK and the SIB's
RES), the same with the UDP and IPv4 headers (28 bytes a datagram), and what that comes to per
hour at the default keepalive of `Timing().keepalive` seconds — the figure docs/benchmarks.md
gives. The same run with keepalives off is the baseline: nothing crosses a silent link then,
which is why a listening KP could not tell an ended subscription or a gone SIB.
"""
from __future__ import annotations

import argparse
import asyncio

from ksp import Timing

from ..relay import UdpRelay

UDP_IP_HEADERS = 28
QUERY = "SELECT ?o WHERE { <http://example.org/s> <http://example.org/p> ?o }"


async def silent(seconds: float, keepalive: float) -> dict[str, list[int]]:
    """The datagrams and bytes each way while a subscription stays silent for `seconds`."""
    from sib import Sib
    from transports import Server, connect

    timing = Timing(keepalive=keepalive)
    server = await Server.start(Sib(), udp=0, timing=timing)
    relay = await UdpRelay.start(("127.0.0.1", server.udp.port))
    try:
        async with await connect(f"udp://127.0.0.1:{relay.port}", timing=timing) as kp:
            async with kp.subscribe(QUERY) as sub:
                await anext(sub)
                relay.reset()
                await asyncio.sleep(seconds)
                return {way: list(n) for way, n in relay.counts.items()}  # before TERMINATE
    finally:
        relay.close()
        await server.close()


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--keepalive", type=float, default=1.0)
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args(argv)
    on = asyncio.run(silent(args.seconds, args.keepalive))
    off = asyncio.run(silent(args.seconds, 0))
    periods = args.seconds / args.keepalive
    datagrams = (on["up"][0] + on["down"][0]) / periods
    ksp_bytes = (on["up"][1] + on["down"][1]) / periods
    wire = ksp_bytes + datagrams * UDP_IP_HEADERS
    default = Timing().keepalive
    per_hour = wire * 3600 / default
    rows = [
        ("keepalive every", f"{args.keepalive:g} s (measured), {default:g} s (default)"),
        ("silent for", f"{args.seconds:g} s, {periods:.0f} periods"),
        ("datagrams per period (up + down)", f"{datagrams:.2f}"),
        ("KSP bytes per period", f"{ksp_bytes:.1f}"),
        ("bytes with UDP/IPv4 headers per period", f"{wire:.1f}"),
        (f"per hour at {default:g} s", f"{per_hour / 1000:.1f} kB ({3600 / default:.0f} "
                                       "keepalives)"),
        ("baseline, keepalives off: datagrams in the same time",
         f"{off['up'][0] + off['down'][0]}"),
        ("liveness bound (default timing)", f"{Timing().liveness_bound:.1f} s"),
    ]
    if args.markdown:
        print("| measure | value |\n|---|---|")
        for name, value in rows:
            print(f"| {name} | {value} |")
    else:
        for name, value in rows:
            print(f"{name:>52}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
