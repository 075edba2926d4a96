"""The SPARQL 1.1 Graph Store HTTP Protocol on the gate (W3C Recommendation, 2013): GET, HEAD,
PUT, POST and DELETE of whole graphs at `/data` (and `/secure/data` in the secure mode).

A graph is named three ways: `?default`, `?graph=IRI` (indirect identification; a relative
IRI is resolved against the request URL), or a path below the store, `/data/…`, whose request
URL is the graph's IRI (direct identification). A POST to the store itself makes a new graph
below it and says where (`Location`, §5.5).

Every write is one SPARQL update's worth of operations, applied by the broker as `/update`'s
are (`SepaBroker.apply`): the same access checks per graph, the same deltas, the same SEPA
notifications and KSP INDs, all or nothing. A PUT is `CLEAR SILENT GRAPH g; CREATE SILENT GRAPH
g; INSERT DATA { GRAPH g {…} }` (CLEAR, not DROP: the graph exists afterwards in either case, and
a KSP persistent operation naming it is not ended by a replacement of its content), a POST
`CREATE SILENT GRAPH g; INSERT DATA {…}`, a DELETE `DROP GRAPH g`. Blank nodes of a body are
fresh per request, as INSERT DATA's. A read is `CONSTRUCT WHERE { ?s ?p ?o }` over the graph
alone, on a reader thread with the gate's queries.
"""
from __future__ import annotations

import email.parser
import email.policy
import uuid
from collections.abc import Awaitable, Callable

import pyoxigraph as ox
from aiohttp import web

from ksp.terms import DEFAULT_GRAPH, IRI

from ..access import Grant
from ..budget import OverBudget
from ..oxterms import resolve_iri
from .broker import SepaBroker, SepaError
from .negotiation import accepted
from .update import Dataset, Operation

__all__ = ["GraphStore", "GRAPH_STORE", "READ_FORMATS", "WRITE_FORMATS"]

#: The graph store's path on the HTTP listener (`/secure` before it on the HTTPS one).
GRAPH_STORE = "/data"
#: What a PUT or POST body may be, by media type (datasets, N-Quads and TriG, are not graphs).
READ_FORMATS = {
    "text/turtle": ox.RdfFormat.TURTLE,
    "application/n-triples": ox.RdfFormat.N_TRIPLES,
    "application/rdf+xml": ox.RdfFormat.RDF_XML,
    "application/ld+json": ox.RdfFormat.JSON_LD,
    "text/n3": ox.RdfFormat.N3,
}
#: What a GET answers with, by media type (the first when the Accept header does not say).
WRITE_FORMATS = {
    "text/turtle": ox.RdfFormat.TURTLE,
    "application/n-triples": ox.RdfFormat.N_TRIPLES,
    "application/rdf+xml": ox.RdfFormat.RDF_XML,
    "application/ld+json": ox.RdfFormat.JSON_LD,
}
MULTIPART = ("multipart/form-data", "multipart/mixed")
METHODS = ("GET", "HEAD", "PUT", "POST", "DELETE")
_READ = "CONSTRUCT WHERE { ?s ?p ?o }"

Handler = Callable[[web.Request, "Grant | None"], Awaitable[web.Response]]
#: The gate's wrapper of a request (`SepaGate._answer`): token, pace, errors as JSON.
Answer = Callable[..., Awaitable[web.Response]]


class GraphStore:
    """The Graph Store endpoint over one SIB and its SEPA broker."""

    def __init__(self, sib, broker: SepaBroker) -> None:
        self.sib, self.broker = sib, broker

    def add_routes(self, app: web.Application, base: str, answer: Answer) -> None:
        """Serve the store at `base` and below it on `app`; `answer(request, handler, kind=)`
        runs each request as the gate runs its others (the app's `client_max_size` is the
        body limit: 413 past it)."""
        async def handle(request: web.Request) -> web.Response:
            return await answer(request, self.serve, kind="data")

        for method in METHODS:
            app.router.add_route(method, base, handle)
            app.router.add_route(method, base + "/{tail:.+}", handle)

    async def serve(self, request: web.Request, grant: Grant | None) -> web.Response:
        graph = _target(request)
        if request.method in ("GET", "HEAD"):
            if graph is None:
                raise SepaError(400, "invalid_request", "name a graph: ?default, ?graph=IRI or "
                                f"a path below {_store_path(request)}")
            return await self._get(request, graph, grant)
        if request.method == "DELETE":
            if graph is None:
                raise SepaError(400, "invalid_request", "DELETE names a graph")
            await self.sib.call(lambda: self._delete(graph, grant))
            return web.Response(status=200)
        location = None
        if graph is None:  # POST to the store itself: a new graph below it (§5.5)
            if request.method != "POST":
                raise SepaError(400, "invalid_request", "PUT names a graph")
            location = f"{_store_url(request)}/{uuid.uuid4().hex}"
            graph = IRI(location)
        quads = await _body(request, graph)
        replace = request.method == "PUT"
        existed = await self.sib.call(lambda: self._write(graph, quads, replace, grant))
        if not existed:
            response = web.Response(status=201)
            if location is not None:
                response.headers["Location"] = location
            return response
        return web.Response(status=204 if replace else 200)

    async def _get(self, request: web.Request, graph: IRI, grant: Grant | None
                   ) -> web.Response:
        header = request.headers.get("Accept", "")
        media = accepted(header, WRITE_FORMATS)
        if media is None:
            raise SepaError(406, "not_acceptable", f"no graph format for Accept: {header}; "
                            f"a graph comes as {', '.join(WRITE_FORMATS)}")

        def snapshot():  # access first: a refused client learns nothing of the graph
            return (self.broker.query(_READ, Dataset((graph,), ()), grant),
                    self.broker.store.graph_exists(graph))

        def read() -> bytes:  # the graph's content and its existence, from one state
            result, exists = self.broker.store.stable(snapshot)
            try:
                if not exists:
                    raise SepaError(404, "not_found", f"no graph <{graph}>")
                return result.serialize(format=WRITE_FORMATS[media])
            finally:
                del result  # here: pyoxigraph's results may not be dropped on another thread

        try:
            body = await self.sib.read(read)
        except OverBudget as exc:
            raise SepaError(503, "timeout", str(exc)) from None
        return web.Response(body=body, content_type=media, charset="utf-8")

    def _delete(self, graph: IRI, grant: Grant | None) -> None:
        """DROP GRAPH, on the scheduler; 404 (after the access check) when there is none."""
        existed = self.broker.store.graph_exists(graph)
        self.broker.apply([Operation("DROP", True, graphs=(_which(graph),))], grant,
                          writes=(graph,))
        if not existed:
            raise SepaError(404, "not_found", f"no graph <{graph}>")

    def _write(self, graph: IRI, quads: list, replace: bool, grant: Grant | None) -> bool:
        """PUT (`replace`) or POST, on the scheduler; whether the graph had content before
        (a named graph: existed; the default graph, which always exists: held a triple)."""
        store = self.broker.store
        if graph == DEFAULT_GRAPH:
            existed = next(store.oxigraph.quads_for_pattern(None, None, None, ox.DefaultGraph()),
                           None) is not None
        else:
            existed = store.graph_exists(graph)
        ops = [Operation("CLEAR", True, graphs=(_which(graph),))] if replace else []
        if graph != DEFAULT_GRAPH:
            ops.append(Operation("CREATE", True, graphs=(graph,)))
        ops.append(Operation("INSERT DATA", insert=quads))
        self.broker.apply(ops, grant, writes=(graph,))
        return existed


def _which(graph: IRI) -> str:
    """A graph as CLEAR and DROP name it."""
    return "DEFAULT" if graph == DEFAULT_GRAPH else graph


def _store_url(request: web.Request) -> str:
    return str(request.url.with_path(_store_path(request)).with_query(None))


def _store_path(request: web.Request) -> str:
    tail = request.match_info.get("tail")
    return request.path if tail is None else request.path[:-len(tail) - 1]


def _target(request: web.Request) -> IRI | None:
    """The graph a request names (None: the store itself)."""
    params = request.query
    named = params.getall("graph", [])
    if request.match_info.get("tail") is not None:
        if named or "default" in params:
            raise SepaError(400, "invalid_request",
                            "a graph named by its URL takes no ?default or ?graph")
        return IRI(str(request.url.with_query(None).with_fragment(None)))
    if len(named) + ("default" in params) > 1:
        raise SepaError(400, "invalid_request", "name one graph: ?default or one ?graph=IRI")
    if "default" in params:
        return DEFAULT_GRAPH
    if not named:
        return None
    try:
        return IRI(resolve_iri(str(request.url), named[0]))
    except ValueError as exc:
        raise SepaError(400, "invalid_request", f"?graph={named[0]}: {exc}") from None


async def _body(request: web.Request, graph: IRI) -> list:
    """The quads of a PUT or POST body, into `graph`: 413 past the body limit, 415 for a media
    type not in READ_FORMATS (or a charset but UTF-8), 400 for a body that does not parse. A
    multipart body (§5.5) is the union of its parts."""
    try:
        data = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise SepaError(413, "request_too_large",
                        "the body is larger than the gate takes (max_body_bytes)") from None
    kind = request.content_type
    parts = (_parts(request.headers.get("Content-Type", ""), data) if kind in MULTIPART
             else [(kind, request.charset, data)])
    target = ox.DefaultGraph() if graph == DEFAULT_GRAPH else ox.NamedNode(graph)
    quads = []
    for media, charset, payload in parts:
        fmt = READ_FORMATS.get(media)
        if fmt is None or (charset or "utf-8").lower() not in ("utf-8", "us-ascii"):
            raise SepaError(415, "unsupported_media_type",
                            f"a graph comes as {', '.join(READ_FORMATS)} (UTF-8), not "
                            f"{media or 'no Content-Type'}" + (f"; charset={charset}"
                                                               if charset else ""))
        try:
            quads += [ox.Quad(t.subject, t.predicate, t.object, target)
                      for t in ox.parse(payload, fmt, base_iri=str(request.url),
                                        without_named_graphs=True, rename_blank_nodes=True)]
        except (SyntaxError, ValueError) as exc:
            raise SepaError(400, "invalid_graph", f"{media}: {exc}") from None
    return quads


def _parts(content_type: str, data: bytes) -> list[tuple[str, str | None, bytes]]:
    """(media type, charset, payload) of each leaf part of a multipart body (nested ones
    too), read from bytes already under the body limit."""
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode("latin-1") + data)
    if not message.is_multipart():
        raise SepaError(400, "invalid_request", "a multipart body without its boundary")
    return [(part.get_content_type(), part.get_content_charset(),
             part.get_payload(decode=True) or b"")
            for part in message.walk() if not part.is_multipart()]
