"""No outbound request by default (`sib/sepa/outbound.py`), through real sockets: a SERVICE
to a silent TCP listener on loopback is refused at once and the listener sees no connection,
while a KSP device is answered; an endpoint the configuration allows runs off the scheduler,
ends with 504 at its deadline, and returns a real endpoint's rows."""
from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from sib.sepa.outbound import Outbound, services
from sib.sepa.broker import SepaError
from transports.client import connect

from test_sepa_gate import EX, PRE, UPDATE, Lab, receive, run, values  # noqa: I001 - tests/ is on the path


class SilentListener:
    """A TCP listener on loopback that accepts and never answers. It runs on a thread, so it
    accepts even while the event loop is blocked (by a SIB fetching on its scheduler), and
    closes each connection after `hold` seconds, which lets such a SIB go on."""

    def __init__(self, hold: float = 30.0) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.05)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/sparql"
        self.hold = hold
        self.accepted = 0
        self.held: list[tuple[socket.socket, float]] = []
        self.lock = threading.Lock()
        self.stopped = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopped:
            try:
                conn, _ = self.sock.accept()
                with self.lock:
                    self.accepted += 1
                    self.held.append((conn, time.monotonic() + self.hold))
            except socket.timeout:
                pass
            with self.lock:
                now = time.monotonic()
                for conn, until in [h for h in self.held if h[1] <= now]:
                    conn.close()
                self.held = [h for h in self.held if h[1] > now]

    def release(self) -> None:
        """Close the connections held (their fetches end with an error)."""
        with self.lock:
            for conn, _ in self.held:
                conn.close()
            self.held.clear()

    def close(self) -> None:
        self.stopped = True
        self.thread.join(5)
        self.release()
        self.sock.close()

    def __enter__(self) -> "SilentListener":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


async def post_query(lab: Lab, text: str, **params) -> tuple[int, dict]:
    async with lab.http.post(lab.base + "/query", data=text, params=params,
                             headers={"Content-Type": "application/sparql-query"}) as r:
        return r.status, await r.json(content_type=None)


async def post_update(lab: Lab, text: str) -> tuple[int, dict]:
    async with lab.http.post(lab.base + "/update", data=text, headers=UPDATE) as r:
        return r.status, await r.json(content_type=None)


async def ksp_update(lab: Lab, value: int) -> None:
    """A KSP device's update, answered (raises otherwise)."""
    async with connect(f"udp://127.0.0.1:{lab.server.udp.port}") as kp:
        await asyncio.wait_for(kp.update(PRE + f"INSERT DATA {{ ex:ksp ex:v {value} }}"), 30)


async def until(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


def refused(status: int, body: dict, endpoint: str | None = None) -> None:
    assert status == 403, body
    assert body["error"] == "service_refused", body
    if endpoint is not None:
        assert endpoint in body["error_description"], body


# -- refused by default ----------------------------------------------------------------------

@pytest.mark.parametrize("shape", [
    "SELECT * WHERE {{ SERVICE <{url}> {{ ?s ?p ?o }} }}",
    "select * where {{ service silent <{url}> {{ ?s ?p ?o }} }}",
    "PREFIX r: <{base}> ASK {{ ?s ?p ?o OPTIONAL {{ SeRvIcE r:sparql {{ ?s ?p ?x }} }} }}",
    "CONSTRUCT {{ ?s ?p ?o }} WHERE {{ BIND(<{url}> AS ?e) SERVICE ?e {{ ?s ?p ?o }} }}",
])
def test_a_service_query_is_refused_and_nothing_connects(shape):
    async def main():
        with SilentListener(hold=3.0) as silent:
            async with Lab(ksp=True) as lab:
                text = shape.format(url=silent.url, base=silent.url[:-len("sparql")])
                (status, body), _ = await asyncio.gather(post_query(lab, text),
                                                         ksp_update(lab, 1))
                refused(status, body)
                if "?e" not in text:
                    assert silent.url in body["error_description"]
                assert silent.accepted == 0
                assert values(await lab.select(PRE + "SELECT ?v { ex:ksp ex:v ?v }"),
                              "v") == ["1"]
    run(main())


def test_a_service_in_an_updates_where_is_refused_and_changes_nothing():
    async def main():
        with SilentListener(hold=3.0) as silent:
            async with Lab(ksp=True) as lab:
                text = (PRE + "INSERT DATA { ex:a ex:p 1 } ; INSERT { ex:b ex:p ?o } WHERE { "
                        f"SERVICE <{silent.url}> {{ ?s ?p ?o }} }}")
                (status, body), _ = await asyncio.gather(post_update(lab, text),
                                                         ksp_update(lab, 2))
                refused(status, body, silent.url)
                assert "update" in body["error_description"]
                assert silent.accepted == 0
                assert await lab.select(PRE + "SELECT ?s { ?s ex:p ?o }") == []
    run(main())


def test_a_service_subscription_gets_an_error_frame_and_nothing_connects():
    async def main():
        with SilentListener(hold=3.0) as silent:
            async with Lab(ksp=True) as lab, lab.http.ws_connect(lab.ws_url) as ws:
                frame = await lab.subscribe(
                    ws, f"SELECT * WHERE {{ SERVICE <{silent.url}> {{ ?s ?p ?o }} }}", "svc")
                assert frame["status_code"] == 403 and frame["alias"] == "svc", frame
                assert frame["error"] == "service_refused"
                assert "subscription" in frame["error_description"]
                await ksp_update(lab, 3)  # a write: nothing re-evaluated fetches either
                await lab.update(PRE + "INSERT DATA { ex:a ex:p 1 }")
                first = await lab.subscribe(ws, PRE + "SELECT ?o { ex:a ex:p ?o }", "ok")
                assert values(first["notification"]["addedResults"]["results"]["bindings"],
                              "o") == ["1"]
                assert silent.accepted == 0
    run(main())


def test_service_written_inside_a_literal_an_iri_a_comment_or_a_name_is_no_service():
    async def main():
        async with Lab() as lab:
            await lab.update(PRE + 'INSERT DATA { <http://example.org/SERVICE> ex:p '
                             '"SERVICE <http://127.0.0.1:9/x> { ?s ?p ?o }" }')
            text = (PRE + "# SERVICE <http://127.0.0.1:9/x> { }\n"
                    "SELECT ?service WHERE { ?service ex:p "
                    "'''SERVICE <http://127.0.0.1:9/x> { ?s ?p ?o }''' . "
                    "FILTER(?service = <http://example.org/SERVICE>) }")
            status, body = await post_query(lab, text)
            assert status == 200, body
            assert values(body["results"]["bindings"], "service") == [EX + "SERVICE"]
            status, body = await post_update(
                lab, PRE + 'INSERT DATA { ex:b ex:p "service silent ?x" }')
            assert status == 200, body
    run(main())


def test_a_service_to_the_sibs_own_query_endpoint_is_refused_without_deadlock():
    async def main():
        async with Lab(ksp=True) as lab:
            own = lab.base + "/query"
            status, body = await post_query(
                lab, f"SELECT * WHERE {{ SERVICE <{own}> {{ ?s ?p ?o }} }}")
            refused(status, body, own)
            await ksp_update(lab, 4)
            assert values(await lab.select(PRE + "SELECT ?v { ex:ksp ex:v ?v }"), "v") == ["4"]
    run(main())


def test_load_and_datasets_open_no_connection():
    """LOAD is refused (501) before pyoxigraph sees it, LOAD SILENT succeeds with no change
    (its failure silenced); FROM, FROM NAMED, USING and the protocol's graph parameters name
    graphs of the store, never fetched."""
    async def main():
        with SilentListener(hold=3.0) as silent:
            async with Lab() as lab:
                u = silent.url
                status, body = await post_update(lab, f"LOAD <{u}>")
                assert status == 501 and body["error"] == "not_implemented", body
                for text in (f"LOAD SILENT <{u}>", f"load silent <{u}> INTO GRAPH <{EX}g>"):
                    status, body = await post_update(lab, text)
                    assert status == 200 and body == {"added": 0, "removed": 0}, body
                for text in (f"SELECT * FROM <{u}> WHERE {{ ?s ?p ?o }}",
                             f"SELECT * FROM NAMED <{u}> WHERE {{ GRAPH ?g {{ ?s ?p ?o }} }}",
                             f"SELECT * WHERE {{ GRAPH <{u}> {{ ?s ?p ?o }} }}"):
                    status, body = await post_query(lab, text)
                    assert status == 200 and body["results"]["bindings"] == [], body
                status, body = await post_query(lab, "SELECT * WHERE { ?s ?p ?o }",
                                                **{"default-graph-uri": u})
                assert status == 200, body
                status, body = await post_update(
                    lab, f"INSERT {{ <{EX}a> <{EX}p> ?o }} USING <{u}> WHERE {{ ?s ?p ?o }}")
                assert status == 200 and body == {"added": 0, "removed": 0}, body
                assert silent.accepted == 0
    run(main())


# -- allowed endpoints -----------------------------------------------------------------------

@pytest.mark.slow
def test_an_allowed_silent_endpoint_ends_in_504_while_others_are_answered():
    async def main():
        with SilentListener(hold=60.0) as silent:
            outbound = Outbound([silent.url], deadline=3.0, workers=1)
            async with Lab(ksp=True, outbound=outbound) as lab:
                query = asyncio.create_task(post_query(
                    lab, f"SELECT * WHERE {{ SERVICE <{silent.url}> {{ ?s ?p ?o }} }}"))
                await until(lambda: silent.accepted == 1 or query.done())
                assert not query.done()  # it waits on the listener, off the scheduler
                await ksp_update(lab, 5)
                assert (await post_update(lab, PRE + "INSERT DATA { ex:a ex:p 1 }"))[0] == 200
                assert values(await lab.select(PRE + "SELECT ?v { ex:ksp ex:v ?v }"),
                              "v") == ["5"]
                assert not query.done()  # all of that answered before the deadline
                status, body = await query
                assert status == 504 and body["error"] == "service_timeout", body
                # Its thread still waits, holding the only slot: the next one is 503 at once.
                status, body = await post_query(
                    lab, f"ASK {{ SERVICE <{silent.url}> {{ ?s ?p ?o }} }}")
                assert status == 503 and "service_workers" in body["error_description"], body
                assert silent.accepted == 1
                # A SERVICE in an update stays refused, allowed endpoint or not.
                refused(*await post_update(lab, "INSERT { ?s ?p ?o } WHERE { SERVICE "
                                                f"<{silent.url}> {{ ?s ?p ?o }} }}"))
                silent.release()  # the fetch fails, the thread ends, its slot is free
                await until(lambda: outbound.held == 0)
                assert silent.accepted == 1
                scraped = {s.name: s.value for f in text_string_to_metric_families(
                    lab.sib.core.metrics.render()) for s in f.samples}
                assert scraped["ksp_sepa_service_timeouts_total"] == 1
                assert scraped["ksp_sepa_service_refused_total"] == 1
                assert scraped["ksp_sepa_service_threads"] == 0
    run(main())


def test_an_allowed_endpoint_returns_its_rows_and_others_stay_refused():
    async def main():
        async with Lab() as remote:
            await remote.update(PRE + "INSERT DATA { ex:r1 ex:p 1 . ex:r2 ex:p 2 }")
            endpoint = remote.base + "/query"
            async with Lab(outbound=Outbound([endpoint], deadline=30.0)) as lab:
                await lab.update(PRE + "INSERT DATA { ex:r1 ex:label 'one' }")
                status, body = await post_query(
                    lab, PRE + f"SELECT ?s ?o ?l WHERE {{ SERVICE <{endpoint}> "
                               "{ ?s ex:p ?o } OPTIONAL { ?s ex:label ?l } } ORDER BY ?s")
                assert status == 200, body
                rows = [(b["s"]["value"], b["o"]["value"], b.get("l", {}).get("value"))
                        for b in body["results"]["bindings"]]
                assert rows == [(EX + "r1", "1", "one"), (EX + "r2", "2", None)]
                other = f"http://127.0.0.1:{remote.gate.ws_port}/query"
                refused(*await post_query(lab, f"SELECT * {{ SERVICE <{endpoint}> {{ ?s ?p ?o }}"
                                               f" SERVICE <{other}> {{ ?s ?p ?o }} }}"), other)
            async with Lab(outbound=Outbound([endpoint], deadline=30.0)) as lab:
                own = lab.base + "/query"  # allowed and the SIB's own: no deadlock either
                lab.gate.outbound.endpoints = frozenset({own})
                await lab.update(PRE + "INSERT DATA { ex:me ex:p 9 }")
                status, body = await post_query(
                    lab, PRE + f"SELECT ?o {{ SERVICE <{own}> {{ ?s ex:p ?o }} }}")
                assert status == 200 and values(body["results"]["bindings"], "o") == ["9"]
    run(main())


def test_a_refused_connection_is_a_502_not_a_traceback():
    async def main():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            url = f"http://127.0.0.1:{s.getsockname()[1]}/sparql"  # bound, not listening
            async with Lab(outbound=Outbound([url], deadline=30.0)) as lab:
                status, body = await post_query(
                    lab, f"SELECT * {{ SERVICE <{url}> {{ ?s ?p ?o }} }}")
                assert status == 502 and body["error"] == "service_failed", body
    run(main())


# -- the classification, randomized ----------------------------------------------------------

KEYWORD = st.lists(st.booleans(), min_size=7, max_size=7).map(
    lambda ups: "".join(c.upper() if u else c for c, u in zip("service", ups)))
ENDPOINT = "http://e.example/sparql"


@st.composite
def placement(draw) -> tuple[str, list]:
    """(a group graph pattern part, the endpoints the scan must find in it)."""
    word = draw(KEYWORD)
    kind = draw(st.sampled_from(["keyword", "silent", "var", "pname", "string", "long",
                                 "comment", "iri", "varname", "local"]))
    silent = draw(st.sampled_from(["SILENT", "silent", "Silent"]))
    quote = draw(st.sampled_from(["'", '"']))
    if kind == "keyword":
        return f"{word} <{ENDPOINT}> {{ ?s ?p ?o }}", [ENDPOINT]
    if kind == "silent":
        return f"{word}  {silent}\n<{ENDPOINT}>{{?s ?p ?o}}", [ENDPOINT]
    if kind == "var":
        return f"{word} ?ep {{ ?s ?p ?o }}", [None]
    if kind == "pname":
        return f"{word} e:sparql {{ ?s ?p ?o }}", [ENDPOINT]
    if kind == "string":
        return f"?s ?p {quote}{word} <{ENDPOINT}> {{ }}{quote} .", []
    if kind == "long":
        return f"?s ?p {quote * 3}x\n{word} {silent} <{ENDPOINT}>\n{quote * 3}@en .", []
    if kind == "comment":
        return f"# {word} <{ENDPOINT}> {{ ?s ?p ?o }}\n", []
    if kind == "iri":
        return f"<http://x.example/{word}> ?p <urn:{word}> .", []
    if kind == "varname":
        return f"?{word} ?p ${word} .", []
    return f"?s e:{word} e:x{word} .", []


@settings(max_examples=300, deadline=None)
@given(st.lists(placement(), min_size=1, max_size=5))
def test_service_keywords_are_found_wherever_they_are_placed(parts):
    text = ("PREFIX e: <http://e.example/>\nSELECT * WHERE {\n"
            + "\n".join(p for p, _ in parts) + "\n}")
    expected = [e for _, found in parts for e in found]
    assert [s.endpoint for s in services(text)] == expected, text
    for allowed, where in (((), "query"), ((ENDPOINT,), "query"), ((ENDPOINT,), "update")):
        try:
            ran = Outbound(allowed).screen(text, where)
        except SepaError as exc:
            assert exc.status == 403
            ran = "refused"
        runs = expected and where == "query" and all(e in allowed for e in expected)
        assert ran == (True if runs else "refused" if expected else False), text


# -- configuration ---------------------------------------------------------------------------

def test_the_configuration_lists_endpoints_exactly(tmp_path):
    from sib.config import ConfigError, load

    path = tmp_path / "sib.toml"
    path.write_text('[sepa]\nservice_endpoints = ["https://dbpedia.org/sparql"]\n'
                    "service_deadline = 2.5\nservice_workers = 1\n")
    config = load(path)
    assert config.sepa_service_endpoints == ["https://dbpedia.org/sparql"]
    assert (config.sepa_service_deadline, config.sepa_service_workers) == (2.5, 1)
    assert load(None).sepa_service_endpoints == []
    for bad in ('service_endpoints = ["dbpedia.org/sparql"]',
                'service_endpoints = ["file:///etc/passwd"]', "service_endpoints = [1]",
                "service_workers = 0", "service_deadline = 0"):
        path.write_text(f"[sepa]\n{bad}\n")
        with pytest.raises(ConfigError):
            load(path)


def test_a_service_query_under_way_is_answered_503_when_the_gate_closes():
    """A query waiting on a silent allowed endpoint (its deadline ten minutes away) is
    answered 503 `unavailable` as soon as the gate closes, not at its deadline; one asked
    after the close is refused the same way."""
    async def main():
        with SilentListener(hold=600.0) as silent:
            outbound = Outbound([silent.url], deadline=600.0, workers=2)
            async with Lab(outbound=outbound) as lab:
                query = asyncio.create_task(post_query(
                    lab, f"SELECT * WHERE {{ SERVICE <{silent.url}> {{ ?s ?p ?o }} }}"))
                await until(lambda: silent.accepted == 1 or query.done())
                assert not query.done()
                closing = asyncio.create_task(lab.gate.close())
                status, body = await asyncio.wait_for(query, 60)
                assert status == 503 and body["error"] == "unavailable", body
                await asyncio.wait_for(closing, 60)
                with pytest.raises(SepaError) as refused_after:
                    await outbound.run(lambda: None)
                assert refused_after.value.status == 503
    run(main())
