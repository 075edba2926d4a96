"""Table 3.5 of the wire format: the IRIs sent as a one-byte reserved word (code = index).
Loaded by the codec for an IRI under http://www.w3.org/, where all of them are, and by the
result reader for a reserved word: a board whose terms are its own IRIs never loads it."""
XSD = "http://www.w3.org/2001/XMLSchema#"
RDF = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
RDFS = "http://www.w3.org/2000/01/rdf-schema#"
OWL = "http://www.w3.org/2002/07/owl#"

RESERVED = (RDF + "type", RDFS + "Class", RDFS + "subClassOf", RDF + "Property",
            RDFS + "subPropertyOf", RDFS + "range", RDFS + "domain", OWL + "TransitiveProperty",
            OWL + "sameAs", XSD + "string", XSD + "integer", XSD + "float", XSD + "dateTime",
            XSD + "boolean")
