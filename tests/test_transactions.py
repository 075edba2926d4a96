"""The transaction layer every transport shares (`ksp.transactions`), alone: no session, no
socket. The same rules hold whatever the layout (UDP, TCP) and whoever carries the bytes (the
sessions' message layers, CoAP's)."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings, strategies as st

from ksp import TCP, UDP, Literal, Options, Request, Response, Status, Triple, Tx, Var
from ksp.codec import decode_sib_message
from ksp.delivery import DeliveryPolicy
from ksp.model import SelectResult
from ksp.transactions import KpTransactions, SessionError, SibTransactions
from sib.testing import ex

S, P = ex("s"), ex("p")


def sub(tid: int, **options) -> Request:
    return Request(Tx.SELECT_PERSISTENT, tid, projection=1, where=(Triple(S, P, Var(0)),),
                   options=Options(**options))


def rows(n: int) -> SelectResult:
    return SelectResult(1, tuple((Literal.of(i),) for i in range(n)))


def started(layer: SibTransactions, kp, tid: int, **options):
    layer.begin(kp, sub(tid, **options), ("h", 1))
    layer.answer(kp, tid, Response(tid, Status.OK, rows(0)))
    return layer.deliveries[(kp, tid)]


@pytest.mark.parametrize("transport", [UDP, TCP])
def test_the_persistent_lifecycle_is_the_same_for_every_layout(transport):
    forgotten = []
    policy = DeliveryPolicy(numbered=transport is UDP, acked=transport is UDP)
    layer = SibTransactions(transport, policy=policy,
                            on_forget=lambda key, d, evicted: forgotten.append((key, evicted)))
    for tid in (1, 2):
        started(layer, "a", tid)
    started(layer, "b", 1)
    # a persistent request that fails never starts
    layer.begin("a", sub(3), ("h", 1))
    layer.answer("a", 3, Response(3, Status.ACCESS_DENIED))
    assert ("a", 3) not in layer.deliveries and forgotten == [(("a", 3), False)]
    # TERMINATE: OK or 0x0b ends it; another status does not
    layer.begin("a", Request(Tx.TERMINATE, 2), ("h", 1))
    layer.answer("a", 2, Response(2, Status.INTERNAL_ERROR))
    assert ("a", 2) in layer.deliveries
    layer.begin("a", Request(Tx.TERMINATE, 2), ("h", 1))
    layer.answer("a", 2, Response(2, Status.UNKNOWN_TRANSACTION))
    assert ("a", 2) not in layer.deliveries
    # RESET ends every operation of that KP, and only of that KP
    layer.begin("a", Request(Tx.RESET, 9), ("h", 1))
    layer.answer("a", 9, Response(9))
    assert list(layer.deliveries) == [("b", 1)]
    # a final IND ends the numbering's use: no IND after it
    d = layer.delivery_for("b", 1)
    layer.indication(d, Response(1, Status.TERMINATED, indication=True))
    assert d.final
    with pytest.raises(SessionError):
        layer.delivery_for("b", 1)


@pytest.mark.parametrize("transport", [UDP, TCP])
def test_non_rule_and_max_response_size(transport):
    layer = SibTransactions(transport)
    non = Request(Tx.INSERT_DATA, 4, insert=(Triple(S, P, S),), confirmable=False)
    layer.begin("a", non, ("h", 1))
    ex_, data = layer.answer("a", 4, Response(4))
    assert ex_ is not None and data is None  # an OK RES without result to a NON: not sent
    ex_, data = layer.answer("a", 4, Response(4))
    assert ex_ is None and data is not None  # unsolicited: nothing matches it any more
    layer.begin("a", non, ("h", 1))
    assert layer.answer("a", 4, Response(4, Status.LIMIT_EXCEEDED))[1] is not None  # errors go
    big = Request(Tx.SELECT, 5, projection=1, where=(Triple(S, P, Var(0)),),
                  options=Options(max_response_size=60))
    layer.begin("a", big, ("h", 1))
    _, data = layer.answer("a", 5, Response(5, Status.OK, rows(50)))
    assert len(data) <= 60
    assert decode_sib_message(data, transport, answers=Tx.SELECT).result.total == 50
    d = started(layer, "a", 6, max_response_size=80)
    ind = layer.indication(d, Response(6, Status.OK, rows(50), indication=True))
    assert len(ind) <= 80


def test_udp_payload_cap_applies_without_a_max_response_size():
    layer = SibTransactions(UDP)
    assert layer.cap(None) == 65_507 and layer.cap(100) == 100 and layer.cap(10**6) == 65_507
    assert SibTransactions(TCP).cap(None) is None


def test_subscribers_of_one_result_share_one_encoding_with_their_own_tid_and_seq():
    layer = SibTransactions(UDP, policy=DeliveryPolicy.ACKED)
    ds = [started(layer, f"kp{i}", 10 + i) for i in range(3)]
    result = rows(3)
    inds = [layer.indication(d, Response(d.tid, Status.OK, result, indication=True)) for d in ds]
    decoded = [decode_sib_message(b, UDP, answers=Tx.SELECT_PERSISTENT) for b in inds]
    assert [(r.tid, r.seq) for r in decoded] == [(10, 1), (11, 1), (12, 1)]
    assert len({r.result for r in decoded}) == 1
    assert len({d.digest for d in ds}) == 1 and ds[0].digest is not None


def test_an_evicted_delivery_is_reported_as_evicted_and_comes_back_numbering_on():
    events = []
    layer = SibTransactions(UDP, max_entries=2,
                            on_forget=lambda key, d, evicted: events.append((key, evicted)))
    first = started(layer, "a", 1)
    layer.indication(layer.delivery_for("a", 1), Response(1, Status.OK, rows(1),
                                                          indication=True))
    started(layer, "b", 1)
    started(layer, "c", 1)
    assert events == [(("a", 1), True)] and len(layer.deliveries) == 2
    d = layer.delivery_for("a", 1, first)
    assert d is first
    layer.indication(d, Response(1, Status.OK, rows(2), indication=True))
    assert d.seq == 2


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["start", "ind", "terminate", "reset", "fail"]),
                          st.integers(0, 3), st.integers(0, 3)), max_size=60))
def test_tables_stay_bounded_and_every_forgotten_delivery_is_reported_once(steps):
    """Whatever the sequence, the tables hold at most `max_entries` and `on_forget` names each
    delivery that leaves the table exactly once."""
    gone = []
    layer = SibTransactions(UDP, max_entries=4, on_forget=lambda key, d, ev: gone.append(d))
    made = []
    for action, k, tid in steps:
        kp = f"kp{k}"
        if action in ("start", "fail"):
            layer.begin(kp, sub(tid), ("h", k))
            if (kp, tid) in layer.deliveries:
                made.append(layer.deliveries[(kp, tid)])
            layer.answer(kp, tid, Response(tid, Status.OK, rows(0)) if action == "start"
                         else Response(tid, Status.LIMIT_EXCEEDED))
        elif action == "ind" and (kp, tid) in layer.deliveries:
            d = layer.delivery_for(kp, tid)
            layer.indication(d, Response(tid, Status.OK, rows(k), indication=True))
        elif action == "terminate":
            layer.begin(kp, Request(Tx.TERMINATE, tid), ("h", k))
            layer.answer(kp, tid, Response(tid))
        elif action == "reset":
            layer.begin(kp, Request(Tx.RESET, 99), ("h", k))
            layer.answer(kp, 99, Response(99))
        assert len(layer.deliveries) <= 4 and len(layer.executing) <= 4
    live = set(map(id, layer.deliveries.values()))
    assert len(gone) == len({id(d) for d in gone})
    assert {id(d) for d in made} <= live | {id(d) for d in gone}


# -- the KP side -----------------------------------------------------------------------------


def test_kp_tids_skip_pending_active_and_recently_ended_ones():
    t = KpTransactions(random.Random(1), lifetime=10.0)
    t.cursor = 100
    t.sent(100, Tx.SELECT_PERSISTENT, object())
    t.sent(101, Tx.INSERT_DATA, object())
    t.tombstone(102, 0.0, ack=True)
    assert t.next_tid() == 103
    with pytest.raises(SessionError):
        t.check(101, Tx.SELECT)  # still pending
    with pytest.raises(SessionError):
        t.check(100, Tx.SELECT)  # an active persistent TID (R12) ...
    t.pending.pop(100)
    t.check(100, Tx.TERMINATE)  # ... but its TERMINATE names it
    t.expire(10.0)
    assert 102 not in t.ended


def test_kp_lifecycle_and_the_stale_ind_rule_across_the_wrap():
    t = KpTransactions(random.Random(2), lifetime=10.0)
    t.sent(7, Tx.SELECT_PERSISTENT, object())
    t.pending.pop(7)
    t.answered(7, Tx.SELECT_PERSISTENT, Status.OK, 0.0)
    assert t.active(7) is Tx.SELECT_PERSISTENT
    assert [t.fresh(7, s) for s in (1, 2, 2, 1, 65535)] == [True, True, False, False, False]
    t.persistent[7].last_seq = 65534
    assert [t.fresh(7, s) for s in (65535, 0, 1, 65535)] == [True, True, True, False]
    t.ended_by(7, 1.0)
    assert t.active(7) is None and t.acks_late(7)
    # a persistent request that got no RES: its TID is kept out of use, late INDs not ACKed
    t.sent(8, Tx.SELECT_PERSISTENT, object())
    t.pending.pop(8)
    t.gave_up(8, Tx.SELECT_PERSISTENT, 2.0)
    assert t.active(8) is None and 8 in t.ended and not t.acks_late(8)
    # RESET ends every active one that is not waiting for its RES
    for tid in (20, 21):
        t.sent(tid, Tx.SELECT_PERSISTENT, object())
    t.pending.pop(20)
    t.answered(30, Tx.RESET, Status.OK, 3.0)
    assert t.active(20) is None and t.active(21) is Tx.SELECT_PERSISTENT


def test_every_method_the_session_state_tables_name_exists():
    """docs/sessions.md: each row names where it is written; a reader must find it there."""
    import pathlib
    import re

    from ksp import session, transactions
    from ksp.delivery import Delivery
    from ksp.secure import SealerTable
    from ksp.session.validation import AddressBudgets, EchoValues

    owners = [session.KPSession, session.UdpKPSession, session.TcpKPSession,
              session.SIBSession, session.UdpSIBSession, session.TcpSIBSession,
              session.SibMessageLayer, session.UdpMessageLayer, session.TcpMessageLayer,
              session.DuplicateCache,
              transactions.KpTransactions, transactions.SibTransactions, Delivery,
              AddressBudgets, EchoValues, SealerTable]
    by_name = {cls.__name__: cls for cls in owners}
    text = (pathlib.Path(__file__).resolve().parent.parent / "docs" / "sessions.md").read_text()
    tables = text[text.index("## State tables"):text.index("## Not done yet")]
    named = 0
    for line in tables.splitlines():
        if not line.startswith("|") or line.startswith("|---"):
            continue
        where = line.rstrip(" |").rsplit("|", 1)[-1]
        for ref in re.findall(r"`([\w.]+)`", where):
            if ref in ("DuplicateCache",):  # a class of its own
                assert hasattr(session, ref)
                continue
            cls, _, method = ref.rpartition(".")
            found = ([by_name[cls]] if cls else owners)
            assert any(hasattr(c, method) for c in found), f"{ref} in: {line}"
            named += 1
    assert named > 40
