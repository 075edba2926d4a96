"""Every KSP code space, as one registry (docs/wire-format.md §3, §7, §8).

The spec's tables and these enums say the same thing; `tests/test_codes.py` checks that.
"""
from __future__ import annotations

from enum import IntEnum

VERSION = 1
#: The longest echo value (ECHO option and ECHO REQUIRED Data field, §7.7): the RES 0x0f then
#: stays within 3 × the smallest REQ (4 + 1 + 10 = 15 = 3 × 5 bytes, §14).
ECHO_MAX = 10
#: Bit 6 of a RES's type byte over UDP: the status is the low 6 bits and the u32 epoch of the
#: request answered follows the header (§2.1, §15.6).
RES_EPOCH = 0x40


def res_status(type_byte: int) -> int:
    """The status code in a RES's type byte (§2.1): bits 0–6 without the epoch bit (a UDP RES
    that names its request's epoch has bit 6 set, the status in bits 0–5)."""
    return type_byte & 0x7F & ~RES_EPOCH


class Tx(IntEnum):
    """Transaction types (7 bits, table 3.1)."""

    DELETE_DATA = 0x01
    INSERT_DATA = 0x02
    UPDATE_DATA = 0x03
    DELETE = 0x04
    INSERT = 0x05
    UPDATE = 0x06
    SELECT = 0x07
    ASK = 0x08
    CONSTRUCT = 0x09
    DELETE_PERSISTENT = 0x0A
    INSERT_PERSISTENT = 0x0B
    UPDATE_PERSISTENT = 0x0C
    SELECT_PERSISTENT = 0x0D
    ASK_PERSISTENT = 0x0E
    CONSTRUCT_PERSISTENT = 0x0F
    TERMINATE = 0x10
    RESET = 0x11
    CREATE = 0x12
    DROP = 0x13
    COPY = 0x14
    MOVE = 0x15
    ADD = 0x16

    @property
    def persistent(self) -> bool:
        return 0x0A <= self <= 0x0F

    @property
    def base(self) -> "Tx":
        """The transient form of a persistent transaction (itself otherwise)."""
        return Tx(self - 6) if self.persistent else self

    @property
    def is_query(self) -> bool:
        return self.base in (Tx.SELECT, Tx.ASK, Tx.CONSTRUCT)

    @property
    def is_pattern_update(self) -> bool:
        return self.base in (Tx.DELETE, Tx.INSERT, Tx.UPDATE)

    @property
    def is_data_update(self) -> bool:
        return self in (Tx.DELETE_DATA, Tx.INSERT_DATA, Tx.UPDATE_DATA)

    @property
    def is_management(self) -> bool:
        return Tx.CREATE <= self <= Tx.ADD


class Status(IntEnum):
    """Status codes (7 bits, table 3.2); 0x08 and up are ksp-gateway extensions."""

    OK = 0x00
    VERSION_NOT_SUPPORTED = 0x01
    INVALID_TRANSACTION_TYPE = 0x02
    INVALID_MESSAGE_TYPE = 0x03
    INVALID_DATA_FORMAT = 0x04
    INVALID_OPTION_TYPE = 0x05
    INVALID_OPTION_FORMAT = 0x06
    INTERNAL_ERROR = 0x07
    ACCESS_DENIED = 0x08
    TERMINATED = 0x09
    LIMIT_EXCEEDED = 0x0A
    UNKNOWN_TRANSACTION = 0x0B
    RESPONSE_TOO_LARGE = 0x0C
    NO_SUCH_GRAPH = 0x0D
    GRAPH_EXISTS = 0x0E
    ECHO_REQUIRED = 0x0F  # a RES only; its Data field is the echo value (§7.7)
    NUMBER_BEHIND = 0x10  # a RES only; its Data field is two u32: epochs (§15, `model.Behind`)


class Member(IntEnum):
    """Triple member / result term types (table 3.3)."""

    EMPTY = 0x00
    URI = 0x01
    RESERVED = 0x02
    VARIABLE = 0x03
    LITERAL = 0x04
    BNODE = 0x05  # [ext]


class LiteralType(IntEnum):
    """Literal types (table 3.4); 0x05-0x07 are extensions."""

    STRING = 0x00
    INTEGER = 0x01
    FLOAT = 0x02
    DATETIME = 0x03
    BOOLEAN = 0x04
    LANG_STRING = 0x05
    TYPED = 0x06
    DOUBLE = 0x07


class Opt(IntEnum):
    """Option types (table 7.1); 0x0a and 0x0b are extensions."""

    PREFIX = 0x00
    DELETE_GRAPH = 0x01
    INSERT_GRAPH = 0x02
    QUERY_GRAPH = 0x03
    OPTIONAL_PATTERN = 0x04
    FILTER = 0x05
    SOLUTION_MODIFIER = 0x06
    BIND = 0x07
    MAX_RESPONSE_SIZE = 0x08
    CREDENTIALS = 0x09
    ECHO = 0x0A  # [ext] (§7.7)
    EPOCH = 0x0B  # [ext] (§15): the request number's high part, u32 ≥ 1


class Op(IntEnum):
    """RPN operator tokens (table 8.2). Operand token codes are in `OPERAND_TOKENS`.

    0x19 and up are SPARQL 1.1 §17 functions [ext]: fixed-arity ones are one byte; the
    variadic ones (`variadic`) carry a u8 count and appear in an expression as `model.Call`.
    """

    EQ = 0x07
    NE = 0x08
    LT = 0x09
    GT = 0x0A
    LE = 0x0B
    GE = 0x0C
    ADD = 0x0D
    SUB = 0x0E
    MUL = 0x0F
    DIV = 0x10
    OR = 0x11
    AND = 0x12
    REGEX = 0x13
    NOT = 0x14  # [ext]
    NEG = 0x15  # [ext]
    REGEX_FLAGS = 0x16  # [ext]
    BOUND = 0x17  # [ext]
    # 1 operand
    STR = 0x19
    LANG = 0x1A
    DATATYPE = 0x1B
    IRI = 0x1C
    IS_IRI = 0x1D
    IS_BLANK = 0x1E
    IS_LITERAL = 0x1F
    IS_NUMERIC = 0x20
    STRLEN = 0x21
    UCASE = 0x22
    LCASE = 0x23
    ABS = 0x24
    ROUND = 0x25
    CEIL = 0x26
    FLOOR = 0x27
    YEAR = 0x28
    MONTH = 0x29
    DAY = 0x2A
    HOURS = 0x2B
    MINUTES = 0x2C
    SECONDS = 0x2D
    TIMEZONE = 0x2E
    TZ = 0x2F
    ENCODE_FOR_URI = 0x30
    MD5 = 0x31
    SHA1 = 0x32
    SHA256 = 0x33
    SHA384 = 0x34
    SHA512 = 0x35
    BNODE_OF = 0x36
    # 2 operands
    LANGMATCHES = 0x38
    STRSTARTS = 0x39
    STRENDS = 0x3A
    CONTAINS = 0x3B
    STRBEFORE = 0x3C
    STRAFTER = 0x3D
    STRLANG = 0x3E
    STRDT = 0x3F
    SAME_TERM = 0x40
    SUBSTR = 0x41
    # 3 and 4 operands
    SUBSTR_LEN = 0x42
    REPLACE = 0x43
    IF = 0x44
    REPLACE_FLAGS = 0x45
    # no operand
    NOW = 0x46
    RAND = 0x47
    UUID = 0x48
    STRUUID = 0x49
    BNODE = 0x4A
    # variadic: a u8 count n follows the code
    CONCAT = 0x4B
    COALESCE = 0x4C
    IN = 0x4D
    NOT_IN = 0x4E

    @property
    def arity(self) -> int:
        """Operands popped; for a variadic operator, those popped besides its n."""
        return _ARITY.get(self, 2)

    @property
    def variadic(self) -> bool:
        return self in _VARIADIC

    @property
    def symbol(self) -> str:
        return _SYMBOL[self]


_ARITY = {Op.NOT: 1, Op.NEG: 1, Op.BOUND: 1, Op.REGEX_FLAGS: 3,
          **{op: 1 for op in Op if Op.STR <= op <= Op.BNODE_OF},
          Op.SUBSTR_LEN: 3, Op.REPLACE: 3, Op.IF: 3, Op.REPLACE_FLAGS: 4,
          **{op: 0 for op in Op if Op.NOW <= op <= Op.COALESCE}, Op.IN: 1, Op.NOT_IN: 1}
_VARIADIC = frozenset((Op.CONCAT, Op.COALESCE, Op.IN, Op.NOT_IN))
_SYMBOL = {
    Op.EQ: "=", Op.NE: "!=", Op.LT: "<", Op.GT: ">", Op.LE: "<=", Op.GE: ">=",
    Op.ADD: "+", Op.SUB: "-", Op.MUL: "*", Op.DIV: "/", Op.OR: "||", Op.AND: "&&",
    Op.REGEX: "regex", Op.NOT: "!", Op.NEG: "-", Op.REGEX_FLAGS: "regex", Op.BOUND: "bound",
    Op.IS_IRI: "isIRI", Op.IS_BLANK: "isBLANK", Op.IS_LITERAL: "isLITERAL",
    Op.IS_NUMERIC: "isNUMERIC", Op.SAME_TERM: "sameTerm", Op.BNODE_OF: "BNODE",
    Op.SUBSTR_LEN: "SUBSTR", Op.REPLACE_FLAGS: "REPLACE", Op.NOT_IN: "NOT IN",
}
for _op in Op:
    _SYMBOL.setdefault(_op, _op.name)

# Operand token codes (table 8.2).
TOKEN_STRING = 0x00
TOKEN_INTEGER = 0x01
TOKEN_FLOAT = 0x02
TOKEN_DATETIME = 0x03
TOKEN_BOOLEAN = 0x04
TOKEN_VARIABLE = 0x05
TOKEN_URI = 0x06
TOKEN_LITERAL = 0x18  # [ext] any literal, as a Literal field

RDF = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
RDFS = "http://www.w3.org/2000/01/rdf-schema#"
OWL = "http://www.w3.org/2002/07/owl#"
XSD = "http://www.w3.org/2001/XMLSchema#"

#: Reserved words (table 3.5), with the paper's typos read as the IRIs that exist (R5).
RESERVED_WORDS: tuple[str, ...] = (
    RDF + "type",
    RDFS + "Class",
    RDFS + "subClassOf",
    RDF + "Property",
    RDFS + "subPropertyOf",
    RDFS + "range",
    RDFS + "domain",
    OWL + "TransitiveProperty",
    OWL + "sameAs",
    XSD + "string",
    XSD + "integer",
    XSD + "float",
    XSD + "dateTime",
    XSD + "boolean",
)
RESERVED_CODE: dict[str, int] = {iri: code for code, iri in enumerate(RESERVED_WORDS)}

_QUERIES = {t for t in Tx if t.is_query}
_PATTERN_UPDATES = {t for t in Tx if t.is_pattern_update}
_WITH_DATA = set(Tx) - {Tx.TERMINATE, Tx.RESET}
_DELETING = {Tx.DELETE_DATA, Tx.UPDATE_DATA} | {t for t in _PATTERN_UPDATES if t.base != Tx.INSERT}
_INSERTING = {Tx.INSERT_DATA, Tx.UPDATE_DATA} | {t for t in _PATTERN_UPDATES if t.base != Tx.DELETE}

#: Which transactions each option applies to (table 7.1); anything else is status 0x05.
OPTION_APPLIES: dict[Opt, frozenset[Tx]] = {
    Opt.PREFIX: frozenset(_WITH_DATA),
    Opt.DELETE_GRAPH: frozenset(_DELETING),
    Opt.INSERT_GRAPH: frozenset(_INSERTING),
    Opt.QUERY_GRAPH: frozenset(_QUERIES | _PATTERN_UPDATES),
    Opt.OPTIONAL_PATTERN: frozenset(_PATTERN_UPDATES),
    Opt.FILTER: frozenset(_QUERIES | _PATTERN_UPDATES),
    Opt.SOLUTION_MODIFIER: frozenset(t for t in _QUERIES if t.base != Tx.ASK),
    Opt.BIND: frozenset(_QUERIES | _PATTERN_UPDATES),
    Opt.MAX_RESPONSE_SIZE: frozenset(Tx),
    Opt.CREDENTIALS: frozenset(Tx),
    Opt.ECHO: frozenset(Tx),
    Opt.EPOCH: frozenset(Tx) - {Tx.TERMINATE},  # TERMINATE has no number (§15)
}
