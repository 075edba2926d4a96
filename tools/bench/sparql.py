"""SPARQL ⇄ KSP benchmark: `ksp.sparql.compile` against rdflib's and pyoxigraph's parsers.

Run as ``python -m tools.bench.sparql [--quick] [--markdown]`` or ``ksp bench sparql``.

It backs the choice of a hand-written parser for `compile` (docs/sparql.md): rdflib's
pyparsing grammar was the alternative. Three texts a KP or the SEPA bridge would compile — a
greenhouse SELECT with OPTIONAL, FILTER, ORDER BY and LIMIT; a 5-triple INSERT DATA; a
DELETE/INSERT … WHERE with a FILTER — each timed in one interleaved run (`_timing.compare`):

- KSP ``compile(text)`` (the baseline of the ratios), the whole way to a `Request`;
- rdflib ``parseQuery`` / ``parseUpdate``: parse tree only, less than `compile` does;
- pyoxigraph ``Store.query`` on an empty store / ``Store.update`` on a small one (it has no
  parse-only API): parse, plan and run over (almost) no data — a reference, not a contender;
- KSP ``render(request)``, the reverse direction, for scale.
"""
from __future__ import annotations

import sys

import pyoxigraph
from rdflib.plugins.sparql.parser import parseQuery, parseUpdate

from ksp.sparql import compile as ksp_compile
from ksp.sparql import render as ksp_render

from . import _timing
from .report import bench_parser, command_line, environment, markdown_table, text_table

PRE = ("PREFIX gh: <http://example.org/greenhouse#>\n"
       "PREFIX xsd: <http://www.w3.org/2001/XMLSchema#>\n")
CASES: dict[str, tuple[str, bool]] = {  # name: (text, is a query)
    "select": (PRE + """SELECT ?sensor ?temp ?room WHERE {
  ?sensor a gh:TemperatureSensor ; gh:value ?temp ; gh:unit gh:Celsius .
  OPTIONAL { ?sensor gh:room ?room }
  FILTER(?temp > 30.0 && !bound(?room) || regex(?room, "^south", "i"))
} ORDER BY DESC(?temp) LIMIT 10""", True),
    "insert": (PRE + """INSERT DATA {
  gh:sensor7 a gh:TemperatureSensor ; gh:value "21.5"^^xsd:float ;
    gh:unit gh:Celsius ; gh:room gh:south ;
    gh:at "2026-11-21T12:00:00"^^xsd:dateTime .
}""", False),
    "update": (PRE + """DELETE { ?v gh:state ?old } INSERT { ?v gh:state gh:open }
WHERE { ?v a gh:Vent ; gh:state ?old . ?s gh:room ?r ; gh:value ?t . ?v gh:room ?r
  FILTER(?t > 28.0) }""", False),
}
HEADERS = ["text", "KSP compile µs", "rdflib parse µs", "× KSP", "pyoxigraph µs", "× KSP",
           "KSP render µs"]


def contenders(text: str, query: bool) -> dict:
    """What one case times, by name: compiling `text` to KSP, rdflib parsing it, pyoxigraph
    running it, and rendering the compiled request back to text."""
    request = ksp_compile(text)
    store = pyoxigraph.Store()
    if query:
        oxi = lambda: list(store.query(text))  # noqa: E731
        rdflib_parse = lambda: parseQuery(text)  # noqa: E731
    else:
        store.update(CASES["insert"][0])
        oxi = lambda: store.update(text)  # noqa: E731
        rdflib_parse = lambda: parseUpdate(text)  # noqa: E731
    return {"compile": lambda: ksp_compile(text), "rdflib": rdflib_parse, "pyoxigraph": oxi,
            "render": lambda: ksp_render(request)}


def run(quick: bool) -> dict[str, dict[str, _timing.Timing]]:
    target, repeats = (0.01, 3) if quick else (0.05, 7)
    return {name: _timing.compare(contenders(text, query), target=target, repeats=repeats)
            for name, (text, query) in CASES.items()}


def table_rows(report: dict[str, dict[str, _timing.Timing]]) -> list[list[str]]:
    rows = []
    for name, t in report.items():
        base = t["compile"].median
        rows.append([name, f"{t['compile'].median_us:.1f}", f"{t['rdflib'].median_us:.1f}",
                     f"**{t['rdflib'].median / base:.0f}×**", f"{t['pyoxigraph'].median_us:.1f}",
                     f"{t['pyoxigraph'].median / base:.1f}×", f"{t['render'].median_us:.1f}"])
    return rows


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = bench_parser("tools.bench.sparql", __doc__, prog,
                        "~10 ms per repeat and 3 repeats instead of ~50 ms and 7").parse_args(argv)
    command = command_line("tools.bench.sparql", prog, argv)
    rows = table_rows(run(args.quick))
    env = environment("pyoxigraph", "rdflib")
    method = ("median of interleaved repeats; × KSP = contender µs / KSP compile µs from this "
              "one run")
    table = (markdown_table if args.markdown else text_table)(HEADERS, rows)
    print("\n".join([table, "", f"Method: {method}.", f"Command: `{command}`  ",
                     f"Python: {env['python']} ({env['libraries']})"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
