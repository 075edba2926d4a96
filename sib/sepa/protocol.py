"""Where a SPARQL 1.1 Protocol request carries its operation (§2.1 query, §2.2 update), and the
requests the Protocol says are not one: the checks the W3C protocol tests make
(tests/test_w3c_protocol.py).

An operation comes in exactly one place: the query string of a GET (queries only), an
`application/x-www-form-urlencoded` body, or a body of the operation's own media type with the
other parameters in the query string. The query string of a form POST counts too: a
`default-graph-uri` or `using-graph-uri` there sets the dataset as in the body (ignored, it
would run the operation on another dataset without a word). Refused with 400: the operation's
parameter given twice (`query=…&query=…`, in one place or both: which one would run?), the
other operation's parameter beside it (a query with an `update=`), the parameter in the query
string of a direct POST. Refused with 415: a body of another media type, and a body in a
charset other than UTF-8 (§2.1.3, §2.2.2: the body is UTF-8). `GET /query` with no parameter
at all is no operation: the gate answers its Service Description (`sib.sepa.description`).
"""
from __future__ import annotations

import pyoxigraph as ox
from multidict import MultiDict, MultiMapping

from aiohttp import web

from .broker import SepaError

__all__ = ["FORM", "operation", "base_iri"]

FORM = "application/x-www-form-urlencoded"
_UTF8 = frozenset({"utf-8", "utf8"})
_OTHER = {"query": "update", "update": "query"}


async def operation(request: web.Request, field: str, direct: str
                    ) -> tuple[str | None, MultiMapping[str]]:
    """(text, params) of a protocol request for `field` ("query" or "update") whose direct
    POST body has media type `direct`; text None for a GET with no parameter at all (the
    service description; HEAD as GET). SepaError for a request that is not one operation; aiohttp's
    HTTPRequestEntityTooLarge for a body over the limit."""
    if request.method in ("GET", "HEAD"):
        if not request.query:
            return None, request.query
        return _single(request.query, field), request.query
    kind = request.content_type
    charset = request.charset
    if charset is not None and charset.lower() not in _UTF8:
        raise SepaError(415, "unsupported_media_type",
                        f"a {field} body is UTF-8 (SPARQL 1.1 Protocol), not {charset}")
    if kind == FORM:  # the URL's parameters too: its dataset counts, as in a GET
        params = MultiDict(request.query)
        params.extend(await request.post())
        return _single(params, field), params
    if kind == direct:
        if field in request.query or _OTHER[field] in request.query:
            raise SepaError(400, "invalid_request",
                            f"a {direct} body is the {field}: no {field} or "
                            f"{_OTHER[field]} parameter beside it")
        return _given(await request.text(), field), request.query
    raise SepaError(415, "unsupported_media_type",
                    f"POST {request.path} takes {FORM} or {direct}, "
                    f"not {kind or 'no Content-Type'}")


def _single(params: MultiMapping[str], field: str) -> str:
    """The one value of `field`: 400 when it is missing, repeated, or beside the other
    operation's parameter."""
    other = _OTHER[field]
    if other in params:
        raise SepaError(400, "invalid_request",
                        f"an {other} parameter in a {field} request: "
                        + ("updates go to POST /update" if other == "update"
                           else "queries go to /query"))
    values = params.getall(field, [])
    if len(values) > 1:
        raise SepaError(400, "invalid_request",
                        f"{len(values)} {field} parameters: a request carries one {field}")
    return _given(values[0] if values else None, field)


def _given(text: object, field: str) -> str:
    if not isinstance(text, str) or not text.strip():
        raise SepaError(400, "invalid_request", f"no {field} given")
    return text


def base_iri(configured: str | None, host: str, http_port: int | None,
             https_port: int | None) -> str:
    """The service's base IRI: `configured` if given, else the root of the gate's plain HTTP
    listener (`http://HOST:PORT/`; its HTTPS one when that is off; `http://HOST/` with
    neither), `localhost` for a wildcard host. Relative IRIs in queries and updates resolve against it."""
    if configured:
        try:
            return ox.NamedNode(configured).value
        except ValueError:
            raise ValueError(f"the base IRI {configured!r} is not an absolute IRI") from None
    name = "localhost" if host in ("", "0.0.0.0", "::") else host
    name = f"[{name}]" if ":" in name else name
    if http_port is not None:
        return f"http://{name}:{http_port}/"
    return f"https://{name}:{https_port}/" if https_port is not None else f"http://{name}/"
