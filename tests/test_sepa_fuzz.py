"""The SEPA gate under broken input (hypothesis): SPARQL texts with a few characters changed, and
random text, to `/query` and `/update`; random JSON frames and broken subscriptions over the
WebSocket. Every one gets a typed answer (a JSON error with a 4xx or 501 status, never 500 and
never a dropped connection), a refused update changes nothing, and the gate serves on."""
from __future__ import annotations

import json

import aiohttp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_sepa_gate import PRE, UPDATE, Lab, run

QUERIES = [
    PRE + "SELECT ?s ?v WHERE { ?s ex:v ?v FILTER(?v > 1) } ORDER BY ?v LIMIT 3",
    PRE + "SELECT ?s (COUNT(?v) AS ?n) WHERE { ?s ex:v ?v } GROUP BY ?s",
    PRE + "SELECT ?x WHERE { { ?x ex:v 1 } UNION { GRAPH ?g { ?x ex:v ?any } } }",
    PRE + "SELECT ?s ?w WHERE { ?s ex:v ?v OPTIONAL { ?s ex:w ?w } BIND(?v * 2 AS ?d) }",
    PRE + "ASK { ?s ex:v 3 }",
    PRE + 'CONSTRUCT { ?s ex:seen ?v } WHERE { ?s ex:v ?v FILTER(lang(?v) = "en") }',
    PRE + "DESCRIBE ex:a",
]
UPDATES = [
    PRE + 'INSERT DATA { ex:a ex:v 1 , "x"@en . GRAPH ex:g { ex:b ex:v 2.5 } }',
    PRE + "DELETE WHERE { ?s ex:v ?v }",
    PRE + "DELETE { ?s ex:w ?w } INSERT { ?s ex:v ?w } WHERE { ?s ex:w ?w }",
    PRE + "WITH ex:g INSERT { ?s ex:q ?o } WHERE { ?s ex:v ?o }",
    PRE + "CREATE GRAPH ex:h ; COPY ex:g TO ex:h ; DROP SILENT GRAPH ex:k",
    PRE + "INSERT DATA { ex:c ex:v 3 } ; CLEAR DEFAULT",
]
SPARQLISH = "{}<>?$\"'.;,:#@^()[]*+-/=!|&\\ \n_0aAéGRAPH"
ALL = PRE + "SELECT * WHERE { { ?s ?p ?o } UNION { GRAPH ?g { ?s ?p ?o } } }"


@st.composite
def mutated(draw, seeds: list[str]) -> str:
    """A valid text with one to three slices replaced by a few SPARQL-ish characters."""
    text = draw(st.sampled_from(seeds))
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(text)))
        j = draw(st.integers(i, min(len(text), i + 8)))
        text = text[:i] + draw(st.text(SPARQLISH, max_size=4)) + text[j:]
    return text


def texts(seeds: list[str]):
    return st.one_of(mutated(seeds), st.text(st.characters(exclude_categories=("Cs",)),
                                             max_size=60))


def typed(status: int, body) -> None:
    """A refusal the client can act on: a 4xx (or 501) JSON error that names itself."""
    assert status != 500 and (status < 500 or status in (501, 503)), (status, body)
    assert isinstance(body, dict) and body.get("error") and body.get("status_code") == status


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(queries=st.lists(texts(QUERIES), min_size=1, max_size=4),
       updates=st.lists(texts(UPDATES), min_size=1, max_size=4))
def test_broken_sparql_gets_a_typed_error_and_a_refused_update_changes_nothing(queries, updates):
    async def main():
        async with Lab() as lab:
            await lab.update(UPDATES[0])
            for text in queries:
                async with lab.http.get(lab.base + "/query", params={"query": text}) as r:
                    body = await r.json(content_type=None) if r.status != 200 else None
                    if r.status != 200:
                        typed(r.status, body)
            for text in updates:
                before = await lab.select(ALL)
                async with lab.http.post(lab.base + "/update", data=text.encode(),
                                         headers=UPDATE) as r:
                    body = await r.json(content_type=None)
                if r.status != 200:
                    typed(r.status, body)
                    assert await lab.select(ALL) == before  # whole or not at all
            assert await lab.select(PRE + "SELECT * WHERE { ?s ?p ?o } LIMIT 1") is not None
    run(main())


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=3),
    max_leaves=8)
frames = st.one_of(
    json_values.map(json.dumps),
    st.text(max_size=30),  # not JSON
    st.builds(lambda sparql, graphs, alias: json.dumps({"subscribe": {
        "sparql": sparql, "default-graph-uri": graphs, "alias": alias}}),
        texts(QUERIES), json_values, json_values),
    st.builds(lambda body: json.dumps({"subscribe": body}), json_values),
    st.builds(lambda body: json.dumps({"unsubscribe": body}), json_values),
)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(frames, min_size=1, max_size=6))
def test_broken_websocket_frames_get_error_frames_and_the_socket_serves_on(sent):
    async def main():
        async with Lab() as lab, lab.http.ws_connect(lab.ws_url) as ws:
            for frame in sent:
                await ws.send_str(frame)
            await ws.send_json({"subscribe": {"sparql": QUERIES[0], "alias": "sentinel"}})
            while True:  # every frame back is JSON; an error is typed; the sentinel's comes
                msg = await ws.receive(30)
                assert msg.type == aiohttp.WSMsgType.TEXT, msg
                reply = json.loads(msg.data)
                if "notification" in reply and reply["notification"].get("alias") == "sentinel":
                    break
                if "error" in reply:
                    typed(reply["status_code"], reply)
            assert not ws.closed
    run(main())
