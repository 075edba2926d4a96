"""The SPARQL 1.1 Service Descriptions the gate answers at `GET /query` with no query and at
`GET /update` (and at `/secure/query` and `/secure/update` with a valid token): what a generic
client can learn of each endpoint without the SEPA-specific JSAP (`sib.sepa.jsap`, which stays
the SEPA view).

Each says what its endpoint does: its language (Query at `/query`, with the result formats it
serializes and the subscribe URLs; Update at `/update`),
the features (empty graphs are kept, the default graph is not the union of the named ones;
SERVICE only when `[sepa] service_endpoints` allows some), the default dataset (its default
graph; the named graphs are not listed, for their names may be what a grant hides), and the
SE Protocol's subscribe endpoint under `sepa:subscribeEndpoint`, a term of this project
(`urn:ksp-gateway:sepa#`, docs/sepa.md).
"""
from __future__ import annotations

from collections.abc import Iterable

import pyoxigraph as ox

__all__ = ["SD", "SEPA", "FORMATS", "describe_service", "RESULT_FORMATS"]

SD = "http://www.w3.org/ns/sparql-service-description#"
SEPA = "urn:ksp-gateway:sepa#"
_RDF_TYPE = ox.NamedNode("http://www.w3.org/1999/02/22-rdf-syntax-ns#type")
_W3 = "http://www.w3.org/ns/formats/"
#: The W3C format IRIs (http://www.w3.org/ns/formats/) of the gate's result media types.
RESULT_FORMATS = {
    "application/sparql-results+json": _W3 + "SPARQL_Results_JSON",
    "application/sparql-results+xml": _W3 + "SPARQL_Results_XML",
    "text/csv": _W3 + "SPARQL_Results_CSV",
    "text/tab-separated-values": _W3 + "SPARQL_Results_TSV",
    "text/turtle": _W3 + "Turtle",
    "application/n-triples": _W3 + "N-Triples",
    "application/rdf+xml": _W3 + "RDF_XML",
}
#: The description's own formats by media type (Turtle first: the default).
FORMATS = {
    "text/turtle": ox.RdfFormat.TURTLE,
    "application/ld+json": ox.RdfFormat.JSON_LD,
    "application/rdf+xml": ox.RdfFormat.RDF_XML,
    "application/n-triples": ox.RdfFormat.N_TRIPLES,
}
_PREFIXES = {"sd": SD, "sepa": SEPA, "formats": _W3}


def describe_service(endpoint: str, *, language: str = "SPARQL11Query",
                     media: Iterable[str] = (), subscribe: Iterable[str] = (),
                     federated: bool = False) -> list[ox.Triple]:
    """The description of the endpoint at `endpoint` (the URL it was asked at), which serves
    `language` (`SPARQL11Query` or `SPARQL11Update`): its result formats from the `media` types
    it serves, `subscribe`: the SE Protocol URLs, `federated`: whether SERVICE may reach some
    endpoint."""
    service = ox.BlankNode("service")
    dataset, graph = ox.BlankNode("dataset"), ox.BlankNode("default")
    triples = [ox.Triple(service, _RDF_TYPE, _sd("Service")),
               ox.Triple(service, _sd("endpoint"), ox.NamedNode(endpoint)),
               ox.Triple(service, _sd("supportedLanguage"), _sd(language)),
               ox.Triple(service, _sd("feature"), _sd("EmptyGraphs")),
               ox.Triple(service, _sd("defaultEntailmentRegime"),
                         ox.NamedNode("http://www.w3.org/ns/entailment/Simple")),
               ox.Triple(service, _sd("defaultDataset"), dataset),
               ox.Triple(dataset, _RDF_TYPE, _sd("Dataset")),
               ox.Triple(dataset, _sd("defaultGraph"), graph),
               ox.Triple(graph, _RDF_TYPE, _sd("Graph"))]
    if federated:
        triples.append(ox.Triple(service, _sd("feature"), _sd("BasicFederatedQuery")))
    for iri in dict.fromkeys(RESULT_FORMATS[m] for m in media if m in RESULT_FORMATS):
        triples.append(ox.Triple(service, _sd("resultFormat"), ox.NamedNode(iri)))
    for url in subscribe:
        triples.append(ox.Triple(service, ox.NamedNode(SEPA + "subscribeEndpoint"),
                                 ox.NamedNode(url)))
    return triples


def serialize(triples: list[ox.Triple], media: str) -> bytes:
    """The description in one of `FORMATS`."""
    fmt = FORMATS[media]
    prefixes = _PREFIXES if fmt in (ox.RdfFormat.TURTLE, ox.RdfFormat.RDF_XML) else None
    return ox.serialize(triples, format=fmt, prefixes=prefixes)


def _sd(name: str) -> ox.NamedNode:
    return ox.NamedNode(SD + name)
