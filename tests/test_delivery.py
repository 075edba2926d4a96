"""One owner per persistent delivery (`ksp.delivery.Delivery`): numbering, endpoint, what the KP
has, the digest of the encoded result; export and restore for a journal; a new kind of
subscriber that plugs into the SIB with nothing of `sib/` changed; and no transport branch left
in `sib/` outside its entry point."""
from __future__ import annotations

import asyncio
import pathlib
import re

from hypothesis import given, strategies as st

from ksp import UDP, Literal, Request, Response, Status, Triple, Tx, Var, encode
from ksp.delivery import Delivery, DeliveryState, encoding_digest, result_digest
from ksp.model import SelectResult
from ksp.terms import XSD_DOUBLE
from ksp.session import KPIdentity, SessionOptions, SIBSession
from sib import QuadStore, Sib
from sib.journal import Journal
from sib.testing import Client, ex

ROOT = pathlib.Path(__file__).resolve().parent.parent
S, P = ex("s"), ex("p")
SUB = Request(Tx.SELECT_PERSISTENT, 5, projection=1, where=(Triple(S, P, Var(0)),))


def rows(*values: int) -> SelectResult:
    return SelectResult(1, tuple((Literal.of(v),) for v in values))


def insert(tid: int, value: int) -> Request:
    return Request(Tx.INSERT_DATA, tid, insert=(Triple(S, P, Literal.of(value)),))


# -- the Delivery alone ------------------------------------------------------------------------


def test_numbering_starts_at_1_wraps_past_65535_and_restarts_at_an_explicit_seq():
    d = Delivery("kp", 7)
    ind = Response(7, Status.OK, rows(1), indication=True)
    assert [d.next_seq(ind) for _ in range(3)] == [1, 2, 3]
    d.seq = 0xFFFF
    assert d.next_seq(ind) == 0  # §9: 65535 is followed by 0
    assert d.next_seq(ind._replace(seq=40)) == 40 and d.next_seq(ind) == 41
    assert Delivery("kp", 7, numbered=False).next_seq(ind) is None  # TCP: no numbers


@given(seq=st.none() | st.integers(0, 0xFFFF), delivered=st.booleans(),
       max_size=st.none() | st.integers(8, 60_000),
       endpoint=st.none() | st.tuples(st.just("127.0.0.1"), st.integers(1, 65535)))
def test_export_and_restore_round_trip(seq, delivered, max_size, endpoint):
    d = Delivery(KPIdentity(b"k" * 16), 3, endpoint, max_size, durable=True)
    d.seq, d.delivered, d.digest = seq, delivered, b"d" * 32
    state = d.export()
    back = Delivery.restore(d.kp, d.tid, state)
    assert back.export() == state == DeliveryState(seq, endpoint, b"d" * 32, delivered, max_size)
    if seq is not None:
        assert back.next_seq(Response(3, indication=True)) == (seq + 1) & 0xFFFF


def test_the_digest_is_of_the_encoding_a_res_and_its_ind_agree_and_tid_seq_do_not_count():
    res = Response(5, Status.OK, rows(1, 2))
    ind = encode(Response(9, Status.OK, rows(1, 2), indication=True, seq=77), UDP)
    assert encoding_digest(ind) == result_digest(res) == result_digest(res._replace(tid=1))
    assert result_digest(res) != result_digest(Response(5, Status.OK, rows(1, 3)))
    # "1"^^xsd:double and "1.0"^^xsd:double compare by text in the encoding, not by value
    one, one0 = Literal("1", XSD_DOUBLE), Literal("1.0", XSD_DOUBLE)
    assert (result_digest(Response(5, Status.OK, SelectResult(1, ((one,),))))
            != result_digest(Response(5, Status.OK, SelectResult(1, ((one0,),)))))
    # cut to MAX RESPONSE SIZE, as the KP got it
    big = Response(5, Status.OK, rows(*range(200)))
    assert result_digest(big, 64) != result_digest(big)


def test_redundant_only_right_after_a_restore_of_a_state_the_kp_acked():
    ind = Response(5, Status.OK, rows(1), indication=True)
    d = Delivery("kp", 5, durable=True)
    d.responded(Response(5, Status.OK, rows(1)))
    assert d.delivered and not d.redundant(ind)  # never on a live delivery
    back = Delivery.restore("kp", 5, d.export())
    assert back.redundant(ind)
    assert not back.redundant(ind._replace(result=rows(2)))
    assert not back.redundant(Response(5, Status.TERMINATED, indication=True))
    unacked = Delivery.restore("kp", 5, DeliveryState(3, None, d.digest, delivered=False))
    assert not unacked.redundant(ind)  # maybe never received: sent again
    back.next_seq(ind)
    back.indicated(ind._replace(result=rows(2)), delivered=False)
    assert not back.restored and back.awaiting_ack


# -- the owner inside a SIBSession ---------------------------------------------------------------


def _udp_sib_with_subscriber(max_entries: int = 65_536):
    # its address counts as validated (address validation, wire format 14: test_amplification)
    sib = SIBSession(UDP, options=SessionOptions(max_entries=max_entries,
                                                 amplification_factor=0))
    addr = ("10.0.0.2", 5683)
    sib.receive_datagram(encode(SUB, UDP), addr, 0.0)
    event = sib.next_event()
    kp = event.kp
    sib.respond(kp, 5, Response(5, Status.OK, rows()), 0.0)
    sib.datagrams_to_send(0.0)
    return sib, kp, addr


def test_session_export_carries_the_current_endpoint_and_the_ack_state():
    sib, kp, addr = _udp_sib_with_subscriber()
    d = sib.delivery(kp, 5)
    assert sib.export(kp, 5) == DeliveryState(None, addr, d.digest, True)
    assert d.digest == result_digest(Response(5, Status.OK, rows()))  # from the RES
    sib.indicate(kp, 5, Response(5, Status.OK, rows(1), indication=True), 0.0)
    (data, to), = sib.datagrams_to_send(0.0)
    state = sib.export(kp, 5)
    assert (state.seq, state.delivered, to) == (1, False, addr)
    assert state.digest == encoding_digest(data)
    sib.receive_datagram(encode(__import__("ksp").Ack(5, 1), UDP), addr, 0.1)
    assert sib.export(kp, 5).delivered


def test_an_evicted_delivery_is_taken_back_from_its_holder_and_numbers_on():
    sib, kp, addr = _udp_sib_with_subscriber(max_entries=2)
    held = sib.delivery(kp, 5)
    sib.indicate(kp, 5, Response(5, Status.OK, rows(1), indication=True), 0.0, held)
    for i in range(3):  # three other operations push it out of the table
        other = KPIdentity(None, ("10.0.0.9", 1000 + i))
        sib.indicate(other, 1, Response(1, Status.OK, rows(i), indication=True), 0.0)
    assert sib.delivery(kp, 5) is None
    sib.datagrams_to_send(0.0)
    sib.indicate(kp, 5, Response(5, Status.OK, rows(2), indication=True), 0.0, held)
    (data, _), = [(d, a) for d, a in sib.datagrams_to_send(0.0) if a == addr]
    assert int.from_bytes(data[4:6], "little") == 2 and sib.delivery(kp, 5) is held


# -- a new kind of subscriber, with nothing of sib/ changed ------------------------------------


class QueueSubscriber:
    """What a WebSocket subscription of the SEPA gate will be, reduced to a queue: a `Channel`
    that owns its `Delivery`, numbers its notifications (SEPA's `sequence`) and is durable."""

    transport = "ws"
    durable = True

    def __init__(self, kp: KPIdentity, tid: int) -> None:
        self.kp, self.tid = kp, tid
        self.queue: asyncio.Queue = asyncio.Queue()
        self.delivery = Delivery(kp, tid, ("browser", 1), durable=True)

    def respond(self, response: Response) -> None:
        if response.status == Status.OK:
            self.delivery.responded(response)
        self.queue.put_nowait(("res", response))

    def indicate(self, response: Response) -> None:
        if self.delivery.redundant(response):
            return
        response = response._replace(seq=self.delivery.next_seq(response))
        self.delivery.indicated(response)
        self.queue.put_nowait(("ind", response))

    def ack(self) -> None:
        self.delivery.acknowledged()

    def end(self) -> None:
        self.queue.put_nowait(("end", None))

    def export(self) -> DeliveryState:
        return self.delivery.export()

    def restore(self, state: DeliveryState) -> None:
        self.delivery = Delivery.restore(self.kp, self.tid, state)


def _drain(q: asyncio.Queue) -> list:
    out = []
    while not q.empty():
        out.append(q.get_nowait())
    return out


def test_a_new_kind_of_subscriber_is_served_journaled_and_restored(tmp_path):
    kp = KPIdentity(None, ("browser", 1))

    async def first():
        journal = Journal(str(tmp_path / "j.sqlite3"))
        sib = Sib(QuadStore(str(tmp_path / "db")), journal=journal)
        sub = QueueSubscriber(kp, 5)
        sib.submit(SUB, sub)
        writer = Client(sib, "writer")
        await writer.call(insert(1, 1))
        await writer.call(insert(2, 2))
        got = _drain(sub.queue)
        assert [k for k, _ in got] == ["res", "ind", "ind"]
        assert [r.seq for k, r in got if k == "ind"] == [1, 2]
        assert got[-1][1].result.rows == rows(1, 2).rows
        sub.ack()
        await sib.close()  # a clean stop journals the ACK
        journal.close()

    async def second():
        journal = Journal(str(tmp_path / "j.sqlite3"))
        (saved,) = list(journal)
        assert (saved.transport, saved.seq, saved.delivered) == ("ws", 2, True)
        sib = Sib(QuadStore(str(tmp_path / "db")), journal=journal)
        sub = QueueSubscriber(kp, 5)
        sib.core.restore(saved, sub)
        assert _drain(sub.queue) == []  # it ACKed this very result: nothing again
        await Client(sib, "writer").call(insert(3, 3))
        ((kind, ind),) = _drain(sub.queue)
        assert kind == "ind" and ind.seq == 3 and len(ind.result.rows) == 3
        await sib.close()
        journal.close()

    asyncio.run(first())
    asyncio.run(second())


# -- the layering rules read from the code ---------------------------------------------------------


def test_sib_has_no_transport_branches_and_no_callbacks_wired_after_construction():
    names = re.compile(r"""["'](udp|tcp|coap)["']|transport\s*==|\.transport\s+in\b""")
    for path in sorted((ROOT / "sib").glob("*.py")):
        if path.name in ("cli.py", "config.py", "testing.py"):  # entry point, settings, doubles
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            assert not names.search(line.split("#")[0]), f"{path.name}:{number}: {line.strip()}"
    cli = (ROOT / "sib" / "cli.py").read_text()
    assert "core.endpoint" not in cli and "awaiting_ack" not in cli
    server = (ROOT / "transports" / "server.py").read_text()
    assert 'getattr(adapter, "session"' not in server and "session.bind" not in server
