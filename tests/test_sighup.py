"""SIGHUP never kills a long-running tool: `ksp-sib` and `ksp-bridge` started without a
configuration file (real processes) log that there is nothing to reload and go on serving."""
from __future__ import annotations

import asyncio
import signal

from rdflib import Literal, URIRef

from bridge.testing import BridgedSib
from transports import connect

S, P = URIRef("http://example.org/s"), URIRef("http://example.org/p")


def test_sighup_without_a_configuration_is_logged_and_serving_goes_on():
    with BridgedSib() as lab:  # a ksp-sib (the broker) and a ksp-bridge, neither with --config
        for process in (lab.broker, lab.bridge):
            process.proc.send_signal(signal.SIGHUP)
            process.wait_for("SIGHUP: no configuration file (--config), nothing to reload")
            assert process.proc.poll() is None

        async def talk():  # through the bridge to the broker: both still answer
            async with await connect(f"udp://127.0.0.1:{lab.port}") as kp:
                await kp.insert_data([(S, P, Literal(1))])
                rows = await kp.query(f"SELECT ?o WHERE {{ <{S}> <{P}> ?o }}")
                return {row[0] for row in rows.rows}

        assert asyncio.run(asyncio.wait_for(talk(), 60)) == {Literal(1)}
        assert lab.bridge.stop() == 0
        assert lab.broker.stop() == 0
        assert "store flushed" in lab.broker.log()
