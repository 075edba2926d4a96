"""Address validation (wire format 14) and echo values (7.7) through real UDP sockets on
loopback: an unvalidated address is sent at most 3 × what it sent (a large answer becomes ECHO
REQUIRED, a subscription gets it and no IND), a verified echo value validates the address, the
Python client validates transparently with one extra round trip, and the tables are bounded.
A copy of a request answered ECHO REQUIRED gets it again and executes nothing, also once the
retry validated the address (a real `ksp-sib`; sealed, the replay window drops it). The
sans-I/O parts (echo values, budgets, the requests answered ECHO REQUIRED) are checked directly
too."""
from __future__ import annotations

import asyncio
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ksp import (
    UDP, Behind, Options, Request, Response, Status, Triple, Tx, Var, decode_kp_message,
    decode_sib_message, encode,
)
from ksp.secure import Sealer, SealerTable
from ksp.session import (
    KPSession, RequestReceived, RequestRetried, SessionOptions, SIBSession,
)
from ksp.session.validation import (
    AddressBudgets, EchoedRequests, EchoValues, address_binding, kp_binding,
)
from sib import Sib
from sib.testing import SibProcess, ex, scrape
from transports import Server, connect

from transport_helpers import run

P = ex("p")
X, Y = Var(0), Var(1)
ROWS = 400


def select_all() -> Request:
    return Request(Tx.SELECT, 0x1234, projection=2, where=(Triple(X, P, Y),),
                   options=Options(prefixes=()))


# -- sans-I/O: echo values and budgets ---------------------------------------------------------

def test_one_host_on_many_ports_forgets_its_own_ports_not_other_hosts_addresses():
    budgets = AddressBudgets(3, max_addresses=64, host_share=8)
    others = [("192.0.2.%d" % k, 5000) for k in range(1, 20)]
    for addr in others:
        budgets.validate(addr)
        budgets.received(addr, 10)
    for port in range(5000):  # one host validates (and probes) from 5,000 source ports
        budgets.validate(("198.51.100.7", port))
        budgets.received(("198.51.100.8", port), 10)
    assert all(budgets.is_validated(addr) for addr in others)
    assert budgets.validated_count == len(others) + 8 and budgets.budget_count == 8
    assert budgets.is_validated(("198.51.100.7", 4999))
    assert not budgets.is_validated(("198.51.100.7", 0))


def test_a_pinned_address_outlives_any_flood_and_goes_once_unpinned():
    budgets = AddressBudgets(3, max_addresses=4, host_share=4)
    subscriber = ("127.0.0.1", 40000)
    budgets.validate(subscriber)
    budgets.pin(subscriber)
    budgets.pin(subscriber)  # two operations' INDs go there
    for port in range(1000):  # the same host, as on one machine
        budgets.validate(("127.0.0.1", port))
    assert budgets.is_validated(subscriber) and budgets.validated_count == 4
    budgets.unpin(subscriber)
    budgets.validate(("127.0.0.1", 2000))
    assert budgets.is_validated(subscriber)  # one operation still runs
    budgets.unpin(subscriber)
    for port in range(3000, 3004):
        budgets.validate(("127.0.0.1", port))
    assert not budgets.is_validated(subscriber)  # none: forgotten as any other


def test_a_flood_of_validations_leaves_a_subscribers_indications_flowing():
    """One host validates thousands of source ports (a verified echo value each) while a
    validated subscriber on the same host is idle: its next IND still goes out in full, and
    a late copy of a request answered ECHO REQUIRED before the flood is never executed."""
    from ksp import SelectResult
    from ksp.session import RequestReceived

    sib = SIBSession(options=SessionOptions(max_addresses=64))
    subscriber = ("127.0.0.1", 40000)
    subscribe = Request(Tx.SELECT_PERSISTENT, 7, projection=2, where=(Triple(X, P, Y),),
                        options=Options(prefixes=()))
    echo = decode_sib_message(sib.echo_required(7, subscriber, 0.0)).result
    sib.receive_datagram(encode(subscribe._replace(
        options=subscribe.options._replace(echo=echo))), subscriber, 0.0)
    [event] = [e for e in iter(sib.next_event, None) if isinstance(e, RequestReceived)]
    sib.respond(event.kp, 7, Response(7, result=SelectResult(2, ())), 0.0)
    sib.datagrams_to_send(0.0)
    kp = ("127.0.0.1", 39999)  # its subscription answered ECHO REQUIRED, then sent again
    late = encode(subscribe._replace(tid=9))
    sib.receive_datagram(late, kp, 0.0)
    [(answer, _)] = sib.datagrams_to_send(0.0)
    echoed = decode_sib_message(answer)
    assert echoed.status == Status.ECHO_REQUIRED
    sib.receive_datagram(encode(subscribe._replace(tid=10, options=subscribe.options._replace(
        echo=echoed.result))), kp, 0.1)
    [retry] = [e for e in iter(sib.next_event, None) if isinstance(e, RequestReceived)]
    sib.respond(retry.kp, 10, Response(10, result=SelectResult(2, ())), 0.1)
    for port in range(5000):  # the flood, from the same host: validations and subscriptions
        addr = ("127.0.0.1", port)
        value = decode_sib_message(sib.echo_required(1, addr, 1.0)).result
        sib.receive_datagram(encode(Request(Tx.TERMINATE, 1, options=Options(echo=value))),
                             addr, 1.0)
        sib.receive_datagram(encode(subscribe), ("127.0.0.2", port), 1.0)
    sib.datagrams_to_send(1.0)
    list(iter(sib.next_event, None))
    rows = tuple((ex("s%d" % k), ex("o%d" % k)) for k in range(ROWS))
    held = sib.stats.held_for_validation
    sib.indicate(event.kp, 7, Response(7, result=SelectResult(2, rows)), 2.0)
    [(ind, to)] = sib.datagrams_to_send(2.0)
    assert to == subscriber and len(ind) > 3 * len(encode(subscribe))  # in full
    assert sib.stats.held_for_validation == held
    sib.receive_datagram(late, kp, 3.0)  # the first's copy, all it had evicted: not executed
    assert [e for e in iter(sib.next_event, None) if isinstance(e, RequestReceived)] == []

def test_an_echo_value_verifies_only_for_its_binding_within_its_lifetime():
    echoes = EchoValues(b"s" * 32)
    value = echoes.make(address_binding(("127.0.0.1", 5000)), 1000.0)
    assert len(value) == 10
    assert echoes.verify(value, address_binding(("127.0.0.1", 5000)), 1000.0)
    assert echoes.verify(value, address_binding(("127.0.0.1", 5000)), 1120.0)
    assert not echoes.verify(value, address_binding(("127.0.0.1", 5000)), 1121.5)  # expired
    assert not echoes.verify(value, address_binding(("127.0.0.1", 5001)), 1000.0)
    assert not echoes.verify(value, kp_binding(bytes(16)), 1000.0)
    assert not EchoValues(b"t" * 32).verify(value, address_binding(("127.0.0.1", 5000)), 1000.0)
    assert not echoes.verify(value[:9], address_binding(("127.0.0.1", 5000)), 1000.0)


@given(st.binary(min_size=1, max_size=32))
def test_no_forged_echo_value_verifies(value):
    echoes = EchoValues(b"s" * 32)
    made = echoes.make(kp_binding(bytes(16)), 50.0)
    if value != made:
        assert not echoes.verify(value, kp_binding(bytes(16)), 50.0)


def test_budgets_allow_three_times_what_was_received_until_validated():
    budgets = AddressBudgets(3, max_addresses=8)
    a = ("192.0.2.1", 1)
    assert not budgets.spend(a, 1)  # nothing received: nothing may go
    budgets.received(a, 40)
    assert budgets.spend(a, 100) and budgets.spend(a, 20)
    assert not budgets.spend(a, 1)
    budgets.validate(a)
    assert budgets.spend(a, 1_000_000)


def test_validated_addresses_and_budgets_are_bounded():
    budgets = AddressBudgets(3, max_addresses=4, host_share=4)
    for port in range(10):
        budgets.validate(("192.0.2.1", port))
        budgets.received(("192.0.2.2", port), 10)
    assert budgets.validated_count == 4 and budgets.budget_count == 4
    assert budgets.is_validated(("192.0.2.1", 9))
    assert not budgets.is_validated(("192.0.2.1", 0))  # forgotten first: validates again
    assert not budgets.spend(("192.0.2.2", 0), 1)  # a forgotten budget allows nothing


# -- sans-I/O: a copy of a request answered ECHO REQUIRED (7.7) ----------------------------------

A = ("192.0.2.7", 4000)


def subscription(tid: int, echo: bytes | None = None) -> Request:
    return Request(Tx.SELECT_PERSISTENT, tid, projection=1, where=(Triple(ex("s"), P, X),),
                   options=Options(prefixes=(), echo=echo))


def exchange(sib, data: bytes, now: float, addr=A) -> tuple[list, list]:
    """Give `sib` datagram `data` from `addr`: the RESs it sent back, and its events."""
    sib.receive_datagram(data, addr, now)
    out = [decode_sib_message(d, UDP, Tx.SELECT_PERSISTENT)
           for d, _ in sib.datagrams_to_send(now)]
    return out, list(iter(sib.next_event, None))


def test_echoed_requests_are_bounded_oldest_out_and_expire():
    echoed = EchoedRequests(lifetime=10.0, max_entries=3)
    for tid in range(5):
        echoed.add(A, tid, b"request %d" % tid, float(tid))
    assert len(echoed) == 3
    assert not echoed.answered(A, 0, b"request 0", 4.0)  # pushed out first
    assert echoed.answered(A, 4, b"request 4", 4.0)
    assert not echoed.answered(A, 4, b"request 5", 4.0)  # other bytes: another request
    assert not echoed.answered(("192.0.2.8", 4000), 4, b"request 4", 4.0)  # another address
    echoed.add(A, 4, b"request 4", 9.0)  # a copy keeps its first expiry
    assert not echoed.answered(A, 4, b"request 4", 14.0)
    echoed.expire(14.0)
    assert len(echoed) == 0


def test_a_late_copy_of_a_request_answered_echo_required_gets_it_again_and_never_executes():
    sib = SIBSession(UDP)
    first = encode(subscription(7), UDP)
    (asked,), events = exchange(sib, first, 100.0)
    assert asked.status == Status.ECHO_REQUIRED and asked.tid == 7 and not events
    # a retransmission of it before the retry: the same answer
    (again,), events = exchange(sib, first, 101.0)
    assert again.status == Status.ECHO_REQUIRED and not events
    # the retry under a new TID validates the address and executes
    out, events = exchange(sib, encode(subscription(8, echo=asked.result), UDP), 102.0)
    assert not out and [(type(e), e.request.tid) for e in events] == [(RequestReceived, 8)]
    # a late copy of the first request: its TID is finished, nothing executes
    for now in (103.0, 150.0):
        (late,), events = exchange(sib, first, now)
        assert late.status == Status.ECHO_REQUIRED and late.tid == 7 and not events
    assert sib.sizes()["echoed requests"] == 1 and sib.stats.held_for_validation == 4
    # past EXCHANGE_LIFETIME, its entry gone, a copy still never executes: its number is spent
    # (wire format 15), and a new request under TID 7 comes with the next epoch
    later = 100.0 + sib.timing.exchange_lifetime + 1
    (late,), events = exchange(sib, first, later)
    assert late.status == Status.NUMBER_BEHIND and late.result == Behind(0, 1) and not events
    renewed = subscription(7)
    out, events = exchange(sib, encode(renewed._replace(options=renewed.options._replace(
        epoch=1)), UDP), later)
    assert not out and [e.request.tid for e in events] == [7]
    assert sib.sizes()["echoed requests"] == 1  # expired entries go as new ones come


def test_echo_required_is_sent_whatever_max_response_size_and_the_retry_goes_on():
    """Wire format 7.7: MAX RESPONSE SIZE bounds results; a RES 0x0f carries none and is sent
    even to a request whose limit it exceeds, so a KP with a small limit still validates."""
    sib = SIBSession(UDP)
    small = subscription(9)
    small = small._replace(options=small.options._replace(max_response_size=5))
    sib.receive_datagram(encode(small, UDP), A, 100.0)
    (data, _), = sib.datagrams_to_send(100.0)
    asked = decode_sib_message(data, UDP, Tx.SELECT_PERSISTENT)
    assert asked.status == Status.ECHO_REQUIRED and len(data) == 15 > 5
    retry = small._replace(tid=10, options=small.options._replace(echo=asked.result))
    out, events = exchange(sib, encode(retry, UDP), 101.0)
    assert not out and [e.request.tid for e in events] == [10]


@pytest.mark.parametrize("confirmable", [False, True])
def test_the_echo_retry_keeps_the_request_type(confirmable):
    """Wire format 7.7: the retry is the first request under a new TID with the ECHO option;
    a NON request is retried NON, a CON one CON."""
    kp = KPSession(rng=random.Random(0))
    tid = kp.send(select_all()._replace(tid=kp.next_tid(), confirmable=confirmable), 0.0)
    [first] = kp.datagrams_to_send(0.0)
    kp.receive_datagram(encode(Response(tid, Status.ECHO_REQUIRED, b"0123456789")), 0.1)
    [retried] = iter(kp.next_event, None)
    [data] = kp.datagrams_to_send(0.1)
    retry = decode_kp_message(data)
    assert isinstance(retried, RequestRetried) and retry.tid == retried.new_tid != tid
    assert retry.confirmable is confirmable and retry.options.echo == b"0123456789"
    assert retry._replace(tid=tid, options=retry.options._replace(echo=None)) == \
        decode_kp_message(first)


def test_copies_from_an_unvalidated_address_stay_within_three_times_and_one_entry():
    sib = SIBSession(UDP)
    first = encode(subscription(7), UDP)
    sent = received = 0
    for i in range(50):
        sib.receive_datagram(first, A, 100.0 + i)
        sent += len(first)
        received += sum(len(d) for d, _ in sib.datagrams_to_send(100.0 + i))
        assert received <= 3 * sent
    assert sib.sizes()["echoed requests"] == 1 and sib.next_event() is None


def test_requests_answered_echo_required_are_bounded_by_max_addresses():
    sib = SIBSession(UDP, options=SessionOptions(max_addresses=4))
    for port in range(10):
        for tid in range(3):
            exchange(sib, encode(subscription(tid), UDP), 100.0, ("192.0.2.9", port))
    assert sib.sizes()["echoed requests"] == 4


def test_a_replayed_copy_of_a_sealed_request_answered_echo_required_is_dropped():
    """Sealed (13.5): the retry opens the replay window closed at its counter, so a copy of the
    first request (an older counter) is a replay, dropped before anything sees it."""
    key, kp_id = bytes(range(32)), bytes(range(16))
    sib = SIBSession(UDP)
    sib.sealers = SealerTable(lambda _: key, lambda: 0.0)
    kp = Sealer(key, kp_id, sib=False)

    def opened(now: float, data: bytes) -> tuple[list, list]:
        sib.receive_datagram(data, A, now)
        out = [decode_sib_message(kp.open(d), UDP, Tx.SELECT_PERSISTENT)
               for d, _ in sib.datagrams_to_send(now)]
        return out, list(iter(sib.next_event, None))

    first = kp.seal(encode(subscription(7), UDP))
    (asked,), events = opened(100.0, first)
    assert asked.status == Status.ECHO_REQUIRED and not events
    retry = kp.seal(encode(subscription(8, echo=asked.result), UDP))
    out, events = opened(101.0, retry)
    assert not out and [e.request.tid for e in events] == [8]
    dropped = sib.stats.sealed_dropped
    assert opened(102.0, first) == ([], []) and sib.stats.sealed_dropped == dropped + 1
    assert sib.sizes()["echoed requests"] == 0  # the sealed 0x0f keeps nothing


# -- real sockets ---------------------------------------------------------------------------

class Raw:
    """A raw UDP socket on loopback that counts what it sends and receives."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.received: asyncio.Queue[bytes] = asyncio.Queue()
        self.bytes_in = self.bytes_out = 0

    async def open(self) -> "Raw":
        raw = self

        class Proto(asyncio.DatagramProtocol):
            def datagram_received(self, data, addr):
                raw.bytes_in += len(data)
                raw.received.put_nowait(data)

        self.transport, _ = await asyncio.get_running_loop().create_datagram_endpoint(
            Proto, local_addr=("127.0.0.1", 0), remote_addr=("127.0.0.1", self.port))
        return self

    def send(self, request: Request) -> int:
        data = encode(request, UDP)
        self.bytes_out += len(data)
        self.transport.sendto(data)
        return len(data)

    async def answer(self, tx: Tx):
        return decode_sib_message(await asyncio.wait_for(self.received.get(), 30), UDP, tx)

    def close(self) -> None:
        self.transport.close()


async def serving(**options):
    sib = Sib()
    server = await Server.start(sib, udp=0, options=SessionOptions(**options))
    port = server.udp.port
    async with connect(f"udp://127.0.0.1:{port}") as kp:  # fill it: a large SELECT answer
        for start in range(0, ROWS, 200):
            await kp.insert_data([Triple(ex(f"s{i}"), P, ex(f"o{i}"))
                                  for i in range(start, start + 200)])
    return sib, server, port


async def closing(sib, server, *raws) -> None:
    for raw in raws:
        raw.close()
    await server.close()
    await sib.close()


def test_a_large_answer_to_an_unvalidated_address_is_echo_required_within_three_times():
    async def main():
        sib, server, port = await serving()
        a = await Raw(port).open()
        try:
            a.send(select_all())
            res = await a.answer(Tx.SELECT)
            assert res.status == Status.ECHO_REQUIRED and res.tid == 0x1234
            assert isinstance(res.result, bytes) and len(res.result) == 10
            assert a.bytes_in <= 3 * a.bytes_out, (a.bytes_in, a.bytes_out)
            # the same datagram again (a retransmission: the duplicate cache's answer counts)
            for _ in range(3):
                a.send(select_all())
                again = await a.answer(Tx.SELECT)
                assert again.status == Status.ECHO_REQUIRED
            assert a.bytes_in <= 3 * a.bytes_out
            before = server.held_for_validation
            assert before >= 4
            # the retry with the echo value, under a new TID: the whole answer
            retry = select_all()._replace(tid=0x1235, options=Options(prefixes=(),
                                                                      echo=res.result))
            a.send(retry)
            full = await a.answer(Tx.SELECT)
            assert full.status == Status.OK and full.tid == 0x1235
            assert full.result.total == ROWS and len(full.result.rows) > 0
            # validated: the next large answer comes at once
            a.send(select_all()._replace(tid=0x1236))
            assert (await a.answer(Tx.SELECT)).status == Status.OK
            assert server.held_for_validation == before
        finally:
            await closing(sib, server, a)

    run(main())


def test_an_echo_value_of_another_address_validates_nothing():
    async def main():
        sib, server, port = await serving()
        a, b = await Raw(port).open(), await Raw(port).open()
        try:
            a.send(select_all())
            value = (await a.answer(Tx.SELECT)).result
            b.send(select_all()._replace(options=Options(prefixes=(), echo=value)))
            res = await b.answer(Tx.SELECT)
            assert res.status == Status.ECHO_REQUIRED
            assert b.bytes_in <= 3 * b.bytes_out
        finally:
            await closing(sib, server, a, b)

    run(main())


def test_a_subscription_from_an_unvalidated_address_gets_echo_required_and_no_ind():
    async def main():
        sib, server, port = await serving()
        a = await Raw(port).open()
        try:
            sub = Request(Tx.ASK_PERSISTENT, 0x0042, where=(Triple(ex("new"), P, X),),
                          options=Options(prefixes=()))
            a.send(sub)
            res = await a.answer(Tx.ASK_PERSISTENT)
            assert res.status == Status.ECHO_REQUIRED
            async with connect(f"udp://127.0.0.1:{port}") as kp:
                await kp.insert_data([Triple(ex("new"), P, ex("x"))])
                await kp.query("ASK { ?s ?p ?o }")  # the SIB has run the update's rules
            await asyncio.sleep(0.5)
            assert a.received.empty()  # no IND: nothing was registered
            assert a.bytes_in <= 3 * a.bytes_out
        finally:
            await closing(sib, server, a)

    run(main())


def test_the_python_client_validates_transparently_with_one_extra_round_trip():
    async def main():
        sib, server, port = await serving()
        udp = server.udp.session
        try:
            async with connect(f"udp://127.0.0.1:{port}") as kp:
                # the first large answer costs one ECHO REQUIRED, then never again
                rows = await kp.query("SELECT ?s ?o WHERE { ?s <http://example.org/p> ?o }")
                assert rows.total == ROWS
                assert udp.stats.held_for_validation == 1
                rows = await kp.query("SELECT ?s ?o WHERE { ?s <http://example.org/p> ?o }")
                assert rows.total == ROWS
                async with kp.subscribe("SELECT ?o WHERE { <http://example.org/s1> "
                                        "<http://example.org/p> ?o }") as sub:
                    await asyncio.wait_for(anext(sub), 30)  # the RES's state
                    await kp.insert_data([Triple(ex("s1"), P, ex("later"))])
                    assert len((await asyncio.wait_for(anext(sub), 30)).result.rows) == 2
                assert udp.stats.held_for_validation == 1
            # a subscription as the first request of a new client: one round trip more, then
            # its INDs as usual, under the TID the retry went with
            async with connect(f"udp://127.0.0.1:{port}") as kp:
                async with kp.subscribe("SELECT ?o WHERE { <http://example.org/s2> "
                                        "<http://example.org/p> ?o }") as sub:
                    await asyncio.wait_for(anext(sub), 30)
                    await kp.insert_data([Triple(ex("s2"), P, ex("later"))])
                    assert len((await asyncio.wait_for(anext(sub), 30)).result.rows) == 2
                    assert sub.tid is not None
                assert udp.stats.held_for_validation == 2
            assert udp.sizes()["validated addresses"] >= 2
        finally:
            await closing(sib, server)

    run(main())


def test_validated_addresses_are_bounded_over_sockets():
    async def main():
        sib, server, port = await serving(max_addresses=2)
        raws = [await Raw(port).open() for _ in range(3)]
        try:
            for raw in raws:  # each validates its address
                raw.send(select_all())
                value = (await raw.answer(Tx.SELECT)).result
                raw.send(select_all()._replace(tid=0x2000, options=Options(prefixes=(),
                                                                           echo=value)))
                assert (await raw.answer(Tx.SELECT)).status == Status.OK
            assert server.udp.session.sizes()["validated addresses"] == 2
            raws[0].send(select_all()._replace(tid=0x2001))  # forgotten first: asked again
            assert (await raws[0].answer(Tx.SELECT)).status == Status.ECHO_REQUIRED
        finally:
            await closing(sib, server, *raws)

    run(main())


def test_no_limit_when_the_factor_is_zero():
    async def main():
        sib, server, port = await serving(amplification_factor=0)
        a = await Raw(port).open()
        try:
            a.send(select_all())
            assert (await a.answer(Tx.SELECT)).status == Status.OK
        finally:
            await closing(sib, server, a)

    run(main())


# -- CoAP: its own Echo option (RFC 9175 §2.4) ----------------------------------------------

async def coap_post(ctx, port: int, request: Request, echo: bytes | None = None):
    import aiocoap
    from aiocoap.numbers.codes import Code
    from transports.coap import CONTENT_FORMAT

    msg = aiocoap.Message(code=Code.POST, uri=f"coap://127.0.0.1:{port}/ksp",
                          payload=encode(request, UDP), content_format=CONTENT_FORMAT)
    if echo is not None:
        msg.opt.echo = echo
    return await asyncio.wait_for(ctx.request(msg).response, 30)


def test_coap_validates_addresses_with_its_echo_option_and_the_client_follows():
    import aiocoap

    async def main():
        sib = Sib()
        server = await Server.start(sib, udp=0, coap=0)
        port = server.coap.port
        async with connect(f"udp://127.0.0.1:{server.udp.port}") as kp:
            await kp.insert_data([Triple(ex(f"s{i}"), P, ex(f"o{i}")) for i in range(200)])
        ctx = await aiocoap.Context.create_client_context(transports=["udp6"])
        try:
            request = select_all()
            first = await coap_post(ctx, port, request)
            assert str(first.code) == "4.01 Unauthorized" and first.opt.echo is not None
            assert not first.payload
            sub = Request(Tx.ASK_PERSISTENT, 0x0043, where=(Triple(ex("s1"), P, X),),
                          options=Options(prefixes=()))
            refused = await coap_post(ctx, port, sub)  # persistent, not validated: unexecuted
            assert str(refused.code) == "4.01 Unauthorized" and refused.opt.echo is not None
            executed = sib.core.metrics.requests["SELECT"]
            full = await coap_post(ctx, port, request, echo=first.opt.echo)
            assert full.code.is_successful()
            res = decode_sib_message(full.payload, UDP, Tx.SELECT)
            assert res.status == Status.OK and res.result.total == 200
            # the retry was answered from the duplicate cache: executed once
            assert sib.core.metrics.requests["SELECT"] == executed
            assert server.held_for_validation == 2
            # the Python client over CoAP: its normal results, one 4.01 more
            async with connect(f"coap://127.0.0.1:{port}") as kp:
                rows = await kp.query("SELECT ?s ?o WHERE { ?s <http://example.org/p> ?o }")
                assert rows.total == 200
                async with kp.subscribe("SELECT ?o WHERE { <http://example.org/s1> "
                                        "<http://example.org/p> ?o }") as sub:
                    await asyncio.wait_for(anext(sub), 30)
                    await kp.insert_data([Triple(ex("s1"), P, ex("later"))])
                    assert len((await asyncio.wait_for(anext(sub), 30)).result.rows) == 2
            assert server.held_for_validation == 3
        finally:
            await ctx.shutdown()
            await server.close()
            await sib.close()

    run(main())


def test_a_late_copy_at_a_real_sib_gets_echo_required_again_and_starts_nothing():
    """`ksp-sib` (a real process, UDP on loopback): a raw socket subscribes, gets ECHO
    REQUIRED, retries with the echo under a new TID (the address validated now), then sends
    the first datagram again, as the network might deliver it late: ECHO REQUIRED again, and
    the SIB holds one persistent query, the retry's."""
    def persistent(text: str) -> float:
        line = next(line for line in text.splitlines()
                    if line.startswith("ksp_persistent_operations "))
        return float(line.split()[1])

    async def main(sib: SibProcess) -> None:
        a = await Raw(sib.ports["udp"]).open()
        try:
            a.send(subscription(7))
            asked = await a.answer(Tx.SELECT_PERSISTENT)
            assert asked.status == Status.ECHO_REQUIRED and asked.tid == 7
            a.send(subscription(8, echo=asked.result))
            started = await a.answer(Tx.SELECT_PERSISTENT)
            assert started.status == Status.OK and started.tid == 8
            a.send(subscription(7))  # the late copy
            late = await a.answer(Tx.SELECT_PERSISTENT)
            assert late.status == Status.ECHO_REQUIRED and late.tid == 7
            assert persistent(await scrape(sib.ports["metrics"])) == 1
            assert a.received.empty()
        finally:
            a.close()

    with SibProcess("--memory", "--udp-port", "0", "--tcp-port", "-1", "--coap-port", "-1",
                    "--metrics-port", "0") as sib:
        asyncio.run(asyncio.wait_for(main(sib), 90))
        assert sib.stop() == 0
