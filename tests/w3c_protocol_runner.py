"""Reading the W3C protocol manifest (tests/w3c_manifests/protocol/manifest.ttl): each test's
HTTP requests and the responses expected, as the manifest encodes them (ht: requests,
mf:expectedStatus / expectedFormat / expectedBoolean), and sending them with http.client so
that the bytes, headers and method go as written (no Content-Type added)."""
from __future__ import annotations

import http.client
import json
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import pyoxigraph as ox

MANIFESTS = Path(__file__).resolve().parent / "w3c_manifests"
MF = "http://www.w3.org/2001/sw/DataAccess/tests/test-manifest#"
HT = "http://www.w3.org/2011/http#"
CNT = "http://www.w3.org/2011/content#"
UT = "http://www.w3.org/2009/sparql/tests/test-update#"
HTS = "http://www.w3.org/2011/http-statusCodes#StatusCode"
RDF = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
RDFS = "http://www.w3.org/2000/01/rdf-schema#"

BOOLEAN = {"application/sparql-results+json", "application/json",
           "application/sparql-results+xml", "application/xml"}
TABULAR = BOOLEAN | {"text/csv", "text/tab-separated-values"}
RDF_MEDIA = {"text/turtle", "application/n-triples", "application/rdf+xml"}


@dataclass
class Request:
    method: str
    path: str  # as the manifest writes it, from /sparql/
    body: bytes | None
    headers: dict[str, str]
    statuses: set[int]  # the first digits allowed: {2, 3}, {4}
    format: str | None = None  # "boolean", "tabular", "RDF"
    boolean: bool | None = None


@dataclass
class ProtocolTest:
    iri: str
    name: str
    graphs: dict[str, str] = field(default_factory=dict)  # graph IRI -> N-Triples to load
    requests: list[Request] = field(default_factory=list)

    @property
    def local(self) -> str:
        return self.iri.rsplit("#", 1)[-1]


def _one(store: ox.Store, s, p: str):
    for q in store.quads_for_pattern(s, ox.NamedNode(p), None):
        return q.object
    return None


def _all(store: ox.Store, s, p: str) -> list:
    return [q.object for q in store.quads_for_pattern(s, ox.NamedNode(p), None)]


def _list(store: ox.Store, head) -> list:
    items = []
    while head is not None and head != ox.NamedNode(RDF + "nil"):
        items.append(_one(store, head, RDF + "first"))
        head = _one(store, head, RDF + "rest")
    return items


def load_manifest(folder: str) -> tuple[ox.Store, ox.NamedNode, Path]:
    path = MANIFESTS / folder / "manifest.ttl"
    store = ox.Store()
    store.load(path=str(path), format=ox.RdfFormat.TURTLE, base_iri=path.as_uri())
    return store, ox.NamedNode(path.as_uri()), path.parent


def entries(folder: str) -> list[tuple[str, str]]:
    """(IRI, name) of each entry of a manifest, in its order."""
    store, manifest, _ = load_manifest(folder)
    return [(t.value, _one(store, t, MF + "name").value)
            for t in _list(store, _one(store, manifest, MF + "entries"))]


def protocol_tests() -> list[ProtocolTest]:
    store, manifest, folder = load_manifest("protocol")
    tests = []
    for t in _list(store, _one(store, manifest, MF + "entries")):
        test = ProtocolTest(t.value, _one(store, t, MF + "name").value)
        for data in _all(store, t, UT + "graphData"):
            file = Path(_one(store, data, UT + "graph").value.removeprefix("file://"))
            test.graphs[_one(store, data, RDFS + "label").value] = (folder / file.name).read_text()
        action = _one(store, t, MF + "action")
        for r in _list(store, _one(store, action, HT + "requests")):
            body = _one(store, r, HT + "body")
            raw = None
            if body is not None:
                encoding = _one(store, body, CNT + "characterEncoding")
                raw = _one(store, body, CNT + "chars").value.encode(
                    encoding.value if encoding is not None else "utf-8")
            headers = {_one(store, h, HT + "fieldName").value: _one(store, h, HT + "fieldValue").value
                       for h in _list(store, _one(store, r, HT + "headers"))}
            resp = _one(store, r, HT + "resp")
            statuses = {int(s.value.removeprefix(HTS)[0])
                        for s in _all(store, resp, MF + "expectedStatus")}
            fmt = _one(store, resp, MF + "expectedFormat")
            boolean = _one(store, resp, MF + "expectedBoolean")
            test.requests.append(Request(
                _one(store, r, HT + "methodName").value, _one(store, r, HT + "absolutePath").value,
                raw, headers, statuses, fmt.value if fmt is not None else None,
                boolean.value == "true" if boolean is not None else None))
        tests.append(test)
    return tests


def send(port: int, method: str, path: str, body: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, str, bytes]:
    """(status, media type, body) of one request over a fresh connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        media = (response.getheader("Content-Type") or "").split(";")[0].strip().lower()
        return response.status, media, response.read()
    finally:
        conn.close()


def boolean_of(media: str, body: bytes) -> bool:
    if "json" in media:
        return json.loads(body)["boolean"]
    root = ET.fromstring(body)
    (element,) = [e for e in root.iter() if e.tag.endswith("boolean")]
    return element.text.strip() == "true"


def check_format(request: Request, media: str, body: bytes) -> None:
    if request.format == "boolean":
        assert media in BOOLEAN, media
        if request.boolean is not None:
            assert boolean_of(media, body) is request.boolean, body
    elif request.format == "tabular":
        assert media in TABULAR, media
    elif request.format == "RDF":
        assert media in RDF_MEDIA, media
        fmt = ox.RdfFormat.from_media_type(media)
        list(ox.parse(body, format=fmt, base_iri="http://example.org/"))
