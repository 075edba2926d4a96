"""RDF terms as the firmware holds them: an IRI is a str, a variable an int (its index),
a literal a `Lit`, a blank node a `BNode`. Plain values keep the heap small on a board."""
import struct

from .floats import lexical

XSD = "http://www.w3.org/2001/XMLSchema#"
RDF = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
RDFS = "http://www.w3.org/2000/01/rdf-schema#"
XSD_STRING = XSD + "string"
XSD_INTEGER = XSD + "integer"
XSD_FLOAT = XSD + "float"
XSD_DOUBLE = XSD + "double"
XSD_DATETIME = XSD + "dateTime"
XSD_BOOLEAN = XSD + "boolean"
RDF_LANGSTRING = RDF + "langString"

#: Table 3.5: the IRIs sent as a one-byte reserved word (code = index).
RESERVED = (RDF + "type", RDFS + "Class", RDFS + "subClassOf", RDF + "Property",
            RDFS + "subPropertyOf", RDFS + "range", RDFS + "domain",
            "http://www.w3.org/2002/07/owl#TransitiveProperty",
            "http://www.w3.org/2002/07/owl#sameAs", XSD_STRING, XSD_INTEGER, XSD_FLOAT,
            XSD_DATETIME, XSD_BOOLEAN)


class Lit:
    """A literal: lexical form, datatype IRI, language tag (then datatype is rdf:langString)."""

    __slots__ = ("value", "datatype", "lang")

    def __init__(self, value, datatype=XSD_STRING, lang=None):
        self.value = value
        self.datatype = RDF_LANGSTRING if lang is not None else datatype
        self.lang = lang

    def __eq__(self, other):
        return (isinstance(other, Lit) and self.value == other.value
                and self.datatype == other.datatype and self.lang == other.lang)

    def __repr__(self):
        return "Lit(%r, %r, %r)" % (self.value, self.datatype, self.lang)


class BNode:
    """A blank node, by label (no `_:`)."""

    __slots__ = ("label",)

    def __init__(self, label):
        self.label = label

    def __eq__(self, other):
        return isinstance(other, BNode) and self.label == other.label

    def __repr__(self):
        return "BNode(%r)" % self.label


def flt(x):
    """An xsd:float literal of a number, in the canonical form that travels as 4 bytes."""
    return Lit(lexical(struct.unpack("<I", struct.pack("<f", x))[0], False), XSD_FLOAT)


def integer(n):
    return Lit(str(int(n)), XSD_INTEGER)


def boolean(b):
    return Lit("true" if b else "false", XSD_BOOLEAN)
