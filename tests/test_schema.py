"""The construct reference grammar (`ksp.reference.schema`) against the hot codec (`ksp.codec`).

For every message: construct parse → `to_model` equals `ksp.codec` decode, and construct
`build(parse(b)) == b` byte for byte. For invalid bytes: where the fast decoder raises
DecodeError, construct raises a construct error (from the grammar, or from `to_model` for the
rules that need the resolved prefix list: see `ksp.reference.schema`'s docstring).

Semantic rules construct does not express at all (nothing to test on the construct side):
none of the spec's DecodeError cases is missing. The rules checked in `to_model` instead of the
grammar are: a prefix index beyond the prefix list (in a REQ the list follows the data), a 0x06
literal with the datatype rdf:langString, and CREATE naming the default graph (both need the
resolved IRI).
"""
from __future__ import annotations

import glob
import json
import os

import pytest
from construct import ConstructError
from hypothesis import HealthCheck, given, settings

from ksp.reference import schema
from ksp.codec import TCP, UDP, Transport, decode_kp_message, decode_sib_message, encode
from ksp.codes import OWL, RDF, RDFS, Op, Opt, Status, Tx
from ksp.errors import DecodeError
from ksp.model import (
    Ack, AskResult, Behind, Bind, ConstructResult, Credentials, Options, Order, Request,
    Response, SelectResult, SolutionModifier,
)
from ksp.terms import (
    DEFAULT_GRAPH, RDF_LANGSTRING, XSD_BOOLEAN, XSD_DATETIME, XSD_DECIMAL, XSD_DOUBLE, XSD_FLOAT,
    XSD_INTEGER, IRI, BNode, Literal, Triple, Var,
)

import strategies

EX = "http://example.org/"
SENS = "http://example.org/sensors#"
LONG_IRI = IRI("urn:x:" + "long/" * 40)  # 206 bytes: a two-byte URI length
G1, G2 = IRI(EX + "graph1"), IRI(EX + "graph2")


def iri(local: str) -> IRI:
    return IRI(EX + local)


A, B, C, P, Q = iri("a"), iri("b"), iri("c"), iri("p"), iri("q")
TYPE = IRI(RDF + "type")
V0, V1, V2 = Var(0), Var(1), Var(2)

# One literal of every literal type (table 3.4), plus the edges of each.
LITERALS = [
    Literal("plain"),                                      # 0x00 string, 1-byte length
    Literal(""),                                           # empty string
    Literal("x" * 64),                                     # 2-byte string length
    Literal("ü" * 10_000),                                 # 3-byte string length (bytes ≠ chars)
    Literal("-5", XSD_INTEGER),                            # 0x01
    Literal("2147483647", XSD_INTEGER),
    Literal("-2147483648", XSD_INTEGER),
    Literal("21.5", XSD_FLOAT),                            # 0x02
    Literal("1e-05", XSD_FLOAT),
    Literal("NaN", XSD_FLOAT),
    Literal("-INF", XSD_FLOAT),
    Literal("-0.0", XSD_FLOAT),
    Literal("0.0", XSD_FLOAT),
    Literal("2026-11-21T12:00:00", XSD_DATETIME),          # 0x03
    Literal("true", XSD_BOOLEAN),                          # 0x04
    Literal("false", XSD_BOOLEAN),
    Literal.lang_string("hei maailma", "fi"),              # 0x05
    Literal.lang_string("x" * 70, "en-GB-oxendict"),
    Literal("21.50", XSD_FLOAT),                           # 0x06 (non-canonical lexical form)
    Literal("007", XSD_INTEGER),
    Literal("9999999999", XSD_INTEGER),
    Literal("3.14", XSD_DECIMAL),
    Literal("2026-11-21T12:00:00Z", XSD_DATETIME),
    Literal("v", EX + "customType"),                       # datatype with a prefix
    Literal("w", LONG_IRI),                                # datatype with a 2-byte length
    Literal("21.5", XSD_DOUBLE),                           # 0x07
    Literal("INF", XSD_DOUBLE),
    Literal("NaN", XSD_DOUBLE),
]

DATA = (
    Triple(A, TYPE, iri("Sensor")),                        # reserved word
    Triple(A, P, Literal("1", XSD_INTEGER)),               # Empty subject (same as previous)
    Triple(A, P, Literal("2", XSD_INTEGER)),               # Empty subject and predicate
    Triple(BNode("n1"), Q, BNode("n2")),                   # blank nodes
    Triple(LONG_IRI, IRI(RDFS + "label"), Literal("long")),
    Triple(IRI("urn:no-prefix"), IRI(OWL + "sameAs"), IRI("")),
) + tuple(Triple(B, P, lit) for lit in LITERALS)

PATTERN = (
    Triple(V0, TYPE, iri("Sensor")),
    Triple(V0, P, V1),
    Triple(V0, V2, Literal("x")),
    Triple(BNode("b"), Q, V1),
)
OPTIONAL = ((Triple(V0, Q, V2),), (Triple(V0, P, V1), Triple(V0, Q, BNode("z"))))

# Every token type of table 8.2.
FILTER_ALL_TOKENS = (
    V1, Literal("5", XSD_INTEGER), Op.GT,                                     # ?v1 > 5
    V1, Literal("2.5", XSD_FLOAT), Op.LT, Op.AND,
    V1, Literal("3.0", XSD_DOUBLE), Op.NE, Op.OR,                             # 0x18 operand
    V2, Literal("2026-11-21T12:00:00", XSD_DATETIME), Op.GE, Op.AND,
    V2, Literal("true", XSD_BOOLEAN), Op.EQ, Op.NOT, Op.OR,
    V1, V1, Op.ADD, V1, Op.SUB, V1, Op.MUL, V1, Op.DIV, Op.NEG, Literal("0", XSD_INTEGER), Op.LE,
    Op.AND,
    V0, iri("s1"), Op.EQ, Op.OR,                                              # URI operand
    V2, Literal("^ab"), Op.REGEX, Op.OR,
    V2, Literal("^ab"), Literal("i"), Op.REGEX_FLAGS, Op.OR,
    V2, Op.BOUND, Op.AND,
    V1, Literal.lang_string("x", "en"), Op.EQ, Op.OR,                        # 0x18 lang
)

ALL_PATTERN_OPTIONS = Options(
    query_graphs=(G1, DEFAULT_GRAPH),
    filters=(FILTER_ALL_TOKENS, (V0, Op.BOUND)),
    binds=(Bind(3, (V1, Literal("1", XSD_INTEGER), Op.ADD)),),
    max_response_size=1400,
    credentials=Credentials(bytes(range(16)), "sécret"),
)


def _requests() -> list[tuple[str, Request]]:
    R = Request
    out = [
        ("delete_data", R(Tx.DELETE_DATA, 1, delete=DATA[:3],
                          options=Options(delete_graphs=(G1, G2)))),
        ("insert_data", R(Tx.INSERT_DATA, 2, insert=DATA,
                          options=Options(insert_graphs=(G1,), max_response_size=8))),
        ("insert_data_non", R(Tx.INSERT_DATA, 0xFFFF, False, insert=DATA[:1])),
        ("insert_data_no_prefixes", R(Tx.INSERT_DATA, 3, insert=DATA[:4],
                                      options=Options(prefixes=()))),
        ("insert_data_manual_prefixes", R(Tx.INSERT_DATA, 3, insert=DATA[:4],
                                          options=Options(prefixes=(EX, SENS, "urn:")))),
        ("insert_data_empty", R(Tx.INSERT_DATA, 4, insert=())),
        ("update_data", R(Tx.UPDATE_DATA, 5, delete=DATA[:2], insert=DATA[2:5],
                          options=Options(delete_graphs=(G1,), insert_graphs=(G2,)))),
        ("delete", R(Tx.DELETE, 6, delete=PATTERN[:2], where=PATTERN,
                     options=Options(delete_graphs=(G1,), query_graphs=(G2,), optional=OPTIONAL,
                                     filters=((V1, Literal("3", XSD_INTEGER), Op.GT),),
                                     binds=(Bind(4, (V1,)),)))),
        ("insert", R(Tx.INSERT, 7, insert=(Triple(V0, P, Literal("x")),), where=PATTERN[:1],
                     options=Options(insert_graphs=(G2,), optional=OPTIONAL[:1]))),
        ("update", R(Tx.UPDATE, 8, delete=PATTERN[1:2], insert=(Triple(V0, P, V2),),
                     where=PATTERN, options=ALL_PATTERN_OPTIONS)),
        ("select", R(Tx.SELECT, 9, projection=3, where=PATTERN, optional=OPTIONAL,
                     options=ALL_PATTERN_OPTIONS._replace(
                         modifier=SolutionModifier(Order.ASC, 1, 10, 20, True)))),
        ("select_count", R(Tx.SELECT, 10, projection=0, where=(), optional=())),
        ("select_desc", R(Tx.SELECT, 11, projection=1, where=PATTERN[:1], optional=(),
                          options=Options(modifier=SolutionModifier(Order.DESC, 0)))),
        ("select_limit", R(Tx.SELECT, 11, projection=1, where=PATTERN[:1], optional=(),
                           options=Options(modifier=SolutionModifier(limit=0)))),
        ("select_offset_distinct", R(Tx.SELECT, 11, projection=1, where=PATTERN[:1], optional=(),
                                     options=Options(modifier=SolutionModifier(
                                         offset=65535, distinct=True)))),
        ("select_no_modifier_flags", R(Tx.SELECT, 11, projection=1, where=PATTERN[:1],
                                       optional=(), options=Options(
                                           modifier=SolutionModifier()))),
        ("ask", R(Tx.ASK, 12, where=PATTERN, optional=OPTIONAL[1:],
                  options=Options(filters=((V0, Op.BOUND),)))),
        ("construct", R(Tx.CONSTRUCT, 13, template=(Triple(V0, Q, V1),), where=PATTERN,
                        optional=(), options=Options(modifier=SolutionModifier(limit=5)))),
        ("terminate", R(Tx.TERMINATE, 14)),
        ("terminate_credentials", R(Tx.TERMINATE, 14, options=Options(
            credentials=Credentials(b"\xff" * 16, ""), max_response_size=0xFFFFFFFF))),
        ("reset", R(Tx.RESET, 15, False)),
        ("reset_echo_epoch", R(Tx.RESET, 15, options=Options(echo=b"\x2a", epoch=0xFFFFFFFF))),
        ("insert_data_credentials_epoch", R(Tx.INSERT_DATA, 15, insert=DATA[:1], options=Options(
            credentials=Credentials(bytes(16), "pw"), epoch=1))),
        ("create", R(Tx.CREATE, 16, graphs=(G1, G2, LONG_IRI))),
        ("drop", R(Tx.DROP, 17, graphs=(DEFAULT_GRAPH, G1))),
        ("copy", R(Tx.COPY, 18, source=DEFAULT_GRAPH, target=G1)),
        ("move", R(Tx.MOVE, 19, source=G1, target=G2)),
        ("add", R(Tx.ADD, 20, source=G2, target=DEFAULT_GRAPH,
                  options=Options(credentials=Credentials(bytes(16), "pw")))),
    ]
    for tx in (Tx.DELETE_PERSISTENT, Tx.INSERT_PERSISTENT, Tx.UPDATE_PERSISTENT,
               Tx.SELECT_PERSISTENT, Tx.ASK_PERSISTENT, Tx.CONSTRUCT_PERSISTENT):
        base = next(m for name, m in out if m.tx is tx.base)
        out.append((tx.name.lower(), base._replace(tx=tx, tid=100 + tx)))
    # A big graph: 255 triples, 255-entry-ish prefix list, long URIs.
    big = tuple(Triple(IRI(f"http://h{i}.example/x#s"), P, Literal(str(i), XSD_INTEGER))
                for i in range(255))
    out.append(("insert_data_255", Request(Tx.INSERT_DATA, 21, insert=big)))
    return out


ROWS = (
    (A, Literal("1", XSD_INTEGER), None),
    (BNode("r"), IRI(RDF + "type"), Literal.lang_string("x", "fi")),
    (LONG_IRI, Literal("d", EX + "dt"), Literal("1.5", XSD_DOUBLE)),
    (None, None, None),
)


def _responses() -> list[tuple[str, Response, Tx | None]]:
    construct = ConstructResult(DATA[:6])
    return [
        ("res_ok", Response(1), Tx.INSERT_DATA),
        ("res_ok_unknown", Response(1), None),
        ("res_error", Response(2, Status.INVALID_DATA_FORMAT), Tx.SELECT),
        ("res_reserved_status", Response(2, 0x25), Tx.ASK),
        ("ind_terminated", Response(3, Status.TERMINATED, indication=True, seq=9),
         Tx.SELECT_PERSISTENT),
        ("res_number_behind", Response(3, Status.NUMBER_BEHIND, Behind(0, 0xFFFFFFFF)), Tx.ASK),
        ("res_select", Response(4, result=SelectResult(3, ROWS, total=10)), Tx.SELECT),
        ("res_select_empty", Response(4, result=SelectResult(0, (), total=65535)), Tx.SELECT),
        ("res_select_prefixes", Response(4, result=SelectResult(3, ROWS, prefixes=(EX,))),
         Tx.SELECT),
        ("ind_select", Response(5, result=SelectResult(1, ((A,), (B,))), indication=True,
                                seq=65535), Tx.SELECT_PERSISTENT),
        ("res_ask_true", Response(6, result=AskResult(True)), Tx.ASK),
        ("ind_ask_false", Response(6, result=AskResult(False), indication=True, seq=0),
         Tx.ASK_PERSISTENT),
        ("res_construct", Response(7, result=construct), Tx.CONSTRUCT),
        ("ind_construct", Response(8, result=ConstructResult((), total=3), indication=True,
                                   seq=2), Tx.CONSTRUCT_PERSISTENT),
    ]


def _udp_responses() -> list[tuple[str, Response, Tx | None]]:
    """RESs naming their request's epoch: over UDP only (§15.6)."""
    return [
        ("res_ok_epoch", Response(1, epoch=1), Tx.INSERT_DATA),
        ("res_reserved_status_epoch", Response(2, 0x3F, epoch=0xFFFFFFFF), Tx.ASK),
        ("res_echo_required_epoch", Response(2, Status.ECHO_REQUIRED, b"\x2a", epoch=7), Tx.ASK),
        ("res_select_epoch", Response(4, result=SelectResult(3, ROWS, prefixes=(EX,)),
                                      epoch=0x10000), Tx.SELECT),
    ]


REQUESTS = _requests()
RESPONSES = _responses()
UDP_RESPONSES = _udp_responses()
ACKS = [("ack", Ack(5, 7)), ("ack_bare", Ack(5)), ("ack_max", Ack(0xFFFF, 0xFFFF))]


def _cases():
    """(id, bytes, transport, direction, answers) of every catalogue message."""
    for transport in (UDP, TCP):
        for name, msg in REQUESTS:
            yield f"{name}-{transport.value}", encode(msg, transport), transport, "kp_to_sib", None
        for name, msg, answers in RESPONSES + (UDP_RESPONSES if transport is UDP else []):
            yield (f"{name}-{transport.value}", encode(msg, transport), transport, "sib_to_kp",
                   answers)
    for name, msg in ACKS:
        yield name, encode(msg, UDP), UDP, "kp_to_sib", None


CASES = list(_cases())


def codec_decode(buf: bytes, transport, direction: str, answers=None):
    if direction == "kp_to_sib":
        return decode_kp_message(buf, transport)
    return decode_sib_message(buf, transport, answers)


def schema_parse(buf: bytes, transport, direction: str, answers=None):
    if direction == "kp_to_sib":
        return schema.parse_request(buf, transport)
    return schema.parse_response(buf, transport, answers)


def schema_build(container, transport, direction: str, answers=None) -> bytes:
    if direction == "kp_to_sib":
        return schema.build_request(container, transport)
    return schema.build_response(container, transport, answers)


def check_valid(buf: bytes, transport, direction: str, answers=None):
    expected = codec_decode(buf, transport, direction, answers)
    container = schema_parse(buf, transport, direction, answers)
    assert schema.to_model(container) == expected
    assert schema_build(container, transport, direction, answers) == buf
    return container, expected


@pytest.mark.parametrize("name,buf,transport,direction,answers", CASES,
                         ids=[c[0] for c in CASES])
def test_catalogue(name, buf, transport, direction, answers):
    check_valid(buf, transport, direction, answers)


def test_catalogue_covers_the_spec():
    """Every transaction type, option, literal type, length width, result form and ACK."""
    txs = {m.tx for _, m in REQUESTS}
    assert txs == set(Tx)
    opts, lits, uri_widths, str_widths, forms = set(), set(), set(), set(), set()

    def walk(node, parent=None):
        if isinstance(node, dict):
            if "littype" in node:
                lits.add(node["littype"])
            if "option" in node:
                opts.add(node["option"])
            if "local" in node:
                uri_widths.add(1 if node["length"] < 128 else 2)
            if "string" in node:
                n = node["length"]
                str_widths.add(1 if n < 64 else 2 if n < 16384 else 3 if n < 4194304 else 4)
            for k, v in node.items():
                if not str(k).startswith("_"):
                    walk(v, node)
        elif isinstance(node, list):
            for v in node:
                walk(v, parent)

    for _, buf, transport, direction, answers in CASES:
        c = schema_parse(buf, transport, direction, answers)
        walk(c)
        if direction == "sib_to_kp" and c.data is not None:
            forms.add(Tx(answers).base)
    assert opts == set(Opt)
    assert lits == set(range(8))
    assert uri_widths == {1, 2}
    assert str_widths == {1, 2, 3}  # the 4-byte width: test_string_length_four_bytes
    assert forms == {Tx.SELECT, Tx.ASK, Tx.CONSTRUCT}


def test_string_length_four_bytes():
    text = "y" * (4 * 1024 * 1024 + 3)
    msg = Request(Tx.INSERT_DATA, 1, insert=(Triple(A, P, Literal(text)),))
    for transport in (UDP, TCP):
        container, _ = check_valid(encode(msg, transport), transport, "kp_to_sib")
        assert container.data.insert[0].o.payload.length == len(text)


def test_raw_container_is_wire_level():
    msg = Request(Tx.INSERT_DATA, 7, True, insert=(Triple(A, TYPE, Literal("5", XSD_INTEGER)),
                                                   Triple(A, P, BNode("n"))),
                  options=Options(prefixes=(EX,)))
    c = schema.parse_request(encode(msg, UDP), UDP)
    assert c.header.type == {"tx": Tx.INSERT_DATA, "con": True}
    t0, t1 = c.data.insert
    assert (t0.type.st, t0.type.pt, t0.type.ot) == (1, 2, 4)
    assert (t0.s.prefix, t0.s.local) == (1, "a")
    assert t0.p.word == 0
    assert (t0.o.littype, t0.o.payload) == (1, 5)
    assert (t1.type.st, t1.type.pt, t1.type.ot) == (0, 1, 5) and t1.s is None
    assert t1.o.label == "n"
    assert c.options[0].option == 0 and c.options[0].body[0].local == EX


def test_build_from_hand_written_container():
    """Containers need no length or count fields: construct rebuilds them (incl. TCP Length)."""
    container = {
        "header": {"type": {"tx": Tx.COPY, "con": False}, "tid": 258},
        "data": {"source": {"prefix": 0, "local": ""},
                 "target": {"prefix": 1, "local": "g"}},
        "options": [{"option": 0, "body": [{"local": EX}]}],
    }
    udp = schema.build_request(container, UDP)
    assert udp.hex() == ("01 14 0201" "0000" "01 01 67" "01 00 01 00 13".replace(" ", "")
                         + EX.encode().hex())
    tcp = schema.build_request(container, TCP)
    assert tcp[4:8] == len(tcp).to_bytes(4, "little") and tcp[8:] == udp[4:]
    assert decode_kp_message(tcp, TCP) == Request(Tx.COPY, 258, False, source="", target=EX + "g",
                                                  options=Options(prefixes=(EX,)))


@pytest.mark.parametrize("length,encoded", [(0, "00"), (127, "7f"), (128, "8001"),
                                            (300, "ac02"), (32767, "ffff")])
def test_uri_length(length, encoded):
    assert schema.UriLength.build(length).hex() == encoded
    assert schema.UriLength.parse(bytes.fromhex(encoded)) == length


@pytest.mark.parametrize("length,encoded", [(0, "00"), (63, "3f"), (64, "4001"),
                                            (300, "6c04"), (16383, "7fff"), (16384, "800001"),
                                            (4194303, "bfffff"), (4194304, "c0000001"),
                                            (2**30 - 1, "ffffffff")])
def test_string_length(length, encoded):
    assert schema.StringLength.build(length).hex() == encoded
    assert schema.StringLength.parse(bytes.fromhex(encoded)) == length


@pytest.mark.parametrize("field,encoded", [
    (schema.UriLength, "8000"), (schema.UriLength, "ff00"),
    (schema.StringLength, "4000"), (schema.StringLength, "7f00"), (schema.StringLength, "80ff00"),
    (schema.StringLength, "c0ffff00"),
])
def test_lengths_reject_non_minimal(field, encoded):
    with pytest.raises(schema.NonMinimalError):
        field.parse(bytes.fromhex(encoded))


def test_bit_fields_low_bits_first():
    assert schema.RequestType.parse(b"\x82") == {"tx": 2, "con": True}
    assert schema.TripleType.build({"st": 1, "pt": 2, "ot": 4}) == bytes((1 | 2 << 3 | 4 << 5,))
    assert schema.ModifierFlags.parse(b"\x1d") == {"order": 1, "limit": True, "offset": True,
                                                   "distinct": True, "reserved": 0}


# ---------------------------------------------------------------------------------------------
# Invalid messages: the codec raises DecodeError, construct raises a construct error.

INSERT = encode(Request(Tx.INSERT_DATA, 1, insert=(Triple(A, P, Literal("x")),),
                        options=Options(prefixes=())), UDP)
# 01 82 0100 | 01 | 81 | 00 13 http://example.org/a | 00 13 .../p | 00 00 01 78 | 00 (OC)
SEL_RES = encode(Response(1, result=SelectResult(1, ((A,),))), UDP)


def _hex(*parts: str) -> str:
    return "".join(parts).replace(" ", "")


def _uri(text: str, prefix: int = 0) -> str:
    raw = text.encode()
    return f"{prefix:02x}{len(raw):02x}{raw.hex()}"


_U = _uri("u:a")
INVALID: list[tuple[str, str, str, str, Tx | None, Status]] = [
    # (id, hex, transport, direction, answers, status the codec gives)
    ("version_2", "02820100" + INSERT.hex()[8:], "udp", "kp_to_sib", None,
     Status.VERSION_NOT_SUPPORTED),
    ("tx_0x17", "01170100 00", "udp", "kp_to_sib", None, Status.INVALID_TRANSACTION_TYPE),
    ("tx_0x7f_con", "01ff0100 00", "udp", "kp_to_sib", None, Status.INVALID_TRANSACTION_TYPE),
    ("type_0x80", "01800100", "udp", "kp_to_sib", None, Status.INVALID_MESSAGE_TYPE),
    ("ack_over_tcp", "0100010008000000", "tcp", "kp_to_sib", None, Status.INVALID_MESSAGE_TYPE),
    ("ack_3_bytes", "0100010001", "udp", "kp_to_sib", None, Status.INVALID_DATA_FORMAT),
    ("ack_trailing", "010001000100ff", "udp", "kp_to_sib", None, Status.INVALID_DATA_FORMAT),
    ("short_udp", "0182", "udp", "kp_to_sib", None, Status.INVALID_DATA_FORMAT),
    ("short_tcp", "01820100", "tcp", "kp_to_sib", None, Status.INVALID_DATA_FORMAT),
    ("tcp_length_short", "019101000800000000", "tcp", "kp_to_sib", None,
     Status.INVALID_DATA_FORMAT),
    ("tcp_length_long", "019101000a00000000", "tcp", "kp_to_sib", None,
     Status.INVALID_DATA_FORMAT),
    ("tcp_length_lt_8", "0191010004000000", "tcp", "kp_to_sib", None, Status.INVALID_DATA_FORMAT),
    ("no_oc", "01910100", "udp", "kp_to_sib", None, Status.INVALID_OPTION_FORMAT),
    ("trailing_after_options", "0191010000ff", "udp", "kp_to_sib", None,
     Status.INVALID_OPTION_FORMAT),
    ("uri_len_non_minimal", _hex("01820100 01 09", "00 8300 753a61", _U, "000000", "00"),
     "udp", "kp_to_sib", None, Status.INVALID_DATA_FORMAT),
    ("str_len_non_minimal", _hex("01820100 01 81", _U, _U, "00 4100 78", "00"), "udp",
     "kp_to_sib", None, Status.INVALID_DATA_FORMAT),
    ("invalid_utf8", _hex("01820100 01 09", "0003 753aff", _U, "0000", "00"), "udp",
     "kp_to_sib", None, Status.INVALID_DATA_FORMAT),
    ("truncated_uri", _hex("01820100 01 09", "0005 753a"), "udp", "kp_to_sib", None,
     Status.INVALID_DATA_FORMAT),
    ("var_in_data", _hex("01820100 01 69", "0300", _U, "0000", "00"), "udp", "kp_to_sib", None,
     Status.INVALID_DATA_FORMAT),
    ("var_in_update_data", _hex("01830100 00 01 2b", _U, _U, "01", "00"), "udp", "kp_to_sib",
     None, Status.INVALID_DATA_FORMAT),
    ("literal_subject", _hex("01850100 01 8c", "0000", "00 0078", "0001", "00 00", "00"), "udp",
     "kp_to_sib", None, Status.INVALID_DATA_FORMAT),
    ("object_type_6", _hex("01850100 01 c9", _U, _U, "00 00", "00"), "udp", "kp_to_sib", None,
     Status.INVALID_DATA_FORMAT),
    ("empty_in_first_triple", _hex("01820100 01 08", _U, "00"), "udp", "kp_to_sib", None,
     Status.INVALID_DATA_FORMAT),
    ("reserved_word_0x0e", _hex("01820100 01 51", _U, "0e", "0000", "00"), "udp", "kp_to_sib",
     None, Status.INVALID_DATA_FORMAT),
    ("literal_type_8", _hex("01820100 01 89", _U, _U, "08", "00"), "udp", "kp_to_sib", None,
     Status.INVALID_DATA_FORMAT),
    ("boolean_2", _hex("01820100 01 89", _U, _U, "04 02", "00"), "udp", "kp_to_sib", None,
     Status.INVALID_DATA_FORMAT),
    ("datetime_month_13", _hex("01820100 01 89", _U, _U, "03",
                               b"2026-13-21T12:00:00".hex(), "00"), "udp", "kp_to_sib", None,
     Status.INVALID_DATA_FORMAT),
    ("lang_tag_empty", _hex("01820100 01 89", _U, _U, "05 00 0178", "00"), "udp", "kp_to_sib",
     None, Status.INVALID_DATA_FORMAT),
    ("lang_tag_space", _hex("01820100 01 89", _U, _U, "05 02 6520 0178", "00"), "udp",
     "kp_to_sib", None, Status.INVALID_DATA_FORMAT),
    ("typed_langstring", _hex("01820100 01 89", _U, _U, "06", _uri(RDF_LANGSTRING), "0178", "00"),
     "udp", "kp_to_sib", None, Status.INVALID_DATA_FORMAT),
    ("typed_empty_datatype", _hex("01820100 01 89", _U, _U, "06 0000 0178", "00"), "udp",
     "kp_to_sib", None, Status.INVALID_DATA_FORMAT),
    ("bnode_empty_label", _hex("01820100 01 a9", _U, _U, "00", "00"), "udp", "kp_to_sib", None,
     Status.INVALID_DATA_FORMAT),
    ("prefix_beyond_list", _hex("01820100 01 29", _uri("a", 2), _U, _U, "01 00 01", _uri("u:"),),
     "udp", "kp_to_sib", None, Status.INVALID_DATA_FORMAT),
    ("prefix_without_list", _hex("01820100 01 29", _uri("a", 1), _U, _U, "00"), "udp",
     "kp_to_sib", None, Status.INVALID_DATA_FORMAT),
    ("gc_0", "0192010000 00", "udp", "kp_to_sib", None, Status.INVALID_DATA_FORMAT),
    ("create_default_graph", _hex("01920100 01 0000", "00"), "udp", "kp_to_sib", None,
     Status.INVALID_DATA_FORMAT),
    ("empty_prefix_entry", _hex("01920100 01", _uri("", 1), "01 00 01", _uri("")),
     "udp", "kp_to_sib", None, Status.INVALID_OPTION_FORMAT),
    ("empty_result_prefix_entry", "01000100 01 0000 0000 0000 00", "udp", "sib_to_kp",
     Tx.SELECT, Status.INVALID_DATA_FORMAT),
    ("typed_langstring_via_prefix_in_filter",
     _hex("01880100 00 00 02 05 01 01 18 06", _uri("langString", 1), "0178", "00 01", _uri(RDF)),
     "udp", "kp_to_sib", None, Status.INVALID_OPTION_FORMAT),
    ("option_type_0x0c", "0191010001 0c", "udp", "kp_to_sib", None, Status.INVALID_OPTION_TYPE),
    ("epoch_0", "0191010001 0b 00000000", "udp", "kp_to_sib", None, Status.INVALID_OPTION_FORMAT),
    ("epoch_truncated", "0191010001 0b 0100", "udp", "kp_to_sib", None,
     Status.INVALID_OPTION_FORMAT),
    ("epoch_on_terminate", "0190010001 0b 01000000", "udp", "kp_to_sib", None,
     Status.INVALID_OPTION_TYPE),
    ("option_not_applicable", "0191010001 00 01" + _uri("u:"), "udp", "kp_to_sib", None,
     Status.INVALID_OPTION_TYPE),
    ("modifier_on_ask", _hex("01880100 00 00", "01 06 00"), "udp", "kp_to_sib", None,
     Status.INVALID_OPTION_TYPE),
    ("option_repeated", "0191010002 08 00000000 08 00000000", "udp", "kp_to_sib", None,
     Status.INVALID_OPTION_FORMAT),
    ("option_count_0", "0181010000 01 01 00", "udp", "kp_to_sib", None,
     Status.INVALID_OPTION_FORMAT),
    ("option_truncated", "0191010001 08 0000", "udp", "kp_to_sib", None,
     Status.INVALID_OPTION_FORMAT),
    ("prefix_entry_with_index", _hex("01820100 00", "01 00 01", _uri("u:", 1)), "udp",
     "kp_to_sib", None, Status.INVALID_OPTION_FORMAT),
    ("modifier_reserved_bit", _hex("01870100 00 00 00", "01 06 20"), "udp", "kp_to_sib", None,
     Status.INVALID_OPTION_FORMAT),
    ("modifier_order_3", _hex("01870100 00 00 00", "01 06 03 00"), "udp", "kp_to_sib", None,
     Status.INVALID_OPTION_FORMAT),
    ("rpn_empty", _hex("01880100 00 00", "01 05 01 00"), "udp", "kp_to_sib", None,
     Status.INVALID_OPTION_FORMAT),
    ("rpn_underflow", _hex("01880100 00 00", "01 05 01 02 0500 07"), "udp", "kp_to_sib", None,
     Status.INVALID_OPTION_FORMAT),
    ("rpn_two_values", _hex("01880100 00 00", "01 05 01 02 0500 0501"), "udp", "kp_to_sib", None,
     Status.INVALID_OPTION_FORMAT),
    ("rpn_bound_after_literal", _hex("01880100 00 00", "01 05 01 02 0401 17"), "udp",
     "kp_to_sib", None, Status.INVALID_OPTION_FORMAT),
    ("token_0xff", _hex("01880100 00 00", "01 05 01 01 ff"), "udp", "kp_to_sib", None,
     Status.INVALID_OPTION_FORMAT),
    ("option_prefix_beyond_list", _hex("01850100 00 00", "01 03 01", _uri("g", 1)), "udp",
     "kp_to_sib", None, Status.INVALID_OPTION_FORMAT),
    ("credentials_short", "0191010001 09" + "00" * 15, "udp", "kp_to_sib", None,
     Status.INVALID_OPTION_FORMAT),
    # RES / IND
    ("res_error_with_data", "01040100 00", "udp", "sib_to_kp", Tx.SELECT,
     Status.INVALID_DATA_FORMAT),
    ("res_data_unknown_request", "01000100 01", "udp", "sib_to_kp", None,
     Status.INVALID_DATA_FORMAT),
    ("res_data_for_update", "01000100 01", "udp", "sib_to_kp", Tx.INSERT,
     Status.INVALID_DATA_FORMAT),
    ("res_select_missing_data", "01000100", "udp", "sib_to_kp", Tx.SELECT,
     Status.INVALID_DATA_FORMAT),
    ("ask_2", "01000100 02", "udp", "sib_to_kp", Tx.ASK, Status.INVALID_DATA_FORMAT),
    ("ask_trailing", "01000100 0100", "udp", "sib_to_kp", Tx.ASK, Status.INVALID_DATA_FORMAT),
    ("rc_gt_trc", "01000100 00 0100 0200 00", "udp", "sib_to_kp", Tx.SELECT,
     Status.INVALID_DATA_FORMAT),
    ("row_variable", "01000100 00 0100 0100 01 0300", "udp", "sib_to_kp", Tx.SELECT,
     Status.INVALID_DATA_FORMAT),
    ("row_type_6", "01000100 00 0100 0100 01 06", "udp", "sib_to_kp", Tx.SELECT,
     Status.INVALID_DATA_FORMAT),
    ("row_prefix_beyond", _hex("01000100 00 0100 0100 01 01", _uri("a", 1)), "udp", "sib_to_kp",
     Tx.SELECT, Status.INVALID_DATA_FORMAT),
    ("construct_var", _hex("01000100 00 0100 0100 69 0300", _U, _U), "udp", "sib_to_kp",
     Tx.CONSTRUCT, Status.INVALID_DATA_FORMAT),
    ("construct_empty_first", _hex("01000100 00 0100 0100 28", _U, _U), "udp", "sib_to_kp",
     Tx.CONSTRUCT, Status.INVALID_DATA_FORMAT),
    ("ind_short_header", "01800100 01", "udp", "sib_to_kp", None, Status.INVALID_DATA_FORMAT),
    ("res_version_0", "00000100", "udp", "sib_to_kp", None, Status.VERSION_NOT_SUPPORTED),
    ("res_tcp_length", "0100010009000000", "tcp", "sib_to_kp", None, Status.INVALID_DATA_FORMAT),
    ("number_behind_no_data", "01100100", "udp", "sib_to_kp", Tx.SELECT,
     Status.INVALID_DATA_FORMAT),
    ("number_behind_7_bytes", "01100100 00000000 010000", "udp", "sib_to_kp", None,
     Status.INVALID_DATA_FORMAT),
    ("number_behind_9_bytes", "01100100 00000000 01000000 00", "udp", "sib_to_kp", None,
     Status.INVALID_DATA_FORMAT),
    ("ind_number_behind_with_data", "01900100 0100 00000000 01000000", "udp", "sib_to_kp",
     Tx.SELECT_PERSISTENT, Status.INVALID_DATA_FORMAT),
    ("res_epoch_0", "01400100 00000000", "udp", "sib_to_kp", Tx.INSERT_DATA,
     Status.INVALID_DATA_FORMAT),
    ("res_epoch_truncated", "01400100 010000", "udp", "sib_to_kp", Tx.INSERT_DATA,
     Status.INVALID_DATA_FORMAT),
    ("res_epoch_tcp", "0140010008000000", "tcp", "sib_to_kp", Tx.INSERT_DATA,
     Status.INVALID_DATA_FORMAT),
    ("res_epoch_tcp_with_field", "014001000c000000 01000000", "tcp", "sib_to_kp",
     Tx.INSERT_DATA, Status.INVALID_DATA_FORMAT),
    ("ind_epoch", "01c00100 0100 01000000 01", "udp", "sib_to_kp", Tx.ASK_PERSISTENT,
     Status.INVALID_DATA_FORMAT),
    ("number_behind_epoch", "01500100 01000000 01000000 02000000", "udp", "sib_to_kp",
     Tx.INSERT_DATA, Status.INVALID_DATA_FORMAT),
    ("ind_number_behind", "01900100 0100", "udp", "sib_to_kp", Tx.ASK_PERSISTENT,
     Status.INVALID_DATA_FORMAT),
    ("ind_echo_required_tcp", "018f010009000000 00", "tcp", "sib_to_kp", Tx.ASK_PERSISTENT,
     Status.INVALID_DATA_FORMAT),
    ("res_trailing_truncated", SEL_RES.hex()[:-2], "udp", "sib_to_kp", Tx.SELECT,
     Status.INVALID_DATA_FORMAT),
]


# Invalid messages the fast codec accepts (disagreements, reported; the construct side must
# still reject them). Empty now: the two found while writing this (rdf:langString datatype via
# a prefix; CREATE of "" + "" via an empty prefix entry) were fixed in codec and spec (§7.2).
CODEC_ACCEPTS: dict[str, str] = {}


@pytest.mark.parametrize("name,hexstr,transport,direction,answers,status", INVALID,
                         ids=[c[0] for c in INVALID])
def test_invalid(name, hexstr, transport, direction, answers, status):
    buf = bytes.fromhex(hexstr.replace(" ", ""))
    transport = Transport(transport)  # the codec compares `transport is TCP`
    with pytest.raises(ConstructError):
        schema.to_model(schema_parse(buf, transport, direction, answers))
    try:
        codec_decode(buf, transport, direction, answers)
    except DecodeError as exc:
        assert exc.status == status
    else:
        assert name in CODEC_ACCEPTS, f"the fast codec accepts {name}"
        pytest.xfail("the fast codec accepts this (reported): " + CODEC_ACCEPTS[name])


# ---------------------------------------------------------------------------------------------
# Differential tests: generated messages, truncations and byte mutations.

def _accepts(buf, transport, direction, answers):
    """(codec result or DecodeError, construct result or ConstructError)."""
    try:
        fast = codec_decode(buf, transport, direction, answers)
    except DecodeError as exc:
        fast = exc
    try:
        ref = schema.to_model(schema_parse(buf, transport, direction, answers))
    except ConstructError as exc:
        ref = exc
    return fast, ref


def _differential(buf, transport, direction, answers):
    fast, ref = _accepts(buf, transport, direction, answers)
    if isinstance(fast, DecodeError) or isinstance(ref, ConstructError):
        assert isinstance(fast, DecodeError) and isinstance(ref, ConstructError), (
            f"{buf.hex()} over {transport.value}: codec {fast!r}, construct {ref!r}")
    else:
        assert fast == ref, buf.hex()
        # Every accepted input, canonical or not, builds back to the same bytes.
        container = schema_parse(buf, transport, direction, answers)
        assert schema_build(container, transport, direction, answers) == buf, buf.hex()


def _mutations(buf: bytes):
    for i in range(len(buf)):
        yield buf[:i]
        for value in {buf[i] ^ 0x80, buf[i] ^ 0x01, buf[i] ^ 0x40, 0x00, 0xFF}:
            yield buf[:i] + bytes((value,)) + buf[i + 1:]
    yield buf + b"\x00"


SMALL_CASES = [c for c in CASES if len(c[1]) < 400]


@pytest.mark.slow
@pytest.mark.parametrize("name,buf,transport,direction,answers", SMALL_CASES,
                         ids=[c[0] for c in SMALL_CASES])
def test_mutations_agree(name, buf, transport, direction, answers):
    for mutated in _mutations(buf):
        _differential(mutated, transport, direction, answers)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(strategies.messages(small=True))
def test_generated_messages(msg_answers):
    msg, answers = msg_answers
    for transport in (UDP, TCP) if not isinstance(msg, Ack) else (UDP,):
        buf = encode(strategies.over(msg, transport), transport)
        direction = "sib_to_kp" if isinstance(msg, Response) else "kp_to_sib"
        check_valid(buf, transport, direction, answers)
        step = max(1, len(buf) // 16)  # truncations: every one of short messages, 16 of long
        for cut in range(0, len(buf), step):
            _differential(buf[:cut], transport, direction, answers)


# ---------------------------------------------------------------------------------------------
# Golden vectors (tests/vectors/*.json), when present.

VECTOR_DIR = os.path.join(os.path.dirname(__file__), "vectors")
VECTORS = sorted(glob.glob(os.path.join(VECTOR_DIR, "*.json")))


def _load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _vector_answers(v):
    answers = v.get("answers")
    if answers is None and "message" in v and "answers" in v["message"]:
        answers = v["message"]["answers"]
    if isinstance(answers, str):
        return Tx[answers]
    return None if answers is None else Tx(answers)


@pytest.mark.skipif(not VECTORS, reason="no golden vectors yet")
@pytest.mark.parametrize("path", VECTORS, ids=[os.path.basename(p) for p in VECTORS])
def test_vector(path):
    from ksp.reference.jsonmodel import from_json

    v = _load(path)
    buf = bytes.fromhex(v["hex"])
    transport = UDP if v["transport"] == "udp" else TCP
    answers = _vector_answers(v)
    if "error" in v:
        with pytest.raises(ConstructError):
            schema.to_model(schema_parse(buf, transport, v["direction"], answers))
        try:  # (the status itself is tests/test_vectors.py's business)
            codec_decode(buf, transport, v["direction"], answers)
        except DecodeError:
            pass
        else:
            pytest.xfail("the fast codec accepts this invalid vector (reported)")
        return
    _, decoded = check_valid(buf, transport, v["direction"], answers)
    # Vectors cut by MAX RESPONSE SIZE give the message as sent in "decoded".
    assert decoded == from_json(v.get("decoded", v["message"]))
