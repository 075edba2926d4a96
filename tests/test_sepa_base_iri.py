"""The service base IRI (`[sepa] base_iri`, `sib.sepa.protocol.base_iri`) through real
sockets: relative IRIs in queries, updates and subscriptions resolve against it, and the
per-graph access checks see the resolved IRIs. Also LOAD SILENT (success, no change) and the
protocol's refusals the W3C manifest leaves out (it covers the rest:
tests/test_w3c_protocol.py)."""
from __future__ import annotations

import asyncio
import subprocess
import sys

import aiohttp
import pytest

from sib import Sib
from sib.access import AccessPolicy
from sib.sepa import SepaGate
from sib.sepa.protocol import base_iri

UPDATE = {"Content-Type": "application/sparql-update"}
BASE = "http://example.org/base/"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


class Gate:
    def __init__(self, access=None, **gate_args) -> None:
        self.access, self.gate_args = access, gate_args

    async def __aenter__(self) -> "Gate":
        self.sib = await Sib(access=self.access).start()
        self.gate = await SepaGate(self.sib, http_port=0, ws_port=0, **self.gate_args).start()
        self.http = aiohttp.ClientSession()
        self.url = f"http://127.0.0.1:{self.gate.http_port}"
        return self

    async def __aexit__(self, *exc) -> None:
        await self.http.close()
        await self.gate.close()
        await self.sib.close()

    async def update(self, text: str) -> tuple[int, dict]:
        async with self.http.post(self.url + "/update", data=text, headers=UPDATE) as r:
            return r.status, await r.json()

    async def select(self, text: str) -> tuple[int, dict]:
        async with self.http.get(self.url + "/query", params={"query": text},
                                 headers={"Accept": "application/sparql-results+json"}) as r:
            return r.status, await r.json()


def test_the_default_base_is_the_gates_root():
    assert base_iri(None, "127.0.0.1", 8000, None) == "http://127.0.0.1:8000/"
    assert base_iri(None, "0.0.0.0", 8000, 8443) == "http://localhost:8000/"
    assert base_iri(None, "::1", None, 8443) == "https://[::1]:8443/"
    assert base_iri(None, "127.0.0.1", None, None) == "http://127.0.0.1/"
    assert base_iri(BASE, "127.0.0.1", 8000, None) == BASE
    with pytest.raises(ValueError, match="absolute"):
        base_iri("relative/path", "127.0.0.1", 8000, None)


def test_relative_iris_resolve_against_the_default_base():
    async def scenario():
        async with Gate() as g:
            root = f"http://127.0.0.1:{g.gate.http_port}/"
            assert g.gate.broker.base_iri == root
            status, body = await g.update("INSERT DATA { <s> <p> <o> }")
            assert status == 200, body
            status, body = await g.select("SELECT ?o WHERE { <s> <p> ?o }")
            assert status == 200, body
            assert body["results"]["bindings"] == [{"o": {"type": "uri", "value": root + "o"}}]
            status, body = await g.select(f"SELECT ?s WHERE {{ ?s <{root}p> ?o }}")
            assert body["results"]["bindings"] == [{"s": {"type": "uri", "value": root + "s"}}]
    run(scenario())


def test_a_configured_base_and_the_texts_own_base():
    async def scenario():
        async with Gate(base_iri=BASE) as g:
            await g.update("INSERT DATA { GRAPH <g> { <s> <p> <o> } } ; "
                           "BASE <http://other.example/> INSERT DATA { <s> <p> <o> }")
            status, body = await g.select(
                f"SELECT ?g ?s WHERE {{ {{ GRAPH ?g {{ ?s ?p ?o }} }} UNION {{ ?s ?p ?o }} }}")
            assert status == 200, body
            got = {(b.get("g", {}).get("value"), b["s"]["value"])
                   for b in body["results"]["bindings"]}
            assert got == {(BASE + "g", BASE + "s"), (None, "http://other.example/s")}
    run(scenario())


def test_access_checks_see_the_resolved_iris():
    """A grant naming the resolved graph lets a relative `GRAPH <g>` through, in a query, an
    update's WHERE and an update's template; another relative graph stays refused."""
    policy = AccessPolicy(anonymous={"read": [BASE + "g"], "write": [BASE + "g"]})

    async def scenario():
        async with Gate(access=policy, base_iri=BASE) as g:
            status, body = await g.update("INSERT DATA { GRAPH <g> { <s> <p> 1 } }")
            assert status == 200, body
            status, body = await g.select("SELECT ?v WHERE { GRAPH <g> { <s> <p> ?v } }")
            assert status == 200 and len(body["results"]["bindings"]) == 1, body
            status, body = await g.update("WITH <g> DELETE { <s> <p> ?v } INSERT { <s> <p> 2 } "
                                          "WHERE { <s> <p> ?v }")
            assert status == 200 and body == {"added": 1, "removed": 1}, body
            for text in ("SELECT ?v WHERE { GRAPH <h> { ?s ?p ?v } }",
                         "SELECT ?v FROM <h> WHERE { ?s ?p ?v }"):
                status, body = await g.select(text)
                assert status == 403, (text, body)
            status, body = await g.update("INSERT DATA { GRAPH <h> { <s> <p> 1 } }")
            assert status == 403, body
    run(scenario())


def test_load_silent_succeeds_with_no_change_and_load_stays_refused():
    async def scenario():
        async with Gate() as g:
            for text in ("LOAD SILENT <http://example.org/data.ttl>",
                         "LOAD SILENT <http://example.org/data.ttl> INTO GRAPH <http://ex.org/g>"):
                status, body = await g.update(text)
                assert (status, body) == (200, {"added": 0, "removed": 0}), text
            assert len(g.sib.store) == 0
            status, body = await g.update("LOAD <http://example.org/data.ttl>")
            assert status == 501 and body["error"] == "not_implemented"
            status, body = await g.update("INSERT DATA { <http://ex.org/s> <http://ex.org/p> 1 }"
                                          " ; LOAD SILENT <http://example.org/x>")
            assert status == 200 and len(g.sib.store) == 1
    run(scenario())


def test_one_operation_per_request():
    """The Protocol's refusals the W3C tests do not spell out: a query beside an update
    parameter, an operation in the query string of a direct POST; a charset other than
    UTF-8 is refused, UTF-8 in any case accepted."""
    async def scenario():
        async with Gate() as g:
            for path, params in (("/query", {"query": "ASK {}", "update": "CLEAR ALL"}),):
                async with g.http.get(g.url + path, params=params) as r:
                    assert r.status == 400
            async with g.http.post(g.url + "/update", data={"update": "CLEAR ALL",
                                                            "query": "ASK {}"}) as r:
                assert r.status == 400
            async with g.http.post(g.url + "/query?query=ASK%7B%7D", data="ASK {}",
                                   headers={"Content-Type": "application/sparql-query"}) as r:
                assert r.status == 400
            for charset, status in (("UTF-8", 200), ("utf8", 200), ("latin-1", 415)):
                async with g.http.post(g.url + "/update", data="CLEAR ALL", headers={
                        "Content-Type": f"application/sparql-update; charset={charset}"}) as r:
                    assert r.status == status, charset
    run(scenario())


def test_a_subscription_with_relative_iris_is_notified():
    """Its patterns are screened resolved (`sib.sepa.screen`), so a change to the resolved
    triple reaches it."""
    async def scenario():
        async with Gate(base_iri=BASE) as g, g.http.ws_connect(
                f"ws://127.0.0.1:{g.gate.ws_port}/subscribe") as ws:
            await ws.send_json({"subscribe": {"sparql": "SELECT ?o WHERE { <s> <p> ?o }",
                                              "alias": "a"}})
            first = await asyncio.wait_for(ws.receive_json(), 30)
            assert first["notification"]["sequence"] == 0, first
            status, _ = await g.update(f"INSERT DATA {{ <{BASE}s> <{BASE}p> <{BASE}o> }}")
            assert status == 200
            second = (await asyncio.wait_for(ws.receive_json(), 30))["notification"]
            assert second["addedResults"]["results"]["bindings"] == [
                {"o": {"type": "uri", "value": BASE + "o"}}]
    run(scenario())


def test_a_subscription_with_absolute_iris_is_screened_by_ksps_compiler_despite_the_base():
    """A subscription is screened on the scheduler, between the devices' requests: one whose
    IRIs are all absolute is read by KSP's compiler (~0.1 ms), not by rdflib (~6 ms of the
    event loop each), also when the gate has a base IRI, so a client opening subscriptions
    as fast as it can holds the loop a compile's time per subscription. Only the one with a
    relative IRI goes to rdflib, and is still notified resolved."""
    from sib.sepa.screen import PARSED

    async def scenario():
        async with Gate(base_iri=BASE) as g, g.http.ws_connect(
                f"ws://127.0.0.1:{g.gate.ws_port}/subscribe") as ws:
            before = dict(PARSED)
            for k in range(20):
                await ws.send_json({"subscribe": {
                    "sparql": f"SELECT * WHERE {{ <http://example.org/flood{k}> ?p ?o }}",
                    "alias": str(k)}})
                frame = await asyncio.wait_for(ws.receive_json(), 30)
                assert frame["notification"]["alias"] == str(k), frame
            assert PARSED["ksp"] - before.get("ksp", 0) == 20
            assert PARSED["rdflib"] == before.get("rdflib", 0)
            await ws.send_json({"subscribe": {"sparql": "SELECT ?o WHERE { <s> <p> ?o }",
                                              "alias": "relative"}})
            frame = await asyncio.wait_for(ws.receive_json(), 30)
            assert frame["notification"]["alias"] == "relative", frame
            relative = frame["notification"]["spuid"]
            assert PARSED["rdflib"] == before.get("rdflib", 0) + 1
            status, _ = await g.update(f"INSERT DATA {{ <{BASE}s> <{BASE}p> <{BASE}o> }}")
            assert status == 200
            frame = (await asyncio.wait_for(ws.receive_json(), 30))["notification"]
            assert frame["spuid"] == relative, frame
            assert frame["addedResults"]["results"]["bindings"] == [
                {"o": {"type": "uri", "value": BASE + "o"}}]
    run(scenario())


def test_ksp_sib_takes_the_base_from_its_configuration(tmp_path):
    """`[sepa] base_iri` in a running `ksp-sib`; a relative one stops it in one line (2)."""
    from sib.testing import SibProcess
    from w3c_protocol_runner import send

    config = tmp_path / "sib.toml"
    config.write_text(f'[sepa]\nbase_iri = "{BASE}"\n')
    with SibProcess("--config", str(config), "--memory", "--udp-port", "0", "--tcp-port", "-1",
                    "--coap-port", "-1", "--sepa-http-port", "0", "--sepa-ws-port", "-1") as sib:
        port = sib.ports["http"]
        status, _, body = send(port, "POST", "/update", b"INSERT DATA { <s> <p> <o> }",
                               {"Content-Type": "application/sparql-update"})
        assert status == 200, body
        status, _, body = send(port, "POST", "/query", f"ASK {{ <{BASE}s> <{BASE}p> <{BASE}o> }}"
                               .encode(), {"Content-Type": "application/sparql-query"})
        assert status == 200 and b"true" in body
    config.write_text('[sepa]\nbase_iri = "relative/"\n')
    out = subprocess.run([sys.executable, "-m", "sib.cli", "--config", str(config)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "base_iri" in out.stderr and "Traceback" not in out.stderr
