"""The journal of persistent operations (sib/journal.py), in-process: what a restarted SIB
restores — queries indicate only a result the KP has not seen, numbered on from the saved
sequence number; rules do not fire again for a state they already acted on; ended operations
and TCP ones are not kept."""
from __future__ import annotations

import asyncio

import pytest

from ksp import Credentials, Literal, Options, Request, Status, Triple, Tx, Var
from ksp.session import KPIdentity
from sib import QuadStore, Sib
from sib.journal import Journal
from sib.testing import Client, RecordingChannel, ex

S, P, Q = ex("s"), ex("p"), ex("q")
SUB = Request(Tx.SELECT_PERSISTENT, 5, projection=1, where=(Triple(S, P, Var(0)),),
              options=Options(credentials=Credentials(b"k" * 16, "secret")))
RULE = Request(Tx.INSERT_PERSISTENT, 6, insert=(Triple(S, Q, Var(0)),),
               where=(Triple(S, P, Var(0)),))


def insert(tid: int, value: int) -> Request:
    return Request(Tx.INSERT_DATA, tid, insert=(Triple(S, P, Literal.of(value)),))


def restart(tmp_path, before, after, acked: bool = True, **options):
    """Run `before(sib, kp)` on a SIB with a journal, close it, reopen store and journal,
    restore every saved operation onto recording channels, run `after(sib, kp, saved, log)`.
    `acked`: the clean stop found every IND ACKed (`ksp-sib` asks its UDP session); False is
    what a crash leaves. `options` go to the restarted `Sib` (its limits, say)."""
    async def first():
        journal = Journal(str(tmp_path / "j.sqlite3"))
        sib = Sib(QuadStore(str(tmp_path / "db")), journal=journal)
        kp = Client(sib)
        await before(sib, kp)
        await sib.close()
        if acked:
            journal.settle(lambda kp, tid, transport: False)
        journal.close()
        return kp.kp  # not the client: it holds the SIB, whose store must close

    async def second(identity):
        journal = Journal(str(tmp_path / "j.sqlite3"))
        sib = Sib(QuadStore(str(tmp_path / "db")), journal=journal, **options)
        saved = list(journal)
        log: list = []
        for s in saved:
            sib.core.restore(s, RecordingChannel(s.kp, s.tid, log, s.transport))
        kp = Client(sib)
        kp.kp = identity
        await after(sib, kp, saved, log)
        await sib.close()
        journal.close()

    kp = asyncio.run(first())
    asyncio.run(second(kp))


def test_query_resumes_with_the_next_sequence_number_and_no_repeat(tmp_path):
    async def before(sib, kp):
        assert (await kp.call(SUB)).status == Status.OK
        await kp.call(insert(1, 1))
        await kp.call(insert(2, 2))
        assert [i.result.rows for i in kp.inds(5)] == [((Literal.of(1),),),
                                                       ((Literal.of(1),), (Literal.of(2),))]
        assert [i.seq for i in kp.inds(5)] == [1, 2]  # the SIB numbers UDP INDs

    async def after(sib, kp, saved, log):
        (s,) = saved
        assert s.tid == 5 and s.seq == 2 and s.transport == "udp"
        assert s.request.options.credentials is None  # no password on disk
        assert s.kp == kp.kp and s.endpoint == kp.kp.addr
        assert log == []  # the KP has seen the current result: nothing to send
        await kp.call(insert(3, 3))
        (ind,) = [r for kind, _, _, r in log if kind == "ind"]
        assert ind.seq == 3 and len(ind.result.rows) == 3  # numbered on, explicitly

    restart(tmp_path, before, after)


def test_query_whose_last_ind_was_not_acked_indicates_it_again(tmp_path):
    """A sleeping KP missed the last IND (or the SIB crashed before knowing): after the restart
    the same state goes out again, numbered on, so the KP is never left with a stale one."""
    async def before(sib, kp):
        await kp.call(SUB)
        await kp.call(insert(1, 1))

    async def after(sib, kp, saved, log):
        (s,) = saved
        assert not s.delivered and s.seq == 1
        (ind,) = [r for kind, _, _, r in log if kind == "ind"]
        assert ind.seq == 2 and ind.result.rows == ((Literal.of(1),),)

    restart(tmp_path, before, after, acked=False)


def test_settle_marks_delivered_only_what_is_not_awaiting_an_ack(tmp_path):
    path = str(tmp_path / "j.sqlite3")
    journal = Journal(path)
    kp = KPIdentity(None, ("127.0.0.1", 4000))
    for tid in (1, 2):
        journal.add(kp, tid, "udp", SUB._replace(tid=tid))
        journal.sent(kp, tid, 3, b"digest", kp.addr, delivered=False)
    journal.settle(lambda who, tid, transport: who == kp and tid == 1 and transport == "udp")
    journal.close()
    reopened = Journal(path)
    assert {s.tid: s.delivered for s in reopened} == {1: False, 2: True}
    reopened.close()


def test_query_whose_result_changed_while_down_indicates_at_once(tmp_path):
    async def before(sib, kp):
        await kp.call(SUB)

    async def after(sib, kp, saved, log):
        (s,) = saved
        assert s.digest is not None and s.endpoint == kp.kp.addr  # journaled with the RES
        (ind,) = [r for kind, _, _, r in log if kind == "ind"]
        assert ind.result.rows == ((Literal.of(9),),)

    async def before_and_change(sib, kp):
        await before(sib, kp)
        # a change the KP never hears of: written behind the SIB's back
        sib.store.apply(__import__("sib").Delta(((S, P, Literal.of(9), ex("g")),), ()))

    restart(tmp_path, before_and_change, after)


def test_rule_does_not_fire_again_and_ended_ops_are_forgotten(tmp_path):
    async def before(sib, kp):
        await kp.call(insert(1, 1))
        assert (await kp.call(RULE)).status == Status.OK
        assert len(sib.store.match(S, Q)) == 1
        await kp.call(SUB._replace(tid=7))
        await kp.call(Request(Tx.TERMINATE, 7))
        tcp = RecordingChannel(kp.kp, 8, kp.log, "tcp")
        sib.submit(SUB._replace(tid=8), tcp)
        await sib.drain()
        assert sib.core.persistent_count == 2

    async def after(sib, kp, saved, log):
        assert [s.tid for s in saved] == [6]  # TERMINATEd and TCP operations are not kept
        sib.store.apply(__import__("sib").Delta((), tuple(sib.store.match(S, Q))))
        # the rule took the current solutions as seen: an unrelated change does not refire it
        await kp.call(Request(Tx.INSERT_DATA, 2, insert=(Triple(ex("x"), P, S),)))
        assert sib.store.match(S, Q) == []
        await kp.call(insert(3, 2))  # a new solution: it fires
        assert len(sib.store.match(S, Q)) == 2

    restart(tmp_path, before, after)


def test_operations_past_a_limit_lowered_meanwhile_end_with_limit_exceeded(tmp_path):
    """Restarted with `max_persistent=2`, the first two saved operations come back; the third
    ends with a LIMIT_EXCEEDED IND (its KP is told, not left waiting) and leaves the journal."""
    async def before(sib, kp):
        await kp.call(insert(1, 1))
        for tid in (5, 7):
            assert (await kp.call(SUB._replace(tid=tid))).status == Status.OK
        assert (await kp.call(RULE)).status == Status.OK

    async def after(sib, kp, saved, log):
        assert [s.tid for s in saved] == [5, 7, 6]
        assert sib.core.persistent_count == 2 and sib.core.metrics.limited == 1
        assert [(tid, r.status) for kind, _, tid, r in log if r.status != Status.OK] == \
            [(6, Status.LIMIT_EXCEEDED)]
        assert [s.tid for s in sib.core.journal] == [5, 7]
        assert len(sib.store.match(S, Q)) == 1  # what the rule wrote before the restart
        await kp.call(insert(2, 2))  # a new solution, but the rule is gone: nothing fires
        assert len(sib.store.match(S, Q)) == 1

    restart(tmp_path, before, after, max_persistent=2)


def test_a_kp_that_spoke_sealed_is_restored_sealed(tmp_path):
    """The endpoint of a sealed KP (wire format 13) is a `SealedAddr`: kept as such, its INDs
    after a restart leave sealed (it ignores every unsealed datagram); a plain one stays plain."""
    from ksp.secure import SealedAddr

    journal = Journal(str(tmp_path / "j.sqlite3"))
    sealed, plain = KPIdentity(kp_id=b"s" * 16), KPIdentity(kp_id=b"p" * 16)
    for tid, kp, endpoint in ((1, sealed, SealedAddr(b"s" * 16, ("127.0.0.1", 4000))),
                              (2, plain, ("::1", 4001, 0, 0))):
        journal.add(kp, tid, "udp", SUB._replace(tid=tid))
        journal.sent(kp, tid, 3, b"d", endpoint, False)
    journal.close()
    journal = Journal(str(tmp_path / "j.sqlite3"))
    assert {s.tid: s.endpoint for s in journal} == {
        1: SealedAddr(b"s" * 16, ("127.0.0.1", 4000)), 2: ("::1", 4001, 0, 0)}
    journal.close()


def test_sealed_windows_and_counters_outlive_a_restart(tmp_path):
    """wire format 13.5 with a data directory: after a restart (a new SealerTable on the same
    journal) a recorded message is refused, so is any older counter the SIB never had (its
    window comes back closed: the duplicate cache that would catch a late copy is gone), the
    KP's next counter is taken, and the SIB's own counters go on above every one it used."""
    from ksp.secure import OUT_BLOCK, SealError, Sealer, SealerTable, SealedAddr, open_sealed
    from ksp.secure import derive_keys

    key, kp_id = bytes(range(32)), b"k" * 16
    kp = Sealer(key, kp_id, sib=False, counter=100)
    msgs = [kp.seal(b"\x01\x00\x00\x00" + bytes([i])) for i in range(5)]
    journal = Journal(str(tmp_path / "j.sqlite3"))
    clock = [1_800_000_000.0]
    table = SealerTable(lambda _: key, lambda: clock[0], state=journal)
    for m in (msgs[0], msgs[1], msgs[3]):  # msgs[2] never arrives
        table.open(m, ("h", 1))
    out = [open_sealed(derive_keys(key).sib_to_kp, table.seal(b"x", SealedAddr(kp_id, ("h", 1))))
           .counter for _ in range(3)]
    journal.close()

    clock[0] -= 3600  # a clock set back: the saved block still wins
    journal = Journal(str(tmp_path / "j.sqlite3"))
    table = SealerTable(lambda _: key, lambda: clock[0], state=journal)
    for m in msgs[:4]:
        with pytest.raises(SealError):
            table.open(m, ("attacker", 2))
    assert table.open(msgs[4], ("h", 1))[0] == msgs[4][21:-8]
    again = open_sealed(derive_keys(key).sib_to_kp, table.seal(b"y", SealedAddr(kp_id, ("h", 1))))
    assert again.counter >= out[0] + OUT_BLOCK > out[-1]
    # another key for the same KP ID (a reloaded configuration) starts afresh
    other = SealerTable(lambda _: bytes(32), lambda: clock[0], state=journal)
    fresh = Sealer(bytes(32), kp_id, sib=False, counter=0)
    assert other.open(fresh.seal(b"z"), ("h", 1))[0] == b"z"
    journal.close()
