"""The term model shared by ksp/, sib/ and bridge/.

Terms are tiny immutable values (a `str` subclass and named tuples) because the codec makes
thousands of them per millisecond; rdflib terms cost 0.7 µs (URIRef) and 6.7 µs (Literal) each
to create, more than a whole KSP message is allowed to take. rdflib and pyoxigraph terms are
converted at the edges (`ksp.rdf`).
"""
from __future__ import annotations

import datetime as _dt
import math
from typing import NamedTuple, Union

from .codes import RDF, XSD

XSD_STRING = XSD + "string"
XSD_INTEGER = XSD + "integer"
XSD_FLOAT = XSD + "float"
XSD_DOUBLE = XSD + "double"
XSD_DECIMAL = XSD + "decimal"
XSD_DATETIME = XSD + "dateTime"
XSD_BOOLEAN = XSD + "boolean"
RDF_LANGSTRING = RDF + "langString"


class IRI(str):
    """An absolute IRI. `IRI("")` is the default graph in graph-name fields (R15)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"IRI({str.__repr__(self)})"


DEFAULT_GRAPH = IRI("")


class BNode(NamedTuple):
    """A blank node, by label (no `_:`)."""

    label: str


class Var(NamedTuple):
    """A variable, by its index in the message (§4.5)."""

    index: int


class Literal(NamedTuple):
    """An RDF literal: lexical form, datatype IRI, language tag (then datatype is rdf:langString)."""

    lexical: str
    datatype: str = XSD_STRING
    lang: str | None = None

    @classmethod
    def of(cls, value: object) -> "Literal":
        """The literal RDF tools would write for a Python value."""
        if isinstance(value, bool):
            return cls("true" if value else "false", XSD_BOOLEAN)
        if isinstance(value, int):
            return cls(str(value), XSD_INTEGER)
        if isinstance(value, float):
            return cls(double_lexical(value), XSD_DOUBLE)
        if isinstance(value, _dt.datetime):
            return cls(value.isoformat(), XSD_DATETIME)
        if isinstance(value, str):
            return cls(value)
        raise TypeError(f"no RDF literal for {type(value).__name__}")

    @classmethod
    def lang_string(cls, text: str, lang: str) -> "Literal":
        return cls(text, RDF_LANGSTRING, lang)

    def to_python(self) -> object:
        """The Python value of the literal, or its lexical form when it has no simpler one."""
        dt, lex = self.datatype, self.lexical
        try:
            if dt == XSD_INTEGER:
                return int(lex)
            if dt in (XSD_FLOAT, XSD_DOUBLE, XSD_DECIMAL):
                return float({"INF": "inf", "-INF": "-inf"}.get(lex, lex))
            if dt == XSD_BOOLEAN:
                return lex in ("true", "1")
            if dt == XSD_DATETIME:
                return _dt.datetime.fromisoformat(lex)
        except ValueError:
            pass
        return lex


def double_lexical(value: float) -> str:
    """Lexical form of an xsd:double (§4.3): Python's repr, INF/-INF/NaN."""
    if math.isfinite(value):
        return repr(value)
    if math.isnan(value):
        return "NaN"
    return "INF" if value > 0 else "-INF"


class Triple(NamedTuple):
    s: "Term"
    p: "Term"
    o: "Term"


Term = Union[IRI, BNode, Var, Literal]
Graph = tuple[Triple, ...]

#: Datatypes that (may) travel in a compact literal form, so need no datatype IRI on the wire.
COMPACT_DATATYPES = frozenset({XSD_STRING, XSD_INTEGER, XSD_FLOAT, XSD_DATETIME, XSD_BOOLEAN,
                               XSD_DOUBLE, RDF_LANGSTRING})
