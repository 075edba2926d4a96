"""The bridge (issue 12) between KSP devices and a SEPA broker — a `ksp-sib` with its gate, in
another process — against the SIB itself: the requests of tests/test_sib_sockets.py's script
that the bridge forwards (every non-persistent transaction type, every option) give the same
RESs over real UDP as the same script in a SIB."""
from __future__ import annotations

import asyncio

from bridge.broker import Broker
from bridge.service import Bridge
from ksp import Request, Status, Tx
from sib.testing import SibProcess
from transports import Server
from transports.udp import open_udp_link

from sib import Sib
from sib.testing import Client
from test_sib_sockets import SCRIPT, _normal, _wire  # noqa: I001 - tests/ is on the path

FORWARDED = [(name, req) for name, req in SCRIPT
             if isinstance(req, Request) and not req.tx.persistent
             and req.tx not in (Tx.TERMINATE, Tx.RESET)]


async def through_the_bridge(http_port: int) -> dict:
    async with Broker(f"http://127.0.0.1:{http_port}") as broker:
        bridge = await Bridge(broker).start()
        server = await Server.start(bridge, udp=0)
        link = await open_udp_link("127.0.0.1", server.udp.port)
        res = {}
        try:
            for name, req in FORWARDED:
                res[name] = _normal(await asyncio.wait_for(link.request(req), 30))
        finally:
            await link.close()
            await server.close()
            await bridge.close()
    return res


async def in_a_sib() -> dict:
    from ksp import UDP

    sib = Sib()
    kp = Client(sib)
    res = {}
    for i, (name, req) in enumerate(FORWARDED, start=1):
        req = req._replace(tid=i)
        res[name] = _normal(_wire(await kp.call(req), req, UDP))
    await sib.close()
    return res


def test_forwarded_requests_answer_as_the_sib_does():
    expected = asyncio.run(in_a_sib())
    with SibProcess("--memory", "--udp-port", "-1", "--tcp-port", "-1", "--coap-port", "-1",
                    "--sepa-http-port", "0") as broker:
        got = asyncio.run(asyncio.wait_for(through_the_bridge(broker.ports["http"]), 120))
    assert got == expected
    assert expected["create_again"][0] == Status.GRAPH_EXISTS  # the script means something
