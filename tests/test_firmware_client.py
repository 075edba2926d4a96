"""The firmware's KSP client (device_firmware/kspfw/client.py + net.py) on CPython, over real
loopback sockets, against the reference codec on the SIB side; the clock is virtual (the
client takes `now`), so the retransmission schedule is checked exactly without sleeping.
The same logic is checked inside MicroPython by tests/test_firmware_mpy.py."""
from __future__ import annotations

import socket
import struct

import pytest

from firmware import harness

harness.import_path()

from firmware.sib_stub import UdpSib  # noqa: E402
from kspfw import codec, net  # noqa: E402
from kspfw.client import Client, is_newer  # noqa: E402

from ksp import (  # noqa: E402
    IRI, Ack, AskResult, Literal, Request, Response, SelectResult, Status, Transport, Tx, Var,
    decode_kp_message, encode,
)
from ksp.seqnum import is_newer as reference_is_newer  # noqa: E402

EX = "http://example.org/gh#"


class Events(list):
    def __call__(self, kind, tid, response):
        self.append((kind, tid, response))


@pytest.fixture
def sib():
    s = UdpSib()
    yield s
    s.close()


@pytest.fixture
def link(sib):
    lk = net.Link("127.0.0.1", sib.port, bufsize=2048)
    yield lk
    lk.close()


def half_jitter(bits):
    return 1 << (bits - 1)  # rand(8) = 128: first timeout 2000 + 2000*128/512 = 2500 ms


def test_con_request_retransmits_with_backoff_until_the_res(sib, link):
    events = Events()
    client = Client(link, events, rand=half_jitter)
    tid = client.send(0, 0x02, graphs=([(EX + "s1", EX + "temp", codec.Lit("21.5", codec.XSD_FLOAT))],),
                      prefixes=(EX,))
    req, first = sib.recv()
    assert req == Request(Tx.INSERT_DATA, tid, True, insert=(
        (IRI(EX + "s1"), IRI(EX + "temp"), Literal("21.5", codec.XSD_FLOAT)),),
        options=req.options)
    assert req.options.prefixes == (EX,)
    schedule = []
    for now in range(0, 80000, 100):
        client.poll(now)
        got = sib.recv_nowait()
        if got is not None:
            schedule.append(now)
            if len(schedule) == 2:
                break
    assert schedule == [2500, 7500]  # T, then 2T later
    sib.send(Response(tid))
    assert link.wait(10000)
    client.feed(link.recv(), 7600)
    assert [(k, t, r.status) for k, t, r in events] == [("res", tid, 0)]
    for now in range(7600, 200000, 1000):
        client.poll(now)
    assert sib.recv_nowait() is None and not client.pending


def test_con_request_gives_up_after_max_retransmit(sib, link):
    events = Events()
    client = Client(link, events, rand=lambda bits: 0)
    tid = client.send(0, 0x11)  # RESET
    sends, gave_up = [], None
    for now in range(0, 100000, 250):
        client.poll(now)
        while sib.recv_nowait() is not None:
            sends.append(now)
        if events and gave_up is None:
            gave_up = now
    assert sends == [0, 2000, 6000, 14000, 30000]  # then waits 2 s, 4 s, 8 s, 16 s, 32 s
    assert events == [("timeout", tid, None)] and gave_up == 62000


def test_non_request_is_sent_once(sib, link):
    client = Client(link, Events())
    client.send(0, 0x02, con=False, graphs=([],))
    req, _ = sib.recv()
    assert req.confirmable is False
    for now in range(0, 300000, 5000):
        client.poll(now)
    assert sib.recv_nowait() is None and not client.pending


def _subscribe(sib, link, events):
    client = Client(link, events)
    tid = client.send(0, 0x0D, vc=1, graphs=([(EX + "fan", EX + "on", 0)],))
    req, _ = sib.recv()
    assert req.tx == Tx.SELECT_PERSISTENT and req.where == ((IRI(EX + "fan"), IRI(EX + "on"), Var(0)),)
    sib.send(encode(Response(tid, Status.OK, SelectResult(1, ((Literal("false", "http://www.w3.org/2001/XMLSchema#boolean"),),), 1, ()))))
    assert link.wait(10000)
    client.feed(link.recv())
    return client, tid


def _ind(tid, seq, value, status=Status.OK):
    result = None if status else SelectResult(1, ((Literal(value, "http://www.w3.org/2001/XMLSchema#boolean"),),), 1, ())
    return encode(Response(tid, status, result, indication=True, seq=seq))


def test_inds_are_acked_and_stale_ones_dropped_across_the_wrap(sib, link):
    events = Events()
    client, tid = _subscribe(sib, link, events)
    delivered = []
    for seq, value in ((65535, "true"), (0, "false"), (65535, "true"), (0, "false"),
                       (32769, "true"), (1, "true")):
        sib.send(_ind(tid, seq, value))
        assert link.wait(10000)
        client.feed(link.recv())
        ack, _ = sib.recv()
        assert ack == Ack(tid, seq)  # every IND is ACKed, stale and duplicate ones included
    delivered = [(r.seq, r.result.rows[0][0].value) for k, t, r in events if k == "ind"]
    assert delivered == [(65535, "true"), (0, "false"), (1, "true")]
    sib.send(_ind(tid, 2, None, Status.TERMINATED))
    assert link.wait(10000)
    client.feed(link.recv())
    assert sib.recv()[0] == Ack(tid, 2)
    assert events[-1][0] == "end" and tid not in client.persistent


def test_ind_of_unknown_transaction_is_not_acked(sib, link):
    client = Client(link, Events())
    client.send(0, 0x02, con=False, graphs=([],))
    sib.recv()
    sib.send(_ind(999, 1, "true"))
    assert link.wait(10000)
    client.feed(link.recv())
    assert sib.recv_nowait() is None


def test_undecodable_res_completes_the_request_with_its_status(sib, link):
    events = Events()
    client = Client(link, events)
    tid = client.send(0, 0x08, graphs=([(EX + "a", EX + "b", 0)],))
    sib.recv()
    sib.send(struct.pack("<BBHB", 1, 0, tid, 7))  # ASK byte 7
    assert link.wait(10000)
    client.feed(link.recv())
    assert events[0][0] == "res" and events[0][2].status == Status.INVALID_DATA_FORMAT


def test_terminate_and_reset_end_persistent_transactions(sib, link):
    events = Events()
    client, tid = _subscribe(sib, link, events)
    client.send(0, 0x10, tid=tid)
    req, _ = sib.recv()
    assert req.tx == Tx.TERMINATE and req.tid == tid
    sib.send(Response(tid))
    assert link.wait(10000)
    client.feed(link.recv())
    assert tid not in client.persistent and ("end", tid, None) in events


def test_state_survives_a_restore(sib, link):
    events = Events()
    client, tid = _subscribe(sib, link, events)
    sib.send(_ind(tid, 5, "true"))
    assert link.wait(10000)
    client.feed(link.recv())
    sib.recv()
    state = client.state()
    woken = Client(link, events)
    woken.restore(state)
    sib.send(_ind(tid, 5, "true"))  # the retransmission arriving after the wake-up
    assert link.wait(10000)
    woken.feed(link.recv())
    assert sib.recv()[0] == Ack(tid, 5)
    assert [k for k, *_ in events].count("ind") == 1
    assert woken.next_tid() != tid


def test_over_tcp_tids_come_back_at_any_rate():
    """The SIB keeps no request past its RES over TCP (wire format R12 is connectionless
    only): 65 537 requests within a lifetime all go (tests/test_firmware_mpy.py: UDP)."""
    sent = []
    client = Client(type("Link", (), {"send": staticmethod(sent.append)})(), Events(), tcp=True,
                    rand=lambda bits: (1 << bits) - 1, lifetime=100000)
    for now in range(65537):
        tid = client.send(now, 0x11)  # RESET
        client.feed(struct.pack("<BBHI", 1, 0, tid, 8), now)
    assert len(sent) == 65537 and tid == 0 and not client.pending


@pytest.mark.parametrize("last", [None, 0, 1, 5, 100, 32767, 32768, 65534, 65535])
def test_is_newer_matches_the_reference(last):
    for seq in range(0, 65536, 7):
        assert is_newer(seq, last) == reference_is_newer(seq, last)


@pytest.mark.slow
def test_tcp_link_reassembles_frames_and_drops_oversized_ones():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    link = net.Link("127.0.0.1", server.getsockname()[1], tcp=True, bufsize=64)
    conn, _ = server.accept()
    conn.settimeout(10)
    try:
        events = Events()
        client = Client(link, events, tcp=True)
        tid = client.send(0, 0x08, graphs=([(EX + "a", EX + "b", 0)],))
        head = conn.recv(8)
        length = struct.unpack("<I", head[4:])[0]
        body = b""
        while len(body) < length - 8:
            body += conn.recv(length - 8 - len(body))
        assert decode_kp_message(head + body, Transport.TCP).tx == Tx.ASK
        big = encode(Response(tid, Status.OK, SelectResult(1, ((Literal("x" * 200),),), 1, ())),
                     Transport.TCP)  # a frame larger than the 64-byte buffer: skipped
        res = encode(Response(tid, Status.OK, AskResult(True)), Transport.TCP)
        conn.sendall(big + res[:3])
        got = []
        while link.wait(2000):
            m = link.recv()
            if m is not None:
                got.append(bytes(m))
            if not got and link.skip == 0 and link.have == 3:
                conn.sendall(res[3:])
        assert got == [res]
        client.feed(got[0])
        assert events[0][0] == "res" and events[0][2].result is True
        client.send(0, 0x11)
        assert not client.pending or all(e[1] is None for e in client.pending.values())
        conn.close()
        assert link.wait(5000)
        with pytest.raises(OSError):
            link.recv()
    finally:
        link.close()
        server.close()


def test_a_silent_subscription_gets_keepalives_and_ends_when_the_sib_has_it_no_more(sib, link):
    """Wire format §2.4 on the board: after `keepalive` ms without an IND a bare ACK; RES OK
    keeps the subscription, RES 0x0b ends it ("end": the agents subscribe again)."""
    events = Events()
    client, tid = _subscribe(sib, link, events)
    client.poll(client.keepalive - 1)
    assert sib.recv_nowait() is None  # not silent long enough yet
    client.poll(client.keepalive)
    assert sib.recv()[0] == Ack(tid)  # the keepalive: a bare ACK
    sib.send(Response(tid))
    assert link.wait(10000)
    client.feed(link.recv(), client.keepalive + 10)
    assert tid in client.persistent and [k for k, *_ in events] == ["res"]
    now = 2 * client.keepalive + 10
    client.poll(now)
    assert sib.recv()[0] == Ack(tid)
    sib.send(Response(tid, Status.UNKNOWN_TRANSACTION))
    assert link.wait(10000)
    client.feed(link.recv(), now)
    assert tid not in client.persistent and events[-1] == ("end", tid, None)


def test_a_subscription_whose_keepalives_go_unanswered_ends(sib, link):
    events = Events()
    client, tid = _subscribe(sib, link, events)
    sent = []
    for now in range(0, 60000, 250):  # the SIB gone: nothing answers
        client.poll(now)
        while (got := sib.recv_nowait()) is not None:
            sent.append((now, got))
        if events[-1][0] == "end":
            break
    assert [m for _, m in sent] == [Ack(tid)] * 3  # once, then twice again with the back-off
    assert events[-1] == ("end", tid, None) and tid not in client.persistent
    assert now <= client.keepalive + client.ack_timeout * 7  # within the bound
