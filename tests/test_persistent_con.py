"""Persistent requests go CON over UDP and CoAP (wire format 14.4): a NON one from an address
not yet validated is answered ECHO REQUIRED, unexecuted, which a KP sending NON would not wait
for — its rule or subscription would silently never start. The project's KPs refuse to send
one; a SIB still answers one, over a real socket, with that 0x0f rather than silence."""
from __future__ import annotations

import asyncio
import random
import socket

import pytest

from ksp import KspError, Request, Status, Tx, decode_sib_message, encode
from ksp.session import KPSession

SUBSCRIBE = "SELECT ?o WHERE { <http://example.org/s> <http://example.org/p> ?o }"
RULE = ("INSERT { ?s <http://example.org/seen> true } "
        "WHERE { ?s <http://example.org/p> ?o }")


def test_the_session_refuses_a_non_persistent_request_over_udp_and_sends_nothing():
    kp = KPSession(rng=random.Random(0))
    request = Request(Tx.SELECT_PERSISTENT, kp.next_tid(), False, projection=0)
    with pytest.raises(KspError, match="CON over UDP"):
        kp.send(request, 0.0)
    assert kp.datagrams_to_send(0.0) == [] and kp.pending == frozenset()
    assert kp.send(request._replace(confirmable=True), 0.0) == request.tid


@pytest.mark.parametrize("scheme", ["udp", "coap"])
def test_a_non_persistent_rule_is_refused_at_once_and_a_con_one_starts(scheme):
    from sib import Sib
    from transports import Server, connect

    async def scenario() -> None:
        server = await Server.start(Sib(), udp=0, coap=0)
        port = server.udp.port if scheme == "udp" else server.coap.port
        try:
            async with await connect(f"{scheme}://127.0.0.1:{port}") as kp:
                with pytest.raises(KspError, match="CON over"):
                    await asyncio.wait_for(kp.request(RULE, persistent=True,
                                                      confirmable=False), 30)
                response = await asyncio.wait_for(kp.request(RULE, persistent=True), 30)
                assert response.status == Status.OK
        finally:
            await server.close()

    asyncio.run(scenario())


def test_a_raw_non_persistent_request_from_a_new_address_is_answered_echo_required():
    """A KP of another implementation that sends one anyway is told (0x0f, which the NON rule
    sends: it is an error), not left with silence."""
    from sib import Sib
    from transports import Server

    async def scenario() -> bytes:
        server = await Server.start(Sib(), udp=0)
        loop = asyncio.get_running_loop()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.setblocking(False)
            s.connect(("127.0.0.1", server.udp.port))
            request = Request(Tx.SELECT_PERSISTENT, 9, False, projection=0)
            s.send(encode(request))
            try:
                return await asyncio.wait_for(loop.sock_recv(s, 2048), 30)
            finally:
                await server.close()

    answer = decode_sib_message(asyncio.run(scenario()))
    assert answer.tid == 9 and answer.status == Status.ECHO_REQUIRED
