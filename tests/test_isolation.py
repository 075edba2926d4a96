"""What a reader sees beside the writes, through real sockets (the SEPA gate over HTTP, KSP over
UDP): every read returns a state that a whole request left — never a Graph Store PUT or a
multi-operation update half-done, never a failed update before it is undone — and each request
reaches the store as one commit, with the state pyoxigraph's own SPARQL Update gives."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pyoxigraph as ox
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aiohttp

from sib.sepa.broker import SepaError
from sib.sepa.update import parse_update
from sib.store import Delta, QuadStore
from sib.testing import SibProcess
from transports.client import connect

from lengths import examples
from test_sepa_gate import EX, UPDATE, run

N = 500  # triples per set: a write of this size takes long enough to be caught in the middle
WRITES = 150
COUNT = "SELECT (COUNT(*) AS ?n) WHERE {{ {} }}"


def _set(name: str, graph: str | None = None, n: int = N, p: str = "p") -> str:
    triples = " ".join(f"<{EX}{name}{i}> <{EX}{p}> {i} ." for i in range(n))
    return triples if graph is None else f"GRAPH <{graph}> {{ {triples} }}"


def _turtle(name: str, blank: bool = False) -> str:
    """N triples; `blank`: their subjects blank nodes (a delta that names stored ones)."""
    return " ".join(f"{f'_:{name}{i}' if blank else f'<{EX}{name}{i}>'} <{EX}p> "
                    f"{i + N * (name == 'b')} ." for i in range(N))


async def _count(lab: Lab, where: str) -> int:
    async with lab.http.get(lab.base + "/query", params={"query": COUNT.format(where)}) as r:
        body = await r.json()
        assert r.status == 200, body
        return int(body["results"]["bindings"][0]["n"]["value"])


class Lab:
    """`ksp-sib --memory` as a process of its own (its event loop and reader threads apart
    from the clients', as on a gateway), its gate and UDP port free ones, beside a process
    that keeps one core busy (a loaded gateway: the SIB's reader threads, at a lower
    priority, start their reads at any moment of a write, not only between two)."""

    async def __aenter__(self) -> "Lab":
        self.busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        self.process = SibProcess("--memory", "--udp-port", "0", "--tcp-port", "-1",
                                  "--coap-port", "-1", "--metrics-port", "-1",
                                  "--sepa-http-port", "0", "--sepa-ws-port", "0")
        self.process.__enter__()
        self.base = f"http://127.0.0.1:{self.process.ports['http']}"
        self.udp = f"udp://127.0.0.1:{self.process.ports['udp']}"
        self.http = aiohttp.ClientSession()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.http.close()
        self.busy.kill()
        self.busy.wait()
        assert self.process.stop() == 0
        self.process.__exit__(None, None, None)

    async def update(self, text: str, status: int = 200) -> None:
        async with self.http.post(self.base + "/update", data=text, headers=UPDATE) as r:
            body = await r.text()
            assert r.status == status, body


class Reads:
    """Readers looping beside a writer until it is done; each read's outcome is kept."""

    copies = 4  # of each reader, so that reads are under way whenever a write starts

    def __init__(self) -> None:
        self.seen: dict[str, list] = {}
        self.done = asyncio.Event()

    async def loop(self, name: str, read) -> None:
        seen = self.seen.setdefault(name, [])
        while not self.done.is_set():
            seen.append(await read())
            await asyncio.sleep(0)

    async def beside(self, writer, readers: dict, least: int = 20) -> dict[str, list]:
        """Run `writer()` with every reader looping beside it, then make sure each read at
        least `least` times (reads that all came after the last write prove nothing)."""
        tasks = [asyncio.ensure_future(self.loop(name, read)) for name, read in readers.items()
                 for _ in range(self.copies)]
        try:
            await writer()
        finally:
            self.done.set()
            await asyncio.gather(*tasks)
        for name, seen in self.seen.items():
            assert len(seen) >= least, f"{name}: {len(seen)} reads, too few to tell"
        return self.seen


@pytest.mark.slow
@pytest.mark.parametrize("blank", [False, True], ids=["iris", "blank-nodes"])
def test_a_graph_store_put_is_seen_whole(blank):
    """PUT replaces a graph of N triples by another set of N, again and again: every COUNT
    over the graph is N, every GET is one of the two sets, every KSP read finds a triple."""
    graph = EX + "h2"

    async def main():
        async with Lab() as lab, connect(lab.udp) as kp:
            url = f"{lab.base}/data?graph={graph}"

            async def put(name: str) -> None:
                async with lab.http.put(url, data=_turtle(name, blank),
                                        headers={"Content-Type": "text/turtle"}) as r:
                    assert r.status in (201, 204), await r.text()

            async def get() -> str:
                async with lab.http.get(url, headers={"Accept": "application/n-triples"}) as r:
                    text = await r.text()
                    assert r.status == 200, text
                values = sorted(int(line.split('"')[1]) for line in text.splitlines())
                for name, first in (("a", 0), ("b", N)):
                    if values == list(range(first, first + N)):
                        return name
                return f"{len(values)} triples"

            async def ksp() -> int:
                rows = await kp.query(f"SELECT ?s FROM <{graph}> WHERE {{ ?s ?p ?o }} LIMIT 1")
                return len(rows.rows)

            await put("a")

            async def writer():
                for k in range(WRITES):
                    await put("ab"[k % 2])

            seen = await Reads().beside(writer, {
                "count": lambda: _count(lab, f"GRAPH <{graph}> {{ ?s ?p ?o }}"),
                "get": get, "ksp": ksp})
            assert set(seen["count"]) == {N}, sorted(set(seen["count"]))
            assert set(seen["get"]) <= {"a", "b"}, sorted(set(seen["get"]))
            assert set(seen["ksp"]) == {1}
    run(main())


@pytest.mark.slow
def test_a_graph_made_and_dropped_is_seen_whole():
    """PUT makes a graph of N triples, DELETE drops it, again and again: a Graph Store GET is
    404 or the whole graph (its content and its existence read from one state), never an
    empty graph, which no request leaves."""
    graph = EX + "h3"

    async def main():
        async with Lab() as lab:
            url = f"{lab.base}/data?graph={graph}"

            async def writer():
                for _ in range(WRITES // 2):
                    async with lab.http.put(url, data=_turtle("a"),
                                            headers={"Content-Type": "text/turtle"}) as r:
                        assert r.status == 201, await r.text()
                    async with lab.http.delete(url) as r:
                        assert r.status == 200, await r.text()

            async def get():
                async with lab.http.get(url, headers={"Accept": "application/n-triples"}) as r:
                    text = await r.text()
                    return r.status, len(text.splitlines()) if r.status == 200 else None

            seen = await Reads().beside(writer, {"get": get})
            assert set(seen["get"]) <= {(200, N), (404, None)}, sorted(set(seen["get"]))
    run(main())


@pytest.mark.slow
def test_a_multi_operation_update_is_seen_whole():
    """`DELETE DATA {N}; INSERT DATA {N}` replaces one set by the other: every COUNT is N and
    every KSP read finds a triple (between the two operations there is none)."""
    async def main():
        async with Lab() as lab, connect(lab.udp) as kp:
            await lab.update(f"INSERT DATA {{ {_set('a')} }}")

            async def writer():
                for k in range(WRITES):
                    old, new = ("a", "b") if k % 2 == 0 else ("b", "a")
                    await lab.update(f"DELETE DATA {{ {_set(old)} }} ; "
                                     f"INSERT DATA {{ {_set(new)} }}")

            async def ksp() -> int:
                rows = await kp.query(f"SELECT ?s WHERE {{ ?s <{EX}p> ?o }} LIMIT 1")
                return len(rows.rows)

            seen = await Reads().beside(writer, {
                "count": lambda: _count(lab, f"?s <{EX}p> ?o"), "ksp": ksp})
            assert set(seen["count"]) == {N}, sorted(set(seen["count"]))
            assert set(seen["ksp"]) == {1}
    run(main())


@pytest.mark.slow
def test_a_failed_update_is_never_seen():
    """`INSERT DATA {N into a new graph, N into the default graph}; DROP GRAPH <missing>` is
    refused (400) and changes nothing: no read — COUNT at the gate, a Graph Store GET, a KSP
    SELECT — ever sees what its first operation would have written."""
    new, leak = EX + "new", f"<{EX}leak>"

    async def main():
        async with Lab() as lab, connect(lab.udp) as kp:
            async def writer():
                for _ in range(WRITES):
                    await lab.update(f"INSERT DATA {{ {_set('n', new)} {_set('l', p='leak')} }}"
                                     f" ; DROP GRAPH <{EX}missing>", status=400)

            async def get() -> int:
                async with lab.http.get(f"{lab.base}/data?graph={new}",
                                        headers={"Accept": "application/n-triples"}) as r:
                    return r.status

            async def ksp() -> int:
                rows = await kp.query(f"SELECT ?s WHERE {{ ?s {leak} ?o }} LIMIT 1")
                return len(rows.rows)

            seen = await Reads().beside(writer, {
                "count": lambda: _count(lab, f"GRAPH <{new}> {{ ?s ?p ?o }}"),
                "get": get, "ksp": ksp})
            assert set(seen["count"]) == {0}, sorted(set(seen["count"]))
            assert set(seen["get"]) == {404}, sorted(set(seen["get"]))
            assert set(seen["ksp"]) == {0}
    run(main())


# -- one commit per request, with the meaning of its operations applied one by one -------------

G = [f"{EX}g{i}" for i in (1, 2, 3)]
_TRIPLES = st.tuples(st.sampled_from("ab"), st.sampled_from(("p", "q")), st.sampled_from("12"))


def _block(triples, graph: str | None) -> str:
    body = " ".join(f"<{EX}{s}> <{EX}{p}> <{EX}{o}> ." for s, p, o in triples)
    return body if graph is None else f"GRAPH <{graph}> {{ {body} }}"


_graph = st.sampled_from([None, *G])
_name = st.sampled_from(G)
_target = st.sampled_from(["DEFAULT", *(f"GRAPH <{g}>" for g in G)])
_silent = st.sampled_from(["", "SILENT "])
OPERATIONS = st.one_of(
    st.builds(lambda t, g: f"INSERT DATA {{ {_block(t, g)} }}", st.lists(_TRIPLES, max_size=3),
              _graph),
    st.builds(lambda t, g: f"DELETE DATA {{ {_block(t, g)} }}", st.lists(_TRIPLES, max_size=3),
              _graph),
    st.builds(lambda p, g: f"DELETE WHERE {{ {_block([('?s', p, '?o')], g)} }}".replace(
        f"<{EX}?s>", "?s").replace(f"<{EX}?o>", "?o"), st.sampled_from("pq"), _graph),
    # reads what the operations before it wrote: its WHERE on the staged view
    st.builds(lambda a, b: f"INSERT {{ GRAPH <{b}> {{ ?s <{EX}q> ?o }} }} WHERE {{ GRAPH <{a}> "
              f"{{ ?s <{EX}p> ?o }} }}", _name, _name),
    st.builds(lambda g: f"DELETE {{ ?s <{EX}p> ?o }} INSERT {{ ?o <{EX}p> ?s }} WHERE "
              f"{{ ?s <{EX}p> ?o FILTER NOT EXISTS {{ GRAPH <{g}> {{ ?s ?x ?o }} }} }}", _name),
    # unscreenable WHEREs: the graph names, a path of length zero
    st.just(f"INSERT {{ <{EX}x> <{EX}named> ?g }} WHERE {{ GRAPH ?g {{}} }}"),
    st.just(f"INSERT {{ <{EX}x> <{EX}reach> ?o }} WHERE {{ <{EX}a> <{EX}p>* ?o }}"),
    st.builds(lambda v, s, t: f"{v} {s}{t}", st.sampled_from(["CLEAR", "DROP"]), _silent,
              st.one_of(_target, st.sampled_from(["NAMED", "ALL"]))),
    st.builds(lambda s, g: f"CREATE {s}GRAPH <{g}>", _silent, _name),
    st.builds(lambda v, s, a, b: f"{v} {s}{a} TO {b}", st.sampled_from(["COPY", "MOVE", "ADD"]),
              _silent, st.sampled_from(["DEFAULT", *(f"<{g}>" for g in G)]),
              st.sampled_from(["DEFAULT", *(f"<{g}>" for g in G)])),
)


class CountingStore(QuadStore):
    """A store that counts its commits."""

    commits = 0

    def apply(self, *args, **kwargs) -> None:
        self.commits += 1
        super().apply(*args, **kwargs)


def _state(store: QuadStore) -> tuple:
    return frozenset(store.match()), frozenset(store.named_graphs())


def _one_by_one(state: tuple, text: str):
    """The state `text` leaves when its operations are applied to `state` one at a time, each
    written before the next is worked out (None: refused, nothing changed)."""
    quads, graphs = state
    store = QuadStore()
    store.apply(Delta(tuple(quads), ()), create=graphs)
    try:
        for op in parse_update(text):
            change = op.change(store)
            store.apply(change.delta, change.create, change.drop)
    except Exception:
        return None
    return _state(store)


@settings(max_examples=examples(150, 1500), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(OPERATIONS, min_size=1, max_size=5), min_size=1, max_size=6))
def test_each_request_is_one_commit_with_the_meaning_of_its_operations_one_by_one(requests):
    from sib.core import SibCore
    from sib.sepa.broker import SepaBroker

    store = CountingStore()
    broker = SepaBroker(SibCore(store))
    for ops in requests:
        text = " ;\n".join(ops)
        before, commits = _state(store), store.commits
        expected = _one_by_one(before, text)
        try:
            broker.apply(parse_update(text))
        except SepaError:
            assert expected is None, text
            assert _state(store) == before and store.commits == commits, text
            continue
        assert expected is not None, text
        assert _state(store) == expected, text
        assert store.commits - commits <= 1, text


# -- random requests beside a reader, through real sockets -------------------------------------

STATE = ("SELECT ?s ?p ?o ?g WHERE { { ?s ?p ?o } UNION { GRAPH ?g { ?s ?p ?o } } "
         "UNION { GRAPH ?g {} } }")
"""The whole store in one query (one snapshot): every quad, and each named graph's name."""
BULK = st.builds(lambda g: f"INSERT DATA {{ {_set('k', g, 200, 'bulk')} }}", _graph)
"""A write large enough to take a while: a reader is likely to start in its middle."""


def _as_read(state: tuple) -> frozenset:
    """A store state (`_state`) as the rows of STATE: the quads, then the named graphs."""
    quads, graphs = state
    rows = {(str(s), str(p), _value(o), None if g == "" else str(g)) for s, p, o, g in quads}
    return frozenset(rows | {(None, None, None, str(g)) for g in graphs})


def _value(term) -> str:
    return term.lexical if hasattr(term, "lexical") else str(term)


@pytest.fixture(scope="module")
def shared_sib():
    """One `ksp-sib` process for every example (each starts with DROP ALL)."""
    async def start():
        lab = Lab()
        await lab.__aenter__()
        await lab.http.close()
        return lab

    lab = asyncio.run(start())
    yield lab
    lab.busy.kill()
    lab.busy.wait()
    assert lab.process.stop() == 0
    lab.process.__exit__(None, None, None)


@pytest.mark.slow
@settings(max_examples=examples(12, 100), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(st.one_of(OPERATIONS, BULK), min_size=2, max_size=5),
                min_size=3, max_size=8))
def test_every_read_beside_random_requests_is_a_state_a_whole_request_left(shared_sib,
                                                                           requests):
    """Random multi-operation updates (some refused) one after another, a reader looping
    beside them: each of its reads is one of the states the requests left in turn (worked
    out by applying each request's operations one by one), never one between."""
    lab = shared_sib
    texts = [" ;\n".join(ops) for ops in requests]
    states = [_state(QuadStore())]
    for text in texts:
        after = _one_by_one(states[-1], text)
        states.append(states[-1] if after is None else after)
    allowed = {_as_read(s) for s in states}

    async def main():
        async with aiohttp.ClientSession() as http:
            lab.http = http
            await lab.update("DROP ALL")

            async def writer():
                for text, before, after in zip(texts, states, states[1:]):
                    refused = after == before and _one_by_one(before, text) is None
                    await lab.update(text, status=400 if refused else 200)

            async def read():
                async with http.get(lab.base + "/query", params={"query": STATE}) as r:
                    body = await r.json()
                    assert r.status == 200, body
                return frozenset(
                    tuple(b.get(v, {}).get("value") for v in ("s", "p", "o", "g"))
                    for b in body["results"]["bindings"])

            seen = await Reads().beside(writer, {"state": read}, least=1)
            torn = [r for r in seen["state"] if r not in allowed]
            assert not torn, f"{len(torn)} of {len(seen['state'])} reads saw no whole state"
    run(main())
