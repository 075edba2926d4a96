"""Exactly once by request numbers (wire format 15): whatever the network's delays, the KP's
rate and the SIB's processing time, a request answered OK was executed, and none is executed
twice — identical bytes under one TID included. Sans-I/O on a virtual clock, and over real
sockets through a proxy that delays or replays the KP's datagrams."""
from __future__ import annotations

import asyncio
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ksp import Behind, Credentials, Response, Status, Timing, decode_sib_message, encode
from ksp.session import (
    KPSession, RequestReceived, RequestRetried, RequestTimedOut, ResponseReceived,
    SessionOptions,
)

from test_session import KP_ADDR, Net, SIBSession, events, insert
from tools.relay import UdpRelay

KP_ID = bytes(range(16))


def numbered(tid: int, value: int, epoch: int | None):
    request = insert(tid, value)
    return request._replace(options=request.options._replace(epoch=epoch))


def executed(sib) -> list:
    """The requests the SIB surfaced for execution (answered OK at once)."""
    out = []
    for e in events(sib):
        if isinstance(e, RequestReceived):
            out.append(e.request)
            sib.respond(e.kp, e.request.tid, Response(e.request.tid), 0.0)
    return out


def answers(sib, now: float = 0.0) -> list[Response]:
    return [decode_sib_message(data) for data, _ in sib.datagrams_to_send(now)]


def test_identical_bytes_under_a_tid_come_back_under_another_epoch_and_execute():
    """Past 65 536 requests the TID comes back with the next epoch: the same request is new to
    the SIB, however recently it had the first (identical increments)."""
    sib = SIBSession(rng=random.Random(0))
    first, again = encode(numbered(7, 1, None)), encode(numbered(7, 1, 1))
    sib.receive_datagram(first, KP_ADDR, 0.0)
    assert len(executed(sib)) == 1
    answers(sib)
    sib.receive_datagram(again, KP_ADDR, 0.5)  # well within EXCHANGE_LIFETIME
    assert [r.options.epoch for r in executed(sib)] == [1]
    answers(sib)
    sib.receive_datagram(again, KP_ADDR, 0.6)  # its copy: the cached RES, not executed
    assert executed(sib) == [] and [r.status for r in answers(sib)] == [Status.OK]


def test_a_late_copy_after_its_tid_was_reused_is_never_executed():
    """Request A under TID t, then B under t (the next epoch), then a copy of A delayed in the
    network: A is behind B, answered NUMBER BEHIND and not executed."""
    sib = SIBSession(rng=random.Random(0))
    a, b = encode(numbered(7, 1, None)), encode(numbered(7, 2, 1))
    for data in (a, b):
        sib.receive_datagram(data, KP_ADDR, 0.0)
        assert len(executed(sib)) == 1
        answers(sib)
    sib.receive_datagram(a, KP_ADDR, 5.0)
    assert executed(sib) == []
    [late] = answers(sib, 5.0)
    assert late.status == Status.NUMBER_BEHIND and late.result == Behind(0, 2)
    assert sib.stats.behind == 1


def test_a_copy_of_a_request_the_cache_no_longer_holds_is_never_executed():
    """Evicted (a full cache) or expired, a request's number is under the KP's floor: a copy
    arriving after that is answered NUMBER BEHIND, however late, and executes nothing."""
    sib = SIBSession(rng=random.Random(0), options=SessionOptions(max_entries=4))
    sent = [encode(numbered(tid, tid, None)) for tid in range(10)]
    for data in sent:
        sib.receive_datagram(data, KP_ADDR, 0.0)
    assert len(executed(sib)) == 10
    answers(sib)
    sib.receive_datagram(sent[0], KP_ADDR, 1.0)  # evicted: behind the floor
    sib.receive_datagram(sent[9], KP_ADDR, 1.0)  # kept: its cached RES
    assert executed(sib) == []
    assert [r.status for r in answers(sib, 1.0)] == [Status.NUMBER_BEHIND, Status.OK]
    lifetime = Timing().exchange_lifetime
    sib.receive_datagram(encode(numbered(20, 20, None)), KP_ADDR, 2.0 * lifetime)
    assert len(executed(sib)) == 1  # a new one, after every entry expired
    answers(sib)
    sib.receive_datagram(sent[9], KP_ADDR, 2.0 * lifetime)  # expired: behind the floor too
    assert executed(sib) == [] and answers(sib)[0].status == Status.NUMBER_BEHIND


def test_a_kp_told_its_number_is_behind_sends_the_request_again_above_the_sibs_record():
    """A KP ID's numbering after a restart (here: the same start as before) meets the SIB's
    record of the earlier run: the other bytes under a number the SIB has are NUMBER BEHIND,
    and the KP sends the request again from the epoch the SIB names; it is executed once."""
    creds = Credentials(KP_ID, "")
    sib = SIBSession(rng=random.Random(0))
    before = KPSession(rng=random.Random(5), credentials=creds)
    start = before.transactions.last_number + 1
    net = Net(before, sib)
    net.client.send(insert(net.client.next_tid(), 1), net.now)
    net.run()
    assert len(net.of_type(RequestReceived, "server")) == 1
    restarted = KPSession(rng=random.Random(5), credentials=creds)
    assert restarted.transactions.last_number + 1 == start  # the same numbers again
    net.client = restarted
    tid = restarted.send(insert(restarted.next_tid(), 2), net.now)
    net.run()
    [retried] = net.of_type(RequestRetried)
    assert retried.tid == tid
    done = net.of_type(ResponseReceived)[-1]  # the first is the earlier run's
    assert done.tid == retried.new_tid and done.response.status == Status.OK
    requests = [e.request for e in net.of_type(RequestReceived, "server")]
    assert [r.insert[0].o.lexical for r in requests] == ["1", "2"]
    assert requests[1].options.epoch > requests[0].options.epoch


def test_a_number_behind_for_an_earlier_request_under_the_tid_leaves_the_pending_one_waiting():
    kp = KPSession(rng=random.Random(0))
    tid = kp.send(insert(kp.next_tid(), 1), 0.0)
    kp.datagrams_to_send(0.0)
    stale = Response(tid, Status.NUMBER_BEHIND, Behind(12, 13))  # not this request's epoch
    kp.receive_datagram(encode(stale), 0.1)
    assert events(kp) == [] and tid in kp.pending
    kp.receive_datagram(encode(Response(tid)), 0.2)
    assert [type(e) for e in events(kp)] == [ResponseReceived]


def test_a_second_number_behind_is_the_requests_outcome():
    kp = KPSession(rng=random.Random(0))
    tid = kp.send(insert(kp.next_tid(), 1), 0.0)
    kp.receive_datagram(encode(Response(tid, Status.NUMBER_BEHIND, Behind(0, 3))), 0.1)
    [retried] = events(kp)
    assert isinstance(retried, RequestRetried)
    [_, data] = kp.datagrams_to_send(0.1)
    again = retried.new_tid
    assert int.from_bytes(data[2:4], "little") == again
    kp.receive_datagram(encode(Response(again, Status.NUMBER_BEHIND, Behind(3, 9))), 0.2)
    [final] = events(kp)
    assert isinstance(final, ResponseReceived) and final.response.status == \
        Status.NUMBER_BEHIND


@given(steps=st.lists(st.tuples(st.integers(0, 2), st.booleans(), st.integers(0, 3),
                                st.integers(-1, 30)), min_size=1, max_size=40),
       seed=st.integers(0, 999))
@settings(max_examples=150, deadline=None)
def test_any_delay_any_reuse_each_request_answered_ok_was_executed_once(steps, seed):
    """Requests from a pool of three (so bytes repeat), the KP's TIDs coming back at will (as
    past 65 536 requests), datagrams lost, duplicated and reordered, and copies of any earlier
    datagram delivered again arbitrarily late: each request is executed at most once, and
    every OK is for a request executed."""
    timing = Timing(max_retransmit=10)
    net = Net(KPSession(timing=timing, rng=random.Random(seed)),
              SIBSession(timing=timing, rng=random.Random(seed + 1)),
              seed=seed, loss=0.2, dup=0.2, reorder=0.3)
    first = net.client.transactions.cursor
    value_of: dict[int, int] = {}  # TID -> the value of the request pending under it
    ok: Counter = Counter()
    seen = 0

    def settle() -> None:
        nonlocal seen
        for e in net.client_events[seen:]:
            if isinstance(e, RequestRetried):
                value_of[e.new_tid] = value_of.pop(e.tid)
            elif isinstance(e, ResponseReceived):
                value = value_of.pop(e.tid)
                if e.response.status == Status.OK:
                    ok[value] += 1
            elif isinstance(e, RequestTimedOut):
                value_of.pop(e.tid)
        seen = len(net.client_events)

    for value, wrap, rounds, late in steps:
        if wrap:
            net.run_for(1.0)
            settle()
            net.client.transactions.cursor = first
        tid = net.client.send(insert(net.client.next_tid(), value), net.now)
        value_of[tid] = value
        net.flush()
        if late >= 0 and net.up:  # an earlier datagram again, however long ago it was sent
            net.deliver_late(net.up[late % len(net.up)], net.rng.uniform(0, 500))
        for _ in range(rounds):
            net.step()
        settle()
    net.run()
    settle()
    done = [e.request for e in net.of_type(RequestReceived, "server")]
    numbers = Counter(((r.options.epoch or 0) << 16) | r.tid for r in done)
    assert max(numbers.values(), default=0) == 1  # none executed twice
    assert ok <= Counter(int(r.insert[0].o.lexical) for r in done)  # no OK unexecuted


COUNTER = "http://example.org/counter"
INCREMENT = (f"DELETE {{ <{COUNTER}> <{COUNTER}#n> ?n }} INSERT {{ <{COUNTER}> <{COUNTER}#n> ?m }} "
             f"WHERE {{ <{COUNTER}> <{COUNTER}#n> ?n BIND(?n + 1 AS ?m) }}")


async def counter_sib(timing: Timing):
    """A real SIB (store, SPARQL) on a UDP socket on loopback, its counter at 0."""
    from sib import Sib
    from transports import Server

    sib = Sib()
    server = await Server.start(sib, udp=0, timing=timing)
    return sib, server


async def count(kp) -> int:
    [row] = (await kp.query_all(f"SELECT ?n WHERE {{ <{COUNTER}> <{COUNTER}#n> ?n }}")).rows
    return int(row[0])


@pytest.mark.slow
def test_identical_increments_delayed_in_the_network_are_each_executed_over_real_sockets():
    """Identical counter increments from one UDP KP, the first
    through a proxy that delays them longer than the KP's EXCHANGE_LIFETIME, the TID then
    coming back for the same increment (as past 65 536 requests) while the SIB still holds the
    first: every OK is an increment of the counter."""
    from transports import connect

    timing = Timing(ack_timeout=0.05, max_latency=0.05)  # a lifetime of 1.3 s, both sides

    async def scenario() -> tuple[int, int]:
        sib, server = await counter_sib(timing)
        proxy = await UdpRelay.start(("127.0.0.1", server.udp.port))
        oks = 0
        try:
            async with await connect(f"udp://127.0.0.1:{proxy.port}", timing=timing) as kp:
                await kp.update(f"INSERT DATA {{ <{COUNTER}> <{COUNTER}#n> 0 }}")
                oks = 0
                for round_ in range(3):
                    proxy.delay = 1.5  # past the KP's lifetime: it thinks the SIB forgot
                    tids = kp.link.session.transactions
                    reuse = tids.cursor
                    await asyncio.wait_for(kp.update(INCREMENT), 60)  # raises unless OK
                    oks += 1
                    proxy.delay = 0.0
                    # Its RES came 1.5 s after the send: past the KP's EXCHANGE_LIFETIME from
                    # the send, within the SIB's from its receipt. The same TID again, the
                    # same bytes but for the number.
                    tids.cursor = reuse
                    await asyncio.wait_for(kp.update(INCREMENT), 60)
                    oks += 1
                return oks, await count(kp)
        finally:
            proxy.close()
            await server.close()

    oks, counted = asyncio.run(scenario())
    assert oks == 6 and counted == 6


@pytest.mark.slow
def test_a_late_copy_after_the_tid_was_reused_is_not_executed_over_real_sockets():
    """Increment A under TID t, increment B under t (its TID reused), then a copy of A's
    datagram reaching the SIB late: the counter counts A and B once each."""
    from transports import connect

    timing = Timing(ack_timeout=0.05, max_latency=0.05)

    async def scenario() -> int:
        sib, server = await counter_sib(timing)
        proxy = await UdpRelay.start(("127.0.0.1", server.udp.port))
        try:
            async with await connect(f"udp://127.0.0.1:{proxy.port}", timing=timing) as kp:
                await kp.update(f"INSERT DATA {{ <{COUNTER}> <{COUNTER}#n> 0 }}")
                tids = kp.link.session.transactions
                reuse = tids.cursor
                await kp.update(INCREMENT)
                a = proxy.sent[-1]
                await asyncio.sleep(timing.exchange_lifetime)
                tids.cursor = reuse
                await kp.update(INCREMENT.replace("+ 1", "+ 10"))
                assert proxy.sent[-1][2:4] == a[2:4]  # under A's TID
                proxy.replay(a)
                await asyncio.sleep(1.0)
                return await count(kp)
        finally:
            proxy.close()
            await server.close()

    assert asyncio.run(scenario()) == 11


def test_the_records_of_kps_are_bounded():
    """One record per KP identity, at most `max_entries` (the session's): the newest KP's is
    kept, and so are the floors of the entries the full cache evicted last (a record comes back
    for them: their copies must stay behind)."""
    sib = SIBSession(rng=random.Random(0), options=SessionOptions(max_entries=4))
    for port in range(10):
        sib.receive_datagram(encode(numbered(1, port, None)), ("192.0.2.50", port), 0.0)
        executed(sib)
        answers(sib)
    records = sib.layer.cache.records
    assert len(records) == 4 and 9 in {kp.addr[1] for kp in records}
    assert all(record.floor == 1 for kp, record in records.items() if kp.addr[1] < 6)
