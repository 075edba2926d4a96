"""The store wrapper and the pattern index: exact deltas, atomic writes, data surviving a
reopen of the on-disk store, and index candidates."""
from __future__ import annotations

import asyncio

import pytest

from ksp import DEFAULT_GRAPH, BNode, Literal, Request, Status, Triple, Tx, Var
from ksp.terms import XSD_INTEGER
from sib import Delta, QuadStore, Sib
from sib.index import PatternIndex
from sib.testing import Client, ex

S, P, Q, G1 = ex("s"), ex("p"), ex("q"), ex("g1")


def test_on_disk_store_reopens_with_data_and_graphs(tmp_path):
    async def write():
        sib = Sib(QuadStore(str(tmp_path / "db")))
        kp = Client(sib)
        await kp.call(Request(Tx.CREATE, 1, graphs=(G1,)))
        await kp.call(Request(Tx.INSERT_DATA, 2, insert=(Triple(S, P, Literal.of(1)),
                                                          Triple(BNode("x"), Q, S))))
        await sib.close()
        return set(sib.store.match())

    written = asyncio.run(write())
    assert len(written) == 2
    store = QuadStore(str(tmp_path / "db"))
    assert set(store.match()) == written
    assert store.graph_exists(G1)


def test_apply_reports_and_writes_exactly_the_delta():
    store = QuadStore()
    a = (S, P, Literal.of(1), DEFAULT_GRAPH)
    b = (S, P, Literal.of(2), G1)
    store.apply(Delta((a, b), ()))
    assert set(store.match()) == {a, b}
    store.apply(Delta((), (a,)), create=[ex("g2")])
    assert set(store.match()) == {b} and store.graph_exists(ex("g2"))
    store.apply(Delta(), drop=[G1])
    assert set(store.match()) == set() and not store.graph_exists(G1)


@pytest.mark.parametrize("path", [None, "db"], ids=["memory", "disk"])
def test_a_delta_with_blank_nodes_keeps_their_labels(tmp_path, path):
    """Blank nodes are stored under their labels and removed by label (another node with the
    same triples stays), in the default graph and a named one. (That such a delta is one
    transaction for readers: tests/test_isolation.py, a PUT of blank nodes.)"""
    store = QuadStore(None if path is None else str(tmp_path / path))
    x, y = BNode("nx1"), BNode("ny2")
    old = [(x, P, Literal.of(1), DEFAULT_GRAPH), (S, Q, x, G1),
           (y, P, Literal.of(1), DEFAULT_GRAPH)]
    store.apply(Delta(tuple(old), ()))
    assert set(store.match()) == set(old)
    new = [(S, P, y, G1), (BNode("nz3"), Q, S, DEFAULT_GRAPH), (S, P, Literal.of(2), G1)]
    store.apply(Delta(tuple(new), tuple(old[:2])))
    assert set(store.match()) == {old[2], *new}


def test_a_request_failing_midway_changes_nothing():
    async def go():
        sib = Sib()
        kp = Client(sib)
        bad = Literal("x", "http://www.w3.org/1999/02/22-rdf-syntax-ns#langString", "bad tag!")
        r = await kp.call(Request(Tx.INSERT_DATA, 1, insert=(Triple(S, P, Literal.of(1)),
                                                              Triple(S, Q, bad))))
        assert r.status == Status.INVALID_DATA_FORMAT
        assert set(sib.store.match()) == set()
    asyncio.run(go())


def test_update_delta_is_net_of_existing_quads():
    async def go():
        sib = Sib()
        kp = Client(sib)
        seen = []
        apply = sib.store.apply
        sib.store.apply = lambda d, *a: (seen.append(d), apply(d, *a))[1]
        await kp.call(Request(Tx.INSERT_DATA, 1, insert=(Triple(S, P, Literal("01", XSD_INTEGER)),)))
        await kp.call(Request(Tx.INSERT_DATA, 2, insert=(Triple(S, P, Literal.of(1)),)))
        await kp.call(Request(Tx.UPDATE, 3, delete=(Triple(S, P, Var(0)),),
                              insert=(Triple(S, P, Var(0)), Triple(S, Q, Var(0))),
                              where=(Triple(S, P, Var(0)),)))
        one = Literal.of(1)
        assert seen[0] == Delta(((S, P, one, DEFAULT_GRAPH),), ())  # stored canonical
        assert len(seen) == 2 or not seen[1]  # re-inserting an existing quad: no change
        assert seen[-1] == Delta(((S, Q, one, DEFAULT_GRAPH),), ())  # delete+insert: stays
    asyncio.run(go())


def test_index_candidates_by_constants_and_graph_scope():
    idx = PatternIndex()
    idx.add("by_p", [Triple(Var(0), P, Var(1))], None)
    idx.add("by_sp", [Triple(S, P, Var(0))], None)
    idx.add("by_o", [Triple(Var(0), Var(1), Literal.of(7))], None)
    idx.add("in_g1", [Triple(Var(0), Q, Var(1))], [G1])
    idx.add("all", [Triple(Var(0), Var(1), Var(2))], [DEFAULT_GRAPH])
    quad = (S, P, Literal.of(7), DEFAULT_GRAPH)
    assert idx.candidates([quad]) == {"by_p", "by_sp", "by_o", "all"}
    assert idx.candidates([(ex("o"), P, Literal.of(1), G1)]) == {"by_p"}
    assert idx.candidates([(S, Q, S, G1)]) == {"in_g1"}
    assert idx.candidates([(S, Q, S, ex("g2"))]) == set()
    assert idx.candidates([(S, P, Literal("07", XSD_INTEGER), G1)]) >= {"by_p", "by_sp"}
    idx.remove("by_p")
    idx.remove("by_p")  # idempotent
    assert idx.candidates([quad]) == {"by_sp", "by_o", "all"}
    assert len(idx) == 4


def test_maintenance_keeps_every_quad_and_empty_named_graph(tmp_path):
    """Rebuild (memory) and compaction (disk, in the background while writes go on) change
    nothing a query can see; a temporary store's directory goes with `close()`."""
    import os

    from ksp.terms import IRI, Literal
    from sib.store import Delta, QuadStore

    g, empty = IRI("http://example.org/g"), IRI("http://example.org/empty")
    for store in (QuadStore(maintain_after=10), QuadStore(temporary=True, maintain_after=10)):
        s, p = IRI("http://example.org/s"), IRI("http://example.org/p")
        store.apply(Delta(), create=(empty,))
        for i in range(30):
            store.apply(Delta(((s, p, Literal.of(i + 1), g),), ((s, p, Literal.of(i), g),)
                              if i else ()))
            if store.maintenance_due():
                store.maintain()
        store.flush()  # waits for a compaction still running
        assert store.maintenance_runs >= 1 and store.removed < 30
        assert store.match() == [(s, p, Literal.of(30), g)] and len(store) == 1
        assert set(store.named_graphs()) == {g, empty}
        path = store.path
        store.close()
        if path is not None:
            assert not os.path.exists(path)


def test_removals_piling_up_under_one_subject_or_predicate_make_maintenance_due_sooner():
    """A sensor replacing its reading leaves its removals under one subject and predicate,
    which every read of it passes: maintenance is due after `maintain_hot` of them, long before
    `maintain_after` removals in all; removals spread over many subjects and predicates wait
    for `maintain_after`."""
    from ksp.terms import DEFAULT_GRAPH, IRI, Literal
    from sib.store import Delta, QuadStore

    store = QuadStore(maintain_after=10_000, maintain_hot=50)
    s, p = IRI("http://example.org/sensor"), IRI("http://example.org/value")
    for i in range(50):
        assert not store.maintenance_due()
        store.apply(Delta(((s, p, Literal.of(i + 1), DEFAULT_GRAPH),),
                          ((s, p, Literal.of(i), DEFAULT_GRAPH),) if i else ()))
    assert store.hot == 49 and not store.maintenance_due()
    store.apply(Delta((), ((s, p, Literal.of(50), DEFAULT_GRAPH),)))
    assert store.hot == 50 and store.maintenance_due()
    store.maintain()
    assert store.hot == 0 and not store.maintenance_due()
    spread = [(IRI(f"http://example.org/s{i}"), IRI(f"http://example.org/p{i}"), Literal.of(i),
               DEFAULT_GRAPH) for i in range(200)]
    store.apply(Delta(tuple(spread)))
    store.apply(Delta((), tuple(spread)))
    assert store.removed == 200 and store.hot == 1 and not store.maintenance_due()
    store.close()


def test_an_on_disk_store_is_reopened_every_renew_after_maintenance_runs(tmp_path):
    """Renewal (reopening RocksDB, which lets go of its caches) comes due every `renew_after`
    maintenance runs and keeps every quad; what still holds the store open is waited for."""
    from ksp.terms import IRI, Literal
    from sib.store import Delta, QuadStore

    s, p = IRI("http://example.org/s"), IRI("http://example.org/p")
    store = QuadStore(str(tmp_path / "store"), maintain_after=5, renew_after=2)
    assert QuadStore().renewal_due() is False  # in memory: nothing to reopen
    for i in range(40):
        store.apply(Delta(((s, p, Literal.of(i + 1), DEFAULT_GRAPH),),
                          ((s, p, Literal.of(i), DEFAULT_GRAPH),) if i else ()))
        if store.maintenance_due():
            store.maintain()
        store.flush()  # the compaction done, so that renewal can come due
        if store.renewal_due():
            before = store.maintenance_runs
            store.renew()
            assert not store.renewal_due() and store.maintenance_runs == before
    assert store.renewals >= 2 and store.unwritable is None
    assert store.match() == [(s, p, Literal.of(40), DEFAULT_GRAPH)]
    # a result left in a reference cycle holds the store open until collected: the
    # reopening collects and waits for it
    import gc

    gc.disable()
    try:
        held: list = [store.oxigraph.quads_for_pattern(None, None, None, None)]
        held.append(held)
        del held
        store.renew(wait=30.0)
    finally:
        gc.enable()
    assert store.unwritable is None and store.renewals >= 3
    store.apply(Delta(((s, p, Literal.of(41), DEFAULT_GRAPH),),
                      ((s, p, Literal.of(40), DEFAULT_GRAPH),)))
    assert store.unwritable is None and store.match() == [(s, p, Literal.of(41), DEFAULT_GRAPH)]
    store.close()


def test_the_sib_renews_its_store_between_requests_with_every_quad_kept(tmp_path):
    """The scheduler reopens an on-disk store once `renew_after` maintenance runs are behind
    it; the readings written before and after are all there, and a read follows it."""
    import time

    async def go():
        store = QuadStore(str(tmp_path / "db"), maintain_after=4, renew_after=1)
        sib = Sib(store)
        kp = Client(sib)
        await kp.call(Request(Tx.INSERT_DATA, 1, insert=(Triple(S, P, Literal.of(0)),)))
        tid, i = 2, 0
        deadline = time.monotonic() + 120
        while store.renewals < 2:  # the compactions run in the background meanwhile
            assert time.monotonic() < deadline
            i += 1
            r = await kp.call(Request(Tx.UPDATE_DATA, tid,
                                      delete=(Triple(S, P, Literal.of(i - 1)),),
                                      insert=(Triple(S, P, Literal.of(i)),)))
            assert r.status == Status.OK
            tid = tid % 60_000 + 1
            await asyncio.sleep(0.02)
        assert store.renewals >= 2 and store.unwritable is None
        r = await kp.call(Request(Tx.SELECT, tid, projection=1, where=(Triple(S, P, Var(0)),)))
        assert [row[0] for row in r.result.rows] == [Literal.of(i)]
        await sib.close()
    asyncio.run(go())
