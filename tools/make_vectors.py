"""Generate the golden vectors `tests/vectors/*.json` (docs/wire-format.md §11).

    .venv/bin/python -m tools.make_vectors [OUTPUT_DIR]

Valid vectors are message definitions below; their hex is `ksp.codec.encode` of the message,
and every message names its prefix list explicitly (`Options.prefixes`, result `prefixes`), so
the bytes never depend on the automatic prefix chooser. Invalid vectors are hand-written hex
with the status a decoder must answer. The output is deterministic: one file per vector,
sorted keys, 2-space indent, UTF-8, trailing newline; files of the output directory that no
vector produces are removed. `tests/test_vectors.py` regenerates into a temporary directory
and compares, so the files and this generator cannot drift apart.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ksp.codec import LAYOUT, TCP, UDP, decode_sib_message, encode
from ksp.codes import OWL, RDF, RDFS, RESERVED_WORDS, XSD, Op, Status, Tx
from ksp.reference.jsonmodel import to_json
from ksp.model import (
    Ack, AskResult, Behind, Bind, Call, ConstructResult, Credentials, Options, Order, Request,
    Response, SelectResult, SolutionModifier,
)
from ksp.terms import (
    XSD_BOOLEAN, XSD_DATETIME, XSD_DECIMAL, XSD_DOUBLE, XSD_FLOAT, XSD_INTEGER, IRI, BNode,
    Literal, Triple, Var,
)

OUT = Path(__file__).resolve().parent.parent / "tests" / "vectors"

# ---------------------------------------------------------------------------------------------
# Vocabulary

EX = "http://example.org/"
SN = "http://example.org/sensors/"
G = "http://example.org/graphs/"
EXP = (EX,)
RDF_TYPE = IRI(RDF + "type")
XSD_DATE = XSD + "date"
KP_ID = bytes.fromhex("0f1e2d3c4b5a69788796a5b4c3d2e1f0")


def ex(local: str) -> IRI:
    return IRI(EX + local)


def sn(local: str) -> IRI:
    return IRI(SN + local)


def gr(local: str) -> IRI:
    return IRI(G + local)


def T(s, p, o) -> Triple:
    return Triple(s, p, o)


V = Var


def s(text: str) -> Literal:
    return Literal(text)


def i(n: int | str) -> Literal:
    return Literal(str(n), XSD_INTEGER)


def f(lex: str) -> Literal:
    return Literal(lex, XSD_FLOAT)


def d(lex: str) -> Literal:
    return Literal(lex, XSD_DOUBLE)


def dt(lex: str) -> Literal:
    return Literal(lex, XSD_DATETIME)


def b(value: bool) -> Literal:
    return Literal("true" if value else "false", XSD_BOOLEAN)


def lang(text: str, tag: str) -> Literal:
    return Literal.lang_string(text, tag)


def typed(lex: str, datatype: str) -> Literal:
    return Literal(lex, datatype)


_EMPTY_DATA = {"delete": (), "insert": (), "where": (), "template": (), "optional": ()}


def R(tx: Tx, tid: int, con: bool = True, prefixes: tuple[str, ...] = (), **fields) -> Request:
    """A Request with every Data field of its layout present (empty graphs where not given)."""
    opts = fields.pop("options", {})
    for name in LAYOUT[tx]:
        if name in _EMPTY_DATA:
            fields.setdefault(name, _EMPTY_DATA[name])
    return Request(tx, tid, con, options=Options(prefixes=prefixes, **opts), **fields)


def mod(order: Order = Order.NONE, order_var=None, limit=None, offset=None, distinct=False):
    return SolutionModifier(order, order_var, limit, offset, distinct)


def select_result(rows, variables: int, prefixes=(), total=None) -> SelectResult:
    rows = tuple(tuple(r) for r in rows)
    return SelectResult(variables, rows, len(rows) if total is None else total, tuple(prefixes))


def construct_result(triples, prefixes=(), total=None) -> ConstructResult:
    triples = tuple(triples)
    return ConstructResult(triples, len(triples) if total is None else total, tuple(prefixes))


# ---------------------------------------------------------------------------------------------
# Vector collection

VECTORS: list[dict] = []


def _add(vector: dict) -> None:
    if any(v["name"] == vector["name"] for v in VECTORS):
        raise ValueError(f"duplicate vector name {vector['name']}")
    msg = vector.get("message")
    # The bytes must not depend on the automatic prefix chooser: prefix lists are explicit.
    if isinstance(msg, Request) and msg.options.prefixes is None:
        raise ValueError(f"{vector['name']}: the request needs explicit prefixes")
    if isinstance(msg, Response) and isinstance(msg.result, (SelectResult, ConstructResult)) \
            and msg.result.prefixes is None:
        raise ValueError(f"{vector['name']}: the result needs explicit prefixes")
    VECTORS.append(vector)


def kp(name: str, description: str, msg: Request | Ack, transport=UDP) -> None:
    """A valid KP→SIB message (REQ or ACK)."""
    _add({"name": name, "description": description, "transport": transport.value,
          "direction": "kp_to_sib", "hex": encode(msg, transport).hex(), "message": msg})


def sib(name: str, description: str, msg: Response, answers: Tx, transport=UDP,
        max_size: int | None = None) -> None:
    """A valid SIB→KP message (RES or IND) answering a request of type `answers`."""
    vector = {"name": name, "description": description, "transport": transport.value,
              "direction": "sib_to_kp", "answers": answers.name, "message": msg}
    raw = encode(msg, transport, max_size=max_size)
    vector["hex"] = raw.hex()
    if max_size is not None:
        vector["max_size"] = max_size
        vector["decoded"] = decode_sib_message(raw, transport, answers)
    _add(vector)


def bad(name: str, description: str, hexstr: str, status: Status, direction="kp_to_sib",
        transport=UDP, answers: Tx | None = None) -> None:
    """An invalid message: hand-written hex (spaces and `|` are ignored) and its status."""
    vector = {"name": name, "description": description, "transport": transport.value,
              "direction": direction, "hex": "".join(hexstr.replace("|", " ").split()).lower(),
              "error": {"status": int(status), "name": status.name}}
    if answers is not None:
        vector["answers"] = answers.name
    bytes.fromhex(vector["hex"])
    _add(vector)


# ---------------------------------------------------------------------------------------------
# Requests: every transaction type, CON over UDP and NON over TCP

SENSOR_DATA = (
    T(sn("t1"), RDF_TYPE, ex("TemperatureSensor")),
    T(sn("t1"), ex("location"), ex("kitchen")),
    T(sn("t1"), ex("value"), f("21.5")),
)
PATTERN = (
    T(V(0), RDF_TYPE, ex("TemperatureSensor")),
    T(V(0), ex("value"), V(1)),
)


def tx_request(tx: Tx, tid: int, con: bool) -> tuple[Request, str]:
    """A typical request of each transaction type, and what it says."""
    base = tx.base
    if tx is Tx.DELETE_DATA:
        return R(tx, tid, con, EXP, delete=SENSOR_DATA[2:]), "delete one ground triple"
    if tx is Tx.INSERT_DATA:
        return R(tx, tid, con, EXP, insert=SENSOR_DATA), "insert three ground triples"
    if tx is Tx.UPDATE_DATA:
        return (R(tx, tid, con, EXP, delete=(T(sn("t1"), ex("value"), f("21.5")),),
                  insert=(T(sn("t1"), ex("value"), f("22.0")),)),
                "replace a value: Delete graph, then Insert graph")
    if base is Tx.DELETE:
        return (R(tx, tid, con, EXP, delete=(T(V(0), ex("value"), V(1)),), where=PATTERN),
                "delete the value of every temperature sensor")
    if base is Tx.INSERT:
        return (R(tx, tid, con, EXP, insert=(T(V(0), ex("seenBy"), ex("gateway")),),
                  where=PATTERN[:1]),
                "tag every temperature sensor")
    if base is Tx.UPDATE:
        return (R(tx, tid, con, EXP, delete=(T(V(0), ex("state"), V(1)),),
                  insert=(T(V(0), ex("state"), ex("off")),),
                  where=(T(V(0), ex("state"), V(1)),)),
                "DELETE {?v0 state ?v1} INSERT {?v0 state off} WHERE {?v0 state ?v1}")
    if base is Tx.SELECT:
        return (R(tx, tid, con, EXP, projection=2, where=PATTERN,
                  optional=((T(V(0), ex("location"), V(2)),),)),
                "SELECT ?v0 ?v1 WHERE {pattern} OPTIONAL {?v0 location ?v2}; VC = 2, OGC = 1")
    if base is Tx.ASK:
        return (R(tx, tid, con, EXP, where=(T(V(0), RDF_TYPE, ex("Alarm")),)),
                "ASK {?v0 a Alarm}; OGC = 0")
    if base is Tx.CONSTRUCT:
        return (R(tx, tid, con, EXP, template=(T(V(0), ex("reading"), V(1)),), where=PATTERN),
                "CONSTRUCT {?v0 reading ?v1} WHERE {pattern}; OGC = 0")
    if tx is Tx.TERMINATE:
        return R(tx, tid, con), "end the persistent transaction whose ID is in the header"
    if tx is Tx.RESET:
        return R(tx, tid, con), "end every persistent transaction of this KP"
    if tx is Tx.CREATE:
        return (R(tx, tid, con, (G,), graphs=(gr("kitchen"), gr("hall"))),
                "create two named graphs (GC = 2), names shortened by a prefix")
    if tx is Tx.DROP:
        return R(tx, tid, con, (), graphs=(gr("old"),)), "drop one graph, full IRI (no prefix)"
    return (R(tx, tid, con, (G,), source=gr("a"), target=gr("b")),
            f"{tx.name} graph a to graph b")


for _tx in Tx:
    _tid = 0x0100 + _tx
    for _con, _transport in ((True, UDP), (False, TCP)):
        _msg, _what = tx_request(_tx, _tid if _con else _tid + 0x1000, _con)
        _kind = "CON" if _con else "NON"
        _persistent = " (persistent)" if _tx.persistent else ""
        kp(f"req_{_tx.name.lower()}_{_kind.lower()}_{_transport.value}",
           f"{_tx.name} ({_tx.value:#04x}) {_kind} REQ over {_transport.value.upper()}"
           f"{_persistent}: {_what}.", _msg, _transport)

# ---------------------------------------------------------------------------------------------
# Options

kp("req_opt_prefix_longest_match",
   "PREFIX with three entries: IRIs under .../sensors/ use the longest matching prefix (2), "
   "other example.org IRIs tie between entries 1 and 3 and use the lowest index (1), and an "
   "IRI matching no prefix is written in full (prefix index 0).",
   R(Tx.INSERT_DATA, 0x2001, True, (EX, SN, EX),
     insert=(T(sn("t1"), ex("near"), sn("t2")), T(sn("t2"), ex("owner"), IRI("urn:uuid:42")))))
kp("req_opt_prefix_unused",
   "A PREFIX entry no IRI uses is still sent: the message's prefix list is what it says.",
   R(Tx.ASK, 0x2002, True, ("http://unused.example/",), where=(T(V(0), RDF_TYPE, V(1)),)))
kp("req_opt_delete_graph",
   "DELETE GRAPH (0x01) with two graph names, one of them the default graph (empty IRI).",
   R(Tx.DELETE_DATA, 0x2003, True, (G,), delete=SENSOR_DATA[:1],
     options={"delete_graphs": (gr("kitchen"), IRI(""))}))
kp("req_opt_insert_graph",
   "INSERT GRAPH (0x02) on INSERT DATA: insert into one named graph.",
   R(Tx.INSERT_DATA, 0x2004, False, (EX, G), insert=SENSOR_DATA[:2],
     options={"insert_graphs": (gr("kitchen"),)}))
kp("req_opt_query_graph",
   "QUERY GRAPH (0x03) on SELECT: match in the merge of two graphs.",
   R(Tx.SELECT, 0x2005, True, (EX, G), projection=1, where=PATTERN[:1],
     options={"query_graphs": (gr("kitchen"), gr("hall"))}))
kp("req_opt_optional_pattern",
   "OPTIONAL PATTERN (0x04) on INSERT: two optional groups (count 2) of a pattern update (R8).",
   R(Tx.INSERT, 0x2006, True, EXP, insert=(T(V(0), ex("label"), V(1)),), where=PATTERN[:1],
     options={"optional": ((T(V(0), ex("name"), V(1)),),
                           (T(V(0), ex("room"), V(2)), T(V(2), ex("floor"), V(3))))}))
kp("req_opt_bind",
   "BIND (0x07) with two binds: ?v2 := ?v1 * 1.8 + 32 and ?v3 := -?v1.",
   R(Tx.SELECT, 0x2007, True, EXP, projection=4, where=PATTERN,
     options={"binds": (Bind(2, (V(1), f("1.8"), Op.MUL, i(32), Op.ADD)),
                        Bind(3, (V(1), Op.NEG)))}))
kp("req_opt_max_response_size",
   "MAX RESPONSE SIZE (0x08): u32 512.",
   R(Tx.SELECT, 0x2008, True, EXP, projection=2, where=PATTERN,
     options={"max_response_size": 512}))
kp("req_opt_max_response_size_u32_max",
   "MAX RESPONSE SIZE (0x08) with the largest u32, 4294967295.",
   R(Tx.CONSTRUCT_PERSISTENT, 0x2009, True, EXP, template=PATTERN, where=PATTERN,
     options={"max_response_size": 0xFFFFFFFF}))
kp("req_opt_credentials",
   "CREDENTIALS (0x09): 16-byte KP ID, password length 8 (7 characters), UTF-8 password "
   "with a non-ASCII character.",
   R(Tx.RESET, 0x200A, True, options={"credentials": Credentials(KP_ID, "s3cr\u00e9t!")}))
kp("req_opt_credentials_empty_password",
   "CREDENTIALS (0x09) with an empty password (length 0) on TERMINATE over TCP.",
   R(Tx.TERMINATE, 0x200B, False, options={"credentials": Credentials(bytes(16), "")}), TCP)
ECHO_VALUE = bytes.fromhex("6553f100a1b2c3d4e5f6")  # 4-byte time | 6-byte MAC, as ksp-sib makes
_ECHO_SELECT = R(Tx.SELECT, 0x2020, True, EXP, projection=2, where=PATTERN, optional=(),
                 options={"echo": ECHO_VALUE})
kp("req_opt_echo",
   "ECHO (0x0a): length 10 and the echo value of an ECHO REQUIRED RES (7.7), on the SELECT "
   "retried under a new Transaction ID.", _ECHO_SELECT)
kp("req_opt_echo_10_after_credentials",
   "ECHO (0x0a) of the longest length, 10, on INSERT DATA with CREDENTIALS before it "
   "(ascending type order).",
   R(Tx.INSERT_DATA, 0x2021, True, EXP, insert=SENSOR_DATA[:1],
     options={"credentials": Credentials(KP_ID, "pw"), "echo": bytes(range(10))}))
kp("req_opt_echo_non_retry",
   "ECHO (0x0a) on a NON SELECT: the retry after ECHO REQUIRED keeps the first request's "
   "request type (7.7), so a NON request is retried NON.",
   _ECHO_SELECT._replace(tid=0x2025, confirmable=False))
kp("req_opt_echo_tcp",
   "ECHO (0x0a) on RESET over TCP: well formed, accepted and without effect (a SIB validates "
   "no address over TCP, 7.7).",
   R(Tx.RESET, 0x2026, True, options={"echo": ECHO_VALUE}), TCP)
kp("req_opt_epoch",
   "EPOCH (0x0b): u32 1 on INSERT DATA over UDP, the KP's 65 537th request or later: its number "
   "is 1 × 65536 + TID (15).",
   R(Tx.INSERT_DATA, 0x2022, True, EXP, insert=SENSOR_DATA[:1], options={"epoch": 1}))
kp("req_opt_epoch_after_credentials",
   "EPOCH (0x0b) after CREDENTIALS (ascending type order) on SELECT: a KP ID's first request, "
   "at a random epoch (15), here 2147483647.",
   R(Tx.SELECT, 0x2023, True, EXP, projection=2, where=PATTERN, optional=(),
     options={"credentials": Credentials(KP_ID, "pw"), "epoch": 0x7FFFFFFF}))
kp("req_opt_epoch_u32_max_tcp",
   "EPOCH (0x0b) with the largest u32, 4294967295, on RESET over TCP, which accepts and ignores "
   "it (15).",
   R(Tx.RESET, 0x2024, False, options={"epoch": 0xFFFFFFFF}), TCP)
kp("req_opt_all_select",
   "SELECT with every option that applies to it, in ascending type order: PREFIX, QUERY GRAPH, "
   "FILTER, SOLUTION MODIFIER, BIND, MAX RESPONSE SIZE, CREDENTIALS (OC = 7).",
   R(Tx.SELECT_PERSISTENT, 0x200C, True, (EX, G), projection=3, where=PATTERN,
     options={"query_graphs": (gr("kitchen"),),
              "filters": ((V(1), f("25.5"), Op.GT),),
              "modifier": mod(Order.DESC, 1, 10, None, True),
              "binds": (Bind(2, (V(1), i(20), Op.SUB)),),
              "max_response_size": 1024,
              "credentials": Credentials(KP_ID, "pw")}), TCP)
kp("req_opt_all_update",
   "UPDATE with every option that applies to it: PREFIX, DELETE GRAPH, INSERT GRAPH, QUERY "
   "GRAPH, OPTIONAL PATTERN, FILTER, BIND, MAX RESPONSE SIZE, CREDENTIALS (OC = 9).",
   R(Tx.UPDATE, 0x200D, True, (EX, G),
     delete=(T(V(0), ex("state"), V(1)),), insert=(T(V(0), ex("state"), V(2)),),
     where=(T(V(0), ex("state"), V(1)),),
     options={"delete_graphs": (gr("a"),), "insert_graphs": (gr("b"),),
              "query_graphs": (gr("a"), IRI("")),
              "optional": ((T(V(0), ex("owner"), V(3)),),),
              "filters": ((V(1), ex("on"), Op.EQ), (V(3), Op.BOUND, Op.NOT)),
              "binds": (Bind(2, (ex("off"),)),),
              "max_response_size": 64,
              "credentials": Credentials(KP_ID, "pw")}))

# SOLUTION MODIFIER: every flag and every order.
for _k, (_name, _m, _what) in enumerate((
    ("none", mod(), "flags 0x00: no order, no limit, no offset, not distinct"),
    ("asc_limit_offset_distinct", mod(Order.ASC, 1, 10, 20, True),
     "flags 0x1d: ORDER BY ASC(?v1) (variable byte), LIMIT 10, OFFSET 20, DISTINCT"),
    ("desc", mod(Order.DESC, 0), "flags 0x02: ORDER BY DESC(?v0)"),
    ("limit", mod(limit=65535), "flags 0x04: LIMIT 65535 (u16 max)"),
    ("offset", mod(offset=300), "flags 0x08: OFFSET 300"),
    ("distinct", mod(distinct=True), "flags 0x10: DISTINCT"),
    ("asc_limit", mod(Order.ASC, 0, 1), "flags 0x05: ORDER BY ASC(?v0) LIMIT 1"),
)):
    kp(f"req_opt_modifier_{_name}",
       f"SOLUTION MODIFIER (0x06) on SELECT, {_what}.",
       R(Tx.SELECT, 0x2100 + _k, True, EXP, projection=2, where=PATTERN,
         options={"modifier": _m}))
kp("req_opt_modifier_construct",
   "SOLUTION MODIFIER (0x06) on CONSTRUCT: ORDER BY DESC(?v1) OFFSET 5, flags 0x0a.",
   R(Tx.CONSTRUCT, 0x2120, True, EXP, template=PATTERN, where=PATTERN,
     options={"modifier": mod(Order.DESC, 1, None, 5)}))

# ---------------------------------------------------------------------------------------------
# FILTER: every operator 0x07-0x17 and every operand token 0x00-0x06, 0x18

FILTER_WHERE = (
    T(V(0), RDF_TYPE, ex("TemperatureSensor")),
    T(V(0), ex("value"), V(1)),
    T(V(0), ex("time"), V(2)),
)
FILTERS = [
    ("eq", (V(1), lang("kitchen", "en"), Op.EQ),
     "?v1 = \"kitchen\"@en: operand 0x18 with literal type 0x05 (language-tagged)"),
    ("ne", (V(0), ex("sensor1"), Op.NE),
     "?v0 != ex:sensor1: URI operand 0x06 with prefix index 1"),
    ("lt", (V(1), f("21.5"), Op.LT), "?v1 < 21.5: float operand 0x02"),
    ("gt", (V(1), d("1.0E-5"), Op.GT),
     "?v1 > \"1.0E-5\"^^xsd:double: not Python's repr (1e-05), so operand 0x18 with literal "
     "type 0x06"),
    ("le", (V(1), typed("21.50", XSD_DECIMAL), Op.LE),
     "?v1 <= 21.50 (xsd:decimal): operand 0x18 with literal type 0x06, datatype IRI in full"),
    ("ge", (V(2), dt("2026-11-21T12:00:00"), Op.GE), "?v2 >= dateTime: operand 0x03"),
    ("add", (V(1), i(1), Op.ADD, i(5), Op.GT), "?v1 + 1 > 5: integer operands 0x01"),
    ("sub", (V(1), i(-3), Op.SUB, i(0), Op.GT), "?v1 - -3 > 0"),
    ("mul", (V(1), d("1.5"), Op.MUL, i(30), Op.LT),
     "?v1 * 1.5e0 < 30: operand 0x18 with literal type 0x07 (xsd:double)"),
    ("div", (V(1), i(2), Op.DIV, i(10), Op.GE), "?v1 / 2 >= 10"),
    ("or", (V(1), i(0), Op.LT, V(1), i(40), Op.GT, Op.OR), "?v1 < 0 || ?v1 > 40"),
    ("and", (V(1), i(0), Op.GT, b(True), Op.AND), "?v1 > 0 && true: boolean operand 0x04"),
    ("regex", (V(1), s("^temp"), Op.REGEX), "regex(?v1, \"^temp\"): string operand 0x00"),
    ("not", (V(1), i(30), Op.GT, Op.NOT), "!(?v1 > 30)"),
    ("neg", (V(1), Op.NEG, i(0), Op.GT), "-?v1 > 0 (unary minus)"),
    ("regex_flags", (V(1), s("TEMP"), s("i"), Op.REGEX_FLAGS),
     "regex(?v1, \"TEMP\", \"i\") (ternary)"),
    ("bound", (V(3), Op.BOUND), "bound(?v3), ?v3 from an OPTIONAL group"),
]
for _k, (_name, _expr, _what) in enumerate(FILTERS):
    _ops = [t for t in _expr if isinstance(t, Op)]
    kp(f"req_filter_{_name}",
       f"FILTER (0x05) on SELECT, operator {_ops[-1].name} ({int(_ops[-1]):#04x}): {_what}.",
       R(Tx.SELECT, 0x2200 + _k, True, EXP, projection=2, where=FILTER_WHERE,
         optional=((T(V(0), ex("owner"), V(3)),),) if _name == "bound" else (),
         options={"filters": (_expr,)}))

# SPARQL 1.1 §17 functions (0x19 and up): one vector per token code. Fixed-arity functions are
# one byte; the variadic ones (CONCAT, COALESCE, IN, NOT IN) carry their count n after the code.
FUNCTIONS = [
    (Op.STR, (V(0), Op.STR, s(SN), Op.STRSTARTS), "STRSTARTS(STR(?v0), \"…/sensors/\")"),
    (Op.LANG, (V(1), Op.LANG, s("en"), Op.EQ), "LANG(?v1) = \"en\""),
    (Op.DATATYPE, (V(1), Op.DATATYPE, IRI(XSD + "float"), Op.EQ),
     "DATATYPE(?v1) = xsd:float"),
    (Op.IRI, (s(SN + "sensor1"), Op.IRI, V(0), Op.EQ), "IRI(\"…/sensor1\") = ?v0"),
    (Op.IS_IRI, (V(0), Op.IS_IRI), "isIRI(?v0)"),
    (Op.IS_BLANK, (V(0), Op.IS_BLANK, Op.NOT), "!isBLANK(?v0)"),
    (Op.IS_LITERAL, (V(1), Op.IS_LITERAL), "isLITERAL(?v1)"),
    (Op.IS_NUMERIC, (V(1), Op.IS_NUMERIC), "isNUMERIC(?v1)"),
    (Op.STRLEN, (V(1), Op.STR, Op.STRLEN, i(8), Op.LT), "STRLEN(STR(?v1)) < 8"),
    (Op.UCASE, (V(1), Op.STR, Op.UCASE, s("INF"), Op.NE), "UCASE(STR(?v1)) != \"INF\""),
    (Op.LCASE, (V(1), Op.STR, Op.LCASE, s("nan"), Op.NE), "LCASE(STR(?v1)) != \"nan\""),
    (Op.ABS, (V(1), Op.ABS, i(40), Op.LT), "ABS(?v1) < 40"),
    (Op.ROUND, (V(1), Op.ROUND, i(21), Op.EQ), "ROUND(?v1) = 21"),
    (Op.CEIL, (V(1), Op.CEIL, i(22), Op.LE), "CEIL(?v1) <= 22"),
    (Op.FLOOR, (V(1), Op.FLOOR, i(21), Op.GE), "FLOOR(?v1) >= 21"),
    (Op.YEAR, (V(2), Op.YEAR, i(2026), Op.EQ), "YEAR(?v2) = 2026"),
    (Op.MONTH, (V(2), Op.MONTH, i(11), Op.EQ), "MONTH(?v2) = 11"),
    (Op.DAY, (V(2), Op.DAY, i(21), Op.EQ), "DAY(?v2) = 21"),
    (Op.HOURS, (V(2), Op.HOURS, i(12), Op.LT), "HOURS(?v2) < 12"),
    (Op.MINUTES, (V(2), Op.MINUTES, i(30), Op.LT), "MINUTES(?v2) < 30"),
    (Op.SECONDS, (V(2), Op.SECONDS, i(0), Op.EQ), "SECONDS(?v2) = 0"),
    (Op.TIMEZONE, (V(2), Op.TIMEZONE, typed("PT0S", XSD + "dayTimeDuration"), Op.EQ),
     "TIMEZONE(?v2) = \"PT0S\"^^xsd:dayTimeDuration"),
    (Op.TZ, (V(2), Op.TZ, s(""), Op.EQ), "TZ(?v2) = \"\" (no time zone)"),
    (Op.ENCODE_FOR_URI, (s("a b"), Op.ENCODE_FOR_URI, s("a%20b"), Op.EQ),
     "ENCODE_FOR_URI(\"a b\") = \"a%20b\""),
    (Op.MD5, (V(1), Op.STR, Op.MD5, s("0"), Op.STRSTARTS), "STRSTARTS(MD5(STR(?v1)), \"0\")"),
    (Op.SHA1, (V(1), Op.STR, Op.SHA1, s("0"), Op.STRSTARTS),
     "STRSTARTS(SHA1(STR(?v1)), \"0\")"),
    (Op.SHA256, (V(1), Op.STR, Op.SHA256, s("0"), Op.STRSTARTS),
     "STRSTARTS(SHA256(STR(?v1)), \"0\")"),
    (Op.SHA384, (V(1), Op.STR, Op.SHA384, s("0"), Op.STRSTARTS),
     "STRSTARTS(SHA384(STR(?v1)), \"0\")"),
    (Op.SHA512, (V(1), Op.STR, Op.SHA512, s("0"), Op.STRSTARTS),
     "STRSTARTS(SHA512(STR(?v1)), \"0\")"),
    (Op.BNODE_OF, (s("a"), Op.BNODE_OF, Op.IS_BLANK), "isBLANK(BNODE(\"a\")) (one operand)"),
    (Op.LANGMATCHES, (V(1), Op.LANG, s("en"), Op.LANGMATCHES),
     "LANGMATCHES(LANG(?v1), \"en\")"),
    (Op.STRSTARTS, (V(0), Op.STR, s("http"), Op.STRSTARTS), "STRSTARTS(STR(?v0), \"http\")"),
    (Op.STRENDS, (V(0), Op.STR, s("1"), Op.STRENDS), "STRENDS(STR(?v0), \"1\")"),
    (Op.CONTAINS, (V(0), Op.STR, s("sensor"), Op.CONTAINS), "CONTAINS(STR(?v0), \"sensor\")"),
    (Op.STRBEFORE, (V(0), Op.STR, s("/sensors/"), Op.STRBEFORE, s(EX[:-1]), Op.EQ),
     "STRBEFORE(STR(?v0), \"/sensors/\") = \"http://example.org\""),
    (Op.STRAFTER, (V(0), Op.STR, s("/sensors/"), Op.STRAFTER, s("sensor1"), Op.EQ),
     "STRAFTER(STR(?v0), \"/sensors/\") = \"sensor1\""),
    (Op.STRLANG, (s("kitchen"), s("en"), Op.STRLANG, V(1), Op.EQ),
     "STRLANG(\"kitchen\", \"en\") = ?v1"),
    (Op.STRDT, (s("21.5"), IRI(XSD + "float"), Op.STRDT, V(1), Op.EQ),
     "STRDT(\"21.5\", xsd:float) = ?v1"),
    (Op.SAME_TERM, (V(1), f("21.5"), Op.SAME_TERM), "sameTerm(?v1, 21.5)"),
    (Op.SUBSTR, (V(0), Op.STR, i(20), Op.SUBSTR, s("sensors/sensor1"), Op.EQ),
     "SUBSTR(STR(?v0), 20) = \"sensors/sensor1\" (two operands)"),
    (Op.SUBSTR_LEN, (V(0), Op.STR, i(20), i(7), Op.SUBSTR_LEN, s("sensors"), Op.EQ),
     "SUBSTR(STR(?v0), 20, 7) = \"sensors\" (three operands)"),
    (Op.REPLACE, (V(0), Op.STR, s("sensor"), s("s"), Op.REPLACE, s("s1"), Op.STRENDS),
     "STRENDS(REPLACE(STR(?v0), \"sensor\", \"s\"), \"s1\") (three operands)"),
    (Op.IF, (V(1), Op.IS_NUMERIC, V(1), i(40), Op.LT, b(False), Op.IF),
     "IF(isNUMERIC(?v1), ?v1 < 40, false)"),
    (Op.REPLACE_FLAGS, (V(0), Op.STR, s("SENSOR"), s("s"), s("i"), Op.REPLACE_FLAGS, s("s1"),
                        Op.STRENDS),
     "STRENDS(REPLACE(STR(?v0), \"SENSOR\", \"s\", \"i\"), \"s1\") (four operands)"),
    (Op.NOW, (V(2), Op.NOW, Op.LT), "?v2 < NOW() (no operand)"),
    (Op.RAND, (Op.RAND, d("0.5"), Op.LT), "RAND() < 0.5e0"),
    (Op.UUID, (Op.UUID, Op.IS_IRI), "isIRI(UUID())"),
    (Op.STRUUID, (Op.STRUUID, Op.STRLEN, i(36), Op.EQ), "STRLEN(STRUUID()) = 36"),
    (Op.BNODE, (Op.BNODE, Op.IS_BLANK), "isBLANK(BNODE()) (no operand)"),
    (Op.CONCAT, (s("t="), V(1), Op.STR, s("C"), Call(Op.CONCAT, 3), s("t=21.5C"), Op.EQ),
     "CONCAT(\"t=\", STR(?v1), \"C\") = \"t=21.5C\": count 3 follows the code"),
    (Op.COALESCE, (V(3), V(0), Call(Op.COALESCE, 2), Op.IS_IRI),
     "isIRI(COALESCE(?v3, ?v0)): count 2"),
    (Op.IN, (V(1), i(20), i(21), f("21.5"), Call(Op.IN, 3)),
     "?v1 IN (20, 21, 21.5): count 3, the tested value pushed first"),
    (Op.NOT_IN, (V(1), Call(Op.NOT_IN, 0)), "?v1 NOT IN (): count 0 (always true)"),
]
for _k, (_op, _expr, _what) in enumerate(FUNCTIONS):
    kp(f"req_filter_{_op.name.lower()}",
       f"FILTER (0x05) on SELECT, token {_op.name} ({int(_op):#04x}): {_what}.",
       R(Tx.SELECT, 0x2400 + _k, True, (EX, SN), projection=2, where=FILTER_WHERE,
         optional=((T(V(0), ex("owner"), V(3)),),) if _op is Op.COALESCE else (),
         options={"filters": (_expr,)}))
kp("req_filter_two_expressions",
   "FILTER with FC = 2 (both must hold) on a DELETE pattern update, and a URI operand with no "
   "prefix (index 0).",
   R(Tx.DELETE, 0x2300, True, EXP, delete=(T(V(0), ex("value"), V(1)),), where=FILTER_WHERE,
     options={"filters": ((V(1), i(-40), Op.LT), (V(0), IRI("urn:sensor:9"), Op.NE))}))
kp("req_filter_operand_literals",
   "FILTER operands: xsd:string with non-ASCII text (0x00), float INF (0x02), boolean false "
   "(0x04), and 0x18 literals of type 0x06 (custom datatype via prefix) and 0x07 (double).",
   R(Tx.ASK, 0x2301, True, EXP, where=FILTER_WHERE,
     options={"filters": ((V(1), s("gr\u00fcn"), Op.EQ, V(1), f("INF"), Op.LT, Op.OR,
                           b(False), Op.OR),
                          (V(1), typed("7", ex("celsius")), Op.NE, V(1), d("-2.5"), Op.NE,
                           Op.AND))}))

# ---------------------------------------------------------------------------------------------
# Literals: every literal type, the compact-form rule, edge values

LITERALS = [
    ("string", (s("kitchen"), s("")), "xsd:string (0x00): \"kitchen\" and the empty string"),
    ("string_utf8", (s("gr\u00fc\u00dfe \u20ac \U0001F600"),),
     "xsd:string (0x00) with 2-, 3- and 4-byte UTF-8 characters (length counts bytes)"),
    ("integer", (i(0), i(-1), i(2147483647), i(-2147483648)),
     "xsd:integer (0x01): 0, -1, i32 max, i32 min"),
    ("float", (f("21.5"), f("0.1"), f("1e-05"), f("3.4028235e+38")),
     "xsd:float (0x02): lexical forms as the shortest repr that reads back as the binary32"),
    ("float_special", (f("INF"), f("-INF"), f("NaN")), "xsd:float (0x02): INF, -INF, NaN"),
    ("float_negative_zero", (f("-0.0"),),
     "xsd:float (0x02) -0.0: sign bit set (payload 00 00 00 80)"),
    ("datetime", (dt("2026-11-21T12:00:00"), dt("1999-12-31T23:59:59")),
     "xsd:dateTime (0x03): 19 ASCII bytes"),
    ("boolean", (b(True), b(False)), "xsd:boolean (0x04): true, false"),
    ("lang_string", (lang("Küche", "de"), lang("kitchen", "en-GB")),
     "language-tagged string (0x05): tag length + ASCII tag, then string length + UTF-8"),
    ("typed", (typed("21.50", XSD_DECIMAL), typed("2026-11-21", XSD_DATE)),
     "other datatype (0x06): xsd:decimal and xsd:date, datatype URI field in full"),
    ("typed_prefixed", (typed("21.5", ex("celsius")),),
     "other datatype (0x06): custom datatype IRI shortened by prefix 1"),
    ("double", (d("21.5"), d("1e-05"), d("INF"), d("-0.0")),
     "xsd:double (0x07): f64, lexical as Python's repr"),
    ("noncanonical", (i("007"), i("9999999999"), f("21.50"), dt("2026-11-21T12:00:00Z"),
                      typed("1", XSD_BOOLEAN), d("1.0E0")),
     "compact-form rule: \"007\" and 9999999999 (integer), \"21.50\" (float), a dateTime with a "
     "time zone, boolean \"1\" and double \"1.0E0\" have no lossless compact form: all 0x06"),
    ("datetime_not_calendar", (dt("2026-02-30T00:00:00"), dt("2026-04-31T23:59:59")),
     "xsd:dateTime (0x03): each field is checked against its own range, not against the "
     "calendar (4.3): February 30 and April 31 decode, carried unchanged"),
]
for _n, (_name, _lits, _what) in enumerate(LITERALS):
    _subject = sn(f"l{_n}")
    kp(f"req_literal_{_name}",
       f"INSERT DATA, literal objects: {_what}. The subject and predicate repeat (Empty).",
       R(Tx.INSERT_DATA, 0x2400 + _n, True, EXP,
         insert=tuple(T(_subject, ex("v"), lit) for lit in _lits)))

# ---------------------------------------------------------------------------------------------
# Reserved words, member types, Empty, blank nodes, variables

kp("req_reserved_words_all",
   "Every reserved word 0x00-0x0d, each as a member of some triple (predicate, object and "
   "subject positions). A reserved-word IRI is a Reserved word even though a PREFIX entry "
   "matches it.",
   R(Tx.INSERT_DATA, 0x2500, True, (RDF, EX),
     insert=tuple(T(ex(f"c{k}"), IRI(RESERVED_WORDS[k]), IRI(RESERVED_WORDS[(k + 1) % 14]))
                  for k in range(14)) + (T(IRI(RESERVED_WORDS[3]), RDF_TYPE, ex("x")),)))
kp("req_reserved_iri_as_uri_field",
   "Reserved-word IRIs where a URI field is required (graph name, URI operand) are URI fields, "
   "not reserved words: QUERY GRAPH rdfs:Class and FILTER ?v1 = rdf:type (prefix 1).",
   R(Tx.SELECT, 0x2501, True, (RDF,), projection=2, where=(T(V(0), V(1), V(2)),),
     options={"query_graphs": (IRI(RDFS + "Class"),), "filters": ((V(1), RDF_TYPE, Op.EQ),)}))
kp("req_member_empty",
   "Empty (0x00) members: triple 2 repeats the subject, triple 3 subject and predicate, "
   "triple 4 the predicate, triple 5 the object, triple 6 is the whole of triple 5 again "
   "(type byte 0x00).",
   R(Tx.INSERT_DATA, 0x2502, True, EXP,
     insert=(T(ex("a"), ex("p"), ex("x")), T(ex("a"), ex("q"), ex("y")),
             T(ex("a"), ex("q"), ex("z")), T(ex("b"), ex("q"), i(1)),
             T(ex("c"), ex("r"), i(1)), T(ex("c"), ex("r"), i(1)))))
kp("req_member_empty_not_across_graphs",
   "UPDATE DATA: the first triple of the Insert graph equals the last triple of the Delete "
   "graph but is written in full: Empty never refers across Graph fields.",
   R(Tx.UPDATE_DATA, 0x2503, True, EXP,
     delete=(T(ex("a"), ex("p"), i(1)),), insert=(T(ex("a"), ex("p"), i(1)), T(ex("a"),
                                                                              ex("p"), i(2)))))
kp("req_member_bnode",
   "Blank nodes (member type 0x05) as subject and object in INSERT DATA; labels without _:.",
   R(Tx.INSERT_DATA, 0x2504, True, EXP,
     insert=(T(BNode("b0"), RDF_TYPE, ex("Reading")), T(BNode("b0"), ex("of"), BNode("b1")),
             T(BNode("b1"), ex("label"), s("t")))))
kp("req_member_variables",
   "Variables (member type 0x03) as subject, predicate and object, and a blank node in a "
   "pattern (a non-projected variable).",
   R(Tx.SELECT, 0x2505, False, (), projection=3,
     where=(T(V(0), V(1), V(2)), T(V(2), V(1), BNode("x")))), TCP)
kp("req_member_uri_no_prefix",
   "URI members with prefix index 0 in a request with an empty prefix list (OC = 0).",
   R(Tx.DELETE_DATA, 0x2506, False, (), delete=(T(IRI("urn:a"), IRI("urn:b"), IRI("urn:c")),)))
kp("req_select_vc0",
   "SELECT with VC = 0 (no projection: a solution count) and two optional graphs.",
   R(Tx.SELECT, 0x2507, True, EXP, projection=0, where=PATTERN[:1],
     optional=((T(V(0), ex("a"), V(1)),), (T(V(0), ex("b"), V(2)),))))
kp("req_insert_data_empty_graph",
   "INSERT DATA with TC = 0 (an empty Graph field).",
   R(Tx.INSERT_DATA, 0x2508, True, (), insert=()))

# ---------------------------------------------------------------------------------------------
# Length field widths

for _k, _n in enumerate((127, 128, 32767)):
    _iri = "urn:x:" + "u" * (_n - 6)
    kp(f"req_uri_length_{_n}",
       f"A full IRI of {_n} bytes: URI length in "
       f"{'one byte' if _n < 128 else 'two bytes (first byte has bit 7 set)'}"
       f"{', the maximum' if _n == 32767 else ''}.",
       R(Tx.DROP, 0x2600 + _k, True, (), graphs=(IRI(_iri),)))
kp("req_uri_length_128_after_prefix",
   "A prefixed URI whose local part is 128 bytes (two-byte URI length) and a prefix entry of "
   "130 bytes (two-byte length inside PREFIX).",
   R(Tx.INSERT_DATA, 0x2610, True, ("http://example.org/" + "n" * 110 + "/",),
     insert=(T(IRI("http://example.org/" + "n" * 110 + "/" + "L" * 128), RDF_TYPE, ex("C")),)))
kp("req_uri_whole_prefix_datatype",
   "A 0x06 literal whose datatype IRI is a whole prefix entry (prefix index 1, local part "
   "empty): xsd:decimal, never the empty datatype, which a decoder must not conclude before it "
   "has the prefix list (3.2, pass 4).",
   R(Tx.INSERT_DATA, 0x2611, True, (XSD_DECIMAL,),
     insert=(T(ex("s"), ex("p"), typed("1.5", XSD_DECIMAL)),)))
kp("req_uri_whole_prefix_create",
   "CREATE of a graph whose name is a whole prefix entry (prefix index 1, local part empty): "
   "urn:g, not the default graph CREATE refuses.",
   R(Tx.CREATE, 0x2612, True, ("urn:g",), graphs=(IRI("urn:g"),)))

_PATTERN16 = "0123456789abcdef"
for _k, _n in enumerate((63, 64, 16383, 16384, 4194304)):
    _width = 1 if _n < 64 else 2 if _n < 16384 else 3 if _n < 4194304 else 4
    _transport = TCP if _n >= 16383 else UDP  # a UDP datagram carries at most 65507 bytes
    kp(f"req_string_length_{_n}",
       f"An xsd:string literal of {_n} bytes: string length field of {_width} byte"
       f"{'s' if _width > 1 else ''}; over {_transport.value.upper()}.",
       R(Tx.INSERT_DATA, 0x2700 + _k, True, EXP,
         insert=(T(ex("doc"), ex("text"), s((_PATTERN16 * (_n // 16 + 1))[:_n])),)), _transport)

# ---------------------------------------------------------------------------------------------
# Graph management: the default graph

kp("req_copy_default_to_named",
   "COPY DEFAULT TO <a>: source graph name is the empty IRI (00 00).",
   R(Tx.COPY, 0x2800, True, (G,), source=IRI(""), target=gr("a")))
kp("req_move_named_to_default",
   "MOVE <a> TO DEFAULT: destination is the empty IRI.",
   R(Tx.MOVE, 0x2801, True, (G,), source=gr("a"), target=IRI("")))
kp("req_add_default_to_named",
   "ADD DEFAULT TO <b> over TCP, non-confirmable.",
   R(Tx.ADD, 0x2802, False, (), source=IRI(""), target=gr("b")), TCP)
kp("req_drop_default_and_named",
   "DROP of the default graph and a named graph (GC = 2).",
   R(Tx.DROP, 0x2803, True, (G,), graphs=(IRI(""), gr("x"))))

# ---------------------------------------------------------------------------------------------
# Responses and indications

SELECT_ROWS = (
    (sn("t1"), f("21.5"), s("kitchen")),
    (sn("t2"), f("19.0"), None),
)
for _tx, _transport in ((Tx.SELECT, UDP), (Tx.SELECT, TCP), (Tx.SELECT_PERSISTENT, UDP)):
    sib(f"res_{_tx.name.lower()}_{_transport.value}",
        f"RES OK to {_tx.name} over {_transport.value.upper()}: PC = 1, TRC = RC = 2, VC = 3; "
        "the second row has ?v2 unbound (Empty).",
        Response(0x3000 + _tx, Status.OK, select_result(SELECT_ROWS, 3, (SN,))),
        _tx, _transport)
sib("res_select_all_term_types",
    "SELECT rows with every result term type: URI with and without prefix (0x01), reserved "
    "word (0x02), literals of types 0x00-0x07 (0x04), blank node (0x05), unbound (0x00).",
    Response(0x3010, Status.OK, select_result(
        ((ex("a"), RDF_TYPE, s("x"), i(-7), BNode("n1")),
         (IRI("urn:b"), IRI(RDFS + "Class"), f("0.5"), dt("2026-01-01T00:00:00"), None),
         (None, None, b(True), lang("hei", "fi"), typed("1.5", XSD_DECIMAL)),
         (ex("c"), IRI(OWL + "sameAs"), d("2.5"), None, BNode("n1"))), 5, EXP)),
    Tx.SELECT)
sib("res_select_empty",
    "SELECT result with no solutions: PC = 0, TRC = RC = 0, VC = 2.",
    Response(0x3011, Status.OK, select_result((), 2)), Tx.SELECT)
sib("res_select_vc0",
    "SELECT result with VC = 0: three solutions of zero terms each (a count).",
    Response(0x3012, Status.OK, select_result(((), (), ()), 0)), Tx.SELECT)
sib("res_select_total_saturated",
    "SELECT result with TRC = 65535 (saturated) and RC = 1.",
    Response(0x3013, Status.OK, select_result(((ex("a"),),), 1, EXP, total=65535)), Tx.SELECT)
sib("res_select_all_unbound",
    "A row whose every variable is unbound.",
    Response(0x3014, Status.OK, select_result(((None, None),), 2)), Tx.SELECT)

for _tx, _value, _transport in ((Tx.ASK, True, UDP), (Tx.ASK, False, TCP),
                                (Tx.ASK_PERSISTENT, True, UDP)):
    sib(f"res_{_tx.name.lower()}_{str(_value).lower()}_{_transport.value}",
        f"RES OK to {_tx.name} over {_transport.value.upper()}: "
        f"{'0x01 (a solution exists)' if _value else '0x00 (no solution)'}.",
        Response(0x3100 + _tx, Status.OK, AskResult(_value)), _tx, _transport)

CONSTRUCT_TRIPLES = (
    T(sn("t1"), ex("reading"), f("21.5")),
    T(sn("t1"), ex("reading"), f("21.75")),
    T(sn("t2"), ex("reading"), f("21.75")),
    T(BNode("r1"), RDF_TYPE, ex("Reading")),
)
for _tx, _transport in ((Tx.CONSTRUCT, UDP), (Tx.CONSTRUCT, TCP),
                        (Tx.CONSTRUCT_PERSISTENT, UDP)):
    sib(f"res_{_tx.name.lower()}_{_transport.value}",
        f"RES OK to {_tx.name} over {_transport.value.upper()}: PC = 2, TRC = RC = 4; "
        "Empty repeats members of the previous result triple; a blank node subject.",
        Response(0x3200 + _tx, Status.OK, construct_result(CONSTRUCT_TRIPLES, (SN, EX))),
        _tx, _transport)
sib("res_construct_empty",
    "CONSTRUCT result with no triples: PC = 0, TRC = RC = 0.",
    Response(0x3210, Status.OK, construct_result(())), Tx.CONSTRUCT)

# INDs: UDP with sequence numbers (including the wrap), TCP without.
for _seq in (1, 65534, 65535, 0):
    sib(f"ind_select_udp_seq_{_seq}",
        f"IND OK (type byte 0x80) of SELECT_PERSISTENT over UDP, 6-byte header, sequence "
        f"number {_seq}.",
        Response(0x3300, Status.OK, select_result(SELECT_ROWS[:1], 3, (SN,)), True, _seq),
        Tx.SELECT_PERSISTENT)
sib("ind_select_tcp",
    "IND OK of SELECT_PERSISTENT over TCP: 8-byte header, no sequence number (R11).",
    Response(0x3301, Status.OK, select_result(SELECT_ROWS, 3, (SN,)), True), Tx.SELECT_PERSISTENT,
    TCP)
sib("ind_ask_udp_seq_3", "IND OK of ASK_PERSISTENT over UDP, sequence number 3, value true.",
    Response(0x3302, Status.OK, AskResult(True), True, 3), Tx.ASK_PERSISTENT)
sib("ind_ask_tcp", "IND OK of ASK_PERSISTENT over TCP, value false.",
    Response(0x3303, Status.OK, AskResult(False), True), Tx.ASK_PERSISTENT, TCP)
sib("ind_construct_udp_seq_65535",
    "IND OK of CONSTRUCT_PERSISTENT over UDP, sequence number 65535.",
    Response(0x3304, Status.OK, construct_result(CONSTRUCT_TRIPLES[:2], (SN, EX)), True, 65535),
    Tx.CONSTRUCT_PERSISTENT)
sib("ind_construct_tcp", "IND OK of CONSTRUCT_PERSISTENT over TCP.",
    Response(0x3305, Status.OK, construct_result(CONSTRUCT_TRIPLES, (SN, EX)), True),
    Tx.CONSTRUCT_PERSISTENT, TCP)
sib("ind_terminated_udp_seq_7",
    "IND TERMINATED (type byte 0x89) over UDP, sequence number 7: no Data field.",
    Response(0x3306, Status.TERMINATED, None, True, 7), Tx.SELECT_PERSISTENT)
sib("ind_terminated_tcp", "IND TERMINATED (type byte 0x89) over TCP: no Data field.",
    Response(0x3307, Status.TERMINATED, None, True), Tx.CONSTRUCT_PERSISTENT, TCP)
sib("res_insert_persistent_ok_tcp", "RES OK to INSERT_PERSISTENT over TCP: no Data field.",
    Response(0x3308, Status.OK), Tx.INSERT_PERSISTENT, TCP)
sib("ind_persistent_update_terminated_udp",
    "The only IND a persistent update ever gets (6, 12.x): its end, here TERMINATED (the "
    "cascade limit), sequence number 1, no Data field; its firings send nothing.",
    Response(0x3309, Status.TERMINATED, None, True, 1), Tx.UPDATE_PERSISTENT)

# Every status code in a RES.
_STATUS_ANSWERS = {
    Status.OK: Tx.INSERT_DATA, Status.ACCESS_DENIED: Tx.SELECT, Status.LIMIT_EXCEEDED:
    Tx.SELECT_PERSISTENT, Status.UNKNOWN_TRANSACTION: Tx.TERMINATE, Status.RESPONSE_TOO_LARGE:
    Tx.SELECT, Status.NO_SUCH_GRAPH: Tx.DROP, Status.GRAPH_EXISTS: Tx.CREATE, Status.TERMINATED:
    Tx.ASK_PERSISTENT,
}
for _status in Status:
    if _status in (Status.ECHO_REQUIRED, Status.NUMBER_BEHIND):
        continue  # a Data field: the res_echo_required_* and res_number_behind_* vectors below
    _answers = _STATUS_ANSWERS.get(_status, Tx.UPDATE)
    _transport = TCP if _status % 3 == 2 else UDP
    sib(f"res_status_{_status.value:#04x}_{_status.name.lower()}",
        f"RES with status {_status.name} ({_status.value:#04x}) over {_transport.value.upper()}, "
        f"answering {_answers.name}: no Data field.",
        Response(0x3400 + _status, _status), _answers, _transport)
sib("res_echo_required_udp",
    "RES ECHO REQUIRED (0x0f) over UDP answering a SELECT: its Data field is the echo value, "
    "length 10 (7.7); the KP retries with a new Transaction ID and the ECHO option.",
    Response(0x340F, Status.ECHO_REQUIRED, ECHO_VALUE), Tx.SELECT)
sib("res_echo_required_one_byte",
    "RES ECHO REQUIRED (0x0f) answering INSERT DATA with a 1-byte echo value (the shortest).",
    Response(0x3410, Status.ECHO_REQUIRED, b"\x2a"), Tx.INSERT_DATA)
sib("res_number_behind_udp",
    "RES NUMBER BEHIND (0x10) over UDP answering INSERT DATA: its Data field is u32 the "
    "request's epoch (0: the request had no EPOCH option) and u32 the first epoch the SIB takes "
    "as new, 3 (15); the KP sends the request again under a number of epoch 3.",
    Response(0x3411, Status.NUMBER_BEHIND, Behind(0, 3)), Tx.INSERT_DATA)
sib("res_number_behind_tcp",
    "RES NUMBER BEHIND (0x10) over TCP: the same Data field, two u32 (a SIB deduplicates "
    "nothing over TCP, so never sends it there; a KP reads it as over UDP).",
    Response(0x3412, Status.NUMBER_BEHIND, Behind(0x7FFFFFFF, 0xFFFFFFFF)), Tx.SELECT, TCP)
for _code in (0x11, 0x3F):
    sib(f"res_status_{_code:#04x}_unknown",
        f"RES with the reserved status code {_code:#04x}: decoded as the integer {_code} (a KP "
        "treats an unknown non-zero status as an error).",
        Response(0x3500 + _code, _code), Tx.DELETE_DATA)

# The RES epoch (15.6): bit 6 of the type byte, a u32 after the 4-byte UDP header.
sib("res_ok_epoch_udp",
    "RES OK (type byte 0x40) over UDP to an INSERT DATA of epoch 1: the u32 epoch follows the "
    "4-byte header (15.6); the KP takes it as the answer to its pending request only if that "
    "request's epoch is 1.",
    Response(0x3600, Status.OK, epoch=1), Tx.INSERT_DATA)
sib("res_select_epoch_udp",
    "RES OK (type byte 0x40) to a SELECT of epoch 65536: the epoch, then the Data field.",
    Response(0x3601, Status.OK, select_result(SELECT_ROWS[:1], 3, (SN,)), epoch=0x10000),
    Tx.SELECT)
sib("res_echo_required_epoch_udp",
    "RES ECHO REQUIRED (type byte 0x4f) to a SELECT of epoch 4294967295 (the largest): the "
    "epoch, then the echo value. With the longest echo value, 10 bytes, it is the largest RES "
    "0x0f there is, 19 bytes, sent whatever the request's MAX RESPONSE SIZE (7.7).",
    Response(0x3602, Status.ECHO_REQUIRED, ECHO_VALUE, epoch=0xFFFFFFFF), Tx.SELECT)
sib("res_status_0x3f_unknown_epoch",
    "Type byte 0x7f in a RES over UDP: the reserved status 0x3f (decoded as the integer 63, an "
    "error to a KP) of a request of epoch 2.",
    Response(0x3603, 0x3F, epoch=2), Tx.DELETE_DATA)

# MAX RESPONSE SIZE (§6.4): the message is the full result; hex and decoded are the cut answer.
MANY_ROWS = tuple((sn(f"t{k}"), f(f"{20 + k}.5")) for k in range(6))
_full = select_result(MANY_ROWS, 2, (SN,))
sib("res_select_max_size_cut",
    "SELECT answer (6 rows, 105 bytes in full) under MAX RESPONSE SIZE 80 over UDP: header 4 + "
    "prefix list 30 + TRC, RC, VC 5 = 39 bytes, then 11 bytes per row: RC = 3 (72 bytes) of "
    "TRC = 6; a fourth row would need 83.",
    Response(0x3600, Status.OK, _full), Tx.SELECT, max_size=80)
sib("res_select_max_size_exact",
    "MAX RESPONSE SIZE 105, exactly the size of the whole answer: nothing is cut.",
    Response(0x3601, Status.OK, _full), Tx.SELECT, max_size=105)
sib("res_select_max_size_rc0",
    "MAX RESPONSE SIZE 45 over UDP: the 39 bytes of header, prefix list and counts fit, no "
    "11-byte row does: RC = 0, TRC = 6.",
    Response(0x3602, Status.OK, _full), Tx.SELECT, max_size=45)
_bare = select_result(((ex("a"), i(1)), (ex("b"), i(2))), 2)  # no prefix list: PC = 0
sib("res_select_max_size_rc0_boundary",
    "MAX RESPONSE SIZE 10 over UDP, no prefix list: exactly the empty SELECT result (header 4 + "
    "6) fits: RC = 0, TRC = 2.",
    Response(0x3603, Status.OK, _bare), Tx.SELECT, max_size=10)
sib("res_select_max_size_too_large",
    "MAX RESPONSE SIZE 9 over UDP, no prefix list: not even the empty result (header 4 + 6) "
    "fits: status RESPONSE_TOO_LARGE (0x0c), no Data field.",
    Response(0x3609, Status.OK, _bare), Tx.SELECT, max_size=9)
sib("ind_select_max_size_cut_udp",
    "IND of SELECT_PERSISTENT over UDP, sequence number 9, under MAX RESPONSE SIZE 70: the "
    "6-byte IND header counts (41 + 11 per row): RC = 2 (63 bytes) of TRC = 6.",
    Response(0x3605, Status.OK, _full, True, 9), Tx.SELECT_PERSISTENT, max_size=70)
sib("res_construct_max_size_cut",
    "CONSTRUCT answer (107 bytes in full) under MAX RESPONSE SIZE 90 over TCP: header 8 + "
    "prefix list 51 + TRC, RC 4 = 63, triples of 19 and 6 bytes fit (88), the third (5) does "
    "not: RC = 2 of TRC = 4.",
    Response(0x3606, Status.OK, construct_result(CONSTRUCT_TRIPLES, (SN, EX))), Tx.CONSTRUCT,
    TCP, max_size=90)
sib("res_construct_max_size_too_large",
    "CONSTRUCT answer under MAX RESPONSE SIZE 12 over TCP, no prefix list: the empty result "
    "(header 8 + 5) does not fit: RESPONSE_TOO_LARGE.",
    Response(0x360A, Status.OK, construct_result(CONSTRUCT_TRIPLES)), Tx.CONSTRUCT, TCP,
    max_size=12)
sib("res_ask_max_size_fits",
    "ASK answer under MAX RESPONSE SIZE 5 over UDP: header 4 + 1 byte fits.",
    Response(0x3607, Status.OK, AskResult(True)), Tx.ASK, max_size=5)
sib("res_ask_max_size_too_large",
    "ASK answer under MAX RESPONSE SIZE 4 over UDP: the result byte does not fit: "
    "RESPONSE_TOO_LARGE.",
    Response(0x3608, Status.OK, AskResult(True)), Tx.ASK, max_size=4)

# ACK (UDP only).
kp("ack_seq_1", "ACK of IND 1 (and every older IND) of transaction 0x3300: 4-byte header with "
   "type byte 0x00 + u16 sequence number.", Ack(0x3300, 1))
kp("ack_seq_65535", "ACK of IND 65535.", Ack(0x3300, 65535))
kp("ack_bare", "Bare 4-byte ACK (no sequence number): acknowledges the newest IND sent.",
   Ack(0x3300))

# ---------------------------------------------------------------------------------------------
# Invalid messages (hand-written hex)
#
# Building blocks (UDP unless the name says TCP):
#   01 82 0100              header: version 1, INSERT DATA CON, tid 1
#   31 0005 75726e3a73 00 0005 75726e3a43
#                           triple (urn:s, rdf:type, urn:C): type byte 0x31 = S URI | P Reserved
#                           << 3 | O URI << 5

URN_S = "00 05 75726e3a73"  # URI field: prefix 0, length 5, "urn:s"
URN_P = "00 05 75726e3a70"  # "urn:p"
URN_C = "00 05 75726e3a43"  # "urn:C"
TRIPLE = f"31 {URN_S} 00 {URN_C}"
SELECT_DATA = f"01 | 01 33 00 00 {URN_C} | 00"  # VC 1 | TC 1 (?v0 rdf:type urn:C) | OGC 0
ST = Status

bad("invalid_0x01_version_2", "Version byte 0x02 (only 0x01 exists).",
    f"02 82 0100 | 01 {TRIPLE} | 00", ST.VERSION_NOT_SUPPORTED)
bad("invalid_0x01_version_0_tcp", "Version byte 0x00 over TCP (Length correct: 10).",
    "00 91 0100 0a000000 | 00 00", ST.VERSION_NOT_SUPPORTED, transport=TCP)
bad("invalid_0x01_ind_version_before_ind_header", "4 bytes whose type byte 0xc6 marks an IND "
    "(6-byte header, and bit 6 set) with version byte 0xe5: the header checked before Version "
    "is the transport's 4 common bytes, and a type byte means something only in version 1, so "
    "the version's 0x01 wins over the short IND header's 0x04 (3.2).", "e5 c6 2197",
    ST.VERSION_NOT_SUPPORTED, "sib_to_kp", answers=Tx.SELECT_PERSISTENT)
bad("invalid_0x01_res_version_2", "A RES with version byte 0x02.",
    "02 00 0100", ST.VERSION_NOT_SUPPORTED, "sib_to_kp", answers=Tx.INSERT_DATA)
bad("invalid_0x02_tx_0x17", "Transaction type 0x17 (CON, type byte 0x97): one past ADD.",
    "01 97 0100 | 00", ST.INVALID_TRANSACTION_TYPE)
bad("invalid_0x02_tx_0x7f", "Transaction type 0x7f (NON), the last 7-bit code.",
    "01 7f 0100 | 00", ST.INVALID_TRANSACTION_TYPE)
bad("invalid_0x03_type_byte_0x80", "Type byte 0x80 from a KP (transaction type 0, CON): "
    "neither a REQ nor an ACK.", "01 80 0100 | 0100", ST.INVALID_MESSAGE_TYPE)
bad("invalid_0x03_ack_over_tcp", "An ACK (type byte 0x00) over TCP: there are no ACKs over TCP.",
    "01 00 0100 0a000000 | 0100", ST.INVALID_MESSAGE_TYPE, transport=TCP)

# 0x04: Data field format
bad("invalid_0x04_truncated_graph", "INSERT DATA whose only triple ends inside its subject URI "
    "(length 5, 3 bytes present); no options byte.",
    "01 82 0100 | 01 31 00 05 75726e", ST.INVALID_DATA_FORMAT)
bad("invalid_0x04_truncated_tc", "INSERT DATA with TC = 2 but one triple, then the message "
    "ends.", f"01 82 0100 | 02 {TRIPLE}", ST.INVALID_DATA_FORMAT)
bad("invalid_0x04_empty_first_triple", "Empty subject (type byte 0x30) in the first triple of a "
    "Graph field.", f"01 82 0100 | 01 30 00 {URN_C} | 00", ST.INVALID_DATA_FORMAT)
bad("invalid_0x04_empty_first_triple_of_second_graph",
    "UPDATE DATA: Empty predicate in the first triple of the Insert graph (Empty does not refer "
    "across Graph fields).",
    f"01 83 0100 | 01 {TRIPLE} | 01 21 {URN_S} {URN_C} | 00", ST.INVALID_DATA_FORMAT)
bad("invalid_0x04_literal_subject", "Literal subject (subject type 4, type byte 0x34).",
    f"01 82 0100 | 01 34 00 01 78 00 {URN_C} | 00", ST.INVALID_DATA_FORMAT)
bad("invalid_0x04_object_type_6", "Object member type 6 (type byte 0xc9).",
    f"01 82 0100 | 01 c9 {URN_S} {URN_P} 00 | 00", ST.INVALID_DATA_FORMAT)
bad("invalid_0x04_variable_in_insert_data", "Variable subject (type byte 0x33) in INSERT DATA.",
    f"01 82 0100 | 01 33 00 00 {URN_C} | 00", ST.INVALID_DATA_FORMAT)
bad("invalid_0x04_bad_datetime", "dateTime literal with month 13: 2026-13-01T00:00:00.",
    f"01 82 0100 | 01 89 {URN_S} {URN_P} 03 323032362d31332d30315430303a30303a3030 | 00",
    ST.INVALID_DATA_FORMAT)
bad("invalid_0x04_boolean_2", "Boolean literal byte 0x02 (only 0x00 and 0x01 are valid).",
    f"01 82 0100 | 01 89 {URN_S} {URN_P} 04 02 | 00", ST.INVALID_DATA_FORMAT)
bad("invalid_0x04_literal_type_8", "Literal type 0x08.",
    f"01 82 0100 | 01 89 {URN_S} {URN_P} 08 00 | 00", ST.INVALID_DATA_FORMAT)
bad("invalid_0x04_empty_lang_tag", "Language-tagged literal (0x05) with tag length 0.",
    f"01 82 0100 | 01 89 {URN_S} {URN_P} 05 00 01 78 | 00", ST.INVALID_DATA_FORMAT)
bad("invalid_0x04_uri_length_not_minimal", "Subject URI length 5 written in two bytes (85 00).",
    f"01 82 0100 | 01 31 00 8500 75726e3a73 00 {URN_C} | 00", ST.INVALID_DATA_FORMAT)
bad("invalid_0x04_string_length_not_minimal",
    "xsd:string literal \"x\" with its length 1 written in two bytes (41 00).",
    f"01 82 0100 | 01 89 {URN_S} {URN_P} 00 4100 78 | 00", ST.INVALID_DATA_FORMAT)
bad("invalid_0x04_string_length_3_bytes_not_minimal",
    "xsd:string literal \"x\" with length 1 in the three-byte form (81 00 00).",
    f"01 82 0100 | 01 89 {URN_S} {URN_P} 00 810000 78 | 00", ST.INVALID_DATA_FORMAT)
bad("invalid_0x04_reserved_word_0x0e", "Reserved word 0x0e (the table ends at 0x0d).",
    f"01 82 0100 | 01 31 {URN_S} 0e {URN_C} | 00", ST.INVALID_DATA_FORMAT)
bad("invalid_0x04_prefix_index_beyond_list", "Subject URI with prefix index 2; the PREFIX option "
    "lists one prefix.",
    f"01 82 0100 | 01 31 02 01 73 00 {URN_C} | 01 00 01 00 04 75726e3a", ST.INVALID_DATA_FORMAT)
bad("invalid_0x04_prefix_index_without_prefix_option",
    "Subject URI with prefix index 1 in a REQ with no PREFIX option (OC = 0).",
    f"01 82 0100 | 01 31 01 01 73 00 {URN_C} | 00", ST.INVALID_DATA_FORMAT)
_RDF_HEX = "".join(f"{c:02x}" for c in RDF.encode())
bad("invalid_0x04_langstring_datatype",
    "Literal of type 0x06 whose datatype is rdf:langString (full IRI): a language-tagged "
    "string must use type 0x05.",
    f"01 82 0100 | 01 89 {URN_S} {URN_P} 06 00 35 {_RDF_HEX} 6c616e67537472696e67 01 78 | 00",
    ST.INVALID_DATA_FORMAT)
bad("invalid_0x04_langstring_datatype_via_prefix",
    "As invalid_0x04_langstring_datatype, but the datatype IRI is rdf: (PREFIX entry 1) + "
    "langString: the check applies to the full IRI, after prefix expansion.",
    f"01 82 0100 | 01 89 {URN_S} {URN_P} 06 01 0a 6c616e67537472696e67 01 78 | "
    f"01 00 01 00 2b {_RDF_HEX}", ST.INVALID_DATA_FORMAT)
bad("invalid_0x04_empty_bnode_label", "Blank node subject (type 5) with label length 0.",
    f"01 82 0100 | 01 35 00 00 {URN_C} | 00", ST.INVALID_DATA_FORMAT)
bad("invalid_0x04_invalid_utf8", "xsd:string literal of two bytes ff fe (not UTF-8).",
    f"01 82 0100 | 01 89 {URN_S} {URN_P} 00 02 fffe | 00", ST.INVALID_DATA_FORMAT)
bad("invalid_0x04_create_default_graph", "CREATE of the default graph (empty IRI).",
    "01 92 0100 | 01 00 00 | 00", ST.INVALID_DATA_FORMAT)
bad("invalid_0x04_create_gc_0", "CREATE with GC = 0.", "01 92 0100 | 00 | 00",
    ST.INVALID_DATA_FORMAT)
bad("invalid_0x04_tcp_length_mismatch", "RESET over TCP whose Length says 10 bytes; the "
    "message has 9.", "01 91 0100 0a000000 | 00", ST.INVALID_DATA_FORMAT, transport=TCP)
bad("invalid_0x04_tcp_length_below_8", "TCP Length 4 (< 8, the header itself).",
    "01 91 0100 04000000", ST.INVALID_DATA_FORMAT, transport=TCP)
bad("invalid_0x04_ack_3_bytes_data", "ACK with a 3-byte Data field (only 0 or 2 are valid).",
    "01 00 0100 | 010000", ST.INVALID_DATA_FORMAT)
bad("invalid_0x04_res_trailing_bytes", "RES to SELECT with one byte after the last row.",
    "01 00 0100 | 00 | 0100 0100 | 01 | 01 00 05 75726e3a61 | 00", ST.INVALID_DATA_FORMAT,
    "sib_to_kp", answers=Tx.SELECT)
bad("invalid_0x04_res_data_for_update", "RES OK to INSERT DATA with a Data field (one byte).",
    "01 00 0100 | 00", ST.INVALID_DATA_FORMAT, "sib_to_kp", answers=Tx.INSERT_DATA)
bad("invalid_0x04_res_error_with_data", "RES with status 0x07 followed by a Data field.",
    "01 07 0100 | 01", ST.INVALID_DATA_FORMAT, "sib_to_kp", answers=Tx.ASK)
bad("invalid_0x04_res_variable_in_row", "SELECT result row with member type 0x03 (Variable).",
    "01 00 0100 | 00 | 0100 0100 | 01 | 03 00", ST.INVALID_DATA_FORMAT, "sib_to_kp",
    answers=Tx.SELECT)
bad("invalid_0x04_res_row_type_6", "SELECT result row with term type 0x06.",
    "01 00 0100 | 00 | 0100 0100 | 01 | 06", ST.INVALID_DATA_FORMAT, "sib_to_kp",
    answers=Tx.SELECT)
bad("invalid_0x04_res_rc_above_trc", "SELECT result with RC = 1 > TRC = 0.",
    "01 00 0100 | 00 | 0000 0100 | 01 | 00", ST.INVALID_DATA_FORMAT, "sib_to_kp",
    answers=Tx.SELECT)
bad("invalid_0x04_res_prefix_entry_empty", "SELECT result whose prefix list (PC = 1) has an "
    "empty entry; otherwise an empty result (TRC = RC = 0, VC = 1).",
    "01 00 0100 | 01 00 00 | 0000 0000 | 01", ST.INVALID_DATA_FORMAT, "sib_to_kp",
    answers=Tx.SELECT)
bad("invalid_0x04_res_echo_required_without_data", "RES ECHO REQUIRED (0x0f) with no Data "
    "field: its echo value is mandatory.", "01 0f 0100", ST.INVALID_DATA_FORMAT, "sib_to_kp",
    answers=Tx.SELECT)
bad("invalid_0x04_res_echo_required_length_0", "RES ECHO REQUIRED (0x0f) with echo length 0.",
    "01 0f 0100 | 00", ST.INVALID_DATA_FORMAT, "sib_to_kp", answers=Tx.SELECT)
bad("invalid_0x04_res_number_behind_without_data", "RES NUMBER BEHIND (0x10) with no Data "
    "field: its two u32 are mandatory.", "01 10 0100", ST.INVALID_DATA_FORMAT, "sib_to_kp",
    answers=Tx.INSERT_DATA)
bad("invalid_0x04_res_number_behind_7_bytes", "RES NUMBER BEHIND (0x10) with 7 bytes of Data "
    "(the second u32 is cut short).", "01 10 0100 | 01000000 030000", ST.INVALID_DATA_FORMAT,
    "sib_to_kp", answers=Tx.INSERT_DATA)
bad("invalid_0x04_res_number_behind_9_bytes", "RES NUMBER BEHIND (0x10) with 9 bytes of Data "
    "(one byte after the two u32).", "01 10 0100 | 01000000 03000000 00",
    ST.INVALID_DATA_FORMAT, "sib_to_kp", answers=Tx.INSERT_DATA)
bad("invalid_0x04_res_epoch_0", "RES OK with bit 6 (type byte 0x40) and the epoch field 0: "
    "a RES to a request of epoch 0 has no field.", "01 40 0100 | 00000000",
    ST.INVALID_DATA_FORMAT, "sib_to_kp", answers=Tx.INSERT_DATA)
bad("invalid_0x04_res_epoch_3_bytes", "RES OK with bit 6 (type byte 0x40) and 3 bytes after "
    "the header: the epoch is a u32.", "01 40 0100 | 010000", ST.INVALID_DATA_FORMAT,
    "sib_to_kp", answers=Tx.INSERT_DATA)
bad("invalid_0x04_res_epoch_0x7f_without_field", "Type byte 0x7f (status 0x3f with bit 6) "
    "in a 4-byte RES: the epoch field is missing.", "01 7f 0100", ST.INVALID_DATA_FORMAT,
    "sib_to_kp", answers=Tx.DELETE_DATA)
bad("invalid_0x04_ind_epoch", "IND (type byte 0xc0, OK with bit 6) with an epoch field: an "
    "IND never names an epoch.", "01 c0 0100 0100 | 01000000 | 01", ST.INVALID_DATA_FORMAT,
    "sib_to_kp", answers=Tx.ASK_PERSISTENT)
bad("invalid_0x04_res_epoch_tcp", "RES OK with bit 6 (type byte 0x40) over TCP with an epoch "
    "field: nothing is numbered over TCP.", "01 40 0100 0c000000 | 01000000",
    ST.INVALID_DATA_FORMAT, "sib_to_kp", TCP, answers=Tx.INSERT_DATA)
bad("invalid_0x04_res_number_behind_epoch", "Type byte 0x50: NUMBER BEHIND with bit 6 and an "
    "epoch field before its Data field; its Data field names the epoch, it never sets the bit.",
    "01 50 0100 | 01000000 | 01000000 03000000", ST.INVALID_DATA_FORMAT, "sib_to_kp",
    answers=Tx.INSERT_DATA)
bad("invalid_0x04_ask_byte_2", "ASK result byte 0x02.", "01 00 0100 | 02",
    ST.INVALID_DATA_FORMAT, "sib_to_kp", answers=Tx.ASK)
bad("invalid_0x04_res_echo_required_length_11", "RES ECHO REQUIRED (0x0f) with echo length "
    "11 and 11 bytes: one over the longest echo value (7.7).",
    f"01 0f 0100 | 0b {'00' * 11}", ST.INVALID_DATA_FORMAT, "sib_to_kp", answers=Tx.SELECT)
bad("invalid_0x04_ind_echo_required", "IND (type byte 0x8f) with status ECHO REQUIRED, "
    "sequence number 1, no Data field: a RES's status only (3.2).", "01 8f 0100 0100",
    ST.INVALID_DATA_FORMAT, "sib_to_kp", answers=Tx.SELECT_PERSISTENT)
bad("invalid_0x04_ind_echo_required_with_value", "IND (type byte 0x8f) with status ECHO "
    "REQUIRED and an echo value as its Data field: a RES's status only (3.2).",
    "01 8f 0100 0100 | 01 2a", ST.INVALID_DATA_FORMAT, "sib_to_kp",
    answers=Tx.SELECT_PERSISTENT)
bad("invalid_0x04_ind_number_behind", "IND (type byte 0x90) with status NUMBER BEHIND and two "
    "u32 as its Data field: a RES's status only (3.2).", "01 90 0100 0100 | 00000000 01000000",
    ST.INVALID_DATA_FORMAT, "sib_to_kp", answers=Tx.SELECT_PERSISTENT)
bad("invalid_0x04_ind_header_short", "UDP IND (type byte 0x80) of 5 bytes: the IND header is 6.",
    "01 80 0100 01", ST.INVALID_DATA_FORMAT, "sib_to_kp", answers=Tx.ASK_PERSISTENT)
bad("invalid_0x04_construct_variable", "CONSTRUCT result triple with a Variable object.",
    f"01 00 0100 | 00 | 0100 0100 | 71 {URN_S} 00 00 | ", ST.INVALID_DATA_FORMAT, "sib_to_kp",
    answers=Tx.CONSTRUCT)

# 0x05: option type
bad("invalid_0x05_option_type_0x0c", "Option type 0x0c (the table ends at 0x0b).",
    "01 82 0100 | 00 | 01 0c 00", ST.INVALID_OPTION_TYPE)
bad("invalid_0x05_epoch_on_terminate", "EPOCH (0x0b) 1 on TERMINATE, which has no number (15).",
    "01 90 0100 | 01 0b 01000000", ST.INVALID_OPTION_TYPE)
bad("invalid_0x05_optional_pattern_on_select", "OPTIONAL PATTERN (0x04) on SELECT: queries "
    "carry optional graphs in OGC (R8).",
    f"01 87 0100 | {SELECT_DATA} | 01 04 01 01 33 00 00 {URN_C}", ST.INVALID_OPTION_TYPE)
bad("invalid_0x05_modifier_on_ask", "SOLUTION MODIFIER (0x06) on ASK.",
    f"01 88 0100 | 01 33 00 00 {URN_C} 00 | 01 06 00", ST.INVALID_OPTION_TYPE)
bad("invalid_0x05_prefix_on_terminate", "PREFIX (0x00) on TERMINATE (no Data field).",
    "01 90 0100 | 01 00 01 00 04 75726e3a", ST.INVALID_OPTION_TYPE)
bad("invalid_0x05_insert_graph_on_delete_data", "INSERT GRAPH (0x02) on DELETE DATA.",
    f"01 81 0100 | 01 {TRIPLE} | 01 02 01 {URN_C}", ST.INVALID_OPTION_TYPE)

# 0x06: option format
bad("invalid_0x06_repeated_option", "MAX RESPONSE SIZE twice.",
    "01 91 0100 | 02 08 00010000 08 00020000", ST.INVALID_OPTION_FORMAT)
bad("invalid_0x06_echo_length_0", "ECHO (0x0a) with length 0 (an echo value is 1…10 bytes).",
    f"01 82 0100 | 01 {TRIPLE} | 01 0a 00", ST.INVALID_OPTION_FORMAT)
bad("invalid_0x06_echo_length_11", "ECHO (0x0a) with length 11 and 11 bytes: one over the "
    "longest echo value (7.7).", f"01 91 0100 | 01 0a 0b {'00' * 11}", ST.INVALID_OPTION_FORMAT)
bad("invalid_0x06_echo_length_0_tcp", "ECHO (0x0a) with length 0 on RESET over TCP: a SIB "
    "ignores ECHO over TCP, but its form is checked on every transport (7.7).",
    "01 91 0100 0b000000 | 01 0a 00", ST.INVALID_OPTION_FORMAT, transport=TCP)
bad("invalid_0x06_epoch_0_tcp", "EPOCH (0x0b) 0 on RESET over TCP: a SIB ignores EPOCH over "
    "TCP, but its form is checked on every transport (15).",
    "01 91 0100 0e000000 | 01 0b 00000000", ST.INVALID_OPTION_FORMAT, transport=TCP)
bad("invalid_0x06_echo_truncated", "ECHO (0x0a) with length 4 and 2 bytes.",
    "01 90 0100 | 01 0a 04 0102", ST.INVALID_OPTION_FORMAT)
bad("invalid_0x06_epoch_0", "EPOCH (0x0b) with value 0: epoch 0 is written as no option (15).",
    f"01 82 0100 | 01 {TRIPLE} | 01 0b 00000000", ST.INVALID_OPTION_FORMAT)
bad("invalid_0x06_epoch_repeated", "EPOCH (0x0b) twice, 1 then 2.",
    f"01 82 0100 | 01 {TRIPLE} | 02 0b 01000000 0b 02000000", ST.INVALID_OPTION_FORMAT)
bad("invalid_0x06_epoch_truncated", "EPOCH (0x0b) with 3 of its 4 bytes.",
    "01 91 0100 | 01 0b 010000", ST.INVALID_OPTION_FORMAT)
bad("invalid_0x06_count_0", "QUERY GRAPH with count 0.",
    f"01 87 0100 | {SELECT_DATA} | 01 03 00", ST.INVALID_OPTION_FORMAT)
bad("invalid_0x06_prefix_count_0", "PREFIX with count 0.",
    f"01 82 0100 | 01 {TRIPLE} | 01 00 00", ST.INVALID_OPTION_FORMAT)
bad("invalid_0x06_expression_tc_0", "FILTER with an expression of 0 tokens.",
    f"01 87 0100 | {SELECT_DATA} | 01 05 01 00", ST.INVALID_OPTION_FORMAT)
bad("invalid_0x06_rpn_underflow", "FILTER ?v0 > (TC = 2): '>' pops two values from a stack of "
    "one.", f"01 87 0100 | {SELECT_DATA} | 01 05 01 02 05 00 0a", ST.INVALID_OPTION_FORMAT)
bad("invalid_0x06_rpn_two_values", "FILTER expression ?v0 ?v1 (TC = 2) leaves two values.",
    f"01 87 0100 | {SELECT_DATA} | 01 05 01 02 05 00 05 01", ST.INVALID_OPTION_FORMAT)
bad("invalid_0x06_bound_not_after_variable", "BIND ?v1 := bound(1): the token before bound() "
    "(0x17) is an integer, not a variable.",
    f"01 87 0100 | {SELECT_DATA} | 01 07 01 01 02 01 01000000 17", ST.INVALID_OPTION_FORMAT)
bad("invalid_0x06_modifier_reserved_bits", "SOLUTION MODIFIER flags 0x20 (reserved bit 5 set).",
    f"01 87 0100 | {SELECT_DATA} | 01 06 20", ST.INVALID_OPTION_FORMAT)
bad("invalid_0x06_modifier_order_3", "SOLUTION MODIFIER order 3 (flags 0x03, variable 0).",
    f"01 87 0100 | {SELECT_DATA} | 01 06 03 00", ST.INVALID_OPTION_FORMAT)
bad("invalid_0x06_unknown_token_0x4f", "FILTER with token type 0x4f (the first code after "
    "the functions; 0x37 and 0x4f-0xff are unassigned).",
    f"01 87 0100 | {SELECT_DATA} | 01 05 01 01 4f", ST.INVALID_OPTION_FORMAT)
bad("invalid_0x06_unknown_token_0xff", "FILTER with token type 0xff.",
    f"01 87 0100 | {SELECT_DATA} | 01 05 01 01 ff", ST.INVALID_OPTION_FORMAT)
bad("invalid_0x06_function_underflow", "FILTER IF(?v0) (0x44 pops 3, the stack holds 1).",
    f"01 87 0100 | {SELECT_DATA} | 01 05 01 02 05 00 44", ST.INVALID_OPTION_FORMAT)
bad("invalid_0x06_variadic_underflow", "FILTER CONCAT with count 2 (0x4b 02) after one "
    "operand.", f"01 87 0100 | {SELECT_DATA} | 01 05 01 02 05 00 4b 02",
    ST.INVALID_OPTION_FORMAT)
bad("invalid_0x06_variadic_count_missing", "FILTER ends after the CONCAT code (0x4b): its "
    "count is missing.", f"01 87 0100 | {SELECT_DATA} | 01 05 01 02 05 00 4b",
    ST.INVALID_OPTION_FORMAT)
bad("invalid_0x06_in_count_leaves_two", "FILTER ?v0 ?v0 ?v0 IN with count 1 (0x4d 01): IN "
    "pops n + 1 = 2 of 3, leaving two values.",
    f"01 87 0100 | {SELECT_DATA} | 01 05 01 04 05 00 05 00 05 00 4d 01",
    ST.INVALID_OPTION_FORMAT)
bad("invalid_0x06_trailing_bytes", "One byte (0x00) after the last option (OC = 0).",
    f"01 82 0100 | 01 {TRIPLE} | 00 00", ST.INVALID_OPTION_FORMAT)
bad("invalid_0x06_prefix_entry_nonzero_index", "PREFIX entry with prefix index 1.",
    f"01 82 0100 | 01 {TRIPLE} | 01 00 01 01 04 75726e3a", ST.INVALID_OPTION_FORMAT)
bad("invalid_0x06_prefix_entry_empty", "PREFIX entry of length 0 (an empty prefix saves "
    "nothing and would let \"\" + \"\" spell the default graph).",
    f"01 82 0100 | 01 {TRIPLE} | 01 00 01 00 00", ST.INVALID_OPTION_FORMAT)
bad("invalid_0x06_prefix_index_beyond_list_in_option", "QUERY GRAPH name with prefix index 2; "
    "PREFIX lists one prefix.",
    f"01 87 0100 | {SELECT_DATA} | 02 00 01 00 04 75726e3a 03 01 02 01 67",
    ST.INVALID_OPTION_FORMAT)
bad("invalid_0x06_truncated_max_response_size", "MAX RESPONSE SIZE with 2 of its 4 bytes.",
    "01 91 0100 | 01 08 0001", ST.INVALID_OPTION_FORMAT)
bad("invalid_0x06_filter_bad_boolean", "FILTER boolean operand (0x04) with byte 0x02.",
    f"01 87 0100 | {SELECT_DATA} | 01 05 01 01 04 02", ST.INVALID_OPTION_FORMAT)
# A content fault inside an option body is 0x06, whatever its kind (3.2): the same fault in the
# Data field is 0x04.
bad("invalid_0x06_filter_invalid_utf8", "FILTER string operand (0x00) of two bytes ff fe (not "
    "UTF-8): inside an option, 0x06 (invalid_0x04_invalid_utf8 is the Data field's).",
    f"01 87 0100 | {SELECT_DATA} | 01 05 01 01 00 02 fffe", ST.INVALID_OPTION_FORMAT)
bad("invalid_0x06_filter_bad_datetime", "FILTER dateTime operand (0x03) with month 13.",
    f"01 87 0100 | {SELECT_DATA} | 01 05 01 01 03 323032362d31332d30315430303a30303a3030",
    ST.INVALID_OPTION_FORMAT)
bad("invalid_0x06_filter_langstring_datatype", "FILTER literal operand (0x18) of type 0x06 "
    "whose datatype is rdf:langString.",
    f"01 87 0100 | {SELECT_DATA} | 01 05 01 01 18 06 00 35 {_RDF_HEX} 6c616e67537472696e67 01 78",
    ST.INVALID_OPTION_FORMAT)
bad("invalid_0x06_optional_pattern_empty_first_triple", "INSERT with an OPTIONAL PATTERN graph "
    "whose first triple has an Empty subject (type byte 0x30).",
    f"01 85 0100 | 01 33 00 00 {URN_C} | 01 33 00 00 {URN_C} | 01 04 01 01 30 00 {URN_C}",
    ST.INVALID_OPTION_FORMAT)
# Several faults (3.2)
bad("invalid_0x05_option_fault_before_data_prefix_index",
    "Subject URI with prefix index 1 and no PREFIX option, and an option of type 0x0c: a "
    "prefix index is checked once the options are read (3.2), so the option's 0x05 wins.",
    f"01 82 0100 | 01 31 01 01 73 00 {URN_C} | 01 0c 00", ST.INVALID_OPTION_TYPE)
# The late pass (3.2, rule 1) whatever the options' order
_PREFIX_URN = "00 01 00 04 75726e3a"  # PREFIX ("urn:")
_QUERY_GRAPH_2 = "03 01 02 01 67"  # QUERY GRAPH, one name: prefix index 2, "g"
bad("invalid_0x05_option_type_after_prefix_and_option_prefix_index",
    "PREFIX (one entry), QUERY GRAPH with prefix index 2, then an option of type 0x0c: the "
    "prefix index waits for the late pass although PREFIX came first, so the option type's "
    "0x05 wins (3.2, rule 1).",
    f"01 87 0100 | 00 00 00 | 03 {_PREFIX_URN} {_QUERY_GRAPH_2} 0c", ST.INVALID_OPTION_TYPE)
bad("invalid_0x05_option_type_before_prefix_and_option_prefix_index",
    "QUERY GRAPH with prefix index 2, PREFIX (one entry), then an option of type 0x0c: the "
    "same options as invalid_0x05_option_type_after_prefix_and_option_prefix_index in another "
    "order, the same status (3.2, rule 1).",
    f"01 87 0100 | 00 00 00 | 03 {_QUERY_GRAPH_2} {_PREFIX_URN} 0c", ST.INVALID_OPTION_TYPE)
bad("invalid_0x05_not_applicable_after_option_prefix_index",
    "PREFIX, QUERY GRAPH with prefix index 2, then OPTIONAL PATTERN on SELECT (not "
    "applicable, R8, its body not read): 0x05 (3.2, rule 1).",
    f"01 87 0100 | 00 00 00 | 03 {_PREFIX_URN} {_QUERY_GRAPH_2} 04", ST.INVALID_OPTION_TYPE)
bad("invalid_0x06_epoch_truncated_after_option_prefix_index",
    "PREFIX, QUERY GRAPH with prefix index 2, then EPOCH (0x0b) with no body: the truncated "
    "EPOCH is an option fault of the options pass (0x06), found before the late pass's prefix "
    "index (0x06 too).",
    f"01 87 0100 | 00 00 00 | 03 {_PREFIX_URN} {_QUERY_GRAPH_2} 0b", ST.INVALID_OPTION_FORMAT)
bad("invalid_0x04_data_prefix_index_before_option_prefix_index",
    "Subject URI with prefix index 2 in the Where graph and QUERY GRAPH with prefix index 2, "
    "PREFIX listing one prefix before QUERY GRAPH: the late pass checks the Data field first "
    "(0x04), then the options (3.2, rule 1).",
    f"01 87 0100 | 00 01 31 02 01 73 00 00 01 6f 00 | 02 {_PREFIX_URN} {_QUERY_GRAPH_2}",
    ST.INVALID_DATA_FORMAT)
bad("invalid_0x04_data_prefix_index_before_option_prefix_index_reordered",
    "The message of invalid_0x04_data_prefix_index_before_option_prefix_index with QUERY GRAPH "
    "before PREFIX: the same status, 0x04 (3.2, rule 1).",
    f"01 87 0100 | 00 01 31 02 01 73 00 00 01 6f 00 | 02 {_QUERY_GRAPH_2} {_PREFIX_URN}",
    ST.INVALID_DATA_FORMAT)
bad("invalid_0x05_option_repeated_and_not_applicable",
    "SOLUTION MODIFIER twice on INSERT DATA: its first occurrence is already not applicable "
    "(0x05), found before the repetition (0x06).",
    f"01 82 0100 | 01 {TRIPLE} | 02 06 00 06 00", ST.INVALID_OPTION_TYPE)


# ---------------------------------------------------------------------------------------------
# Output

_LONG = 65536  # literal values at least this long are written as {"repeat", "count"}


def _compact(obj):
    """`obj` with very long periodic literal values written as {"repeat": unit, "count": n}."""
    if isinstance(obj, list):
        return [_compact(x) for x in obj]
    if not isinstance(obj, dict):
        return obj
    out = {k: _compact(v) for k, v in obj.items()}
    value = out.get("value")
    if out.get("type") == "literal" and isinstance(value, str) and len(value) >= _LONG:
        for size in range(1, 257):
            unit = value[:size]
            if len(value) % size == 0 and unit * (len(value) // size) == value:
                out["value"] = {"repeat": unit, "count": len(value) // size}
                break
    return out


def vector_json(vector: dict) -> dict:
    out = dict(vector)
    for key in ("message", "decoded"):
        if key in out:
            out[key] = _compact(to_json(out[key]))
    return out


def render(vector: dict) -> str:
    return json.dumps(vector_json(vector), sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def write(out_dir: Path = OUT) -> list[Path]:
    """(Re)write every vector file into `out_dir`; remove other `*.json` files there."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for vector in VECTORS:
        path = out_dir / f"{vector['name']}.json"
        text = render(vector)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
        written.append(path)
    for stale in set(out_dir.glob("*.json")) - set(written):
        stale.unlink()
    return written


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out_dir = Path(argv[0]) if argv else OUT
    paths = write(out_dir)
    valid = sum("error" not in v for v in VECTORS)
    print(f"{len(paths)} vectors ({valid} valid, {len(paths) - valid} invalid) in {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
