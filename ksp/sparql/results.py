"""KSP results as SPARQL 1.1 Query Results JSON (and back), and triples as N-Triples.
"""
from __future__ import annotations

from typing import Iterable, Sequence

from ..codes import Tx
from ..errors import SparqlError
from ..model import AskResult, ConstructResult, Result, SelectResult
from ..terms import IRI, XSD_STRING, BNode, Literal, Term, Triple, Var
from .render import CONSTRUCT_VARS, _Writer, var_name


# -- results -------------------------------------------------------------------------------

def _term_json(term: Term) -> dict:
    if isinstance(term, IRI):
        return {"type": "uri", "value": str(term)}
    if isinstance(term, BNode):
        return {"type": "bnode", "value": term.label}
    if isinstance(term, Literal):
        out = {"type": "literal", "value": term.lexical}
        if term.lang is not None:
            out["xml:lang"] = term.lang
        elif term.datatype != XSD_STRING:
            out["datatype"] = term.datatype
        return out
    raise SparqlError(f"{term!r} cannot be a result term")


def results_json(result: Result, names: Sequence[str] | None = None) -> dict:
    """A KSP result in the W3C SPARQL 1.1 Query Results JSON format.

    SELECT: `head.vars` are the variable names (`names` or `v{k}`), unbound variables are
    absent from their binding. ASK: `{"head": {}, "boolean": …}`. CONSTRUCT: one binding per
    triple over the variables `subject`, `predicate`, `object` (`CONSTRUCT_VARS`), so that the
    same JSON reader handles every result; `to_ntriples` gives the graph as N-Triples. TRC (the
    `total` of a paged result) has no place in the format and is not carried.
    """
    if isinstance(result, AskResult):
        return {"head": {}, "boolean": bool(result.value)}
    if isinstance(result, ConstructResult):
        return {"head": {"vars": list(CONSTRUCT_VARS)},
                "results": {"bindings": [
                    {k: _term_json(m) for k, m in zip(CONSTRUCT_VARS, t)}
                    for t in result.triples]}}
    if isinstance(result, SelectResult):
        vars_ = [var_name(k, names) for k in range(result.variables)]
        return {"head": {"vars": vars_},
                "results": {"bindings": [
                    {v: _term_json(t) for v, t in zip(vars_, row) if t is not None}
                    for row in result.rows]}}
    raise SparqlError(f"{result!r} is not a KSP query result")


def _term_from_json(obj: object) -> Term:
    if not isinstance(obj, dict):
        raise SparqlError(f"a result term must be a JSON object, not {obj!r}")
    kind, value = obj.get("type"), obj.get("value")
    if not isinstance(value, str):
        raise SparqlError(f"result term {obj!r} has no string value")
    if kind == "uri":
        return IRI(value)
    if kind == "bnode":
        if not value:
            raise SparqlError("a blank node needs a label")
        return BNode(value)
    if kind in ("literal", "typed-literal"):  # typed-literal: the 2008 form
        lang, dt = obj.get("xml:lang"), obj.get("datatype")
        if lang is not None:
            if not isinstance(lang, str) or not lang:
                raise SparqlError(f"bad xml:lang in {obj!r}")
            return Literal.lang_string(value, lang)
        if dt is None:
            return Literal(value)
        if not isinstance(dt, str) or not dt:
            raise SparqlError(f"bad datatype in {obj!r}")
        return Literal(value, dt)
    raise SparqlError(f"result term type {kind!r} is not supported (uri, bnode, literal)")


def from_results_json(obj: object, names: Sequence[str] | None = None,
                      form: Tx | None = None) -> Result:
    """The KSP result of a SPARQL 1.1 Query Results JSON document (the reverse of
    `results_json`). `names[k]` is the JSON variable of KSP variable k (default: `head.vars`
    in order); `form=Tx.CONSTRUCT` reads the `subject/predicate/object` form as triples.
    Malformed documents raise `SparqlError`."""
    if not isinstance(obj, dict):
        raise SparqlError("a SPARQL results document is a JSON object")
    if "boolean" in obj:
        if not isinstance(obj["boolean"], bool):
            raise SparqlError("'boolean' must be true or false")
        return AskResult(obj["boolean"])
    head, results = obj.get("head"), obj.get("results")
    if not isinstance(head, dict) or not isinstance(results, dict):
        raise SparqlError("a SELECT results document needs 'head' and 'results' objects")
    bindings = results.get("bindings")
    if not isinstance(bindings, list) or not all(isinstance(b, dict) for b in bindings):
        raise SparqlError("'results.bindings' must be a list of objects")
    if form is not None and Tx(form).base is Tx.CONSTRUCT:
        triples = []
        for b in bindings:
            try:
                triples.append(Triple(*(_term_from_json(b[k]) for k in CONSTRUCT_VARS)))
            except KeyError as e:
                raise SparqlError(f"a CONSTRUCT binding lacks {e.args[0]!r}") from None
        return ConstructResult(tuple(triples))
    if names is None:
        names = head.get("vars", [])
        if not isinstance(names, list) or not all(isinstance(v, str) for v in names):
            raise SparqlError("'head.vars' must be a list of names")
    rows = tuple(tuple(_term_from_json(b[v]) if v in b else None for v in names)
                 for b in bindings)
    return SelectResult(len(names), rows)


def to_ntriples(triples: Iterable[Triple]) -> str:
    """Ground triples as N-Triples (one per line), e.g. a CONSTRUCT result for a SPARQL client."""
    w = _Writer(None, None, bare_literals=False)
    lines = []
    for t in triples:
        if any(isinstance(m, Var) for m in t):
            raise SparqlError(f"{t!r} has a variable: N-Triples holds ground triples only")
        lines.append(f"{w.term(t.s, False)} {w.term(t.p, False)} {w.term(t.o, False)} .\n")
    return "".join(lines)
