"""The JSAP of a running SIB: where its SEPA gate and KSP listeners are, in the shape SEPA's
clients read (sepa-js's `Jsap`, the reference broker's JSAP files), so that an application's
JSAP (its namespaces, queries and updates) can be pointed at this SIB unchanged.

The gate serves it at `GET /jsap` with the ports it bound and the host the client reached it
by; `ksp-sib jsap` prints it (docs/sepa.md, "JSAP"). KSP's own listeners go under
`extended.ksp` as URLs, which `transports.connect(jsap=...)` uses when given no URL.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Namespaces every JSAP of the SIB carries (the `[sepa] namespaces` table adds to them).
NAMESPACES = {
    "rdf": "http://www.w3.org/1999/02/22-rdf-syntax-ns#",
    "rdfs": "http://www.w3.org/2000/01/rdf-schema#",
    "xsd": "http://www.w3.org/2001/XMLSchema#",
    "owl": "http://www.w3.org/2002/07/owl#",
    "sosa": "http://www.w3.org/ns/sosa/",
}
#: Keys of an application's JSAP that `merge` keeps; the rest describes the SIB.
APPLICATION_KEYS = ("graphs", "namespaces", "extended", "queries", "updates")


def describe(host: str, *, http_port: int | None, ws_port: int | None,
             https_port: int | None = None, wss_port: int | None = None,
             ksp: Mapping[str, int] | None = None,
             namespaces: Mapping[str, str] | None = None, secure: bool = False
             ) -> dict[str, Any]:
    """A JSAP for the SIB at `host` with these ports (None: that listener is off). `secure`
    describes the secure mode (HTTPS, WSS, OAuth) — also what is described when the plain
    ports are off and the secure ones on."""
    secure = (secure or http_port is None) and https_port is not None
    if secure:
        protocol, port, base = "https", https_port, "/secure"
    else:
        protocol, port, base = "http", http_port, ""
    available = {}
    if ws_port is not None:
        available["ws"] = {"port": ws_port, "path": "/subscribe"}
    if wss_port is not None:
        available["wss"] = {"port": wss_port, "path": "/secure/subscribe"}
    se_protocol = "wss" if (secure or "ws" not in available) and "wss" in available else "ws"
    jsap: dict[str, Any] = {"host": host}
    if https_port is not None:
        jsap["oauth"] = {"enable": secure,
                         "register": f"https://{host}:{https_port}/oauth/register",
                         "tokenRequest": f"https://{host}:{https_port}/oauth/token"}
    else:
        jsap["oauth"] = {"enable": False}
    if port is not None:
        jsap["sparql11protocol"] = {
            "protocol": protocol, "port": port,
            "query": {"path": f"{base}/query", "method": "POST", "format": "JSON"},
            "update": {"path": f"{base}/update", "method": "POST", "format": "JSON"}}
    if available:
        jsap["sparql11seprotocol"] = {"protocol": se_protocol, "availableProtocols": available}
    jsap["graphs"] = {}
    jsap["namespaces"] = {**NAMESPACES, **(namespaces or {})}
    urlhost = f"[{host}]" if ":" in host else host
    jsap["extended"] = {"ksp": {t: f"{t}://{urlhost}:{p}" for t, p in (ksp or {}).items()}}
    jsap["queries"], jsap["updates"] = {}, {}
    return jsap


def merge(sib: Mapping[str, Any], application: Mapping[str, Any]) -> dict[str, Any]:
    """The application's JSAP pointed at the SIB: its graphs, namespaces, queries and updates
    (namespaces and `extended` merged over the SIB's), the SIB's host, ports and paths."""
    merged = dict(sib)
    for key in APPLICATION_KEYS:
        value = application.get(key)
        if value is None:
            continue
        if not isinstance(value, Mapping):
            raise ValueError(f"the application JSAP's {key!r} is not an object")
        if key in ("namespaces", "extended"):
            value = {**sib.get(key, {}), **value, **({"ksp": sib["extended"]["ksp"]}
                                                     if key == "extended" else {})}
        merged[key] = dict(value)
    return merged
