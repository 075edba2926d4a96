"""Reads give way to the devices (`ksp bench stall`'s target): a reader thread waits while the
write path runs (`sib.budget.Gate`), runs at a lower CPU priority (`sib.readers`), keys its rows
without making terms for the rows it drops (`sib.query.store_term_key`), and one SEPA client
cannot take the event loop (`sib.fairness.Pace`, `[sepa] requests_per_second_per_identity`).

Assertions are on what happened, never on elapsed time: a wait is seen as a count, a parked
reader as rows it has not read.
"""
from __future__ import annotations

import asyncio
import os
import sys
import threading
import time

import aiohttp
import pyoxigraph as ox
import pytest
from hypothesis import given, settings, strategies as st

from ksp import Literal, Request, Status, Triple, Tx, Var
from ksp.session import KPIdentity
from ksp.terms import RDF_LANGSTRING, XSD_STRING, BNode, IRI
from sib import Sib
from sib.budget import GIVE_WAY_EVERY, Deadline, Gate, checked, within
from sib.config import ConfigError, load as load_config
from sib.fairness import Pace
from sib.oxterms import from_ox, to_ox
from sib.pattern import Pattern
from sib.query import evaluate, evaluate_once, store_term_key, term_key
from sib.readers import Readers
from sib.sepa import SepaGate
from sib.store import QuadStore
from sib.testing import RecordingChannel, ex
from sib.updates import data_delta, fresh_labels


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


def wait_until(condition, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met"
        time.sleep(0.01)


# -- the gate ---------------------------------------------------------------------------------

def test_a_reader_waits_at_a_closed_gate_and_goes_on_once_it_opens():
    gate = Gate(longest=60.0)
    read: list[int] = []

    def reader():
        with within(Deadline(120, "the read", gate)):
            for i in checked(range(10_000)):
                read.append(i)

    gate.close()
    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    wait_until(lambda: len(read) >= GIVE_WAY_EVERY)
    time.sleep(0.3)  # time enough to read thousands more rows, were it not waiting
    assert len(read) == GIVE_WAY_EVERY and thread.is_alive()
    gate.open()
    thread.join(60)
    assert read == list(range(10_000))


def test_a_gate_held_closed_slows_a_read_but_never_stops_it():
    """A steady stream of writes (the gate never opens): the reader waits `longest` at a time,
    then reads `rows` rows before its next wait, and so ends."""
    gate = Gate(longest=0.001, rows=512)
    gate.close()
    done = []

    def reader():
        with within(Deadline(120, "the read", gate)):
            done.append(sum(1 for _ in checked(range(20_000))))

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    thread.join(60)
    assert done == [20_000]


def test_closes_and_opens_pair_up():
    gate = Gate()
    gate.close()
    gate.close()
    gate.open()
    assert not gate.is_open  # one write still runs
    gate.open()
    assert gate.is_open
    gate.open()  # more opens than closes: stays open, counts from zero again
    gate.close()
    assert not gate.is_open


def test_the_sib_closes_the_readers_gate_for_each_write_until_it_is_done():
    kp = KPIdentity(None, ("127.0.0.1", 5000))
    log: list = []

    async def scenario():
        sib = await Sib().start()
        gate = sib.readers.gate
        try:
            assert gate.is_open
            for tid in (1, 2):
                sib.submit(Request(Tx.INSERT_DATA, tid, insert=(
                    Triple(ex("s"), ex("p"), Literal.of(tid)),)), RecordingChannel(kp, tid, log))
            assert not gate.is_open  # queued, not yet applied
            sib.submit(Request(Tx.SELECT, 3, projection=1, where=(
                Triple(ex("s"), ex("p"), Var(0)),)), RecordingChannel(kp, 3, log))
            await sib.drain()
            assert gate.is_open
            await sib.call(lambda: None)  # the gate's work closes it too, and opens it
            assert gate.is_open
        finally:
            await sib.close()

    run(scenario())
    answers = {entry[2]: entry[3] for entry in log if entry[0] == "res"}
    assert [answers[t].status for t in (1, 2, 3)] == [Status.OK] * 3
    assert len(answers[3].result.rows) == 2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's nice: Linux")
def test_reader_threads_run_at_a_lower_cpu_priority_than_the_process():
    readers = Readers(threads=1)
    mine = os.getpriority(os.PRIO_PROCESS, 0)

    async def scenario():
        return await readers.run(
            lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id()), 30)

    theirs = run(scenario())
    assert theirs == min(19, mine + Readers.nice)
    assert theirs > mine or mine == 19


# -- rows keyed without their terms -----------------------------------------------------------

texts = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\x01"),
                max_size=12)
iris = st.builds(lambda t: IRI("http://example.org/" + t),
                 st.text(st.characters(whitelist_categories=("L", "Nd")), max_size=12))
literals = st.one_of(
    st.builds(lambda t: Literal(t, XSD_STRING), texts),
    st.builds(lambda i: Literal(str(i), "http://www.w3.org/2001/XMLSchema#integer"),
              st.integers(-10**6, 10**6)),
    st.builds(lambda t, lang: Literal(t, RDF_LANGSTRING, lang), texts,
              st.sampled_from(["en", "fr", "en-gb"])),
    st.builds(lambda t: Literal(t, "http://example.org/dt"), texts))
bnodes = st.builds(BNode, st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True))


@settings(max_examples=300, deadline=None)
@given(st.one_of(iris, literals, bnodes))
def test_a_store_terms_key_is_the_key_of_its_ksp_term(term):
    stored = to_ox(term)
    assert store_term_key(stored) == term_key(from_ox(stored))
    assert store_term_key(None) == term_key(None)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(iris, st.one_of(iris, literals, bnodes)), min_size=1, max_size=40))
def test_a_one_shot_select_keeps_the_rows_every_row_would_give_first(pairs):
    """`evaluate_once` keys pyoxigraph's rows and converts only those kept: the same rows, in
    the same canonical order, as `evaluate` gives from every converted row."""
    store = QuadStore()
    insert = tuple(Triple(s, ex("p"), o) for s, o in pairs)
    store.apply(data_delta(store, Request(Tx.INSERT_DATA, 0, insert=insert), fresh_labels()))
    request = Request(Tx.SELECT, 1, projection=2, where=(Triple(Var(0), ex("p"), Var(1)),))
    full = evaluate(store, request, Pattern(request))
    for cap in (None, 40, 10_000):
        once = evaluate_once(store, request, Pattern(request), cap)
        assert once.rows == full.rows[:len(once.rows)]
        if len(once.rows) < len(full.rows):
            assert once.total == len(full.rows)


def test_store_term_key_orders_as_the_canonical_order():
    terms = [None, IRI("http://a/"), IRI("http://b/"), BNode("x"),
             Literal("1", "http://www.w3.org/2001/XMLSchema#integer"),
             Literal("a", RDF_LANGSTRING, "en"), Literal("a")]
    stored = [None if t is None else to_ox(t) for t in terms]
    assert sorted(stored, key=lambda t: store_term_key(t)) == sorted(
        stored, key=lambda t: term_key(None if t is None else from_ox(t)))
    assert isinstance(stored[1], ox.NamedNode)


# -- one client's pace ------------------------------------------------------------------------

class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_pace_lets_a_burst_through_then_spaces_requests_and_refuses_far_past_it():
    clock = Clock()
    pace = Pace(rate=10, burst=3, most=0.25, clock=clock)
    assert [pace.delay("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    waits = [pace.delay("a") for _ in range(2)]
    assert waits == pytest.approx([0.1, 0.2])
    assert pace.delay("a") is None and pace.refused == 1  # 0.3 s away: past `most`
    assert pace.delay("b") == 0.0  # another party: a pace of its own
    clock.now += 10  # quiet for a while: a whole burst again
    assert [pace.delay("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert pace.waited == 2


def test_a_pace_remembers_at_most_its_parties_and_none_without_a_rate():
    clock = Clock()
    pace = Pace(rate=1, burst=1, parties=3, clock=clock)
    for party in range(10):
        assert pace.delay(party) == 0.0
    assert pace.remembered == 3
    unpaced = Pace(None)
    assert all(unpaced.delay("a") == 0.0 for _ in range(10_000)) and not unpaced.remembered


class PacedLab:
    def __init__(self, **pace) -> None:
        self.pace = pace

    async def __aenter__(self):
        self.sib = await Sib().start()
        self.gate = await SepaGate(self.sib, http_port=0, ws_port=0,
                                   requests_per_second_per_identity=1).start()
        self.gate.pace = Pace(1, **self.pace)
        self.http = aiohttp.ClientSession()
        self.base = f"http://127.0.0.1:{self.gate.http_port}"
        return self

    async def __aexit__(self, *exc):
        await self.http.close()
        await self.gate.close()
        await self.sib.close()

    async def query(self) -> tuple[int, str]:
        async with self.http.post(self.base + "/query",
                                  data={"query": "ASK { ?s ?p ?o }"}) as r:
            body = await r.json(content_type=None)
            return r.status, body.get("error", "") if isinstance(body, dict) else ""


@pytest.mark.slow
def test_a_sepa_client_past_its_pace_waits_its_turn_and_far_past_it_is_refused_429():
    async def scenario():
        async with PacedLab(burst=1, most=5.0) as lab:
            one_after_another = [await lab.query() for _ in range(3)]
            waited = lab.gate.pace.waited
        async with PacedLab(burst=1, most=0.5) as lab:
            at_once = await asyncio.gather(*(lab.query() for _ in range(4)))
        async with PacedLab(burst=1, most=5.0) as lab:
            ws_url = f"ws://127.0.0.1:{lab.gate.ws_port}/subscribe"
            frames = []
            async with lab.http.ws_connect(ws_url) as ws:
                for k in range(3):  # a frame is read once the one before is answered
                    await ws.send_json({"subscribe": {
                        "sparql": f"SELECT * WHERE {{ <{ex('s')}{k}> ?p ?o }}", "alias": str(k)}})
                    frames.append(await ws.receive_json(timeout=30))
            frames_waited = lab.gate.pace.waited
        return one_after_another, waited, at_once, frames, frames_waited

    one_after_another, waited, at_once, frames, frames_waited = run(scenario())
    assert one_after_another == [(200, "")] * 3 and waited >= 1
    assert sorted(at_once) == [(200, "")] + [(429, "too_many_requests")] * 3
    assert [f.get("notification", {}).get("alias") for f in frames] == ["0", "1", "2"], frames
    assert frames_waited >= 1


def test_the_pace_is_configured_in_sepa_and_zero_turns_it_off(tmp_path):
    path = tmp_path / "sib.toml"
    path.write_text("[sepa]\nrequests_per_second_per_identity = 50\n")
    assert load_config(path).sepa_requests_per_second_per_identity == 50
    path.write_text("[sepa]\nrequests_per_second_per_identity = 0\n")
    assert load_config(path).sepa_requests_per_second_per_identity == 0
    path.write_text("[sepa]\nrequests_per_second_per_identity = -1\n")
    with pytest.raises(ConfigError, match="requests_per_second_per_identity"):
        load_config(path)


def test_responses_still_flow_to_a_kp_whose_write_closed_the_gate():
    """Guard against a gate left closed: after many writes and reads interleaved, every read
    is answered and the gate is open."""
    kp = KPIdentity(None, ("127.0.0.1", 5001))
    log: list = []

    async def scenario():
        sib = await Sib().start()
        try:
            for tid in range(1, 201):
                if tid % 2:
                    request = Request(Tx.INSERT_DATA, tid, insert=(
                        Triple(ex("s"), ex("p"), Literal.of(tid)),))
                else:
                    request = Request(Tx.SELECT, tid, projection=1, where=(
                        Triple(ex("s"), ex("p"), Var(0)),))
                sib.submit(request, RecordingChannel(kp, tid, log))
            await sib.drain()
            return sib.readers.gate.is_open
        finally:
            await sib.close()

    assert run(scenario())
    statuses = [entry[3].status for entry in log if entry[0] == "res"]
    assert len(statuses) == 200 and set(statuses) == {Status.OK}
