"""SIB updates and graph management, driven through `Service.submit`: every update type, the
graph options, the statuses of bad requests, and that a refused request changes nothing."""
from __future__ import annotations

import asyncio

import pytest

from ksp import (
    DEFAULT_GRAPH, BNode, Literal, Options, Request, Status, Triple, Tx, Var,
)
from ksp.model import Bind
from ksp.codes import Op
from ksp.terms import XSD_INTEGER
from sib import QuadStore, Sib
from sib.testing import Client, ex

S, P, Q, G1, G2 = ex("s"), ex("p"), ex("q"), ex("g1"), ex("g2")


def t(s, p, o) -> Triple:
    return Triple(s, p, o)


def run(coro):
    return asyncio.run(coro)


def contents(store: QuadStore) -> set:
    return set(store.match())


async def setup(*quads):
    sib = Sib()
    sib.store.apply(__import__("sib").Delta(tuple(quads), ()))
    return sib, Client(sib)


def test_insert_delete_update_data():
    async def go():
        sib, kp = await setup()
        assert (await kp.call(Request(Tx.INSERT_DATA, 1, insert=(t(S, P, Literal.of(1)),)))
                ).status == Status.OK
        assert contents(sib.store) == {(S, P, Literal.of(1), DEFAULT_GRAPH)}
        r = await kp.call(Request(Tx.UPDATE_DATA, 2, delete=(t(S, P, Literal.of(1)),),
                                  insert=(t(S, P, Literal.of(2)),)))
        assert r.status == Status.OK
        assert contents(sib.store) == {(S, P, Literal.of(2), DEFAULT_GRAPH)}
        await kp.call(Request(Tx.DELETE_DATA, 3, delete=(t(S, P, Literal.of(2)),)))
        assert contents(sib.store) == set()
    run(go())


def test_data_graph_options_and_delete_from_every_graph():
    async def go():
        sib, kp = await setup()
        ins = Request(Tx.INSERT_DATA, 1, insert=(t(S, P, Literal.of(1)),),
                      options=Options(insert_graphs=(G1, G2)))
        await kp.call(ins)
        assert contents(sib.store) == {(S, P, Literal.of(1), G1), (S, P, Literal.of(1), G2)}
        await kp.call(Request(Tx.INSERT_DATA, 2, insert=(t(S, P, Literal.of(1)),)))
        # DELETE GRAPH restricts; without it, every graph.
        await kp.call(Request(Tx.DELETE_DATA, 3, delete=(t(S, P, Literal.of(1)),),
                              options=Options(delete_graphs=(G1,))))
        assert contents(sib.store) == {(S, P, Literal.of(1), G2),
                                       (S, P, Literal.of(1), DEFAULT_GRAPH)}
        await kp.call(Request(Tx.DELETE_DATA, 4, delete=(t(S, P, Literal.of(1)),)))
        assert contents(sib.store) == set()
    run(go())


def test_insert_data_blank_nodes_are_fresh_per_request():
    async def go():
        sib, kp = await setup()
        for tid in (1, 2):
            await kp.call(Request(Tx.INSERT_DATA, tid, insert=(t(BNode("x"), P, Literal.of(1)),
                                                                t(S, Q, BNode("x")))))
        quads = contents(sib.store)
        subjects = {q[0] for q in quads if q[1] == P}
        assert len(subjects) == 2 and all(isinstance(s, BNode) for s in subjects)
        assert {q[2] for q in quads if q[1] == Q} == subjects  # same label, same node
    run(go())


def test_pattern_updates_with_filter_bind_optional_and_graphs():
    async def go():
        sib, kp = await setup((ex("a"), P, Literal.of(1), DEFAULT_GRAPH),
                              (ex("b"), P, Literal.of(5), DEFAULT_GRAPH),
                              (ex("b"), Q, Literal.of("x"), G1))
        # INSERT with BIND: ?1 := ?0 value + 1, only where value > 2 (FILTER).
        req = Request(Tx.INSERT, 1, insert=(t(Var(0), Q, Var(2)),),
                      where=(t(Var(0), P, Var(1)),),
                      options=Options(filters=((Var(1), Literal.of(2), Op.GT),),
                                      binds=(Bind(2, (Var(1), Literal.of(1), Op.ADD)),),
                                      insert_graphs=(G2,)))
        assert (await kp.call(req)).status == Status.OK
        assert (ex("b"), Q, Literal.of(6), G2) in contents(sib.store)
        assert not any(q[0] == ex("a") and q[1] == Q for q in contents(sib.store))
        # DELETE with OPTIONAL PATTERN and QUERY GRAPH: only matches in G1 count.
        req = Request(Tx.DELETE, 2, delete=(t(Var(0), Q, Var(1)),),
                      where=(t(Var(0), Q, Var(1)),), options=Options(query_graphs=(G1,)))
        await kp.call(req)
        assert (ex("b"), Q, Literal.of("x"), G1) not in contents(sib.store)
        assert (ex("b"), Q, Literal.of(6), G2) in contents(sib.store)
        # UPDATE with an optional group: unbound ?2 makes its template triple skipped.
        req = Request(Tx.UPDATE, 3, delete=(t(Var(0), P, Var(1)),),
                      insert=(t(Var(0), P, Literal.of(0)), t(Var(0), Q, Var(2))),
                      where=(t(Var(0), P, Var(1)),),
                      options=Options(optional=((t(Var(0), ex("missing"), Var(2)),),)))
        await kp.call(req)
        got = contents(sib.store)
        assert (ex("a"), P, Literal.of(0), DEFAULT_GRAPH) in got
        assert (ex("b"), P, Literal.of(0), DEFAULT_GRAPH) in got
        assert not any(q[1] == P and q[2] != Literal.of(0) for q in got)
    run(go())


def test_literals_are_stored_canonically_and_found_by_value():
    async def go():
        sib, kp = await setup()
        await kp.call(Request(Tx.INSERT_DATA, 1, insert=(t(S, P, Literal("01", XSD_INTEGER)),)))
        await kp.call(Request(Tx.DELETE_DATA, 2, delete=(t(S, P, Literal("1", XSD_INTEGER)),)))
        assert contents(sib.store) == set()
    run(go())


def test_graph_management():
    async def go():
        sib, kp = await setup((S, P, Literal.of(1), DEFAULT_GRAPH))
        assert (await kp.call(Request(Tx.CREATE, 1, graphs=(G1,)))).status == Status.OK
        assert sib.store.graph_exists(G1)
        assert (await kp.call(Request(Tx.CREATE, 2, graphs=(G2, G1)))).status == \
            Status.GRAPH_EXISTS
        assert not sib.store.graph_exists(G2)  # all or nothing
        assert (await kp.call(Request(Tx.ADD, 3, source=DEFAULT_GRAPH, target=G1))).status == \
            Status.OK
        assert (S, P, Literal.of(1), G1) in contents(sib.store)
        # COPY replaces the target's contents.
        await kp.call(Request(Tx.INSERT_DATA, 4, insert=(t(S, Q, S),),
                              options=Options(insert_graphs=(G2,))))
        await kp.call(Request(Tx.COPY, 5, source=G1, target=G2))
        assert {q for q in contents(sib.store) if q[3] == G2} == {(S, P, Literal.of(1), G2)}
        # MOVE empties and drops the source.
        await kp.call(Request(Tx.MOVE, 6, source=G2, target=ex("g3")))
        assert not sib.store.graph_exists(G2)
        assert (S, P, Literal.of(1), ex("g3")) in contents(sib.store)
        assert (await kp.call(Request(Tx.COPY, 7, source=G2, target=G1))).status == \
            Status.NO_SUCH_GRAPH
        assert (await kp.call(Request(Tx.DROP, 8, graphs=(G1, G2)))).status == \
            Status.NO_SUCH_GRAPH
        assert sib.store.graph_exists(G1)  # nothing half-applied
        assert (await kp.call(Request(Tx.DROP, 9, graphs=(G1, DEFAULT_GRAPH)))).status == \
            Status.OK
        assert not sib.store.graph_exists(G1)
        assert {q[3] for q in contents(sib.store)} == {ex("g3")}
        # MOVE from the default graph clears it; a self-copy changes nothing.
        assert (await kp.call(Request(Tx.COPY, 10, source=ex("g3"), target=ex("g3")))
                ).status == Status.OK
    run(go())


BAD = [
    (Request(Tx.INSERT_DATA, 1, insert=(t(S, P, Var(0)),)), Status.INVALID_DATA_FORMAT),
    (Request(Tx.DELETE_DATA, 1, delete=(t(BNode("b"), P, S),)), Status.INVALID_DATA_FORMAT),
    (Request(Tx.INSERT_DATA, 1, insert=(t(Literal.of(1), P, S),)), Status.INVALID_DATA_FORMAT),
    (Request(Tx.COPY, 1, source=G1), Status.INVALID_DATA_FORMAT),
    (Request(Tx.CREATE, 1, graphs=(DEFAULT_GRAPH,)), Status.INVALID_DATA_FORMAT),
    (Request(Tx.CREATE, 1, graphs=()), Status.INVALID_DATA_FORMAT),
    (Request(Tx.INSERT_DATA, 1, insert=(t(S, P, S),), options=Options(query_graphs=(G1,))),
     Status.INVALID_OPTION_TYPE),
    (Request(Tx.SELECT, 1, projection=1, where=(t(Var(0), P, S),),
             options=Options(optional=((t(Var(0), Q, S),),))), Status.INVALID_OPTION_TYPE),
    (Request(Tx.INSERT, 1, insert=(t(S, P, S),), where=(t(Var(0), P, S),),
             options=Options(filters=((Var(0), Op.EQ),))), Status.INVALID_OPTION_FORMAT),
    (Request(Tx.INSERT, 1, insert=(t(S, P, S),), where=(t(Var(0), P, Var(1)),),
             options=Options(binds=(Bind(0, (Literal.of(1),)),))), Status.INVALID_OPTION_FORMAT),
    (Request(Tx.TERMINATE, 7), Status.UNKNOWN_TRANSACTION),
    # Fault precedence: a data fault wins over an option fault.
    (Request(Tx.INSERT_DATA, 1, insert=(t(S, P, Var(0)),), options=Options(query_graphs=(G1,))),
     Status.INVALID_DATA_FORMAT),
]


@pytest.mark.parametrize("request_,status", BAD, ids=[f"{r.tx.name}-{s.name}" for r, s in BAD])
def test_bad_requests_get_their_status_and_change_nothing(request_, status):
    async def go():
        sib, kp = await setup((S, P, Literal.of(1), DEFAULT_GRAPH))
        before = contents(sib.store)
        r = await kp.call(request_)
        assert r.status == status and r.result is None
        assert contents(sib.store) == before
    run(go())


def test_requests_apply_in_arrival_order_and_submit_does_not_block():
    async def go():
        sib, kp = await setup()
        for i in range(20):  # queued without awaiting anything
            kp.submit(Request(Tx.UPDATE, i, delete=(t(S, P, Var(0)),),
                              insert=(t(S, P, Literal.of(i)),), where=(),
                              options=Options(optional=((t(S, P, Var(0)),),))))
        assert kp.log == []
        await sib.drain()
        assert [tid for _, _, tid, _ in kp.log] == list(range(20))
        assert contents(sib.store) == {(S, P, Literal.of(19), DEFAULT_GRAPH)}
    run(go())
