"""The bridge in front of a secure SEPA broker (`bridge/secure.py`): a `ksp-sib` in another
process with its gate in secure mode (HTTPS, WSS, registration, tokens that live 3 s), the
bridge checking devices' KSP credentials with the SIB's access policy and speaking for each at
the broker under its own registration and token; TLS checked against the broker's certificate.
"""
from __future__ import annotations

import asyncio
import json
import logging
import ssl
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from rdflib import Literal, URIRef

from bridge.broker import Broker
from bridge.secure import Registrations
from bridge.testing import UDP_ONLY, BridgeProcess, gate_broker
from bridge.service import Bridge
from ksp import Status
from sib.access import AccessPolicy, hash_password
from sib.testing import SibProcess
from ksp.session import Timing
from transports import KspStatusError, KspTimeout, Server, connect

# slow: ksp-bridge and secure ksp-sib processes
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
S, P = URIRef("http://example.org/s"), URIRef("http://example.org/p")
ASK = f"SELECT ?o WHERE {{ <{S}> <{P}> ?o }}"
PW = hash_password("pw")


def kp_entry(name: str, write: bool) -> str:
    """An [[access.kp]] entry whose password is `pw`, reading everything."""
    return (f'[[access.kp]]\nid = "{name}"\npassword_hash = "{PW}"\nread = ["*"]\n'
            + ('write = ["*"]\n' if write else ""))


def broker_config(tmp_path: Path, certificate, token_lifetime: int = 3) -> Path:
    """The broker's policy: `writer` reads and writes, `reader` and `guest` only read,
    anonymous clients nothing; tokens last `token_lifetime` seconds."""
    cert, key = certificate
    path = tmp_path / "broker.toml"
    path.write_text(f"""
[access]
anonymous = "none"
{kp_entry("writer", True)}{kp_entry("reader", False)}{kp_entry("guest", False)}
[sepa]
certificate = "{cert}"
key = "{key}"
https_port = 0
wss_port = 0
identities = ["writer", "reader", "guest"]
token_lifetime = {token_lifetime}
""")
    return path


def secure_broker(tmp_path: Path, certificate) -> SibProcess:
    return SibProcess("--memory", "--config", str(broker_config(tmp_path, certificate)),
                      "--udp-port", "-1", "--tcp-port", "-1", "--coap-port", "-1",
                      "--sepa-http-port", "0")


#: The bridge's own policy: both KPs may write (so that the broker's refusal shows), anonymous
#: devices may read.
BRIDGE_ACCESS = {"anonymous": "read", "kp": [
    {"id": "writer", "password_hash": PW, "read": ["*"], "write": ["*"]},
    {"id": "reader", "password_hash": PW, "read": ["*"], "write": ["*"]}]}


class SecureBridge:
    def __init__(self, broker: SibProcess, certificate, clients: Path) -> None:
        self.ports = broker.ports
        self.trust = ssl.create_default_context(cafile=str(certificate[0]))
        self.clients = clients

    async def __aenter__(self) -> "SecureBridge":
        https = f"https://127.0.0.1:{self.ports['https']}"
        self.registrations = Registrations(f"{https}/oauth/register", f"{https}/oauth/token",
                                           path=self.clients, ssl=self.trust, timeout=10,
                                           secrets=dict.fromkeys(("writer", "reader", "guest"),
                                                                 "pw"))
        self.broker = await Broker(https, query_path="/secure/query",
                                   update_path="/secure/update", timeout=10,
                                   ssl=self.trust).__aenter__()
        self.bridge = await Bridge(
            self.broker, f"wss://127.0.0.1:{self.ports['wss']}/secure/subscribe",
            access=AccessPolicy.from_config(BRIDGE_ACCESS), registrations=self.registrations,
            anonymous_identity="guest").start()
        self.server = await Server.start(self.bridge, udp=0)
        self.url = f"udp://127.0.0.1:{self.server.udp.port}"
        return self

    async def __aexit__(self, *exc) -> None:
        await self.bridge.close()
        await self.server.close()
        await self.broker.__aexit__(None, None, None)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


def test_each_device_speaks_for_itself_at_a_secure_broker(tmp_path, certificate, caplog):
    caplog.set_level(logging.DEBUG)
    clients = tmp_path / "clients.json"
    with secure_broker(tmp_path, certificate) as broker:
        async def main():
            async with SecureBridge(broker, certificate, clients) as lab:
                bridge = lab.bridge
                async with connect(lab.url, kp_id="writer", password="pw") as writer, \
                        connect(lab.url, kp_id="reader", password="pw") as reader, \
                        connect(lab.url) as anonymous:
                    await writer.insert_data([(S, P, Literal(1))])
                    assert [str(r[0]) for r in (await reader.query(ASK)).rows] == ["1"]
                    assert [str(r[0]) for r in (await anonymous.query(ASK)).rows] == ["1"]

                    # The broker's policy: `reader` may not write there, though the bridge's
                    # lets it: the broker refuses, the device gets ACCESS_DENIED.
                    with pytest.raises(KspStatusError) as refused:
                        await reader.insert_data([(S, P, Literal(9))])
                    assert refused.value.status is Status.ACCESS_DENIED
                    assert bridge.broker_errors["ACCESS_DENIED"] == 1
                    # The bridge's policy: anonymous devices only read; not forwarded at all.
                    forwarded = bridge.forwarded
                    with pytest.raises(KspStatusError) as refused:
                        await anonymous.insert_data([(S, P, Literal(9))])
                    assert refused.value.status is Status.ACCESS_DENIED
                    assert bridge.forwarded == forwarded
                    async with connect(lab.url, kp_id="writer", password="wrong") as impostor:
                        with pytest.raises(KspStatusError) as refused:
                            await impostor.query(ASK)
                        assert refused.value.status is Status.ACCESS_DENIED
                    assert bridge.forwarded == forwarded

                    # Equal persistent queries of two identities: two subscriptions, since
                    # the broker judges each by its client's grant.
                    async with writer.subscribe(ASK) as mine, reader.subscribe(ASK) as theirs:
                        await asyncio.wait_for(anext(mine), 30)
                        await asyncio.wait_for(anext(theirs), 30)
                        assert bridge.sizes()["subscriptions"] == 2
                        # Requests for longer than two token lifetimes: each carries a token
                        # asked for before the one held expired, so the broker refuses none.
                        for value in range(2, 10):
                            await writer.insert_data([(S, P, Literal(value))])
                            ind = await asyncio.wait_for(anext(theirs), 30)
                            assert len(ind.result.rows) == value
                            await asyncio.sleep(1.0)
                        await asyncio.wait_for(anext(mine), 30)
                assert lab.registrations.refused == 0
                assert lab.registrations.tokens >= 3 + 2  # each identity, writer's renewed
                assert lab.registrations.registered == 3  # writer, reader, guest: once each

            # Started again on the same file: the registrations are reused (the broker would
            # refuse a second registration of a name), new tokens asked for.
            async with SecureBridge(broker, certificate, clients) as lab:
                async with connect(lab.url, kp_id="writer", password="pw") as writer:
                    await writer.insert_data([(S, P, Literal(10))])
                    assert len((await writer.query(ASK)).rows) == 10
                assert lab.registrations.registered == 0 and lab.registrations.tokens == 1

        run(main())
    saved = json.loads(clients.read_text())["clients"]
    assert sorted(saved) == ["guest", "reader", "writer"]
    assert stat.S_IMODE(clients.stat().st_mode) == 0o600
    for client in saved.values():  # no secret in a log line
        assert client["client_secret"] not in caplog.text


def test_a_broker_that_forgot_the_bridge_gets_it_registered_again(tmp_path, certificate):
    """The broker restarted without its data (a new token key, no clients): the token held
    is refused, then the saved client credentials; the bridge registers anew, and the device's
    request goes through without the device seeing any of it. Tokens last an hour here: the
    bridge's is still good when the broker comes back, however long the restart takes on a
    loaded machine (with a short lifetime it may renew the token before using it, and the
    broker's refusal of the token is never seen)."""
    from sib.testing import free_port

    clients = tmp_path / "clients.json"
    https, wss = free_port("tcp"), free_port("tcp")
    ports = ("--sepa-https-port", str(https), "--sepa-wss-port", str(wss))
    brokers = [SibProcess("--memory", "--config", str(broker_config(tmp_path, certificate,
                                                                     token_lifetime=3600)),
                          "--udp-port", "-1", "--tcp-port", "-1", "--coap-port", "-1", *ports)]
    try:
        async def main():
            async with SecureBridge(brokers[0], certificate, clients) as lab:
                async with connect(lab.url, kp_id="writer", password="pw") as writer:
                    await writer.insert_data([(S, P, Literal(1))])
                    brokers[0].stop()
                    brokers.append(SibProcess(*brokers[0].args))
                    await writer.insert_data([(S, P, Literal(2))])
                    assert [str(r[0]) for r in (await writer.query(ASK)).rows] == ["2"]
                assert lab.registrations.refused == 1
                assert lab.registrations.registered == 2  # the first, then anew

        run(main())
    finally:
        for broker in brokers:
            broker.__exit__()
    log = "".join(brokers[-1].lines)
    assert "SEPA client 'writer' registered" in log


def test_tls_to_the_broker_is_verified(tmp_path, certificate):
    """Without the broker's certificate trusted, nothing is sent: the device gets
    INTERNAL_ERROR and the log says why."""
    with secure_broker(tmp_path, certificate) as broker:
        async def main():
            https = f"https://127.0.0.1:{broker.ports['https']}"
            async with Broker(https, query_path="/secure/query", timeout=10) as untrusting:
                with pytest.raises(Exception) as failed:
                    await untrusting.query("ASK {}")
                assert failed.value.status is Status.INTERNAL_ERROR
                assert "certificate" in str(failed.value).lower()

        run(main())


def test_ksp_bridge_from_the_secure_jsap(tmp_path, certificate):
    """`ksp-sib jsap --secure` → `ksp-bridge --jsap` with `ca_file` and `[access]` in its TOML
    file: a device with credentials updates and subscribes through it."""
    with secure_broker(tmp_path, certificate) as broker:
        jsap = tmp_path / "broker.jsap"
        jsap.write_text(subprocess.run(
            [sys.executable, "-m", "sib.cli", "jsap", "--secure", "--sepa-http-port",
             str(broker.ports["http"])], capture_output=True, text=True, check=True,
            cwd=ROOT).stdout)
        config = tmp_path / "bridge.toml"
        config.write_text(UDP_ONLY + f"""
[broker]
jsap = "{jsap}"
ca_file = "{certificate[0]}"
register_secrets = {{ writer = "pw" }}
[access]
anonymous = "none"
{kp_entry("writer", True)}""")
        bridge = BridgeProcess("--config", str(config))
        try:
            async def kp():
                url = f"udp://127.0.0.1:{bridge.port}"
                async with connect(url, kp_id="writer", password="pw") as device:
                    async with device.subscribe(ASK) as sub:
                        await asyncio.wait_for(anext(sub), 30)
                        await device.insert_data([(S, P, Literal(1))])
                        ind = await asyncio.wait_for(anext(sub), 30)
                        assert [str(r[0]) for r in ind.result.rows] == ["1"]
                async with connect(url) as anonymous:
                    with pytest.raises(KspStatusError) as refused:
                        await anonymous.query(ASK)
                    assert refused.value.status is Status.ACCESS_DENIED

            run(kp())
            assert bridge.stop() == 0
        finally:
            if bridge.proc.poll() is None:
                bridge.proc.kill()
        log = bridge.log()
        assert "secure broker" in log and "registered at the broker as 'writer'" in log


def test_a_sealed_device_through_the_bridge():
    """A board with a key (wire format 13: every datagram sealed, replays dropped) talks to
    the bridge as to a SIB: its update, query and subscription go through; a stranger naming
    its KP ID with another key gets nothing answered, and nothing of it reaches the broker."""
    key = bytes(range(32))
    with gate_broker() as broker:
        async def main():
            async with Broker(f"http://127.0.0.1:{broker.ports['http']}") as http:
                bridge = await Bridge(http, f"ws://127.0.0.1:{broker.ports['ws']}/subscribe",
                                      access=AccessPolicy.from_config({
                                          "anonymous": "none", "kp": [
                                              {"id": "board", "key": key.hex(),
                                               "read": ["*"], "write": ["*"]}]})).start()
                server = await Server.start(bridge, udp=0)
                url = f"udp://127.0.0.1:{server.udp.port}"
                try:
                    async with connect(url, kp_id="board", key=key) as board:
                        async with board.subscribe(ASK) as sub:
                            await asyncio.wait_for(anext(sub), 30)
                            await board.insert_data([(S, P, Literal(1))])
                            ind = await asyncio.wait_for(anext(sub), 30)
                            assert [str(r[0]) for r in ind.result.rows] == ["1"]
                        forwarded = bridge.forwarded
                        stranger = await connect(url, kp_id="board", key=bytes(32),
                                                 timing=Timing(ack_timeout=0.05,
                                                               max_retransmit=1))
                        try:
                            with pytest.raises(KspTimeout):  # dropped unopened, unanswered
                                await asyncio.wait_for(
                                    stranger.insert_data([(S, P, Literal(9))]), 10)
                        finally:
                            await stranger.close()
                        assert bridge.forwarded == forwarded
                        assert [str(r[0]) for r in (await board.query(ASK)).rows] == ["1"]
                    assert server.sealed_dropped >= 1
                finally:
                    await server.close()
                    await bridge.close()

        run(main())
