"""JSAP files (SEPA's "JSON SPARQL Application Profile"): namespaces, and named queries and
updates whose `forcedBindings` a caller fills in — so that `kp.query("ALIAS", bindings={...})`
works as in SEPA's client APIs. The JSAP that `ksp-sib jsap` prints also names the SIB's KSP
listeners (`extended.ksp`), so `connect(jsap="app.jsap")` needs no URL.

    {"namespaces": {"gh": "http://example.org/greenhouse#"},
     "queries": {"TEMPERATURE": {"sparql": "SELECT ?t WHERE { ?sensor gh:temperature ?t }",
                                 "forcedBindings": {"sensor": {"type": "uri"}}}},
     "updates": {...}}

A binding replaces each `?name` / `$name` of the text by the term (`uri` → `<…>`, `literal` →
a quoted literal with the binding's `datatype` or `language`), as SEPA's clients do; a forced
binding with no value, given neither in the file nor by the caller, is an error naming it.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import rdflib


class JsapError(ValueError):
    """A JSAP file or a binding that cannot be used, in words."""


class Jsap:
    def __init__(self, data: Mapping) -> None:
        if not isinstance(data, Mapping):
            raise JsapError("a JSAP is a JSON object")
        self.namespaces: dict[str, str] = dict(data.get("namespaces") or {})
        self.queries: dict[str, dict] = dict(data.get("queries") or {})
        self.updates: dict[str, dict] = dict(data.get("updates") or {})
        extended = data.get("extended") or {}
        ksp = extended.get("ksp") if isinstance(extended, Mapping) else None
        #: The SIB's KSP listeners by URL scheme, as `ksp-sib jsap` writes them.
        self.ksp: dict[str, str] = dict(ksp) if isinstance(ksp, Mapping) else {}
        for kind, table in (("queries", self.queries), ("updates", self.updates)):
            for alias, entry in table.items():
                if not isinstance(entry, Mapping) or not isinstance(entry.get("sparql"), str):
                    raise JsapError(f"{kind}.{alias}: needs a 'sparql' text")
        self.data = data

    def url(self) -> str:
        """The SIB's KSP URL from the JSAP (`extended.ksp`): UDP, as boards speak, else TCP,
        TLS or CoAP."""
        for scheme in ("udp", "tcp", "tcps", "coap"):
            if isinstance(self.ksp.get(scheme), str):
                return self.ksp[scheme]
        raise JsapError("the JSAP names no KSP listener (extended.ksp, as `ksp-sib jsap` "
                        "writes it): give the SIB's URL")

    @classmethod
    def load(cls, path: str | Path) -> "Jsap":
        try:
            return cls(json.loads(Path(path).read_text()))
        except (OSError, ValueError) as exc:
            raise JsapError(f"{path}: {exc}") from None

    def text(self, alias: str, bindings: Mapping[str, Any] | None = None) -> str:
        """The SPARQL text of query or update `alias` with its bindings filled in."""
        entry = self.queries.get(alias) or self.updates.get(alias)
        if entry is None:
            raise JsapError(f"no query or update {alias!r} in the JSAP (it has: "
                            f"{', '.join([*self.queries, *self.updates]) or 'none'})")
        text = entry["sparql"]
        forced = entry.get("forcedBindings") or {}
        given = dict(bindings or {})
        unknown = set(given) - set(forced)
        if unknown:
            raise JsapError(f"{alias}: no forced binding {sorted(unknown)} (it has: "
                            f"{', '.join(forced) or 'none'})")
        for name, spec in forced.items():
            if name in given:
                value = given[name]
            elif "value" in spec:
                value = spec["value"]
            else:
                raise JsapError(f"{alias}: the forced binding {name!r} needs a value")
            term = _term(value, spec, f"{alias}.{name}")
            text = re.sub(rf"[?$]{re.escape(name)}(?![\w\u00b7\u0300-\u036f\u203f-\u2040])",
                          lambda _m: term.n3(), text)
        return text


def _term(value: Any, spec: Mapping, where: str) -> rdflib.term.Identifier:
    if isinstance(value, rdflib.term.Identifier):
        return value
    kind = spec.get("type", "literal")
    if kind == "uri":
        return rdflib.URIRef(str(value))
    if kind == "bnode":
        return rdflib.BNode(str(value))
    if kind == "literal":
        if spec.get("language"):
            return rdflib.Literal(str(value), lang=spec["language"])
        if spec.get("datatype"):
            return rdflib.Literal(str(value), datatype=rdflib.URIRef(spec["datatype"]),
                                  normalize=False)
        return rdflib.Literal(value)
    raise JsapError(f"{where}: type {kind!r}: one of uri, literal, bnode")
