"""Codec benchmark: KSP decode/encode against pyoxigraph, rdflib and SEPA JSON, as ratios.

Run as ``python -m tools.bench.codec [--quick] [--markdown]`` or ``ksp bench codec``.

Three realistic messages, built with `ksp.model` and encoded by `ksp.codec` (automatic prefixes,
UDP), each next to the text another stack would receive for the same thing:

1. ``insert``: a sensor INSERT DATA (CON) ⇄ the SPARQL update text ⇄ a SEPA update request;
2. ``select``: a 3-pattern SELECT_PERSISTENT with a FILTER ⇄ the SPARQL query text ⇄ a SEPA
   subscribe request (SPARQL 1.1 SE Subscribe Language);
3. ``result``: a 20-row RES to that SELECT ⇄ SPARQL 1.1 Query Results JSON ⇄ a SEPA
   notification carrying those rows as ``addedResults``.

Contenders per message (all timed in one interleaved run by `_timing.compare`):

- KSP decode (`decode_kp_message` / `decode_sib_message`) and KSP encode (`encode`);
- pyoxigraph, which has no parse-only API in 0.5: (1) ``Store().update(text)`` on a fresh
  in-memory store, minus the cost of ``Store()`` alone (timed in the same run); (2)
  ``list(store.query(text))`` on an empty in-memory store (parse + plan over no data); (3)
  ``parse_query_results(json, format=JSON)``, every solution turned into a tuple of terms;
- rdflib: (1) ``parseUpdate(text)``, (2) ``parseQuery(text)`` (parse only; parse + algebra is
  shown in the detail table), (3) ``Result.parse(json, format="json")``, rows into tuples;
- ``json.loads`` of the SEPA JSON message (the envelope only: the SPARQL inside stays text);
- the decoder variants, as extras: ``ksp_decode_nointern`` (the C decoder with its term
  interning off, as for bytes never seen before) and ``ksp_decode_python`` (the pure-Python
  decoder, what runs without a C compiler or with KSP_PURE_PYTHON=1).

`check_cases` runs before any timing and refuses to time a contender whose output is not the
message's (tests/test_bench_codec.py checks the equivalences term by term).
"""
from __future__ import annotations

import io
import json
import sys
from dataclasses import dataclass, field
from typing import Callable

import pyoxigraph
from rdflib.plugins.sparql import prepareQuery
from rdflib.plugins.sparql.algebra import translateUpdate
from rdflib.plugins.sparql.parser import parseQuery, parseUpdate
from rdflib.query import Result as RdflibResult

from ksp import codec
from ksp.codec import UDP, decode_kp_message, decode_sib_message, encode
from ksp.codes import RDF, XSD, Op, Status, Tx
from ksp.model import Message, Options, Request, Response, SelectResult
from ksp.terms import XSD_DATETIME, XSD_FLOAT, IRI, Literal, Triple, Var

from . import _timing
from .report import bench_parser, command_line, environment, markdown_table, text_table

GH = "http://example.org/greenhouse#"
ROWS = 20

#: Project targets, judged on the mix row: KSP decode at least this many times faster.
TARGET_PYOXIGRAPH = 5.0
TARGET_RDFLIB = 300.0

NORMAL = {"target": 0.05, "repeats": 7}
QUICK = {"target": 0.01, "repeats": 3}

_JSON = pyoxigraph.QueryResultsFormat.JSON


# ---------------------------------------------------------------------------------------------
# The three messages and their equivalents

def insert_message() -> Request:
    s = IRI(GH + "sensor42")
    return Request(Tx.INSERT_DATA, 0x0101, True, insert=(
        Triple(s, IRI(GH + "value"), Literal("21.5", XSD_FLOAT)),
        Triple(s, IRI(GH + "timestamp"), Literal("2026-11-21T12:00:00", XSD_DATETIME)),
    ))


def select_message() -> Request:
    s, t = Var(0), Var(1)
    return Request(
        Tx.SELECT_PERSISTENT, 0x0102, True, projection=2, optional=(),
        where=(
            Triple(s, IRI(RDF + "type"), IRI(GH + "TemperatureSensor")),
            Triple(s, IRI(GH + "inRoom"), IRI(GH + "room1")),
            Triple(s, IRI(GH + "value"), t),
        ),
        options=Options(filters=((t, Literal("25.7", XSD_FLOAT), Op.GT),)),
    )


def result_rows() -> tuple[tuple[IRI, Literal], ...]:
    """?s = gh:sensor{i}, ?t = "20.0", "20.25", … "24.75" (xsd:float, all exact in binary32)."""
    return tuple((IRI(f"{GH}sensor{i}"), Literal(repr(20 + i / 4), XSD_FLOAT))
                 for i in range(ROWS))


def result_message() -> Response:
    return Response(0x0102, Status.OK, SelectResult(2, result_rows()))


SPARQL_UPDATE = (
    f"PREFIX gh: <{GH}> PREFIX xsd: <{XSD}> "
    'INSERT DATA { gh:sensor42 gh:value "21.5"^^xsd:float ; '
    'gh:timestamp "2026-11-21T12:00:00"^^xsd:dateTime }'
)

SPARQL_QUERY = (
    f"PREFIX gh: <{GH}> PREFIX rdf: <{RDF}> PREFIX xsd: <{XSD}> "
    "SELECT ?s ?t WHERE { ?s rdf:type gh:TemperatureSensor . ?s gh:inRoom gh:room1 . "
    '?s gh:value ?t . FILTER(?t > "25.7"^^xsd:float) }'
)


def _compact_json(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def results_json_object() -> dict:
    """The SPARQL 1.1 Query Results JSON object of the 20 rows."""
    return {"head": {"vars": ["s", "t"]}, "results": {"bindings": [
        {"s": {"type": "uri", "value": str(s)},
         "t": {"type": "literal", "value": t.lexical, "datatype": t.datatype}}
        for s, t in result_rows()
    ]}}


RESULTS_JSON = _compact_json(results_json_object())

SEPA_UPDATE = _compact_json({"update": {"sparql": SPARQL_UPDATE}})
SEPA_SUBSCRIBE = _compact_json({"subscribe": {"sparql": SPARQL_QUERY, "alias": "hot-sensors"}})
SEPA_NOTIFICATION = _compact_json({"notification": {
    "spuid": "sepa://spuid/7f3e2a9c-5b1d-4c8e-9a0f-2d6b8e1c4a73",
    "alias": "hot-sensors",
    "sequence": 1,
    "addedResults": results_json_object(),
    "removedResults": {"head": {"vars": ["s", "t"]}, "results": {"bindings": []}},
}})


# ---------------------------------------------------------------------------------------------
# Cases: a message, its equivalents and its contenders

@dataclass
class Case:
    key: str
    title: str
    message: Message
    wire: bytes
    text: bytes  # what pyoxigraph and rdflib read: SPARQL text, or SPARQL Results JSON
    sepa: bytes  # the SEPA JSON message
    answers: Tx | None = None  # the transaction a RES answers (decode_sib_message needs it)
    contenders: dict[str, Callable[[], object]] = field(default_factory=dict)

    def decode(self) -> Message:
        if self.answers is None:
            return decode_kp_message(self.wire, UDP)
        return decode_sib_message(self.wire, UDP, self.answers)


def as_built(decoded: Message) -> Message:
    """`decoded` without the encoder's automatic choices (prefix list, TRC), to compare it with
    the message as built."""
    if isinstance(decoded, Request):
        return decoded._replace(options=decoded.options._replace(prefixes=None))
    if isinstance(decoded, Response) and isinstance(decoded.result, SelectResult):
        return decoded._replace(result=decoded.result._replace(total=None, prefixes=None))
    return decoded


def _pyoxigraph_results(data: bytes) -> list[tuple]:
    return [tuple(sol) for sol in pyoxigraph.parse_query_results(data, format=_JSON)]


def _rdflib_results(data: bytes) -> list[tuple]:
    return [tuple(row) for row in RdflibResult.parse(io.BytesIO(data), format="json")]


def _switched_off(decode: Callable[[], object], switch: Callable[[bool], bool]
                  ) -> Callable[[], object]:
    """`decode` with `switch(False)` around it, the previous setting restored after."""
    def run():
        was = switch(False)
        try:
            return decode()
        finally:
            switch(was)
    return run


def _no_interning(decode: Callable[[], object]) -> Callable[[], object]:
    """`decode` with the C decoder's interning off (two C calls around it, ~0.05 µs)."""
    return _switched_off(decode, codec.set_interning) if codec.speedups_enabled() else decode


def _pure_python(decode: Callable[[], object]) -> Callable[[], object]:
    """`decode` through the pure-Python codec (two Python calls around it, ~0.2 µs)."""
    return _switched_off(decode, codec.use_speedups)


def _variants(decode) -> dict[str, Callable[[], object]]:
    return {"ksp_decode": decode, "ksp_decode_nointern": _no_interning(decode),
            "ksp_decode_python": _pure_python(decode)}


def build_cases() -> list[Case]:
    """The three cases, each with its contenders (zero-argument callables) keyed by role:
    ``ksp_decode``, ``ksp_encode``, ``pyoxigraph``, ``rdflib``, ``json``, and extras
    ``pyoxigraph_store`` (subtracted from ``pyoxigraph``) and ``rdflib_algebra``."""
    cases = []
    update_text = SPARQL_UPDATE
    msg = insert_message()
    case = Case("insert", "(1) sensor INSERT DATA", msg, encode(msg, UDP),
                update_text.encode("utf-8"), SEPA_UPDATE)
    case.contenders = {
        **_variants(lambda w=case.wire: decode_kp_message(w, UDP)),
        "ksp_encode": lambda m=msg: encode(m, UDP),
        "pyoxigraph": lambda: pyoxigraph.Store().update(update_text),
        "pyoxigraph_store": lambda: pyoxigraph.Store(),
        "rdflib": lambda: parseUpdate(update_text),
        "rdflib_algebra": lambda: translateUpdate(parseUpdate(update_text)),
        "json": lambda s=SEPA_UPDATE: json.loads(s),
    }
    cases.append(case)

    query_text = SPARQL_QUERY
    empty_store = pyoxigraph.Store()
    msg = select_message()
    case = Case("select", "(2) persistent SELECT + FILTER", msg, encode(msg, UDP),
                query_text.encode("utf-8"), SEPA_SUBSCRIBE)
    case.contenders = {
        **_variants(lambda w=case.wire: decode_kp_message(w, UDP)),
        "ksp_encode": lambda m=msg: encode(m, UDP),
        "pyoxigraph": lambda: list(empty_store.query(query_text)),
        "rdflib": lambda: parseQuery(query_text),
        "rdflib_algebra": lambda: prepareQuery(query_text),
        "json": lambda s=SEPA_SUBSCRIBE: json.loads(s),
    }
    cases.append(case)

    msg = result_message()
    answers = Tx.SELECT_PERSISTENT
    case = Case("result", f"(3) {ROWS}-row SELECT result", msg, encode(msg, UDP), RESULTS_JSON,
                SEPA_NOTIFICATION, answers)
    case.contenders = {
        **_variants(lambda w=case.wire: decode_sib_message(w, UDP, answers)),
        "ksp_encode": lambda m=msg: encode(m, UDP),
        "pyoxigraph": lambda d=RESULTS_JSON: _pyoxigraph_results(d),
        "rdflib": lambda d=RESULTS_JSON: _rdflib_results(d),
        "json": lambda s=SEPA_NOTIFICATION: json.loads(s),
    }
    cases.append(case)
    return cases


def check_cases(cases: list[Case]) -> None:
    """Cheap sanity checks that every contender handles its message; AssertionError if not."""
    for case in cases:
        c = case.contenders
        assert as_built(case.decode()) == case.message, f"{case.key}: KSP round trip"
        assert c["ksp_decode"]() == case.decode() and c["ksp_encode"]() == case.wire, case.key
        assert c["ksp_decode_nointern"]() == c["ksp_decode_python"]() == case.decode(), case.key
        assert json.loads(case.sepa), case.key
        if case.key == "insert":
            store = pyoxigraph.Store()
            store.update(case.text.decode("utf-8"))
            assert len(store) == len(case.message.insert), "pyoxigraph: insert"
            assert len(parseUpdate(case.text.decode("utf-8")).request) == 1, "rdflib: insert"
        elif case.key == "select":
            assert c["pyoxigraph"]() == [], "pyoxigraph: query on an empty store"
            assert c["rdflib"]() is not None and c["rdflib_algebra"]().algebra is not None
        else:
            for rows in (c["pyoxigraph"](), c["rdflib"]()):
                assert len(rows) == ROWS and all(len(r) == 2 for r in rows), "result rows"


# ---------------------------------------------------------------------------------------------
# Running and reporting

@dataclass
class Row:
    title: str
    ksp_decode: float  # µs
    ksp_encode: float
    pyoxigraph: float
    rdflib: float
    json: float
    ksp_bytes: int
    text_bytes: int
    sepa_bytes: int

    def ratio(self, other: float) -> float:
        return other / self.ksp_decode if self.ksp_decode > 0 else float("nan")


@dataclass
class Report:
    rows: list[Row]  # the three messages, then the mix
    timings: dict[str, _timing.Timing]  # "case.role" → timing
    settings: dict

    @property
    def mix(self) -> Row:
        return self.rows[-1]

    def targets(self) -> list[tuple[str, float, float, bool]]:
        mix = self.mix
        return [
            ("pyoxigraph", mix.ratio(mix.pyoxigraph), TARGET_PYOXIGRAPH,
             mix.ratio(mix.pyoxigraph) >= TARGET_PYOXIGRAPH),
            ("rdflib", mix.ratio(mix.rdflib), TARGET_RDFLIB,
             mix.ratio(mix.rdflib) >= TARGET_RDFLIB),
        ]


def run(quick: bool = False, *, target: float | None = None, repeats: int | None = None,
        max_loops: int | None = None, cases: list[Case] | None = None) -> Report:
    """Check the cases, then time every contender of every case in one interleaved run."""
    settings = dict(QUICK if quick else NORMAL)
    if target is not None:
        settings["target"] = target
    if repeats is not None:
        settings["repeats"] = repeats
    cases = build_cases() if cases is None else cases
    check_cases(cases)
    contenders = {f"{case.key}.{role}": fn
                  for case in cases for role, fn in case.contenders.items()}
    timings = _timing.compare(contenders, target=settings["target"],
                              repeats=settings["repeats"], max_loops=max_loops)
    us = {name: t.median_us for name, t in timings.items()}
    rows = []
    for case in cases:
        k = case.key
        pyox = us[f"{k}.pyoxigraph"] - us.get(f"{k}.pyoxigraph_store", 0.0)
        rows.append(Row(case.title, us[f"{k}.ksp_decode"], us[f"{k}.ksp_encode"], pyox,
                        us[f"{k}.rdflib"], us[f"{k}.json"], len(case.wire), len(case.text),
                        len(case.sepa)))
    rows.append(Row("mix (sum of the three)", *(
        sum(getattr(r, name) for r in rows)
        for name in ("ksp_decode", "ksp_encode", "pyoxigraph", "rdflib", "json", "ksp_bytes",
                     "text_bytes", "sepa_bytes"))))
    return Report(rows, timings, settings)


def _us(value: float) -> str:
    if value != value:  # NaN
        return "n/a"
    return f"{value:,.1f}" if value < 1000 else f"{value:,.0f}"


def _x(value: float) -> str:
    if value != value:
        return "n/a"
    return f"{value:,.2f}×" if value < 10 else f"{value:,.0f}×"


HEADERS = ("message", "KSP decode µs", "pyoxigraph µs", "pyox/KSP", "rdflib µs", "rdflib/KSP",
           "json µs", "json/KSP", "KSP encode µs", "KSP B", "SPARQL B", "SEPA JSON B")


def table_rows(report: Report) -> list[tuple[str, ...]]:
    out = []
    for i, r in enumerate(report.rows):
        title = f"**{r.title}**" if i == len(report.rows) - 1 else r.title
        out.append((title, _us(r.ksp_decode), _us(r.pyoxigraph), _x(r.ratio(r.pyoxigraph)),
                    _us(r.rdflib), _x(r.ratio(r.rdflib)), _us(r.json), _x(r.ratio(r.json)),
                    _us(r.ksp_encode), str(r.ksp_bytes), str(r.text_bytes), str(r.sepa_bytes)))
    return out


def detail_rows(report: Report) -> list[tuple[str, ...]]:
    out = []
    for name, t in report.timings.items():
        out.append((name, _us(t.median_us),
                    f"{_us(t.best * 1e6)}–{_us(max(t.per_call) * 1e6)}",
                    f"{t.loops}×{len(t.per_call)}"))
    return out


DETAIL_HEADERS = ("contender", "median µs", "range µs (best–worst)", "loops×repeats")


def decoder_lines(report: Report) -> list[str]:
    """The mix decoded by each decoder variant, with its ratios to pyoxigraph and rdflib."""
    mix = report.mix
    lines = []
    for role, label in (("ksp_decode", "C decoder (ksp._speedups), terms interned"),
                        ("ksp_decode_nointern", "C decoder, interning off"),
                        ("ksp_decode_python", "pure-Python decoder")):
        us = sum(t.median_us for name, t in report.timings.items()
                 if name.endswith("." + role))
        lines.append(f"{label}: {_us(us)} µs for the mix, {_x(mix.pyoxigraph / us)} pyoxigraph, "
                     f"{_x(mix.rdflib / us)} rdflib")
    if not codec.speedups_enabled():
        lines.append("(the C decoder is not built or is turned off: all three are Python)")
    return lines


def target_lines(report: Report) -> list[str]:
    lines = []
    for name, got, want, met in report.targets():
        lines.append(f"KSP decode vs {name} (mix): {_x(got)} faster, target ≥ {want:g}× — "
                     + ("met" if met else "NOT MET"))
    return lines


def render(report: Report, command: str, markdown: bool) -> str:
    env = environment("pyoxigraph", "rdflib")
    s = report.settings
    method = (f"median of {s['repeats']} interleaved repeats of ~{s['target'] * 1000:g} ms each; "
              "ratios = contender µs / KSP decode µs, from this one run; pyoxigraph (1) has the "
              "cost of an empty Store() subtracted")
    if markdown:
        parts = [
            markdown_table(HEADERS, table_rows(report)),
            "",
            "Targets: " + "; ".join(target_lines(report)) + ".",
            "",
            "Decoders (mix): " + "; ".join(decoder_lines(report)) + ".",
            "",
            f"Method: {method}.",
            "",
            "<details><summary>Every contender</summary>",
            "",
            markdown_table(DETAIL_HEADERS, detail_rows(report)),
            "",
            "</details>",
            "",
            f"Command: `{command}`  ",
            f"Python: {env['python']} ({env['libraries']})  ",
            f"Platform: `{env['platform']}`",
        ]
    else:
        parts = [
            "KSP codec benchmark (µs per message; ratio = how many times faster KSP decode is)",
            "",
            text_table(HEADERS, table_rows(report)),
            "",
            *target_lines(report),
            "",
            *decoder_lines(report),
            "",
            text_table(DETAIL_HEADERS, detail_rows(report)),
            "",
            method,
            f"command: {command}",
            f"python: {env['python']} ({env['libraries']}); platform: {env['platform']}",
        ]
    return "\n".join(parts)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Run the benchmark and print its table. `prog` is how it was invoked (``ksp bench
    codec``); by default ``<python> -m tools.bench.codec``. The printed command is `prog` plus
    `argv`, so a table always says what produced it."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = bench_parser("tools.bench.codec", __doc__, prog,
                        "~10 ms per repeat and 3 repeats instead of ~50 ms and 7").parse_args(argv)
    command = command_line("tools.bench.codec", prog, argv)
    print(render(run(args.quick), command, args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
