"""The bridge's broker client (`bridge/broker.py`) against a real SEPA gate (a SIB's, on free
ports) and against servers that fail in the ways a broker can: each failure is the KSP status
the table in its docstring gives, with the broker's words in the reason."""
from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from bridge.broker import Broker, BrokerError
from ksp.codes import Status
from sib import Sib
from sib.access import AccessPolicy
from sib.sepa import SepaGate
from sib.testing import free_port

from transport_helpers import until

EX = "http://example.org/"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


class Gate:
    def __init__(self, **gate_args) -> None:
        self.gate_args = gate_args

    async def __aenter__(self) -> str:
        self.sib = await Sib(access=self.gate_args.pop("access", None)).start()
        self.gate = await SepaGate(self.sib, http_port=0, ws_port=-1, **self.gate_args).start()
        return f"http://127.0.0.1:{self.gate.http_port}"

    async def __aexit__(self, *exc) -> None:
        await self.gate.close()
        await self.sib.close()


async def serve(method: str, path: str, handler) -> tuple[web.AppRunner, str]:
    """A stand-in for (a part of) a broker: `handler` answers `method path` on a free loopback
    port. Returns its runner (to clean up) and its address, `127.0.0.1:PORT`."""
    app = web.Application()
    app.router.add_route(method, path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, f"127.0.0.1:{runner.addresses[0][1]}"


async def _status(coro) -> tuple[Status, str]:
    with pytest.raises(BrokerError) as err:
        await coro
    return err.value.status, err.value.reason


def test_queries_and_updates_through_a_sepa_gate():
    async def main():
        async with Gate() as url, Broker(url) as broker:
            await broker.update(f"INSERT DATA {{ <{EX}a> <{EX}p> 1 }}")
            results = await broker.query(f"SELECT ?o WHERE {{ <{EX}a> <{EX}p> ?o }}")
            assert [b["o"]["value"] for b in results["results"]["bindings"]] == ["1"]
            assert (await broker.query(f"ASK {{ <{EX}a> <{EX}p> 2 }}"))["boolean"] is False
            status, reason = await _status(broker.query("SELECT WHERE {"))
            assert status is Status.INVALID_DATA_FORMAT and "HTTP 400" in reason
    run(main())


def test_the_broker_s_refusals_map_to_statuses():
    async def main():
        async with Gate(access=AccessPolicy(anonymous={"read": ["*"], "write": []}),
                        max_body_bytes=2_000) as url, Broker(url) as broker:
            status, reason = await _status(broker.update(f"INSERT DATA {{ <{EX}a> <{EX}p> 1 }}"))
            assert status is Status.ACCESS_DENIED and "write permission" in reason
            big = f'INSERT DATA {{ <{EX}a> <{EX}p> "{"x" * 5_000}" }}'
            assert (await _status(broker.update(big)))[0] is Status.LIMIT_EXCEEDED
        async with Gate() as url, Broker(url, query_path="/nowhere") as broker:
            status, reason = await _status(broker.query("ASK {}"))
            assert status is Status.INTERNAL_ERROR and "HTTP 404" in reason
    run(main())


def test_a_broker_that_is_down_silent_or_not_sparql_is_an_internal_error():
    async def main():
        port = free_port()
        async with Broker(f"http://127.0.0.1:{port}") as broker:  # nothing listens
            status, reason = await _status(broker.query("ASK {}"))
            assert status is Status.INTERNAL_ERROR and f"127.0.0.1:{port}" in reason

        async def silent(reader, writer):
            await reader.read()  # nothing said until the client goes (its session closed)
            writer.close()
        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with Broker(f"http://127.0.0.1:{port}", timeout=0.5) as broker:
            status, reason = await _status(broker.update("CLEAR ALL"))
            assert status is Status.INTERNAL_ERROR and "no answer within 0.5 s" in reason
        server.close()

        async def not_sparql(request):
            return web.Response(text="hello")
        runner, address = await serve("POST", "/query", not_sparql)
        async with Broker(f"http://{address}") as broker:
            status, reason = await _status(broker.query("ASK {}"))
            assert status is Status.INTERNAL_ERROR and "not SPARQL JSON" in reason
        await runner.cleanup()
    run(main())


def test_requests_in_flight_are_bounded():
    """`max_concurrent`: the rest wait, so a slow broker holds a bounded number of
    connections and the bridge's queue, not its sockets, absorbs the load."""
    async def main():
        inside, most, release = 0, 0, asyncio.Event()

        async def slow(request):
            nonlocal inside, most
            inside += 1
            most = max(most, inside)
            await release.wait()
            inside -= 1
            return web.json_response({"head": {}, "boolean": True})
        runner, address = await serve("POST", "/query", slow)
        async with Broker(f"http://{address}", max_concurrent=2) as broker:
            asks = [asyncio.create_task(broker.query("ASK {}")) for _ in range(6)]
            await until(lambda: inside >= 2, what="two queries inside the broker")
            await asyncio.sleep(0.2)
            assert inside == 2
            release.set()
            assert all(r["boolean"] for r in await asyncio.gather(*asks))
        assert most == 2
        await runner.cleanup()
    run(main())


def test_the_reference_broker_s_manners():
    """What vaimee/SEPA does that the SIB's gate does not (../shared/README.md), on stand-ins
    that do only that: Content-Type compared exactly; register and token answered 201 and
    refused (415) without a JSON Content-Type, a flat token reply; a subscribe refused by an error frame that carries no
    alias — the bridge reads each as meant, and the refusal arrives at once, not at the
    timeout."""
    from aiohttp import WSMsgType

    from bridge.secure import Registrations
    from bridge.subscriber import Subscriber

    seen = []

    async def register(request):
        seen.append(("register", request.content_type))
        if request.content_type != "application/json":
            return web.json_response({"error": "unsupported"}, status=415)
        return web.json_response({"credentials": {"client_id": "c1", "client_secret": "s1"}},
                                 status=201)

    async def token(request):
        seen.append(("token", request.content_type, request.headers.get("Authorization")))
        if request.content_type != "application/json":
            return web.json_response({"error": "unsupported"}, status=415)
        return web.json_response({"access_token": "jwt", "token_type": "bearer",
                                  "expires_in": 3600}, status=201)

    async def sparql(request):  # Content-Type compared exactly, as the reference broker does
        kind = request.headers.get("Content-Type")
        seen.append((request.path, kind))
        if kind not in ("application/sparql-query", "application/sparql-update"):
            return web.json_response({"error": "unsupported"}, status=415)
        if request.path == "/update":
            return web.Response(status=200)
        return web.json_response({"head": {"vars": []}, "boolean": True})

    async def subscribe(request):
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for msg in ws:
            if msg.type == WSMsgType.TEXT:
                await ws.send_json({"error": "unauthorized", "status_code": 401,
                                    "error_description": "no token"})
        return ws

    async def main():
        runners = []
        try:
            app = web.Application()
            app.router.add_post("/oauth/register", register)
            app.router.add_post("/oauth/token", token)
            app.router.add_get("/subscribe", subscribe)
            app.router.add_post("/query", sparql)
            app.router.add_post("/update", sparql)
            runner = web.AppRunner(app)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            runners.append(runner)
            where = f"127.0.0.1:{runner.addresses[0][1]}"
            registrations = Registrations(f"http://{where}/oauth/register",
                                          f"http://{where}/oauth/token", path=None)
            assert await registrations.authorization("dev") == "Bearer jwt"
            await registrations.close()
            bounded = Registrations(f"http://{where}/oauth/register",
                                    f"http://{where}/oauth/token", path=None, max_identities=1)
            assert await bounded.authorization("dev") == "Bearer jwt"
            status, _ = await _status(bounded.authorization("another"))  # the cap: nothing sent
            assert status is Status.LIMIT_EXCEEDED
            await bounded.close()
            assert seen[:2] == [("register", "application/json"),
                                ("token", "application/json", "Basic YzE6czE=")]
            assert len(seen) == 4  # the bounded one's register and token, not another's
            del seen[2:]
            async with Broker(f"http://{where}") as broker:
                assert (await broker.query("ASK {}"))["boolean"] is True
                await broker.update("INSERT DATA { <urn:a> <urn:b> <urn:c> }")
            assert seen[2:] == [("/query", "application/sparql-query"),
                                ("/update", "application/sparql-update")]
            subscriber = Subscriber(f"ws://{where}/subscribe", lambda sub, status: None,
                                    timeout=30)
            started = asyncio.get_running_loop().time()
            status, reason = await _status(subscriber.subscribe("ASK {}", lambda *a: None))
            assert status is Status.ACCESS_DENIED and "no token" in reason
            assert asyncio.get_running_loop().time() - started < 10  # not the timeout
            await subscriber.close()
        finally:
            for runner in runners:
                await runner.cleanup()

    run(main())


def test_a_socket_closing_while_a_subscribe_waits_for_its_token_leaves_no_orphan_error():
    """The broker's socket closes while a subscription waits for its token (a secure broker's
    re-subscription after tokens expired, on a loaded machine): the subscribe fails with a
    BrokerError, and the first-notification future the socket's end failed is read — no
    "exception was never retrieved" (the autouse fixture fails a test the loop reported on)."""
    import gc

    from bridge.subscriber import Subscriber

    async def main():
        sib = await Sib().start()
        gate = await SepaGate(sib, http_port=0, ws_port=0).start()
        asked, token = asyncio.Event(), asyncio.Event()

        async def authorize() -> str:  # asked once the subscribe waits for its first frame
            asked.set()
            await token.wait()
            return "Bearer t"

        subscriber = Subscriber(f"ws://127.0.0.1:{gate.ws_port}/subscribe",
                                lambda sub, status: None, timeout=30)
        try:
            await subscriber.subscribe("ASK {}", lambda *a: None)  # the socket is open
            asking = asyncio.ensure_future(subscriber.subscribe("ASK {}", lambda *a: None,
                                                                authorize=authorize))
            await asyncio.wait_for(asked.wait(), 30)  # the subscribe waits for its token
            await gate.close()  # the broker's end closes the socket
            await until(lambda: not subscriber.up.is_set(), 30, "the socket's end read")
            token.set()
            status, _ = await _status(asking)
            assert status is Status.INTERNAL_ERROR
        finally:
            await subscriber.close()
            await gate.close()
            await sib.close()
        gc.collect()

    run(main())
