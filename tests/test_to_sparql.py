"""ksp.sparql: rendered SPARQL is valid (pyoxigraph parses and runs it) and means the request.

Hand-written requests run on pyoxigraph over a fixture dataset and are compared with results
worked out by hand; RPN expressions are evaluated independently in Python and compared with
pyoxigraph's evaluation of the infix rendering; hypothesis renders every generated request.
"""
from __future__ import annotations

import operator

import pyoxigraph as ox
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from ksp import (
    DEFAULT_GRAPH, IRI, AskResult, Bind, BNode, ConstructResult, Literal, Op, Options, Order,
    Request, SelectResult, SolutionModifier, Triple, Tx, Var,
)
from ksp.codes import RDF, XSD
from ksp.errors import KspError, NoSparqlEquivalent, SparqlError
from ksp.terms import XSD_DOUBLE, XSD_INTEGER
from ksp.sparql import (
    from_results_json, label_from_name, label_name, reads_union, render, render_where,
    results_json,
    to_ntriples,
)
from tests import strategies as ks

EX = "http://example.org/"
G1, G2 = IRI(EX + "g1"), IRI(EX + "g2")
TYPE, SENSOR, TEMP, LOC, NAME = (IRI(RDF + "type"), IRI(EX + "Sensor"), IRI(EX + "temp"),
                                 IRI(EX + "loc"), IRI(EX + "name"))
S1, S2, S3 = IRI(EX + "s1"), IRI(EX + "s2"), IRI(EX + "s3")


def lit_int(n: int) -> Literal:
    return Literal(str(n), XSD_INTEGER)


FIXTURE = f"""
PREFIX ex: <{EX}>
INSERT DATA {{
  ex:s1 a ex:Sensor ; ex:temp 21 ; ex:loc ex:kitchen ; ex:name "Küche"@de .
  ex:s2 a ex:Sensor ; ex:temp 25 .
  GRAPH ex:g1 {{ ex:s3 a ex:Sensor ; ex:temp 30 ; ex:loc ex:garden . }}
  GRAPH ex:g2 {{ ex:s1 ex:temp 19 . }}
}}"""


@pytest.fixture
def store() -> ox.Store:
    s = ox.Store()
    s.update(FIXTURE)
    return s


def run_select(store: ox.Store, req: Request) -> list[tuple]:
    rows = store.query(render(req), use_default_graph_as_union=reads_union(req))
    return [tuple(None if sol[f"v{k}"] is None else sol[f"v{k}"].value
                  for k in range(req.projection)) for sol in rows]


def q(tx=Tx.SELECT, **kw) -> Request:
    return Request(tx, 0, **kw)


def test_select_with_optional_filter_order_limit(store):
    # Sensors with temp > 20, their location if any, hottest first (union of all graphs).
    req = q(projection=3,
            where=(Triple(Var(0), TYPE, SENSOR), Triple(Var(0), TEMP, Var(1))),
            optional=((Triple(Var(0), LOC, Var(2)),),),
            options=Options(prefixes=(EX,), filters=((Var(1), lit_int(20), Op.GT),),
                            modifier=SolutionModifier(Order.DESC, 1)))
    assert run_select(store, req) == [
        (EX + "s3", "30", EX + "garden"), (EX + "s2", "25", None), (EX + "s1", "21",
                                                                     EX + "kitchen")]
    limited = req._replace(options=req.options._replace(
        modifier=SolutionModifier(Order.ASC, 1, limit=1, offset=1)))
    assert run_select(store, limited) == [(EX + "s2", "25", None)]


def test_query_graph_is_from(store):
    req = q(projection=2, where=(Triple(Var(0), TEMP, Var(1)),),
            options=Options(query_graphs=(G1, G2), modifier=SolutionModifier(Order.ASC, 1)))
    assert "FROM <http://example.org/g1>" in render(req)
    assert run_select(store, req) == [(EX + "s1", "19"), (EX + "s3", "30")]
    # The default graph alone is the store's own (reads_union is false): no FROM, as SPARQL
    # text that names no graph; beside other graphs FROM cannot name it.
    assert "FROM" not in render(req._replace(options=Options(query_graphs=(DEFAULT_GRAPH,))))
    with pytest.raises(NoSparqlEquivalent, match="default graph"):
        render(req._replace(options=Options(query_graphs=(DEFAULT_GRAPH, G1))))
    # Without dataset clauses the caller gives the dataset: the text then has no FROM.
    assert "FROM" not in render(req, dataset_clauses=False)


def test_distinct_and_no_projection(store):
    req = q(projection=1, where=(Triple(Var(0), TEMP, Var(1)),),
            options=Options(modifier=SolutionModifier(distinct=True)))
    assert sorted(run_select(store, req)) == [(EX + "s1",), (EX + "s2",), (EX + "s3",)]
    count = q(projection=0, where=(Triple(Var(0), TEMP, Var(1)),))
    assert run_select(store, count) == [()] * 4  # one empty row per solution
    one = count._replace(options=Options(modifier=SolutionModifier(distinct=True)))
    assert run_select(store, one) == [()]


def test_bind_and_expressions(store):
    # ?v2 = -(?v1 * 2 + 1); keep rows where !(?v2 < -50) — i.e. temp ≤ 25.5.
    expr = (Var(1), lit_int(2), Op.MUL, lit_int(1), Op.ADD, Op.NEG)
    req = q(projection=3, where=(Triple(Var(0), TEMP, Var(1)),),
            options=Options(binds=(Bind(2, expr),),
                            filters=((Var(2), lit_int(-50), Op.LT, Op.NOT),),
                            modifier=SolutionModifier(Order.ASC, 1)))
    assert run_select(store, req) == [(EX + "s1", "19", "-39"), (EX + "s1", "21", "-43")]
    with pytest.raises(NoSparqlEquivalent, match="BIND"):  # ?v1 is bound by the pattern
        render(req._replace(options=Options(binds=(Bind(1, expr),))))


def test_regex_with_and_without_flags(store):
    base = q(projection=1, where=(Triple(Var(0), NAME, Var(1)),))
    plain = (Var(1), Literal("^kü"), Op.REGEX)
    flags = (Var(1), Literal("^kü"), Literal("i"), Op.REGEX_FLAGS)
    assert run_select(store, base._replace(options=Options(filters=(plain,)))) == []
    assert run_select(store, base._replace(options=Options(filters=(flags,)))) == [(EX + "s1",)]


def test_ask_and_construct(store):
    ask = q(Tx.ASK_PERSISTENT, where=(Triple(S3, LOC, Var(0)),))
    assert bool(store.query(render(ask), use_default_graph_as_union=True)) is True
    assert bool(store.query(render(ask._replace(options=Options(query_graphs=(G2,)))))) is False
    con = q(Tx.CONSTRUCT, template=(Triple(Var(0), IRI(EX + "hot"), BNode("b")),),
            where=(Triple(Var(0), TEMP, Var(1)),),
            options=Options(filters=((Var(1), lit_int(24), Op.GT),)))
    got = list(store.query(render(con), use_default_graph_as_union=True))
    assert sorted(t.subject.value for t in got) == [EX + "s2", EX + "s3"]
    assert all(isinstance(t.object, ox.BlankNode) for t in got)
    assert got[0].object != got[1].object  # fresh per solution


def test_construct_distinct_limits_distinct_solutions(store):
    # Solutions of ?v0 ex:temp ?v1 projected on ?v0 … DISTINCT applies to whole solutions;
    # with LIMIT 2 over 4 distinct (s, t) solutions ordered by temp: 19 and 21 (both s1).
    con = q(Tx.CONSTRUCT, template=(Triple(Var(0), IRI(EX + "seen"), Var(1)),),
            where=(Triple(Var(0), TEMP, Var(1)),),
            options=Options(modifier=SolutionModifier(Order.ASC, 1, limit=2, distinct=True)))
    got = {(t.subject.value, t.object.value)
           for t in store.query(render(con), use_default_graph_as_union=True)}
    assert got == {(EX + "s1", "19"), (EX + "s1", "21")}


def test_blank_node_shared_by_where_and_optional_is_one_variable(store):
    # _:x acts as one non-projected variable across the WHERE and OPTIONAL groups (§4.4).
    req = q(projection=1, where=(Triple(BNode("x"), TEMP, Var(0)),),
            optional=((Triple(BNode("x"), LOC, IRI(EX + "none")),),),
            options=Options(modifier=SolutionModifier(Order.ASC, 0)))
    assert run_select(store, req) == [("19",), ("21",), ("25",), ("30",)]


def test_data_updates_with_graph_options(store):
    ins = Request(Tx.INSERT_DATA, 0, insert=(Triple(BNode("n"), TEMP, lit_int(5)),
                                             Triple(BNode("n"), NAME, Literal('a "q"\n\\'))),
                  options=Options(insert_graphs=(DEFAULT_GRAPH, G2)))
    store.update(render(ins))
    text = ox.Literal('a "q"\n\\')
    in_default = list(store.quads_for_pattern(None, ox.NamedNode(NAME), text, ox.DefaultGraph()))
    in_g2 = list(store.quads_for_pattern(None, ox.NamedNode(NAME), text, ox.NamedNode(G2)))
    assert len(in_default) == len(in_g2) == 1
    assert in_default[0].subject == in_g2[0].subject  # one label, one node per request
    upd = Request(Tx.UPDATE_DATA, 0, delete=(Triple(S1, TEMP, lit_int(19)),),
                  insert=(Triple(S1, TEMP, lit_int(20)),),
                  options=Options(delete_graphs=(G2,), insert_graphs=(G2,)))
    store.update(render(upd))
    assert [x.object.value for x in store.quads_for_pattern(ox.NamedNode(S1), ox.NamedNode(TEMP),
                                                            None, ox.NamedNode(G2))] == ["20"]


def test_pattern_update(store):
    # Move every reading of g1 above 25 into g2 with a flag, keeping the optional location.
    upd = Request(Tx.UPDATE, 0,
                  delete=(Triple(Var(0), TEMP, Var(1)),),
                  insert=(Triple(Var(0), IRI(EX + "hot"), Var(1)),
                          Triple(Var(0), IRI(EX + "where"), Var(2))),
                  where=(Triple(Var(0), TEMP, Var(1)),),
                  options=Options(query_graphs=(G1,), delete_graphs=(G1,), insert_graphs=(G2,),
                                  optional=((Triple(Var(0), LOC, Var(2)),),),
                                  filters=((Var(1), lit_int(25), Op.GT),)))
    store.update(render(upd))
    g1 = {(x.predicate.value, x.object.value)
          for x in store.quads_for_pattern(ox.NamedNode(S3), None, None, ox.NamedNode(G1))}
    g2 = {(x.predicate.value, x.object.value)
          for x in store.quads_for_pattern(ox.NamedNode(S3), None, None, ox.NamedNode(G2))}
    assert (TEMP, "30") not in g1 and (LOC, EX + "garden") in g1
    assert g2 == {(EX + "hot", "30"), (EX + "where", EX + "garden")}


def test_render_where_reads_the_union_for_a_pattern_update(store):
    # KSP's DELETE without graph options matches the union: s1 (default graph) has readings
    # in the default graph and in g2; the WHERE as a union query finds both.
    upd = Request(Tx.DELETE, 0, delete=(Triple(Var(0), TEMP, Var(1)),),
                  where=(Triple(Var(0), NAME, Literal.lang_string("Küche", "de")),
                         Triple(Var(0), TEMP, Var(1))),
                  options=Options(filters=((Var(1), lit_int(100), Op.LT),),
                                  binds=(Bind(2, (Var(1), lit_int(1), Op.ADD)),)))
    text = render_where(upd)
    assert text.startswith("SELECT ?v0 ?v1 ?v2\n")
    rows = {tuple(sol[v].value for v in ("v0", "v1", "v2"))
            for sol in store.query(text, use_default_graph_as_union=True)}
    assert rows == {(S1, "21", "22"), (S1, "19", "20")}
    with pytest.raises(NoSparqlEquivalent):
        render_where(Request(Tx.INSERT_DATA, 0, insert=()))


def test_graph_management(store):
    store.update(render(Request(Tx.CREATE, 0, graphs=(IRI(EX + "new1"), IRI(EX + "new2")))))
    assert {IRI(EX + "new1"), IRI(EX + "new2")} <= {g.value for g in store.named_graphs()}
    store.update(render(Request(Tx.COPY, 0, source=DEFAULT_GRAPH, target=IRI(EX + "new1"))))
    assert len(list(store.quads_for_pattern(None, None, None, ox.NamedNode(EX + "new1")))) == 6
    store.update(render(Request(Tx.ADD, 0, source=G1, target=IRI(EX + "new1"))))
    assert len(list(store.quads_for_pattern(None, None, None, ox.NamedNode(EX + "new1")))) == 9
    store.update(render(Request(Tx.MOVE, 0, source=G2, target=DEFAULT_GRAPH)))
    assert ox.NamedNode(G2) not in set(store.named_graphs())
    store.update(render(Request(Tx.DROP, 0, graphs=(IRI(EX + "new1"), DEFAULT_GRAPH))))
    assert len(list(store.quads_for_pattern(None, None, None, ox.DefaultGraph()))) == 0
    with pytest.raises(RuntimeError):  # a missing graph is an error, as KSP's status 0x0d
        store.update(render(Request(Tx.DROP, 0, graphs=(IRI(EX + "missing"),))))


@pytest.mark.parametrize("tx", [Tx.TERMINATE, Tx.RESET])
def test_terminate_and_reset_have_no_sparql(tx):
    with pytest.raises(NoSparqlEquivalent, match="no SPARQL") as e:
        render(Request(tx, 7))
    assert isinstance(e.value, KspError) and e.value.feature == tx.name


def test_inapplicable_option_and_unwritable_terms():
    with pytest.raises(NoSparqlEquivalent, match="FILTER"):
        render(Request(Tx.INSERT_DATA, 0, insert=(),
                       options=Options(filters=((Var(0),),))))
    with pytest.raises(NoSparqlEquivalent, match="IRI"):
        render(q(projection=0, where=(Triple(IRI("http://a b"), TYPE, SENSOR),)))
    with pytest.raises(NoSparqlEquivalent, match="language tag"):
        render(q(projection=0, where=(Triple(S1, NAME, Literal.lang_string("x", "0-")),)))
    # What SPARQL's grammar forbids is refused, never written as invalid text.
    for req, feature in [
        (Request(Tx.INSERT_DATA, 0, insert=(Triple(S1, TEMP, Var(0)),)), "variable in DATA"),
        (Request(Tx.DELETE_DATA, 0, delete=(Triple(BNode("b"), TEMP, S2),)),
         "blank node in a delete graph"),
        (Request(Tx.DELETE, 0, delete=(Triple(Var(0), TEMP, BNode("b")),), where=()),
         "blank node in a delete graph"),
        (q(projection=0, where=(Triple(lit_int(1), TEMP, S2),)), "literal subject"),
        (q(projection=0, where=(Triple(S1, lit_int(1), S2),)), "predicate"),
    ]:
        with pytest.raises(NoSparqlEquivalent) as e:
            render(req)
        assert e.value.feature == feature
    with pytest.raises(NoSparqlEquivalent, match="RPN"):
        render(q(projection=0, options=Options(filters=((Var(0), Op.AND),))))


# -- literals and terms ----------------------------------------------------------------------

LITERALS = [
    Literal("plain \"quoted\" \\ back\nslash\r\t\b\f end"), Literal("ünï© 日本 🙂"),
    Literal("\x00\x01\x7f control"), Literal.lang_string("hello", "en-GB"),
    lit_int(42), lit_int(-7), Literal("007", XSD_INTEGER), Literal("9" * 30, XSD_INTEGER),
    Literal("21.5", XSD + "float"), Literal("NaN", XSD + "float"), Literal("-INF", XSD_DOUBLE),
    Literal("1e-05", XSD_DOUBLE), Literal("2026-11-21T12:00:00", XSD + "dateTime"),
    Literal("2026-11-21T12:00:00.5+02:00", XSD + "dateTime"), Literal("true", XSD + "boolean"),
    Literal("1", XSD + "boolean"), Literal("1.50", XSD + "decimal"),
    Literal("x", "http://example.org/dt#custom"),
]


@pytest.mark.parametrize("lit", LITERALS, ids=range(len(LITERALS)))
def test_every_literal_form_reaches_the_store_as_itself(lit):
    s = ox.Store()
    s.update(render(Request(Tx.INSERT_DATA, 0, insert=(Triple(S1, NAME, lit),))))
    (quad,) = list(s)
    # Independent expectation: the term built from the same parts by pyoxigraph's API, stored
    # the same way (the store canonicalises some lexical forms, "007" → "7", both ways alike).
    if lit.lang is not None:
        want = ox.Literal(lit.lexical, language=lit.lang)
    else:
        want = ox.Literal(lit.lexical, datatype=ox.NamedNode(lit.datatype))
    other = ox.Store()
    other.add(ox.Quad(ox.NamedNode(S1), ox.NamedNode(NAME), want))
    assert quad.object == list(other)[0].object


def test_prefixed_names_where_valid():
    text = render(q(projection=1, where=(
        Triple(Var(0), IRI(EX + "a.b"), IRI(EX + "x/y")), Triple(Var(0), TYPE, IRI(EX))),
        options=Options(prefixes=(EX, RDF, "not an iri"))))
    assert "PREFIX p1: <http://example.org/>" in text and "p3" not in text
    # dotted local parts are written in full: pyoxigraph 0.5 refuses some valid ones (p:0.0.0)
    assert "<http://example.org/a.b>" in text and "<http://example.org/x/y>" in text
    assert "rdf:type p1:" in text
    ox.Store().query(text)


def test_blank_node_labels_reversible():
    for label in ["b1", "x_1", "a b", "日本", "x_zz", "_", "-"]:
        assert label_from_name(label_name(label)) == label


# -- expressions: the infix text computes what the RPN computes -------------------------------

_INT_OPS = {Op.ADD: operator.add, Op.SUB: operator.sub, Op.MUL: operator.mul}


@st.composite
def _int_expr(draw, depth=0):
    """(RPN tokens, value) of an integer expression; the value is computed from the RPN tree."""
    if depth >= 4 or draw(st.integers(0, 2)) == 0:
        n = draw(st.integers(-20, 20))
        return (lit_int(n),), n
    kind = draw(st.sampled_from([Op.ADD, Op.SUB, Op.MUL, Op.NEG]))
    a, va = draw(_int_expr(depth + 1))
    if kind is Op.NEG:
        return a + (Op.NEG,), -va
    b, vb = draw(_int_expr(depth + 1))
    return a + b + (kind,), _INT_OPS[kind](va, vb)


@st.composite
def _bool_expr(draw, depth=0):
    if depth >= 3 or draw(st.integers(0, 2)) == 0:
        a, va = draw(_int_expr(3))
        b, vb = draw(_int_expr(3))
        op = draw(st.sampled_from([Op.EQ, Op.NE, Op.LT, Op.GT, Op.LE, Op.GE]))
        fn = {Op.EQ: operator.eq, Op.NE: operator.ne, Op.LT: operator.lt, Op.GT: operator.gt,
              Op.LE: operator.le, Op.GE: operator.ge}[op]
        return a + b + (op,), fn(va, vb)
    kind = draw(st.sampled_from([Op.AND, Op.OR, Op.NOT]))
    a, va = draw(_bool_expr(depth + 1))
    if kind is Op.NOT:
        return a + (Op.NOT,), not va
    b, vb = draw(_bool_expr(depth + 1))
    return a + b + (kind,), (va and vb) if kind is Op.AND else (va or vb)


def _evaluate(expr) -> str:
    req = q(projection=1, options=Options(binds=(Bind(0, expr),)))
    (sol,) = list(ox.Store().query(render(req)))
    return sol["v0"].value


@settings(max_examples=150, deadline=None)
@given(st.one_of(_int_expr(), _bool_expr()))
def test_infix_rendering_keeps_rpn_meaning(case):
    expr, value = case
    want = str(value).lower() if isinstance(value, bool) else str(value)
    assert _evaluate(expr) == want


def test_minimal_parentheses():
    a, b, c = Var(0), Var(1), Var(2)
    w = q(projection=0, options=Options(filters=(
        (a, b, Op.SUB, c, Op.SUB),   # left-assoc: no parentheses
        (a, b, c, Op.SUB, Op.SUB),   # right operand of equal precedence: parentheses
        (a, b, Op.EQ, c, Op.EQ),     # relational operators do not associate
        (a, Op.NEG, b, Op.MUL),
        (a, b, Op.ADD, Op.NEG),
    )))
    text = render(w)
    for want in ["?v0 - ?v1 - ?v2", "?v0 - (?v1 - ?v2)", "(?v0 = ?v1) = ?v2", "-?v0 * ?v1",
                 "-(?v0 + ?v1)"]:
        assert f"FILTER({want})" in text


# -- every generated request -------------------------------------------------------------------

def _oxi_term_ok(t) -> bool:
    """Can pyoxigraph hold this term at all? (It checks IRIs and BCP 47 tags strictly.)"""
    try:
        if isinstance(t, IRI) and t != DEFAULT_GRAPH:
            ox.NamedNode(t)
        elif isinstance(t, Literal):
            if t.lang is not None:
                ox.Literal(t.lexical, language=t.lang)
            else:
                ox.Literal(t.lexical, datatype=ox.NamedNode(t.datatype))
    except (ValueError, SyntaxError):
        return False
    return True


def _terms(req: Request):
    for name in ("delete", "insert", "where", "template"):
        for t in getattr(req, name) or ():
            yield from t
    for g in (req.optional or ()) + (req.options.optional or ()):
        for t in g:
            yield from t
    yield from req.graphs or ()
    yield from (x for x in (req.source, req.target) if x is not None)
    o = req.options
    for names in (o.delete_graphs, o.insert_graphs, o.query_graphs):
        yield from names or ()
    for e in list(o.filters or ()) + [b.expr for b in o.binds or ()]:
        yield from (x for x in e if not isinstance(x, Op))


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(ks.requests(small=True))
def test_every_generated_request_renders_to_sparql_pyoxigraph_runs(req):
    try:
        text = render(req, dataset_clauses=DEFAULT_GRAPH not in (req.options.query_graphs or ()))
    except NoSparqlEquivalent as e:
        # Only for the documented reasons, each checked independently of the renderer.
        if e.feature in ("TERMINATE", "RESET"):
            assert req.tx in (Tx.TERMINATE, Tx.RESET)
        elif e.feature == "BIND":  # a BIND of a variable the pattern or a BIND binds already
            groups = (req.where or (),) + (req.optional or ()) + (req.options.optional or ())
            bound = {m.index for g in groups for t in g for m in t if isinstance(m, Var)}
            bind_vars = [b.var for b in req.options.binds]
            assert set(bind_vars) & bound or len(set(bind_vars)) < len(bind_vars)
        else:  # a term no SPARQL text can hold: pyoxigraph cannot hold it either
            assert e.feature in ("IRI", "graph name", "datatype IRI", "language tag")
            assert not all(_oxi_term_ok(t) for t in _terms(req))
        return
    assume(all(_oxi_term_ok(t) for t in _terms(req)))
    event(f"run on pyoxigraph: {'query' if req.tx.is_query else 'update'}")
    store = ox.Store()
    if req.tx.is_query:
        result = store.query(text, use_default_graph_as_union=reads_union(req))
        if not isinstance(result, ox.QueryBoolean):
            list(result)
        return
    try:
        store.update(text)
    except SyntaxError:
        raise
    except RuntimeError:  # DROP/COPY/MOVE/ADD of a missing graph: a run-time error, as in KSP
        assert req.tx.is_management


def _map_terms(req: Request, f) -> Request:
    """`req` with every term (and graph name) replaced by `f(term)`."""
    def graph(g):
        return None if g is None else tuple(Triple(*map(f, t)) for t in g)

    def graphs(gs):
        return None if gs is None else tuple(graph(g) for g in gs)

    def names(ns):
        return None if ns is None else tuple(map(f, ns))

    def expr(e):
        return tuple(x if isinstance(x, Op) else f(x) for x in e)

    o = req.options
    return req._replace(
        delete=graph(req.delete), insert=graph(req.insert), where=graph(req.where),
        template=graph(req.template), optional=graphs(req.optional), graphs=names(req.graphs),
        source=None if req.source is None else f(req.source),
        target=None if req.target is None else f(req.target),
        options=o._replace(
            delete_graphs=names(o.delete_graphs), insert_graphs=names(o.insert_graphs),
            query_graphs=names(o.query_graphs), optional=graphs(o.optional),
            filters=None if o.filters is None else tuple(map(expr, o.filters)),
            binds=None if o.binds is None else tuple(Bind(b.var, expr(b.expr)) for b in o.binds)))


def _pyoxigraph_safe(t):
    """A term pyoxigraph can hold in place of one it cannot (same kind, same position)."""
    if isinstance(t, IRI) and t != DEFAULT_GRAPH and not _oxi_term_ok(t):
        return IRI("urn:x:" + t.encode().hex())
    if isinstance(t, Literal) and not _oxi_term_ok(t):
        if t.lang is not None:
            return Literal.lang_string(t.lexical, "en")
        return Literal(t.lexical, "urn:x:" + t.datatype.encode().hex())
    return t


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(ks.requests(small=True, txs=[t for t in Tx if t not in (Tx.TERMINATE, Tx.RESET)]))
def test_generated_requests_with_terms_pyoxigraph_holds_all_run(req):
    """The same check with every term made one pyoxigraph accepts, so that it always runs."""
    req = _map_terms(req, _pyoxigraph_safe)
    if DEFAULT_GRAPH in (req.options.query_graphs or ()):
        req = req._replace(options=req.options._replace(query_graphs=None))
    try:
        render(req)
    except NoSparqlEquivalent as e:
        assert e.feature == "BIND"
        assume(False)
    test_every_generated_request_renders_to_sparql_pyoxigraph_runs.hypothesis.inner_test(req)


# -- results JSON ------------------------------------------------------------------------------

def test_results_json_matches_pyoxigraph_serialisation(store):
    req = q(projection=3, where=(Triple(Var(0), TEMP, Var(1)),),
            optional=((Triple(Var(0), NAME, Var(2)),),),
            options=Options(modifier=SolutionModifier(Order.ASC, 1)))
    import json
    solutions = store.query(render(req), use_default_graph_as_union=True)
    theirs = json.loads(solutions.serialize(format=ox.QueryResultsFormat.JSON))
    ksp_result = from_results_json(theirs)
    # The union of all graphs: s1's reading in g2 joins its name in the default graph.
    assert ksp_result.rows[0] == (S1, lit_int(19), Literal.lang_string("Küche", "de"))
    assert ksp_result.rows[1] == (S1, lit_int(21), Literal.lang_string("Küche", "de"))
    assert results_json(ksp_result) == theirs


@given(ks.results_for(Tx.SELECT, small=True) | ks.results_for(Tx.ASK)
       | ks.results_for(Tx.CONSTRUCT, small=True))
@settings(max_examples=200, deadline=None)
def test_results_json_round_trip(result):
    form = Tx.CONSTRUCT if isinstance(result, ConstructResult) else None
    back = from_results_json(results_json(result), form=form)
    if isinstance(result, SelectResult):
        assert back == SelectResult(result.variables, result.rows)
    elif isinstance(result, ConstructResult):
        assert back == ConstructResult(result.triples)
    else:
        assert back == AskResult(result.value)


@pytest.mark.parametrize("bad", [
    [], {"head": {}}, {"boolean": "yes"}, {"head": {"vars": ["a"]}, "results": {"bindings": [
        {"a": {"type": "triple", "value": "x"}}]}},
    {"head": {"vars": ["a"]}, "results": {"bindings": [{"a": {"type": "uri"}}]}},
    {"head": {"vars": 3}, "results": {"bindings": []}},
])
def test_bad_results_json_is_a_typed_error(bad):
    with pytest.raises(SparqlError):
        from_results_json(bad)


def test_ntriples_parse_back():
    triples = (Triple(S1, NAME, Literal("a\"b\n")), Triple(BNode("x y"), TEMP, lit_int(3)),
               Triple(S1, NAME, Literal.lang_string("c", "fr")))
    text = to_ntriples(triples)
    parsed = list(ox.parse(text.encode(), ox.RdfFormat.N_TRIPLES))
    assert [p.object for p in parsed] == [
        ox.Literal("a\"b\n"), ox.Literal("3", datatype=ox.NamedNode(XSD_INTEGER)),
        ox.Literal("c", language="fr")]
