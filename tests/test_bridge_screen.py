"""`bridge.screen.Screen`: an update skips the wait for notifications only when none of its
written triples can match a subscription's pattern — checked against the plain definition on
random patterns and templates, with subscriptions added and removed; and through the bridge,
an unrelated update skips the round trip while a related one still gets its IND first."""
from __future__ import annotations

import asyncio

from hypothesis import given, settings, strategies as st

from bridge.screen import Screen
from ksp import Literal, Request, Status, Triple, Tx, Var
from ksp.session import KPIdentity
from ksp.terms import BNode, IRI
from sib.oxterms import canonical

EX = "http://example.org/"
CONSTANTS = [IRI(EX + "a"), IRI(EX + "b"), IRI(EX + "p"), Literal("1", EX + "int"),
             Literal("1"), Literal("x", lang="en")]
terms = st.one_of(st.sampled_from(CONSTANTS), st.builds(Var, st.integers(0, 2)),
                  st.just(BNode("b")))
triples = st.builds(Triple, terms, terms, terms)


def matches(written: Triple, pattern: Triple) -> bool:
    wild = (Var, BNode)
    return all(isinstance(w, wild) or isinstance(p, wild) or canonical(w) == canonical(p)
               for w, p in zip(written, pattern))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(triples, min_size=1, max_size=3), max_size=6),
       st.sets(st.integers(0, 5)), st.lists(triples, min_size=1, max_size=3))
def test_may_touch_is_the_plain_definition(subscriptions, removed, written):
    screen = Screen()
    for patterns in subscriptions:
        screen.add(patterns)
    kept = [p for i, p in enumerate(subscriptions) if i not in removed]
    for i in removed:
        if i < len(subscriptions):
            screen.remove(subscriptions[i])
    want = any(matches(w, p) for patterns in kept for p in patterns for w in written)
    assert screen.may_touch(written) is want


def test_an_unrelated_update_skips_the_wait_a_related_one_does_not():
    from bridge.broker import Broker
    from bridge.service import Bridge
    from sib import Sib
    from sib.sepa import SepaGate
    from sib.testing import RecordingChannel

    s, p, q = IRI(EX + "s"), IRI(EX + "p"), IRI(EX + "q")

    async def main():
        sib = await Sib().start()
        gate = await SepaGate(sib, http_port=0, ws_port=0).start()
        try:
            async with Broker(f"http://127.0.0.1:{gate.http_port}") as broker:
                bridge = await Bridge(broker,
                                      f"ws://127.0.0.1:{gate.ws_port}/subscribe").start()
                log: list = []
                sub = Request(Tx.SELECT_PERSISTENT, 1, projection=1,
                              where=(Triple(s, p, Var(0)),))
                watcher = RecordingChannel(KPIdentity(None, ("127.0.0.1", 1)), 1, log)
                assert (await bridge.answer(sub, watcher)).status is Status.OK
                writer = RecordingChannel(KPIdentity(None, ("127.0.0.1", 2)), 2, log)
                other = Request(Tx.INSERT_DATA, 2, insert=(Triple(s, q, Literal("1")),))
                assert (await bridge.answer(other, writer)).status is Status.OK
                assert bridge.flushes_skipped == 1
                mine = Request(Tx.INSERT_DATA, 3, insert=(Triple(s, p, Literal("2")),))
                assert (await bridge.answer(mine, writer)).status is Status.OK
                assert bridge.flushes_skipped == 1
                # Its IND went out before `answer` returned (the RES comes after it).
                assert [kind for kind, *_ in log] == ["ind"]
                await bridge.close()
        finally:
            await gate.close()
            await sib.close()

    asyncio.run(asyncio.wait_for(main(), 60))
