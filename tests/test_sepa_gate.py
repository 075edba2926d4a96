"""The SEPA gate (`sib/sepa/`) through real sockets: the SPARQL 1.1 Protocol over HTTP, the SE
Protocol over WebSocket (aiohttp's client), and KSP devices over UDP on the same SIB."""
from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sib import Sib
from ksp.errors import SparqlSyntaxError
from ksp.terms import IRI, Literal
from sib.access import AccessPolicy
from sib.oxterms import resolve_iri
from sib.store import Delta
from sib.sepa import SepaGate
from sib.sepa.update import parse_update
from transports import Server
from transports.client import connect

from lengths import examples
from transport_helpers import closed_by_peer, until

EX = "http://example.org/"
PRE = f"PREFIX ex: <{EX}> "
UPDATE = {"Content-Type": "application/sparql-update"}


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


class Lab:
    """A SIB with its SEPA gate (free ports) and, if asked, its KSP UDP listener."""

    def __init__(self, ksp: bool = False, smart: bool = True, sib_options: dict | None = None,
                 **gate_args) -> None:
        self.ksp, self.smart, self.gate_args = ksp, smart, gate_args
        self.sib_options = sib_options or {}

    async def __aenter__(self) -> "Lab":
        self.sib = await Sib(access=self.gate_args.pop("access", None), smart=self.smart,
                             **self.sib_options).start()
        self.gate = await SepaGate(self.sib, http_port=0, ws_port=0, **self.gate_args).start()
        self.http = aiohttp.ClientSession()
        self.base = f"http://127.0.0.1:{self.gate.http_port}"
        self.ws_url = f"ws://127.0.0.1:{self.gate.ws_port}/subscribe"
        self.server = None
        if self.ksp:
            self.server = await Server.start(self.sib, "127.0.0.1", udp=0)
        return self

    async def __aexit__(self, *exc) -> None:
        await self.http.close()
        await self.gate.close()
        await self.sib.close()
        if self.server is not None:
            await self.server.close()

    async def update(self, text: str, status: int = 200, **kw) -> dict:
        async with self.http.post(self.base + "/update", data=text, headers=UPDATE, **kw) as r:
            body = await r.json()
            assert r.status == status, body
            return body

    async def select(self, text: str, **params) -> list[dict]:
        async with self.http.get(self.base + "/query", params={"query": text, **params}) as r:
            body = await r.json()
            assert r.status == 200, body
            return body["results"]["bindings"]

    async def subscribe(self, ws, sparql: str, alias: str | None = "a", **extra) -> dict:
        body = {"sparql": sparql, **extra}
        if alias is not None:
            body["alias"] = alias
        await ws.send_json({"subscribe": body})
        return await receive(ws)


async def receive(ws, timeout: float = 10.0) -> dict:
    msg = await ws.receive(timeout)
    assert msg.type == aiohttp.WSMsgType.TEXT, msg
    return json.loads(msg.data)


def rows(results: dict) -> Counter:
    return Counter(json.dumps(b, sort_keys=True) for b in results["results"]["bindings"])


def values(bindings: list[dict], var: str) -> list[str]:
    return sorted(b[var]["value"] for b in bindings if var in b)


# -- SPARQL 1.1 Protocol --------------------------------------------------------------------

def test_query_by_get_post_and_direct_post_with_formats():
    async def main():
        async with Lab() as lab:
            await lab.update(PRE + "INSERT DATA { ex:a ex:p 1 . ex:b ex:p 2 . "
                             "GRAPH ex:g { ex:c ex:p 3 } }")
            q = PRE + "SELECT ?s WHERE { ?s ex:p ?o } ORDER BY ?s"
            assert values(await lab.select(q), "s") == [EX + "a", EX + "b"]
            async with lab.http.post(lab.base + "/query", data={"query": q}) as r:
                assert r.status == 200
                assert r.headers["Content-Type"].startswith("application/sparql-results+json")
            async with lab.http.post(lab.base + "/query", data=q,
                                     headers={"Content-Type": "application/sparql-query",
                                              "Accept": "text/csv"}) as r:
                assert r.status == 200 and r.content_type == "text/csv"
                assert (await r.text()).split() == ["s", EX + "a", EX + "b"]
            for accept, kind, needle in (
                    ("application/sparql-results+xml", "application/sparql-results+xml",
                     "<sparql"),
                    ("text/tab-separated-values", "text/tab-separated-values", "?s"),
                    ("text/html;q=0.9, application/json;q=0.5", "application/json", "bindings")):
                async with lab.http.get(lab.base + "/query", params={"query": q},
                                        headers={"Accept": accept}) as r:
                    assert r.status == 200 and r.content_type == kind
                    assert needle in await r.text()
            construct = PRE + "CONSTRUCT WHERE { ?s ex:p ?o }"
            for accept, kind in (("", "text/turtle"),
                                 ("application/n-triples", "application/n-triples")):
                async with lab.http.get(lab.base + "/query", params={"query": construct},
                                        headers={"Accept": accept}) as r:
                    assert r.status == 200 and r.content_type == kind
                    text = await r.text()
                    assert f"<{EX}b>" in text and f"<{EX}c>" not in text  # default graph only
            async with lab.http.get(lab.base + "/query", params={"query": construct},
                                    headers={"Accept": "text/csv"}) as r:
                assert r.status == 406
                assert (await r.json())["status_code"] == 406
            # the dataset parameters
            everything = PRE + "SELECT ?s WHERE { { ?s ex:p ?o } UNION { GRAPH ?g { ?s ex:p ?o } } }"
            assert values(await lab.select(everything, **{"default-graph-uri": EX + "g"}),
                          "s") == [EX + "c"]
            named = await lab.select(everything, **{"named-graph-uri": EX + "g"})
            assert values(named, "s") == [EX + "c"]  # the default graph is empty then
    run(main())


def test_bad_requests_get_clear_statuses():
    async def main():
        async with Lab() as lab:
            async with lab.http.get(lab.base + "/query", params={"default-graph-uri": EX}) as r:
                assert r.status == 400 and "no query" in (await r.json())["error_description"]
            async with lab.http.get(lab.base + "/query") as r:  # the Service Description
                assert r.status == 200 and r.content_type == "text/turtle"
            async with lab.http.get(lab.base + "/query", params={"query": "SELECT WHERE"}) as r:
                body = await r.json()
                assert r.status == 400 and body["error"] == "invalid_query"
            async with lab.http.post(lab.base + "/query", data="SELECT * {}",
                                     headers={"Content-Type": "text/plain"}) as r:
                assert r.status == 415
            async with lab.http.get(lab.base + "/update", params={"update": "CLEAR ALL"}) as r:
                assert r.status == 405
            body = await lab.update("INSERT DATA { <a> <b> ", status=400)
            assert body["error"] == "invalid_update" and body["status_code"] == 400
            body = await lab.update(PRE + "LOAD <http://example.org/data.ttl>", status=501)
            assert "LOAD" in body["error_description"]
            body = await lab.update(PRE + "DELETE DATA { _:b ex:p 1 }", status=400)
            assert "blank nodes" in body["error_description"]
            async with lab.http.post(lab.base + "/update", data="x" * (2 << 20),
                                     headers=UPDATE) as r:
                assert r.status == 413
            assert await lab.select("SELECT * WHERE { ?s ?p ?o }") == []  # nothing applied
    run(main())


def test_a_function_the_engine_lacks_is_a_client_error_naming_it(caplog):
    """An update or query calling a function pyoxigraph does not have is 400 naming it, with no
    traceback in the log (it is the client's request, not a failure of the SIB)."""
    f = "http://example.org/f"

    async def main():
        async with Lab() as lab:
            body = await lab.update(
                PRE + f"INSERT {{ ex:s ex:p ?o }} WHERE {{ BIND(<{f}>(1) AS ?o) }}", status=400)
            assert f in body["error_description"], body
            async with lab.http.get(lab.base + "/query", params={
                    "query": f"SELECT ?o WHERE {{ BIND(<{f}>(1) AS ?o) }}"}) as r:
                body = await r.json()
                assert r.status == 400 and f in body["error_description"], body
            assert await lab.select("SELECT * WHERE { ?s ?p ?o }") == []

    with caplog.at_level("INFO"):
        run(main())
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


def test_a_form_post_takes_the_dataset_in_its_url_too():
    """`POST /query?default-graph-uri=G` and `POST /update?using-graph-uri=G` with a form body
    run on G, as a GET with those parameters does (not on the default graph without a word);
    the operation given in the URL and the body is two operations: 400."""
    g = EX + "g"

    async def main():
        async with Lab() as lab:
            await lab.update(PRE + "INSERT DATA { ex:d ex:p 1 . GRAPH ex:g { ex:n ex:p 2 } }")
            async with lab.http.post(lab.base + "/query", params={"default-graph-uri": g},
                                     data={"query": "SELECT ?s WHERE { ?s ?p ?o }"}) as r:
                body = await r.json()
                assert r.status == 200, body
            assert values(body["results"]["bindings"], "s") == [EX + "n"]
            async with lab.http.post(lab.base + "/update", params={"using-graph-uri": g},
                                     data={"update": PRE + "INSERT { ?s ex:seen true } "
                                           "WHERE { ?s ex:p ?o }"}) as r:
                assert r.status == 200, await r.text()
            assert values(await lab.select(PRE + "SELECT ?s WHERE { ?s ex:seen ?o }"),
                          "s") == [EX + "n"]
            async with lab.http.post(lab.base + "/query", params={"query": "ASK {}"},
                                     data={"query": "ASK {}"}) as r:
                assert r.status == 400
    run(main())


def test_updates_apply_whole_or_not_at_all():
    async def main():
        async with Lab() as lab:
            await lab.update(PRE + "CREATE GRAPH ex:g")
            # the second operation fails: nothing of the first is written
            body = await lab.update(PRE + "INSERT DATA { ex:a ex:p 1 } ; CREATE GRAPH ex:g",
                                    status=400)
            assert "exists" in body["error_description"]
            assert await lab.select("SELECT * WHERE { ?s ?p ?o }") == []
            # SILENT: the failing operation is skipped, the rest applies
            await lab.update(PRE + "INSERT DATA { ex:a ex:p 1 } ; CREATE SILENT GRAPH ex:g")
            assert len(await lab.select("SELECT * WHERE { ?s ?p ?o }")) == 1
    run(main())


def test_every_update_operation():
    async def main():
        async with Lab() as lab:
            q_all = "SELECT ?s ?p ?o ?g WHERE { { ?s ?p ?o } UNION { GRAPH ?g { ?s ?p ?o } } }"

            async def state():
                return sorted((b["s"]["value"].replace(EX, ""), b["o"]["value"],
                               b.get("g", {}).get("value", "").replace(EX, ""))
                              for b in await lab.select(q_all))

            assert await lab.update(PRE + "INSERT DATA { ex:a ex:p 1 , 2 . "
                                    "GRAPH ex:g { ex:b ex:p 3 } }") == {"added": 3, "removed": 0}
            # DELETE/INSERT WHERE: deletions first, an unchanged quad is no change
            assert await lab.update(PRE + "DELETE { ?s ex:p ?o } INSERT { ?s ex:p 2 } "
                                    "WHERE { ?s ex:p ?o }") == {"added": 0, "removed": 1}
            assert await state() == [("a", "2", ""), ("b", "3", "g")]
            # WITH: the graph of the WHERE and of the template's plain triples
            await lab.update(PRE + "WITH ex:g INSERT { ?s ex:q ?o } WHERE { ?s ex:p ?o }")
            rows_g = await lab.select(PRE + "SELECT ?p WHERE { GRAPH ex:g { ex:b ?p 3 } }")
            assert values(rows_g, "p") == [EX + "p", EX + "q"]
            # USING, and the protocol's using-graph-uri
            await lab.update(PRE + "INSERT { ex:from-g ex:p ?o } USING ex:g WHERE { ?s ex:q ?o }")
            assert ("from-g", "3", "") in await state()
            await lab.update(PRE + "INSERT { ex:via-param ex:p ?o } WHERE { ?s ex:q ?o }",
                             params={"using-graph-uri": EX + "g"})
            assert ("via-param", "3", "") in await state()
            await lab.update(PRE + "INSERT { ex:x ex:p 1 } USING ex:g WHERE { ?s ?p ?o }",
                             status=400, params={"using-graph-uri": EX + "g"})
            # DELETE WHERE
            await lab.update(PRE + "DELETE WHERE { ?s ex:p 3 . GRAPH ex:g { ?t ex:q 3 } }")
            assert not [r for r in await state() if r[0] == "from-g"]
            # blank nodes in a template: fresh for each solution
            await lab.update(PRE + "INSERT { ?s ex:seen [ ex:by ex:me ] } "
                             "WHERE { VALUES ?s { ex:a ex:b } }")
            seen = await lab.select(PRE + "SELECT ?b WHERE { ?s ex:seen ?b }")
            assert len(seen) == 2 and len({b["b"]["value"] for b in seen}) == 2
            # graph management
            await lab.update(PRE + "COPY ex:g TO ex:h ; ADD DEFAULT TO ex:h")
            in_h = await lab.select(PRE + "SELECT ?s WHERE { GRAPH ex:h { ?s ?p ?o } }")
            assert EX + "a" in values(in_h, "s") and EX + "b" in values(in_h, "s")
            await lab.update(PRE + "MOVE ex:h TO ex:k ; CLEAR GRAPH ex:g")
            names = await lab.select("SELECT DISTINCT ?g WHERE { GRAPH ?g { ?s ?p ?o } }")
            assert values(names, "g") == [EX + "k"]
            await lab.update("DROP ALL")
            assert await state() == []
            body = await lab.update(PRE + "DROP GRAPH ex:nothing", status=400)
            assert "no such graph" in body["error_description"]
            await lab.update(PRE + "DROP SILENT GRAPH ex:nothing")
    run(main())


#: RFC 3986 §5.4's examples against its base `http://a/b/c/d;p?q`, normal and abnormal, and an
#: empty fragment (what `urllib.parse.urljoin` drops).
RFC3986 = {
    "g:h": "g:h", "g": "http://a/b/c/g", "./g": "http://a/b/c/g", "g/": "http://a/b/c/g/",
    "/g": "http://a/g", "//g": "http://g", "?y": "http://a/b/c/d;p?y",
    "g?y": "http://a/b/c/g?y", "#s": "http://a/b/c/d;p?q#s", "g#s": "http://a/b/c/g#s",
    "g?y#s": "http://a/b/c/g?y#s", ";x": "http://a/b/c/;x", "g;x?y#s": "http://a/b/c/g;x?y#s",
    "": "http://a/b/c/d;p?q", ".": "http://a/b/c/", "..": "http://a/b/", "../g": "http://a/b/g",
    "../..": "http://a/", "../../g": "http://a/g", "../../../g": "http://a/g",
    "/./g": "http://a/g", "/../g": "http://a/g", "g.": "http://a/b/c/g.", "..g": "http://a/b/c/..g",
    "./../g": "http://a/b/g", "./g/.": "http://a/b/c/g/", "g/../h": "http://a/b/c/h",
    "g;x=1/../y": "http://a/b/c/y", "g?y/../x": "http://a/b/c/g?y/../x",
    "g#s/../x": "http://a/b/c/g#s/../x", "http:g": "http:g",
    "#": "http://a/b/c/d;p?q#", "http://example.org/ns#": "http://example.org/ns#",
}


@pytest.mark.parametrize("relative, resolved", RFC3986.items())
def test_update_iris_resolve_by_rfc_3986(relative, resolved):
    text = f"BASE <http://a/b/c/d;p?q> CREATE GRAPH <{relative}>"
    assert parse_update(text)[0].graphs == (IRI(resolved),)
    (op,) = parse_update(f"BASE <http://a/b/c/d;p?q> INSERT DATA {{ <{relative}> <p> 1 }}")
    assert op.insert[0].subject.value == resolved
    assert resolve_iri("http://a/b/c/d;p?q", relative) == resolved


def test_a_relative_iri_without_a_base_is_a_syntax_error():
    for text in ("CREATE GRAPH <g>", "BASE <b/> CREATE GRAPH <http://a/g>"):
        with pytest.raises(SparqlSyntaxError, match="no BASE"):
            parse_update(text)


def test_base_before_a_prefix_ending_in_hash_keeps_the_hash():
    """The prologue's IRIs resolve by RFC 3986: `ns#` against another base stays `ns#`, so what
    INSERT DATA stores is `…/ns#s`, and DELETE DATA with the same prologue removes it."""
    prologue = "BASE <http://example.org/b/> PREFIX : <http://example.org/ns#> "

    async def main():
        async with Lab() as lab:
            assert await lab.update(prologue + "INSERT DATA { :s :p 1 }") == {
                "added": 1, "removed": 0}
            stored = await lab.select("SELECT ?s ?p WHERE { ?s ?p 1 }")
            assert values(stored, "s") == ["http://example.org/ns#s"]
            assert values(stored, "p") == ["http://example.org/ns#p"]
            assert await lab.update(prologue + "DELETE DATA { :s :p 1 }") == {
                "added": 0, "removed": 1}
            assert await lab.select("SELECT * WHERE { ?s ?p ?o }") == []
    run(main())


# -- SE Protocol ------------------------------------------------------------------------------

def test_subscribe_notifications_as_the_reference_broker_sends_them():
    async def main():
        async with Lab() as lab, lab.http.ws_connect(lab.ws_url) as ws:
            await lab.update(PRE + "INSERT DATA { ex:a ex:v 1 }")
            first = await lab.subscribe(ws, PRE + "SELECT ?s ?v WHERE { ?s ex:v ?v }", "temps",
                                        authorization="Bearer whatever", unknown=True)
            n = first["notification"]
            assert n["sequence"] == 0 and n["alias"] == "temps"
            assert n["spuid"].startswith("sepa://subscription/")
            assert n["addedResults"]["head"]["vars"] == ["s", "v"]
            assert values(n["addedResults"]["results"]["bindings"], "v") == ["1"]
            assert n["removedResults"] == {"head": {"vars": ["s", "v"]},
                                           "results": {"bindings": []}}
            await lab.update(PRE + "INSERT DATA { ex:a ex:other 5 }")  # not in the result
            await lab.update(PRE + "DELETE DATA { ex:a ex:v 1 } ; INSERT DATA { ex:a ex:v 2 }")
            n = (await receive(ws))["notification"]
            assert n["sequence"] == 1 and "alias" not in n and n["spuid"] == first[
                "notification"]["spuid"]
            assert values(n["addedResults"]["results"]["bindings"], "v") == ["2"]
            assert values(n["removedResults"]["results"]["bindings"], "v") == ["1"]
            await ws.send_json({"unsubscribe": {"spuid": n["spuid"]}})
            assert await receive(ws) == {"unsubscribed": {"spuid": n["spuid"]}}
            assert not lab.gate.broker.subscriptions
    run(main())


def test_error_frames_and_liberal_input():
    async def main():
        async with Lab(max_socket_subscriptions=2) as lab, \
                lab.http.ws_connect(lab.ws_url) as ws:
            await ws.send_str("{not json")
            err = await receive(ws)
            assert err["status_code"] == 400 and err["error"] and err["error_description"]
            await ws.send_json({"ping": {}})
            assert "unknown primitive" in (await receive(ws))["error_description"]
            err = await lab.subscribe(ws, "SELECT WHERE {", "broken")
            assert err["alias"] == "broken" and err["status_code"] == 400
            await ws.send_json({"unsubscribe": {"spuid": "sepa://subscription/none"}})
            assert (await receive(ws))["status_code"] == 404
            # graph URIs as a string or a list
            await lab.update(PRE + "INSERT DATA { GRAPH ex:g { ex:a ex:p 1 } }")
            for graphs in (EX + "g", [EX + "g"]):
                n = await lab.subscribe(ws, "SELECT ?s WHERE { ?s ?p ?o }", "g",
                                        **{"default-graph-uri": graphs})
                assert len(n["notification"]["addedResults"]["results"]["bindings"]) == 1
            err = await lab.subscribe(ws, "SELECT * WHERE { ?s ?p ?o }", "third")
            assert err["status_code"] == 429 and err["alias"] == "third"
            await ws.send_bytes(b"\x00")
            assert (await receive(ws))["status_code"] == 400
            assert len(lab.gate.broker.subscriptions) == 2
            await ws.send_str(json.dumps({"subscribe": {"sparql": "#" * (70 << 10)}}))
            closed = await ws.receive(10)  # over the 64 KiB frame limit: closed, 1009
            assert closed.type == aiohttp.WSMsgType.CLOSE and closed.data == 1009
        # the socket closed: its subscriptions ended
        for _ in range(100):
            if not lab.gate.broker.subscriptions:
                break
            await asyncio.sleep(0.05)
        assert not lab.gate.broker.subscriptions
    run(main())


def test_a_socket_whose_queue_overflows_is_closed_and_its_subscriptions_end():
    async def main():
        async with Lab(max_socket_queue=4) as lab:
            reader = await lab.http.ws_connect(lab.ws_url)
            await lab.subscribe(reader, PRE + "SELECT ?v WHERE { ex:a ex:v ?v }")
            (sock,) = lab.gate.sockets
            other = await lab.http.ws_connect(lab.ws_url)
            await lab.subscribe(other, PRE + "SELECT ?v WHERE { ex:a ex:v ?v }")
            # more frames at once than the socket's queue holds (as when its client stops
            # reading and the writer waits on TCP): the socket is closed, not the SIB's memory
            for i in range(10):
                sock.send({"filler": i})
            closed = await reader.receive(10)
            while closed.type == aiohttp.WSMsgType.TEXT:
                closed = await reader.receive(10)
            assert closed.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
            for _ in range(100):
                if len(lab.gate.broker.subscriptions) == 1:
                    break
                await asyncio.sleep(0.05)
            assert len(lab.gate.broker.subscriptions) == 1  # the other socket's stays
            assert lab.gate.overflowed == 1  # ksp_sepa_sockets_overflowed_total
            await lab.update(PRE + "INSERT DATA { ex:a ex:v 3 }")
            assert (await receive(other))["notification"]["sequence"] == 1
            await other.close()
            await reader.close()
    run(main())


def test_ask_optional_and_default_graph_subscriptions_are_exact():
    """vaimee/SEPA#94 (ASK), vaimee/SEPA#32 (OPTIONAL deltas), vaimee/SEPA#68 (changes in
    the default graph)."""
    async def main():
        async with Lab() as lab, lab.http.ws_connect(lab.ws_url) as ws:
            ask = (await lab.subscribe(ws, PRE + "ASK { ex:door ex:open true }", "ask"))
            assert ask["notification"]["addedResults"] == {"head": {}, "boolean": False}
            await lab.update(PRE + "INSERT DATA { ex:door ex:open true }")
            n = (await receive(ws))["notification"]
            assert n["addedResults"]["boolean"] is True and n["removedResults"]["boolean"] is False
            await ws.send_json({"unsubscribe": {"spuid": n["spuid"]}})
            await receive(ws)

            opt = PRE + "SELECT ?s ?age WHERE { ?s a ex:Person OPTIONAL { ?s ex:age ?age } }"
            await lab.update(PRE + "INSERT DATA { ex:ann a ex:Person }")
            first = (await lab.subscribe(ws, opt, "opt"))["notification"]
            assert first["addedResults"]["results"]["bindings"] == [
                {"s": {"type": "uri", "value": EX + "ann"}}]
            await lab.update(PRE + "INSERT DATA { ex:ann ex:age 30 }")
            n = (await receive(ws))["notification"]
            assert n["removedResults"]["results"]["bindings"] == [
                {"s": {"type": "uri", "value": EX + "ann"}}]  # the row without ?age goes
            assert values(n["addedResults"]["results"]["bindings"], "age") == ["30"]
            await ws.send_json({"unsubscribe": {"spuid": n["spuid"]}})
            await receive(ws)

            # the default graph: a change there is seen; one in a named graph is not
            await lab.subscribe(ws, PRE + "SELECT ?o WHERE { ex:s ex:p ?o }", "dg")
            await lab.update(PRE + "INSERT DATA { GRAPH ex:g { ex:s ex:p 1 } }")
            await lab.update(PRE + "INSERT DATA { ex:s ex:p 2 }")
            n = (await receive(ws))["notification"]
            assert n["sequence"] == 1
            assert values(n["addedResults"]["results"]["bindings"], "o") == ["2"]
    run(main())


def test_ksp_and_sepa_see_each_others_updates():
    async def main():
        async with Lab(ksp=True) as lab, lab.http.ws_connect(lab.ws_url) as ws:
            port = lab.server.udp.port
            async with connect(f"udp://127.0.0.1:{port}") as kp:
                await lab.subscribe(ws, PRE + "SELECT ?v WHERE { ex:t ex:temp ?v }")
                async with kp.subscribe(PRE + "SELECT ?v WHERE { ex:t ex:hum ?v }") as sub:
                    await kp.update(PRE + "INSERT DATA { ex:t ex:temp 21 }")  # KSP → SEPA
                    n = (await receive(ws))["notification"]
                    assert values(n["addedResults"]["results"]["bindings"], "v") == ["21"]
                    await lab.update(PRE + "INSERT DATA { ex:t ex:hum 40 }")  # SEPA → KSP
                    ind = await asyncio.wait_for(sub.__anext__(), 10)
                    assert ind.seq is None and not ind.result.rows  # the RES's initial state
                    ind = await asyncio.wait_for(sub.__anext__(), 10)
                    assert [str(r[0]) for r in ind.result.rows] == ["40"]
    run(main())


def test_the_anonymous_policy_holds_for_sepa_clients():
    async def main():
        policy = AccessPolicy(anonymous={"read": ["default"], "write": []})
        async with Lab(access=policy) as lab, lab.http.ws_connect(lab.ws_url) as ws:
            body = await lab.update(PRE + "INSERT DATA { ex:a ex:p 1 }", status=403)
            assert body["error"] == "forbidden"
            for query, status in (
                    ("SELECT * WHERE { ?s ?p ?o }", 200),  # the default graph only
                    ("SELECT * WHERE { GRAPH ?g { ?s ?p ?o } }", 403),  # every graph
                    ("SELECT * WHERE { GRAPH <http://example.org/g> { ?s ?p ?o } }", 403),
                    ("SELECT * FROM <http://example.org/g> WHERE { ?s ?p ?o }", 403)):
                async with lab.http.get(lab.base + "/query", params={"query": query}) as r:
                    assert r.status == status, query
            err = await lab.subscribe(ws, "SELECT * WHERE { GRAPH ?g { ?s ?p ?o } }", "x")
            assert err["status_code"] == 403 and err["alias"] == "x"
    run(main())


def test_an_anonymous_subscription_ends_when_a_new_policy_stops_anonymous_reads():
    """SIGHUP's path (`Sib.set_access`) on the plain port: the policy in force when a change
    comes is the one that counts, so a subscriber the new policy does not allow is told (an
    error frame with its spuid and alias) and hears nothing more."""
    async def main():
        policy = AccessPolicy(anonymous={"read": ["*"], "write": ["*"]})
        async with Lab(access=policy) as lab, lab.http.ws_connect(lab.ws_url) as ws:
            first = await lab.subscribe(ws, PRE + "SELECT ?v WHERE { ex:a ex:v ?v }", "temps")
            spuid = first["notification"]["spuid"]
            lab.sib.set_access(AccessPolicy(anonymous="none"))
            ended = await receive(ws)
            assert (ended["status_code"], ended["alias"], ended["spuid"]) == (403, "temps", spuid)
            assert not lab.gate.broker.subscriptions
            lab.sib.set_access(policy)  # open again: the ended subscription stays ended
            await lab.update(PRE + "INSERT DATA { ex:a ex:v 1 }")
            with pytest.raises(asyncio.TimeoutError):
                await ws.receive(0.5)
    run(main())


# -- exactness against re-evaluation ----------------------------------------------------------

_SUBJECTS = ["a", "b", "c"]
_OPS = st.lists(st.tuples(st.sampled_from(["insert", "delete", "graph", "modify"]),
                          st.sampled_from(_SUBJECTS), st.integers(0, 3)), min_size=1,
                max_size=12)
_QUERIES = [
    PRE + "SELECT ?s ?v WHERE { ?s ex:v ?v }",
    PRE + "SELECT ?v WHERE { ?s ex:v ?v }",  # a multiset: equal rows
    PRE + "SELECT ?s ?v ?w WHERE { ?s ex:v ?v OPTIONAL { ?s ex:w ?w } }",
    PRE + "SELECT ?s (COUNT(?v) AS ?n) WHERE { ?s ex:v ?v } GROUP BY ?s",
    PRE + "SELECT ?x WHERE { { ?x ex:v 1 } UNION { GRAPH ?g { ?x ex:v ?any } } }",
    PRE + "ASK { ?s ex:v 3 }",
    PRE + "CONSTRUCT { ?s ex:seen ?v } WHERE { ?s ex:v ?v FILTER(?v > 1) }",
]


def _text(op: str, s: str, v: int) -> str:
    if op == "insert":
        return PRE + f"INSERT DATA {{ ex:{s} ex:v {v} . ex:{s} ex:w {v} }}"
    if op == "delete":
        return PRE + f"DELETE WHERE {{ ex:{s} ex:v ?v }}"
    if op == "graph":
        return PRE + f"INSERT DATA {{ GRAPH ex:g {{ ex:{s} ex:v {v} }} }}"
    return PRE + f"DELETE {{ ?s ex:w ?w }} INSERT {{ ?s ex:v {v} }} WHERE {{ ?s ex:w ?w }}"


@pytest.mark.slow
@settings(max_examples=examples(10, 25), deadline=None,
          suppress_health_check=list(HealthCheck))
@given(ops=_OPS)
def test_notifications_add_up_to_the_result(ops):
    """The first notification plus every later one's added minus removed rows is, after each
    update, exactly the query's result evaluated afresh (multisets)."""
    async def main():
        async with Lab() as lab, lab.http.ws_connect(lab.ws_url) as ws:
            held = {}
            for i, q in enumerate(_QUERIES):
                n = (await lab.subscribe(ws, q, str(i)))["notification"]
                held[n["spuid"]] = (q, n["addedResults"])
            state = {spuid: (rows(r) if "results" in r else r["boolean"])
                     for spuid, (q, r) in held.items()}
            for op in ops:
                await lab.update(_text(*op))
                await lab.update(PRE + "INSERT DATA { ex:marker ex:m 0 }")
                await lab.update(PRE + "DELETE DATA { ex:marker ex:m 0 }")
                # drain what this update sent (markers change none of the queries)
                while True:
                    try:
                        msg = await ws.receive(0.3)
                    except asyncio.TimeoutError:
                        break
                    n = json.loads(msg.data)["notification"]
                    added, removed = n["addedResults"], n["removedResults"]
                    if "boolean" in added:
                        assert removed["boolean"] == state[n["spuid"]]
                        state[n["spuid"]] = added["boolean"]
                    else:
                        assert not (rows(removed) - state[n["spuid"]])  # only what was there
                        state[n["spuid"]] = state[n["spuid"]] - rows(removed) + rows(added)
                for spuid, (q, _) in held.items():
                    async with lab.http.get(lab.base + "/query", params={"query": q}) as r:
                        fresh = await r.json(content_type=None) if "CONSTRUCT" not in q \
                            else None
                    if fresh is None:
                        continue  # checked below through the broker's own rows
                    want = fresh["boolean"] if "boolean" in fresh else rows(fresh)
                    assert state[spuid] == want, (q, op)
            for spuid, (q, _) in held.items():
                if "CONSTRUCT" in q:
                    ev = lab.gate.broker.subscriptions[spuid].evaluation
                    assert Counter({json.dumps(ev.row_of[k], sort_keys=True): n
                                    for k, n in ev.rows.items()}) == state[spuid]
    run(main())


@pytest.mark.parametrize("text", [
    "INSERT DATA { ex:a ex:p 1 }",
    "INSERT DATA { GRAPH ex:closed { ex:a ex:p 1 } }",
    "INSERT DATA { GRAPH ex:closed { ex:here ex:p 1 } }",  # already there: refused all the same
    "DELETE WHERE { GRAPH ex:closed { ?s ?p ?o } }",
    "INSERT { GRAPH ?g { ex:a ex:p 1 } } WHERE { GRAPH ?g { ?s ?p ?o } }",
    "WITH ex:closed INSERT { ex:a ex:p 1 } WHERE { }",
    "CLEAR ALL", "CLEAR NAMED", "CLEAR DEFAULT", "DROP GRAPH ex:nowhere", "CREATE GRAPH ex:c2",
    "COPY ex:open TO ex:closed", "ADD ex:open TO ex:closed", "MOVE ex:open TO ex:closed",
    "MOVE ex:closed TO ex:open",
])
def test_writes_are_checked_from_the_update_text(text):
    """Every graph an operation may write needs write permission, decided before anything is
    evaluated: a refusal says nothing about what the store holds, and nothing is applied."""
    async def main():
        policy = AccessPolicy(anonymous={"read": ["*"], "write": [EX + "open"]})
        async with Lab(access=policy) as lab:
            lab.sib.store.apply(Delta(((IRI(EX + "here"), IRI(EX + "p"), Literal.of(1),
                                        IRI(EX + "closed")),
                                       (IRI(EX + "o"), IRI(EX + "p"), Literal.of(2),
                                        IRI(EX + "open")))))
            before = len(lab.sib.store)
            body = await lab.update(PRE + text, status=403)
            assert body["error"] == "forbidden"
            assert len(lab.sib.store) == before
            await lab.update(PRE + "INSERT DATA { GRAPH ex:open { ex:b ex:p 3 } }")
            assert len(lab.sib.store) == before + 1
    run(main())


# Shapes the screening handles in different ways: constant predicates, paths (`+` screened,
# `*` and negated sets not), NOT EXISTS and MINUS, GRAPH ?g {} (reads graph names), variable
# predicates, subqueries and aggregates.
_DIFF_QUERIES = [
    PRE + "SELECT ?s ?t WHERE { ?s ex:link+ ?t }",
    PRE + "SELECT ?s WHERE { ?s ex:link* ex:c }",
    PRE + "SELECT ?s ?v WHERE { ?s ex:v ?v FILTER NOT EXISTS { ?s ex:link ?t } }",
    PRE + "SELECT ?s WHERE { ?s ex:v ?v MINUS { ?s ex:w ?w } }",
    PRE + "SELECT ?g WHERE { GRAPH ?g { } }",
    PRE + "SELECT ?g (COUNT(*) AS ?n) WHERE { GRAPH ?g { ?s ex:v ?v } } GROUP BY ?g",
    PRE + "SELECT ?s ?v ?w WHERE { ?s ex:v ?v OPTIONAL { ?s ex:w ?w } }",
    PRE + "ASK { ex:a ex:link ex:b }",
    PRE + "SELECT (MAX(?v) AS ?m) WHERE { { SELECT ?v WHERE { ?s ex:v ?v } } }",
    PRE + "CONSTRUCT { ?s ex:seen ?t } WHERE { ?s ex:link|^ex:link ?t }",
    PRE + "SELECT ?s WHERE { ?s !ex:v ?o }",
    PRE + "SELECT ?p ?o WHERE { ex:a ?p ?o }",
    PRE + "SELECT ?s WHERE { ?s ex:other 2 }",
]
_DIFF_OPS = st.lists(st.tuples(
    st.sampled_from(["insert", "w", "link", "unlink", "delete", "graph", "drop", "other",
                     "modify"]),
    st.sampled_from(_SUBJECTS), st.sampled_from(_SUBJECTS), st.integers(0, 3)),
    min_size=1, max_size=10)


def _diff_text(op: str, s: str, t: str, v: int) -> str:
    return PRE + {
        "insert": f"INSERT DATA {{ ex:{s} ex:v {v} }}",
        "w": f"INSERT DATA {{ ex:{s} ex:w {v} }}",
        "link": f"INSERT DATA {{ ex:{s} ex:link ex:{t} }}",
        "unlink": f"DELETE WHERE {{ ex:{s} ex:link ?t }}",
        "delete": f"DELETE WHERE {{ ex:{s} ex:v ?v }}",
        "graph": f"INSERT DATA {{ GRAPH ex:g{v} {{ ex:{s} ex:v {v} }} }}",
        "drop": f"DROP SILENT GRAPH ex:g{v}",
        "other": f"INSERT DATA {{ ex:{s} ex:other {v} }}",
        "modify": f"DELETE {{ ?s ex:w ?w }} INSERT {{ ?s ex:v {v} }} WHERE {{ ?s ex:w ?w }}",
    }[op]


@pytest.mark.slow
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=_DIFF_OPS)
def test_smart_subscriptions_notify_exactly_what_naive_ones_do(ops):
    """The naive broker (every subscription evaluated after every change) is the oracle: the
    smart one, screening by the queries' triple patterns, sends the same notifications."""
    async def trace(lab: Lab) -> list:
        seen = []
        async with lab.http.ws_connect(lab.ws_url) as ws:
            spuids = {}
            for i, q in enumerate(_DIFF_QUERIES + [PRE + "SELECT ?n { ex:sentinel ex:n ?n }"]):
                spuids[(await lab.subscribe(ws, q, str(i)))["notification"]["spuid"]] = i
            for n, op in enumerate(ops):
                await lab.update(_diff_text(*op))
                # every notification of the update comes before the sentinel's
                await lab.update(PRE + f"DELETE WHERE {{ ex:sentinel ex:n ?n }}; "
                                       f"INSERT DATA {{ ex:sentinel ex:n {n} }}")
                while True:
                    body = (await receive(ws))["notification"]
                    i = spuids[body["spuid"]]
                    if i == len(_DIFF_QUERIES):
                        break
                    added, removed = body["addedResults"], body["removedResults"]
                    seen.append((n, i, body["sequence"],
                                 added.get("boolean", rows(added) if "results" in added else 0),
                                 removed.get("boolean",
                                             rows(removed) if "results" in removed else 0)))
        return sorted(seen, key=repr)

    async def main():
        async with Lab(smart=False) as naive:
            want = await trace(naive)
            naive_evaluations = naive.gate.broker.evaluations
        async with Lab() as smart:
            assert await trace(smart) == want
            assert smart.gate.broker.evaluations <= naive_evaluations
    run(main())


def test_a_change_no_subscription_reads_evaluates_nothing():
    async def main():
        async with Lab() as lab, lab.http.ws_connect(lab.ws_url) as ws:
            for i in range(50):
                await lab.subscribe(ws, PRE + f"SELECT ?v WHERE {{ ex:s{i} ex:value ?v }}", str(i))
            await lab.subscribe(ws, PRE + "SELECT ?s WHERE { ?s ex:link* ex:c }", "unscreened")
            broker = lab.gate.broker
            before = broker.evaluations
            await lab.update(PRE + "INSERT DATA { ex:s7 ex:value 1 . ex:s9 ex:other 2 }")
            assert broker.evaluations - before == 2  # ex:s7's and the unscreenable one
            n = (await receive(ws))["notification"]
            assert n["sequence"] == 1 and values(n["addedResults"]["results"]["bindings"],
                                                 "v") == ["1"]
            # creating a graph may change what any query reads (GRAPH ?g {}): all evaluated
            before = broker.evaluations
            await lab.update(PRE + "CREATE GRAPH ex:new")
            assert broker.evaluations - before == 51
    run(main())


@pytest.mark.slow
def test_ksp_sib_serves_the_gate_and_closes_it_cleanly():
    from sib.testing import SibProcess

    with SibProcess("--memory", "--udp-port", "0", "--tcp-port", "-1", "--coap-port", "-1",
                    "--sepa-http-port", "0", "--sepa-ws-port", "0") as sib:
        http, ws_port = sib.ports["http"], sib.ports["ws"]

        async def main():
            async with aiohttp.ClientSession() as s:
                async with s.ws_connect(f"ws://127.0.0.1:{ws_port}/subscribe") as ws:
                    await ws.send_json({"subscribe": {"sparql": "ASK { ?s ?p ?o }"}})
                    assert (await receive(ws))["notification"]["addedResults"]["boolean"] is False
                    async with s.post(f"http://127.0.0.1:{http}/update", headers=UPDATE,
                                      data="INSERT DATA { <urn:a> <urn:b> 1 }") as r:
                        assert r.status == 200
                    assert (await receive(ws))["notification"]["addedResults"]["boolean"] is True
                    sib.proc.send_signal(__import__("signal").SIGTERM)
                    msg = await ws.receive(30)
                    assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)

        run(main())
        assert sib.proc.wait(60) == 0


@pytest.mark.slow
def test_the_gate_ports_are_checked_at_startup(tmp_path):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "sib.cli", "--memory", "--sepa-ws-port",
                          "70000"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "sepa_ws_port = 70000" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.slow
def test_sepa_js_runs_unchanged_against_ksp_sib():
    """npm @arces-wot/sepa-js 0.13.2 (package.json), a SEPA client in the field: update, query,
    subscribe, the notification of a change, an error frame matched by its alias, unsubscribe."""
    import shutil
    import subprocess
    from pathlib import Path

    from sib.testing import SibProcess

    root = Path(__file__).resolve().parent.parent
    if shutil.which("node") is None or not (root / "node_modules/@arces-wot/sepa-js").is_dir():
        pytest.fail("node and npm's @arces-wot/sepa-js are installed by scripts/_env.sh")
    with SibProcess("--memory", "--udp-port", "-1", "--tcp-port", "-1", "--coap-port", "-1",
                    "--sepa-http-port", "0", "--sepa-ws-port", "0") as sib:
        out = subprocess.run(["node", str(root / "tests/sepajs/run.js"), "127.0.0.1",
                              str(sib.ports["http"]), str(sib.ports["ws"])],
                             capture_output=True, text=True, timeout=120)
    steps = {s.pop("step"): s for s in map(json.loads, out.stdout.splitlines())}
    assert out.returncode == 0, (out.stdout, out.stderr)
    assert steps["update"] == {"status": 200}
    assert steps["query"] == {"values": ["20"]}
    assert steps["subscribed"] == {"sequence": 0, "alias": "temps", "added": ["20"]}
    assert steps["notification"] == {"added": ["21"], "removed": ["20"]}
    assert steps["error"] == {"status_code": 400, "alias": "broken"}
    assert steps["unsubscribed"]["spuid"].startswith("sepa://subscription/")


def test_the_total_subscription_cap_and_the_full_queue():
    async def main():
        async with Lab(max_subscriptions=1) as lab, lab.http.ws_connect(lab.ws_url) as ws:
            await lab.subscribe(ws, "ASK { ?s ?p ?o }", "one")
            async with lab.http.ws_connect(lab.ws_url) as other:
                err = await lab.subscribe(other, "ASK { ?s ?p ?o }", "two")
                assert err["status_code"] == 429 and err["alias"] == "two"
            assert len(lab.gate.broker.subscriptions) == 1
        # a full scheduler queue: the SEPA work is refused at once, not queued
        sib = await Sib(max_queued=1).start()
        try:
            first, second = await asyncio.gather(sib.call(lambda: "done"), sib.call(lambda: 1),
                                                 return_exceptions=True)
            assert first == "done" and isinstance(second, asyncio.QueueFull)
            assert sib.core.metrics.limited == 1
        finally:
            await sib.close()
    run(main())


def test_one_address_holds_no_more_than_its_share_of_the_subscriptions():
    """`max_subscriptions_per_identity`: an anonymous client's subscriptions on all its sockets
    count against its address; past its share it gets 429 while another address still
    subscribes, below `max_subscriptions` in all; one it ends frees its place."""
    async def go():
        async with Lab(max_subscriptions=6, max_subscriptions_per_identity=3) as lab:
            flood = [await lab.http.ws_connect(lab.ws_url) for _ in range(2)]
            answers = [await lab.subscribe(flood[k % 2], PRE + f"ASK {{ ex:s{k} ?p ?o }}",
                                           f"f{k}") for k in range(6)]
            codes = [a.get("status_code", 200) for a in answers]
            assert codes == [200] * 3 + [429] * 3, answers
            assert "its share" in answers[3]["error_description"]
            connector = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))
            async with aiohttp.ClientSession(connector=connector) as other, \
                    other.ws_connect(lab.ws_url) as ws:
                first = await lab.subscribe(ws, "ASK { ?s ?p ?o }", "other")
                assert first["notification"]["sequence"] == 0, first
            spuid = answers[0]["notification"]["spuid"]
            await flood[0].send_json({"unsubscribe": {"spuid": spuid}})
            assert (await receive(flood[0]))["unsubscribed"]["spuid"] == spuid
            again = await lab.subscribe(flood[1], "ASK { ?s ?p ?o }", "again")
            assert again["notification"]["sequence"] == 0, again
            for ws in flood:
                await ws.close()

    run(go())


def test_one_address_holds_no_more_than_its_share_of_the_queue():
    """`Sib(max_queued_per_kp=)`: queries sent at once on many connections from one address
    queue at most its share, the rest answered 429 at once; a query from another address sent
    in the same instant is answered."""
    async def go():
        async with Lab(sib_options={"max_queued_per_kp": 2}) as lab:
            port = lab.gate.http_port
            query = f"GET /query?query=ASK%20%7B%7D HTTP/1.1\r\nHost: gate\r\n" \
                    f"Accept: application/sparql-results+json\r\n\r\n".encode()
            conns = [await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
                     for source in ("127.0.0.1",) * 12 + ("127.0.0.2",)]
            for _, writer in conns:
                writer.write(query)
            codes = [int((await asyncio.wait_for(reader.readline(), 30)).split()[1])
                     for reader, _ in conns]
            for _, writer in conns:
                writer.close()
            return codes

    codes = run(go())
    assert codes[-1] == 200 and set(codes[:-1]) == {200, 429}, codes


def test_gate_metrics_beside_the_ksp_ones():
    """Requests by kind, errors by status, open sockets, subscriptions, notifications and the
    latencies, on the SIB's Prometheus endpoint (its text format as scraped)."""
    from prometheus_client.parser import text_string_to_metric_families

    async def main():
        async with Lab() as lab, lab.http.ws_connect(lab.ws_url) as ws:
            q = PRE + "SELECT ?v WHERE { ex:t ex:v ?v }"
            await lab.subscribe(ws, q, "a")
            await lab.subscribe(ws, q, "b")  # shares the first one's evaluation
            await lab.update(PRE + "INSERT DATA { ex:t ex:v 1 }")
            await lab.select(q)
            await lab.update("INSERT DATA {", status=400)
            await ws.send_json({"nonsense": 1})
            for _ in range(3):
                await receive(ws)
            metrics = {s.name + str(sorted(s.labels.items())): s.value
                       for f in text_string_to_metric_families(lab.sib.core.metrics.render())
                       for s in f.samples}
        kinds = {k: metrics[f"ksp_sepa_requests_total[('kind', '{k}')]"]
                 for k in ("query", "update", "subscribe")}
        assert kinds == {"query": 1, "update": 2, "subscribe": 2}
        assert metrics["ksp_sepa_errors_total[('status', '400')]"] == 2  # HTTP and a frame
        assert metrics["ksp_sepa_sockets[]"] == 1
        assert metrics["ksp_sepa_subscriptions[]"] == 2
        assert metrics["ksp_sepa_evaluations_shared[]"] == 1
        assert metrics["ksp_sepa_notifications_total[]"] == 4  # 2 first ones, 2 of the insert
        assert metrics["ksp_sepa_notification_latency_seconds_count[]"] == 1
        assert metrics["ksp_sepa_request_latency_seconds_count[]"] == 2  # the good ones
        assert "ksp_indications_total[]" in metrics  # the KSP ones on the same endpoint
    run(main())


class StalledClient:
    """A WebSocket client on a raw socket that subscribes and then never reads: its small
    receive buffer fills, the kernel closes the TCP window, and the gate's writes back up."""

    def __init__(self, port: int) -> None:
        import base64
        import os
        import socket

        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect
        self.sock.connect(("127.0.0.1", port))
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET /subscribe HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                           "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
                           ).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.sock.recv(1)  # byte by byte: nothing after the handshake is read
        assert head.startswith(b"HTTP/1.1 101"), head

    def send_json(self, message: dict) -> None:
        import os
        import struct

        data, mask = json.dumps(message).encode(), os.urandom(4)
        assert len(data) < 65536
        head = bytes([0x81, 0x80 | 126]) + struct.pack("!H", len(data)) + mask
        self.sock.sendall(head + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def close(self) -> None:
        self.sock.close()


def test_a_client_that_never_reads_is_cut_off_through_real_tcp_backpressure():
    """No simulation: the client's TCP window closes, the gate's writer waits on it, the
    socket's queue fills, and the gate closes the connection (aborting it: a close frame cannot
    get through either) and ends its subscription; the SIB's memory for it is bounded, and
    updates and the other subscribers go on meanwhile."""
    big = "x" * 60_000

    async def main():
        async with Lab(max_socket_queue=8) as lab:
            query = PRE + "SELECT ?v WHERE { ex:a ex:v ?v }"
            stalled = await asyncio.to_thread(StalledClient, lab.gate.ws_port)
            stalled.send_json({"subscribe": {"sparql": query, "alias": "stalled"}})
            for _ in range(200):
                if lab.gate.broker.subscriptions:
                    break
                await asyncio.sleep(0.01)
            (sock,) = lab.gate.sockets
            other = await lab.http.ws_connect(lab.ws_url)
            await lab.subscribe(other, query)
            sequence = 0
            for i in range(400):
                await lab.update(PRE + f'INSERT DATA {{ ex:a ex:v "{i}{big}" }}')
                n = (await receive(other))["notification"]
                sequence += 1
                assert n["sequence"] == sequence
                assert len(sock.queue) <= 8  # bounded whatever the client does
                if sock not in lab.gate.sockets:
                    break
            else:
                raise AssertionError("the stalled socket was never cut off")
            assert sock.overflowed and lab.gate.overflowed == 1
            for _ in range(200):  # its subscription ends on the scheduler
                if len(lab.gate.broker.subscriptions) == 1:
                    break
                await asyncio.sleep(0.01)
            assert len(lab.gate.broker.subscriptions) == 1
            for _ in range(300):  # and the connection is gone, not left draining
                if sock.transport_gone():
                    break
                await asyncio.sleep(0.01)
            assert sock.transport_gone()
            assert i > 3  # it took real backpressure, not the first notification
            await other.close()
            stalled.close()
    run(main())


def test_shutdown_does_not_wait_on_a_client_that_never_reads():
    """A stalled client's window is shut, so its 1001 close frame cannot get through: the
    SIB's shutdown still ends, and leaves no connection behind (one stayed open, holding its
    buffered frames, before the gate aborted it)."""
    async def main():
        lab = Lab(max_socket_queue=1_000)
        await lab.__aenter__()
        try:
            stalled = await asyncio.to_thread(StalledClient, lab.gate.ws_port)
            stalled.send_json({"subscribe": {"sparql": PRE + "SELECT ?v WHERE { ex:a ex:v ?v }"}})
            await until(lambda: lab.gate.sockets and lab.gate.broker.subscriptions,
                        what="the stalled client's subscription")
            (sock,) = lab.gate.sockets
            i = 0
            deadline = asyncio.get_running_loop().time() + 60
            while sock.transport.get_write_buffer_size() == 0:  # until its window is full
                assert asyncio.get_running_loop().time() < deadline, \
                    f"the stalled client's TCP window still open after {i} updates"
                await lab.update(PRE + f'INSERT DATA {{ ex:a ex:v "{i}{"x" * 60_000}" }}')
                i += 1
                await asyncio.sleep(0.01)
        finally:
            await asyncio.wait_for(lab.__aexit__(None, None, None), 30)
        assert sock.transport_gone()
        stalled.close()
    run(main())


def test_connections_past_the_gate_s_limits_are_closed_at_accept():
    """With the guard `ksp-sib` gives the gate (`transports.limits.Guard`, its four listeners
    together): past the connections per address a new one from that address is closed before
    aiohttp reads a byte; past the connections in all, one from an address holding fewer than
    the biggest holder takes the place of that holder's connection that said nothing for the
    longest; the connections admitted go on serving (a subscriber gets its notification, past
    the keep-alive too), idle ones count, and one that ends, or that the keep-alive closes,
    frees its slot."""
    from transports.limits import ConnectionLimits, Guard

    async def dial(port: int, source: str):
        return await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))

    async def closed(conn) -> bool:
        return await closed_by_peer(conn[0])

    async def ask(conn, head: str, body: bytes = b"") -> bytes:
        reader, writer = conn
        writer.write(f"{head}\r\nHost: gate\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                     + body)
        await writer.drain()
        return await asyncio.wait_for(reader.readline(), 10)

    async def go():
        limits = ConnectionLimits(4, 2, max_buffered_bytes=None, frame_timeout=0.0)
        guard = Guard(limits, "sepa", lambda conn: conn.transport.abort())
        async with Lab(connections=guard) as lab:
            port, conns = lab.gate.http_port, []
            ws = await lab.http.ws_connect(lab.ws_url)  # 1 (127.0.0.1)
            await lab.subscribe(ws, PRE + "SELECT ?o WHERE { ex:s ex:p ?o }")
            for source in ("127.0.0.1", "127.0.0.1", "127.0.0.2", "127.0.0.2", "127.0.0.3"):
                conns.append(await dial(port, source))
            # conns[1]: past the per-address cap; conns[4] (.3, none yet) takes the place of
            # conns[0], the oldest that said nothing of the biggest holders (.1 and .2, two each)
            refused = [await closed(conns[k]) for k in (1, 0)]
            assert refused == [True, True]
            assert dict(guard.refused) == {"per address": 1, "reclaimed": 1}
            assert len(guard) == 4 and lab.sib.core.metrics.gauges["ksp_sepa_connections"][1]() == 4
            assert (await ask(conns[4], "GET /jsap HTTP/1.1")).startswith(b"HTTP/1.1 200")
            update = (PRE + "INSERT DATA { ex:s ex:p 1 }").encode()
            head = "POST /update HTTP/1.1\r\nContent-Type: application/sparql-update"
            assert (await ask(conns[3], head, update)).startswith(b"HTTP/1.1 200")
            note = (await receive(ws))["notification"]
            assert values(note["addedResults"]["results"]["bindings"], "o") == ["1"]
            conns[2][1].close()  # conns[2] idled until now; its end frees a slot
            for _ in range(500):
                if len(guard) == 3:
                    break
                await asyncio.sleep(0.02)
            conns.append(await dial(port, "127.0.0.3"))
            assert (await ask(conns[-1], "GET /jsap HTTP/1.1")).startswith(b"HTTP/1.1 200")
            assert len(guard) == 4
            await ws.close()
            for _, writer in conns:
                writer.close()

        # Past the keep-alive, a connection that says nothing (more) is closed, its slot free.
        guard = Guard(limits, "sepa", lambda conn: conn.transport.abort())
        async with Lab(connections=guard, keepalive=1.0) as lab:
            silent = await dial(lab.gate.http_port, "127.0.0.1")
            asked = await dial(lab.gate.http_port, "127.0.0.1")
            assert (await ask(asked, "GET /jsap HTTP/1.1")).startswith(b"HTTP/1.1 200")
            assert len(guard) == 2
            trickling = await dial(lab.gate.http_port, "127.0.0.2")
            trickling[1].write(b"GET /jsap HTTP/1.1\r\n")
            for _ in range(10):  # a header line every 0.3 s: never a whole request
                await asyncio.sleep(0.3)
                if trickling[0].at_eof() or trickling[1].is_closing():
                    break
                with contextlib.suppress(ConnectionError):
                    trickling[1].write(b"X-Slow: 1\r\n")
            assert await closed(trickling)
            await asyncio.wait_for(asked[0].read(), 10)  # the rest of the answer, then EOF
            assert await closed(silent)
            for _ in range(500):
                if not len(guard):
                    break
                await asyncio.sleep(0.02)
            assert len(guard) == 0 and not guard.refused
            for _, writer in (silent, asked, trickling):
                writer.close()

    run(go())


def test_idle_connections_from_many_addresses_do_not_keep_a_query_out():
    """The gate at its connection cap, held by connections that never say anything from three
    addresses (and a subscriber): a query from a fourth address is answered, in place of an
    idle connection of an address holding the most; the subscriber, which spoke, still gets
    its notification."""
    from transports.limits import ConnectionLimits, Guard

    async def go():
        limits = ConnectionLimits(8, 3, max_buffered_bytes=None, frame_timeout=0.0)
        guard = Guard(limits, "sepa", lambda conn: conn.transport.abort())
        async with Lab(connections=guard) as lab:
            ws = await lab.http.ws_connect(lab.ws_url)  # from 127.0.0.1
            await lab.subscribe(ws, PRE + "SELECT ?o WHERE { ex:s ex:p ?o }")
            idle = []
            for source in ("127.0.0.1",) * 2 + ("127.0.0.2",) * 3 + ("127.0.0.3",) * 2:
                idle.append(await asyncio.open_connection("127.0.0.1", lab.gate.http_port,
                                                          local_addr=(source, 0)))
            assert len(guard) == 8
            connector = aiohttp.TCPConnector(local_addr=("127.0.0.9", 0))
            async with aiohttp.ClientSession(connector=connector) as client:
                async with client.post(lab.base + "/update", headers=UPDATE,
                                       data=PRE + "INSERT DATA { ex:s ex:p 1 }") as r:
                    assert r.status == 200, await r.text()
                async with client.get(lab.base + "/query",
                                      params={"query": PRE + "ASK { ex:s ex:p 1 }"}) as r:
                    assert r.status == 200 and (await r.json())["boolean"] is True
            assert guard.refused["reclaimed"] == 1 and not guard.refused["connections"]
            assert await closed_by_peer(idle[0][0])  # .1's oldest idle one
            note = (await receive(ws))["notification"]
            assert values(note["addedResults"]["results"]["bindings"], "o") == ["1"]
            await ws.close()
            for _, writer in idle:
                writer.close()

    run(go())


@pytest.mark.slow
def test_ksp_sib_limits_the_gate_s_connections_as_configured(tmp_path):
    """`[sepa] max_connections_per_address` reaches the gate of a `ksp-sib` process: one
    connection more from the same address is closed at accept, counted on the metrics
    endpoint; the first goes on serving."""
    import socket
    import urllib.request

    from sib.testing import SibProcess

    config = tmp_path / "sib.toml"
    config.write_text("[sepa]\nmax_connections_per_address = 1\n")
    with SibProcess("--config", str(config), "--memory", "--udp-port", "-1", "--tcp-port", "-1",
                    "--coap-port", "-1", "--sepa-http-port", "0", "--metrics-port", "0") as sib:
        with socket.create_connection(("127.0.0.1", sib.ports["http"]), timeout=10) as first, \
                socket.create_connection(("127.0.0.1", sib.ports["http"]), timeout=10) as second:
            try:
                assert second.recv(1) == b""
            except ConnectionResetError:
                pass
            first.sendall(b"GET /jsap HTTP/1.1\r\nHost: sib\r\nConnection: close\r\n\r\n")
            assert first.recv(12) == b"HTTP/1.1 200"
        text = urllib.request.urlopen(f"http://127.0.0.1:{sib.ports['metrics']}/",
                                      timeout=30).read().decode()
    assert "ksp_sepa_connections_refused_total 1.0" in text
    assert "connection closed: 1 connections from 127.0.0.1" in sib.log()


@pytest.mark.slow
def test_ksp_sib_gives_each_party_its_configured_share(tmp_path):
    """`[sepa] max_subscriptions_per_identity` and `[limits] max_queued_per_kp` reach a
    `ksp-sib` process: a second subscription from one address is 429; of 50 KSP requests
    written at once on one TCP connection, the first is queued and the last refused 0x0a."""
    from ksp import TCP, Request, Status, Triple, Tx, decode_sib_message, encode
    from sib.testing import SibProcess, ex

    config = tmp_path / "sib.toml"
    config.write_text("[limits]\nmax_queued_per_kp = 1\n"
                      "[sepa]\nmax_subscriptions_per_identity = 1\n")

    async def go(ports) -> dict:
        async with aiohttp.ClientSession() as http, \
                http.ws_connect(f"ws://127.0.0.1:{ports['ws']}/subscribe") as ws:
            await ws.send_json({"subscribe": {"sparql": "ASK { ?s ?p ?o }", "alias": "a"}})
            assert "notification" in await receive(ws)
            await ws.send_json({"subscribe": {"sparql": "ASK { ?s ?p 1 }", "alias": "b"}})
            assert (await receive(ws))["status_code"] == 429
        reader, writer = await asyncio.open_connection("127.0.0.1", ports["tcp"])
        writer.write(b"".join(encode(Request(Tx.INSERT_DATA, tid, insert=(
            Triple(ex("s"), ex("p"), Literal.of(tid)),)), TCP) for tid in range(1, 51)))
        statuses = {}
        for _ in range(50):
            head = await asyncio.wait_for(reader.readexactly(8), 30)
            body = await reader.readexactly(int.from_bytes(head[4:], "little") - 8)
            res = decode_sib_message(head + body, TCP, Tx.INSERT_DATA)
            statuses[res.tid] = res.status
        writer.close()
        await writer.wait_closed()
        return statuses

    with SibProcess("--config", str(config), "--memory", "--udp-port", "-1", "--tcp-port", "0",
                    "--coap-port", "-1", "--sepa-http-port", "-1", "--sepa-ws-port", "0") as sib:
        statuses = run(go(sib.ports))
    assert statuses[1] is Status.OK and statuses[50] is Status.LIMIT_EXCEEDED
    assert "of its requests queued" in sib.log()


def test_an_update_past_the_store_s_cap_is_507_and_none_of_it_applies():
    """`[limits] max_quads` over SEPA: an update whose operations would grow the store past it
    is answered 507 `insufficient_storage`, and its earlier operations are taken back (the
    store reads as before, the subscriber hears nothing); one that does not grow it passes."""
    async def main():
        async with Lab(sib_options={"max_quads": 3}) as lab, lab.http.ws_connect(lab.ws_url) as ws:
            await lab.update(PRE + "INSERT DATA { ex:s ex:p 1 . ex:s ex:p 2 }")
            await lab.subscribe(ws, PRE + "SELECT ?o WHERE { ex:s ex:p ?o }")
            grow = "INSERT DATA { ex:s ex:p 3 . ex:s ex:p 4 . ex:s ex:p 5 }"
            body = await lab.update(PRE + "DELETE DATA { ex:s ex:p 1 } ; " + PRE + grow,
                                    status=507)
            assert body["error"] == "insufficient_storage" and body["status_code"] == 507
            rows = await lab.select(PRE + "SELECT ?o WHERE { ex:s ex:p ?o }")
            assert sorted(values(rows, "o")) == ["1", "2"]
            await lab.update(PRE + "DELETE DATA { ex:s ex:p 1 } ; "
                             + PRE + "INSERT DATA { ex:s ex:p 3 . ex:s ex:p 4 }")  # 3: at the cap
            note = (await receive(ws))["notification"]  # the first one the subscriber gets
            assert note["sequence"] == 1
            assert sorted(values(note["addedResults"]["results"]["bindings"], "o")) == ["3", "4"]
    run(main())
