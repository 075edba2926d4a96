"""The bridge when the broker fails: a slow broker answer for one device does
not hold up another; a dropped WebSocket is made again with back-off and what changed while it
was away reaches the devices as an IND; a broker killed with SIGKILL mid-stream and started
again on its data loses nothing that a device had acknowledged; a broker down when the bridge
starts gives clear statuses and is used once up. And when a device fails: one that stops
ACKing is dropped and its broker subscription freed. The broker is a `ksp-sib` with its gate
in another process, the devices real UDP links."""
from __future__ import annotations

import asyncio
import signal

import aiohttp
import pytest
from aiohttp import web

from bridge.broker import Broker
from bridge.service import Bridge
from ksp import Literal, Request, Status, Triple, Tx, Var
from ksp.session import KPIdentity
from sib.testing import RecordingChannel, SibProcess, ex, free_port
from transports import Server
from transports.udp import open_udp_link

from test_bridge_broker import serve  # noqa: I001 - tests/ is on the path
from test_sib_sockets import _Sink
from transport_helpers import until

# slow: ksp-sib processes killed and restarted under the bridge
pytestmark = pytest.mark.slow

GATE_ONLY = ("--udp-port", "-1", "--tcp-port", "-1", "--coap-port", "-1")
WATCH = Request(Tx.SELECT_PERSISTENT, projection=1, where=(Triple(ex("s"), ex("p"), Var(0)),))


def _insert(value: int) -> Request:
    return Request(Tx.INSERT_DATA, insert=(Triple(ex("s"), ex("p"), Literal.of(value)),))


def _values(rows) -> set[int]:
    return {int(row[0].lexical) for row in rows}


def _against_a_gate(main, seconds: float):
    """`main(http_port, ws_port)` run against a `ksp-sib` (in memory) whose gate is the
    broker."""
    with SibProcess("--memory", *GATE_ONLY, "--sepa-http-port", "0",
                    "--sepa-ws-port", "0") as broker:
        return asyncio.run(asyncio.wait_for(main(broker.ports["http"], broker.ports["ws"]),
                                            seconds))


def test_a_slow_answer_for_one_device_does_not_hold_up_another():
    """The broker holds one device's query; another device's query is answered meanwhile. The
    held device's next request waits for its first (a device's requests stay in order)."""
    async def main():
        release = asyncio.Event()

        async def query(request):
            text = await request.text()
            if "held" in text:
                await release.wait()
            return web.json_response({"head": {}, "boolean": "held" in text})
        runner, address = await serve("POST", "/query", query)
        log: list = []
        slow, quick = KPIdentity(None, ("slow", 1)), KPIdentity(None, ("quick", 2))
        ask = Request(Tx.ASK, where=(Triple(ex("s"), ex("p"), Var(0)),))
        held = Request(Tx.ASK, where=(Triple(ex("held"), ex("p"), Var(0)),))
        async with Broker(f"http://{address}") as broker:
            bridge = await Bridge(broker).start()
            bridge.submit(held._replace(tid=1), RecordingChannel(slow, 1, log))
            bridge.submit(ask._replace(tid=2), RecordingChannel(slow, 2, log))
            bridge.submit(ask._replace(tid=3), RecordingChannel(quick, 3, log))
            await until(lambda: len(log) == 1)
            answered_while_held = [(entry[1], entry[2]) for entry in log]
            release.set()
            await bridge.close()
        await runner.cleanup()
        return answered_while_held, [(entry[1], entry[2], entry[3].result.value) for entry in log]

    answered_while_held, answers = asyncio.run(asyncio.wait_for(main(), 60))
    slow, quick = KPIdentity(None, ("slow", 1)), KPIdentity(None, ("quick", 2))
    assert answered_while_held == [(quick, 3)]
    assert answers[1:] == [(slow, 1, True), (slow, 2, False)]


class _Relay:
    """A WebSocket relay in front of the broker's `/subscribe` that can be cut: `cut()` closes
    the sockets through it and refuses new ones (HTTP 503) until `mend()` — a dropped link."""

    def __init__(self, upstream: str) -> None:
        self.upstream, self.open, self.sockets = upstream, True, set()
        self.handshakes = 0

    async def __aenter__(self) -> "_Relay":
        self.runner, address = await serve("GET", "/subscribe", self._relay)
        self.url = f"ws://{address}/subscribe"
        return self

    async def __aexit__(self, *exc) -> None:
        await self.runner.cleanup()

    async def _relay(self, request):
        self.handshakes += 1
        if not self.open:
            return web.Response(status=503)
        client = web.WebSocketResponse()
        await client.prepare(request)
        self.sockets.add(client)
        async with aiohttp.ClientSession() as http, http.ws_connect(self.upstream) as broker:
            async def down():
                async for msg in broker:
                    await client.send_str(msg.data)
            task = asyncio.create_task(down())
            async for msg in client:
                await broker.send_str(msg.data)
            task.cancel()
        self.sockets.discard(client)
        return client

    async def cut(self) -> None:
        self.open = False
        for ws in list(self.sockets):
            await ws.close()

    def mend(self) -> None:
        self.open = True


def test_a_dropped_socket_is_made_again_and_what_changed_meanwhile_is_indicated():
    """The bridge's WebSocket to the broker drops and stays refused for a while. The persistent
    query stays (no IND of an error); a new one asked meanwhile gets INTERNAL_ERROR; an update
    made at the broker meanwhile (by another of its clients) reaches the device as an IND once
    the bridge is back, with the whole new result; later updates are indicated as before."""
    async def main(http_port: int, ws_port: int):
        async with _Relay(f"ws://127.0.0.1:{ws_port}/subscribe") as relay, \
                Broker(f"http://127.0.0.1:{http_port}") as broker:
            bridge = await Bridge(broker, relay.url, backoff=0.05, max_backoff=0.2).start()
            server = await Server.start(bridge, udp=0)
            link = await open_udp_link("127.0.0.1", server.udp.port)
            try:
                sink = _Sink()
                await link.request(_insert(1))
                sub = await link.request(WATCH, sink)
                assert _values(sub.result.rows) == {1}
                await relay.cut()
                await until(lambda: not bridge.subscriber.up.is_set())
                refused = await link.request(WATCH._replace(
                    where=(Triple(ex("s"), ex("q"), Var(0)),)), _Sink())
                await broker.update(f"INSERT DATA {{ <{ex('s')}> <{ex('p')}> 2 }}")
                tries = relay.handshakes
                await until(lambda: relay.handshakes >= tries + 2)  # it keeps trying
                inds_while_away = list(sink.inds)
                relay.mend()
                await until(lambda: bridge.subscriber.up.is_set())
                await until(lambda: sink.inds)
                after_reconnect = sink.inds[-1]
                await link.request(_insert(3))
                await until(lambda: _values(sink.inds[-1].result.rows) == {1, 2, 3})
                return (refused.status, inds_while_away, after_reconnect,
                        bridge.subscriber.reconnects)
            finally:
                await link.close()
                await server.close()
                await bridge.close()

    refused, while_away, after, reconnects = _against_a_gate(main, 60)
    assert refused == Status.INTERNAL_ERROR
    assert while_away == []  # no IND of an error: the persistent query stayed
    assert after.status == Status.OK and _values(after.result.rows) == {1, 2}
    assert reconnects == 1


def test_a_broker_killed_and_restarted_mid_stream_loses_nothing_acknowledged(tmp_path):
    """A device inserts values one after another, each again until it is acknowledged, as a
    board does. The broker (a durable `ksp-sib`) is killed with SIGKILL partway and started
    again on the same ports and data. Every value the bridge acknowledged is at the broker,
    and the device's persistent query ends up with all of them, sent by the bridge after it
    made the subscription again."""
    http_port, ws_port = free_port(), free_port()
    flags = ("--data-dir", str(tmp_path / "data"), *GATE_ONLY, "--sepa-http-port",
             str(http_port), "--sepa-ws-port", str(ws_port))
    processes = [SibProcess(*flags)]

    async def main():
        async with Broker(f"http://127.0.0.1:{http_port}", timeout=5) as broker:
            bridge = await Bridge(broker, f"ws://127.0.0.1:{ws_port}/subscribe",
                                  backoff=0.05, max_backoff=0.5).start()
            server = await Server.start(bridge, udp=0)
            link = await open_udp_link("127.0.0.1", server.udp.port)
            acked, refusals = set(), 0
            try:
                sink = _Sink()
                await link.request(WATCH, sink)
                for value in range(40):
                    if value == 15:
                        processes[0].proc.send_signal(signal.SIGKILL)
                        await asyncio.to_thread(processes[0].proc.wait, 30)
                    while (await link.request(_insert(value))).status != Status.OK:
                        refusals += 1
                        if refusals == 3:  # down for a while, then back on its data
                            processes.append(await asyncio.to_thread(SibProcess, *flags))
                        await asyncio.sleep(0.05)
                    acked.add(value)
                await until(lambda: sink.inds and _values(sink.inds[-1].result.rows) == acked)
                answer = await link.request(WATCH._replace(tx=Tx.SELECT))
                return acked, _values(answer.result.rows), refusals, bridge.subscriber.reconnects
            finally:
                await link.close()
                await server.close()
                await bridge.close()

    try:
        acked, stored, refusals, reconnects = asyncio.run(asyncio.wait_for(main(), 120))
    finally:
        for p in processes:
            if p.proc.poll() is None:
                p.stop()
    assert acked == set(range(40)) and stored == acked
    assert refusals >= 3 and reconnects >= 1  # the broker was away, and the bridge came back


def test_a_broker_down_at_start_gives_clear_statuses_and_is_used_once_up():
    """The bridge starts before its broker: queries, updates and persistent queries get
    INTERNAL_ERROR (at once: the connection is refused) and change nothing; once the broker
    is up, the same device's requests go through, with no restart of the bridge."""
    http, ws = free_port("tcp"), free_port("tcp")

    async def main():
        async with Broker(f"http://127.0.0.1:{http}", timeout=5) as broker:
            bridge = await Bridge(broker, f"ws://127.0.0.1:{ws}/subscribe").start()
            server = await Server.start(bridge, udp=0)
            link = await open_udp_link("127.0.0.1", server.udp.port)
            try:
                down = [(await link.request(r, _Sink() if r.tx.persistent else None)).status
                        for r in (_insert(1), WATCH, Request(Tx.SELECT, projection=1,
                                                             where=WATCH.where))]
                assert not bridge.ops and not bridge.sizes()["subscriptions"]  # nothing half-made
                broker_process = await asyncio.to_thread(
                    SibProcess, "--memory", *GATE_ONLY, "--sepa-http-port", str(http),
                    "--sepa-ws-port", str(ws))
                with broker_process:
                    assert (await link.request(_insert(2))).status == Status.OK
                    sink = _Sink()
                    sub = await link.request(WATCH, sink)
                    await link.request(_insert(3))
                    await until(lambda: sink.inds)
                    return down, sub, sink.inds[-1]
            finally:
                await link.close()
                await server.close()
                await bridge.close()

    down, sub, ind = asyncio.run(asyncio.wait_for(main(), 90))
    assert down == [Status.INTERNAL_ERROR] * 3
    assert sub.status == Status.OK and _values(sub.result.rows) == {2}  # 1 was never written
    assert _values(ind.result.rows) == {2, 3}


def test_a_device_that_stops_acking_is_dropped_and_its_subscription_freed():
    """A device's socket goes away (a board switched off) while it has a persistent query of
    its own: its IND is sent again until the retries run out, then its operations end and the
    broker subscription that only it used is unsubscribed; another device's, on a subscription
    of its own, goes on."""
    from ksp.session import Timing

    async def main(http_port: int, ws_port: int):
        async with Broker(f"http://127.0.0.1:{http_port}") as broker:
            bridge = await Bridge(broker, f"ws://127.0.0.1:{ws_port}/subscribe").start()
            server = await Server.start(bridge, udp=0, timing=Timing(
                ack_timeout=0.05, ack_random_factor=1.0, max_retransmit=2))
            gone = await open_udp_link("127.0.0.1", server.udp.port)
            stays = await open_udp_link("127.0.0.1", server.udp.port)
            try:
                await gone.request(WATCH, _Sink())
                other = WATCH._replace(where=(Triple(Var(1), ex("p"), Var(0)),))
                sink = _Sink()
                await stays.request(other, sink)
                before = (len(bridge.ops), bridge.sizes()["subscriptions"], bridge.subscriber.live)
                await gone.close()  # no ACK will come from it again
                await stays.request(_insert(1))
                await until(lambda: len(bridge.ops) == 1)
                await until(lambda: bridge.subscriber.live == 1)
                await stays.request(_insert(2))
                await until(lambda: len(sink.inds) >= 2)
                return before, (len(bridge.ops), bridge.sizes()["subscriptions"]), \
                    server.ind_retransmissions, sink.inds[-1]
            finally:
                await stays.close()
                await server.close()
                await bridge.close()

    before, after, retransmitted, last = _against_a_gate(main, 60)
    assert before == (2, 2, 2) and after == (1, 1)
    assert retransmitted >= 2  # it was asked, twice more, before it was given up
    assert _values(last.result.rows) == {1, 2}
