"""Sustained per-KP request rate: one KP writes as fast as a real `ksp-sib` takes it, for minutes,
and the store is counted at the end — every request answered OK must have been executed once.

Run as ``python -m tools.bench.rate [--seconds S] [--transports udp,tcp,coap] [--markdown]`` or
``ksp bench rate``. For each transport a fresh ``ksp-sib --memory`` (its own process, so the KP
and the SIB each have a core) and one KP (`transports.connect`) keeping `--window` CON INSERT
DATA requests in flight, each a new triple ``<urn:rate:i> <urn:rate:p> i``. At the end a SPARQL
``COUNT`` through the SIB's SEPA gate (plain HTTP) must equal the OKs received.

Past 65 536 requests the KP's TIDs come back, in the next epoch of its request numbers, while
the SIB's duplicate cache may still hold the requests sent under them: it tells them apart by
their numbers (docs/wire-format.md section 15, docs/sessions.md). The table gives how many times the TID space went round
(``TID cycles``), the rate over the whole run and in its first and last minute (tenth, in a run
shorter than ten minutes): their ratio shows whether the cost per request stays flat.
"""
from __future__ import annotations

import asyncio
import json
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

from ksp import IRI, Literal, Request, Status, Triple, Tx
from ksp.terms import XSD_INTEGER

from .report import bench_parser, environment, print_report

PREDICATE = "urn:rate:p"
SCHEMES = {"udp": "udp", "tcp": "tcp", "coap": "coap"}


@dataclass
class Run:
    transport: str
    seconds: float = 0.0
    ok: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    stored: int = -1
    #: OKs in each of the run's ten slices (a minute each in a ten-minute run).
    slices: list[int] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.ok / self.seconds if self.seconds else 0.0

    @property
    def exact(self) -> bool:
        return self.stored == self.ok and not self.errors


def request(i: int) -> Request:
    return Request(Tx.INSERT_DATA, 0, insert=(Triple(
        IRI(f"urn:rate:{i}"), IRI(PREDICATE), Literal(str(i), XSD_INTEGER)),))


async def drive(url: str, seconds: float, window: int, run: Run,
                requests: int | None = None) -> None:
    """One KP, `window` requests in flight, new ones for `seconds` (or until `requests` were
    sent); counts OKs per slice."""
    from transports import connect

    counter = iter(range(1 << 62 if requests is None else requests))
    slices = [0] * 10
    async with await connect(url) as kp:
        loop = asyncio.get_running_loop()
        start = loop.time()
        end = start + seconds

        async def worker() -> None:
            for i in counter:
                if loop.time() >= end:
                    return
                response = await kp.request(request(i))
                if response.status == Status.OK:
                    run.ok += 1
                    slices[min(9, int((loop.time() - start) * 10 / seconds))] += 1
                else:
                    name = Status(response.status).name
                    run.errors[name] = run.errors.get(name, 0) + 1

        await asyncio.gather(*(worker() for _ in range(window)))
        run.seconds = loop.time() - start
    run.slices = slices


def count(http_port: int) -> int:
    """The triples the run stored, counted by the SIB's own SPARQL engine."""
    query = f"SELECT (COUNT(*) AS ?n) WHERE {{ ?s <{PREDICATE}> ?o }}"
    body = urllib.parse.urlencode({"query": query}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{http_port}/query", data=body,
                                 headers={"Accept": "application/sparql-results+json"})
    with urllib.request.urlopen(req, timeout=600) as answer:
        bindings = json.load(answer)["results"]["bindings"]
    return int(bindings[0]["n"]["value"])


def measure(transport: str, seconds: float, window: int, requests: int | None = None) -> Run:
    """One transport's run against a fresh `ksp-sib --memory` (see the module docstring)."""
    from sib.testing import SibProcess

    run = Run(transport)
    ports = ("--udp-port", "0", "--tcp-port", "0", "--coap-port", "0")
    with SibProcess("--memory", *ports, "--sepa-http-port", "0", timeout=120) as sib:
        url = f"{SCHEMES[transport]}://127.0.0.1:{sib.ports[transport]}"
        asyncio.run(drive(url, seconds, window, run, requests))
        run.stored = count(sib.ports["http"])
        sib.stop()
    return run


HEADERS = ["transport", "seconds", "OK", "stored", "exact", "TID cycles", "requests/s",
           "first ÷ last slice"]


def table_rows(runs: list[Run]) -> list[list[str]]:
    rows = []
    for r in runs:
        first, last = r.slices[0], r.slices[-1]
        rows.append([f"KSP/{r.transport.upper()}", f"{r.seconds:.0f}", f"{r.ok:,}",
                     f"{r.stored:,}", "yes" if r.exact else f"**NO** {r.errors}",
                     f"{r.ok / 65536:.1f}", f"{r.rate:,.0f}",
                     f"{first / last:.2f}" if last else "-"])
    return rows


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = bench_parser("tools.bench.rate", __doc__, prog, "20 s per transport")
    parser.add_argument("--seconds", type=float, default=600.0,
                        help="how long the KP writes, per transport (default 600)")
    parser.add_argument("--window", type=int, default=32, help="requests in flight (32)")
    parser.add_argument("--transports", default="udp,tcp,coap",
                        help="comma-separated: udp, tcp, coap (all three)")
    args = parser.parse_args(argv)
    seconds = 20.0 if args.quick else args.seconds
    runs = []
    for transport in args.transports.split(","):
        run = measure(transport.strip(), seconds, args.window)
        print(f"{run.transport}: {run.ok:,} OK, {run.stored:,} stored, {run.rate:,.0f}/s",
              file=sys.stderr, flush=True)
        runs.append(run)
    env = environment("pyoxigraph", "aiocoap")
    print_report(f"One KP's sustained request rate ({args.window} in flight, "
                 f"{time.strftime('%Y-%m-%d')})", HEADERS, table_rows(runs),
                 markdown=args.markdown, module="tools.bench.rate", prog=prog, argv=argv,
                 libraries=f"{env['python']}; {env['libraries']}")
    return 0 if all(r.exact for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
