"""The wire layout as one declarative table (docs/wire-format.md §3–§8): which fields each
transaction carries and how each is written, the option bodies, the member types each triple
position admits, the literal types' payload forms and the reserved words.

Read by everything that knows the layout, so that it is declared once: the Python codec
(`ksp.wire`, `ksp.decode`, `ksp.codec`), the construct grammar (`ksp.reference.schema`, and
through it `explain`), the C module (its `setup()` tables come from `ksp.codec`, its enums from
the header `setup.py` generates out of this module and `ksp.model`). The firmware, which cannot
import it, is checked against `ksp.codes` by tests/test_firmware_constants.py.
"""
from __future__ import annotations

from enum import IntEnum

from .codes import OPTION_APPLIES, RESERVED_WORDS, LiteralType, Member, Opt, Tx

__all__ = [
    "Body", "REQUEST_FIELDS", "OPTION_FIELDS", "MEMBER_TYPES", "LITERAL_FORMS", "LITERAL_SIZES",
    "RESULT_FORMS", "RESERVED_WORDS", "OPTION_APPLIES", "c_header",
]


class Body(IntEnum):
    """How a data field or an option body is written. The first five are the data fields'
    kinds, which the C module switches on (its `FK_*`)."""

    GRAPH = 0           # u8 count × triple (§5.0); Variables only outside DATA operations
    PROJECTION = 1      # u8 variable count (VC, §5.3)
    OPTIONAL = 2        # u8 count × graph (count may be 0, §5.3)
    GRAPH_NAMES = 3     # u8 count ≥ 1 × URI field (§5.4)
    IRI = 4             # one URI field (§5.4)
    PREFIXES = 5        # u8 count ≥ 1 × prefix entry (§7.2)
    GRAPHS = 6          # u8 count ≥ 1 × graph (§7.4)
    EXPRESSIONS = 7     # u8 count ≥ 1 × RPN expression (§8)
    MODIFIER = 8        # flags, order variable, limit, offset (§7.3)
    BINDS = 9           # u8 count ≥ 1 × (variable, RPN expression) (§8)
    U32 = 10            # u32 (§7.1)
    CREDENTIALS = 11    # 16-byte KP ID, u8 password length, password (§7.5)
    ECHO = 12           # u8 length 1…10, that many opaque bytes (§7.7)


_G, _NAMES, _IRI = Body.GRAPH, Body.GRAPH_NAMES, Body.IRI
#: Data fields of each transaction, in wire order (§5). Persistent forms share their base's.
REQUEST_FIELDS: dict[Tx, tuple[tuple[str, Body], ...]] = {
    Tx.DELETE_DATA: (("delete", _G),),
    Tx.INSERT_DATA: (("insert", _G),),
    Tx.UPDATE_DATA: (("delete", _G), ("insert", _G)),
    Tx.DELETE: (("delete", _G), ("where", _G)),
    Tx.INSERT: (("insert", _G), ("where", _G)),
    Tx.UPDATE: (("delete", _G), ("insert", _G), ("where", _G)),
    Tx.SELECT: (("projection", Body.PROJECTION), ("where", _G), ("optional", Body.OPTIONAL)),
    Tx.ASK: (("where", _G), ("optional", Body.OPTIONAL)),
    Tx.CONSTRUCT: (("template", _G), ("where", _G), ("optional", Body.OPTIONAL)),
    Tx.TERMINATE: (),
    Tx.RESET: (),
    Tx.CREATE: (("graphs", _NAMES),),
    Tx.DROP: (("graphs", _NAMES),),
    Tx.COPY: (("source", _IRI), ("target", _IRI)),
    Tx.MOVE: (("source", _IRI), ("target", _IRI)),
    Tx.ADD: (("source", _IRI), ("target", _IRI)),
}
for _tx in Tx:
    if _tx.persistent:
        REQUEST_FIELDS[_tx] = REQUEST_FIELDS[_tx.base]

#: Option bodies (table 7.1), in option-code order, with the `ksp.model.Options` field each
#: decodes into (the model's field order is this one: the codecs index Options by option code).
OPTION_FIELDS: dict[Opt, tuple[str, Body]] = {
    Opt.PREFIX: ("prefixes", Body.PREFIXES),
    Opt.DELETE_GRAPH: ("delete_graphs", _NAMES),
    Opt.INSERT_GRAPH: ("insert_graphs", _NAMES),
    Opt.QUERY_GRAPH: ("query_graphs", _NAMES),
    Opt.OPTIONAL_PATTERN: ("optional", Body.GRAPHS),
    Opt.FILTER: ("filters", Body.EXPRESSIONS),
    Opt.SOLUTION_MODIFIER: ("modifier", Body.MODIFIER),
    Opt.BIND: ("binds", Body.BINDS),
    Opt.MAX_RESPONSE_SIZE: ("max_response_size", Body.U32),
    Opt.CREDENTIALS: ("credentials", Body.CREDENTIALS),
    Opt.ECHO: ("echo", Body.ECHO),
    Opt.EPOCH: ("epoch", Body.U32),  # ≥ 1: epoch 0 is written as no option (§15)
}

#: Member types each triple position admits (table 3.3): no Literal subject, no Literal or blank
#: node predicate. DATA operations and results also exclude Variables (§5.2, §6).
MEMBER_TYPES: dict[str, tuple[Member, ...]] = {
    "s": (Member.EMPTY, Member.URI, Member.RESERVED, Member.VARIABLE, Member.BNODE),
    "p": (Member.EMPTY, Member.URI, Member.RESERVED, Member.VARIABLE),
    "o": tuple(Member),
}

#: Literal payloads (table 3.4, §4.3): a fixed-size form or a length-prefixed one.
LITERAL_FORMS: dict[LiteralType, str] = {
    LiteralType.STRING: "string",          # string length, UTF-8
    LiteralType.INTEGER: "i32",            # little-endian two's complement
    LiteralType.FLOAT: "f32",              # IEEE 754 binary32
    LiteralType.DATETIME: "datetime19",    # YYYY-MM-DDTHH:MM:SS
    LiteralType.BOOLEAN: "bool",           # 0 or 1
    LiteralType.LANG_STRING: "lang string",  # u8 tag length, tag, string
    LiteralType.TYPED: "typed",            # datatype URI field, string
    LiteralType.DOUBLE: "f64",             # IEEE 754 binary64
}
_FIXED_SIZES = {"i32": 4, "f32": 4, "datetime19": 19, "bool": 1, "f64": 8}
#: Payload size of the fixed-size literal types, by code.
LITERAL_SIZES: dict[int, int] = {int(t): _FIXED_SIZES[f] for t, f in LITERAL_FORMS.items()
                                 if f in _FIXED_SIZES}

#: The result forms of RES/IND data fields (§6), by the base transaction a result answers.
RESULT_FORMS: tuple[Tx, ...] = (Tx.SELECT, Tx.ASK, Tx.CONSTRUCT)


def c_header(request_fields: tuple[str, ...], response_fields: tuple[str, ...],
             ack_fields: tuple[str, ...]) -> str:
    """The C module's enums (`ksp/_layout.h`, written by setup.py): the model's field indexes,
    the data-field kinds, the option codes and the result forms, all from this table."""
    def enum(prefix: str, names, count: str | None = None) -> str:
        items = [f"{prefix}{n.upper()}" for n in names] + ([count] if count else [])
        return "enum { " + ", ".join(items) + " };"

    lines = [
        "/* Generated by setup.py from ksp/layout.py and ksp/model.py: do not edit. */",
        enum("RQ_", request_fields, "RQ_N"),
        enum("RS_", response_fields, "RS_N"),
        enum("AK_", ack_fields, "AK_N"),
        "enum { " + ", ".join(f"FK_{b.name} = {b.value}" for b in Body
                              if b <= Body.IRI) + " };",
        "enum { " + ", ".join(f"OP_{o.name} = {o.value}" for o in OPTION_FIELDS)
        + f", OP_N = {len(OPTION_FIELDS)} }};",
        "enum { " + ", ".join(f"FORM_{t.name} = {t.value:#04x}" for t in RESULT_FORMS) + " };",
        "static const char *const REQUEST_FIELDS[] = {"
        + ", ".join(f'"{n}"' for n in request_fields) + "};",
        "static const char *const RESPONSE_FIELDS[] = {"
        + ", ".join(f'"{n}"' for n in response_fields) + "};",
        "static const char *const ACK_FIELDS[] = {"
        + ", ".join(f'"{n}"' for n in ack_fields) + "};",
        "",
    ]
    return "\n".join(lines)
