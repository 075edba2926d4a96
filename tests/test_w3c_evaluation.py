"""The W3C SPARQL evaluation tests (SPARQL 1.0 `dawg-data-r2`, SPARQL 1.1 `sparql11`) inside
KSP's subset, through the SIB: each test's text compiled by `ksp.sparql`, run as a KSP request
by an in-process SIB on the test's dataset, and its answer (rows, boolean, triples, or the
store after an update) compared with the test's expected result.

Tests whose text is outside the subset are the syntax tests' business (`UnsupportedSparql`
naming the feature, tests/test_w3c_sparql.py); entailment and federation tests need an engine
of another kind and are left out. The dataset is loaded straight into the store (it is the
test's fixture, not what is under test); literals are compared by their exact lexical forms,
blank nodes up to a consistent renaming, rows as multisets, and in order where the query
orders them (by the ORDER BY key: ties may come in any order).
"""
from __future__ import annotations

import asyncio
import pathlib

import aiohttp
import pyoxigraph as ox
import pytest
import rdflib
import rdflib.collection
from rdflib.namespace import RDF, RDFS

from ksp.errors import SparqlSyntaxError, UnsupportedSparql
from ksp.model import AskResult, ConstructResult, SelectResult
from ksp.sparql import compile_named
from ksp.terms import DEFAULT_GRAPH
from sib import QuadStore, Sib
from sib.oxterms import quad_from_ox, to_ox
from sib.sepa import SepaGate
from sib.testing import Client
from test_w3c_sparql import DAWGT, MF, QT, SUITES, UT

RS = "http://www.w3.org/2001/sw/DataAccess/tests/result-set#"
SD = rdflib.Namespace("http://www.w3.org/ns/sparql-service-description#")
EVALUATION = {MF.QueryEvaluationTest, MF.UpdateEvaluationTest}

_BY_VALUE = ("the SIB's store (pyoxigraph) keeps a typed literal by its value: \"01\"^^xsd:integer "
             "is stored, matched and answered as \"1\", \"2006-08-23+00:00\"^^xsd:date as "
             "\"2006-08-23Z\", \"23.0\"^^xsd:float as \"23\" (docs/sparql.md, \"Terms\")")
_RDF_1_1 = ("RDF 1.1: a simple literal is an xsd:string, so \"ABC\" and \"ABC\"^^xsd:string are "
            "one term (the SPARQL 1.0 test counts two)")

#: Where the W3C's expected answer and ours differ on purpose, with the reason. Each is run
#: and must still differ (strict xfail), so a fix shows up.
DEVIATIONS: dict[str, str] = {
    "dawg-data-r2/basic/term-6.rq:Basic - Term 6":
        "SPARQL 1.0 reading: `456.` before '}' was a DECIMAL; in SPARQL 1.1 it is the INTEGER "
        "456 and a '.', which matches no \"456.\"^^xsd:decimal",
    "dawg-data-r2/distinct/distinct-1.rq:All: Distinct": _RDF_1_1 + "; " + _BY_VALUE,
    "dawg-data-r2/distinct/distinct-1.rq:Numbers: Distinct": _BY_VALUE,
    "dawg-data-r2/distinct/distinct-1.rq:Strings: Distinct": _RDF_1_1,
    "dawg-data-r2/distinct/no-distinct-1.rq:All: No distinct": _BY_VALUE,
    "dawg-data-r2/distinct/no-distinct-1.rq:Numbers: No distinct": _BY_VALUE,
    "dawg-data-r2/expr-builtin/q-datatype-1.rq:datatype-1": _BY_VALUE,
    "dawg-data-r2/expr-builtin/q-datatype-2.rq:datatype-2 : Literals with a datatype":
        "RDF 1.1: DATATYPE(\"string\"@en) is rdf:langString (in SPARQL 1.0 an error, which "
        "the test expects to reject the row)",
    "dawg-data-r2/expr-builtin/q-str-1.rq:str-1": _BY_VALUE,
    "dawg-data-r2/expr-builtin/q-str-2.rq:str-2": _BY_VALUE,
    "dawg-data-r2/expr-builtin/sameTerm-eq.rq:sameTerm-eq": _BY_VALUE,
    "dawg-data-r2/expr-builtin/sameTerm-not-eq.rq:sameTerm-not-eq": _BY_VALUE,
    "dawg-data-r2/expr-builtin/sameTerm.rq:sameTerm-simple": _BY_VALUE,
    "dawg-data-r2/expr-equals/query-eq-graph-1.rq:Equality 1-1 -- graph": _BY_VALUE,
    "dawg-data-r2/expr-equals/query-eq-graph-2.rq:Equality 1-2 -- graph": _BY_VALUE,
    "dawg-data-r2/expr-equals/query-eq2-1.rq:Equality - 2 var - test equals": _BY_VALUE,
    "dawg-data-r2/expr-equals/query-eq2-1.rq:Equality - 2 var - test not equals": _BY_VALUE,
    "dawg-data-r2/open-world/date-2.rq:date-2": _BY_VALUE,
    "dawg-data-r2/open-world/date-3.rq:date-3": _BY_VALUE,
    "dawg-data-r2/open-world/open-eq-01.rq:open-eq-01": _BY_VALUE,
    "dawg-data-r2/open-world/open-eq-03.rq:open-eq-03": _BY_VALUE,
    "dawg-data-r2/open-world/open-eq-04.rq:open-eq-04": _BY_VALUE,
    "dawg-data-r2/sort/query-sort-4.rq:sort-7": _BY_VALUE,
    "dawg-data-r2/sort/query-sort-4.rq:sort-8": _BY_VALUE,
}

#: Valid SPARQL 1.0 that SPARQL 1.1 made invalid; we parse SPARQL 1.1.
SPARQL_1_0_ONLY = {
    # `456. .`: in SPARQL 1.0 `456.` was a DECIMAL; SPARQL 1.1's needs a digit after the point,
    # so the second '.' is stray (as syntax-lit-08 in tests/test_w3c_sparql.py).
    "dawg-data-r2/basic/term-7.rq:Basic - Term 7",
}


class Case:
    """One evaluation test: its text, dataset before, and expected result."""

    def __init__(self, g: rdflib.Graph, test: rdflib.term.Node) -> None:
        action = g.value(test, MF.action)
        self.name = str(g.value(test, MF.name)).strip()
        self.update = MF.UpdateEvaluationTest in set(g.objects(test, RDF.type))
        text = g.value(action, UT.request if self.update else QT.query)
        self.path = _path(text)
        self.data, self.graphs = _dataset(g, action, UT if self.update else QT)
        self.result = g.value(test, MF.result)
        if self.update:
            self.expected_data, self.expected_graphs = _dataset(g, self.result, UT)
        self.id = f"{self.path.relative_to(SUITES).as_posix()}:{self.name}"


def _path(node) -> pathlib.Path:
    return pathlib.Path(str(node).removeprefix("file://"))


def _dataset(g, node, ns) -> tuple[list[pathlib.Path], dict[str, pathlib.Path]]:
    """The default graph's files and the named graphs (name → file) of an action or result.
    In query tests a named graph is named by its file's IRI; in update tests by its label."""
    if node is None:
        return [], {}
    default = [_path(d) for d in g.objects(node, ns.data)]
    named = {}
    for item in g.objects(node, ns.graphData):
        if isinstance(item, rdflib.URIRef):
            named[str(item)] = _path(item)
        else:
            named[str(g.value(item, RDFS.label))] = _path(g.value(item, UT.graph))
    return default, named


def _listed() -> list[Case]:
    """Every listed evaluation test an engine of the SIB's kind can run."""
    if not (SUITES / "sparql11").is_dir():
        return []
    cases = []
    for manifest in sorted(SUITES.rglob("manifest.ttl")):
        g = rdflib.Graph().parse(manifest, format="turtle")
        entries = [t for lst in g.objects(None, MF.entries)
                   for t in rdflib.collection.Collection(g, lst)]
        for test in entries:  # only the listed ones: a manifest keeps some it removed
            if not set(g.objects(test, RDF.type)) & EVALUATION:
                continue
            if DAWGT.Withdrawn in set(g.objects(test, DAWGT.approval)):
                continue
            action = g.value(test, MF.action)
            if (action, SD.entailmentRegime, None) in g or (action, QT.serviceData, None) in g:
                continue  # an entailment regime or a remote service: another kind of engine
            cases.append(Case(g, test))
    return sorted(cases, key=lambda c: c.id)


def _in_subset(case: Case) -> bool:
    try:
        compile_named(case.path.read_text(encoding="utf-8"))
    except UnsupportedSparql:
        return False  # outside the subset: the syntax test checks it is said so
    except SparqlSyntaxError:
        if case.id in SPARQL_1_0_ONLY:
            return False
        raise
    return True


LISTED = _listed()
CASES = [c for c in LISTED if _in_subset(c)]
#: The update tests the SEPA gate runs: full SPARQL 1.1 Update, not only KSP's subset.
GATE_CASES = [c for c in LISTED if c.update and c.id.startswith("sparql11/")]


def test_the_evaluation_tests_are_there():
    """Without the suites (scripts/test installs them) every case below would vanish."""
    assert len(CASES) > 180, "tests/w3c/ is missing: run scripts/test (install_w3c_suites)"
    assert sum(c.update for c in CASES) > 40


def _load(store: QuadStore, path: pathlib.Path, graph: str | None) -> None:
    fmt = ox.RdfFormat.from_extension(path.suffix.lstrip("."))
    to = ox.DefaultGraph() if graph is None else ox.NamedNode(graph)
    quads = ox.parse(path=str(path), format=fmt, base_iri=path.as_uri())
    store.load(quad_from_ox(ox.Quad(q.subject, q.predicate, q.object, to)) for q in quads)


def _store(default: list[pathlib.Path], named: dict[str, pathlib.Path]) -> QuadStore:
    store = QuadStore(maintain_after=None)
    for path in default:
        _load(store, path, None)
    for name, path in named.items():
        _load(store, path, name)
    return store


def _run(case: Case):
    """The request the text means, run by a SIB on the case's dataset: (request, names,
    response, store)."""
    request, names = compile_named(case.path.read_text(encoding="utf-8"))
    store = _store(case.data, case.graphs)

    async def go():
        sib = Sib(store)
        try:
            return await Client(sib).call(request._replace(tid=1))
        finally:
            await sib.close()
    return request, names, asyncio.run(go()), store


# -- comparing ------------------------------------------------------------------------------

def _match(actual: list[tuple], expected: list[tuple]) -> bool:
    """Are the two multisets of rows equal, blank nodes up to one consistent renaming?"""
    if len(actual) != len(expected):
        return False

    def same(a, e, m: dict, back: dict) -> tuple[dict, dict] | None:
        """The renaming (and its inverse) extended so that row `a` is row `e`, or None."""
        m, back = dict(m), dict(back)
        for x, y in zip(a, e):
            if isinstance(x, ox.BlankNode) and isinstance(y, ox.BlankNode):
                if m.setdefault(x, y) != y or back.setdefault(y, x) != x:
                    return None
            elif x != y:
                return None
        return m, back

    def search(i: int, used: set, m: dict, back: dict) -> bool:
        if i == len(actual):
            return True
        for j, e in enumerate(expected):
            if j in used:
                continue
            got = same(actual[i], e, m, back)
            if got is not None and search(i + 1, used | {j}, *got):
                return True
        return False

    return search(0, set(), {}, {})


def _expected_rows(path: pathlib.Path):
    """(variables, rows in document order) or a boolean, from any result format the suites
    use: SPARQL XML/JSON/CSV/TSV results, or a graph in the result-set vocabulary."""
    suffix = path.suffix.lstrip(".")
    formats = {"srx": ox.QueryResultsFormat.XML, "srj": ox.QueryResultsFormat.JSON,
               "tsv": ox.QueryResultsFormat.TSV, "csv": ox.QueryResultsFormat.CSV}
    if suffix in formats:
        parsed = ox.parse_query_results(path=str(path), format=formats[suffix])
        if isinstance(parsed, ox.QueryBoolean):
            return bool(parsed)
        names = [v.value for v in parsed.variables]
        return names, [tuple(s[n] for n in names) for s in parsed]
    triples = list(ox.parse(path=str(path), format=ox.RdfFormat.from_extension(suffix),
                            base_iri=path.as_uri()))
    rs = lambda local: ox.NamedNode(RS + local)  # noqa: E731
    sets = [t.subject for t in triples if t.predicate == ox.NamedNode(str(RDF.type))
            and t.object == rs("ResultSet")]
    if not sets:
        return None  # a graph: a CONSTRUCT's expected triples
    about = {}
    for t in triples:
        about.setdefault(t.subject, []).append(t)

    def values(node, pred):
        return [t.object for t in about.get(node, ()) if t.predicate == rs(pred)]
    top = sets[0]
    if values(top, "boolean"):
        return values(top, "boolean")[0].value == "true"
    names = [v.value for v in values(top, "resultVariable")]
    solutions = []
    for sol in values(top, "solution"):
        row = dict.fromkeys(names)
        for b in values(sol, "binding"):
            row[values(b, "variable")[0].value] = values(b, "value")[0]
        index = values(sol, "index")
        solutions.append((int(index[0].value) if index else 0, tuple(row[n] for n in names)))
    solutions.sort(key=lambda s: s[0])
    return names, [row for _, row in solutions]


def _ox(term):
    return None if term is None else to_ox(term)


def _graph_rows(path: pathlib.Path) -> list[tuple]:
    fmt = ox.RdfFormat.from_extension(path.suffix.lstrip("."))
    return [(t.subject, t.predicate, t.object)
            for t in ox.parse(path=str(path), format=fmt, base_iri=path.as_uri())]


def _check_query(case: Case) -> None:
    request, names, response, _ = _run(case)
    assert response.status == 0, f"status {response.status:#04x}"
    result = response.result
    expected = _expected_rows(_path(case.result))
    if isinstance(result, AskResult):
        assert result.value is expected
        return
    if isinstance(result, ConstructResult):
        assert expected is None
        # Graphs are sets: each side's triples once.
        actual = list(dict.fromkeys(tuple(to_ox(t) for t in triple) for triple in result.triples))
        want = list(dict.fromkeys(_graph_rows(_path(case.result))))
        assert _match(actual, want), f"got {actual}\nexpected {want}"
        return
    assert isinstance(result, SelectResult)
    want_names, want_rows = expected
    names = list(names[:result.variables])
    assert sorted(names) == sorted(want_names)
    actual = [tuple(_ox(row[names.index(n)]) for n in want_names) for row in result.rows]
    assert _match(actual, want_rows), f"got {actual}\nexpected {want_rows}"
    modifier = request.options.modifier
    if modifier is not None and modifier.order and names[modifier.order_var] in want_names:
        k = want_names.index(names[modifier.order_var])
        assert [r[k] for r in actual] == [r[k] for r in want_rows], "not in the expected order"


def _check_update(case: Case) -> None:
    _, _, response, store = _run(case)
    assert response.status == 0, f"status {response.status:#04x}"
    _check_store(case, store)


def _check_store(case: Case, store: QuadStore) -> None:
    """The store after the update holds the test's expected graphs."""
    want = {None: [r for p in case.expected_data for r in _graph_rows(p)]}
    for name, path in case.expected_graphs.items():
        want[name] = _graph_rows(path)
    got_graphs = {None: DEFAULT_GRAPH, **{str(g): g for g in store.named_graphs()}}
    # A named graph the result does not list must be empty (SPARQL 1.1 Update: graphs may or
    # may not survive emptied; the store keeps created graphs, the tests do not list them).
    for name, graph in got_graphs.items():
        actual = [tuple(to_ox(t) for t in q[:3]) for q in store.match(g=graph)]
        assert _match(actual, want.get(name, [])), (
            f"graph {name or 'DEFAULT'}: got {actual}\nexpected {want.get(name, [])}")
    for name in want:
        if name is not None and want[name]:
            assert name in got_graphs, f"graph {name} missing"


def test_every_deviation_is_a_case():
    assert set(DEVIATIONS) <= {c.id for c in CASES}


@pytest.mark.parametrize("case", [
    pytest.param(c, id=c.id, marks=[pytest.mark.xfail(strict=True, reason=DEVIATIONS[c.id])]
                 if c.id in DEVIATIONS else []) for c in CASES])
def test_w3c_evaluation(case: Case):
    (_check_update if case.update else _check_query)(case)


# -- through the SEPA gate --------------------------------------------------------------------

#: The base IRI of a test's request: its address among the W3C's published tests (an http IRI,
#: against which an IRI of another http host resolves to itself, an empty fragment kept).
W3C_TESTS = "http://www.w3.org/2009/sparql/docs/tests/data-"
#: Update tests the gate refuses: none. LOAD fetches from the web, which the gate refuses
#: (501, docs/sepa.md), but the W3C's are LOAD SILENT, whose failure changes nothing.
GATE_REFUSES: set[str] = set()
#: The LOAD SILENT tests, which the gate passes with no change.
LOAD_SILENT = {"sparql11/update-silent/load-silent.ru:LOAD SILENT",
               "sparql11/update-silent/load-silent-into.ru:LOAD SILENT INTO"}


def test_the_gate_runs_every_update_test():
    assert len(GATE_CASES) > 90 and GATE_REFUSES | LOAD_SILENT <= {c.id for c in GATE_CASES}


@pytest.mark.slow
@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in GATE_CASES
                                  if c.id not in GATE_REFUSES])
def test_w3c_update_through_the_sepa_gate(case: Case):
    """Each update posted to the gate over HTTP as a SEPA client sends it, with its base IRI
    as BASE (the protocol carries none), on the test's dataset."""
    base = W3C_TESTS + case.path.relative_to(SUITES).as_posix()
    text = f"BASE <{base}>\n" + case.path.read_text(encoding="utf-8")
    store = _store(case.data, case.graphs)

    async def go():
        sib = await Sib(store).start()
        gate = await SepaGate(sib, http_port=0, ws_port=0).start()
        try:
            async with aiohttp.ClientSession() as http, http.post(
                    f"http://127.0.0.1:{gate.http_port}/update", data=text.encode(),
                    headers={"Content-Type": "application/sparql-update"}) as r:
                return r.status, await r.text()
        finally:
            await gate.close()
            await sib.close()
    status, body = asyncio.run(asyncio.wait_for(go(), 60))
    assert status == 200, body
    _check_store(case, store)
