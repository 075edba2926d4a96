"""The term caches of sib/oxterms.py stay bounded: a sensor's ever-new readings pass through the
literal caches (at most `LITERALS_CACHED` entries each) without piling up long-lived objects
for the garbage collector's full passes to walk (`ksp bench soak --ab`), while a literal that
recurs stays cached."""
from __future__ import annotations

import gc

from ksp.terms import XSD_INTEGER, Literal
from sib.oxterms import LITERALS_CACHED, canonical, term_caches, to_ox


def readings(start: int, count: int) -> list[Literal]:
    return [Literal(str(2_000_000 + n), XSD_INTEGER) for n in range(start, start + count)]


def live_literals() -> int:
    return sum(type(o) is Literal for o in gc.get_objects())


def test_new_readings_leave_the_literal_caches_bounded_and_a_recurring_literal_cached():
    state = Literal("on")
    for lit in readings(0, 3 * LITERALS_CACHED):
        to_ox(canonical(lit))
        to_ox(canonical(state))
    for name in ("literals", "canonical literals"):
        assert term_caches()[name].currsize <= LITERALS_CACHED
    hits = term_caches()["literals"].hits
    to_ox(state)
    assert term_caches()["literals"].hits == hits + 1


def test_live_literals_stay_flat_under_new_readings():
    for lit in readings(10**6, 2 * LITERALS_CACHED):  # the caches full
        to_ox(canonical(lit))
    gc.collect()
    before = live_literals()
    for lit in readings(2 * 10**6, 4 * LITERALS_CACHED):
        to_ox(canonical(lit))
    gc.collect()
    assert live_literals() - before < LITERALS_CACHED // 8
