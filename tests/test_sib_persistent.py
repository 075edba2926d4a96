"""Persistent operations through `Service.submit`: INDs only on change, shared evaluation of
identical queries, TERMINATE/RESET, rules and their cascade limit, graph drops, unreachable KPs."""
from __future__ import annotations

import asyncio

from ksp import (
    IRI, AskResult, Literal, Options, Request, Response, SelectResult, Status, Triple, Tx, Var,
)
from ksp.codes import Op
from ksp.model import Bind
from sib import Sib
from sib.testing import Client, ex

S, P, Q, TEMP, MAX, FAN, STATE, G1 = (ex(x) for x in ("s", "p", "q", "temp", "max", "fan",
                                                     "state", "g1"))


def t(s, p, o) -> Triple:
    return Triple(s, p, o)


def run(coro_fn):
    return asyncio.run(coro_fn())


def put(tid, s, p, value):
    """Set (s, p) to value: UPDATE with the old value as an optional group."""
    return Request(Tx.UPDATE, tid, delete=(t(s, p, Var(0)),), insert=(t(s, p, Literal.of(value)),),
                   where=(), options=Options(optional=((t(s, p, Var(0)),),)))


def subscribe(tid, p=P):
    return Request(Tx.SELECT_PERSISTENT, tid, projection=2, where=(t(Var(0), p, Var(1)),))


def test_ind_with_full_result_on_change_and_never_otherwise():
    async def go():
        sib = Sib()
        w, r = Client(sib, "writer"), Client(sib, "reader")
        res = await r.call(subscribe(1))
        assert res.result == SelectResult(2, ())
        await w.call(put(1, S, P, 1))
        await w.call(put(2, S, Q, 1))          # another predicate: no IND
        await w.call(put(3, S, P, 1))          # same value again: no change, no IND
        await w.call(put(4, ex("s2"), P, 2))
        inds = r.inds(1)
        assert [i.result.rows for i in inds] == [
            ((S, Literal.of(1)),),
            ((S, Literal.of(1)), (ex("s2"), Literal.of(2))),
        ]
        assert all(i.indication and i.status == Status.OK for i in inds)
    run(go)


def test_ask_and_construct_persistent():
    async def go():
        sib = Sib()
        w, r = Client(sib, "w"), Client(sib, "r")
        ask = Request(Tx.ASK_PERSISTENT, 1, where=(t(S, P, Var(0)),),
                      options=Options(filters=((Var(0), Literal.of(10), Op.GT),)))
        assert (await r.call(ask)).result == AskResult(False)
        con = Request(Tx.CONSTRUCT_PERSISTENT, 2, template=(t(Var(0), ex("seen"), Var(1)),),
                      where=(t(Var(0), P, Var(1)),))
        assert (await r.call(con)).result.triples == ()
        for i, v in enumerate((5, 11, 12, 3)):
            await w.call(put(i, S, P, v))
        assert [i.result for i in r.inds(1)] == [AskResult(True), AskResult(False)]
        assert [i.result.triples for i in r.inds(2)] == [
            (t(S, ex("seen"), Literal.of(v)),) for v in (5, 11, 12, 3)]
    run(go)


def test_identical_persistent_queries_share_one_evaluation():
    async def go():
        sib = Sib()
        w = Client(sib, "w")
        readers = [Client(sib, f"r{i}") for i in range(5)]
        for r in readers:
            await r.call(subscribe(7))
        before = sib.core.evaluations
        await w.call(put(1, S, P, 1))
        assert sib.core.evaluations - before == 1
        assert all(len(r.inds(7)) == 1 for r in readers)
        await readers[0].call(Request(Tx.TERMINATE, 7))
        await w.call(put(2, S, P, 2))
        assert len(readers[0].inds(7)) == 1 and all(len(r.inds(7)) == 2 for r in readers[1:])
    run(go)


def test_terminate_and_reset():
    async def go():
        sib = Sib()
        w, r = Client(sib, "w"), Client(sib, "r")
        for tid in (1, 2, 3):
            await r.call(subscribe(tid))
        res = await r.call(Request(Tx.TERMINATE, 1))
        assert res.status == Status.OK and r.channels[1].ended
        assert (await r.call(Request(Tx.TERMINATE, 1))).status == Status.UNKNOWN_TRANSACTION
        # Another KP cannot end r's transaction: TIDs are scoped to the KP (R12).
        assert (await w.call(Request(Tx.TERMINATE, 2))).status == Status.UNKNOWN_TRANSACTION
        assert (await r.call(Request(Tx.RESET, 9))).status == Status.OK
        assert r.channels[2].ended and r.channels[3].ended
        assert (await r.call(Request(Tx.RESET, 10))).status == Status.OK  # none left: still OK
        await w.call(put(1, S, P, 1))
        assert r.inds() == [] and sib.core.persistent_count == 0
    run(go)


def test_unreachable_kp_loses_its_operations_each_with_a_final_terminated_ind():
    """The final IND is sent, with its own retries: a KP back in time is told, not left
    waiting for INDs that never come."""
    async def go():
        sib = Sib()
        w, r = Client(sib, "w"), Client(sib, "r")
        await r.call(subscribe(1))
        sib.kp_unreachable(r.kp, 1)
        await sib.drain()
        assert [i.status for i in r.inds()] == [Status.TERMINATED]
        assert sib.core.persistent_count == 0
        r.clear()
        await w.call(put(1, S, P, 1))
        assert r.inds() == []
    run(go)


def thermostat_rules(kp: Client):
    """Fan on when temp > max, off when temp <= max (two rules, as the Greenhouse's fig. 13)."""
    where = (t(S, TEMP, Var(1)), t(S, MAX, Var(2)), t(FAN, STATE, Var(0)))
    on = Request(Tx.UPDATE_PERSISTENT, 1, delete=(t(FAN, STATE, Var(0)),),
                 insert=(t(FAN, STATE, Literal.of("on")),), where=where,
                 options=Options(filters=((Var(1), Var(2), Op.GT),)))
    off = Request(Tx.UPDATE_PERSISTENT, 2, delete=(t(FAN, STATE, Var(0)),),
                  insert=(t(FAN, STATE, Literal.of("off")),), where=where,
                  options=Options(filters=((Var(1), Var(2), Op.LE),)))
    return on, off


def test_rules_fire_when_their_pattern_has_new_solutions():
    async def go():
        sib = Sib()
        sensor, auto, actuator = Client(sib, "sensor"), Client(sib, "auto"), Client(sib, "act")
        await sensor.call(put(1, S, MAX, 25.7))
        await sensor.call(put(2, FAN, STATE, "off"))
        for rule in thermostat_rules(auto):
            assert (await auto.call(rule)).status == Status.OK
        watch = Request(Tx.SELECT_PERSISTENT, 5, projection=1, where=(t(FAN, STATE, Var(0)),))
        await actuator.call(watch)
        for i, temp in enumerate((20.0, 30.0, 31.0, 22.0, 26.0)):
            await sensor.call(put(10 + i, S, TEMP, temp))
        states = [i.result.rows[0][0].lexical for i in actuator.inds(5)]
        assert states == ["on", "off", "on"]  # 20: stays off (no IND); 31: stays on
        assert auto.inds() == []
    run(go)


def test_new_rule_fires_at_once_if_it_has_solutions():
    async def go():
        sib = Sib()
        kp = Client(sib)
        await kp.call(put(1, S, P, 1))
        rule = Request(Tx.INSERT_PERSISTENT, 2, insert=(t(Var(0), Q, Var(1)),),
                       where=(t(Var(0), P, Var(1)),))
        await kp.call(rule)
        assert (S, Q, Literal.of(1), ex("")[:0]) in set(sib.store.match())
    run(go)


def test_runaway_rule_is_ended_with_terminated_and_its_work_kept():
    async def go():
        sib = Sib(rule_firing_limit=5)
        kp, w, r = Client(sib, "rules"), Client(sib, "w"), Client(sib, "r")
        await w.call(put(1, S, ex("count"), 0))
        # count := count + 1 whenever count exists: every firing changes its own solutions.
        counter = Request(Tx.UPDATE_PERSISTENT, 3, delete=(t(S, ex("count"), Var(0)),),
                          insert=(t(S, ex("count"), Var(1)),),
                          where=(t(S, ex("count"), Var(0)),),
                          options=Options(binds=(Bind(1, (Var(0), Literal.of(1), Op.ADD)),)))
        watch = Request(Tx.SELECT_PERSISTENT, 4, projection=1, where=(t(S, ex("count"), Var(0)),))
        await r.call(watch)
        assert (await kp.call(counter)).status == Status.OK
        assert kp.inds(3) == [Response(3, Status.TERMINATED, indication=True, seq=1)]
        assert sib.core.persistent_count == 1
        # Five firings happened; the subscriber sees only the final state of the cascade.
        assert [i.result.rows for i in r.inds(4)] == [((Literal.of(5),),)]
        await w.call(put(2, S, ex("count"), 100))
        assert len(kp.inds(3)) == 1  # ended: it fires no more
    run(go)


def test_ping_pong_rules_are_stopped_by_the_cascade_limit():
    async def go():
        sib = Sib(rule_firing_limit=1000, cascade_limit=20)
        kp, w = Client(sib, "rules"), Client(sib, "w")

        def hop(tid, src, dst):  # dst := src + 1, for ever: two of them feed each other
            return Request(Tx.UPDATE_PERSISTENT, tid, delete=(t(S, dst, Var(2)),),
                           insert=(t(S, dst, Var(1)),), where=(t(S, src, Var(0)),),
                           options=Options(optional=((t(S, dst, Var(2)),),),
                                           binds=(Bind(1, (Var(0), Literal.of(1), Op.ADD)),)))
        await kp.call(hop(1, P, Q))
        await kp.call(hop(2, Q, P))
        await w.call(put(1, S, P, 0))
        ended = [tid for kind, _, tid, resp in kp.log
                 if kind == "ind" and resp.status == Status.TERMINATED]
        # Both still wanted to fire when the budget ran out: both are part of the runaway.
        assert sorted(ended) == [1, 2] and sib.core.persistent_count == 0
        values = {q[1]: q[2].to_python() for q in sib.store.match(S)}
        assert 10 <= max(values.values()) <= 20  # at most 20 firings, each adding 1
        assert (await w.call(put(2, S, P, 100))).status == Status.OK
        assert {q[1]: q[2].to_python() for q in sib.store.match(S)}[Q] == values[Q]
    run(go)


def test_dropping_a_graph_ends_operations_that_name_it():
    async def go():
        sib = Sib()
        w, r = Client(sib, "w"), Client(sib, "r")
        await w.call(Request(Tx.CREATE, 1, graphs=(G1,)))
        sub = Request(Tx.SELECT_PERSISTENT, 2, projection=1, where=(t(Var(0), P, Var(1)),),
                      options=Options(query_graphs=(G1,)))
        await r.call(sub)
        await r.call(subscribe(3))
        await w.call(Request(Tx.DROP, 2, graphs=(G1,)))
        assert r.inds(2) == [Response(2, Status.TERMINATED, indication=True, seq=1)]
        assert sib.core.persistent_count == 1
    run(go)


def test_close_terminates_persistent_operations():
    async def go():
        sib = Sib()
        r = Client(sib, "r")
        await r.call(subscribe(1))
        await sib.close()
        assert r.inds(1) == [Response(1, Status.TERMINATED, indication=True, seq=1)]
    run(go)


def test_rule_with_a_template_term_the_store_cannot_hold_is_refused():
    async def go():
        sib = Sib()
        kp = Client(sib)
        bad = Request(Tx.INSERT_PERSISTENT, 1, insert=(t(Var(0), ex("x"), IRI("é:x")),),
                      where=(t(Var(0), P, Var(1)),))
        assert (await kp.call(bad)).status == Status.INVALID_DATA_FORMAT
        assert sib.core.persistent_count == 0
    run(go)


def test_changes_that_cannot_join_the_pattern_are_not_evaluated():
    async def go():
        sib = Sib()
        w, r = Client(sib, "w"), Client(sib, "r")
        TYPE, VALUE = ex("type"), ex("value")
        for k, kind in (("t1", "Temp"), ("h1", "Hum")):
            await w.call(Request(Tx.INSERT_DATA, 1, insert=(t(ex(k), TYPE, ex(kind)),)))
        temps = Request(Tx.SELECT_PERSISTENT, 1, projection=2,
                        where=(t(Var(0), TYPE, ex("Temp")), t(Var(0), VALUE, Var(1))))
        await r.call(temps)
        before = sib.core.evaluations
        await w.call(put(2, ex("h1"), VALUE, 55))   # a humidity reading: screened out
        assert sib.core.evaluations == before and r.inds(1) == []
        await w.call(put(3, ex("t1"), VALUE, 21))
        assert sib.core.evaluations == before + 1
        assert r.inds(1)[-1].result.rows == ((ex("t1"), Literal.of(21)),)
        await w.call(Request(Tx.DELETE_DATA, 4, delete=(t(ex("t1"), TYPE, ex("Temp")),)))
        assert r.inds(1)[-1].result.rows == ()  # a removal screened against the old state
    run(go)


def test_delete_persistent_rule_and_tid_reuse_replaces():
    async def go():
        sib = Sib()
        kp, w = Client(sib, "rules"), Client(sib, "w")
        ALARM, OK = ex("alarm"), ex("ok")
        clear = Request(Tx.DELETE_PERSISTENT, 1, delete=(t(Var(0), ALARM, Var(1)),),
                        where=(t(Var(0), ALARM, Var(1)), t(Var(0), OK, Literal.of(True))))
        assert (await kp.call(clear)).status == Status.OK
        await w.call(Request(Tx.INSERT_DATA, 1, insert=(t(S, ALARM, Literal.of("hot")),)))
        assert len(sib.store.match(S, ALARM)) == 1
        await w.call(Request(Tx.INSERT_DATA, 2, insert=(t(S, OK, Literal.of(True)),)))
        assert sib.store.match(S, ALARM) == []
        # The same KP reusing TID 1 for a subscription replaces the rule (R12).
        await kp.call(subscribe(1))
        assert sib.core.persistent_count == 1 and kp.channels[1].ended
        await w.call(Request(Tx.INSERT_DATA, 3, insert=(t(S, ALARM, Literal.of("hot")),)))
        assert len(sib.store.match(S, ALARM)) == 1  # the rule is gone
    run(go)
