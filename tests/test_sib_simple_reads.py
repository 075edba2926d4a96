"""Simple reads answered at once (`sib.simple`, `SibCore.read_at_once`): the same RES as the
normal path (SPARQL text on a reader thread, `SibCore.read`) on generated stores and requests,
refusals left to the normal path with its status, the row bound, and the arrival order kept."""
from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ksp import DEFAULT_GRAPH, IRI, BNode, Literal, Options, Request, Status, Triple, Tx, Var
from ksp.model import SolutionModifier
from ksp.session import KPIdentity
from ksp.terms import XSD_FLOAT, XSD_INTEGER
from sib import QuadStore, Sib
from sib.core import SibCore
from sib.simple import MOST_ROWS, PLANS_CACHED, plan, plans_cached
from sib.testing import Client, ex
from sib.validate import check_request

from strategies import iris, literals, requests

KP = KPIdentity(addr=("kp", 1))
SUBJECTS = [ex(f"s{i}") for i in range(3)]
PREDICATES = [ex(f"p{i}") for i in range(2)]
OBJECTS = [ex("o"), Literal("1", XSD_INTEGER), Literal("01", XSD_INTEGER), Literal("a"),
           Literal.lang_string("a", "en"), Literal.lang_string("a", "EN"),
           Literal("21.5", XSD_FLOAT), Literal("x", ex("odd-type"))]
GRAPHS = [DEFAULT_GRAPH, ex("g1"), ex("g2")]

quads = st.lists(st.tuples(st.sampled_from(SUBJECTS), st.sampled_from(PREDICATES),
                           st.sampled_from(OBJECTS), st.sampled_from(GRAPHS)), max_size=40)
variables = st.integers(0, 3).map(Var)
# Constants from the store's pools, and any term the codec carries (often one that the
# renderer or pyoxigraph refuses: those take the normal path, with its status).
subjects = st.one_of(variables, st.sampled_from(SUBJECTS), iris(small=True))
predicates = st.one_of(variables, st.sampled_from(PREDICATES), iris(small=True))
objects = st.one_of(variables, st.sampled_from(OBJECTS), literals(small=True), iris(small=True))


@st.composite
def reads(draw) -> Request:
    tx = draw(st.sampled_from([Tx.SELECT, Tx.SELECT, Tx.ASK]))
    triple = Triple(draw(subjects), draw(predicates), draw(objects))
    graphs = draw(st.one_of(st.none(), st.sampled_from([*GRAPHS, ex("none")]).map(
        lambda g: (g,)), st.just((GRAPHS[1], GRAPHS[2]))))
    size = draw(st.one_of(st.none(), st.integers(0, 40)))
    return Request(tx, 7, where=(triple,),
                   projection=draw(st.integers(0, 4)) if tx is Tx.SELECT else None,
                   options=Options(query_graphs=graphs, max_response_size=size))


def core_of(content) -> SibCore:
    store = QuadStore()
    store.load(content)
    return SibCore(store)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(quads, reads(), st.sampled_from([None, 20, 1400]))
def test_simple_reads_answer_as_the_normal_path(content, request, payload):
    core = core_of(content)
    at_once = core.read_at_once(request, KP, payload)
    event("at once" if at_once is not None else "normal path")
    if at_once is not None:
        assert at_once == core.read(request, KP, payload)


def test_generated_reads_mostly_take_the_fast_path():
    """The equivalence above is not vacuous: most generated reads of the pools are simple."""
    core = core_of([(s, p, o, g) for s in SUBJECTS for p in PREDICATES for o in OBJECTS[:2]
                    for g in GRAPHS[:2]])
    taken = sum(core.read_at_once(Request(Tx.SELECT, 1, projection=2, where=(Triple(
        s, p, Var(0)),), options=Options(query_graphs=g)), KP) is not None
        for s in SUBJECTS for p in [*PREDICATES, Var(1)] for g in (None, (GRAPHS[1],)))
    assert taken == len(SUBJECTS) * 3 * 2


def test_a_triple_in_several_graphs_matches_once_per_graph():
    core = core_of([(SUBJECTS[0], PREDICATES[0], OBJECTS[0], g) for g in GRAPHS])
    request = Request(Tx.SELECT, 1, projection=1, where=(Triple(SUBJECTS[0], PREDICATES[0],
                                                                 Var(0)),))
    answer = core.read_at_once(request, KP)
    assert answer is not None and len(answer.result.rows) == 3
    assert answer == core.read(request, KP)


def test_non_canonical_literals_match_as_in_sparql():
    core = core_of([(SUBJECTS[0], PREDICATES[0], Literal("01", XSD_INTEGER), DEFAULT_GRAPH)])
    request = Request(Tx.ASK, 1, where=(Triple(SUBJECTS[0], PREDICATES[0],
                                               Literal("1", XSD_INTEGER)),))
    assert core.read_at_once(request, KP) == core.read(request, KP)


def test_only_simple_shapes_are_planned():
    t = Triple(SUBJECTS[0], PREDICATES[0], Var(0))
    simple = Request(Tx.SELECT, 1, projection=1, where=(t,))
    assert plan(simple) is not None
    not_simple = [
        simple._replace(where=(t, t)),  # a join
        simple._replace(where=()),
        simple._replace(where=(Triple(Var(0), PREDICATES[0], Var(0)),)),  # a variable twice
        simple._replace(where=(Triple(BNode("b"), PREDICATES[0], Var(0)),)),
        simple._replace(tx=Tx.CONSTRUCT, template=(t,)),
        simple._replace(tx=Tx.SELECT_PERSISTENT),
        simple._replace(optional=((Triple(Var(0), PREDICATES[1], Var(1)),),)),
        simple._replace(options=Options(modifier=SolutionModifier(limit=1))),
        simple._replace(options=Options(query_graphs=(GRAPHS[1], GRAPHS[2]))),
        simple._replace(where=(Triple(IRI("no scheme"), PREDICATES[0], Var(0)),)),
    ]
    assert [plan(r) for r in not_simple] == [None] * len(not_simple)


def test_plans_are_kept_per_shape_and_bounded():
    """A shape is planned once (the same plan for the next request of it, whatever its TID);
    the plans kept never pass `PLANS_CACHED`, and a shape planned again after the cache
    started afresh gets an equal plan."""
    request = Request(Tx.SELECT, 1, projection=1, where=(Triple(SUBJECTS[0], PREDICATES[0],
                                                                 Var(0)),))
    first = plan(request)
    assert plan(request._replace(tid=2)) is first
    for i in range(PLANS_CACHED + 10):
        plan(request._replace(where=(Triple(ex(f"shape{i}"), PREDICATES[0], Var(0)),)))
        assert plans_cached() <= PLANS_CACHED
    again = plan(request)
    assert again.terms == first.terms and again.columns == first.columns
    core = core_of([(SUBJECTS[0], PREDICATES[0], OBJECTS[0], DEFAULT_GRAPH)])
    assert core.read_at_once(request, KP) == core.read(request, KP)


def test_more_rows_than_the_bound_take_the_normal_path():
    rows = MOST_ROWS + 1
    core = core_of([(SUBJECTS[0], PREDICATES[0], Literal(str(i), XSD_INTEGER), DEFAULT_GRAPH)
                    for i in range(rows)])
    request = Request(Tx.SELECT, 1, projection=1, where=(Triple(SUBJECTS[0], PREDICATES[0],
                                                                 Var(0)),))
    assert core.read_at_once(request, KP) is None
    assert len(core.read(request, KP).result.rows) == rows
    fewer = request._replace(where=(Triple(SUBJECTS[1], PREDICATES[0], Var(0)),))
    assert core.read_at_once(fewer, KP) is not None


BAD = [
    # a literal subject; a blank node predicate (0x04)
    Request(Tx.SELECT, 1, projection=1, where=(Triple(Literal("a"), PREDICATES[0], Var(0)),)),
    Request(Tx.SELECT, 2, projection=1, where=(Triple(Var(0), BNode("p"), Var(0)),)),
    # an IRI SPARQL cannot write (0x04); an option SELECT does not take (0x05)
    Request(Tx.SELECT, 3, projection=1, where=(Triple(IRI("a b"), PREDICATES[0], Var(0)),)),
    Request(Tx.SELECT, 4, projection=1, where=(Triple(Var(0), PREDICATES[0], Var(1)),),
            options=Options(delete_graphs=(GRAPHS[1],))),
    # an empty QUERY GRAPH list (0x06)
    Request(Tx.ASK, 5, where=(Triple(Var(0), PREDICATES[0], Var(1)),),
            options=Options(query_graphs=())),
]


def test_bad_reads_get_the_normal_paths_status():
    async def main():
        sib = Sib(QuadStore())
        client = Client(sib)
        core = SibCore(QuadStore())
        for request in BAD:
            assert core.read_at_once(request, client.kp) is None
            expected = core.read(request, client.kp).status
            assert expected != Status.OK
            assert (await client.call(request)).status == expected
        await sib.close()
    asyncio.run(main())


def test_a_simple_read_is_answered_within_submit_and_sees_the_writes_before_it():
    async def main():
        sib = Sib(QuadStore())
        client = Client(sib)
        triple = Triple(SUBJECTS[0], PREDICATES[0], OBJECTS[0])
        read = Request(Tx.SELECT, 2, projection=1, where=(triple._replace(o=Var(0)),))
        # Queued behind a write: answered at its turn, after the write.
        client.submit(Request(Tx.INSERT_DATA, 1, insert=(triple,)))
        client.submit(read)
        await sib.drain()
        assert client.log[-1][3].result.rows == ((OBJECTS[0],),)
        # Nothing queued before it: answered before `submit` returns.
        client.clear()
        client.submit(read._replace(tid=3))
        assert [(kind, tid) for kind, _, tid, _ in client.log] == [("res", 3)]
        assert client.log[0][3].result.rows == ((OBJECTS[0],),)
        assert sib.core.metrics.requests["SELECT"] == 2
        await sib.close()
    asyncio.run(main())


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(requests(small=True, txs=(Tx.SELECT, Tx.ASK)), reads(),
                 st.builds(lambda r, field, value: r._replace(**{field: value}), reads(),
                           st.sampled_from(["delete", "insert", "template", "optional"]),
                           st.sampled_from([None, (), (Triple(Literal("a"), Var(0), Var(1)),)]))))
def test_a_simple_read_passes_the_checks_by_its_shape(request):
    """`read_at_once` does not run `check_request` again: every request `plan` takes passes
    it (requests of any shape, fields a query does not have included)."""
    planned = plan(request) is not None
    event("planned" if planned else "not planned")
    if planned:
        check_request(request)
