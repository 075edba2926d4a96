"""The W3C SPARQL 1.1 Protocol tests (tests/w3c_manifests/protocol/manifest.ttl) against a
live `ksp-sib`: each manifest entry is one test, named by its IRI, its HTTP requests sent as
the manifest encodes them and its responses checked (status class, result format, ASK's
boolean). The manifest's `/sparql/` is the gate's `/update` for the first request of a test
named for an update (`update_*`, `bad_update_*`, `bad_multiple_updates`) and `/query`
otherwise (the manifest allows an endpoint its
own paths for queries and updates). Before each test the store is emptied and the test's
`ut:graphData` loaded into the graphs it names."""
from __future__ import annotations

import urllib.parse

import pytest

from sib.testing import SibProcess
from w3c_protocol_runner import ProtocolTest, check_format, entries, protocol_tests, send

TESTS = protocol_tests()
#: Every test of the manifest passes: none is out of scope (docs/sepa.md).
OUT_OF_SCOPE: dict[str, str] = {}


@pytest.fixture(scope="module")
def gate():
    with SibProcess("--memory", "--udp-port", "0", "--tcp-port", "-1", "--coap-port", "-1",
                    "--sepa-http-port", "0", "--sepa-ws-port", "0") as sib:
        yield sib.ports["http"]


def _endpoint(test: ProtocolTest, index: int) -> str:
    update = "update" in test.local and index == 0
    return "/update" if update else "/query"


def _reset(port: int, test: ProtocolTest) -> None:
    status, _, body = send(port, "POST", "/update", b"DROP ALL",
                           {"Content-Type": "application/sparql-update"})
    assert status == 200, body
    for graph, triples in test.graphs.items():
        text = f"INSERT DATA {{ GRAPH <{graph}> {{ {triples} }} }}".encode()
        status, _, body = send(port, "POST", "/update", text,
                               {"Content-Type": "application/sparql-update"})
        assert status == 200, body


def test_the_manifest_is_read_whole():
    """Every entry of the manifest has its requests, so none can go missing."""
    assert [t.iri for t in TESTS] == [iri for iri, _ in entries("protocol")]
    assert len(TESTS) == 34 and all(t.requests for t in TESTS)


@pytest.mark.parametrize("test", TESTS, ids=[t.local for t in TESTS])
def test_w3c_protocol(gate, test: ProtocolTest):
    if test.iri in OUT_OF_SCOPE:
        pytest.skip(OUT_OF_SCOPE[test.iri])
    _reset(gate, test)
    for i, request in enumerate(test.requests):
        path = _endpoint(test, i) + request.path.removeprefix("/sparql/")
        status, media, body = send(gate, request.method, path, request.body, request.headers)
        assert status // 100 in request.statuses, (test.iri, i, status, body[:500])
        if status // 100 == 2:
            check_format(request, media, body)


def test_multiple_updates_change_nothing(gate):
    """`update=CLEAR NAMED&update=CLEAR DEFAULT` is refused whole: the named graphs stay."""
    test = next(t for t in TESTS if t.local == "query_dataset_full")
    _reset(gate, test)
    status, _, _ = send(gate, "POST", "/update", b"update=CLEAR%20NAMED&update=CLEAR%20DEFAULT",
                        {"Content-Type": "application/x-www-form-urlencoded"})
    assert status == 400
    status, _, body = send(gate, "GET", "/query?query=ASK%7BGRAPH%20%3Fg%7B%3Fs%20%3Fp%20%3Fo%7D%7D")
    assert status == 200 and b"true" in body


FORM = {"Content-Type": "application/x-www-form-urlencoded", "Accept": "text/csv"}


def test_a_form_post_takes_the_dataset_in_its_url(gate):
    """Through `ksp-sib`: `POST /query?default-graph-uri=G` with a form body reads G, and
    `POST /update?using-graph-uri=G` with a form body matches in G, as their GET and direct
    POST forms do (they ran on the default graph without a word)."""
    test = next(t for t in TESTS if t.local == "query_dataset_full")
    _reset(gate, test)
    graph = next(iter(test.graphs))
    in_graph = len([t for t in test.graphs[graph].split(" .") if t.strip()])
    default = " ".join(f"<urn:d> <urn:p> {k} ." for k in range(in_graph + 2))  # not as many
    status, _, _ = send(gate, "POST", "/update", "update={}".format(urllib.parse.quote(
        f"INSERT DATA {{ {default} }}", safe="")).encode(), FORM)
    assert status == 200
    url = urllib.parse.quote(graph, safe="")
    query = urllib.parse.quote("SELECT (COUNT(*) AS ?n) WHERE { ?s ?p ?o }", safe="")
    status, _, body = send(gate, "POST", f"/query?default-graph-uri={url}",
                           f"query={query}".encode(), FORM)
    assert status == 200 and body.split()[1] == str(in_graph).encode(), body
    update = urllib.parse.quote("INSERT { <urn:seen> <urn:n> ?s } WHERE { ?s ?p ?o }", safe="")
    status, _, body = send(gate, "POST", f"/update?using-graph-uri={url}",
                           f"update={update}".encode(), FORM)
    assert status == 200, body
    status, _, body = send(gate, "GET", "/query?query=" + urllib.parse.quote(
        "SELECT ?s WHERE { <urn:seen> <urn:n> ?s }", safe=""), headers={"Accept": "text/csv"})
    assert b"urn:d" not in body and len(body.split()) == 1 + in_graph, body


def test_a_function_the_engine_lacks_is_400_naming_it(gate):
    """Through `ksp-sib`: a query or update calling a function pyoxigraph does not have is a
    client error naming it, not 500."""
    for path, field, text in (("/query", "query", "SELECT ?o WHERE { BIND(<urn:f>(1) AS ?o) }"),
                              ("/update", "update",
                               "INSERT { <urn:s> <urn:p> ?o } WHERE { BIND(<urn:f>(1) AS ?o) }")):
        status, _, body = send(gate, "POST", path,
                               f"{field}={urllib.parse.quote(text, safe='')}".encode(), FORM)
        assert status == 400 and b"urn:f" in body, body
