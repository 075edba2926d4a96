"""The bridge between KSP devices and a SEPA broker — a `ksp-sib` with its gate, in
another process — against the SIB itself: the requests of tests/test_sib_sockets.py's script
that the bridge forwards (every non-persistent transaction type, every option) give the same
RESs over real UDP as the same script in a SIB."""
from __future__ import annotations

import asyncio

import pytest

from bridge.broker import Broker
from bridge.service import Bridge
from ksp import Literal, Options, Request, Status, Triple, Tx, Var
from ksp.codes import Op
from ksp.model import Bind
from sib.testing import SibProcess, ex
from transports import Server
from transports.udp import open_udp_link

from test_bridge_broker import serve  # noqa: I001 - tests/ is on the path
from test_sib_sockets import SCRIPT, _Sink, in_process, send_script

# slow: the bridge in front of a ksp-sib process
pytestmark = pytest.mark.slow

FORWARDED = [(name, req) for name, req in SCRIPT
             if isinstance(req, Request) and not req.tx.persistent
             and req.tx not in (Tx.TERMINATE, Tx.RESET)] + [
    # a template variable bound only by a BIND, above every pattern variable
    ("construct_bind", Request(Tx.CONSTRUCT, 0, template=(Triple(Var(0), ex("twice"), Var(2)),),
                               where=(Triple(Var(0), ex("p"), Var(1)),),
                               options=Options(binds=(Bind(2, (Var(1), Literal.of(2),
                                                               Op.MUL)),)))),
]


async def bridged_through(script, http_port: int, ws_port: int | None = None,
                          expected: dict | None = None) -> tuple[dict, dict, int]:
    """`script` over UDP through a bridge in front of the broker's ports (no WebSocket port:
    no persistent queries): its RESs, last INDs (`send_script`) and broker subscriptions
    left at the end."""
    subscribe = None if ws_port is None else f"ws://127.0.0.1:{ws_port}/subscribe"
    async with Broker(f"http://127.0.0.1:{http_port}") as broker:
        bridge = await Bridge(broker, subscribe).start()
        server = await Server.start(bridge, udp=0)
        link = await open_udp_link("127.0.0.1", server.udp.port)
        try:
            res, last = await send_script(link, script, expected)
            subscriptions = bridge.sizes()["subscriptions"]
        finally:
            await link.close()
            await server.close()
            await bridge.close()
    return res, last, subscriptions


def test_forwarded_requests_answer_as_the_sib_does():
    from ksp import UDP

    expected, _ = asyncio.run(in_process(UDP, FORWARDED))
    with SibProcess("--memory", "--udp-port", "-1", "--tcp-port", "-1", "--coap-port", "-1",
                    "--sepa-http-port", "0") as broker:
        got, _, _ = asyncio.run(asyncio.wait_for(
            bridged_through(FORWARDED, broker.ports["http"]), 120))
    assert got == expected
    assert expected["create_again"][0] == Status.GRAPH_EXISTS  # the script means something
    assert expected["construct_bind"][1][0]  # triples with the BIND's value


def test_persistent_queries_through_the_bridge_as_in_the_sib():
    """The whole script — persistent queries, rules, TERMINATE and RESET: the same RESs, and
    the same last IND of every persistent query, as in a SIB; the SELECT, ASK and CONSTRUCT
    subscriptions and the rules' are SE Protocol subscriptions at the broker, gone after
    RESET; the rules fired as the SIB's did (the final SELECT of everything holds their
    work)."""
    from ksp import UDP

    expected_res, expected_last = asyncio.run(in_process(UDP, SCRIPT))
    with SibProcess("--memory", "--udp-port", "-1", "--tcp-port", "-1", "--coap-port", "-1",
                    "--sepa-http-port", "0", "--sepa-ws-port", "0") as broker:
        res, last, subscriptions = asyncio.run(asyncio.wait_for(
            bridged_through(SCRIPT, broker.ports["http"], broker.ports["ws"], expected_last),
            120))
    assert res == expected_res
    assert last == expected_last
    assert set(expected_last) >= {"sub_select", "sub_construct"}  # INDs that mean something
    assert subscriptions == 0  # RESET ended the KP's persistent queries at the broker too
    everything = " ".join(expected_res["everything"][1][1])
    assert "'11'" in everything and "'new'" in everything and "'gone'" not in everything


def _hop(src, dst) -> Request:
    """dst := src + 1 whenever src has a value: two of these feed each other for ever."""
    return Request(Tx.UPDATE_PERSISTENT, 0, delete=(Triple(ex("s"), dst, Var(2)),),
                   insert=(Triple(ex("s"), dst, Var(1)),),
                   where=(Triple(ex("s"), src, Var(0)),),
                   options=Options(optional=((Triple(ex("s"), dst, Var(2)),),),
                                   binds=(Bind(1, (Var(0), Literal.of(1), Op.ADD)),)))


COUNT = ex("count")
CASCADES = [
    ("zero", Request(Tx.INSERT_DATA, 0, insert=(Triple(ex("s"), COUNT, Literal.of(0)),))),
    ("watch", Request(Tx.SELECT_PERSISTENT, 0, projection=1,
                      where=(Triple(ex("s"), COUNT, Var(0)),))),
    # count := count + 1 whenever there is a count: each firing changes its own solutions
    ("counter", Request(Tx.UPDATE_PERSISTENT, 0, delete=(Triple(ex("s"), COUNT, Var(0)),),
                        insert=(Triple(ex("s"), COUNT, Var(1)),),
                        where=(Triple(ex("s"), COUNT, Var(0)),),
                        options=Options(binds=(Bind(1, (Var(0), Literal.of(1), Op.ADD)),)))),
    ("after_counter", Request(Tx.INSERT_DATA, 0, insert=(Triple(ex("s"), COUNT,
                                                                 Literal.of(100)),))),
    ("ping", _hop(ex("p"), ex("q"))),
    ("pong", _hop(ex("q"), ex("p"))),
    ("start", Request(Tx.INSERT_DATA, 0, insert=(Triple(ex("s"), ex("p"), Literal.of(0)),))),
    ("everything", Request(Tx.SELECT, 0, projection=3, where=(Triple(Var(0), Var(1),
                                                                       Var(2)),))),
]


def test_rules_cascade_and_runaways_end_as_in_the_sib():
    """A rule that feeds itself (a counter) and two that feed each other: through the bridge
    they fire in the SIB's order, each is ended with a TERMINATED IND at the SIB's
    `rule_firing_limit`, and the store and the subscriber's last IND end as in the SIB."""
    from ksp import UDP

    expected_res, expected_last = asyncio.run(in_process(UDP, CASCADES))
    with SibProcess("--memory", "--udp-port", "-1", "--tcp-port", "-1", "--coap-port", "-1",
                    "--sepa-http-port", "0", "--sepa-ws-port", "0") as broker:
        res, last, _ = asyncio.run(asyncio.wait_for(
            bridged_through(CASCADES, broker.ports["http"], broker.ports["ws"],
                            expected_last), 120))
    assert res == expected_res
    assert last == expected_last
    assert {expected_last[n][0] for n in ("counter", "ping", "pong")} == {Status.TERMINATED}
    assert "'16'" in str(expected_last["watch"])  # the counter's 16 firings, then its end


async def _slow_ws_proxy(upstream: str, delay: float):
    """A WebSocket relay that holds every frame from the broker for `delay` seconds (in
    order), as a loaded broker or a long path would: what reaches the bridge late."""
    import aiohttp
    from aiohttp import web

    async def relay(request):
        client = web.WebSocketResponse()
        await client.prepare(request)
        async with aiohttp.ClientSession() as http, http.ws_connect(upstream) as broker:
            queue: asyncio.Queue = asyncio.Queue()

            async def down():
                async for msg in broker:
                    queue.put_nowait((asyncio.get_running_loop().time() + delay, msg.data))

            async def later():
                while True:
                    due, data = await queue.get()
                    await asyncio.sleep(max(0.0, due - asyncio.get_running_loop().time()))
                    await client.send_str(data)

            tasks = [asyncio.create_task(down()), asyncio.create_task(later())]
            async for msg in client:
                await broker.send_str(msg.data)
            for t in tasks:
                t.cancel()
        return client

    runner, address = await serve("GET", "/subscribe", relay)
    return runner, f"ws://{address}/subscribe"


def test_an_update_s_inds_go_out_before_its_res_even_when_notifications_are_late():
    """The broker's notifications reach the bridge 0.3 s late. A device that updates and then
    ends its persistent query must still get the IND of its update first, as from a SIB: the
    bridge reads the update's notifications (`Subscriber.flush`) before answering it."""
    async def main(http_port: int, ws_port: int):
        runner, slow = await _slow_ws_proxy(f"ws://127.0.0.1:{ws_port}/subscribe", 0.3)
        async with Broker(f"http://127.0.0.1:{http_port}") as broker:
            bridge = await Bridge(broker, slow).start()
            server = await Server.start(bridge, udp=0)
            link = await open_udp_link("127.0.0.1", server.udp.port)
            try:
                sink = _Sink()
                sub = await link.request(Request(Tx.SELECT_PERSISTENT, projection=1,
                                                 where=(Triple(ex("s"), ex("p"), Var(0)),)), sink)
                assert sub.result.rows == ()
                await link.request(Request(Tx.INSERT_DATA, insert=(
                    Triple(ex("s"), ex("p"), Literal.of(1)),)))
                seen_at_res = [ind.result.rows for ind in sink.inds]
                await link.request(Request(Tx.TERMINATE, sub.tid))
            finally:
                await link.close()
                await server.close()
                await bridge.close()
                await runner.cleanup()
        return seen_at_res

    with SibProcess("--memory", "--udp-port", "-1", "--tcp-port", "-1", "--coap-port", "-1",
                    "--sepa-http-port", "0", "--sepa-ws-port", "0") as broker:
        seen = asyncio.run(asyncio.wait_for(main(broker.ports["http"], broker.ports["ws"]), 60))
    assert seen == [((Literal.of(1),),)]


def test_the_bridge_s_queue_and_persistent_caps_are_bounded():
    """Past `max_queued` waiting requests a request is answered LIMIT_EXCEEDED at once (the
    broker is held busy here); past `max_persistent_per_kp`, a KP's next persistent query is
    refused LIMIT_EXCEEDED and the broker gets no subscription for it; past `max_subscriptions`
    at the broker, a persistent query that would need a new one is refused, while one equal to
    an existing one shares it; past `max_persistent`, KPs asking the same query (one broker
    subscription) are refused all the same, those still waiting for the broker counted."""
    from aiohttp import web

    from ksp.session import KPIdentity
    from sib.testing import RecordingChannel

    async def held(http_port: int, ws_port: int):
        release, entered = asyncio.Event(), asyncio.Event()

        async def slow(request):
            entered.set()
            await release.wait()
            return web.json_response({"head": {}, "boolean": True})
        runner, address = await serve("POST", "/query", slow)
        log: list = []
        kp = KPIdentity(None, ("kp", 1))
        async with Broker(f"http://{address}") as broker:
            bridge = await Bridge(broker, max_queued=2).start()
            ask = Request(Tx.ASK, where=(Triple(ex("s"), ex("p"), Var(0)),))
            bridge.submit(ask._replace(tid=1), RecordingChannel(kp, 1, log))
            await entered.wait()  # the first is at the broker
            for tid in (2, 3, 4):  # two wait, one too many
                bridge.submit(ask._replace(tid=tid), RecordingChannel(kp, tid, log))
            refused = [(entry[2], entry[3].status) for entry in log]
            release.set()
            await bridge.close()
        await runner.cleanup()

        capped = []
        async with Broker(f"http://127.0.0.1:{http_port}") as broker:
            bridge = await Bridge(broker, f"ws://127.0.0.1:{ws_port}/subscribe",
                                  max_persistent_per_kp=1).start()
            for tid, o in ((1, ex("a")), (2, ex("b"))):
                sub = Request(Tx.SELECT_PERSISTENT, tid, projection=1,
                              where=(Triple(ex("s"), o, Var(0)),))
                capped.append((await bridge.answer(sub, RecordingChannel(kp, tid, []))).status)
            subscriptions = bridge.sizes()["subscriptions"]
            await bridge.close()

        shared = []  # past max_subscriptions, a new one is refused; an equal one shares
        async with Broker(f"http://127.0.0.1:{http_port}") as broker:
            bridge = await Bridge(broker, f"ws://127.0.0.1:{ws_port}/subscribe",
                                  max_subscriptions=1).start()
            for n, o in ((1, ex("a")), (2, ex("b")), (3, ex("a"))):
                other = KPIdentity(None, ("kp", 10 + n))
                sub = Request(Tx.SELECT_PERSISTENT, 1, projection=1,
                              where=(Triple(ex("s"), o, Var(0)),))
                shared.append((await bridge.answer(sub, RecordingChannel(other, 1, []))).status)
            shared.append(bridge.sizes()["subscriptions"])
            await bridge.close()

        in_all = []  # past max_persistent, counting those still waiting for the broker
        async with Broker(f"http://127.0.0.1:{http_port}") as broker:
            bridge = await Bridge(broker, f"ws://127.0.0.1:{ws_port}/subscribe",
                                  max_persistent=3).start()
            sub = Request(Tx.SELECT_PERSISTENT, 1, projection=1,
                          where=(Triple(ex("s"), ex("a"), Var(0)),))
            kps = [KPIdentity(None, ("device", n)) for n in range(7)]
            answers = await asyncio.gather(*(bridge.answer(sub, RecordingChannel(k, 1, []))
                                             for k in kps[:6]))  # all at once
            in_all.append([r.status for r in answers])
            in_all.append((len(bridge.ops), bridge.sizes()["subscriptions"]))
            end = Request(Tx.TERMINATE, 1)
            in_all.append((await bridge.answer(end, RecordingChannel(kps[0], 1, []))).status)
            in_all.append((await bridge.answer(sub, RecordingChannel(kps[6], 1, []))).status)
            in_all.append(len(bridge.ops))
            await bridge.close()
        return refused, capped, subscriptions, shared, in_all

    with SibProcess("--memory", "--udp-port", "-1", "--tcp-port", "-1", "--coap-port", "-1",
                    "--sepa-http-port", "0", "--sepa-ws-port", "0") as broker:
        refused, capped, subscriptions, shared, in_all = asyncio.run(asyncio.wait_for(
            held(broker.ports["http"], broker.ports["ws"]), 60))
    assert refused == [(4, Status.LIMIT_EXCEEDED)]
    assert capped == [Status.OK, Status.LIMIT_EXCEEDED] and subscriptions == 1
    assert shared == [Status.OK, Status.LIMIT_EXCEEDED, Status.OK, 1]
    assert in_all == [[Status.OK] * 3 + [Status.LIMIT_EXCEEDED] * 3, (3, 1), Status.OK,
                      Status.OK, 3]


def test_operations_restored_past_a_cap_lowered_meanwhile_end_with_limit_exceeded(tmp_path):
    """Journaled operations of a bridge restarted with a lower `max_persistent`: those within
    it are restored, the rest end with a LIMIT_EXCEEDED IND (their KPs are told) and leave
    the journal, as in the SIB."""
    from ksp.session import KPIdentity
    from sib.journal import Journal
    from sib.testing import RecordingChannel

    kp = KPIdentity(None, ("device", 1))
    sub = [Request(Tx.SELECT_PERSISTENT, tid, projection=1,
                   where=(Triple(ex("s"), ex(f"p{tid}"), Var(0)),)) for tid in (1, 2, 3)]
    log: list = []

    class Listener:  # where restored operations find their channels, as `Server` does
        udp = True

        def channel(self, transport, kp, tid):
            return RecordingChannel(kp, tid, log, transport)

    async def main(http_port: int, ws_port: int):
        urls = (f"http://127.0.0.1:{http_port}", f"ws://127.0.0.1:{ws_port}/subscribe")
        journal = Journal(str(tmp_path / "journal.sqlite3"))
        async with Broker(urls[0]) as broker:
            bridge = await Bridge(broker, urls[1], journal=journal).start()
            for request in sub:
                channel = RecordingChannel(kp, request.tid, [])
                assert (await bridge.answer(request, channel)).status == Status.OK
            await bridge.close()  # durable channels: saved, not ended
        journal.close()
        journal = Journal(str(tmp_path / "journal.sqlite3"))
        async with Broker(urls[0]) as broker:
            bridge = await Bridge(broker, urls[1], journal=journal, max_persistent=2).start()
            restored = await bridge.restore(Listener())
            kept = (restored, sorted(tid for _, tid in bridge.ops), [s.tid for s in journal])
            await bridge.close()
        journal.close()
        return kept

    with SibProcess("--memory", "--udp-port", "-1", "--tcp-port", "-1", "--coap-port", "-1",
                    "--sepa-http-port", "0", "--sepa-ws-port", "0") as broker:
        kept = asyncio.run(asyncio.wait_for(main(broker.ports["http"], broker.ports["ws"]), 60))
    assert kept == (2, [1, 2], [1, 2])
    assert [(tid, r.status) for kind, _, tid, r in log if r.status != Status.OK] == \
        [(3, Status.LIMIT_EXCEEDED)]


def test_a_rule_fires_on_a_change_made_by_another_client_of_the_broker():
    """The aggregator pattern: a device's rule acts on what any client of the broker writes,
    not only on what comes through the bridge — here an update sent straight to the broker's
    SPARQL endpoint. A device watching the rule's output gets the IND."""
    async def main(http_port: int, ws_port: int):
        async with Broker(f"http://127.0.0.1:{http_port}") as broker:
            bridge = await Bridge(broker, f"ws://127.0.0.1:{ws_port}/subscribe").start()
            server = await Server.start(bridge, udp=0)
            link = await open_udp_link("127.0.0.1", server.udp.port)
            try:
                sink = _Sink()
                rule = Request(Tx.INSERT_PERSISTENT, insert=(Triple(Var(0), ex("alarm"),
                                                                    Literal.of(True)),),
                               where=(Triple(Var(0), ex("temp"), Var(1)),),
                               options=Options(filters=((Var(1), Literal.of(30), Op.GT),)))
                assert (await link.request(rule, _Sink())).status == Status.OK
                watch = await link.request(Request(Tx.SELECT_PERSISTENT, projection=1, where=(
                    Triple(Var(0), ex("alarm"), Literal.of(True)),)), sink)
                assert watch.result.rows == ()
                await broker.update(f"INSERT DATA {{ <{ex('room')}> <{ex('temp')}> 35 }}")
                deadline = asyncio.get_running_loop().time() + 20
                while not sink.inds:
                    assert asyncio.get_running_loop().time() < deadline, "no IND"
                    await asyncio.sleep(0.02)
                return sink.inds[-1].result.rows, bridge.rule_firings
            finally:
                await link.close()
                await server.close()
                await bridge.close()

    with SibProcess("--memory", "--udp-port", "-1", "--tcp-port", "-1", "--coap-port", "-1",
                    "--sepa-http-port", "0", "--sepa-ws-port", "0") as broker:
        rows, firings = asyncio.run(asyncio.wait_for(
            main(broker.ports["http"], broker.ports["ws"]), 60))
    assert rows == ((ex("room"),),) and firings == 1


def test_tcp_and_coap_devices_through_the_bridge():
    """The bridge serves the SIB's three transports: a KP over TCP and one over CoAP each
    update, query and subscribe through it, and each gets the other's change as an IND."""
    from transports import connect

    async def main(http_port: int, ws_port: int):
        async with Broker(f"http://127.0.0.1:{http_port}") as broker:
            bridge = await Bridge(broker, f"ws://127.0.0.1:{ws_port}/subscribe").start()
            server = await Server.start(bridge, tcp=0, coap=0)
            query = f"SELECT ?v WHERE {{ <{ex('s')}> <{ex('p')}> ?v }}"
            try:
                async with connect(f"tcp://127.0.0.1:{server.tcp.port}") as tcp, \
                        connect(f"coap://127.0.0.1:{server.coap.port}") as coap:
                    async with tcp.subscribe(query) as by_tcp, coap.subscribe(query) as by_coap:
                        for sub in (by_tcp, by_coap):
                            assert (await asyncio.wait_for(anext(sub), 30)).result.rows == ()
                        await coap.update(f"INSERT DATA {{ <{ex('s')}> <{ex('p')}> 1 }}")
                        await tcp.update(f"INSERT DATA {{ <{ex('s')}> <{ex('p')}> 2 }}")
                        for sub in (by_tcp, by_coap):
                            while True:
                                ind = await asyncio.wait_for(anext(sub), 30)
                                if len(ind.result.rows) == 2:
                                    break
                        rows = (await coap.query(query)).rows
                    return sorted(int(r[0]) for r in rows)
            finally:
                await server.close()
                await bridge.close()

    with SibProcess("--memory", "--udp-port", "-1", "--tcp-port", "-1", "--coap-port", "-1",
                    "--sepa-http-port", "0", "--sepa-ws-port", "0") as broker:
        values = asyncio.run(asyncio.wait_for(main(broker.ports["http"], broker.ports["ws"]),
                                              90))
    assert values == [1, 2]


def test_a_broker_at_its_store_s_cap_is_limit_exceeded_for_the_device(tmp_path):
    """A `ksp-sib` broker configured with `[limits] max_quads = 2` answers an update that would
    pass it 507; the bridge tells the device LIMIT_EXCEEDED (not INTERNAL_ERROR), and an update
    within the cap goes through."""
    from ksp.session import KPIdentity
    from sib.testing import RecordingChannel

    config = tmp_path / "sib.toml"
    config.write_text("[limits]\nmax_quads = 2\n")
    kp = KPIdentity(None, ("device", 1))

    def insert(tid: int, *values: int) -> Request:
        return Request(Tx.INSERT_DATA, tid, insert=tuple(
            Triple(ex("s"), ex("p"), Literal.of(v)) for v in values))

    async def main(http_port: int) -> list:
        async with Broker(f"http://127.0.0.1:{http_port}") as broker:
            bridge = await Bridge(broker).start()
            statuses = [(await bridge.answer(r, RecordingChannel(kp, r.tid, []))).status
                        for r in (insert(1, 1, 2, 3), insert(2, 1, 2))]
            await bridge.close()
        return statuses

    with SibProcess("--config", str(config), "--memory", "--udp-port", "-1", "--tcp-port", "-1",
                    "--coap-port", "-1", "--sepa-http-port", "0", "--sepa-ws-port", "0") as sib:
        statuses = asyncio.run(asyncio.wait_for(main(sib.ports["http"]), 60))
    assert statuses == [Status.LIMIT_EXCEEDED, Status.OK]
