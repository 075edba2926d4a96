"""ksp.session: the sans-I/O KP and SIB sessions, on a virtual clock (no sleeps, no sockets).

`Net` moves datagrams between one KPSession and one SIBSession through a lossy link model
(drop / duplicate / reorder by a seeded RNG, or an explicit `fate` function) and plays a SIB
that answers every request at once.
"""
from __future__ import annotations

import dataclasses
import heapq
import itertools
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ksp import (
    IRI, TCP, UDP, Ack, AskResult, Credentials, Literal, Options, Request, Response, SelectResult,
    Status, Triple, Tx, Var, decode_kp_message, decode_sib_message, encode,
)
from ksp.session import (
    AckReceived, CredentialsPending, IndicationReceived, KPIdentity, KPSession, KPUnreachable,
    PersistentEnded, ProtocolError, RequestReceived, RequestRefused, RequestTimedOut,
    ResponseReceived, SessionError, SessionOptions, Timing,
)
from ksp.session import SIBSession as _SIBSession

from strategies import results_for

KP_ADDR = ("192.0.2.10", 40000)


def SIBSession(*args, **kwargs):
    """A SIB session whose addresses count as validated: these tests are about exchanges,
    delivery and credentials; address validation (wire format 14) is test_amplification's."""
    options = kwargs.get("options") or SessionOptions()
    kwargs["options"] = dataclasses.replace(options, amplification_factor=0)
    return _SIBSession(*args, **kwargs)

KP_ID = bytes(range(16))
EX = "http://example.org/"


def insert(tid: int, value: int = 0, confirmable: bool = True) -> Request:
    return Request(Tx.INSERT_DATA, tid, confirmable,
                   insert=(Triple(IRI(EX + "s"), IRI(EX + "p"), Literal.of(value)),))


def subscribe(tid: int) -> Request:
    return Request(Tx.SELECT_PERSISTENT, tid, True, projection=1,
                   where=(Triple(IRI(EX + "s"), IRI(EX + "p"), Var(0)),))


def ask(tid: int) -> Request:
    return Request(Tx.ASK, tid, True, where=(Triple(IRI(EX + "s"), IRI(EX + "p"), Var(0)),))


def state(tid: int, k: int, **kw) -> Response:
    """An IND / RES carrying state number k."""
    return Response(tid, result=SelectResult(1, ((Literal.of(k),),)), **kw)


def k_of(response: Response) -> int:
    return int(response.result.rows[0][0].lexical)


def answer(request: Request) -> Response:
    if request.tx.base is Tx.SELECT:
        return Response(request.tid, result=SelectResult(1, ()))
    if request.tx.base is Tx.ASK:
        return Response(request.tid, result=AskResult(True))
    return Response(request.tid)


def events(session) -> list:
    out = []
    while (e := session.next_event()) is not None:
        out.append(e)
    return out


def is_ack(data: bytes) -> bool:
    return data[1] == 0


class Net:
    """One KP and one SIB over UDP on a virtual clock, through a lossy link."""

    def __init__(self, client: KPSession | None = None, server: SIBSession | None = None, *,
                 seed: int = 0, loss: float = 0.0, dup: float = 0.0, reorder: float = 0.0,
                 latency: float = 0.01, fate=None, respond: bool = True):
        self.client = client or KPSession(rng=random.Random(seed))
        self.server = server or SIBSession(rng=random.Random(seed + 1))
        self.rng = random.Random(seed + 2)
        self.loss, self.dup, self.reorder, self.latency = loss, dup, reorder, latency
        self.fate = fate  # (direction, data) -> number of copies delivered
        self.respond = respond
        self.now = 0.0
        self.addr = KP_ADDR  # the KP's current address
        self._flight: list = []
        self._n = itertools.count()
        self.client_events: list = []
        self.server_events: list = []
        self.up: list[bytes] = []  # every datagram the KP sent
        self.down: list[tuple[bytes, object]] = []  # every datagram the SIB sent

    def _launch(self, way: str, data: bytes, addr) -> None:
        if self.fate is not None:
            copies = self.fate(way, data)
        elif self.rng.random() < self.loss:
            copies = 0
        else:
            copies = 2 if self.rng.random() < self.dup else 1
        for _ in range(copies):
            delay = self.latency
            if self.rng.random() < self.reorder:
                delay += self.rng.random() * 20 * self.latency
            heapq.heappush(self._flight, (self.now + delay, next(self._n), way, data, addr))

    def deliver_late(self, data: bytes, delay: float) -> None:
        """A copy of the KP's datagram `data` reaches the SIB `delay` seconds from now (the
        network's duplicate, however late)."""
        heapq.heappush(self._flight, (self.now + delay, next(self._n), "up", data, self.addr))

    def flush(self) -> None:
        while True:
            for e in events(self.client):
                self.client_events.append(e)
            for e in events(self.server):
                self.server_events.append(e)
                if isinstance(e, RequestReceived) and self.respond:
                    self.server.respond(e.kp, e.request.tid, answer(e.request), self.now)
            up = self.client.datagrams_to_send(self.now)
            down = self.server.datagrams_to_send(self.now)
            if not up and not down:
                return
            for data in up:
                self.up.append(data)
                self._launch("up", data, self.addr)
            for data, addr in down:
                self.down.append((data, addr))
                self._launch("down", data, addr)

    def step(self) -> bool:
        self.flush()
        times = [t for t in (self._flight[0][0] if self._flight else None,
                             self.client.get_timer(), self.server.get_timer()) if t is not None]
        if not times:
            return False
        self.now = max(self.now, min(times))
        while self._flight and self._flight[0][0] <= self.now:
            _, _, way, data, addr = heapq.heappop(self._flight)
            if way == "up":
                self.server.receive_datagram(data, addr, self.now)
            elif addr == self.addr:  # the KP no longer listens at an old address
                self.client.receive_datagram(data, self.now)
        for session in (self.client, self.server):
            t = session.get_timer()
            if t is not None and t <= self.now:
                session.handle_timer(self.now)
        self.flush()
        return True

    def run(self, until=None, limit: float = 100_000.0) -> None:
        """Step until `until()` holds — without it, until nothing is left to do but the KP's
        keepalives (no datagram in flight, no request pending, nothing due at the SIB)."""
        while self.now <= limit:
            if until() if until is not None else self.quiet():
                return
            if not self.step():
                return

    def quiet(self) -> bool:
        self.flush()
        return (not self._flight and not self.client.pending
                and self.server.get_timer() is None)

    def advance(self, seconds: float) -> None:
        """Run every event due within `seconds` from now, and no later one; the clock then
        reads now + `seconds`."""
        end = self.now + seconds
        while True:
            self.flush()
            times = [t for t in (self._flight[0][0] if self._flight else None,
                                 self.client.get_timer(), self.server.get_timer())
                     if t is not None]
            if not times or min(times) > end:
                break
            self.step()
        self.now = end
        self.flush()

    def run_for(self, seconds: float) -> None:
        end = self.now + seconds
        while self.step() and self.now < end:
            pass

    def send(self, request: Request) -> None:
        self.client.send(request, self.now)
        self.flush()

    def of_type(self, kind, side: str = "client") -> list:
        return [e for e in getattr(self, side + "_events") if isinstance(e, kind)]


# ---------------------------------------------------------------------------------------------
# Timing, events


def test_timing_defaults_are_coaps():
    t = Timing()
    assert (t.ack_timeout, t.ack_random_factor, t.max_retransmit) == (2.0, 1.5, 4)
    assert t.max_transmit_span == 45.0
    assert t.max_transmit_wait == 93.0
    assert t.exchange_lifetime == 247.0
    assert Timing(exchange_lifetime=10).exchange_lifetime == 10
    with pytest.raises(ValueError):
        Timing(ack_random_factor=0.5)


def test_events_are_frozen_and_slotted():
    e = ResponseReceived(1, Response(1))
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.tid = 2
    assert not hasattr(e, "__dict__")
    assert RequestTimedOut(3) == RequestTimedOut(3)
    assert str(KPIdentity(KP_ID)) == "KP 00010203-0405-0607-0809-0a0b0c0d0e0f"


# ---------------------------------------------------------------------------------------------
# Client requests


def test_con_request_answered():
    net = Net()
    tid = net.client.next_tid()
    net.send(insert(tid))
    net.run()
    assert net.of_type(ResponseReceived) == [ResponseReceived(tid, Response(tid))]
    [received] = net.of_type(RequestReceived, "server")
    assert received.request.tid == tid and received.kp == KPIdentity(addr=KP_ADDR)
    assert net.client.pending == frozenset() and net.client.get_timer() is None
    assert len(net.up) == 1 and len(net.down) == 1


def test_query_response_decoded_with_the_requests_type():
    net = Net()
    tid = net.client.next_tid()
    net.send(ask(tid))
    net.run()
    [e] = net.of_type(ResponseReceived)
    assert e.response.result == AskResult(True)


@given(rng=st.randoms(use_true_random=False),
       ack_timeout=st.sampled_from([0.5, 2.0, 3.0]),
       factor=st.sampled_from([1.0, 1.5, 2.0]),
       max_retransmit=st.integers(0, 6),
       t0=st.floats(0, 1e6))
@settings(max_examples=60, deadline=None)
def test_backoff_intervals_jitter_and_give_up(rng, ack_timeout, factor, max_retransmit, t0):
    timing = Timing(ack_timeout=ack_timeout, ack_random_factor=factor,
                    max_retransmit=max_retransmit)
    kp = KPSession(timing=timing, rng=rng)
    tid = kp.next_tid()
    kp.send(insert(tid), t0)
    [first] = kp.datagrams_to_send(t0)
    initial = kp.get_timer() - t0
    eps = 1e-9 * max(1.0, t0)  # (t0 + T) - t0 is T only up to rounding
    assert ack_timeout - eps <= initial <= ack_timeout * factor + eps
    deadline = kp.get_timer()
    for k in range(1, max_retransmit + 1):
        kp.handle_timer(deadline - 1e-9)  # early: nothing happens
        assert kp.datagrams_to_send(deadline) == []
        kp.handle_timer(deadline)
        assert kp.datagrams_to_send(deadline) == [first]  # the same bytes, same TID
        assert kp.get_timer() == pytest.approx(deadline + initial * 2 ** k)
        deadline = kp.get_timer()
        assert events(kp) == []
    assert deadline - t0 == pytest.approx(initial * (2 ** (max_retransmit + 1) - 1))
    assert deadline - t0 <= timing.max_transmit_wait + eps
    kp.handle_timer(deadline)
    assert kp.datagrams_to_send(deadline) == []
    assert events(kp) == [RequestTimedOut(tid)]
    assert kp.get_timer() is None and kp.pending == frozenset()


def test_retransmitted_on_loss_then_answered():
    dropped = []

    def fate(way, data):
        if way == "up" and not dropped:
            dropped.append(data)
            return 0
        return 1

    net = Net(fate=fate)
    tid = net.client.next_tid()
    net.send(insert(tid))
    net.run()
    assert net.of_type(ResponseReceived) == [ResponseReceived(tid, Response(tid))]
    assert len(net.up) == 2 and net.up[0] == net.up[1]
    assert 2.0 <= net.now <= 3.1  # answered after the first timeout


def test_response_loss_gives_retransmission_and_cached_res_executed_once():
    drops = {"down": 2}

    def fate(way, data):
        if drops.get(way):
            drops[way] -= 1
            return 0
        return 1

    net = Net(fate=fate)
    tid = net.client.next_tid()
    net.send(insert(tid))
    net.run()
    assert len(net.of_type(RequestReceived, "server")) == 1
    assert net.of_type(ResponseReceived) == [ResponseReceived(tid, Response(tid))]
    assert len(net.up) == 3 and len(net.down) == 3  # the RES re-sent from the cache


def test_gives_up_when_every_request_is_lost():
    net = Net(fate=lambda way, data: 0)
    tid = net.client.next_tid()
    net.send(insert(tid))
    net.run()
    assert net.of_type(RequestTimedOut) == [RequestTimedOut(tid)]
    assert len(net.up) == 5
    assert 62 <= net.now <= 93


@given(pattern=st.lists(st.integers(0, 2), min_size=12, max_size=12), seed=st.integers(0, 99))
@settings(max_examples=150, deadline=None)
def test_random_loss_pattern(pattern, seed):
    """Each transmission in turn is dropped, delivered or duplicated as `pattern` says."""
    fates = iter(pattern + [1] * 100)
    net = Net(seed=seed, fate=lambda way, data: next(fates))
    tid = net.client.next_tid()
    net.send(insert(tid))
    net.run()
    executed = net.of_type(RequestReceived, "server")
    assert len(executed) <= 1
    done = net.of_type(ResponseReceived) + net.of_type(RequestTimedOut)
    assert len(done) == 1  # exactly one outcome, whatever the losses
    if isinstance(done[0], ResponseReceived):
        assert len(executed) == 1
    assert len(net.up) <= 5
    assert net.client.get_timer() is None and net.server.get_timer() is None


def test_thousand_inserts_through_a_bad_link_each_executed_once():
    timing = Timing(max_retransmit=10)  # 20 % loss each way: 36 % of attempts fail
    net = Net(KPSession(timing=timing, rng=random.Random(1)),
              SIBSession(timing=timing, rng=random.Random(2)),
              seed=3, loss=0.2, dup=0.2, reorder=0.3)
    tids = []
    for value in range(1000):
        tid = net.client.next_tid()
        tids.append(tid)
        net.client.send(insert(tid, value), net.now)
    net.run()
    executed = Counter(e.request.tid for e in net.of_type(RequestReceived, "server"))
    assert sorted(executed) == sorted(tids) and set(executed.values()) == {1}
    assert sorted(e.tid for e in net.of_type(ResponseReceived)) == sorted(tids)
    assert net.of_type(RequestTimedOut) == []
    values = {e.request.tid: e.request.insert[0].o.lexical
              for e in net.of_type(RequestReceived, "server")}
    assert values == {tid: str(v) for v, tid in enumerate(tids)}
    assert len(net.up) > 1200  # there really were retransmissions


def test_non_request_pending_dropped_after_exchange_lifetime_without_error():
    kp = KPSession(rng=random.Random(0))
    tid = kp.next_tid()
    kp.send(insert(tid, confirmable=False), 10.0)
    assert len(kp.datagrams_to_send(10.0)) == 1
    assert kp.get_timer() == 10.0 + 247.0
    kp.handle_timer(257.0)
    assert kp.datagrams_to_send(257.0) == [] and events(kp) == []
    assert kp.pending == frozenset()


def test_non_request_answered_only_with_a_result_or_error():
    net = Net()
    a, b = net.client.next_tid(), net.client.next_tid()
    net.send(insert(a, confirmable=False))
    net.send(Request(Tx.ASK, b, False, where=ask(b).where))
    net.run()
    assert len(net.of_type(RequestReceived, "server")) == 2
    assert [e.tid for e in net.of_type(ResponseReceived)] == [b]  # the insert's OK: no RES
    assert net.client.pending == frozenset() and net.now >= 247.0  # forgotten, silently
    assert net.of_type(RequestTimedOut) == []


def test_late_and_unknown_res_are_ignored():
    kp = KPSession(rng=random.Random(0))
    kp.receive_datagram(encode(Response(1234)), 0.0)
    assert events(kp) == [] and kp.datagrams_to_send(0.0) == []
    kp.receive_datagram(b"\x01\x00", 0.0)
    [e] = events(kp)
    assert isinstance(e, ProtocolError) and e.tid is None


def test_send_checks():
    kp = KPSession(rng=random.Random(0), max_pending=2)
    a = kp.next_tid()
    kp.send(insert(a), 0)
    with pytest.raises(SessionError):
        kp.send(insert(a), 0)  # still pending
    kp.send(insert(kp.next_tid()), 0)
    with pytest.raises(SessionError):
        kp.send(insert(kp.next_tid()), 0)
    with pytest.raises(SessionError):
        kp.receive_data(b"", 0)  # UDP session
    with pytest.raises(SessionError):
        SIBSession(TCP).receive_datagram(b"", KP_ADDR, 0)


def test_credentials_added_to_every_request():
    creds = Credentials(KP_ID, "pw")
    kp = KPSession(rng=random.Random(0), credentials=creds)
    kp.send(insert(kp.next_tid()), 0)
    [data] = kp.datagrams_to_send(0)
    assert decode_kp_message(data).options.credentials == creds


# ---------------------------------------------------------------------------------------------
# Server: duplicate detection, undecodable input


def test_duplicate_request_executed_once_cached_res_resent():
    sib = SIBSession(rng=random.Random(0))
    data = encode(insert(7))
    for t in (0.0, 2.5, 7.5):  # the original and two retransmissions, while it executes
        sib.receive_datagram(data, KP_ADDR, t)
    [e] = events(sib)
    assert isinstance(e, RequestReceived) and e.request == decode_kp_message(data)
    assert sib.datagrams_to_send(8.0) == []  # nothing while executing
    sib.respond(e.kp, 7, Response(7), 8.0)
    [(res, addr)] = sib.datagrams_to_send(8.0)
    assert addr == KP_ADDR and decode_sib_message(res) == Response(7)
    sib.receive_datagram(data, KP_ADDR, 20.0)
    assert events(sib) == [] and sib.datagrams_to_send(20.0) == [(res, KP_ADDR)]
    # Same TID and number, another request: the KP's number reused (wire format 15), not
    # executed; the next epoch's request under the TID is new.
    drop = Request(Tx.DROP, 7, graphs=(IRI(EX + "g"),))
    sib.receive_datagram(encode(drop), KP_ADDR, 21.0)
    assert events(sib) == []
    assert decode_sib_message(sib.datagrams_to_send(21.0)[0][0]).status == Status.NUMBER_BEHIND
    sib.receive_datagram(encode(drop._replace(options=Options(epoch=1))), KP_ADDR, 21.0)
    assert [type(e) for e in events(sib)] == [RequestReceived]
    # Another KP, same TID: a new request.
    sib.receive_datagram(data, ("192.0.2.11", 40000), 22.0)
    assert [type(e) for e in events(sib)] == [RequestReceived]
    # After EXCHANGE_LIFETIME its entry is gone, and a copy still never executes: its number
    # is under the KP's floor (wire format 15).
    sib.datagrams_to_send(22.0)
    sib.receive_datagram(data, KP_ADDR, 0.0 + 247.0)
    assert events(sib) == []
    assert decode_sib_message(sib.datagrams_to_send(247.0)[0][0]).status == \
        Status.NUMBER_BEHIND


def test_duplicate_non_request_executed_once_and_never_answered():
    sib = SIBSession(rng=random.Random(0))
    data = encode(insert(9, confirmable=False))
    sib.receive_datagram(data, KP_ADDR, 0)
    [e] = events(sib)
    sib.respond(e.kp, 9, Response(9), 0)
    sib.receive_datagram(data, KP_ADDR, 1)
    assert events(sib) == [] and sib.datagrams_to_send(1) == []


def test_dedup_keys_on_kp_id_across_addresses():
    sib = SIBSession(rng=random.Random(0))
    req = insert(5)._replace(options=Options(credentials=Credentials(KP_ID)))
    sib.receive_datagram(encode(req), KP_ADDR, 0)
    [e] = events(sib)
    assert e.kp == KPIdentity(KP_ID)
    sib.respond(e.kp, 5, Response(5), 0)
    sib.datagrams_to_send(0)
    new_addr = ("198.51.100.7", 5683)
    sib.receive_datagram(encode(req), new_addr, 1)  # retransmitted after an address change
    assert events(sib) == []
    [(_, addr)] = sib.datagrams_to_send(1)
    assert addr == new_addr


def test_cache_is_bounded():
    sib = SIBSession(rng=random.Random(0),
                     options=SessionOptions(max_entries=10, max_cache_bytes=30))
    for tid in range(100):
        sib.receive_datagram(encode(insert(tid)), KP_ADDR, 0)
        sib.respond(KPIdentity(addr=KP_ADDR), tid, Response(tid), 0)
    assert sib.sizes()["recent requests"] <= 10 and sib.layer.cache.bytes <= 30
    assert sib.sizes()["executing"] == 0
    for tid in range(1000):  # never answered: still bounded
        sib.receive_datagram(encode(insert(tid, 1)), ("192.0.2.99", tid), 0)
    assert sib.sizes()["executing"] <= 10 and sib.sizes()["recent requests"] <= 10


def with_creds(request: Request, password: str) -> Request:
    return request._replace(options=Options(credentials=Credentials(KP_ID, password)))


class Verdicts:
    """An `authenticate` hook whose verdicts the test sets: unknown passwords are pending."""

    def __init__(self) -> None:
        self.known: dict[str, Status] = {}
        self.asked: list[tuple[bytes, str, object]] = []

    def __call__(self, kp_id: bytes, password: str, addr) -> Status | None:
        self.asked.append((kp_id, password, addr))
        return self.known.get(password)


def test_credentials_are_checked_before_the_duplicate_cache():
    """A copy of a KP's request with another password gets the verdict on that password, never
    the cached answer, and does not move the exchange to its address."""
    verdicts = Verdicts()
    verdicts.known = {"right": Status.OK, "wrong": Status.ACCESS_DENIED}
    sib = SIBSession(rng=random.Random(0), authenticate=verdicts)
    sib.receive_datagram(encode(with_creds(ask(5), "right")), KP_ADDR, 0)
    [e] = events(sib)
    thief = ("198.51.100.66", 9999)
    sib.receive_datagram(encode(with_creds(ask(5), "wrong")), thief, 0.1)  # while executing
    [refused] = events(sib)
    assert refused == RequestRefused(KP_ID, thief, 5, Status.ACCESS_DENIED)
    sib.respond(e.kp, 5, Response(5, result=AskResult(True)), 0.2)
    sent = sib.datagrams_to_send(0.2)
    assert [(decode_sib_message(d, answers=Tx.ASK).status, a) for d, a in sent] == [
        (Status.ACCESS_DENIED, thief), (Status.OK, KP_ADDR)]
    sib.receive_datagram(encode(with_creds(ask(5), "wrong")), thief, 0.3)  # after: no cache
    [(data, addr)] = sib.datagrams_to_send(0.3)
    assert addr == thief and decode_sib_message(data, answers=Tx.ASK).result is None
    assert sib.stats.refused == 2 and sib.sizes()["recent requests"] == 1


def test_requests_wait_for_a_pending_verdict_then_resume_in_order_over_tcp():
    verdicts = Verdicts()
    sib = SIBSession(TCP, authenticate=verdicts)
    conn = object()
    sib.receive_data(encode(with_creds(insert(1), "pw"), TCP), conn, 0)
    sib.receive_data(encode(with_creds(insert(2), "pw"), TCP), conn, 0)
    sib.receive_data(encode(insert(3), TCP), conn, 0)  # anonymous, but behind the held ones
    assert events(sib) == [CredentialsPending(KP_ID, "pw", conn)]  # one check for the three
    assert sib.held == 3
    sib.resume(1)  # still no verdict: asked for once more, nothing let through
    assert events(sib) == [CredentialsPending(KP_ID, "pw", conn)] and sib.held == 3
    verdicts.known["pw"] = Status.OK
    sib.resume(2)
    assert [e.request.tid for e in events(sib)] == [1, 2, 3] and sib.held == 0


def test_held_requests_are_bounded_and_dropped_with_their_connection():
    sib = SIBSession(TCP, authenticate=Verdicts(), options=SessionOptions(max_held=2))
    a, b = object(), object()
    for tid, conn in ((1, a), (2, b), (3, b)):
        sib.receive_data(encode(with_creds(insert(tid), f"p{tid}"), TCP), conn, 0)
    assert sib.held == 2
    refused = [e for e in events(sib) if isinstance(e, RequestRefused)]
    assert [(e.tid, e.status) for e in refused] == [(3, Status.LIMIT_EXCEEDED)]
    sib.connection_lost(b)
    assert sib.held == 1


UNDECODABLE = [
    (bytes.fromhex("02820700") + encode(insert(7))[4:], Status.VERSION_NOT_SUPPORTED),
    (bytes.fromhex("01200700"), Status.INVALID_TRANSACTION_TYPE),
    (bytes.fromhex("01800700"), Status.INVALID_MESSAGE_TYPE),
    (bytes.fromhex("0100070001"), Status.INVALID_DATA_FORMAT),  # ACK with 1 data byte
    (encode(insert(7))[:9], Status.INVALID_DATA_FORMAT),  # ends inside the Data field
    (encode(insert(7))[:-3], Status.INVALID_OPTION_FORMAT),  # ends inside the PREFIX option
    (bytes.fromhex("01900700" "01" "0b"), Status.INVALID_OPTION_TYPE),  # TERMINATE, option 0x0b
    (bytes.fromhex("01900700"), Status.INVALID_OPTION_FORMAT),  # no OC byte
]


@pytest.mark.parametrize("data, status", UNDECODABLE)
def test_undecodable_datagram_answered_with_its_status(data, status):
    sib = SIBSession(rng=random.Random(0))
    sib.receive_datagram(data, KP_ADDR, 0)
    [e] = events(sib)
    assert isinstance(e, ProtocolError) and e.status == status and e.tid == 7
    assert e.addr == KP_ADDR and not e.fatal
    [(res, addr)] = sib.datagrams_to_send(0)
    assert addr == KP_ADDR and decode_sib_message(res) == Response(7, status)


@pytest.mark.parametrize("data", [b"", b"\x01", b"\x01\x82\x07"])
def test_datagram_too_short_for_a_tid_is_not_answered(data):
    sib = SIBSession(rng=random.Random(0))
    sib.receive_datagram(data, KP_ADDR, 0)
    [e] = events(sib)
    assert isinstance(e, ProtocolError) and e.tid is None
    assert sib.datagrams_to_send(0) == []


@given(data=st.binary(max_size=40))
@settings(max_examples=300)
def test_server_answers_any_garbage_with_at_most_one_datagram(data):
    sib = SIBSession(rng=random.Random(0))
    sib.receive_datagram(data, KP_ADDR, 0)
    out = sib.datagrams_to_send(0)
    evs = events(sib)
    assert len(evs) == 1 and len(out) <= 1
    if isinstance(evs[0], ProtocolError):
        assert len(out) == (evs[0].tid is not None)


def test_respond_honours_max_response_size_and_the_datagram_limit():
    sib = SIBSession(rng=random.Random(0))
    req = Request(Tx.SELECT, 3, projection=1, where=ask(3).where,
                  options=Options(max_response_size=40))
    sib.receive_datagram(encode(req), KP_ADDR, 0)
    [e] = events(sib)
    rows = tuple((Literal.of("x" * 10 + str(i)),) for i in range(50))
    sib.respond(e.kp, 3, Response(3, result=SelectResult(1, rows)), 0)
    [(res, _)] = sib.datagrams_to_send(0)
    assert len(res) <= 40
    got = decode_sib_message(res, UDP, Tx.SELECT).result
    assert got.total == 50 and 0 < len(got.rows) < 50
    # Without the option, a result larger than a datagram is cut to one.
    sib.receive_datagram(encode(req._replace(tid=4, options=Options())), KP_ADDR, 0)
    events(sib)
    big = tuple((Literal.of("y" * 1000 + str(i)),) for i in range(100))
    sib.respond(KPIdentity(addr=KP_ADDR), 4, Response(4, result=SelectResult(1, big)), 0)
    [(res, _)] = sib.datagrams_to_send(0)
    assert len(res) <= 65_507


# ---------------------------------------------------------------------------------------------
# INDs: server side


def subscribed_sib(tid: int = 5, kp_id: bytes | None = None, **kw):
    sib = SIBSession(rng=random.Random(0), **kw)
    req = subscribe(tid)
    if kp_id is not None:
        req = req._replace(options=Options(credentials=Credentials(kp_id)))
    sib.receive_datagram(encode(req), KP_ADDR, 0)
    [e] = events(sib)
    sib.respond(e.kp, tid, Response(tid, result=SelectResult(1, ())), 0)
    sib.datagrams_to_send(0)
    return sib, e.kp


def ind_seqs(datagrams) -> list[int]:
    return [decode_sib_message(d, UDP, Tx.SELECT_PERSISTENT).seq for d, _ in datagrams]


def test_ind_numbered_from_one_and_retransmitted_until_acked():
    sib, kp = subscribed_sib()
    sib.indicate(kp, 5, state(5, 1), 10.0)
    sib.indicate(kp, 5, state(5, 2), 10.0)
    assert ind_seqs(sib.datagrams_to_send(10.0)) == [1, 2]
    t = sib.get_timer()
    assert 12.0 <= t <= 13.0
    sib.handle_timer(t)
    out = sib.datagrams_to_send(t)
    assert ind_seqs(out) == [2] and out[0][1] == KP_ADDR  # only the newest is retransmitted
    sib.receive_datagram(encode(Ack(5, 1)), KP_ADDR, t + 0.1)  # an older one: still owed
    assert events(sib) == [AckReceived(kp, KP_ADDR, 5, 1)]
    assert sib.get_timer() is not None
    sib.receive_datagram(encode(Ack(5, 2)), KP_ADDR, t + 0.2)
    assert sib.get_timer() is None
    sib.indicate(kp, 5, state(5, 3), 20.0)
    assert ind_seqs(sib.datagrams_to_send(20.0)) == [3]
    sib.receive_datagram(encode(Ack(5)), KP_ADDR, 20.1)  # a bare ACK: the newest
    assert sib.get_timer() is None


def test_ack_of_a_newer_seq_across_the_wrap_acknowledges():
    sib, kp = subscribed_sib()
    sib.indicate(kp, 5, state(5, 1, seq=65535), 0)
    sib.receive_datagram(encode(Ack(5, 0)), KP_ADDR, 0.1)  # 0 is after 65535
    assert sib.get_timer() is None
    sib.indicate(kp, 5, state(5, 2), 1)
    assert ind_seqs(sib.datagrams_to_send(1)) == [65535, 0]
    sib.receive_datagram(encode(Ack(5, 65535)), KP_ADDR, 1.1)  # older than 0
    assert sib.get_timer() is not None


def test_kp_unreachable_after_retries():
    timing = Timing(max_retransmit=3)
    sib, kp = subscribed_sib(timing=timing)
    sib.indicate(kp, 5, state(5, 1), 100.0)
    sent = sib.datagrams_to_send(100.0)
    first = sib.get_timer() - 100.0
    times = []
    while (t := sib.get_timer()) is not None:
        times.append(t)
        sib.handle_timer(t)
        sent += sib.datagrams_to_send(t)
    assert len(sent) == 1 + 3 and len(set(d for d, _ in sent)) == 1
    gaps = [b - a for a, b in zip([100.0] + times, times)]
    assert gaps == pytest.approx([first * 2 ** k for k in range(4)])
    assert events(sib) == [KPUnreachable(kp, 5)]
    sib.indicate(kp, 5, state(5, 2), 200.0)  # the numbering goes on if the SIB insists
    assert ind_seqs(sib.datagrams_to_send(200.0)) == [2]


def test_new_inds_do_not_postpone_unreachable():
    sib, kp = subscribed_sib()
    t, k = 0.0, 0
    while not any(isinstance(e, KPUnreachable) for e in events(sib)):
        k += 1
        sib.indicate(kp, 5, state(5, k), t)
        t += 1.0
        if (timer := sib.get_timer()) is not None and timer <= t:
            sib.handle_timer(t)
        assert t < 100
    assert t <= Timing().max_transmit_wait + 1


def test_final_ind_ends_the_delivery():
    sib, kp = subscribed_sib()
    sib.indicate(kp, 5, Response(5, Status.TERMINATED), 0)
    [(data, _)] = sib.datagrams_to_send(0)
    assert decode_sib_message(data) == Response(5, Status.TERMINATED, None, True, 1)
    with pytest.raises(SessionError):
        sib.indicate(kp, 5, state(5, 1), 0.05)  # nothing follows a final IND
    sib.receive_datagram(encode(Ack(5, 1)), KP_ADDR, 0.1)
    assert sib.get_timer() is None and (kp, 5) not in sib.transactions.deliveries


def test_terminate_and_reset_stop_retransmission():
    sib, kp = subscribed_sib(5)
    sib.receive_datagram(encode(subscribe(6)), KP_ADDR, 0)
    sib.respond(kp, 6, Response(6, result=SelectResult(1, ())), 0)
    sib.indicate(kp, 5, state(5, 1), 1)
    sib.indicate(kp, 6, state(6, 1), 1)
    sib.receive_datagram(encode(Request(Tx.TERMINATE, 5)), KP_ADDR, 1)
    sib.respond(kp, 5, Response(5), 1)
    assert (kp, 5) not in sib.transactions.deliveries and (kp, 6) in sib.transactions.deliveries
    sib.receive_datagram(encode(Request(Tx.RESET, 99)), KP_ADDR, 1)
    sib.respond(kp, 99, Response(99), 1)
    assert sib.transactions.deliveries == {} and sib.get_timer() is None


def test_failed_persistent_request_leaves_no_state():
    sib = SIBSession(rng=random.Random(0))
    sib.receive_datagram(encode(subscribe(5)), KP_ADDR, 0)
    [e] = events(sib)
    sib.respond(e.kp, 5, Response(5, Status.LIMIT_EXCEEDED), 0)
    assert sib.transactions.deliveries == {}


# ---------------------------------------------------------------------------------------------
# INDs: client side and end to end


def subscribed_kp(tid: int = 5) -> KPSession:
    kp = KPSession(rng=random.Random(0))
    kp.send(subscribe(tid), 0)
    kp.datagrams_to_send(0)
    kp.receive_datagram(encode(Response(tid, result=SelectResult(1, ()))), 0.1)
    assert [type(e) for e in events(kp)] == [ResponseReceived]
    return kp


def ind(tid: int, k: int, seq: int) -> bytes:
    return encode(state(tid, k, indication=True, seq=seq))


def test_client_drops_stale_and_duplicate_inds_but_acks_them():
    kp = subscribed_kp()
    for seq in (1, 3, 2, 3, 1, 4):
        kp.receive_datagram(ind(5, seq, seq), 1)
    assert [k_of(e.response) for e in events(kp)] == [1, 3, 4]
    acks = [decode_kp_message(d) for d in kp.datagrams_to_send(1)]
    assert acks == [Ack(5, s) for s in (1, 3, 2, 3, 1, 4)]


def test_ind_before_the_res_and_unknown_inds():
    kp = KPSession(rng=random.Random(0))
    kp.send(subscribe(5), 0)
    kp.datagrams_to_send(0)
    kp.receive_datagram(ind(5, 1, 1), 0.1)  # overtook the RES
    kp.receive_datagram(ind(6, 1, 1), 0.1)  # no such transaction: not ACKed (R13)
    assert [type(e) for e in events(kp)] == [IndicationReceived]
    assert [decode_kp_message(d) for d in kp.datagrams_to_send(0.1)] == [Ack(5, 1)]


def test_non_ok_ind_ends_the_transaction_and_late_copies_are_still_acked():
    kp = subscribed_kp()
    final = encode(Response(5, Status.TERMINATED, indication=True, seq=1))
    kp.receive_datagram(final, 1)
    kp.receive_datagram(final, 2)
    assert events(kp) == [PersistentEnded(5, Status.TERMINATED)]
    assert [decode_kp_message(d) for d in kp.datagrams_to_send(2)] == [Ack(5, 1)] * 2
    assert kp.persistent == frozenset()


def test_tids_never_reuse_an_active_persistent_transaction():
    kp = KPSession(rng=random.Random(0))
    kp.transactions.cursor = 5
    kp.send(subscribe(5), 0)
    assert kp.next_tid() == 6
    kp.transactions.cursor = 5
    assert kp.next_tid() == 6  # skips 5
    with pytest.raises(SessionError):
        kp.send(insert(5), 0)  # R12
    kp.receive_datagram(encode(Response(5, result=SelectResult(1, ()))), 0)
    kp.send(Request(Tx.TERMINATE, 5), 1)  # TERMINATE names the target's TID
    [data] = kp.datagrams_to_send(1)[-1:]
    assert decode_kp_message(data).tid == 5
    kp.receive_datagram(ind(5, 9, 9), 1.5)  # sent before the TERMINATE: still delivered
    kp.receive_datagram(encode(Response(5)), 2)
    assert [type(e) for e in events(kp)] == [ResponseReceived, IndicationReceived, ResponseReceived]
    assert kp.persistent == frozenset()
    kp.datagrams_to_send(2)
    kp.receive_datagram(ind(5, 10, 10), 3)  # late: ACKed, not delivered
    assert events(kp) == [] and [decode_kp_message(d) for d in kp.datagrams_to_send(3)] == [
        Ack(5, 10)]
    kp.transactions.cursor = 5
    assert kp.next_tid() == 6  # recently ended: not handed out yet
    kp.handle_timer(3 + 247)
    kp.transactions.cursor = 5
    assert kp.next_tid() == 5


def test_reset_ends_every_persistent_transaction_of_the_client():
    kp = subscribed_kp(5)
    kp.send(subscribe(6), 0)
    kp.receive_datagram(encode(Response(6, result=SelectResult(1, ()))), 0)
    reset = kp.next_tid()
    kp.send(Request(Tx.RESET, reset), 1)
    kp.receive_datagram(encode(Response(reset)), 1)
    assert kp.persistent == frozenset()


def test_persistent_request_timing_out_is_forgotten():
    kp = KPSession(rng=random.Random(0), timing=Timing(max_retransmit=0))
    kp.send(subscribe(5), 0)
    kp.handle_timer(kp.get_timer())
    assert events(kp) == [RequestTimedOut(5)]
    kp.datagrams_to_send(10)
    kp.receive_datagram(ind(5, 1, 1), 10)  # the SIB did start it: not ACKed, so it gives up
    assert events(kp) == [] and kp.datagrams_to_send(10) == []


def test_ind_delivery_with_ack_loss_end_to_end():
    lost = [0]

    def fate(way, data):
        if way == "up" and is_ack(data) and lost[0] < 2:
            lost[0] += 1
            return 0
        return 1

    net = Net(fate=fate)
    tid = net.client.next_tid()
    net.send(subscribe(tid))
    net.run()
    kp = net.of_type(RequestReceived, "server")[0].kp
    net.server.indicate(kp, tid, state(tid, 1), net.now)
    net.run()
    assert [k_of(e.response) for e in net.of_type(IndicationReceived)] == [1]
    inds = [d for d, _ in net.down if d[1] & 0x80]
    assert len(inds) == 3 and len(set(inds)) == 1
    assert net.server.get_timer() is None
    assert [e.seq for e in net.of_type(AckReceived, "server")] == [1]


@pytest.mark.parametrize("seed", range(4))
def test_seq_wrap_with_reordering_delivers_newer_states_and_the_final_one(seed):
    net = Net(seed=seed, loss=0.2, dup=0.2, reorder=0.5, latency=0.05)
    tid = net.client.next_tid()
    net.send(subscribe(tid))
    net.run()
    kp = net.of_type(RequestReceived, "server")[0].kp
    count = 30  # seq 65530 … 65535, 0 … 23
    for k in range(count):
        response = state(tid, k, seq=65530 if k == 0 else None)
        net.server.indicate(kp, tid, response, net.now)
        net.run_for(0.01)  # INDs 10 ms apart, latency 50 ms … 1 s: they overtake each other
    net.run()
    delivered = [e.response for e in net.of_type(IndicationReceived)]
    ks = [k_of(r) for r in delivered]
    assert ks == sorted(set(ks))  # strictly newer every time
    assert ks[-1] == count - 1  # the final state arrives and is the last delivered
    assert [r.seq for r in delivered] == [(65530 + k) & 0xFFFF for k in ks]
    assert any(r.seq < 100 for r in delivered)  # the wrap happened
    assert net.server.get_timer() is None  # the newest was ACKed


@given(perm=st.permutations(range(20)), dups=st.lists(st.integers(0, 19), max_size=10),
       start=st.sampled_from([1, 65530, 65535, 32000]))
@settings(max_examples=200)
def test_client_delivers_a_strictly_newer_subsequence(perm, dups, start):
    kp = subscribed_kp()
    order = list(perm)
    for i, k in enumerate(dups):
        order.insert(i * 2, k)
    for k in order:
        kp.receive_datagram(ind(5, k, (start + k) & 0xFFFF), 1)
    ks = [k_of(e.response) for e in events(kp)]
    assert ks == sorted(set(ks)) and ks[-1] == 19 and ks[0] == order[0]
    assert len(kp.datagrams_to_send(1)) == len(order)  # every copy ACKed


def test_address_change_keeps_inds_flowing_with_the_same_kp_id():
    creds = Credentials(KP_ID, "secret")
    net = Net(KPSession(rng=random.Random(0), credentials=creds))
    tid = net.client.next_tid()
    net.send(subscribe(tid))
    net.run()
    kp = net.of_type(RequestReceived, "server")[0].kp
    assert kp == KPIdentity(KP_ID)
    net.server.indicate(kp, tid, state(tid, 1), net.now)
    net.run()
    assert [k_of(e.response) for e in net.of_type(IndicationReceived)] == [1]

    old, net.addr = net.addr, ("203.0.113.5", 41000)  # DHCP renewal: a new address
    net.server.indicate(kp, tid, state(tid, 2), net.now)
    net.run_for(0.5)  # IND 2 went to the old address: lost
    assert len(net.of_type(IndicationReceived)) == 1
    net.send(ask(net.client.next_tid()))  # any request from the new address moves the INDs
    net.run()
    net.server.indicate(kp, tid, state(tid, 3), net.now)
    net.run()
    assert [k_of(e.response) for e in net.of_type(IndicationReceived)] == [1, 2, 3]
    assert net.down[-1][1] == net.addr and net.server.get_timer() is None
    assert all(e.kp == kp for e in net.of_type(AckReceived, "server"))
    assert old != net.addr and net.of_type(KPUnreachable, "server") == []


def test_a_kp_id_heard_from_a_new_address_gets_its_unacked_ind_at_once():
    """A device back from sleep (new address) must not wait for the next back-off step, which
    it would mostly sleep through: its unacknowledged IND follows it with its first request."""
    sib, kp = subscribed_sib(kp_id=KP_ID)
    sib.indicate(kp, 5, state(5, 1), 2)
    [(ind, addr)] = sib.datagrams_to_send(2)
    assert addr == KP_ADDR  # lost: the device sleeps
    new = ("203.0.113.5", 41000)
    sib.receive_datagram(encode(ask(8)._replace(options=Options(credentials=Credentials(KP_ID)))),
                         new, 3)
    [e] = events(sib)
    sib.respond(e.kp, 8, Response(8), 3)
    sent = sib.datagrams_to_send(3)
    assert [a for _, a in sent] == [new, new] and sent[1][0] == ind  # the RES, then the IND
    assert sib.get_timer() >= 3 + 2.0  # a fresh back-off from now
    sib.receive_datagram(encode(ask(9)._replace(options=Options(credentials=Credentials(KP_ID)))),
                         new, 4)
    [e] = events(sib)
    sib.respond(e.kp, 9, Response(9), 4)
    assert [a for _, a in sib.datagrams_to_send(4)] == [new]  # same address: just the RES


def test_access_denied_request_does_not_divert_inds():
    sib, kp = subscribed_sib(kp_id=KP_ID)
    thief = ("203.0.113.66", 666)
    req = ask(8)._replace(options=Options(credentials=Credentials(KP_ID, "wrong")))
    sib.receive_datagram(encode(req), thief, 1)
    [e] = events(sib)
    sib.respond(e.kp, 8, Response(8, Status.ACCESS_DENIED), 1)
    assert [addr for _, addr in sib.datagrams_to_send(1)] == [thief]  # the RES, to the asker
    sib.indicate(kp, 5, state(5, 1), 2)
    assert [addr for _, addr in sib.datagrams_to_send(2)] == [KP_ADDR]


def test_without_a_kp_id_a_new_address_is_a_new_kp():
    sib = SIBSession(rng=random.Random(0))
    sib.receive_datagram(encode(insert(1)), KP_ADDR, 0)
    sib.receive_datagram(encode(insert(1)), ("192.0.2.10", 40001), 0)
    a, b = events(sib)
    assert a.kp != b.kp and a.kp == KPIdentity(addr=KP_ADDR)


# ---------------------------------------------------------------------------------------------
# TCP


def tcp_stream_and_client():
    """A TCP client with three pending requests and the SIB's bytes answering them."""
    def client():
        kp = KPSession(TCP, rng=random.Random(0))
        kp.send(subscribe(1), 0)
        kp.send(ask(2), 0)
        kp.send(insert(3), 0)
        kp.data_to_send()
        return kp

    stream = b"".join([
        encode(Response(1, result=SelectResult(1, ())), TCP),
        encode(state(1, 1, indication=True), TCP),
        encode(Response(2, result=AskResult(False)), TCP),
        encode(state(1, 2, indication=True), TCP),
        encode(Response(3), TCP),
        encode(Response(1, Status.TERMINATED, indication=True), TCP),
    ])
    return client, stream


def test_tcp_stream_split_at_every_byte_boundary_reassembles():
    client, stream = tcp_stream_and_client()
    kp = client()
    kp.receive_data(stream, 1)
    expected = events(kp)
    assert [type(e) for e in expected] == [ResponseReceived, IndicationReceived, ResponseReceived,
                                           IndicationReceived, ResponseReceived, PersistentEnded]
    assert expected[1].response.seq is None  # no sequence numbers over TCP (R11)
    for i in range(len(stream) + 1):
        kp = client()
        for piece in (stream[:i], stream[i:]):
            if piece:  # b"" is the end of the stream
                kp.receive_data(piece, 1)
        assert events(kp) == expected, i
    kp = client()
    for b in stream:
        kp.receive_data(bytes([b]), 1)
    assert events(kp) == expected
    assert kp.data_to_send() == b""  # no ACKs over TCP


@given(cuts=st.lists(st.integers(0, 400), max_size=20))
def test_tcp_stream_split_anywhere(cuts):
    client, stream = tcp_stream_and_client()
    kp = client()
    kp.receive_data(stream, 1)
    expected = events(kp)
    kp = client()
    bounds = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    for a, b in zip(bounds, bounds[1:]):
        kp.receive_data(stream[a:b], 1)
    assert events(kp) == expected


def test_tcp_oversize_frame_is_an_error_event_and_skipped():
    kp = KPSession(TCP, rng=random.Random(0), max_message_size=64)
    kp.send(Request(Tx.SELECT, 1, projection=1, where=ask(1).where), 0)
    kp.send(ask(2), 0)
    big = encode(Response(1, result=SelectResult(1, tuple((Literal.of(i),) for i in range(40)))),
                 TCP)
    assert len(big) > 64
    stream = big + encode(Response(2, result=AskResult(True)), TCP)
    for piece in (stream[:10], stream[10:70], stream[70:]):
        kp.receive_data(piece, 1)
    err, ok = events(kp)
    assert isinstance(err, ProtocolError) and err.status == Status.LIMIT_EXCEEDED
    assert err.tid == 1 and not err.fatal
    assert ok == ResponseReceived(2, Response(2, result=AskResult(True)))
    assert kp.pending == frozenset()


def test_tcp_length_below_8_is_fatal():
    kp = KPSession(TCP, rng=random.Random(0))
    kp.send(insert(4), 0)
    kp.receive_data(bytes.fromhex("01000400" "05000000") + encode(Response(4), TCP), 1)
    [e] = events(kp)
    assert isinstance(e, ProtocolError) and e.fatal and e.tid == 4
    kp.receive_data(b"", 2)  # the adapter closes: the pending request is lost
    assert events(kp) == [RequestTimedOut(4)]
    with pytest.raises(SessionError):
        kp.send(insert(5), 3)


def test_tcp_eof_inside_a_message():
    kp = KPSession(TCP, rng=random.Random(0))
    kp.receive_data(encode(Response(4), TCP)[:5], 1)
    kp.receive_data(b"", 1)
    [e] = events(kp)
    assert isinstance(e, ProtocolError) and e.fatal


def test_tcp_con_request_times_out_after_exchange_lifetime():
    kp = KPSession(TCP, rng=random.Random(0))
    kp.send(insert(4), 0)
    assert kp.get_timer() == 247.0
    kp.handle_timer(247.0)
    assert events(kp) == [RequestTimedOut(4)] and kp.data_to_send() != b""


def test_tcp_server_end_to_end():
    sib = SIBSession(TCP, rng=random.Random(0), max_message_size=200)
    kp = KPSession(TCP, rng=random.Random(0))
    conn = "conn-1"
    kp.send(subscribe(1), 0)
    sib.receive_data(kp.data_to_send(), conn, 0)
    [e] = events(sib)
    assert e.kp == KPIdentity(addr=conn)
    sib.respond(e.kp, 1, Response(1, result=SelectResult(1, ())), 0)
    sib.indicate(e.kp, 1, state(1, 1), 0)
    sib.indicate(e.kp, 1, state(1, 2), 0)
    [(data, to)] = sib.data_to_send()
    assert to == conn
    kp.receive_data(data, 0)
    assert [type(x) for x in events(kp)] == [ResponseReceived, IndicationReceived,
                                             IndicationReceived]
    assert sib.get_timer() is None  # TCP INDs are not retransmitted
    # An oversize request is answered LIMIT_EXCEEDED and the stream goes on.
    big = insert(2)._replace(insert=tuple(Triple(IRI(EX + "s"), IRI(EX + "p"), Literal.of(i))
                                          for i in range(60)))
    sib.receive_data(encode(big, TCP) + encode(insert(3), TCP), conn, 1)
    err, ok = events(sib)
    assert isinstance(err, ProtocolError) and err.status == Status.LIMIT_EXCEEDED
    assert isinstance(ok, RequestReceived) and ok.request.tid == 3
    [(data, _)] = sib.data_to_send()
    assert decode_sib_message(data, TCP) == Response(2, Status.LIMIT_EXCEEDED)
    # An ACK over TCP is answered INVALID_MESSAGE_TYPE.
    sib.receive_data(bytes.fromhex("01000100" "08000000"), conn, 1)
    [err] = events(sib)
    assert err.status == Status.INVALID_MESSAGE_TYPE
    assert decode_sib_message(sib.data_to_send()[0][0], TCP).status == Status.INVALID_MESSAGE_TYPE
    # The connection goes: INDs for that KP report it unreachable.
    sib.receive_data(b"", conn, 2)
    sib.indicate(e.kp, 1, state(1, 3), 2)
    assert events(sib) == [KPUnreachable(e.kp, 1)] and sib.data_to_send() == []


def test_tcp_kp_id_moves_to_a_new_connection():
    sib = SIBSession(TCP, rng=random.Random(0))
    creds = Options(credentials=Credentials(KP_ID))
    sib.receive_data(encode(subscribe(1)._replace(options=creds), TCP), "a", 0)
    [e] = events(sib)
    sib.respond(e.kp, 1, Response(1, result=SelectResult(1, ())), 0)
    sib.connection_lost("a")
    sib.receive_data(encode(ask(2)._replace(options=creds), TCP), "b", 1)
    [e2] = events(sib)
    assert e2.kp == e.kp
    sib.respond(e.kp, 2, Response(2, result=AskResult(True)), 1)
    sib.indicate(e.kp, 1, state(1, 1), 2)
    out = sib.data_to_send()
    assert [conn for _, conn in out] == ["b"]
    assert len(out[0][0]) > len(encode(Response(2, result=AskResult(True)), TCP))


def test_tcp_server_framing_error_is_fatal_and_answered():
    sib = SIBSession(TCP, rng=random.Random(0))
    sib.receive_data(bytes.fromhex("01820900" "03000000") + encode(insert(1), TCP), "c", 0)
    [e] = events(sib)
    assert e.fatal and e.addr == "c" and e.status == Status.INVALID_DATA_FORMAT
    [(data, _)] = sib.data_to_send()
    assert decode_sib_message(data, TCP) == Response(9, Status.INVALID_DATA_FORMAT)


# -- one encoding shared by the subscribers of one result -----------------------------------

@settings(max_examples=60, deadline=None)
@given(result=st.one_of(*(results_for(tx, small=True)
                          for tx in (Tx.SELECT, Tx.ASK, Tx.CONSTRUCT))),
       tids=st.lists(st.integers(0, 0xFFFF), min_size=2, max_size=5, unique=True),
       sizes=st.lists(st.one_of(st.none(), st.integers(6, 400)), min_size=5, max_size=5),
       tcp=st.booleans())
def test_indications_of_one_result_are_each_the_canonical_encoding(result, tids, sizes, tcp):
    """The SIB hands one result object to every subscriber; the session encodes it once per
    MAX RESPONSE SIZE and re-tags the TID and sequence number, which must give exactly what
    encoding each IND alone gives."""
    transport = TCP if tcp else UDP
    sib = SIBSession(transport)
    conn = "conn"
    subscribers = []
    for i, tid in enumerate(tids):
        max_size = sizes[i]
        req = Request(Tx.SELECT_PERSISTENT, tid, True, projection=1,
                      where=(Triple(IRI(EX + "s"), IRI(EX + "p"), Var(0)),),
                      options=Options(max_response_size=max_size))
        if tcp:
            sib.receive_data(encode(req, TCP), conn, 0.0)
        else:
            sib.receive_datagram(encode(req, UDP), KP_ADDR, 0.0)
        event = sib.next_event()
        assert isinstance(event, RequestReceived)
        sib.respond(event.kp, tid, Response(tid, result=SelectResult(1, ())), 0.0)
        subscribers.append((event.kp, tid, max_size))
    sent = sib.data_to_send() if tcp else sib.datagrams_to_send(0.0)
    for round_ in range(2):  # the second pass: sequence number 2 (UDP)
        for kp, tid, _ in subscribers:
            sib.indicate(kp, tid, Response(tid, result=result, indication=True), 1.0)
        sent = sib.data_to_send() if tcp else sib.datagrams_to_send(1.0)
        data = sent[0][0] if tcp else b"".join(d for d, _ in sent)
        expected = b"".join(
            encode(Response(tid, result=result, indication=True,
                            seq=None if tcp else round_ + 1),
                   transport, max_size=max_size if tcp else min(max_size or 65507, 65507))
            for _, tid, max_size in subscribers)
        assert data == expected


# -- public restore API, statistics, table sizing ----------------------------------------------

def test_bind_restores_a_kp_ids_endpoint_until_its_next_request():
    sib = SIBSession(rng=random.Random(0))
    kp = KPIdentity(KP_ID)
    saved = ("198.51.100.1", 7000)  # from a journal, before the restart
    assert sib.endpoint(kp) is None
    sib.bind(kp, saved)
    assert sib.endpoint(kp) == saved
    sib.indicate(kp, 5, state(5, 1), 0.0)
    assert [addr for _, addr in sib.datagrams_to_send(0.0)] == [saved]
    req = ask(9)._replace(options=Options(credentials=Credentials(KP_ID)))
    sib.receive_datagram(encode(req), KP_ADDR, 1.0)  # the KP is back, elsewhere
    [e] = events(sib)
    sib.respond(e.kp, 9, Response(9, result=AskResult(False)), 1.0)
    assert sib.endpoint(kp) == KP_ADDR
    sib.bind(kp, saved)  # older than any request: never moves a KP that has been seen
    assert sib.endpoint(kp) == KP_ADDR
    assert sib.endpoint(KPIdentity(addr=KP_ADDR)) == KP_ADDR
    with pytest.raises(SessionError):
        sib.bind(KPIdentity(addr=KP_ADDR), saved)


def test_stats_count_retransmissions_duplicates_and_stray_acks():
    sib, kp = subscribed_sib(timing=Timing(max_retransmit=2))
    sib.indicate(kp, 5, state(5, 1), 0.0)
    sib.indicate(kp, 5, state(5, 2), 0.0)
    assert sib.stats.inds_sent == 2 and sib.stats.ind_retransmissions == 0
    for _ in range(3):  # two retransmissions, then it gives up
        sib.handle_timer(sib.get_timer())
    assert sib.stats.ind_retransmissions == 2 and sib.stats.kp_unreachable == 1
    data = encode(insert(7))
    sib.receive_datagram(data, KP_ADDR, 1.0)
    sib.receive_datagram(data, KP_ADDR, 1.5)  # still executing: dropped
    [e] = [e for e in events(sib) if isinstance(e, RequestReceived)]
    sib.respond(e.kp, 7, Response(7), 2.0)
    sib.receive_datagram(data, KP_ADDR, 3.0)  # answered from the cache
    sib.receive_datagram(encode(Ack(77, 1)), KP_ADDR, 3.0)  # no IND went there
    s = sib.stats
    assert (s.duplicates_ignored, s.res_retransmissions_answered, s.acks_unmatched) == (1, 1, 1)


def test_ack_routing_stays_right_above_the_old_4096_cap():
    """10,000 persistent queries of two KPs sharing the TID space, all indicated before any
    ACK comes back: every ACK finds its KP and its delivery, nothing is re-sent."""
    sib = SIBSession(rng=random.Random(0))
    kps = [("192.0.2.1", 5000), ("192.0.2.2", 5000)]
    for tid in range(5000):
        for addr in kps:
            sib.receive_datagram(encode(subscribe(tid)), addr, 0.0)
    for e in events(sib):
        sib.respond(e.kp, e.request.tid, Response(e.request.tid, result=SelectResult(1, ())), 0)
    sib.datagrams_to_send(0.0)
    for tid in range(5000):
        for addr in kps:
            sib.indicate(KPIdentity(addr=addr), tid, state(tid, 1), 1.0)
    sent = sib.datagrams_to_send(1.0)
    assert len(sent) == 10_000
    for data, addr in sent:
        sib.receive_datagram(encode(Ack(decode_sib_message(data, UDP, Tx.SELECT_PERSISTENT).tid,
                                        1)), addr, 1.5)
    acks = events(sib)
    assert len(acks) == 10_000 and all(
        isinstance(a, AckReceived) and a.kp == KPIdentity(addr=a.addr) for a in acks)
    assert sib.stats.acks_unmatched == 0 and sib.get_timer() is None
    sib.handle_timer(1000.0)
    assert sib.datagrams_to_send(1000.0) == [] and sib.stats.ind_retransmissions == 0


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(st.one_of(
    st.tuples(st.just("send"), st.sampled_from([0, 1]), st.sampled_from(["ok", "bad", None])),
    st.tuples(st.just("decide"), st.sampled_from(["ok", "bad"]), st.booleans())),
    max_size=30))
def test_held_requests_keep_each_connections_order(steps):
    """Any interleaving of requests on two TCP connections (password "ok", "bad", or none) and
    of verdicts arriving: every request reaches the SIB at most once, only with a proven
    password or none, each connection's in the order sent; refused ones are answered."""
    verdicts = Verdicts()
    sib = SIBSession(TCP, authenticate=verdicts)
    conns = [object(), object()]
    sent: list[list[int]] = [[], []]
    kinds: dict[int, str | None] = {}
    delivered: list = []
    tid = 0
    for step in steps:
        if step[0] == "send":
            _, c, password = step
            tid += 1
            req = insert(tid) if password is None else with_creds(insert(tid), password)
            sent[c].append(tid)
            kinds[tid] = password
            sib.receive_data(encode(req, TCP), conns[c], 0)
        else:
            _, password, resume = step
            verdicts.known[password] = Status.OK if password == "ok" else Status.ACCESS_DENIED
            if resume:
                sib.resume(0)
        for e in events(sib):
            if isinstance(e, RequestReceived):
                delivered.append((conns.index(e.addr), e.request.tid))
                sib.respond(e.kp, e.request.tid, Response(e.request.tid), 0)
    tids = [t for _, t in delivered]
    assert len(tids) == len(set(tids))
    assert all(kinds[t] in (None, "ok") for t in tids)
    for c in (0, 1):
        mine = [t for k, t in delivered if k == c]
        assert mine == [t for t in sent[c] if t in mine]  # the order sent


def test_unacknowledged_inds_are_bounded_in_bytes():
    """INDs kept for retransmission count against `max_ind_bytes`: past it the oldest KPs that
    do not ACK are given up on (KPUnreachable), the newest IND is always kept."""
    sib = SIBSession(rng=random.Random(0), options=SessionOptions(max_ind_bytes=2000))
    kps = []
    for k in range(10):
        addr = ("192.0.2.1", 5000 + k)
        sib.receive_datagram(encode(subscribe(k + 1)), addr, 0)
        [e] = events(sib)
        sib.respond(e.kp, k + 1, answer(e.request), 0)
        kps.append(e.kp)
    big = Response(0, result=SelectResult(1, ((Literal("x" * 400),),)), indication=True)
    for k, kp in enumerate(kps):
        sib.indicate(kp, k + 1, big._replace(tid=k + 1), 0)
    gone = [e for e in events(sib) if isinstance(e, KPUnreachable)]
    assert sib.layer.ind_bytes <= 2000
    assert [e.tid for e in gone] == list(range(1, len(gone) + 1)) and len(gone) >= 5
    assert sib.awaiting_ack(kps[-1], 10)  # the newest kept
    for k in range(len(gone)):
        assert not sib.awaiting_ack(kps[k], k + 1)
    for k, kp in enumerate(kps):  # ending them all frees every byte
        sib.end_persistent(kp, k + 1)
    assert sib.layer.ind_bytes == 0


# ---------------------------------------------------------------------------------------------
# A final IND given up on reaches a KP that comes back


QUIET = Timing(keepalive=0)


def away_net(**kw) -> tuple[Net, int, KPIdentity, list]:
    """A KP subscribed over a link that `away[0]` cuts both ways; then the SIB ends the
    operation (TERMINATED) while the KP is away, past every retry of the final IND."""
    away = [False]
    # The KP only listens and sends no keepalives (Timing.keepalive 0): the SIB's own way of
    # telling it, the final IND kept, is what these tests are about.
    kw.setdefault("client", KPSession(timing=QUIET, rng=random.Random(0)))
    net = Net(fate=lambda way, data: 0 if away[0] else 1, **kw)
    tid = net.client.next_tid()
    net.send(subscribe(tid))
    net.run()
    kp = net.of_type(RequestReceived, "server")[0].kp
    away[0] = True
    net.server.indicate(kp, tid, Response(tid, Status.TERMINATED, indication=True), net.now)
    net.run()  # every retry lost
    assert net.of_type(KPUnreachable, "server") == [KPUnreachable(kp, tid)]
    assert net.of_type(PersistentEnded) == [] and tid in net.client.persistent
    return net, tid, kp, away


@pytest.mark.parametrize("kp_id", [None, KP_ID])
def test_a_final_ind_given_up_on_is_sent_when_the_kp_is_heard_from_again(kp_id):
    client = KPSession(timing=QUIET, rng=random.Random(0),
                       credentials=Credentials(kp_id, "pw") if kp_id else None)
    net, tid, kp, away = away_net(client=client)
    net.run_for(600.0)  # away for ten minutes
    away[0] = False
    if kp_id:
        net.addr = ("203.0.113.5", 41000)  # back at a new address, with its KP ID
    net.send(ask(net.client.next_tid()))  # an unrelated request
    net.run()
    assert net.of_type(PersistentEnded) == [PersistentEnded(tid, Status.TERMINATED)]
    assert tid not in net.client.persistent and [type(e) for e in net.of_type(
        ResponseReceived)] == [ResponseReceived, ResponseReceived]
    assert net.down[-1][1] == net.addr  # the final IND went where the KP is now
    assert net.server.sizes()["tombstones"] == 0 and net.server.get_timer() is None
    assert (kp, tid) not in net.server.transactions.deliveries
    assert net.server.stats.ends_resent == 1
    net.send(ask(net.client.next_tid()))  # once ACKed it is gone: nothing more
    net.run()
    assert len([d for d, _ in net.down if d[1] & 0x80]) == 1 + 4 + 1


def test_a_final_ind_given_up_on_follows_an_ack_and_is_given_up_on_again():
    """Any datagram from the KP's address brings the final IND back (here a stray ACK); a KP
    still silent gets it with a fresh retry schedule, and the tombstone stays for next time."""
    net, tid, kp, away = away_net()
    sib = net.server
    sib.receive_datagram(encode(Ack(77, 1)), KP_ADDR, net.now)  # heard, but still not answering
    net.run()
    assert net.of_type(KPUnreachable, "server") == [KPUnreachable(kp, tid)] * 2
    assert sib.sizes()["tombstones"] == 1 and sib.get_timer() is None
    assert len([d for d, _ in net.down if d[1] & 0x80]) == 5 + 5  # a second full round
    away[0] = False
    net.send(ask(net.client.next_tid()))
    net.run()
    assert net.of_type(PersistentEnded) == [PersistentEnded(tid, Status.TERMINATED)]
    assert sib.sizes()["tombstones"] == 0


def test_a_kp_that_never_comes_back_gets_nothing_and_tombstones_are_bounded():
    sib = SIBSession(rng=random.Random(0),
                     options=SessionOptions(max_entries=4, tombstone_lifetime=3600.0))
    now, gone = 0.0, []
    for k in range(6):  # one KP after the other, each silent past every retry
        addr = ("192.0.2.1", 5000 + k)
        sib.receive_datagram(encode(subscribe(k + 1)), addr, now)
        [e] = events(sib)
        sib.respond(e.kp, k + 1, answer(e.request), now)
        sib.indicate(e.kp, k + 1, Response(k + 1, Status.TERMINATED, indication=True), now)
        sib.datagrams_to_send(now)
        while (t := sib.get_timer()) is not None:
            now = t
            sib.handle_timer(now)
            sib.datagrams_to_send(now)
        gone += [e for e in events(sib) if isinstance(e, KPUnreachable)]
    assert len(gone) == 6 and sib.sizes()["tombstones"] == 4  # the oldest two went
    other = ("192.0.2.99", 1)
    sib.receive_datagram(encode(insert(9)), other, now)  # another KP: nothing for it
    [e] = events(sib)
    sib.respond(e.kp, 9, Response(9), now)
    assert [a for _, a in sib.datagrams_to_send(now)] == [other] and sib.get_timer() is None
    sib.receive_datagram(encode(Ack(1, 1)), ("192.0.2.1", 5000), now)  # evicted: nothing
    assert sib.datagrams_to_send(now) == []
    sib.receive_datagram(encode(Ack(6, 1)), ("192.0.2.1", 5005), 3601.0 + now)  # expired
    assert sib.datagrams_to_send(3601.0 + now) == [] and sib.sizes()["tombstones"] == 0


def test_a_kp_that_moved_on_from_the_tid_drops_its_tombstone():
    """RESET (the KP forgot its IDs), a TERMINATE of it or a new request under its TID: the KP
    is done with that operation, its final IND is not sent again."""
    again = subscribe(5)
    again = again._replace(options=again.options._replace(epoch=1))  # its next number
    for request in (Request(Tx.RESET, 9), Request(Tx.TERMINATE, 5), again):
        sib, kp = subscribed_sib(5)
        sib.indicate(kp, 5, Response(5, Status.TERMINATED, indication=True), 0)
        while (t := sib.get_timer()) is not None:
            sib.handle_timer(t)
        sib.datagrams_to_send(t)
        assert sib.sizes()["tombstones"] == 1
        sib.receive_datagram(encode(request), KP_ADDR, 300.0)  # past the first one's lifetime
        [e] = [e for e in events(sib) if isinstance(e, RequestReceived)]
        sib.respond(kp, request.tid, answer(e.request), 300.0)
        sent = [decode_sib_message(d, UDP, request.tx) for d, _ in sib.datagrams_to_send(300.0)]
        assert [r.indication for r in sent] == [False]  # its RES only
        assert sib.sizes()["tombstones"] == 0
        if request.tx is Tx.SELECT_PERSISTENT:  # a new operation under the TID indicates
            sib.indicate(kp, 5, state(5, 1), 301.0)
            assert ind_seqs(sib.datagrams_to_send(301.0)) == [1]


def test_a_new_operation_under_the_tid_of_a_final_ind_awaiting_its_ack_starts_afresh():
    sib, kp = subscribed_sib(5)
    sib.indicate(kp, 5, Response(5, Status.TERMINATED, indication=True), 0)
    sib.datagrams_to_send(0)
    renewed = subscribe(5)._replace(projection=2)
    renewed = renewed._replace(options=renewed.options._replace(epoch=1))  # its next number
    sib.receive_datagram(encode(renewed), KP_ADDR, 1.0)
    [e] = events(sib)
    sib.respond(kp, 5, answer(e.request), 1.0)
    sib.indicate(kp, 5, state(5, 1), 2.0)  # the new operation's, numbered afresh
    assert [r.seq for r in (decode_sib_message(d, UDP, Tx.SELECT_PERSISTENT)
                            for d, _ in sib.datagrams_to_send(2.0)) if r.indication] == [1]


def test_a_kp_that_talks_but_never_acks_the_final_ind_has_its_tombstone_dropped():
    """A KP that forgot the TID (rebooted without RESET) ACKs no IND of it (R13): sent again
    while the KP keeps sending, unacknowledged, the final IND is given up on for good."""
    sib, kp = subscribed_sib(5)
    sib.indicate(kp, 5, Response(5, Status.TERMINATED, indication=True), 0)
    while (t := sib.get_timer()) is not None:
        sib.handle_timer(t)
    sib.datagrams_to_send(t)
    now = 300.0
    for k in range(8):  # a request every 20 s, none ACKing the final IND
        sib.receive_datagram(encode(insert(100 + k, k)), KP_ADDR, now)
        [e] = [e for e in events(sib) if isinstance(e, RequestReceived)]
        sib.respond(kp, 100 + k, Response(100 + k), now)
        now += 20.0
        while (t := sib.get_timer()) is not None and t <= now:
            sib.handle_timer(t)
    inds = [d for d, _ in sib.datagrams_to_send(now) if d[1] & 0x80]
    assert len(inds) == 1 + 4 and sib.sizes()["tombstones"] == 0  # one more round, then gone
