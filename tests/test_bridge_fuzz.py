"""The bridge under any device input (hypothesis): valid requests of every transaction type,
each followed by random, valid or one-byte-changed bytes, over real UDP into a `ksp-bridge` in
front of a `ksp-sib` gate in another process. What comes back decodes and names a TID sent,
every valid CON request gets its RES, never INTERNAL_ERROR (the broker does not fail on what
the bridge sends it), and the bridge serves on."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from bridge.broker import Broker
from bridge.service import Bridge
from ksp import UDP, Status, Tx, encode
from sib.testing import SibProcess
from transports import Server

from strategies import kp_bytes, requests
from test_transport_udp import SELECT, RawUdp
from transport_helpers import answer_to, run, sent_to_sib


@pytest.fixture(scope="module")
def gate():
    with SibProcess("--memory", "--udp-port", "-1", "--tcp-port", "-1", "--coap-port", "-1",
                    "--sepa-http-port", "0", "--sepa-ws-port", "0") as broker:
        yield broker.ports


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(pairs=st.lists(st.tuples(requests(small=True).filter(lambda r: r.tid != 0xFFFF),
                                kp_bytes(UDP)), min_size=1, max_size=4))
def test_device_input_valid_or_broken_is_answered_and_the_bridge_serves_on(gate, pairs):
    datagrams = [m for r, b in pairs for m in ((encode(r, UDP), r), (b, None))]
    named, owed = sent_to_sib(datagrams)
    named[0xFFFF] = {Tx.SELECT}

    async def scenario():
        async with Broker(f"http://127.0.0.1:{gate['http']}") as broker:
            bridge = await Bridge(broker, f"ws://127.0.0.1:{gate['ws']}/subscribe").start()
            server = await Server.start(bridge, udp=0)
            transport, raw = await RawUdp.open(server.udp.port)
            try:
                for data, _ in datagrams:
                    transport.sendto(data)
                transport.sendto(encode(SELECT._replace(tid=0xFFFF), UDP))
                answered: set[int] = set()
                while not (owed <= answered and 0xFFFF in answered):
                    answer = answer_to(await raw.recv(30), named, UDP)
                    if answer.indication:
                        continue
                    answered.add(answer.tid)
                    if answer.tid in owed:
                        assert answer.status != Status.INTERNAL_ERROR, answer
                    if answer.tid == 0xFFFF:
                        assert answer.status == Status.OK
            finally:
                transport.close()
                await server.close()
                await bridge.close()

    run(scenario())
