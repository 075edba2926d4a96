"""The W3C SPARQL 1.1 Service Description tests
(tests/w3c_manifests/service-description/manifest.ttl) against a live `ksp-sib`: `GET /query`
with no query, and `GET /update`, answer their endpoint's description (`sib.sepa.description`). The manifest names its three
tests only; each is implemented here as the W3C describes it (SPARQL 1.1 Service Description
§3, §4): the answer is RDF, it holds an `sd:endpoint` triple naming the URL asked, and it uses
the vocabulary as its schema says (classes, domains, ranges)."""
from __future__ import annotations

import pyoxigraph as ox
import pytest

from sib.sepa.description import SD, SEPA
from sib.testing import SibProcess
from w3c_protocol_runner import entries, send

RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
MANIFEST = "http://www.w3.org/2009/sparql/docs/tests/data-sparql11/service-description/manifest#"
#: The SD vocabulary's properties: (domain, range class or None for an IRI of any kind).
PROPERTIES = {
    "endpoint": ("Service", None), "feature": ("Service", "Feature"),
    "defaultEntailmentRegime": ("Service", "EntailmentRegime"),
    "supportedLanguage": ("Service", "Language"), "resultFormat": ("Service", None),
    "defaultDataset": ("Service", "Dataset"), "defaultGraph": ("Dataset", "Graph"),
}
LANGUAGES = {SD + n for n in ("SPARQL10Query", "SPARQL11Query", "SPARQL11Update")}
FEATURES = {SD + n for n in ("DereferencesURIs", "UnionDefaultGraph", "RequiresDataset",
                             "EmptyGraphs", "BasicFederatedQuery")}


@pytest.fixture(scope="module")
def gate():
    with SibProcess("--memory", "--udp-port", "0", "--tcp-port", "-1", "--coap-port", "-1",
                    "--sepa-http-port", "0", "--sepa-ws-port", "0") as sib:
        yield sib.ports["http"], sib.ports["ws"]


def describe(port: int, accept: str = "text/turtle", path: str = "/query"
             ) -> tuple[str, list[ox.Triple]]:
    status, media, body = send(port, "GET", path, headers={"Accept": accept})
    assert status == 200, body
    fmt = ox.RdfFormat.from_media_type(media)
    assert fmt is not None, media
    return media, [ox.Triple(q.subject, q.predicate, q.object)
                   for q in ox.parse(body, format=fmt, base_iri="http://example.org/")]


def returns_rdf(port: int, ws_port: int) -> None:
    """GET on the endpoint returns RDF."""
    media, triples = describe(port)
    assert media == "text/turtle" and triples


def has_endpoint_triple(port: int, ws_port: int) -> None:
    """The description holds an sd:endpoint triple whose object is the URL asked."""
    _, triples = describe(port)
    endpoints = {t.object for t in triples if t.predicate.value == SD + "endpoint"}
    assert endpoints == {ox.NamedNode(f"http://127.0.0.1:{port}/query")}


def conforms_to_schema(port: int, ws_port: int) -> None:
    """Every sd: term is of the vocabulary, used on subjects and objects of its domain and
    range; the languages and features are the vocabulary's instances."""
    _, triples = describe(port)
    types: dict = {}
    for t in triples:
        if t.predicate.value == RDF_TYPE:
            types.setdefault(t.subject, set()).add(t.object.value)
    for t in triples:
        p = t.predicate.value
        if p == RDF_TYPE:
            assert t.object.value.removeprefix(SD) in ("Service", "Dataset", "Graph"), t
            continue
        if p.startswith(SEPA):
            assert p == SEPA + "subscribeEndpoint" and isinstance(t.object, ox.NamedNode)
            continue
        assert p.startswith(SD) and p.removeprefix(SD) in PROPERTIES, t
        domain, range_ = PROPERTIES[p.removeprefix(SD)]
        assert SD + domain in types.get(t.subject, ()), t
        if range_ in ("Dataset", "Graph"):
            assert SD + range_ in types.get(t.object, ()), t
        elif range_ == "Language":
            assert t.object.value in LANGUAGES, t
        elif range_ == "Feature":
            assert t.object.value in FEATURES, t
        else:
            assert isinstance(t.object, ox.NamedNode), t


CHECKS = {MANIFEST + "returns-rdf": returns_rdf,
          MANIFEST + "has-endpoint-triple": has_endpoint_triple,
          MANIFEST + "conforms-to-schema": conforms_to_schema}
ENTRIES = entries("service-description")


def test_every_manifest_entry_is_implemented():
    assert {iri for iri, _ in ENTRIES} == set(CHECKS)


@pytest.mark.parametrize("iri", [iri for iri, _ in ENTRIES],
                         ids=[iri.rsplit("#", 1)[1] for iri, _ in ENTRIES])
def test_w3c_service_description(gate, iri):
    CHECKS[iri](*gate)


@pytest.mark.parametrize("accept", ["application/ld+json", "application/rdf+xml",
                                    "application/n-triples", "text/turtle"])
def test_the_description_by_accept(gate, accept):
    """Turtle (also for */* and no Accept), JSON-LD, RDF/XML, N-Triples: the same graph."""
    media, triples = describe(gate[0], accept)
    assert media == accept
    assert len(triples) == len(describe(gate[0], "*/*")[1]) == len(describe(gate[0], "")[1])


def _by_predicate(triples: list[ox.Triple]) -> dict[str, set[str]]:
    by: dict[str, set[str]] = {}
    for t in triples:
        by.setdefault(t.predicate.value, set()).add(t.object.value)
    return by


def test_each_endpoint_describes_what_it_serves(gate):
    """`/query`: Query, the seven result formats and the SE Protocol's subscribe URL;
    `/update`: Update alone, and no result format (it answers none)."""
    port, ws_port = gate
    query = _by_predicate(describe(port)[1])
    assert query[SD + "supportedLanguage"] == {SD + "SPARQL11Query"}
    assert len(query[SD + "resultFormat"]) == 7
    assert query[SEPA + "subscribeEndpoint"] == {f"ws://127.0.0.1:{ws_port}/subscribe"}
    assert SD + "BasicFederatedQuery" not in query[SD + "feature"]  # no SERVICE endpoint allowed
    update = _by_predicate(describe(port, path="/update")[1])
    assert update[SD + "supportedLanguage"] == {SD + "SPARQL11Update"}
    assert update[SD + "endpoint"] == {f"http://127.0.0.1:{port}/update"}
    assert SD + "resultFormat" not in update and SEPA + "subscribeEndpoint" not in update
    assert SD + "EmptyGraphs" in update[SD + "feature"]


@pytest.mark.parametrize("path", ["/query", "/update"])
def test_head_answers_as_get_without_a_body(gate, path):
    status, media, body = send(gate[0], "HEAD", path)
    assert (status, media, body) == (200, "text/turtle", b"")
    status, _, body = send(gate[0], "HEAD", "/query?query=ASK%20%7B%7D")
    assert status == 200 and body == b""


def test_an_update_by_get_is_refused(gate):
    status, _, body = send(gate[0], "GET", "/update?update=CLEAR%20ALL")
    assert status == 405 and b"POST" in body, body


def test_a_get_with_parameters_but_no_query_is_refused(gate):
    status, _, _ = send(gate[0], "GET", "/query?default-graph-uri=http%3A%2F%2Fexample.org%2F")
    assert status == 400
