"""SPARQL 1.1 ⇄ KSP (docs/sparql.md): the translation, kept out of the protocol core.

- `lexer.py`, `parser.py`, `lowering.py`: SPARQL text → a KSP request (`compile`), in three
  steps: tokens, a parse with variables by name, the request with variables by index.
- `render.py`: a KSP request → SPARQL text (`render`), the SIB's and the bridge's view of it.
- `results.py`: KSP results ⇄ SPARQL 1.1 Query Results JSON, triples → N-Triples.
"""
from .lowering import compile, compile_named
from .render import (
    CONSTRUCT_VARS, NO_PROJECTION, WELL_KNOWN_PREFIXES, label_from_name, label_name, reads_union,
    render, render_term, render_where, var_name,
)
from .results import from_results_json, results_json, to_ntriples

__all__ = [
    "compile", "compile_named", "render", "render_where", "render_term", "results_json",
    "from_results_json", "to_ntriples", "var_name", "label_name", "label_from_name",
    "reads_union", "WELL_KNOWN_PREFIXES", "NO_PROJECTION", "CONSTRUCT_VARS",
]
