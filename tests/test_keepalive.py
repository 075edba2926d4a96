"""A KP that only listens learns within `Timing.liveness_bound` that its persistent operation
ended or that its SIB is gone (wire format §2.4, keepalives): sans-I/O on a virtual clock, then
over real sockets through an outage during which the SIB ends the subscription, and through
`ksp sub` against a real `ksp-sib` that is killed."""
from __future__ import annotations

import asyncio
import random
import signal
import sys

import pytest

from ksp import Credentials, Response, SelectResult, Status, Timing
from ksp.session import (
    KPSession, PersistentEnded, PersistentLost, RequestReceived, ResponseReceived,
)

from test_session import Net, SIBSession, subscribe
from tools.relay import UdpRelay


def subscribed(keepalive: float = 5.0, credentials: Credentials | None = None
               ) -> tuple[Net, int]:
    timing = Timing(keepalive=keepalive)
    net = Net(KPSession(timing=timing, rng=random.Random(1), credentials=credentials),
              SIBSession(timing=timing, rng=random.Random(2)))
    tid = net.client.send(subscribe(net.client.next_tid()), net.now)
    net.run(until=lambda: bool(net.of_type(ResponseReceived)))
    assert net.of_type(ResponseReceived)[0].response.status == Status.OK
    return net, tid


def test_the_default_keepalive_tells_a_listening_kp_within_a_minute():
    assert Timing().liveness_bound <= 60.0
    assert Timing(keepalive=0).liveness_bound is None


@pytest.mark.parametrize("credentials", [None, Credentials(b"greenhouse-actua", "")],
                         ids=["anonymous", "kp-id"])
def test_a_silent_subscription_that_runs_is_kept_with_one_keepalive_per_period(credentials):
    # A KP ID counts from a random epoch: its RES carries the epoch (status bit 6), and the
    # subscription it started is the SIB's all the same.
    net, tid = subscribed(credentials=credentials)
    sent = len(net.up)
    net.run_for(5.0 * 4 + 1)
    keepalives = net.up[sent:]
    assert keepalives and all(d == bytes([1, 0]) + tid.to_bytes(2, "little")
                              for d in keepalives)  # bare ACKs, 4 bytes
    assert 3 <= len(keepalives) <= 5
    assert tid in net.client.persistent
    assert net.of_type(PersistentEnded) == [] and net.of_type(PersistentLost) == []


def test_a_subscription_the_sib_no_longer_has_ends_at_the_next_keepalive():
    net, tid = subscribed()
    [request] = net.of_type(RequestReceived, "server")
    net.server.end_persistent(request.kp, tid)  # gone without a final IND
    net.run_for(5.0 + 10.0)
    assert [(e.tid, e.status) for e in net.of_type(PersistentEnded)] == [
        (tid, Status.UNKNOWN_TRANSACTION)]
    assert tid not in net.client.persistent


def test_a_sib_that_answers_nothing_is_known_gone_within_the_bound():
    net, tid = subscribed()
    start = net.now
    net.fate = lambda way, data: 0  # the SIB is gone: nothing arrives either way
    net.run(until=lambda: bool(net.of_type(PersistentLost)))
    [lost] = net.of_type(PersistentLost)
    assert lost.tid == tid and tid not in net.client.persistent
    assert net.now - start <= net.client.timing.liveness_bound


def test_indications_postpone_the_keepalive():
    net, tid = subscribed()
    [request] = net.of_type(RequestReceived, "server")
    sent = len(net.up)
    for _ in range(6):  # an IND every 3 s: never 5 s of silence
        net.advance(3.0)
        net.server.indicate(request.kp, tid, Response(tid, result=SelectResult(1, ())), net.now)
    net.advance(1.0)
    assert len(net.up) - sent == 6
    assert all(len(d) == 6 for d in net.up[sent:])  # ACKs of INDs only, no bare keepalive


@pytest.mark.slow
def test_a_listening_kp_learns_of_the_end_the_sib_decided_during_an_outage():
    """Over real sockets: the link goes down, the SIB's INDs go unacknowledged until it gives
    up on the KP and ends its subscription (TERMINATED, kept for when the KP is heard from);
    the link comes back; the KP, which only listens, learns of the end through its keepalive
    and its iteration ends — where it used to wait for ever."""
    from sib import Sib
    from transports import Server, connect

    # The SIB gives up on an IND after 2.3 s; the KP's keepalive comes after 6 s of silence,
    # once the link is back.
    timing = Timing(ack_timeout=0.05, max_latency=0.05, keepalive=6.0)
    query = "SELECT ?o WHERE { <http://example.org/s> <http://example.org/p> ?o }"

    async def scenario() -> tuple[list, object]:
        server = await Server.start(Sib(), udp=0, timing=timing)
        relay = await UdpRelay.start(("127.0.0.1", server.udp.port))
        states = []
        try:
            async with await connect(f"udp://127.0.0.1:{relay.port}", timing=timing) as kp, \
                    await connect(f"udp://127.0.0.1:{server.udp.port}", timing=timing) as w:
                async with kp.subscribe(query) as sub:
                    states.append(await anext(sub))
                    relay.down = True
                    for k in range(5):  # changes the KP cannot receive: the SIB gives up
                        await w.update(f"INSERT DATA {{ <http://example.org/s> "
                                       f"<http://example.org/p> {k} }}")
                        await asyncio.sleep(0.5)
                    await asyncio.sleep(2.5)
                    relay.down = False
                    async for state in sub:  # ends: TERMINATED, told by the keepalive
                        states.append(state)
                    return states, sub.status
        finally:
            relay.close()
            await server.close()

    states, status = asyncio.run(asyncio.wait_for(scenario(), 120))
    assert status == Status.TERMINATED


@pytest.mark.slow
def test_ksp_sub_says_the_sib_is_gone_and_exits_1():
    """`ksp sub --keepalive 1` against a real `ksp-sib`, which is then killed: `ksp sub` says
    the SIB is gone and exits 1 within the bound, where it used to wait for ever."""
    import subprocess

    from sib.testing import SibProcess

    with SibProcess("--memory", "--udp-port", "0", "--tcp-port", "-1",
                    "--coap-port", "-1") as sib:
        sub = subprocess.Popen(
            [sys.executable, "-m", "tools.cli", "sub", "--sib",
             f"udp://127.0.0.1:{sib.ports['udp']}", "--keepalive", "1",
             "SELECT ?o WHERE { <http://example.org/s> <http://example.org/p> ?o }"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert sub.stdout.readline()  # the first state: subscribed
            sib.proc.send_signal(signal.SIGKILL)
            sib.proc.wait(30)
            out, err = sub.communicate(timeout=120)
        finally:
            sub.kill()
    assert sub.returncode == 1, err
    assert "keepalives" in err and "Traceback" not in err, err
