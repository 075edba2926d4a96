"""SIB queries through `Service.submit`: SELECT/ASK/CONSTRUCT, optional graphs, FILTER and BIND,
solution modifiers, QUERY GRAPH, and the RES encoded under MAX RESPONSE SIZE."""
from __future__ import annotations

import asyncio

from ksp import (
    DEFAULT_GRAPH, UDP, TCP, AskResult, BNode, ConstructResult, Literal, Options, Request,
    SelectResult, Status, Triple, Tx, Var, decode_sib_message, encode,
)
from ksp.codes import Op
from ksp.model import Bind, Order, SolutionModifier
from sib import Delta, Sib
from sib.testing import Client, ex

P, NAME, AGE, G1 = ex("p"), ex("name"), ex("age"), ex("g1")
PEOPLE = [(ex(f"u{i}"), i) for i in range(6)]


def t(s, p, o) -> Triple:
    return Triple(s, p, o)


async def people():
    sib = Sib()
    quads = [(u, AGE, Literal.of(20 + i), DEFAULT_GRAPH) for u, i in PEOPLE]
    quads += [(u, NAME, Literal.of(f"n{i}"), DEFAULT_GRAPH) for u, i in PEOPLE if i % 2 == 0]
    quads.append((ex("u9"), AGE, Literal.of(99), G1))
    sib.store.apply(Delta(tuple(quads), ()))
    return sib, Client(sib)


def query(coro_fn):
    return asyncio.run(coro_fn())


def test_select_with_optional_filter_bind_and_modifiers():
    async def go():
        sib, kp = await people()
        req = Request(Tx.SELECT, 1, projection=3, where=(t(Var(0), AGE, Var(3)),),
                      optional=((t(Var(0), NAME, Var(1)),),),
                      options=Options(filters=((Var(3), Literal.of(22), Op.GE),),
                                      binds=(Bind(2, (Var(3), Literal.of(2), Op.MUL)),),
                                      modifier=SolutionModifier(Order.DESC, 2, limit=3,
                                                                offset=1)))
        r = await kp.call(req)
        assert r.status == Status.OK
        # ages 22..25 and 99 (union of graphs): desc by 2*age, skip 1, take 3 -> 25, 24, 23
        assert r.result.variables == 3
        assert [row[2].to_python() for row in r.result.rows] == [50, 48, 46]
        assert [row[1] for row in r.result.rows] == [None, Literal.of("n4"), None]
    query(go)


def test_select_distinct_count_and_query_graph():
    async def go():
        sib, kp = await people()
        r = await kp.call(Request(Tx.SELECT, 1, projection=1, where=(t(Var(1), Var(0), Var(2)),),
                                  options=Options(modifier=SolutionModifier(distinct=True))))
        assert set(r.result.rows) == {(AGE,), (NAME,)}
        r = await kp.call(Request(Tx.SELECT, 2, projection=0, where=(t(Var(0), AGE, Var(1)),)))
        assert r.result == SelectResult(0, ((),) * 7)  # VC 0: a solution count
        r = await kp.call(Request(Tx.SELECT, 3, projection=1, where=(t(Var(0), AGE, Var(1)),),
                                  options=Options(query_graphs=(G1,))))
        assert r.result.rows == ((ex("u9"),),)
        r = await kp.call(Request(Tx.SELECT, 4, projection=1, where=(t(Var(0), AGE, Var(1)),),
                                  options=Options(query_graphs=(DEFAULT_GRAPH,))))
        assert len(r.result.rows) == 6
        r = await kp.call(Request(Tx.SELECT, 5, projection=1, where=(t(Var(0), NAME, Var(1)),),
                                  options=Options(filters=(
                                      (Var(1), Literal.of("^n[24]$"), Op.REGEX),))))
        assert set(r.result.rows) == {(ex("u2"),), (ex("u4"),)}
    query(go)


def test_ask_and_blank_nodes_in_patterns():
    async def go():
        sib, kp = await people()
        yes = await kp.call(Request(Tx.ASK, 1, where=(t(BNode("x"), NAME, Literal.of("n2")),)))
        no = await kp.call(Request(Tx.ASK, 2, where=(t(BNode("x"), NAME, Literal.of("n3")),)))
        assert yes.result == AskResult(True) and no.result == AskResult(False)
        r = await kp.call(Request(Tx.ASK, 3, where=(t(Var(0), AGE, Var(1)),),
                                  options=Options(filters=((Var(1), Literal.of(100), Op.GT),))))
        assert r.result == AskResult(False)
    query(go)


def test_construct_template_dedup_and_fresh_blank_nodes():
    async def go():
        sib, kp = await people()
        r = await kp.call(Request(
            Tx.CONSTRUCT, 1, template=(t(Var(0), ex("known"), Literal.of(True)),
                                       t(BNode("r"), ex("about"), Var(0))),
            where=(t(Var(0), NAME, Var(1)),)))
        triples = r.result.triples
        assert {x.s for x in triples if x.p == ex("known")} == {ex("u0"), ex("u2"), ex("u4")}
        about = [x for x in triples if x.p == ex("about")]
        assert len({x.s for x in about}) == 3  # one fresh node per solution
        assert isinstance(r.result, ConstructResult)
    query(go)


def test_results_within_max_response_size():
    async def go():
        sib, kp = await people()
        full = await kp.call(Request(Tx.SELECT, 1, projection=2,
                                     where=(t(Var(0), AGE, Var(1)),)))
        size = len(encode(full, UDP))
        for transport in (UDP, TCP):
            cap = size - 10
            res = await kp.call(Request(Tx.SELECT, 2, projection=2,
                                        where=(t(Var(0), AGE, Var(1)),),
                                        options=Options(max_response_size=cap)))
            wire = encode(res, transport, max_size=cap)
            assert len(wire) <= cap
            got = decode_sib_message(wire, transport, answers=Tx.SELECT).result
            assert got.total == 7 and 0 < len(got.rows) < 7
            assert set(got.rows) <= set(full.result.rows)
        tiny = encode(full, UDP, max_size=5)
        assert decode_sib_message(tiny, UDP, answers=Tx.SELECT).status == \
            Status.RESPONSE_TOO_LARGE
        zero = decode_sib_message(encode(full, UDP, max_size=10), UDP, answers=Tx.SELECT)
        assert zero.result.total == 7 and zero.result.rows == ()
    query(go)


def test_unordered_results_are_in_one_canonical_order():
    async def go():
        a_sib, a = await people()
        b_sib = Sib()
        quads = list(a_sib.store.match())
        b_sib.store.apply(Delta(tuple(reversed(quads)), ()))
        b = Client(b_sib)
        req = Request(Tx.SELECT, 1, projection=2, where=(t(Var(0), Var(1), Var(2)),))
        assert (await a.call(req)).result == (await b.call(req)).result
    query(go)


def test_construct_result_within_max_response_size():
    async def go():
        sib, kp = await people()
        req = Request(Tx.CONSTRUCT, 1, template=(t(Var(0), ex("aged"), Var(1)),),
                      where=(t(Var(0), AGE, Var(1)),), options=Options(max_response_size=40))
        res = await kp.call(req)
        assert len(res.result.triples) == 7
        wire = encode(res, TCP, max_size=40)
        got = decode_sib_message(wire, TCP, answers=Tx.CONSTRUCT).result
        assert len(wire) <= 40 and got.total == 7 and len(got.triples) < 7
        assert set(got.triples) <= set(res.result.triples)
    query(go)
