"""The Graph Store HTTP Protocol on the gate (`sib/sepa/graph_store.py`) through real sockets:
a write notifies SEPA subscribers and KSP persistent queries as its equivalent update does,
access is checked per graph, a refused or failed write changes nothing, and a graph round-trips
in every format. The W3C manifests are tests/test_w3c_graph_store.py."""
from __future__ import annotations

import asyncio
import json

import aiohttp
import pyoxigraph as ox
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rdflib import Graph
from rdflib.compare import isomorphic

from sib.access import AccessPolicy
from sib.sepa.graph_store import READ_FORMATS, WRITE_FORMATS
from transports.client import connect

from test_sepa_gate import EX, PRE, Lab, receive, run  # noqa: I001 - tests/ is on the path
from test_sepa_secure import SecureLab

TURTLE = {"Content-Type": "text/turtle"}
G = EX + "g"


async def request(lab, method: str, target: str, body: str | bytes | None = None,
                  headers: dict | None = None, base: str | None = None
                  ) -> tuple[int, str, aiohttp.typedefs.LooseHeaders]:
    """`target`: a query string (`?default`, `?graph=…`) or a path below /data."""
    sep = "" if target.startswith(("?", "/")) or not target else "/"
    async with lab.http.request(method, (base or lab.base + "/data") + sep + target,
                                data=body, headers=headers or {}) as r:
        return r.status, await r.text(), r.headers


async def triples(lab, graph: str) -> set[str]:
    status, text, _ = await request(lab, "GET", f"?graph={graph}",
                                    headers={"Accept": "application/n-triples"})
    assert status == 200, text
    return set(text.splitlines())


# -- notifications ----------------------------------------------------------------------------

@pytest.mark.parametrize("graph", ["default", G])
def test_a_put_notifies_exactly_as_its_update(graph):
    """One run writes by PUT, the other by `DROP SILENT GRAPH; INSERT DATA`: the SEPA
    subscriber (WebSocket) and, on the default graph, the KSP persistent query (UDP) get the
    same notifications."""
    clause = "" if graph == "default" else f"GRAPH <{graph}> "
    target = "?default" if graph == "default" else f"?graph={graph}"
    before = "ex:t ex:hum 40 . ex:t ex:temp 20 ."
    after = "ex:t ex:hum 41 . ex:t ex:temp 20 . ex:u ex:hum 7 ."

    async def write(lab, by_put: bool) -> None:
        if by_put:
            turtle = PRE.replace("PREFIX ex:", "@prefix ex:") + ". " + after
            status, text, _ = await request(lab, "PUT", target, turtle, TURTLE)
            assert status == 204, text
        else:
            drop = "DEFAULT" if graph == "default" else f"GRAPH <{graph}>"
            await lab.update(PRE + f"DROP SILENT {drop} ; INSERT DATA {{ {clause}{{ {after} }} }}")

    async def trace(by_put: bool) -> tuple:
        async with Lab(ksp=True) as lab, lab.http.ws_connect(lab.ws_url) as ws:
            await lab.update(PRE + f"INSERT DATA {{ {clause}{{ {before} }} }}")
            first = await lab.subscribe(
                ws, PRE + f"SELECT ?s ?v WHERE {{ {clause}{{ ?s ex:hum ?v }} }}")
            assert first["notification"]["sequence"] == 0
            if graph != "default":
                await write(lab, by_put)
                ind = None
            else:  # a KSP persistent query reads the default graph
                async with connect(f"udp://127.0.0.1:{lab.server.udp.port}") as kp:
                    async with kp.subscribe(PRE + "SELECT ?s ?v WHERE { ?s ex:hum ?v }") as sub:
                        await asyncio.wait_for(sub.__anext__(), 10)  # the RES's initial state
                        await write(lab, by_put)
                        ind = await asyncio.wait_for(sub.__anext__(), 10)
                        ind = (ind.seq, sorted(map(str, ind.result.rows)), repr(ind.result))
            n = (await receive(ws))["notification"]
            return (n["sequence"], json.dumps(n["addedResults"], sort_keys=True),
                    json.dumps(n["removedResults"], sort_keys=True), ind)

    async def main():
        put, update = await trace(True), await trace(False)
        assert put == update
        assert "41" in put[1] and "40" in put[2]  # something was added and removed
        assert graph != "default" or "41" in str(put[3][1])
    run(main())


# -- access -----------------------------------------------------------------------------------

def test_per_graph_grants():
    """A read-only grant on graph A: GET/HEAD A pass, every write to A is refused, B (even a B
    that does not exist) cannot be read; nothing refused changes anything."""
    a, b, c = EX + "a", EX + "b", EX + "c"

    async def main():
        async with Lab() as lab:
            for g in (a, b):
                status, text, _ = await request(lab, "PUT", f"?graph={g}",
                                                f"<{g}> <{EX}p> 1 .", TURTLE)
                assert status == 201, text
            lab.sib.set_access(AccessPolicy(anonymous={"read": [a], "write": []}))
            assert (await request(lab, "GET", f"?graph={a}"))[0] == 200
            assert (await request(lab, "HEAD", f"?graph={a}"))[0] == 200
            for method in ("PUT", "POST"):
                status, text, _ = await request(lab, method, f"?graph={a}",
                                                f"<{a}> <{EX}p> 2 .", TURTLE)
                assert status == 403 and json.loads(text)["error"] == "forbidden"
            assert (await request(lab, "DELETE", f"?graph={a}"))[0] == 403
            assert (await request(lab, "POST", "", "<urn:x> <urn:y> 1 .", TURTLE))[0] == 403
            for g in (b, c):  # refused before the store is looked at: no 404 for c
                assert (await request(lab, "GET", f"?graph={g}"))[0] == 403
                assert (await request(lab, "DELETE", f"?graph={g}"))[0] == 403
            assert (await request(lab, "GET", "?default"))[0] == 403
            lab.sib.set_access(AccessPolicy(anonymous={"read": ["*"], "write": []}))
            assert await triples(lab, a) == {f'<{a}> <{EX}p> "1"^^<http://www.w3.org/2001/'
                                             'XMLSchema#integer> .'}
    run(main())


def test_the_secure_graph_store_takes_a_token(certificate):
    async def main():
        async with SecureLab(certificate) as lab:
            base = lab.base + "/secure/data"
            writer, reader = await lab.token("writer"), await lab.token("reader")
            body = f"<{G}> <{EX}p> 1 ."
            status, text, _ = await request(lab, "PUT", f"?graph={G}", body, TURTLE, base)
            assert status == 401, text
            status, text, _ = await request(lab, "PUT", f"?graph={G}", body, {
                **TURTLE, "Authorization": f"Bearer {writer}"}, base)
            assert status == 201, text
            auth = {"Authorization": f"Bearer {reader}"}
            status, text, _ = await request(lab, "GET", f"?graph={G}", None, auth, base)
            assert status == 200 and f"<{G}>" in text
            status, text, _ = await request(lab, "DELETE", f"?graph={G}", None, auth, base)
            assert status == 403, text
            status, text, _ = await request(lab, "GET", f"?graph={G}", None, {}, base)
            assert status == 401, text
    run(main())


# -- refused and failed writes ----------------------------------------------------------------

def test_a_put_that_fails_changes_nothing():
    """A body that does not parse (400), a type the store cannot read (415), a body past the
    gate's limit (413), a graph past the store's quad cap (507): the graph stays as it was."""
    good = f"<{EX}s> <{EX}p> 1 . <{EX}s> <{EX}p> 2 ."

    async def main():
        async with Lab(max_body_bytes=4096, sib_options={"max_quads": 4}) as lab:
            assert (await request(lab, "PUT", f"?graph={G}", good, TURTLE))[0] == 201
            kept = await triples(lab, G)
            for body, headers, status in (
                    (f"<{EX}s> <{EX}p> 3 . <{EX}s> <{EX}p> .", TURTLE, 400),
                    (good, {"Content-Type": "application/n-quads"}, 415),
                    (good, {"Content-Type": "text/turtle; charset=utf-16"}, 415),
                    (good, {}, 415),
                    ("#" + "x" * 5000 + "\n" + good, TURTLE, 413),
                    (" ".join(f"<{EX}s> <{EX}p> {i} ." for i in range(6)), TURTLE, 507),
                    (f"<{EX}s> <{EX}p> 3 . GRAPH <{EX}h> {{ <{EX}s> <{EX}p> 4 }}",
                     {"Content-Type": "application/trig"}, 415)):
                got, text, _ = await request(lab, "PUT", f"?graph={G}", body, headers)
                assert got == status, text
                assert await triples(lab, G) == kept
            assert (await request(lab, "PUT", f"?graph={EX}new", "<a> <b> .", TURTLE))[0] == 400
            assert (await request(lab, "GET", f"?graph={EX}new"))[0] == 404  # not created
    run(main())


def test_statuses_negotiation_and_identification():
    async def main():
        async with Lab() as lab:
            data = f"<{EX}s> <{EX}p> [ <{EX}q> 1 ] ."
            status, _, _ = await request(lab, "PUT", "/people/1.ttl", data, TURTLE)
            assert status == 201
            direct = f"{lab.base}/data/people/1.ttl"  # a URL below /data is the graph's IRI
            assert len(await triples(lab, direct)) == 2
            assert (await request(lab, "PUT", "/people/1.ttl", data, TURTLE))[0] == 204
            for accept, media in (("application/ld+json", "application/ld+json"),
                                  ("application/rdf+xml;q=0.5, text/turtle;q=0.1",
                                   "application/rdf+xml"), ("*/*", "text/turtle"),
                                  ("", "text/turtle")):
                status, text, headers = await request(lab, "GET", "/people/1.ttl",
                                                      headers={"Accept": accept})
                assert status == 200 and headers["Content-Type"].startswith(media), accept
            assert (await request(lab, "GET", "/people/1.ttl",
                                  headers={"Accept": "text/html"}))[0] == 406
            for method in ("GET", "HEAD", "DELETE"):
                assert (await request(lab, method, "/people/2"))[0] == 404
            assert (await request(lab, "GET", "?default&graph=urn:g"))[0] == 400
            assert (await request(lab, "GET", "?graph=urn:a&graph=urn:b"))[0] == 400
            assert (await request(lab, "GET", "/people/1.ttl?default"))[0] == 400
            assert (await request(lab, "GET", ""))[0] == 400  # the store itself: no dataset
            assert (await request(lab, "PUT", "", data, TURTLE))[0] == 400
            # the default graph always exists; its first content is "created"
            assert (await request(lab, "GET", "?default"))[0] == 200
            assert (await request(lab, "POST", "?default", data, TURTLE))[0] == 201
            assert (await request(lab, "POST", "?default", data, TURTLE))[0] == 200
            assert (await request(lab, "DELETE", "?default"))[0] == 200
            assert (await request(lab, "GET", "?default"))[0] == 200
            # POST to the store: a new graph, named by the Location it answers
            status, _, headers = await request(lab, "POST", "", data, TURTLE)
            assert status == 201 and headers["Location"].startswith(lab.base + "/data/")
            assert len(await triples(lab, headers["Location"])) == 2
            # a relative ?graph= is resolved against the request URL
            assert (await request(lab, "PUT", "?graph=rel", data, TURTLE))[0] == 201
            assert len(await triples(lab, lab.base + "/rel")) == 2
            # blank nodes are fresh per request: two POSTs of one body make two nodes
            assert (await request(lab, "POST", f"?graph={G}", data, TURTLE))[0] == 201
            assert (await request(lab, "POST", f"?graph={G}", data, TURTLE))[0] == 200
            assert len(await triples(lab, G)) == 4
            assert lab.gate.requests["data"] >= 20
    run(main())


def test_a_multipart_post_adds_every_part():
    """§5.5: each part of a multipart/form-data body is RDF merged into the graph."""
    parts = "".join(f"--XyZ\r\nContent-Disposition: form-data; name=\"{i}\"\r\n"
                    f"Content-Type: {media}\r\n\r\n{body}\r\n"
                    for i, (media, body) in enumerate((
                        ("text/turtle", f"<{EX}s> <{EX}p> 1 ."),
                        ("application/n-triples", f"<{EX}s> <{EX}p> \"2\" ."))))
    headers = {"Content-Type": "multipart/form-data; boundary=XyZ"}

    async def main():
        async with Lab() as lab:
            status, text, _ = await request(lab, "POST", f"?graph={G}", parts + "--XyZ--\r\n",
                                            headers)
            assert status == 201, text
            assert len(await triples(lab, G)) == 2
            bad = parts + "--XyZ\r\nContent-Type: text/html\r\n\r\n<p>\r\n--XyZ--\r\n"
            assert (await request(lab, "POST", f"?graph={G}", bad, headers))[0] == 415
            assert len(await triples(lab, G)) == 2
    run(main())


# -- round trips ------------------------------------------------------------------------------

_iris = st.sampled_from([ox.NamedNode(EX + n) for n in ("a", "b", "c", "d")])
_predicates = st.sampled_from([ox.NamedNode(EX + n) for n in ("p", "q", "r")])
_blanks = st.sampled_from("xyz").map(ox.BlankNode)
_text = st.text(st.characters(min_codepoint=32, max_codepoint=0x2FFF,
                              blacklist_categories=("Cs",)), max_size=8)
_literals = st.one_of(
    _text.map(ox.Literal),
    st.tuples(_text, st.sampled_from(["en", "fr-be"])).map(
        lambda t: ox.Literal(t[0], language=t[1])),
    st.integers(-10**6, 10**6).map(lambda i: ox.Literal(
        str(i), datatype=ox.NamedNode("http://www.w3.org/2001/XMLSchema#integer"))))
_triples = st.lists(st.builds(ox.Triple, st.one_of(_iris, _blanks), _predicates,
                              st.one_of(_iris, _blanks, _literals)), max_size=12)


def _graph(data: bytes, fmt: ox.RdfFormat) -> Graph:
    nt = ox.serialize(list(ox.parse(data, fmt)), format=ox.RdfFormat.N_TRIPLES)
    return Graph().parse(data=nt.decode(), format="nt")


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(_triples, st.sampled_from(sorted(set(READ_FORMATS) - {"text/n3"})),
       st.sampled_from(sorted(WRITE_FORMATS)))
def test_a_random_graph_round_trips(graph, put_as, get_as):
    body = ox.serialize(graph, format=READ_FORMATS[put_as])

    async def main():
        async with Lab() as lab:
            status, text, _ = await request(lab, "PUT", f"?graph={G}", body,
                                            {"Content-Type": put_as})
            assert status == 201, text
            async with lab.http.get(lab.base + "/data", params={"graph": G},
                                    headers={"Accept": get_as}) as r:
                assert r.status == 200 and r.content_type == get_as
                got = await r.read()
            assert isomorphic(_graph(got, WRITE_FORMATS[get_as]),
                              _graph(body, READ_FORMATS[put_as]))
    run(main())
