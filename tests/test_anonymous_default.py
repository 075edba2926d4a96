"""Anonymous clients by default, as mosquitto 2 does it: with no `[access] anonymous` a SIB
(or bridge) listening on loopback only lets them read and write (a developer's machine, `ksp
demo`), and one listening beyond loopback gives them nothing and says so at startup, naming the
setting that opens it. Seen through a real `ksp-sib` on every interface, asked on loopback."""
from __future__ import annotations

import asyncio

import pytest
from rdflib import Literal, URIRef

from bridge.config import BridgeConfig
from ksp.codes import Status
from sib.config import Config, anonymous_closed, loopback_only, serving_policy
from sib.testing import SibProcess
from transports import connect
from transports.errors import KspStatusError

S, P = URIRef("http://example.org/s"), URIRef("http://example.org/p")
NO_OTHERS = ("--memory", "--udp-port", "0", "--tcp-port", "-1", "--coap-port", "-1")


@pytest.mark.parametrize("host, only", [
    ("127.0.0.1", True), ("127.0.0.2", True), ("::1", True), ("[::1]", True),
    ("localhost", True), ("LOCALHOST", True), ("0.0.0.0", False), ("::", False), ("", False),
    ("192.0.2.7", False), ("2001:db8::1", False), ("gateway.example", False)])
def test_which_hosts_are_loopback_only(host, only):
    assert loopback_only(host) is only


def test_the_default_closes_beyond_loopback_and_an_explicit_policy_stands():
    write_everywhere = ("write", ["*"])
    assert serving_policy({}, "127.0.0.1").anonymous_grant().allows(*write_everywhere)
    closed = serving_policy({}, "0.0.0.0").anonymous_grant()
    assert not closed.allows("read", ["default"]) and not closed.allows(*write_everywhere)
    assert anonymous_closed({}, "0.0.0.0") and not anonymous_closed({}, "::1")
    # said in the file: kept, wherever the listeners are
    opened = serving_policy({"anonymous": "read-write"}, "0.0.0.0").anonymous_grant()
    assert opened.allows(*write_everywhere)
    assert not anonymous_closed({"anonymous": "read-write"}, "0.0.0.0")
    # the KPs of the file are untouched
    kp = {"id": "a", "password_hash": "scrypt$16384$8$1$00$00", "read": ["*"]}
    assert len(serving_policy({"kp": [kp]}, "0.0.0.0").kps) == 1
    # ksp-sib and ksp-bridge read it alike
    for kind in (Config, BridgeConfig):
        config = kind()
        config.host = "0.0.0.0"
        assert not config.access_policy().anonymous_grant().allows("read", ["default"])


async def _write(port: int) -> None:
    async with await connect(f"udp://127.0.0.1:{port}") as kp:
        await kp.insert_data([(S, P, Literal(1))])


def _run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 60))


def test_a_sib_on_every_interface_refuses_anonymous_clients_and_says_how_to_open():
    with SibProcess(*NO_OTHERS, "--host", "0.0.0.0") as sib:
        with pytest.raises(KspStatusError) as refused:
            _run(_write(sib.ports["udp"]))
        assert refused.value.status == Status.ACCESS_DENIED
        assert sib.stop() == 0
    log = sib.log()
    assert "anonymous clients get nothing: the listeners are on 0.0.0.0" in log
    assert 'anonymous = "read"' in log


def test_an_explicit_anonymous_policy_opens_it_and_loopback_stays_open(tmp_path):
    config = tmp_path / "sib.toml"
    config.write_text('[access]\nanonymous = "read-write"\n')
    with SibProcess(*NO_OTHERS, "--host", "0.0.0.0", "--config", str(config)) as sib:
        _run(_write(sib.ports["udp"]))
        assert sib.stop() == 0
    assert "anonymous clients get nothing" not in sib.log()
    with SibProcess(*NO_OTHERS) as sib:  # the default host, 127.0.0.1: `ksp demo`'s case
        _run(_write(sib.ports["udp"]))
        assert sib.stop() == 0
    assert "anonymous clients get nothing" not in sib.log()
