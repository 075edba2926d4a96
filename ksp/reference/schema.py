"""The KSP wire format as a declarative construct grammar (docs/wire-format.md).

This is the **reference grammar**: every layout of the spec declared once, used both ways
(``parse`` and ``build``), and tested against the hand-written hot codec (`ksp.codec`), which
exists because construct is too slow for the hot path. Containers are raw wire-level values:
prefix indexes and local parts (not resolved IRIs), member type codes, literal type codes, and
the length fields as read (rebuilt, never trusted, when building). `to_model` turns a parsed
container into the `ksp.model` message `ksp.codec` decodes, resolving prefixes and Empty members
as §4.1, §5.0 and R6 say.

Layout of this module, in the order of the spec: primitives (§1, §4.1, §4.2, §2.1), fields
(§4), triples and graphs (§5.0), request data (§5), options (§7, §8), result data (§6),
headers and whole messages (§2), entry points, `to_model`.

What the grammar itself rejects: every structural error, non-minimal lengths, invalid code
points, invalid UTF-8, bad dateTimes / language tags / booleans, empty prefix entries and
blank node labels, Empty in a first triple,
Variables where §3.3/§5.2/§6 forbid them, Literal subjects, count-0 lists, repeated or
inapplicable options, malformed RPN, RC > TRC, trailing bytes, a wrong TCP Length.
What only `to_model` can check (it needs the resolved prefix list, which in a REQ follows the
data): prefix indexes beyond the list, an rdf:langString datatype on a 0x06 literal, the
default graph named by CREATE, and an empty datatype IRI (which the spec does not mention,
but `ksp.codec` rejects). `to_model` raises `ResolutionError` (a construct `ValidationError`)
for those.
"""
from __future__ import annotations

import io
import math
import struct

from construct.core import singleton
from construct import (
    Adapter, Array, Bytes, Check, Const, Construct, Container, Float32l, Float64l, If, Int8ul,
    Int16ul, Int32sl, Int32ul, Optional, Pass, PrefixedArray, Rebuild, SizeofError, Struct,
    Switch, Terminated, ExprValidator, FocusedSeq, IntegerError, StringError, ValidationError,
    evaluate, len_, stream_read, stream_tell, stream_write, this,
)

from ..codes import (
    ECHO_MAX, OPTION_APPLIES, RESERVED_WORDS, TOKEN_LITERAL, TOKEN_URI, TOKEN_VARIABLE, VERSION,
    LiteralType, Member, Op, Opt, Status, Tx,
)
from ..layout import LITERAL_FORMS, MEMBER_TYPES, OPTION_FIELDS, REQUEST_FIELDS, Body
from ..literals import is_datetime19, is_lang_tag
from ..model import (
    Ack, AskResult, Behind, Bind, Call, ConstructResult, Credentials, Options, Order, Request,
    Response, SelectResult, SolutionModifier,
)
from ..terms import (
    RDF_LANGSTRING, XSD_BOOLEAN, XSD_DATETIME, XSD_DOUBLE, XSD_FLOAT, XSD_INTEGER, XSD_STRING,
    BNode, IRI, Literal, Triple, Var, double_lexical,
)

__all__ = [
    "BitFields", "UriLength", "StringLength", "Text", "Invalid", "NonMinimalError",
    "ResolutionError", "Counted",
    "RequestType", "ResponseType", "TripleType", "ModifierFlags",
    "UriField", "PrefixEntry", "KString", "DateTime19", "Boolean", "LiteralField", "BNodeLabel",
    "TripleField", "DataTripleField", "ResultTriple", "Graph", "DataGraph", "REQUEST_DATA",
    "Token", "Expression", "SolutionModifierBody", "CredentialsBody", "Option", "OptionList",
    "SelectData", "AskData", "ConstructData", "BehindData", "ResultTerm",
    "UdpRequestHeader", "ResEpoch", "UdpResHeader", "UdpIndHeader", "UdpResponseHeader",
    "AckHeader", "TcpRequestHeader", "TcpResponseHeader", "AckData", "AckMessage",
    "RequestUdp", "RequestTcp", "ResponseUdp", "ResponseTcp",
    "grammar", "parse_request", "parse_response", "build_request", "build_response", "to_model",
]


class NonMinimalError(ValidationError):
    """A length field not in its shortest form (§1 Canonical encoding, §4.1, §4.2)."""


class ResolutionError(ValidationError):
    """A container that parses but does not resolve to a message (see the module docstring)."""


# -------------------------------------------------------------------------------------------
# Primitives


class BitFields(Construct):
    r"""One byte of sub-byte fields, **the field listed first in the least significant bits**
    (§1 Bit numbering, R1): the one rule for the type/status byte, the triple type byte and the
    solution-modifier flags. Parses to a Container; 1-bit fields are bools.

    ``BitFields(("st", 3), ("pt", 2), ("ot", 3))``::

         bit:  7   6   5   4   3   2   1   0
             +-----------+-------+-----------+
             |    ot     |  pt   |    st     |
             +-----------+-------+-----------+
    """

    def __init__(self, *fields: tuple[str, int]):
        super().__init__()
        if sum(width for _, width in fields) != 8:
            raise ValueError("BitFields must fill exactly one byte")
        self.fields = fields
        layout, shift = [], 0
        for name, width in fields:
            layout.append((name, shift, (1 << width) - 1, width == 1))
            shift += width
        self.layout = tuple(layout)

    def _parse(self, stream, context, path):
        byte = stream_read(stream, 1, path)[0]
        return Container((name, bool(byte >> shift & 1) if flag else byte >> shift & mask)
                         for name, shift, mask, flag in self.layout)

    def _build(self, obj, stream, context, path):
        byte = 0
        for name, shift, mask, _ in self.layout:
            value = int(obj.get(name, 0))
            if not 0 <= value <= mask:
                raise IntegerError(f"{name} = {value} does not fit {mask.bit_length()} bits",
                                   path=path)
            byte |= value << shift
        stream_write(stream, bytes((byte,)), 1, path)
        return obj

    def _sizeof(self, context, path):
        return 1


@singleton
class UriLength(Construct):
    r"""URI length (§4.1, R2): 1 or 2 bytes; bit 7 of the first byte (W) gives the width.

    ::

         byte 0                        byte 1 (only when W = 1)
        +---+----------------------+  +-----------------------------+
        | W | l6 l5 l4 l3 l2 l1 l0 |  | l14 l13 l12 l11 l10 l9 l8 l7 |
        +---+----------------------+  +-----------------------------+
          7   6                  0     7                           0

        W = 0: 0 … 127        W = 1: 128 … 32 767 (MUST NOT be used below 128)
        length = (b0 & 0x7f) | b1 << 7

    Parsing rejects the non-minimal two-byte form (`NonMinimalError`).
    """

    def _parse(self, stream, context, path):
        b0 = stream_read(stream, 1, path)[0]
        if b0 < 0x80:
            return b0
        length = (b0 & 0x7F) | stream_read(stream, 1, path)[0] << 7
        if length < 0x80:
            raise NonMinimalError(f"two-byte URI length {length} < 128", path=path)
        return length

    def _build(self, obj, stream, context, path):
        if not 0 <= obj <= 0x7FFF:
            raise IntegerError(f"URI length {obj} outside 0..32767", path=path)
        data = bytes((obj,)) if obj < 0x80 else bytes((0x80 | obj & 0x7F, obj >> 7))
        stream_write(stream, data, len(data), path)
        return obj

    def _sizeof(self, context, path):
        raise SizeofError("a URI length is 1 or 2 bytes", path=path)


@singleton
class StringLength(Construct):
    r"""String length (§4.2, R3): 1–4 bytes; bits 7–6 of the first byte (W) count the bytes
    that follow, which carry the length's high bits little endian.

    ::

         byte 0                 byte 1          byte 2          byte 3
        +-------+-----------+  +-------------+ +-------------+ +-------------+
        |   W   |  l5 … l0  |  |  l13 … l6   | |  l21 … l14  | |  l29 … l22  |
        +-------+-----------+  +-------------+ +-------------+ +-------------+
          7   6   5       0     (W ≥ 1)         (W ≥ 2)         (W = 3)

        W = 0: 0 … 63   1: 64 … 16 383   2: 16 384 … 4 194 303   3: … 1 073 741 823
        length = (b0 & 0x3f) | b1 << 6 | b2 << 14 | b3 << 22

    Parsing rejects a width wider than the length needs (`NonMinimalError`).
    """

    LIMITS = (0x40, 0x4000, 0x400000, 0x40000000)

    def _parse(self, stream, context, path):
        b0 = stream_read(stream, 1, path)[0]
        width = b0 >> 6
        length = b0 & 0x3F
        for i, byte in enumerate(stream_read(stream, width, path)):
            length |= byte << (6 + 8 * i)
        if width and length < self.LIMITS[width - 1]:
            raise NonMinimalError(f"{width + 1}-byte string length {length}", path=path)
        return length

    def _build(self, obj, stream, context, path):
        if not 0 <= obj < self.LIMITS[-1]:
            raise IntegerError(f"string length {obj} outside 0..2^30-1", path=path)
        width = next(w for w, limit in enumerate(self.LIMITS) if obj < limit)
        data = bytes((width << 6 | obj & 0x3F,)) + (obj >> 6).to_bytes(width, "little")
        stream_write(stream, data, len(data), path)
        return obj

    def _sizeof(self, context, path):
        raise SizeofError("a string length is 1 to 4 bytes", path=path)


class Text(Adapter):
    """Bytes ⇄ str in `encoding`; invalid text is a construct `StringError` (not a
    UnicodeError escaping the parser)."""

    def __init__(self, subcon, encoding: str = "utf-8"):
        super().__init__(subcon)
        self.encoding = encoding

    def _decode(self, obj, context, path):
        try:
            return obj.decode(self.encoding)
        except UnicodeDecodeError as exc:
            raise StringError(f"invalid {self.encoding}: {exc}", path=path) from None

    def _encode(self, obj, context, path):
        try:
            return obj.encode(self.encoding)
        except (UnicodeEncodeError, AttributeError) as exc:
            raise StringError(f"cannot encode {obj!r} as {self.encoding}: {exc}",
                              path=path) from None


class Invalid(Construct):
    """The cases a code table leaves invalid (Switch default): an error both ways."""

    def __init__(self, what: str, key=None, note: str = ""):
        super().__init__()
        self.what = what
        self.key = key
        self.note = note

    def _fail(self, context, path):
        key = evaluate(self.key, context) if self.key is not None else None
        shown = f" {key:#04x}" if isinstance(key, int) else ""
        raise ValidationError(f"invalid {self.what}{shown}{self.note}", path=path)

    def _parse(self, stream, context, path):
        self._fail(context, path)

    def _build(self, obj, stream, context, path):
        self._fail(context, path)


def _utf8_len(field: str):
    return lambda this: len(this[field].encode("utf-8"))


def Counted(subcon, minimum: int = 0):
    """`u8 count | count × subcon` (PrefixedArray) whose count must be at least `minimum`."""
    if not minimum:
        return PrefixedArray(Int8ul, subcon)
    return FocusedSeq(
        "items",
        "count" / Rebuild(Int8ul, len_(this.items)),
        Check(this.count >= minimum),
        "items" / Array(this.count, subcon),
    )


# -------------------------------------------------------------------------------------------
# Sub-byte fields (§2.1, §5.0, §7.3)

# Type/status byte of a KP→SIB message: 7-bit transaction type, request type (1 = CON).
# ACK is the byte 0x00.
RequestType = BitFields(("tx", 7), ("con", 1))

# Type/status byte of a SIB→KP message: 6-bit status code, the RES epoch flag (a u32 epoch
# follows a UDP RES header, §15.6), response type (1 = IND).
ResponseType = BitFields(("status", 6), ("epoch", 1), ("ind", 1))

# Triple type byte: ST, PT, OT member types (table 3.3).
TripleType = BitFields(("st", 3), ("pt", 2), ("ot", 3))

# Solution modifier flags: order (0 none, 1 asc, 2 desc), Limit, Offset, Distinct, reserved.
ModifierFlags = BitFields(("order", 2), ("limit", 1), ("offset", 1), ("distinct", 1),
                          ("reserved", 3))


# -------------------------------------------------------------------------------------------
# URI field (§4.1)

UriField = Struct(
    "prefix" / Int8ul,
    "length" / Rebuild(UriLength, _utf8_len("local")),
    "local" / Text(Bytes(this.length)),
)

# Prefix list entry (PREFIX option, RES/IND prefix list, §7.2): a URI field with prefix
# index 0 and a non-empty string.
PrefixEntry = Struct(
    "prefix" / Const(0, Int8ul),
    "length" / Rebuild(UriLength, _utf8_len("local")),
    Check(this.length >= 1),
    "local" / Text(Bytes(this.length)),
)


# -------------------------------------------------------------------------------------------
# String (§4.2)

KString = Struct(
    "length" / Rebuild(StringLength, _utf8_len("string")),
    "string" / Text(Bytes(this.length)),
)


# -------------------------------------------------------------------------------------------
# Literal field (§4.3, table 3.4)

DateTime19 = ExprValidator(Text(Bytes(19), "ascii"), lambda obj, ctx: is_datetime19(obj))

Boolean = ExprValidator(Int8ul, lambda obj, ctx: obj in (0, 1))

LangPayload = Struct(
    "tag_length" / Rebuild(Int8ul, lambda this: len(this.tag)),
    "tag" / ExprValidator(Text(Bytes(this.tag_length), "ascii"), lambda obj, ctx: is_lang_tag(obj)),
    "lexical" / KString,
)

TypedPayload = Struct(
    "datatype" / UriField,
    "lexical" / KString,
)

# The payload of each form of the layout table (`ksp.layout.LITERAL_FORMS`).
LITERAL_FORM_PAYLOADS = {
    "string": KString,
    "i32": Int32sl,
    "f32": Float32l,
    "datetime19": DateTime19,
    "bool": Boolean,
    "lang string": LangPayload,
    "typed": TypedPayload,
    "f64": Float64l,
}
LITERAL_PAYLOADS = {t: LITERAL_FORM_PAYLOADS[form] for t, form in LITERAL_FORMS.items()}

LiteralField = Struct(
    "littype" / Int8ul,
    "payload" / Switch(this.littype, LITERAL_PAYLOADS,
                       default=Invalid("literal type", this.littype)),
)


# -------------------------------------------------------------------------------------------
# Triple members (table 3.3), blank node (§4.4), variable (§4.5)

BNodeLabel = Struct(
    "length" / Rebuild(UriLength, _utf8_len("label")),
    Check(this.length >= 1),
    "label" / Text(Bytes(this.length)),
)

ReservedWord = Struct("word" / ExprValidator(Int8ul, lambda obj, ctx: obj < len(RESERVED_WORDS)))

Variable = Struct("var" / Int8ul)

MEMBER_PAYLOADS = {
    Member.EMPTY: Pass,
    Member.URI: UriField,
    Member.RESERVED: ReservedWord,
    Member.VARIABLE: Variable,
    Member.LITERAL: LiteralField,
    Member.BNODE: BNodeLabel,
}

SUBJECT_TYPES = MEMBER_TYPES["s"]
PREDICATE_TYPES = MEMBER_TYPES["p"]
OBJECT_TYPES = MEMBER_TYPES["o"]


# -------------------------------------------------------------------------------------------
# Triple and Graph field (§5.0)

def _triple(variables: bool):
    def members(codes):
        return {c: MEMBER_PAYLOADS[c] for c in codes if variables or c != Member.VARIABLE}

    extra = "" if variables else " (no Variables in DATA operations or results)"

    return Struct(
        "type" / TripleType,
        # Empty repeats the previous triple's member: invalid in the first triple.
        Check(lambda this: this._index or Member.EMPTY not in this["type"].values()),
        "s" / Switch(this.type.st, members(SUBJECT_TYPES),
                     default=Invalid("subject type", this.type.st, extra)),
        "p" / Switch(this.type.pt, members(PREDICATE_TYPES),
                     default=Invalid("predicate type", this.type.pt, extra)),
        "o" / Switch(this.type.ot, members(OBJECT_TYPES),
                     default=Invalid("object type", this.type.ot, extra)),
    )


# Triple of a pattern (variables allowed).
TripleField = _triple(variables=True)

# Triple of a DATA operation or a CONSTRUCT result: no Variables (§5.2, §6.3).
DataTripleField = _triple(variables=False)
ResultTriple = DataTripleField

Graph = PrefixedArray(Int8ul, TripleField)
DataGraph = PrefixedArray(Int8ul, DataTripleField)


# -------------------------------------------------------------------------------------------
# Data fields of requests (§5), by transaction type

OptionalGraphs = PrefixedArray(Int8ul, Graph)

GraphNames = Counted(UriField, minimum=1)

# The fields of each transaction come from the layout table (`ksp.layout.REQUEST_FIELDS`); a
# graph of a DATA operation admits no Variables (§5.2).
DATA_FIELD_BODIES = {
    Body.PROJECTION: Int8ul,
    Body.OPTIONAL: OptionalGraphs,
    Body.GRAPH_NAMES: GraphNames,
    Body.IRI: UriField,
}


def _request_data(tx: Tx) -> Struct:
    graph = DataGraph if tx.is_data_update else Graph
    return Struct(*(name / (graph if body is Body.GRAPH else DATA_FIELD_BODIES[body])
                    for name, body in REQUEST_FIELDS[tx]))


_BASE_DATA = {tx: _request_data(tx) for tx in Tx if not tx.persistent}
REQUEST_DATA = {tx: _BASE_DATA[tx.base] for tx in Tx}  # persistent forms share their base's

# ACK Data field (§2.4, R10): the 2-byte sequence number, absent in a bare 4-byte ACK.
AckData = Struct("seq" / Optional(Int16ul))


# -------------------------------------------------------------------------------------------
# Filter and bind expressions (§8): RPN tokens

TOKEN_OPERANDS = {
    **{code: LITERAL_PAYLOADS[code] for code in (LiteralType.STRING, LiteralType.INTEGER,
                                                 LiteralType.FLOAT, LiteralType.DATETIME,
                                                 LiteralType.BOOLEAN)},
    TOKEN_VARIABLE: Int8ul,
    TOKEN_URI: UriField,
    **{op: Int8ul if op.variadic else Pass for op in Op},  # a variadic operator's count n
    TOKEN_LITERAL: LiteralField,
}

Token = Struct(
    "token" / Int8ul,
    "operand" / Switch(this.token, TOKEN_OPERANDS, default=Invalid("token type", this.token)),
)


_OP_CODES = frozenset(int(op) for op in Op)


def rpn_well_formed(tokens) -> bool:
    """§8.1: never pops an empty stack, leaves exactly one value; bound() follows a variable."""
    depth = 0
    for i, tok in enumerate(tokens):
        code = tok["token"]
        if code in _OP_CODES:
            op = Op(code)
            if op is Op.BOUND and (i == 0 or tokens[i - 1]["token"] != TOKEN_VARIABLE):
                return False
            arity = op.arity + (tok["operand"] if op.variadic else 0)
            if depth < arity:
                return False
            depth -= arity - 1
        else:
            depth += 1
    return depth == 1


Expression = ExprValidator(Counted(Token, minimum=1), lambda obj, ctx: rpn_well_formed(obj))


# -------------------------------------------------------------------------------------------
# Options (§7)

SolutionModifierBody = Struct(
    "flags" / ModifierFlags,
    Check(this.flags.reserved == 0),
    Check(this.flags.order != 3),
    "order_var" / If(this.flags.order != 0, Int8ul),
    "limit" / If(this.flags.limit, Int16ul),
    "offset" / If(this.flags.offset, Int16ul),
)

CredentialsBody = Struct(
    "kp_id" / Bytes(16),
    "password_length" / Rebuild(Int8ul, _utf8_len("password")),
    "password" / Text(Bytes(this.password_length)),
)

BindItem = Struct("var" / Int8ul, "expr" / Expression)

# ECHO option body and ECHO REQUIRED Data field (§7.7): u8 length 1…10, opaque bytes.
EchoBody = Struct(
    "length" / ExprValidator(Rebuild(Int8ul, len_(this.value)),
                             lambda obj, ctx: 1 <= obj <= ECHO_MAX),
    "value" / Bytes(this.length),
)

# The body of each option of the layout table (`ksp.layout.OPTION_FIELDS`).
OPTION_FORM_BODIES = {
    Body.PREFIXES: Counted(PrefixEntry, minimum=1),
    Body.GRAPH_NAMES: GraphNames,
    Body.GRAPHS: Counted(Graph, minimum=1),
    Body.EXPRESSIONS: Counted(Expression, minimum=1),
    Body.MODIFIER: SolutionModifierBody,
    Body.BINDS: Counted(BindItem, minimum=1),
    Body.U32: Int32ul,
    Body.CREDENTIALS: CredentialsBody,
    Body.ECHO: EchoBody,
}
OPTION_BODIES = {opt: OPTION_FORM_BODIES[body] for opt, (_, body) in OPTION_FIELDS.items()}
# EPOCH (§15): a u32 of at least 1; epoch 0 is written as no option.
OPTION_BODIES[Opt.EPOCH] = ExprValidator(Int32ul, lambda obj, ctx: obj >= 1)


def _option_applies(this) -> bool:
    """Table 7.1: the option applies to the REQ's transaction type."""
    return this._root["header"]["type"]["tx"] in OPTION_APPLIES[Opt(this["option"])]


def _first_of_its_type(this) -> bool:
    """§3.2 rule 3: a repeated option is refused where it repeats, after its code and whether
    it applies, before its body (the codes seen are kept in the message's root context). When
    building, `OptionList`'s own check says it (a body may be built twice, to be measured)."""
    if not this._parsing:
        return True
    seen = this._root.setdefault("_options_seen", set())
    if this["option"] in seen:
        return False
    seen.add(this["option"])
    return True


Option = Struct(
    "option" / ExprValidator(Int8ul, lambda obj, ctx: obj in OPTION_BODIES),
    Check(_option_applies),
    "once" / Check(_first_of_its_type),
    "body" / Switch(this.option, OPTION_BODIES),
)

# OC | OC × option; each option type at most once (any order).
OptionList = ExprValidator(
    PrefixedArray(Int8ul, Option),
    lambda obj, ctx: len({o["option"] for o in obj}) == len(obj),
)


# -------------------------------------------------------------------------------------------
# Data fields of RES and IND (§6)

PrefixList = PrefixedArray(Int8ul, PrefixEntry)

# Result term: member type (table 3.3, row column) + payload; Empty = unbound.
ResultTerm = Struct(
    "member" / Int8ul,
    "value" / Switch(this.member, {c: MEMBER_PAYLOADS[c] for c in OBJECT_TYPES
                                   if c != Member.VARIABLE},
                     default=Invalid("result term type", this.member)),
)

SelectData = Struct(
    "prefixes" / PrefixList,
    "trc" / Int16ul,
    "rc" / Rebuild(Int16ul, len_(this.rows)),
    Check(this.rc <= this.trc),
    "vc" / Int8ul,
    "rows" / Array(this.rc, Array(this.vc, ResultTerm)),
)

AskData = Struct("answer" / Boolean)

ConstructData = Struct(
    "prefixes" / PrefixList,
    "trc" / Int16ul,
    "rc" / Rebuild(Int16ul, len_(this.triples)),
    Check(this.rc <= this.trc),
    "triples" / Array(this.rc, ResultTriple),
)

# NUMBER BEHIND Data field (§15): the request's epoch, the first epoch the SIB takes as new.
BehindData = Struct("epoch" / Int32ul, "next_epoch" / Int32ul)

RESULT_DATA = {Tx.SELECT: SelectData, Tx.ASK: AskData, Tx.CONSTRUCT: ConstructData,
               "echo": EchoBody, "behind": BehindData}


def _result_form(this):
    """Which layout a RES/IND's Data field has: the echo value of an ECHO REQUIRED RES (§7.7),
    the epochs of a NUMBER BEHIND RES (§15), a result when OK and answering a query (§6), else
    none."""
    answers = this._params.get("answers")
    kind = this["header"]["type"]
    if kind["status"] == Status.ECHO_REQUIRED and not kind["ind"]:
        return "echo"
    if kind["status"] == Status.NUMBER_BEHIND and not kind["ind"]:
        return "behind"
    if kind["status"] != Status.OK or answers is None:
        return None
    tx = Tx(answers)
    return tx.base if tx.is_query else None


# -------------------------------------------------------------------------------------------
# Headers (§2.2, §2.3)

TCP_HEADER_SIZE = 8


def _tcp_length(this) -> int:
    """TCP Length (R17): 8 + every field after the header, built in the message's context."""
    msg = this._
    stream = io.BytesIO()
    for name, sc in msg._subcons.items():
        if name != "header":
            sc._build(msg.get(name), stream, msg, "(building) -> tcp length")
    return TCP_HEADER_SIZE + len(stream.getvalue())


# KP→SIB type byte: the byte 0x80 (transaction type 0 with CON) is neither a REQ nor an ACK.
_NOT_0x80 = Check(lambda this: this["type"]["tx"] != 0 or not this["type"]["con"])

# UDP header of a REQ or ACK (4 bytes).
UdpRequestHeader = Struct(
    "version" / Const(VERSION, Int8ul),
    "type" / RequestType,
    "tid" / Int16ul,
    _NOT_0x80,
)

# The epoch a UDP RES names (§15.6): a u32 of at least 1 (epoch 0 is written as no field),
# never on NUMBER BEHIND, whose Data field names it.
ResEpoch = ExprValidator(Int32ul, lambda obj, ctx: obj >= 1)
_EPOCH_NOT_ON_BEHIND = Check(lambda this: not (this["type"]["epoch"]
                                               and this["type"]["status"] == Status.NUMBER_BEHIND))
# ECHO REQUIRED and NUMBER BEHIND are a RES's statuses, never an IND's (§3.2).
_RES_ONLY_NOT_ON_IND = Check(lambda this: not (this["type"]["ind"] and this["type"]["status"] in (
    Status.ECHO_REQUIRED, Status.NUMBER_BEHIND)))

# UDP header of a RES (4 bytes, 8 with the epoch).
UdpResHeader = Struct(
    "version" / Const(VERSION, Int8ul),
    "type" / ResponseType,
    Check(lambda this: not this["type"]["ind"]),
    _EPOCH_NOT_ON_BEHIND,
    "tid" / Int16ul,
    "epoch" / If(this.type.epoch, ResEpoch),
)

# UDP header of an IND (6 bytes): with the sequence number; an IND names no epoch.
UdpIndHeader = Struct(
    "version" / Const(VERSION, Int8ul),
    "type" / ResponseType,
    Check(lambda this: this["type"]["ind"] and not this["type"]["epoch"]),
    _RES_ONLY_NOT_ON_IND,
    "tid" / Int16ul,
    "seq" / Int16ul,
)

# UDP header of what a KP receives: the IND header when the response type says IND, the RES
# header with its epoch when the epoch flag says so.
UdpResponseHeader = Struct(
    "version" / Const(VERSION, Int8ul),
    "type" / ResponseType,
    Check(lambda this: not (this["type"]["ind"] and this["type"]["epoch"])),
    _EPOCH_NOT_ON_BEHIND,
    _RES_ONLY_NOT_ON_IND,
    "tid" / Int16ul,
    "seq" / If(this.type.ind, Int16ul),
    "epoch" / If(this.type.epoch, ResEpoch),
)

# ACK (§2.4): the 4-byte UDP header with type byte 0x00, then the sequence number.
AckHeader = Struct(
    "version" / Const(VERSION, Int8ul),
    "type" / RequestType,
    Check(lambda this: this["type"]["tx"] == 0 and not this["type"]["con"]),
    "tid" / Int16ul,
)

# TCP header of a REQ (8 bytes); Length counts the whole message and is computed on build.
TcpRequestHeader = Struct(
    "version" / Const(VERSION, Int8ul),
    "type" / RequestType,
    "tid" / Int16ul,
    "length" / Rebuild(Int32ul, _tcp_length),
    _NOT_0x80,
)

# TCP header of a RES or IND (8 bytes, no sequence number: R11, nor epoch: §15.6).
TcpResponseHeader = Struct(
    "version" / Const(VERSION, Int8ul),
    "type" / ResponseType,
    Check(lambda this: not this["type"]["epoch"]),
    _RES_ONLY_NOT_ON_IND,
    "tid" / Int16ul,
    "length" / Rebuild(Int32ul, _tcp_length),
)


# -------------------------------------------------------------------------------------------
# Whole messages (§2): REQ = Header | Data | Options; ACK = Header | Data; RES/IND = Header | Data

_TCP_LENGTH_MATCHES = Check(lambda this: this["header"]["length"] == stream_tell(this._io, None))


def _kp_message(header, tcp: bool):
    cases = dict(REQUEST_DATA)
    if not tcp:
        cases[0] = AckData  # type byte 0x00: an ACK (UDP only, R11)
    tx = this.header.type.tx
    fields = [
        "header" / header,
        "data" / Switch(tx, cases, default=Invalid("transaction type (no ACK over TCP)" if tcp
                                                   else "transaction type", tx)),
        "options" / If(tx != 0, OptionList),
        Terminated,
    ]
    if tcp:
        fields.append(_TCP_LENGTH_MATCHES)
    return Struct(*fields)


def _sib_message(header, tcp: bool):
    fields = [
        "header" / header,
        "data" / Switch(_result_form, RESULT_DATA),
        Terminated,
    ]
    if tcp:
        fields.append(_TCP_LENGTH_MATCHES)
    return Struct(*fields)


# An ACK message on its own (UDP only): Header | Data.
AckMessage = Struct(
    "header" / AckHeader,
    "data" / AckData,
    Terminated,
)

# What a SIB receives over UDP: a REQ, or an ACK (type byte 0x00).
RequestUdp = _kp_message(UdpRequestHeader, tcp=False)

# What a SIB receives over TCP: a REQ (there are no ACKs over TCP; type byte 0x00 is invalid).
RequestTcp = _kp_message(TcpRequestHeader, tcp=True)

# What a KP receives over UDP: a RES (4-byte header) or an IND (6-byte header).
# The Data layout depends on the request answered: parse with `answers=<Tx>`.
ResponseUdp = _sib_message(UdpResponseHeader, tcp=False)

# What a KP receives over TCP: a RES or an IND, both with the 8-byte header.
ResponseTcp = _sib_message(TcpResponseHeader, tcp=True)


# -------------------------------------------------------------------------------------------
# Entry points

def _is_tcp(transport) -> bool:
    value = getattr(transport, "value", transport)
    if value not in ("udp", "tcp"):
        raise ValueError(f"unknown transport {transport!r}")
    return value == "tcp"


def grammar(transport, direction: str):
    """The message grammar for `transport` ("udp"/"tcp") and `direction`
    ("kp_to_sib": REQ/ACK, "sib_to_kp": RES/IND)."""
    tcp = _is_tcp(transport)
    if direction == "kp_to_sib":
        return RequestTcp if tcp else RequestUdp
    if direction == "sib_to_kp":
        return ResponseTcp if tcp else ResponseUdp
    raise ValueError(f"unknown direction {direction!r}")


def _answers(answers) -> Tx | None:
    return None if answers is None else Tx(answers)


def parse_request(buf: bytes, transport="udp") -> Container:
    """Parse what a SIB receives (REQ, or ACK over UDP) into a raw Container."""
    return grammar(transport, "kp_to_sib").parse(bytes(buf))


def parse_response(buf: bytes, transport="udp", answers=None) -> Container:
    """Parse what a KP receives (RES/IND); `answers` is the transaction type of the REQ."""
    return grammar(transport, "sib_to_kp").parse(bytes(buf), answers=_answers(answers))


def build_request(container, transport="udp") -> bytes:
    return grammar(transport, "kp_to_sib").build(container)


def build_response(container, transport="udp", answers=None) -> bytes:
    return grammar(transport, "sib_to_kp").build(container, answers=_answers(answers))


# -------------------------------------------------------------------------------------------
# Container → ksp.model

_RESERVED_IRIS = tuple(IRI(w) for w in RESERVED_WORDS)
_OPTION_KEYS = {opt: name for opt, (name, _) in OPTION_FIELDS.items()}


class _Resolver:
    """Raw values → terms, with the message's prefix list (§4.1, §7.2, §6.1)."""

    def __init__(self, prefixes: tuple[str, ...]):
        self.prefixes = prefixes

    def iri(self, field) -> IRI:
        index = field.prefix
        if not index:
            return IRI(field.local)
        if index > len(self.prefixes):
            raise ResolutionError(f"prefix index {index} beyond the {len(self.prefixes)} prefixes")
        return IRI(self.prefixes[index - 1] + field.local)

    def literal(self, kind: int, payload) -> Literal:
        if kind == LiteralType.STRING:
            return Literal(payload.string, XSD_STRING)
        if kind == LiteralType.INTEGER:
            return Literal(str(payload), XSD_INTEGER)
        if kind == LiteralType.FLOAT:
            return Literal(float_lexical(payload), XSD_FLOAT)
        if kind == LiteralType.DATETIME:
            return Literal(payload, XSD_DATETIME)
        if kind == LiteralType.BOOLEAN:
            return Literal("true" if payload else "false", XSD_BOOLEAN)
        if kind == LiteralType.LANG_STRING:
            return Literal(payload.lexical.string, RDF_LANGSTRING, payload.tag)
        if kind == LiteralType.TYPED:
            datatype = self.iri(payload.datatype)
            if datatype == RDF_LANGSTRING:
                raise ResolutionError("an rdf:langString literal without a language tag")
            if not datatype:  # not in the spec's text (§4.3); the fast codec rejects it too
                raise ResolutionError("a literal with an empty datatype IRI")
            return Literal(payload.lexical.string, datatype)
        if kind == LiteralType.DOUBLE:
            return Literal(double_lexical(payload), XSD_DOUBLE)
        raise ResolutionError(f"literal type {kind:#04x}")

    def member(self, code: int, value):
        if code == Member.URI:
            return self.iri(value)
        if code == Member.RESERVED:
            return _RESERVED_IRIS[value.word]
        if code == Member.VARIABLE:
            return Var(value.var)
        if code == Member.LITERAL:
            return self.literal(value.littype, value.payload)
        if code == Member.BNODE:
            return BNode(value.label)
        raise ResolutionError(f"member type {code:#04x}")

    def triples(self, raw) -> tuple[Triple, ...]:
        """Triples with Empty members resolved against the previous triple of `raw` (§5.0)."""
        out, prev = [], None
        for t in raw:
            terms = []
            for pos, (code, value) in enumerate(((t.type.st, t.s), (t.type.pt, t.p),
                                                 (t.type.ot, t.o))):
                if code == Member.EMPTY:
                    if prev is None:
                        raise ResolutionError("Empty member in the first triple")
                    terms.append(prev[pos])
                else:
                    terms.append(self.member(code, value))
            prev = Triple(*terms)
            out.append(prev)
        return tuple(out)

    def expression(self, tokens) -> tuple:
        out = []
        for tok in tokens:
            code, operand = tok.token, tok.operand
            if code == TOKEN_VARIABLE:
                out.append(Var(operand))
            elif code == TOKEN_URI:
                out.append(self.iri(operand))
            elif code <= LiteralType.BOOLEAN:
                out.append(self.literal(code, operand))
            elif code == TOKEN_LITERAL:
                out.append(self.literal(operand.littype, operand.payload))
            elif Op(code).variadic:
                out.append(Call(Op(code), operand))
            else:
                out.append(Op(code))
        return tuple(out)


_F32 = struct.Struct("<f")


def float_lexical(value: float) -> str:
    """§4.3 xsd:float lexical form: the shortest decimal that reads back as the same binary32,
    as Python's repr writes it; INF, -INF, NaN. (Written out here, without a cache, so that the
    reference does not share `ksp.literals.float_lexical`'s code.)"""
    if not math.isfinite(value):
        return double_lexical(value)
    value = _F32.unpack(_F32.pack(value))[0]
    for digits in range(1, 10):
        candidate = float(f"{value:.{digits}g}")
        try:
            if _F32.unpack(_F32.pack(candidate))[0] == value:
                return repr(candidate)
        except OverflowError:  # rounded past binary32's largest value
            continue
    return repr(value)


def _status(code: int) -> Status | int:
    try:
        return Status(code)
    except ValueError:
        return code


def to_model(container) -> Request | Ack | Response:
    """The `ksp.model` message of a parsed container (what `ksp.codec` decodes the bytes to)."""
    header = container.header
    if "tx" in header.type:
        if header.type.tx == 0:
            return Ack(header.tid, container.data.seq, header.version)
        return _request(container)
    return _response(container)


def _request(c) -> Request:
    header = c.header
    tx = Tx(header.type.tx)
    raw_opts = {Opt(o.option): o.body for o in c.options}
    prefixes = tuple(e.local for e in raw_opts.get(Opt.PREFIX, ()))
    res = _Resolver(prefixes)
    fields = {}
    for name, value in c.data.items():
        if name.startswith("_"):
            continue
        if name in ("delete", "insert", "where", "template"):
            fields[name] = res.triples(value)
        elif name == "optional":
            fields[name] = tuple(res.triples(g) for g in value)
        elif name == "graphs":
            names = tuple(res.iri(g) for g in value)
            if tx is Tx.CREATE and "" in names:
                raise ResolutionError("CREATE cannot name the default graph")
            fields[name] = names
        elif name in ("source", "target"):
            fields[name] = res.iri(value)
        else:  # projection
            fields[name] = value
    # A decoded REQ always has its (possibly empty) prefix list: `prefixes=None` would let an
    # encoder choose another one.
    values: dict = {"prefixes": prefixes}
    for opt, body in raw_opts.items():
        key = _OPTION_KEYS[opt]
        if opt in (Opt.DELETE_GRAPH, Opt.INSERT_GRAPH, Opt.QUERY_GRAPH):
            values[key] = tuple(res.iri(g) for g in body)
        elif opt is Opt.OPTIONAL_PATTERN:
            values[key] = tuple(res.triples(g) for g in body)
        elif opt is Opt.FILTER:
            values[key] = tuple(res.expression(e) for e in body)
        elif opt is Opt.SOLUTION_MODIFIER:
            f = body.flags
            values[key] = SolutionModifier(Order(f.order), body.order_var, body.limit,
                                           body.offset, bool(f.distinct))
        elif opt is Opt.BIND:
            values[key] = tuple(Bind(b.var, res.expression(b.expr)) for b in body)
        elif opt in (Opt.MAX_RESPONSE_SIZE, Opt.EPOCH):
            values[key] = body
        elif opt is Opt.CREDENTIALS:
            values[key] = Credentials(body.kp_id, body.password)
        elif opt is Opt.ECHO:
            values[key] = bytes(body.value)
    options = Options(**values)
    return Request(tx, header.tid, bool(header.type.con), options=options, version=header.version,
                   **fields)


def _response(c) -> Response:
    header = c.header
    data = c.data
    result = None
    if data is not None:
        if "length" in data:
            result = bytes(data.value)
        elif "next_epoch" in data:
            result = Behind(data.epoch, data.next_epoch)
        elif "answer" in data:
            result = AskResult(bool(data.answer))
        else:
            prefixes = tuple(e.local for e in data.prefixes)
            res = _Resolver(prefixes)
            if "triples" in data:
                result = ConstructResult(res.triples(data.triples), data.trc, prefixes)
            else:
                rows = tuple(
                    tuple(None if term.member == Member.EMPTY
                          else res.member(term.member, term.value) for term in row)
                    for row in data.rows)
                result = SelectResult(data.vc, rows, data.trc, prefixes)
    return Response(header.tid, _status(header.type.status), result, bool(header.type.ind),
                    header.get("seq"), header.version, header.get("epoch"))
