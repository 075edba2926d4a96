"""The bridge under any device input (hypothesis): valid requests of every transaction type,
each followed by random, valid or one-byte-changed bytes, over real UDP into a `ksp-bridge` in
front of a `ksp-sib` gate in another process. What comes back decodes and names a TID sent,
every valid CON request gets its RES, never INTERNAL_ERROR (the broker does not fail on what
the bridge sends it), and the bridge serves on."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from bridge.broker import Broker
from bridge.service import Bridge
from ksp import Status
from sib.testing import SibProcess
from transports import Server

from test_transport_udp import FUZZ_PAIRS, fuzz_exchange
from transport_helpers import run

# slow: the bridge in front of a ksp-sib process
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def gate():
    with SibProcess("--memory", "--udp-port", "-1", "--tcp-port", "-1", "--coap-port", "-1",
                    "--sepa-http-port", "0", "--sepa-ws-port", "0") as broker:
        yield broker.ports


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(pairs=FUZZ_PAIRS)
def test_device_input_valid_or_broken_is_answered_and_the_bridge_serves_on(gate, pairs):
    async def scenario():
        async with Broker(f"http://127.0.0.1:{gate['http']}") as broker:
            bridge = await Bridge(broker, f"ws://127.0.0.1:{gate['ws']}/subscribe").start()
            server = await Server.start(bridge, udp=0)
            try:
                owed = await fuzz_exchange(server.udp.port, pairs, timeout=30)
                assert all(r.status != Status.INTERNAL_ERROR for r in owed.values()), owed
            finally:
                await server.close()
                await bridge.close()

    run(scenario())
