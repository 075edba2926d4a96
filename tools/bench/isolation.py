"""What a reader sees beside the writes of a real `ksp-sib`: how many reads saw a request
half-done, or a refused request before nothing of it was left (docs/sib.md, "Isolation").

Run as ``python -m tools.bench.isolation [--reads N] [--busy] [--tree DIR] [--markdown]`` or
``ksp bench isolation``. For each kind of write, one ``ksp-sib --memory`` (a process of its own,
its SEPA gate on): one client repeats the write while readers — four of each kind, so that
reads are under way whenever a write starts — read until `--reads` reads are done:

- **put**: a Graph Store PUT replacing a graph's 100 triples by another 100, and back. Whole:
  a COUNT at the gate of 100, a Graph Store GET of one of the two sets, a KSP SELECT (UDP)
  finding a triple.
- **multi**: ``DELETE DATA {100} ; INSERT DATA {100}`` at the gate, one set for the other.
  Whole: a COUNT of 100, a KSP SELECT finding a triple.
- **failed**: ``INSERT DATA { GRAPH <new> {1,000} } ; DROP GRAPH <missing>``, refused (400).
  Never seen: a COUNT of the new graph of 0, a GET of 404, a KSP SELECT FROM the new graph
  finding nothing (or NO_SUCH_GRAPH).

``--busy`` keeps one core busy beside (a loaded gateway: the SIB's reader threads, at a lower
priority, then start at any moment of a write). ``--tree DIR`` runs another checkout's SIB too
(its ``sib`` package), in turns with this one: the same load, before and after a change.
"""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections import Counter

from .report import bench_parser, environment, print_report

EX = "http://example.org/isolation/"
SETS = 100
FAILED = 1000
COPIES = 4
ITEMS = ("put", "multi", "failed")


def _triples(name: str, n: int, p: str = "p") -> str:
    return " ".join(f"<{EX}{name}{i}> <{EX}{p}> {i} ." for i in range(n))


class Item:
    """One kind of write, the readers beside it and what a whole state looks like to each."""

    def __init__(self, kind: str, http, base: str, kp) -> None:
        self.kind, self.http, self.base, self.kp = kind, http, base, kp
        self.writes = 0
        self.graph = EX + ("new" if kind == "failed" else "g")

    async def setup(self) -> None:
        if self.kind == "put":
            await self._put("a")
        elif self.kind == "multi":
            await self._update(f"INSERT DATA {{ {_triples('a', SETS)} }}", 200)

    async def write(self) -> None:
        flip = "ab"[self.writes % 2], "ba"[self.writes % 2]
        if self.kind == "put":
            await self._put(flip[1])
        elif self.kind == "multi":
            await self._update(f"DELETE DATA {{ {_triples(flip[0], SETS)} }} ; "
                               f"INSERT DATA {{ {_triples(flip[1], SETS)} }}", 200)
        else:
            await self._update(f"INSERT DATA {{ GRAPH <{self.graph}> {{ "
                               f"{_triples('n', FAILED)} }} }} ; DROP GRAPH <{EX}missing>", 400)
        self.writes += 1

    def readers(self) -> dict:
        """Each reader: a coroutine function returning whether what it read was whole."""
        found = {"count": self._count, "ksp": self._ksp}
        if self.kind != "multi":
            found["get"] = self._get
        return found

    async def _count(self) -> bool:
        where = (f"GRAPH <{self.graph}> {{ ?s ?p ?o }}" if self.kind != "multi"
                 else f"?s <{EX}p> ?o")
        query = f"SELECT (COUNT(*) AS ?n) WHERE {{ {where} }}"
        async with self.http.get(self.base + "/query", params={"query": query}) as r:
            body = await r.json()
            assert r.status == 200, body
        n = int(body["results"]["bindings"][0]["n"]["value"])
        return n == (0 if self.kind == "failed" else SETS)

    async def _get(self) -> bool:
        async with self.http.get(f"{self.base}/data?graph={self.graph}",
                                 headers={"Accept": "application/n-triples"}) as r:
            lines = (await r.text()).splitlines()
            if self.kind == "failed":
                return r.status == 404
            assert r.status == 200
        subjects = {line.split()[0] for line in lines}
        return len(lines) == SETS and any(
            subjects == {f"<{EX}{name}{i}>" for i in range(SETS)} for name in "ab")

    async def _ksp(self) -> bool:
        from transports import KspStatusError

        source = f"FROM <{self.graph}> " if self.kind != "multi" else ""
        try:
            rows = await self.kp.query(f"SELECT ?s {source}WHERE {{ ?s <{EX}p> ?o }} LIMIT 1")
        except KspStatusError:  # no such graph: what a refused write leaves
            return self.kind == "failed"
        return len(rows.rows) == (self.kind != "failed")

    async def _put(self, name: str) -> None:
        async with self.http.put(f"{self.base}/data?graph={self.graph}",
                                 data=_triples(name, SETS),
                                 headers={"Content-Type": "text/turtle"}) as r:
            assert r.status in (201, 204), await r.text()

    async def _update(self, text: str, status: int) -> None:
        async with self.http.post(self.base + "/update", data=text,
                                  headers={"Content-Type": "application/sparql-update"}) as r:
            assert r.status == status, await r.text()


async def _run_item(kind: str, ports: dict, reads: int) -> tuple[Counter, Counter, int]:
    """Reads by reader and the torn ones among them, and the writes made meanwhile."""
    import aiohttp

    from transports import connect

    async with aiohttp.ClientSession() as http, \
            await connect(f"udp://127.0.0.1:{ports['udp']}") as kp:
        item = Item(kind, http, f"http://127.0.0.1:{ports['http']}", kp)
        await item.setup()
        done, total, torn = asyncio.Event(), Counter(), Counter()
        left = [reads]

        async def reader(name: str, read) -> None:
            while left[0] > 0:
                left[0] -= 1
                whole = await read()
                total[name] += 1
                torn[name] += not whole
            done.set()

        async def writer() -> None:
            while not done.is_set():
                await item.write()

        await asyncio.gather(writer(), *(reader(name, read) for name, read
                                         in item.readers().items() for _ in range(COPIES)))
        return total, torn, item.writes


def _sib(tree: str | None):
    from sib.testing import SibProcess

    return SibProcess("--memory", "--udp-port", "0", "--tcp-port", "-1", "--coap-port", "-1",
                      "--metrics-port", "-1", "--sepa-http-port", "0", "--sepa-ws-port", "0",
                      timeout=120, cwd=None if tree is None else os.path.abspath(tree))


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = bench_parser(__name__, __doc__, prog, "1,000 reads per kind of write")
    parser.add_argument("--reads", type=int, default=10_000,
                        help="reads per kind of write (default 10,000)")
    parser.add_argument("--busy", action="store_true", help="keep one core busy beside")
    parser.add_argument("--tree", metavar="DIR",
                        help="another checkout whose SIB runs too, in turns (before a change)")
    parser.add_argument("--items", default=",".join(ITEMS),
                        help=f"which writes, of {','.join(ITEMS)}")
    args = parser.parse_args(argv)
    reads = 1000 if args.quick else args.reads
    trees = [("this", None)] + ([("--tree", args.tree)] if args.tree else [])
    busy = (subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.busy
            else None)
    rows = []
    try:
        for kind in args.items.split(","):
            for label, tree in trees:
                with _sib(tree) as sib:
                    total, torn, writes = asyncio.run(_run_item(kind, sib.ports, reads))
                    sib.stop()
                by_reader = ", ".join(f"{name} {torn[name]}/{total[name]}" for name in total)
                rows.append([kind, label, f"{sum(total.values()):,}", f"{writes:,}",
                             f"**{sum(torn.values())}**", by_reader])
                print(f"{kind} ({label}): {sum(torn.values())} of {sum(total.values())} reads "
                      f"not whole, {writes} writes ({by_reader})", file=sys.stderr)
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    print_report(f"Reads that saw a write half-done or a refused one ({reads:,} reads per "
                 f"write kind{', one core busy' if args.busy else ''})",
                 ["write", "SIB", "reads", "writes", "not whole", "by reader (not whole/reads)"],
                 rows, markdown=args.markdown, module=__name__, prog=prog, argv=argv,
                 libraries=environment("pyoxigraph", "aiohttp")["libraries"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
