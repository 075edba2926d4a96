"""Same-shape persistent queries evaluated together (`sib.shapes`): the one query, prepared
once per member set and kept (`Prepared`), gives each member exactly its own evaluation
(`sib.query.evaluate`), before and after the store changes; the screen's shortcut
(`sib.screen.unconditional`) lets through only what `could_use` would."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ksp import DEFAULT_GRAPH, Literal, Options, Request, Triple, Tx, Var
from ksp.codes import Op
from ksp.terms import XSD, XSD_INTEGER, BNode
from sib.pattern import Pattern
from sib.query import evaluate
from sib.screen import could_use, unconditional
from sib.shapes import Prepared, evaluate_together, prepare, run, shape_of
from sib.store import Delta, QuadStore
from sib.testing import ex

SUBJECTS = [ex(f"s{i}") for i in range(3)]
PREDICATES = [ex(f"p{i}") for i in range(2)]
GRAPHS = [DEFAULT_GRAPH, ex("g1")]

# integers in canonical and other lexical forms (the VALUES block writes the canonical ones
# bare), strings, IRIs: the constants devices put in their queries and the values they write
values = st.one_of(
    st.integers(-6, 6).map(Literal.of),
    st.integers(-300, 300).map(Literal.of),
    st.just(Literal("2.5", XSD + "decimal")),
    st.sampled_from(["007", "-0", "+5", "0", "-12"]).map(lambda lex: Literal(lex, XSD_INTEGER)),
    st.sampled_from(["a", "b", ""]).map(Literal.of),
    st.sampled_from(SUBJECTS))
quads = st.tuples(st.sampled_from(SUBJECTS), st.sampled_from(PREDICATES), values,
                  st.sampled_from(GRAPHS))


@st.composite
def same_shape(draw) -> list[Request]:
    """Requests of one shape (a family below) differing in their constants."""
    family = min(draw(st.integers(0, 7)), 5)  # 4 and 5 (integer thresholds) more often
    op = draw(st.sampled_from([Op.EQ, Op.NE, Op.LT, Op.GE, Op.GT, Op.LE]))
    graphs = draw(st.sampled_from([None, (DEFAULT_GRAPH,), (ex("g1"),)]))
    tx = draw(st.sampled_from([Tx.SELECT_PERSISTENT, Tx.ASK_PERSISTENT]))
    watched, p0 = draw(st.sampled_from(SUBJECTS)), draw(st.sampled_from(PREDICATES))
    var_first, integers = draw(st.booleans()), draw(st.booleans())
    out = []
    for tid in range(draw(st.integers(2, 6))):
        threshold = draw(st.integers(-4, 4).map(Literal.of) if integers else values)
        if family == 4:  # one sensor, each device its threshold (`sib.thresholds`)
            compare = (Var(0), threshold, op) if var_first else (threshold, Var(0), op)
            out.append(Request(tx, tid, projection=1 if tx is Tx.SELECT_PERSISTENT else None,
                               where=(Triple(watched, p0, Var(0)),),
                               options=Options(filters=(compare,), query_graphs=graphs)))
            continue
        if family == 5:  # thresholds on an optional value, beside a shared FILTER
            out.append(Request(Tx.SELECT_PERSISTENT, tid, projection=2,
                               where=(Triple(Var(1), p0, Var(2)),),
                               optional=((Triple(Var(1), ex("p1"), Var(0)),),),
                               options=Options(filters=((Var(2), Literal.of(0), Op.GE),
                                                        (Var(0), threshold, op)))))
            continue
        s, p, p2 = draw(st.sampled_from(SUBJECTS)), draw(st.sampled_from(PREDICATES)), \
            draw(st.sampled_from(PREDICATES))
        bound = draw(values)
        if family == 0:  # a sensor's value under the device's own threshold
            out.append(Request(tx, tid, projection=1 if tx is Tx.SELECT_PERSISTENT else None,
                               where=(Triple(s, p, Var(0)),),
                               options=Options(filters=((Var(0), bound, op),),
                                               query_graphs=graphs)))
        elif family == 1:  # a join and an optional group
            out.append(Request(Tx.SELECT_PERSISTENT, tid, projection=2,
                               where=(Triple(Var(1), p, bound),),
                               optional=((Triple(Var(1), p2, Var(0)),),)))
        elif family == 2:  # a constant object and a filter on another variable
            out.append(Request(Tx.SELECT_PERSISTENT, tid, projection=2,
                               where=(Triple(Var(0), p, Var(1)), Triple(Var(0), p2, bound)),
                               options=Options(filters=((Var(1), draw(values), op),))))
        else:
            out.append(Request(Tx.CONSTRUCT_PERSISTENT, tid,
                               template=(Triple(ex("device"), ex("seen"), Var(0)),),
                               where=(Triple(s, p, Var(0)),),
                               options=Options(filters=((Var(0), bound, op),))))
    return out


def members(requests: list[Request]) -> list[tuple]:
    """(request, pattern, constants) of the requests, one of each pattern (as query groups
    are: identical queries share one group)."""
    out, seen, shapes = [], set(), set()
    for req in requests:
        pattern = Pattern(req)
        shape = shape_of(req, pattern)
        assert shape is not None
        shapes.add(shape[0])
        if pattern.key not in seen:
            seen.add(pattern.key)
            out.append((req, pattern, shape[1]))
    assert len(shapes) == 1
    return out


@settings(max_examples=150, deadline=None)
@given(same_shape(), st.lists(quads, max_size=12), st.lists(quads, max_size=6),
       st.lists(quads, max_size=6))
def test_together_and_kept_give_each_members_own_result(requests, seed, added, removed):
    store = QuadStore()
    store.load(seed)
    group = members(requests)
    if len({m[1].key for m in group}) < 2:
        return
    kept = Prepared()
    key = tuple(range(len(group)))
    for _ in range(2):  # the query prepared, then kept and run on the changed store
        own = [evaluate(store, req, pattern) for req, pattern, _ in group]
        assert evaluate_together(store, group) == own
        assert run(store, kept.get(key, lambda: group), [m[0] for m in group]) == own
        store.apply(Delta(added=tuple(q for q in set(added) if not store.match(*q)),
                          removed=tuple(q for q in set(removed) if store.match(*q))))
    assert len(kept) == 1


def test_values_cells_name_the_same_terms():
    """Canonical integers are written bare; other lexical forms typed (the store would read a
    bare `007` as 7)."""
    reqs = [Request(Tx.SELECT_PERSISTENT, tid, projection=1, where=(Triple(ex("s"), ex("p"),
                    Var(0)),), options=Options(filters=((Var(0), Literal(lex, XSD_INTEGER),
                                                         Op.EQ),)))
            for tid, lex in enumerate(["-48", "0", "007", "-0", "+5", "12"])]
    text = prepare(members(reqs)).text
    assert "(-48 0)" in text and "(0 1)" in text and "(12 5)" in text
    for lex in ("007", "-0", "+5"):
        assert f'"{lex}"^^<{XSD_INTEGER}>' in text


def test_thresholds_alone_are_compared_here_and_other_values_by_the_store():
    """Members differing only in integer thresholds get the query without them (and their
    comparisons); a value only the store can compare (a decimal, a string) sends them all to
    the VALUES query, with the same results."""
    group = _group(5)
    together = prepare(group)
    assert together.thresholds is not None and "VALUES" not in together.base
    store = QuadStore()
    reqs = [m[0] for m in group]
    for value in (Literal.of(-2), Literal("2.5", XSD + "decimal"), Literal.of("x"),
                  Literal(str(1 << 70), XSD_INTEGER), Literal("+03", XSD_INTEGER)):
        store.load([(ex("s"), ex("p"), value, DEFAULT_GRAPH)])
        assert run(store, together, reqs) == [evaluate(store, r, p) for r, p, _ in group]
    assert prepare(_group(5)[:1] + members([Request(
        Tx.SELECT_PERSISTENT, 9, projection=1, where=(Triple(ex("s"), ex("p"), Var(0)),),
        options=Options(filters=((Var(0), Literal("7.5", XSD + "decimal"), Op.GT),)))])
    ).thresholds is None  # a threshold that is not a canonical integer: VALUES


def _group(n: int, threshold: int = 0) -> list[tuple]:
    return members([Request(Tx.SELECT_PERSISTENT, tid, projection=1,
                            where=(Triple(ex("s"), ex("p"), Var(0)),),
                            options=Options(filters=((Var(0), Literal.of(threshold - tid),
                                                      Op.GT),)))
                    for tid in range(n)])


def test_prepared_is_bounded_by_count_and_by_characters():
    kept = Prepared(limit=3)
    for key in range(5):
        kept.get(key, lambda: _group(2))
    assert len(kept) == 3
    calls = []
    kept.get(4, lambda: calls.append(1) or _group(2))  # kept: not prepared again
    kept.get(0, lambda: calls.append(1) or _group(2))  # the oldest went first
    assert calls == [1] and len(kept) == 3

    size = len(prepare(_group(2)).text)
    kept = Prepared(limit=100, chars=2 * size)
    for key in range(4):
        kept.get(key, lambda: _group(2))
    assert len(kept) == 2
    kept.get("long", lambda: _group(50))  # longer than all the room: run, not kept
    assert len(kept) == 2


terms = st.one_of(st.sampled_from(SUBJECTS), st.sampled_from([Var(0), Var(1)]),
                  st.sampled_from([BNode("x")]))


@settings(max_examples=300, deadline=None)
@given(st.tuples(terms, st.one_of(st.sampled_from(PREDICATES), st.sampled_from([Var(1)])),
                 st.one_of(terms, values)), st.booleans(), st.lists(quads, max_size=5),
       quads)
def test_unconditional_probes_let_through_only_what_could_use_would(tp, joined, seed, quad):
    store = QuadStore()
    store.load(seed)
    tp = Triple(*tp)
    others = (Triple(Var(0), ex("p0"), Var(3)),) if joined else ()
    # a quad the index would match to `tp`: its constants where `tp` has them
    quad = tuple(q if isinstance(t, (Var, BNode)) else t for t, q in zip(tp, quad)) + (quad[3],)
    if unconditional((tp, others)):
        assert not others and could_use(store, None, tp, others, quad)
    free = [t for t in tp if isinstance(t, (Var, BNode))]
    # the shortcut leaves out only patterns binding a variable twice
    assert unconditional((tp, ())) == (len(set(free)) == len(free))
