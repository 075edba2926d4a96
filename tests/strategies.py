"""Hypothesis strategies for VALID KSP messages (docs/wire-format.md is the reference).

Public strategies:

- `requests(small=False, txs=None)`: REQs of all 22 transaction types (or of `txs`), with the
  data fields of `ksp.codec.LAYOUT` and only the options `ksp.codes.OPTION_APPLIES` allows.
- `responses(small=False, query_ok=False, transport=None)`: pairs `(Response, answers)`, RES
  and IND, where `answers` is the transaction type of the request answered (the decoder needs
  it). `query_ok=True` gives only OK answers to queries, i.e. responses carrying a result.
  INDs carry a sequence number unless `transport` is TCP; a RES may name its request's epoch
  unless `transport` is TCP.
- `over(msg, transport)`: `msg` as sent over `transport`, for tests that send one generated
  message both ways: a RES's epoch travels over UDP only (15.6).
- `acks()`: ACKs, with or without the sequence number (UDP only: there are no TCP ACKs).
- `messages(small=False)`: any of the three, as `(msg, answers)` (`answers` None unless a
  Response).
- `kp_bytes(transport=UDP)`: the one exception to VALID: what may reach a SIB from a KP,
  random bytes, valid REQs and valid REQs with one byte changed (`sent_tx` reads their type).
- building blocks: `iris`, `graph_names`, `literals`, `terms`, `graphs`, `expressions`,
  `options_for`, `results_for`.

`small=True` keeps every message short (no 32 KiB IRIs, 16 KiB strings, 255-triple graphs or
255-entry prefix lists) for tests doing O(len²) work per example, such as truncation fuzzing.

Validity rules enforced (spec section in brackets): no variables in DATA operations (5.2); no
Literal subjects; predicates only IRI/Var (3.3); no blank nodes in delete graphs (4.4); ≤ 255
triples per Graph field (5.0); CREATE never names the default graph IRI("") (5.3); GC ≥ 1;
options only where OPTION_APPLIES allows, list options non-empty (7.1); RPN expressions built
from an expression tree so the stack discipline holds, bound() only right after a variable
(8.1, 8.2); expressions 1..255 tokens; RES/IND with an error status carry no result (3.2)
but a RES ECHO REQUIRED, whose result is its 1..10-byte echo value (7.7), and a RES NUMBER
BEHIND, whose result is a `Behind` of two u32 (15); EPOCH 1..2^32-1 on every REQ but TERMINATE;
INDs answer persistent transactions only; TERMINATED only in INDs, ECHO REQUIRED and NUMBER
BEHIND only in RESs (3.2); seq only on INDs; a RES
epoch 1..2^32-1 only on a RES other than NUMBER BEHIND, and not over TCP (15.6).
"""
from __future__ import annotations

import datetime as _dt
import functools

from hypothesis import strategies as st

from ksp import (
    DEFAULT_GRAPH, IRI, Ack, AskResult, Behind, Bind, BNode, Call, ConstructResult, Credentials,
    Literal, Op, Options, Order, Request, Response, SelectResult, SolutionModifier, Status,
    Triple, Tx, Var, UDP, encode,
)
from ksp.codec import LAYOUT
from ksp.codes import (
    ECHO_MAX, OPTION_APPLIES, OWL, RDF, RDFS, RES_EPOCH, RESERVED_WORDS, XSD, Opt,
)
from ksp.literals import I32_MAX, I32_MIN, float_lexical
from ksp.terms import (
    RDF_LANGSTRING, XSD_BOOLEAN, XSD_DATETIME, XSD_DECIMAL, XSD_DOUBLE, XSD_FLOAT, XSD_INTEGER,
    double_lexical,
)

__all__ = [
    "NAMESPACES", "iris", "graph_names", "literals", "bnodes", "variables", "terms", "triples",
    "graphs",
    "expressions", "options_for", "requests", "results_for", "responses", "acks", "messages",
    "kp_bytes", "sent_tx", "PERSISTENT", "QUERIES",
]

#: Namespaces shared by generated IRIs, so that prefix lists get used. Some are prefixes of
#: others ("http://example.org/" < "http://example.org/sensors#" < ".../sensors#temp/"), so the
#: longest-prefix rule (§10.2) matters; some are non-ASCII, so bytes ≠ characters.
NAMESPACES: tuple[str, ...] = (
    "http://example.org/",
    "http://example.org/sensors#",
    "http://example.org/sensors#temp/",
    "urn:ksp:",
    "urn:ksp:device:",
    "http://例え.jp/ñ/",
    "é:",
    RDF, RDFS, OWL, XSD,
    "http://www.w3.org/",
)


PERSISTENT: tuple[Tx, ...] = tuple(t for t in Tx if t.persistent)
QUERIES: tuple[Tx, ...] = tuple(t for t in Tx if t.is_query)
_GRAPH_FIELDS = ("delete", "insert", "where", "template")
_BINARY_OPS = tuple(op for op in Op if op.arity == 2)
# BOUND is unary too, but only right after a variable
_UNARY_OPS = tuple(op for op in Op if op.arity == 1 and op is not Op.BOUND and not op.variadic)
_TERNARY_OPS = tuple(op for op in Op if op.arity == 3)
_NULLARY_OPS = tuple(op for op in Op if op.arity == 0 and not op.variadic)
_VARIADIC_OPS = tuple(op for op in Op if op.variadic)
_U16 = st.one_of(st.integers(0, 0xFFFF), st.sampled_from([0, 1, 0x7FFF, 0x8000, 0xFFFF]))
_LOCAL = st.text(st.sampled_from("abcxyz019_-.é日🙂/#:"), max_size=12)


def _rarely(common, rare, one_in: int = 16):
    """`common`, or `rare` about once in `one_in` draws (one_of would pick each branch equally)."""
    return st.integers(1, one_in).flatmap(lambda k: rare if k == one_in else common)


def _chain(pairs) -> tuple[Triple, ...]:
    """Triples where mask bit i copies member i of the previous triple (exercises Empty)."""
    out: list[Triple] = []
    for t, mask in pairs:
        if out:
            prev = out[-1]
            t = Triple(*(prev[i] if mask >> i & 1 else t[i] for i in range(3)))
        out.append(t)
    return tuple(out)


def _datetime19(d: _dt.datetime) -> str:
    return (f"{d.year:04d}-{d.month:02d}-{d.day:02d}"
            f"T{d.hour:02d}:{d.minute:02d}:{d.second:02d}")


@functools.lru_cache(maxsize=None)
def _base(small: bool):
    """Term-level strategies, built once per size class."""
    ns_iri = st.builds(lambda ns, local: IRI(ns + local), st.sampled_from(NAMESPACES), _LOCAL)
    reserved = st.sampled_from([IRI(w) for w in RESERVED_WORDS])
    arbitrary = st.text(min_size=1, max_size=24).map(IRI)  # any unicode (no surrogates)
    # ≥ 128 bytes: the two-byte URI length (§4.1), whatever prefix the encoder strips.
    long_iri = st.builds(lambda ns, ch, n: IRI(ns + ch * n), st.sampled_from(NAMESPACES),
                         st.sampled_from("aé日🙂"), st.integers(128, 200 if small else 400))
    iris = st.one_of(ns_iri, ns_iri, ns_iri, reserved, arbitrary, long_iri)
    if not small:
        # The largest URI field there is: 32767 bytes (with or without a prefix stripped).
        iris = _rarely(iris, st.sampled_from([IRI("x" * 32767), IRI("urn:ksp:" + "y" * 32759),
                                              IRI("é" * 16383)]), 200)

    # -- literals (every literal type of table 3.4, compact and non-canonical forms) --------
    def lit(dt):
        return lambda lex: Literal(lex, dt)

    strings = st.one_of(st.text(max_size=20), st.text(max_size=20),
                        st.text(min_size=64, max_size=80))  # ≥ 64 bytes: 2-byte string length
    if not small:  # around the 3-byte string length: 16384 bytes
        strings = _rarely(strings, st.sampled_from(
            ["s" * 63, "s" * 64, "s" * 16383, "s" * 16384, "é" * 8191 + "a", "é" * 8192]), 50)
    strings = strings.map(Literal)
    integers = st.one_of(
        st.integers(I32_MIN, I32_MAX).map(str),  # compact i32
        st.sampled_from([I32_MIN, I32_MAX, 0, -1]).map(str),
        st.one_of(st.integers(max_value=I32_MIN - 1),
                  st.integers(min_value=I32_MAX + 1)).map(str),  # beyond i32: 0x06
        st.builds(lambda n, z: "0" * z + str(n), st.integers(0, 10**6), st.integers(1, 3)),
        st.sampled_from(["+5", "-0", "00", " 1", "1 ", "١٢", "1_000", "", "abc"]),
    ).map(lit(XSD_INTEGER))
    floats = st.one_of(
        st.floats(width=32).map(float_lexical),  # canonical (incl. NaN, INF, -INF, -0.0)
        st.sampled_from(["0.0", "-0.0", "INF", "-INF", "NaN", "21.5", "3.0", "1e-05", "0.1",
                         "3.4028235e+38", "1e-45"]),
        st.floats(width=32, allow_nan=False, allow_infinity=False).map(lambda x: f"{x:.12e}"),
        st.sampled_from(["21.50", "1.0E2", "1e39", "nan", "inf", "+1.5", ".5", "0.1000", "1"]),
        st.floats().map(repr),  # binary64 values: mostly no binary32 lexical
    ).map(lit(XSD_FLOAT))
    doubles = st.one_of(
        st.floats().map(double_lexical),  # canonical
        st.sampled_from(["1.50", "1E5", "-0", "nan", "+INF", "1"]),
    ).map(lit(XSD_DOUBLE))
    dt19 = st.datetimes(min_value=_dt.datetime(1, 1, 1)).map(_datetime19)
    tz = st.one_of(st.just("Z"), st.builds(lambda s, h, m: f"{s}{h:02d}:{m:02d}",
                                           st.sampled_from("+-"), st.integers(0, 14),
                                           st.sampled_from([0, 30, 45])))
    datetimes = st.one_of(
        dt19, dt19,
        st.builds(str.__add__, dt19, tz),  # with a time zone: 0x06
        st.builds(lambda a, f, z: f"{a}.{f}{z}", dt19, st.integers(0, 999999),
                  st.one_of(st.just(""), tz)),  # with a fraction: 0x06
        st.sampled_from(["2026-13-01T00:00:00", "2026-11-21T24:00:00", "2026-11-21 12:00:00",
                         "9999-12-31T23:59:59", "0000-01-01T00:00:00"]),
    ).map(lit(XSD_DATETIME))
    booleans = st.sampled_from(["true", "false", "1", "0", "TRUE"]).map(lit(XSD_BOOLEAN))
    tags = st.one_of(
        st.from_regex(r"[a-z]{2,3}(-[A-Za-z0-9]{1,8}){0,2}", fullmatch=True),
        st.text(st.sampled_from("abcXYZ019-"), min_size=1, max_size=12),
        st.just("a" * 255),  # longest tag
    )
    lang_strings = st.builds(Literal.lang_string, st.text(max_size=20), tags)
    other = st.one_of(
        st.decimals(allow_nan=False, allow_infinity=False).map(str).map(lit(XSD_DECIMAL)),
        st.dates().map(lambda d: Literal(d.isoformat(), XSD + "date")),
        st.builds(lambda lex, dt: Literal(lex, dt), st.text(max_size=20),
                  st.one_of(ns_iri, reserved, arbitrary).filter(lambda i: i != RDF_LANGSTRING)),
    )
    literals = st.one_of(strings, integers, floats, doubles, datetimes, booleans, lang_strings,
                         other)

    bnodes = st.one_of(st.text(min_size=1, max_size=12),
                       st.text(min_size=128, max_size=140)).map(BNode)  # ≥ 128 bytes
    variables = st.one_of(st.integers(0, 5), st.sampled_from([0, 127, 128, 255])).map(Var)
    graph_names = st.one_of(iris, st.just(DEFAULT_GRAPH))
    return dict(iris=iris, literals=literals, bnodes=bnodes, variables=variables,
                graph_names=graph_names, ns_iri=ns_iri)


def iris(small: bool = False):
    return _base(small)["iris"]


def graph_names(small: bool = False, default: bool = True):
    """Graph names (§4.1); `default` includes the default graph IRI("")."""
    return _base(small)["graph_names" if default else "iris"]


def literals(small: bool = False):
    return _base(small)["literals"]


def bnodes(small: bool = False):
    return _base(small)["bnodes"]


def variables():
    return _base(False)["variables"]


def terms(small: bool = False, vars_ok: bool = True):
    b = _base(small)
    parts = [b["iris"], b["literals"], b["bnodes"]] + ([b["variables"]] if vars_ok else [])
    return st.one_of(*parts)


@functools.lru_cache(maxsize=None)
def triples(small: bool = False, vars_ok: bool = True, bnodes_ok: bool = True):
    """One triple: subject IRI/BNode/Var, predicate IRI/Var, object anything (table 3.3)."""
    b = _base(small)
    subj = [b["iris"], b["iris"]] + ([b["bnodes"]] if bnodes_ok else [])
    pred = [b["iris"], b["iris"]]
    obj = [b["iris"], b["literals"], b["literals"]] + ([b["bnodes"]] if bnodes_ok else [])
    if vars_ok:
        subj.append(b["variables"])
        pred.append(b["variables"])
        obj.append(b["variables"])
    return st.builds(Triple, st.one_of(*subj), st.one_of(*pred), st.one_of(*obj))


@functools.lru_cache(maxsize=None)
def graphs(small: bool = False, vars_ok: bool = True, bnodes_ok: bool = True,
           max_triples: int = 255):
    """Graph fields (§5.0), with members repeated from the previous triple (Empty)."""
    triple = triples(small, vars_ok, bnodes_ok)
    chained = st.lists(st.tuples(triple, st.integers(0, 7)),
                       max_size=min(max_triples, 4 if small else 6)).map(_chain)
    if small or max_triples < 255:
        return chained
    # The most a Graph field holds: 255 triples, one subject and predicate (Empty-compressed).
    full = st.builds(
        lambda t: tuple(t._replace(o=IRI(f"http://example.org/item/{i}")) for i in range(255)),
        triple)
    return _rarely(chained, full)


@functools.lru_cache(maxsize=None)
def expressions(small: bool = False):
    """Well-formed RPN expressions (§8.1), from a random expression tree."""
    b = _base(small)
    operand = st.one_of(b["variables"], b["iris"], b["literals"]).map(lambda t: (t,))
    bound = b["variables"].map(lambda v: (v, Op.BOUND))

    def extend(sub):
        return st.one_of(
            st.builds(lambda op, x, y: x + y + (op,), st.sampled_from(_BINARY_OPS), sub, sub),
            st.builds(lambda op, x: x + (op,), st.sampled_from(_UNARY_OPS), sub),
            st.builds(lambda op, x, y, z: x + y + z + (op,), st.sampled_from(_TERNARY_OPS),
                      sub, sub, sub),
            st.builds(lambda xs, op: sum(xs, ()) + (Call(op, len(xs) - op.arity),),
                      st.lists(sub, min_size=1, max_size=3), st.sampled_from(_VARIADIC_OPS)),
            st.sampled_from(_NULLARY_OPS).map(lambda op: (op,)),
        )

    tree = st.recursive(st.one_of(operand, operand, bound), extend,
                        max_leaves=6 if small else 12).filter(lambda e: len(e) <= 255)
    # The longest expression: 255 tokens, v0 v1 + v1 + … (stack depth never above 2).
    longest = st.just((Var(0),) + (Var(1), Op.ADD) * 127)
    return tree if small else _rarely(tree, longest)


@functools.lru_cache(maxsize=None)
def _prefix_lists(small: bool):
    # Entries are never empty (§7.2: an empty prefix is status 0x06).
    entry = st.one_of(st.sampled_from(NAMESPACES), st.text(min_size=1, max_size=8))
    lists = st.lists(entry, max_size=5).map(tuple)
    if small:
        return lists
    return _rarely(lists, st.just(tuple(f"http://p{i}.example/" for i in range(255))))


def options_for(tx: Tx, small: bool = False):
    """Options of a REQ of type `tx`: only those table 7.1 applies to `tx`."""
    return _options_for(Tx(tx), small)


@st.composite
def _options_for(draw, tx: Tx, small: bool):
    def applies(opt: Opt) -> bool:
        return tx in OPTION_APPLIES[opt]

    def maybe(opt: Opt) -> bool:
        return applies(opt) and draw(st.integers(0, 2)) == 0  # each option in ~1/3 of REQs

    kw: dict = {}
    if applies(Opt.PREFIX):
        kw["prefixes"] = draw(st.one_of(st.none(), _prefix_lists(small)))
    else:
        kw["prefixes"] = draw(st.sampled_from([None, ()]))  # TERMINATE, RESET: no prefix list
    names = st.lists(graph_names(small), min_size=1, max_size=3).map(tuple)
    if maybe(Opt.DELETE_GRAPH):
        kw["delete_graphs"] = draw(names)
    if maybe(Opt.INSERT_GRAPH):
        kw["insert_graphs"] = draw(names)
    if maybe(Opt.QUERY_GRAPH):
        kw["query_graphs"] = draw(names)
    if maybe(Opt.OPTIONAL_PATTERN):  # pattern updates only: variables allowed
        kw["optional"] = draw(st.lists(graphs(small, max_triples=8), min_size=1,
                                       max_size=2).map(tuple))
    if maybe(Opt.FILTER):
        kw["filters"] = draw(st.lists(expressions(small), min_size=1, max_size=3).map(tuple))
    if maybe(Opt.SOLUTION_MODIFIER):
        order = draw(st.sampled_from(list(Order)))
        kw["modifier"] = SolutionModifier(
            order=order,
            order_var=draw(st.integers(0, 255)) if order else None,
            limit=draw(st.one_of(st.none(), _U16)),
            offset=draw(st.one_of(st.none(), _U16)),
            distinct=draw(st.booleans()),
        )
    if maybe(Opt.BIND):
        kw["binds"] = draw(st.lists(st.builds(Bind, st.integers(0, 255), expressions(small)),
                                    min_size=1, max_size=3).map(tuple))
    if maybe(Opt.MAX_RESPONSE_SIZE):
        kw["max_response_size"] = draw(st.one_of(st.integers(0, 2**32 - 1),
                                                 st.sampled_from([0, 4, 8, 2**32 - 1])))
    if maybe(Opt.CREDENTIALS):
        password = st.one_of(st.text(max_size=12),
                             st.sampled_from(["p" * 255, "é" * 127]))  # ≤ 255 bytes
        kw["credentials"] = Credentials(draw(st.binary(min_size=16, max_size=16)),
                                        draw(password))
    if maybe(Opt.ECHO):
        kw["echo"] = draw(echo_values)
    if maybe(Opt.EPOCH):
        kw["epoch"] = draw(epochs)
    return Options(**kw)


def requests(small: bool = False, txs=None):
    """Valid REQs; `txs` restricts the transaction types (default: all 22)."""
    return _requests(small, tuple(Tx) if txs is None else tuple(Tx(t) for t in txs))


@st.composite
def _requests(draw, small: bool, txs: tuple[Tx, ...]):
    tx = draw(st.sampled_from(txs))
    data_update = tx.is_data_update
    kw: dict = {}
    for name in LAYOUT[tx]:
        if name in _GRAPH_FIELDS:
            # Blank nodes are not allowed in what is deleted (§4.4); variables not in DATA (§5.2).
            g = draw(graphs(small, vars_ok=not data_update, bnodes_ok=name != "delete"))
            kw[name] = None if not g and draw(st.booleans()) else g  # None: an empty Graph
        elif name == "projection":
            kw[name] = draw(st.one_of(st.integers(0, 6), st.just(255)))
        elif name == "optional":
            opt = draw(st.lists(graphs(small, max_triples=8), max_size=3).map(tuple))
            kw[name] = None if not opt and draw(st.booleans()) else opt  # None: OGC = 0
        elif name == "graphs":
            names = graph_names(small, default=tx is not Tx.CREATE)  # never CREATE DEFAULT
            lists = st.lists(names, min_size=1, max_size=4).map(tuple)
            if not small:  # GC = 255
                lists = _rarely(lists, st.just(tuple(IRI(f"urn:ksp:g{i}") for i in range(255))))
            kw[name] = draw(lists)
        else:  # source, target
            kw[name] = draw(graph_names(small))
    return Request(tx, draw(_U16), draw(st.booleans()), options=draw(options_for(tx, small)),
                   **kw)


@functools.lru_cache(maxsize=None)
def results_for(form: Tx, small: bool = False):
    """Query results (§6) for a transaction of base type `form` (SELECT, ASK, CONSTRUCT)."""
    form = Tx(form).base
    if form is Tx.ASK:
        return st.builds(AskResult, st.booleans())
    b = _base(small)
    prefixes = st.one_of(st.none(), _prefix_lists(small))

    def total(n):  # TRC ≥ RC; None lets the encoder count; above 65535 saturates
        return st.one_of(st.none(), st.none(), st.integers(n, n + 5),
                         st.integers(0xFFFF, 0x20000))

    if form is Tx.SELECT:
        value = st.one_of(st.none(), b["iris"], b["literals"], b["bnodes"])

        def rows(vc):
            return st.lists(st.lists(value, min_size=vc, max_size=vc).map(tuple),
                            max_size=4 if small else 8).map(tuple)

        vc = _rarely(st.integers(0, 4), st.just(255)) if not small else st.integers(0, 3)
        shaped = vc.flatmap(lambda n: st.tuples(st.just(n), rows(n)))
        if not small:  # many rows: VC = 0 rows are empty (a solution count), up to RC 65535
            shaped = _rarely(shaped, st.sampled_from([300, 65535]).map(lambda n: (0, ((),) * n)))
        return shaped.flatmap(lambda vr: st.builds(
            SelectResult, st.just(vr[0]), st.just(vr[1]), total(len(vr[1])), prefixes))
    # CONSTRUCT: triples without variables; RC is u16, so more than 255 are allowed.
    graph = graphs(small, vars_ok=False)
    if not small:
        graph = _rarely(graph, st.builds(
            lambda t: tuple(t._replace(o=Literal(str(i), XSD_INTEGER)) for i in range(300)),
            triples(False, vars_ok=False)))
    return graph.flatmap(lambda ts: st.builds(
        ConstructResult, st.just(ts), total(len(ts)), prefixes))


#: An echo value (ECHO option, RES ECHO REQUIRED: 7.7).
echo_values = st.binary(min_size=1, max_size=ECHO_MAX)
_U32 = st.one_of(st.integers(0, 2**32 - 1), st.sampled_from([0, 1, 0xFFFF, 2**31 - 1, 2**32 - 1]))
#: An epoch of the EPOCH option (15): 0 is written as no option.
epochs = _U32.filter(bool)


def responses(small: bool = False, query_ok: bool = False, transport=None):
    """Pairs (Response, answers). An IND has a sequence number unless `transport` is TCP (R11),
    a RES may have an epoch unless `transport` is TCP (15.6); with `transport=None` every IND
    has one and RESs have epochs, for tests that send the same message both ways (`over`)."""
    return _responses(small, query_ok, transport == "tcp")


def over(msg, transport):
    """`msg` as sent over `transport`: a RES names its request's epoch over UDP only (15.6)."""
    if transport == "tcp" and isinstance(msg, Response) and msg.epoch is not None:
        return msg._replace(epoch=None)
    return msg


_STATUSES_WITH_DATA = [Status.ECHO_REQUIRED, Status.NUMBER_BEHIND]  # a RES's only (3.2)
_ERROR_STATUSES = [s for s in Status
                   if s not in (Status.OK, Status.TERMINATED, *_STATUSES_WITH_DATA)]


@st.composite
def _responses(draw, small: bool, query_ok: bool, tcp: bool):
    indication = draw(st.booleans())
    if query_ok:
        answers = draw(st.sampled_from([t for t in QUERIES if t.persistent or not indication]))
    else:
        answers = draw(st.sampled_from(PERSISTENT if indication else tuple(Tx)))
    if query_ok or draw(st.integers(0, 4)):  # mostly OK
        status = Status.OK
        result = draw(results_for(answers.base, small)) if answers.is_query else None
    else:
        errors = _ERROR_STATUSES + ([Status.TERMINATED] if indication else [])
        # 0x11-0x3f: reserved codes a KP must still decode (and treat as errors).
        with_data = [] if indication else _STATUSES_WITH_DATA
        status = draw(st.one_of(st.sampled_from(errors + with_data),
                                st.integers(max(Status) + 1, RES_EPOCH - 1)))
        result = None
        if status == Status.ECHO_REQUIRED and not indication:
            result = draw(echo_values)
        elif status == Status.NUMBER_BEHIND and not indication:
            result = Behind(draw(_U32), draw(_U32))
    seq = draw(_U16) if indication and not tcp else None
    epoch = None
    if not (indication or tcp or status == Status.NUMBER_BEHIND) and draw(st.booleans()):
        epoch = draw(epochs)
    return Response(draw(_U16), status, result, indication, seq, epoch=epoch), answers


def acks():
    return st.builds(lambda tid, seq: Ack(tid, seq), _U16, st.one_of(st.none(), _U16))


def messages(small: bool = False):
    """Any valid message, as (msg, answers); answers is None for REQ and ACK."""
    return st.one_of(
        requests(small).map(lambda m: (m, None)),
        responses(small),
        acks().map(lambda m: (m, None)),
    )


def kp_bytes(transport=UDP):
    """What may reach a SIB from a KP, broken or not: random bytes, valid REQs (NON or CON,
    persistent ones too) and valid REQs with one byte changed; never Transaction ID 0xFFFF,
    which a test keeps for its own last request."""
    return st.one_of(
        st.binary(max_size=64),
        requests(small=True).map(lambda r: encode(r, transport)),
        st.builds(_flipped, requests(small=True), st.just(transport), st.integers(0, 1 << 16),
                  st.integers(1, 255)),
    ).filter(lambda b: b[2:4] != b"\xff\xff")


def _flipped(request: Request, transport, at: int, mask: int) -> bytes:
    data = bytearray(encode(request, transport))
    data[at % len(data)] ^= mask
    return bytes(data)


def sent_tx(data: bytes) -> Tx | None:
    """The transaction type a message's header names, if any (what its answer answers)."""
    try:
        return Tx(data[1] & 0x7F) if len(data) > 1 else None
    except ValueError:
        return None


# ---------------------------------------------------------------------------------------------
# Self-checks: collected when pytest is given this file. Each kind of thing the strategies
# promise shows up among a few hundred examples.

def _seen(strategy, labels, n: int = 400) -> set:
    """The union of `labels(example)` over `n` generated examples (no shrinking)."""
    from hypothesis import HealthCheck, Phase, given, settings
    seen: set = set()

    @settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate],
              derandomize=True, suppress_health_check=list(HealthCheck))  # deterministic
    @given(strategy)
    def collect(example):
        seen.update(labels(example))

    collect()
    return seen


def test_every_transaction_type_and_option_is_generated():
    def labels(m):
        yield m.tx
        yield from (Opt(i) for i, v in enumerate(m.options) if v)

    seen = _seen(requests(small=True), labels, 800)
    assert set(Tx) <= seen, set(Tx) - seen
    assert set(Opt) <= seen, set(Opt) - seen


def test_every_literal_type_is_generated():
    from ksp.codes import LiteralType
    from ksp.literals import compact_type
    seen = _seen(literals(small=True), lambda lit: {compact_type(lit)})
    assert seen == set(LiteralType), set(LiteralType) - seen


def test_every_response_shape_is_generated():
    def labels(pair):
        m, _ = pair
        yield "IND" if m.indication else "RES"
        yield "OK" if m.status == Status.OK else "reserved" if m.status > max(Status) else "error"
        yield type(m.result).__name__
        if getattr(m.result, "prefixes", None):
            yield "explicit prefixes"
        if m.epoch is not None:
            yield "epoch " + type(m.result).__name__

    seen = _seen(responses(small=True), labels)
    want = {"IND", "RES", "OK", "reserved", "error", "SelectResult", "AskResult",
            "ConstructResult", "bytes", "Behind", "NoneType", "explicit prefixes",
            "epoch NoneType", "epoch bytes", "epoch SelectResult"}
    assert want <= seen, want - seen
