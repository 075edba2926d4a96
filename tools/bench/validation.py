"""Address validation benchmark (wire format 14): what the echo round trip costs a new
address, and what the budget accounting costs every request.

Run as ``python -m tools.bench.validation [--quick] [--markdown]`` or ``ksp bench validation``.
An in-process `Sib` holds 400 triples behind two UDP listeners on loopback: one with the 3×
limit (`amplification_factor` 3) and one without (0: no budgets kept, every address taken as
validated). Measured, in interleaved rounds (every contender the same number of requests per
round, the order rotating):

- ``first request, new address``: a new socket (a new source port) sends a SELECT whose answer
  is larger than 3× the request, gets ECHO REQUIRED, and sends it again with the echo value (a
  new TID): the whole exchange, as a KP's first large request after a SIB start costs;
- ``same request, validated address``: the same SELECT from a socket validated before: one
  round trip; the baseline of the first row's ratio;
- ``small SELECT, limit on`` against ``small SELECT, limit off``: a 1-row SELECT from a
  validated address, to each listener: the steady-state cost of the accounting over sockets;
- ``session only, limit on`` against ``session only, limit off``: the same 1-row request through
  a `UdpSIBSession` alone (receive the datagram, respond, take the datagram out; no sockets, no
  SIB): the accounting's cost where nothing else hides it;
- with ``--tree DIR``, ``session only, DIR``: the same loop in a process running the source
  tree DIR (another checkout, e.g. main before this change), so the limit's cost is also
  measured against the code without it.

Each ratio is per round (that round's medians; for the session-only loops, the fastest of its
five batches of 10,000), reported min/median/max over the rounds.
"""
from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ksp import UDP, Options, Request, Status, Triple, Tx, Var, encode
from ksp.codec import decode_sib_message
from ksp.session import SessionOptions
from sib import Sib
from sib.testing import ex
from transports import Server, connect

from .report import bench_parser, environment, print_report, spread

MODULE = "tools.bench.validation"
P = ex("p")
ROWS = 400


def big_select(tid: int, echo: bytes | None = None) -> bytes:
    return encode(Request(Tx.SELECT, tid, projection=2, where=(Triple(Var(0), P, Var(1)),),
                          options=Options(prefixes=(), echo=echo)), UDP)


def small_select(tid: int) -> bytes:
    return encode(Request(Tx.SELECT, tid, projection=1, where=(Triple(ex("s7"), P, Var(0)),),
                          options=Options(prefixes=())), UDP)


class Socket(asyncio.DatagramProtocol):
    """One loopback UDP socket: send a datagram, await the next one."""

    def __init__(self) -> None:
        self.waiter: asyncio.Future | None = None

    def datagram_received(self, data, addr) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(data)

    async def ask(self, data: bytes) -> bytes:
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.sendto(data)
        return await asyncio.wait_for(self.waiter, 30)

    @classmethod
    async def open(cls, port: int, host: str = "127.0.0.1") -> "Socket":
        transport, proto = await asyncio.get_running_loop().create_datagram_endpoint(
            cls, local_addr=(host, 0), remote_addr=("127.0.0.1", port))
        proto.transport = transport
        return proto


async def first_request(port: int, tid: int, n: int) -> float:
    """A new address's large SELECT with its echo round trip; seconds. The address is a new
    loopback host (127.1.x.y, the `n`-th): a new port on 127.0.0.1 may be one used before."""
    sock = await Socket.open(port, f"127.1.{n // 250}.{n % 250 + 1}")
    try:
        start = time.perf_counter()
        asked = decode_sib_message(await sock.ask(big_select(tid)), UDP, Tx.SELECT)
        assert asked.status == Status.ECHO_REQUIRED, asked.status
        res = decode_sib_message(await sock.ask(big_select(tid + 1, asked.result)), UDP,
                                 Tx.SELECT)
        elapsed = time.perf_counter() - start
        assert res.status == Status.OK and res.result.total == ROWS
        return elapsed
    finally:
        sock.transport.close()


async def timed(sock: Socket, data: bytes) -> float:
    start = time.perf_counter()
    await sock.ask(data)
    return time.perf_counter() - start


_SESSION_LOOP = '''
import sys, time
from ksp import UDP, Options, Request, Response, SelectResult, Status, Triple, Tx, Var, encode
from ksp.session import SessionOptions, SIBSession
from sib.testing import ex
factor, n, reps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
def loop():
    if factor < 0:  # a tree without the option
        session = SIBSession(UDP)
    else:
        session = SIBSession(UDP, options=SessionOptions(amplification_factor=factor))
    addr = ("192.0.2.7", 40000)
    if factor > 0:
        session.layer.proven(addr)
    result = SelectResult(1, ((ex("v"),),), 1, ())
    datagrams = [encode(Request(Tx.SELECT, tid, projection=1,
                                where=(Triple(ex("s7"), ex("p"), Var(0)),),
                                options=Options(prefixes=())), UDP) for tid in range(n)]
    start = time.perf_counter()
    for tid, data in enumerate(datagrams):
        session.receive_datagram(data, addr, 1.0)
        event = session.next_event()
        session.respond(event.kp, tid, Response(tid, Status.OK, result), 1.0)
        session.datagrams_to_send(1.0)
    return (time.perf_counter() - start) / n
print(" ".join(str(loop()) for _ in range(reps)))
'''


def session_loop(factor: int, n: int, tree: str | None = None, reps: int = 5) -> list[float]:
    """Seconds per request through a `UdpSIBSession` alone, from a validated address, `reps`
    times: in a process of its own running this tree or `tree` (factor -1: a tree without the
    option)."""
    where = tree or str(Path(__file__).resolve().parents[2])
    out = subprocess.run([sys.executable, "-c", _SESSION_LOOP, str(factor), str(n), str(reps)],
                         cwd=where, env={**os.environ, "PYTHONPATH": where}, check=True,
                         capture_output=True, text=True, timeout=600).stdout
    return [float(x) for x in out.split()]


async def measure(rounds: int, per_round: int, tree: str | None
               ) -> dict[str, list[list[float]]]:
    sib = Sib()
    on = await Server.start(sib, udp=0, options=SessionOptions(amplification_factor=3))
    off = await Server.start(Sib(), udp=0, options=SessionOptions(amplification_factor=0))
    try:
        for server in (on, off):
            async with connect(f"udp://127.0.0.1:{server.udp.port}") as kp:
                for start in range(0, ROWS, 200):
                    await kp.insert_data([Triple(ex(f"s{i}"), P, ex(f"o{i}"))
                                          for i in range(start, start + 200)])
        validated = await Socket.open(on.udp.port)
        asked = decode_sib_message(await validated.ask(big_select(1)), UDP, Tx.SELECT)
        await validated.ask(big_select(2, asked.result))
        plain = await Socket.open(off.udp.port)
        names = ["first", "validated", "small_on", "small_off", "session_on", "session_off"]
        if tree is not None:
            names.append("session_tree")
        samples: dict[str, list[list[float]]] = {name: [] for name in names}
        tid, hosts = 100, 0
        for r in range(rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            got: dict[str, list[float]] = {name: [] for name in names}
            for name in order:
                for _ in range(per_round):
                    tid = (tid + 2) & 0xFFFF
                    if name == "first":
                        hosts += 1
                        got[name].append(await first_request(on.udp.port, tid, hosts))
                    elif name == "validated":
                        got[name].append(await timed(validated, big_select(tid)))
                    elif name == "small_on":
                        got[name].append(await timed(validated, small_select(tid)))
                    elif name == "small_off":
                        got[name].append(await timed(plain, small_select(tid)))
                if name == "session_tree":
                    got[name] = session_loop(-1, 10_000, tree)
                elif name.startswith("session"):
                    got[name] = session_loop(3 if name == "session_on" else 0, 10_000)
            for name in names:
                samples[name].append(got[name])
        validated.transport.close()
        plain.transport.close()
        return samples
    finally:
        await on.close()
        await off.close()
        await sib.close()


def _stat(name: str):
    """A round's figure: the median of its round trips; for the session-only loops (batches
    of 10,000 requests, five per round) the fastest batch, the least disturbed by the rest of
    the machine."""
    return min if name.startswith("session") else statistics.median


def _ratios(samples, a: str, b: str) -> list[float]:
    return [_stat(a)(x) / _stat(b)(y) for x, y in zip(samples[a], samples[b])]


def table_rows(samples, tree: str | None = None) -> list[list[str]]:
    rows = []
    labels = {"first": "first request, new address (echo round trip)",
              "validated": "same request, validated address",
              "small_on": "1-row SELECT over sockets, limit on",
              "small_off": "1-row SELECT over sockets, limit off",
              "session_on": "1-row request, session only, limit on",
              "session_off": "1-row request, session only, limit off"}
    if tree is not None:
        labels["session_tree"] = f"1-row request, session only, {tree}"
        labels["session_on_vs_tree"] = "1-row request, session only, limit on"
        samples = {**samples, "session_on_vs_tree": samples["session_on"]}
    pairs = {"first": "validated", "small_on": "small_off", "session_on": "session_off",
             "session_on_vs_tree": "session_tree"}
    for name, label in labels.items():
        figure = statistics.median(_stat(name)(round_) for round_ in samples[name])
        ratio = spread(_ratios(samples, name, pairs[name])) if name in pairs else "1 (baseline)"
        rows.append([label, f"{figure * 1e6:,.1f}", ratio])
    return rows


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = bench_parser(MODULE, __doc__, prog, "3 rounds of 20 (default 7 of 60)")
    parser.add_argument("--tree", metavar="DIR",
                        help="also run the session-only loop on the source tree DIR")
    args = parser.parse_args(argv)
    rounds, per_round = (3, 20) if args.quick else (7, 60)
    before = os.getloadavg()
    samples = asyncio.run(measure(rounds, per_round, args.tree))
    env = environment("aiocoap", "pyoxigraph")
    print_report(f"Address validation ({rounds} rounds × {per_round}; load before "
                 f"{before[0]:.2f} {before[1]:.2f} {before[2]:.2f})",
                 ["contender", "µs (median over rounds)", "ratio per round min / median / max"],
                 table_rows(samples, args.tree), markdown=args.markdown, module=MODULE, prog=prog,
                 argv=argv, libraries=f"{env['python']}, {env['platform']}; {env['libraries']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
