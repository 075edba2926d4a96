"""Request benchmark: a 1-row SELECT through a real `ksp-sib` over UDP, against a bare asyncio
UDP echo of the same sizes in a process of its own.

Run as ``python -m tools.bench.request [--quick] [--markdown] [--profile] [--instructions]
[--tree DIR]`` or ``ksp bench request``. One ``ksp-sib --memory`` (its own process, UDP on a
free loopback port) holds a few thousand triples: `SENSORS` sensors, each with a value, a type
and a place. The request is ``SELECT ?v WHERE { <sensor_k> <value> ?v }`` as a KSP request (k changes with every
round trip), answered by a RES of one row. The contenders, one request outstanding at a time:

- ``bare UDP echo``: an asyncio DatagramProtocol server in a process of its own, answering each
  datagram of the request's size with one of the RES's size; the baseline of every ratio;
- ``minimal KP → ksp-sib``: a DatagramProtocol client that sends the request, encoded before
  the round, and waits for the datagram whose TID answers it (the SIB's cost, and the
  sockets');
- ``transports.connect → ksp-sib``: the project's client (`KP.request`), as applications use it;
- ``transports.connect, SPARQL text → ksp-sib``: the same client given the query as SPARQL text
  (`KP.query(text)`: compiled, through the KP's compile cache, and the row converted to rdflib
  terms), k cycling over `TEXTS` sensors: the texts an application polls, each sent again;
- ``…, SPARQL text never sent before``: the same with k over every sensor and the cache off
  (`CompileCache(max_entries=0)`): each text compiled as it is sent;
- ``Sib.submit, no sockets``: a `Sib` in this process over the same triples, the request handed
  to `submit` and its RES awaited from the channel (the SIB's request path alone: scheduler,
  checks, evaluation, the hop to a reader thread and back);
- with ``--tree DIR``, ``minimal KP → ksp-sib (DIR)``: a second ``ksp-sib`` started from the
  source tree DIR (another checkout), so a change and the tree before it are compared in one run.

The contenders run in interleaved rounds (every contender the same number of round trips per
round, starting at a rotating position). p50/p99 are over every round trip; "× echo" is the
ratio of the p50s; the per-round ratio is each round's median over the echo's median in that
round, reported as min/median/max. ``--profile`` prints where the in-process path spends its
time (cProfile of `SibCore.read`, which a reader thread runs, and of the `Sib.submit` loop);
``--instructions`` counts the instructions per request of ``ksp-sib`` and of the echo under
valgrind's callgrind (`tools.bench.request_instructions`; with ``--tree`` that tree's too),
which a loaded host does not change.
Target: the minimal KP's median and the SPARQL text's within 2× the echo's.

Where the processes run decides the ratio more than anything they do: on a 2-core VM a round
trip between two CPUs cost the echo 73 µs against 25 µs on one, and the OS seemed to put the echo
beside the client and the SIB now beside it, now not (the same tree measured 2.66× and 3.73×
minutes apart). So by default (``--cpus one``, Linux) the client, the echo and the SIBs share one CPU
and a round trip costs what the processes do; ``--cpus split`` puts the servers on another CPU
than the client, ``--cpus any`` leaves the placement to the OS.
"""
from __future__ import annotations

import asyncio
import cProfile
import io
import multiprocessing
import os
import pstats
import statistics
import sys
import time
from dataclasses import dataclass, field

from ksp import IRI, UDP, Literal, Request, Response, Status, Triple, Tx, Var, encode
from ksp.codes import res_status
from ksp.codec import decode_sib_message
from ksp.model import SelectResult
from ksp.terms import DEFAULT_GRAPH, XSD_FLOAT
from transports.reads import small_reads

from .report import bench_parser, environment, print_report
from .transport import Result

TARGET_RATIO = 2.0
EX = "http://example.org/greenhouse#"
VALUE, TYPE, PLACE = IRI(EX + "value"), IRI(EX + "type"), IRI(EX + "place")
SENSORS = 1000
"""Sensors in the store, three triples each."""
TEXTS = 100
"""Sensors whose SPARQL text the cached text row sends, in turn."""

_clock = time.perf_counter


def sensor(k: int) -> IRI:
    return IRI(f"{EX}sensor{k % SENSORS}")


def reading(k: int) -> Literal:
    return Literal(f"{20 + k % 100 / 10:.1f}", XSD_FLOAT)


def triples() -> list[Triple]:
    """The store: every sensor's value, type and place."""
    out = []
    for k in range(SENSORS):
        out += [Triple(sensor(k), VALUE, reading(k)), Triple(sensor(k), TYPE, IRI(EX + "Temp")),
                Triple(sensor(k), PLACE, IRI(f"{EX}bed{k % 40}"))]
    return out


def query(k: int, tid: int = 0) -> Request:
    """The 1-row SELECT of sensor k."""
    return Request(Tx.SELECT, tid, projection=1, where=(Triple(sensor(k), VALUE, Var(0)),))


def query_text(k: int) -> str:
    """The 1-row SELECT of sensor k as SPARQL text."""
    return f"SELECT ?v WHERE {{ <{sensor(k)}> <{VALUE}> ?v }}"


def status_of(data: bytes) -> int:
    """The status of a RES datagram: its type byte's low bits, without the epoch bit."""
    return res_status(data[1])


REQUEST_SIZE = len(encode(query(123, 1), UDP))
RESPONSE_SIZE = len(encode(Response(1, Status.OK, SelectResult(1, ((reading(123),),))), UDP))


@dataclass
class Contender(Result):
    """One row: every round trip's seconds (`samples`, p50, p99) and each round's median."""

    rounds: list[float] = field(default_factory=list)


# -- the bare echo, in a process of its own --------------------------------------------------

def _echo_process(conn, response_size: int) -> None:
    """An asyncio UDP echo answering each datagram with `response_size` bytes; its port is
    sent on `conn`, and it runs until `conn` receives anything."""
    async def serve() -> None:
        answer = b"x" * response_size

        class Echo(asyncio.DatagramProtocol):
            def connection_made(self, transport) -> None:
                self.transport = transport
                small_reads(transport)

            def datagram_received(self, data, addr) -> None:
                self.transport.sendto(answer, addr)

        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(Echo, local_addr=("127.0.0.1", 0))
        conn.send(transport.get_extra_info("sockname")[1])
        await loop.run_in_executor(None, conn.recv)
        transport.close()

    asyncio.run(serve())


class EchoServer:
    """`_echo_process` as a context manager; `port` once started."""

    def __enter__(self) -> "EchoServer":
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_echo_process, args=(child, RESPONSE_SIZE),
                                   daemon=True)
        self.process.start()
        child.close()
        if not self.conn.poll(60):
            raise RuntimeError("the echo process did not start")
        self.port = self.conn.recv()
        return self

    def __exit__(self, *exc) -> None:
        self.conn.send(None)
        self.process.join(10)
        if self.process.is_alive():
            self.process.kill()
        self.conn.close()


# -- the clients -----------------------------------------------------------------------------

class DatagramClient(asyncio.DatagramProtocol):
    """One datagram out, the one that answers it back: `match(data)` says which does."""

    def __init__(self) -> None:
        self.waiter: asyncio.Future | None = None
        self.match = lambda data: True

    def connection_made(self, transport) -> None:
        self.transport = transport
        small_reads(transport)

    def datagram_received(self, data, addr) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done() and self.match(data):
            waiter.set_result(data)

    async def exchange(self, data: bytes) -> bytes:
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.sendto(data)
        return await asyncio.wait_for(self.waiter, 10)


async def open_client(port: int) -> DatagramClient:
    loop = asyncio.get_running_loop()
    _, client = await loop.create_datagram_endpoint(DatagramClient,
                                                    remote_addr=("127.0.0.1", port))
    return client


class MinimalKP:
    """A KP reduced to one request at a time: its datagrams encoded beforehand (`prepare`, as
    firmware patches a template: not timed), each sent and the RES with its TID awaited (its
    status byte checked; the whole RES decoded by `check`)."""

    def __init__(self, client: DatagramClient) -> None:
        self.client, self.tid, self.k = client, 0, 0
        self.ready: list[tuple[int, bytes]] = []
        client.match = lambda data: (data[2] | data[3] << 8) == self.tid

    def prepare(self, count: int) -> None:
        """Encode the next `count` requests (TIDs 1…65535 in turn; k advancing)."""
        ready = []
        for _ in range(count):
            self.k += 1
            tid = self.k % 0xFFFF + 1
            ready.append((tid, encode(query(self.k, tid), UDP)))
        ready.reverse()
        self.ready = ready

    async def once(self) -> bytes:
        if not self.ready:
            self.prepare(1)
        self.tid, datagram = self.ready.pop()
        data = await self.client.exchange(datagram)
        if status_of(data):
            raise RuntimeError(f"the SIB answered status {status_of(data):#x}")
        return data

    async def check(self) -> None:
        self.prepare(1)
        response = decode_sib_message(await self.once(), UDP, Tx.SELECT)
        if response.result.rows != ((reading(self.k % SENSORS),),):
            raise RuntimeError(f"unexpected answer {response}")


class _Answer:
    """The channel of `Sib.submit, no sockets`: the RES sets `future`."""

    transport = "udp"

    def __init__(self, kp, future: asyncio.Future) -> None:
        self.kp, self.future = kp, future

    def respond(self, response: Response) -> None:
        self.future.set_result(response)


class InProcess:
    """A `Sib` in this process over the same triples, in a store as ``ksp-sib --memory`` has
    (RocksDB in a temporary directory); `once` submits and awaits the RES."""

    def __init__(self) -> None:
        from ksp.session import KPIdentity
        from sib import QuadStore, Sib

        store = QuadStore(temporary=True)
        store.load((*t, DEFAULT_GRAPH) for t in triples())
        self.sib = Sib(store)
        self.kp = KPIdentity(addr=("127.0.0.1", 1))
        self.k = 0

    async def close(self) -> None:
        await self.sib.close()
        self.sib.store.close()

    async def once(self) -> Response:
        self.k += 1
        future = asyncio.get_running_loop().create_future()
        self.sib.submit(query(self.k, self.k & 0xFFFF), _Answer(self.kp, future))
        response = await future
        if response.status != Status.OK:
            raise RuntimeError(f"the SIB answered {response}")
        return response


def _top(profile: cProfile.Profile, title: str, lines: int = 18) -> str:
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.strip_dirs().sort_stats("tottime").print_stats(lines)
    return f"--- {title} ---\n" + out.getvalue()


async def profile_in_process(calls: int = 5000) -> str:
    """cProfile of `SibCore.read` (what a reader thread runs; cProfile sees one thread) and of
    the `Sib.submit` loop in the event loop's thread."""
    ip = InProcess()
    core, kp = ip.sib.core, ip.kp
    requests = [query(k, k & 0xFFFF) for k in range(calls)]
    for r in requests[:500]:
        core.read(r, kp, 1400)
    t0 = _clock()
    for r in requests:
        core.read(r, kp, 1400)
    read_us = (_clock() - t0) / calls * 1e6
    prof = cProfile.Profile()
    prof.enable()
    for r in requests:
        core.read(r, kp, 1400)
    prof.disable()
    report = [f"SibCore.read: {read_us:.1f} µs per query (unprofiled)", _top(prof, "SibCore.read")]
    for _ in range(500):
        await ip.once()
    t0 = _clock()
    for _ in range(calls):
        await ip.once()
    submit_us = (_clock() - t0) / calls * 1e6
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        await ip.once()
    prof.disable()
    report += [f"Sib.submit → RES: {submit_us:.1f} µs per query (unprofiled)",
               _top(prof, "Sib.submit loop (event loop thread)")]
    await ip.close()
    return "\n".join(report)


# -- the run ---------------------------------------------------------------------------------

def _start_sib(tree: str | None):
    """`ksp-sib --memory` on a free UDP port; run in the source tree `tree` if given (its
    `sib`, `ksp` and `transports` come first on the path of `python -m`)."""
    from sib.testing import SibProcess

    return SibProcess("--memory", "--udp-port", "0", "--tcp-port", "-1", "--coap-port", "-1",
                      "--metrics-port", "-1", timeout=120,
                      cwd=None if tree is None else os.path.abspath(tree))


async def _load(port: int) -> None:
    from transports import connect

    data = triples()
    async with await connect(f"udp://127.0.0.1:{port}") as kp:
        for start in range(0, len(data), 30):
            await kp.request(Request(Tx.INSERT_DATA, 0, insert=tuple(data[start:start + 30])))


async def _run_async(rounds: int, per_round: int, echo_port: int, sib_port: int,
                     tree_port: int | None, tree: str | None) -> list[Contender]:
    from transports import CompileCache, connect

    await _load(sib_port)
    if tree_port is not None:
        await _load(tree_port)
    echo = await open_client(echo_port)
    echo_payload = b"x" * REQUEST_SIZE
    minimal = MinimalKP(await open_client(sib_port))
    kp = await connect(f"udp://127.0.0.1:{sib_port}")
    uncached = await connect(f"udp://127.0.0.1:{sib_port}")
    uncached.compiled = CompileCache(max_entries=0)
    k = iter(range(1 << 62))
    texts = [query_text(n) for n in range(SENSORS)]
    in_process = InProcess()

    async def text_query(kp, count: int) -> None:
        if len((await kp.query(texts[next(k) % count])).rows) != 1:
            raise RuntimeError("not one row")

    if str((await kp.query(texts[7])).rows[0].v) != reading(7).lexical:
        raise RuntimeError("unexpected answer to the SPARQL text")

    contenders = {
        "bare UDP echo": lambda: echo.exchange(echo_payload),
        "minimal KP → ksp-sib": minimal.once,
        "transports.connect → ksp-sib": lambda: kp.request(query(next(k))),
        "transports.connect, SPARQL text → ksp-sib": lambda: text_query(kp, min(TEXTS, SENSORS)),
        "…, SPARQL text never sent before": lambda: text_query(uncached, SENSORS),
        "Sib.submit, no sockets": in_process.once,
    }
    prepare = {"minimal KP → ksp-sib": minimal.prepare}
    if tree_port is not None:
        before = MinimalKP(await open_client(tree_port))
        contenders[f"minimal KP → ksp-sib ({tree})"] = before.once
        prepare[f"minimal KP → ksp-sib ({tree})"] = before.prepare
        await before.check()
    await minimal.check()
    results = {name: Contender(name) for name in contenders}
    try:
        for name, fn in contenders.items():  # warm-up: caches, lazy imports
            for _ in range(200):
                await fn()
        names = list(contenders)
        for r in range(rounds):
            start = r % len(names)
            for name in names[start:] + names[:start]:
                fn, samples = contenders[name], []
                if name in prepare:
                    prepare[name](per_round)
                for _ in range(per_round):
                    t0 = _clock()
                    await fn()
                    samples.append(_clock() - t0)
                results[name].samples += samples
                results[name].rounds.append(statistics.median(samples))
    finally:
        await kp.close()
        await uncached.close()
        await in_process.close()
    return list(results.values())


CPUS = ("one", "split", "any")


def _placement(cpus: str) -> tuple[set[int], set[int]] | None:
    """The CPUs of (this process, the servers) for `--cpus`; None: as the OS places them."""
    if cpus == "any" or not hasattr(os, "sched_setaffinity"):
        return None
    mine = sorted(os.sched_getaffinity(0))
    return {mine[0]}, {mine[0] if cpus == "one" or len(mine) == 1 else mine[1]}


def run(quick: bool = False, tree: str | None = None, cpus: str = "one"
        ) -> tuple[list[Contender], dict]:
    """`cpus`: "one" puts the client, the echo and the SIBs on one CPU, "split" the client on
    one and the servers on another, "any" leaves them where the OS puts them (see `main`)."""
    rounds, per_round = (5, 200) if quick else (20, 500)
    settings = {"rounds": rounds, "per_round": per_round, "load": os.getloadavg()[0],
                "cpus": cpus}
    placement = _placement(cpus)
    before = os.sched_getaffinity(0) if placement is not None else None
    if placement is not None:
        os.sched_setaffinity(0, placement[1])  # what starts now inherits it
    tree_sib = None
    try:
        with EchoServer() as echo, _start_sib(None) as sib:
            try:
                if tree is not None:
                    tree_sib = _start_sib(tree)
                if placement is not None:
                    os.sched_setaffinity(0, placement[0])
                results = asyncio.run(_run_async(
                    rounds, per_round, echo.port, sib.ports["udp"],
                    tree_sib.ports["udp"] if tree_sib else None, tree))
            finally:
                if tree_sib is not None:
                    tree_sib.stop()
            sib.stop()
    finally:
        if before is not None:
            os.sched_setaffinity(0, before)
    return results, settings


HEADERS = ["1-row SELECT", "p50 µs", "p99 µs", "p50 × echo", "per round × echo (min/med/max)"]


def table_rows(results: list[Contender]) -> list[list[str]]:
    echo = results[0]
    rows = []
    for c in results:
        per_round = [m / e for m, e in zip(c.rounds, echo.rounds)]
        ratio = f"{c.p50 / echo.p50:.2f}×"
        if c.name in TARGETS:
            ratio = f"**{ratio}**"
        rows.append([c.name, f"{c.p50 * 1e6:.0f}", f"{c.p99 * 1e6:.0f}", ratio,
                     f"{min(per_round):.2f} / {statistics.median(per_round):.2f} / "
                     f"{max(per_round):.2f}"])
    return rows


TARGETS = ("minimal KP → ksp-sib", "transports.connect, SPARQL text → ksp-sib")
"""The rows whose p50 the target bounds."""


def target_line(results: list[Contender]) -> str:
    echo, by_name = results[0], {c.name: c for c in results}
    said = []
    for name in TARGETS:
        ratio = by_name[name].p50 / echo.p50
        said.append(f"{name} {ratio:.2f}× ({'met' if ratio <= TARGET_RATIO else 'MISSED'})")
    return (f"Target: the p50 through ksp-sib within {TARGET_RATIO:g}× the bare echo's — "
            + "; ".join(said) + ".")


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = bench_parser("tools.bench.request", __doc__, prog,
                          "5 rounds × 200 instead of 20 × 500")
    parser.add_argument("--profile", action="store_true",
                        help="also print where the in-process path spends its time (cProfile)")
    parser.add_argument("--cpus", choices=CPUS, default="one",
                        help="one: the client, the echo and the SIBs on one CPU (default); "
                             "split: the client on one, the servers on another; any: where the "
                             "OS puts them (Linux; elsewhere always any)")
    parser.add_argument("--instructions", action="store_true",
                        help="also count the instructions per request of ksp-sib and of the "
                             "echo under valgrind's callgrind (load-independent; needs valgrind)")
    parser.add_argument("--tree", metavar="DIR",
                        help="also run a ksp-sib from the source tree DIR (the tree before a "
                             "change), in the same rounds")
    args = parser.parse_args(argv)
    results, settings = run(args.quick, args.tree, args.cpus)
    env = environment("pyoxigraph")
    print_report(f"A 1-row SELECT through ksp-sib over UDP against a bare UDP echo "
                 f"({settings['rounds']} rounds × {settings['per_round']}, "
                 f"{time.strftime('%Y-%m-%d')}, load {settings['load']:.2f}, CPUs: {settings['cpus']})",
                 HEADERS,
                 table_rows(results), markdown=args.markdown, module="tools.bench.request",
                 prog=prog, argv=argv, libraries=f"{env['python']}; {env['libraries']}")
    print("\n" + target_line(results) + f" Request {REQUEST_SIZE} B, RES {RESPONSE_SIZE} B; "
          f"{SENSORS * 3:,} triples.")
    if args.profile:
        print("\n" + asyncio.run(profile_in_process()))
    if args.instructions:
        from . import request_instructions

        if not request_instructions.available():
            print("\nNo instruction counts: valgrind (callgrind) is not installed.")
        else:
            print("\n" + request_instructions.report(tree=args.tree))
    return 0


if __name__ == "__main__":
    sys.exit(main())
