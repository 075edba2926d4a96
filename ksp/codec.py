"""Bytes ⇄ messages: the hot codec (docs/wire-format.md is the spec it implements).

Written with `struct` and plain indexing because construct's compiled parsers cost 2.4 µs for
a 4-byte header (measured), more than the budget of a whole message; `ksp.schema` declares
the same layouts in construct, and the tests check both agree on every vector.

Decoding never raises anything but `DecodeError` (with the status a SIB answers with).
Encoding produces the canonical encoding (§10) and raises `EncodeError` for messages the wire
cannot carry.
"""
from __future__ import annotations

import struct
from enum import Enum
from typing import Iterable, NamedTuple

from .codes import (
    OPTION_APPLIES, RESERVED_CODE, RESERVED_WORDS, TOKEN_BOOLEAN, TOKEN_DATETIME, TOKEN_FLOAT,
    TOKEN_INTEGER, TOKEN_LITERAL, TOKEN_STRING, TOKEN_URI, TOKEN_VARIABLE, VERSION, LiteralType,
    Op, Opt, Status, Tx,
)
from .compress import choose_prefixes, request_iris, result_iris
from .errors import DecodeError, EncodeError
from .literals import I32_MAX, I32_MIN, compact_type, float_lexical, is_datetime19, is_lang_tag
from .model import (
    NO_OPTIONS, Ack, AskResult, Bind, ConstructResult, Credentials, Message, Options, Order,
    Request, Response, SelectResult, SolutionModifier,
)
from .terms import (
    RDF_LANGSTRING, XSD_BOOLEAN, XSD_DATETIME, XSD_DOUBLE, XSD_FLOAT, XSD_INTEGER, XSD_STRING,
    BNode, IRI, Literal, Triple, Var, double_lexical,
)

__all__ = [
    "Transport", "UDP", "TCP", "LAYOUT", "encode", "decode_kp_message", "decode_sib_message",
    "tcp_frame_length", "header_size", "peek_tid",
]


class Transport(str, Enum):
    UDP = "udp"
    TCP = "tcp"


UDP = Transport.UDP
TCP = Transport.TCP

# Data fields of each transaction, in wire order (§5). Persistent forms share their base's.
LAYOUT: dict[Tx, tuple[str, ...]] = {
    Tx.DELETE_DATA: ("delete",),
    Tx.INSERT_DATA: ("insert",),
    Tx.UPDATE_DATA: ("delete", "insert"),
    Tx.DELETE: ("delete", "where"),
    Tx.INSERT: ("insert", "where"),
    Tx.UPDATE: ("delete", "insert", "where"),
    Tx.SELECT: ("projection", "where", "optional"),
    Tx.ASK: ("where", "optional"),
    Tx.CONSTRUCT: ("template", "where", "optional"),
    Tx.TERMINATE: (),
    Tx.RESET: (),
    Tx.CREATE: ("graphs",),
    Tx.DROP: ("graphs",),
    Tx.COPY: ("source", "target"),
    Tx.MOVE: ("source", "target"),
    Tx.ADD: ("source", "target"),
}
for _tx in Tx:
    if _tx.persistent:
        LAYOUT[_tx] = LAYOUT[_tx.base]
_GRAPH_FIELDS = frozenset({"delete", "insert", "where", "template"})
_DATA_FIELDS = ("delete", "insert", "where", "optional", "template", "projection", "graphs",
                "source", "target")

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_F32 = struct.Struct("<f")
_F64 = struct.Struct("<d")
_HDR_UDP = struct.Struct("<BBH")
_HDR_IND = struct.Struct("<BBHH")
_HDR_TCP = struct.Struct("<BBHI")

_TX_BY_CODE: list[Tx | None] = [None] * 128
for _tx in Tx:
    _TX_BY_CODE[_tx] = _tx
_STATUS_BY_CODE: list[Status | int] = list(range(128))
for _st in Status:
    _STATUS_BY_CODE[_st] = _st
_OP_BY_CODE: dict[int, Op] = {op.value: op for op in Op}
_RESERVED_IRIS = tuple(IRI(w) for w in RESERVED_WORDS)

ST_ALLOWED = frozenset({0, 1, 2, 3, 5})  # no Literal subject
PT_ALLOWED = frozenset({0, 1, 2, 3})
OT_ALLOWED = frozenset({0, 1, 2, 3, 4, 5})


def header_size(transport: Transport, indication: bool = False) -> int:
    if transport is TCP:
        return 8
    return 6 if indication else 4


def tcp_frame_length(buf: bytes | bytearray | memoryview) -> int | None:
    """Length of the TCP message at the start of `buf`, or None until 8 bytes are there."""
    if len(buf) < 8:
        return None
    length = _U32.unpack_from(buf, 4)[0]
    if length < 8:
        raise DecodeError(Status.INVALID_DATA_FORMAT, f"TCP Length {length} < 8", "header.length",
                          _U16.unpack_from(buf, 2)[0])
    return length


def peek_tid(buf: bytes) -> int | None:
    """The Transaction ID of a message, if it has one (for answering undecodable REQs)."""
    return _U16.unpack_from(buf, 2)[0] if len(buf) >= 4 else None


# ---------------------------------------------------------------------------------------------
# Encoding


def _uri_len(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    if n < 0x8000:
        return bytes((0x80 | (n & 0x7F), n >> 7))
    raise EncodeError(f"URI of {n} bytes; KSP carries at most 32767")


def _str_len(n: int) -> bytes:
    if n < 0x40:
        return bytes((n,))
    if n < 0x4000:
        return bytes((0x40 | (n & 0x3F), n >> 6))
    if n < 0x400000:
        return bytes((0x80 | (n & 0x3F), (n >> 6) & 0xFF, n >> 14))
    if n < 0x40000000:
        return bytes((0xC0 | (n & 0x3F), (n >> 6) & 0xFF, (n >> 14) & 0xFF, n >> 22))
    raise EncodeError(f"string of {n} bytes; KSP carries at most 2^30 - 1")


class _Prefixes:
    """Longest-prefix matching over a message's prefix list (ties: lowest index)."""

    __slots__ = ("items", "order", "cache")

    def __init__(self, prefixes: Iterable[str]):
        self.items = tuple(prefixes)
        if len(self.items) > 255:
            raise EncodeError(f"{len(self.items)} prefixes; KSP carries at most 255")
        self.order = sorted(((p, i + 1) for i, p in enumerate(self.items) if p),
                            key=lambda pi: (-len(pi[0]), pi[1]))
        self.cache: dict[str, bytes] = {}

    def uri(self, iri: str) -> bytes:
        """The URI field (§4.1) of `iri`."""
        field = self.cache.get(iri)
        if field is None:
            index, local = 0, iri
            for prefix, i in self.order:
                if iri.startswith(prefix):
                    index, local = i, iri[len(prefix):]
                    break
            raw = local.encode("utf-8")
            field = bytes((index,)) + _uri_len(len(raw)) + raw
            self.cache[iri] = field
        return field


def _string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return _str_len(len(raw)) + raw


def _literal_payload(lit: Literal, pfx: _Prefixes) -> tuple[int, bytes]:
    """(literal type, payload) of a literal by the compact-form rule."""
    try:
        kind = compact_type(lit)
    except ValueError as exc:
        raise EncodeError(str(exc)) from None
    lex = lit.lexical
    if kind == LiteralType.STRING:
        return kind, _string(lex)
    if kind == LiteralType.INTEGER:
        return kind, _I32.pack(int(lex))
    if kind == LiteralType.FLOAT:
        return kind, _F32.pack(float(lex))
    if kind == LiteralType.DATETIME:
        return kind, lex.encode("ascii")
    if kind == LiteralType.BOOLEAN:
        return kind, b"\x01" if lex == "true" else b"\x00"
    if kind == LiteralType.DOUBLE:
        return kind, _F64.pack(float(lex))
    if kind == LiteralType.LANG_STRING:
        tag = lit.lang or ""
        if not is_lang_tag(tag):
            raise EncodeError(f"invalid language tag {tag!r}")
        return kind, bytes((len(tag),)) + tag.encode("ascii") + _string(lex)
    if not lit.datatype:
        raise EncodeError("a literal needs a datatype IRI")
    return kind, pfx.uri(lit.datatype) + _string(lex)


def _bnode(label: str) -> bytes:
    raw = label.encode("utf-8")
    if not raw:
        raise EncodeError("a blank node needs a label")
    return _uri_len(len(raw)) + raw


def _member(term: object, pfx: _Prefixes, where: str) -> tuple[int, bytes]:
    """(member type, payload) of a non-Empty triple member."""
    if isinstance(term, str):
        code = RESERVED_CODE.get(term)
        if code is not None:
            return 2, bytes((code,))
        return 1, pfx.uri(term)
    if isinstance(term, Var):
        if not 0 <= term.index <= 255:
            raise EncodeError(f"variable index {term.index} outside 0..255")
        return 3, bytes((term.index,))
    if isinstance(term, Literal):
        kind, payload = _literal_payload(term, pfx)
        return 4, bytes((kind,)) + payload
    if isinstance(term, BNode):
        return 5, _bnode(term.label)
    raise EncodeError(f"{where}: {term!r} is not a KSP term")


def _triple(t: Triple, prev: Triple | None, pfx: _Prefixes, allow_vars: bool, where: str) -> bytes:
    """One Triple field (§5.0), Empty where `prev` has the same member."""
    if len(t) != 3:
        raise EncodeError(f"{where}: {t!r} is not a triple")
    type_byte = 0
    payloads = b""
    for pos, allowed in ((0, ST_ALLOWED), (1, PT_ALLOWED), (2, OT_ALLOWED)):
        term = t[pos]
        if prev is not None and prev[pos] == term:
            continue
        code, payload = _member(term, pfx, where)
        if code not in allowed:
            raise EncodeError(f"{where}: {type(term).__name__} cannot be "
                              f"{('subject', 'predicate', 'object')[pos]} of a triple")
        if code == 3 and not allow_vars:
            raise EncodeError(f"{where}: variables are not allowed here")
        type_byte |= code << (0, 3, 5)[pos]
        payloads += payload
    return bytes((type_byte,)) + payloads


def _put_triples(out: bytearray, triples: Iterable[Triple], pfx: _Prefixes, allow_vars: bool,
                 where: str) -> None:
    prev = None
    for t in triples:
        out += _triple(t, prev, pfx, allow_vars, where)
        prev = t


def _put_graph(out: bytearray, graph, pfx: _Prefixes, allow_vars: bool, where: str) -> None:
    graph = tuple(graph)
    if len(graph) > 255:
        raise EncodeError(f"{where}: {len(graph)} triples; a Graph field carries at most 255")
    out.append(len(graph))
    _put_triples(out, graph, pfx, allow_vars, where)


def _put_count(out: bytearray, items, where: str, minimum: int = 0) -> tuple:
    items = tuple(items)
    if not minimum <= len(items) <= 255:
        raise EncodeError(f"{where}: {len(items)} items; must be {minimum}..255")
    out.append(len(items))
    return items


def _operand(term: object, pfx: _Prefixes) -> bytes:
    if isinstance(term, Var):
        if not 0 <= term.index <= 255:
            raise EncodeError(f"variable index {term.index} outside 0..255")
        return bytes((TOKEN_VARIABLE, term.index))
    if isinstance(term, str):
        return bytes((TOKEN_URI,)) + pfx.uri(term)
    if isinstance(term, Literal):
        kind, payload = _literal_payload(term, pfx)
        if kind <= LiteralType.BOOLEAN:  # token codes 0x00-0x04 equal literal types 0x00-0x04
            return bytes((kind,)) + payload
        return bytes((TOKEN_LITERAL, kind)) + payload
    raise EncodeError(f"{term!r} cannot be a filter operand")


def _put_expression(out: bytearray, expr, pfx: _Prefixes) -> None:
    expr = tuple(expr)
    if not 1 <= len(expr) <= 255:
        raise EncodeError(f"an expression has 1..255 tokens, not {len(expr)}")
    _check_rpn(expr, EncodeError)
    out.append(len(expr))
    for token in expr:
        if isinstance(token, Op):
            out.append(token)
        else:
            out += _operand(token, pfx)


def _check_rpn(expr: tuple, error) -> None:
    depth = 0
    for i, token in enumerate(expr):
        if isinstance(token, Op):
            if token is Op.BOUND and (i == 0 or not isinstance(expr[i - 1], Var)):
                raise _rpn_error(error, "bound() must follow a variable token")
            arity = token.arity
            if depth < arity:
                raise _rpn_error(error, f"{token.name} needs {arity} operands, has {depth}")
            depth -= arity - 1
        else:
            depth += 1
    if depth != 1:
        raise _rpn_error(error, f"expression leaves {depth} values, not 1")


def _rpn_error(error, message: str) -> Exception:
    if error is DecodeError:
        return DecodeError(Status.INVALID_OPTION_FORMAT, message, "options.expression")
    return error(message)


def _graph_name(pfx: _Prefixes, name: str) -> bytes:
    if not isinstance(name, str):
        raise EncodeError(f"graph name {name!r} is not an IRI")
    return pfx.uri(name)


def _encode_options(out: bytearray, tx: Tx, opts: Options, prefixes: tuple[str, ...],
                    pfx: _Prefixes) -> None:
    present: list[tuple[Opt, object]] = []
    if prefixes:
        present.append((Opt.PREFIX, prefixes))
    for opt, value in ((Opt.DELETE_GRAPH, opts.delete_graphs), (Opt.INSERT_GRAPH, opts.insert_graphs),
                       (Opt.QUERY_GRAPH, opts.query_graphs), (Opt.OPTIONAL_PATTERN, opts.optional),
                       (Opt.FILTER, opts.filters), (Opt.SOLUTION_MODIFIER, opts.modifier),
                       (Opt.BIND, opts.binds), (Opt.MAX_RESPONSE_SIZE, opts.max_response_size),
                       (Opt.CREDENTIALS, opts.credentials)):
        if value is not None:
            present.append((opt, value))
    out.append(len(present))
    allow_vars = not tx.is_data_update
    for opt, value in present:
        if tx not in OPTION_APPLIES[opt]:
            raise EncodeError(f"option {opt.name} does not apply to {tx.name}")
        out.append(opt)
        where = f"options.{opt.name}"
        if opt is Opt.PREFIX:
            for prefix in _put_count(out, value, where, 1):
                out.append(0)
                raw = prefix.encode("utf-8")
                out += _uri_len(len(raw)) + raw
        elif opt in (Opt.DELETE_GRAPH, Opt.INSERT_GRAPH, Opt.QUERY_GRAPH):
            for name in _put_count(out, value, where, 1):
                out += _graph_name(pfx, name)
        elif opt is Opt.OPTIONAL_PATTERN:
            for graph in _put_count(out, value, where, 1):
                _put_graph(out, graph, pfx, allow_vars, where)
        elif opt is Opt.FILTER:
            for expr in _put_count(out, value, where, 1):
                _put_expression(out, expr, pfx)
        elif opt is Opt.SOLUTION_MODIFIER:
            _put_modifier(out, value)
        elif opt is Opt.BIND:
            for bind in _put_count(out, value, where, 1):
                if not 0 <= bind.var <= 255:
                    raise EncodeError(f"bind variable index {bind.var} outside 0..255")
                out.append(bind.var)
                _put_expression(out, bind.expr, pfx)
        elif opt is Opt.MAX_RESPONSE_SIZE:
            if not 0 <= value <= 0xFFFFFFFF:
                raise EncodeError(f"max response size {value} outside u32")
            out += _U32.pack(value)
        else:  # CREDENTIALS
            kp_id = bytes(value.kp_id)
            if len(kp_id) != 16:
                raise EncodeError(f"a KP ID is 16 bytes, not {len(kp_id)}")
            password = value.password.encode("utf-8")
            if len(password) > 255:
                raise EncodeError("a password is at most 255 bytes")
            out += kp_id + bytes((len(password),)) + password


def _put_modifier(out: bytearray, mod: SolutionModifier) -> None:
    order = Order(mod.order)
    flags = order | (4 if mod.limit is not None else 0) | (8 if mod.offset is not None else 0)
    flags |= 16 if mod.distinct else 0
    out.append(flags)
    if order:
        if mod.order_var is None or not 0 <= mod.order_var <= 255:
            raise EncodeError("an ordered solution modifier needs a variable index 0..255")
        out.append(mod.order_var)
    for value in (mod.limit, mod.offset):
        if value is not None:
            if not 0 <= value <= 0xFFFF:
                raise EncodeError(f"limit/offset {value} outside u16")
            out += _U16.pack(value)


def _encode_request(req: Request) -> tuple[int, bytearray]:
    try:
        tx = Tx(req.tx)
    except ValueError:
        raise EncodeError(f"unknown transaction type {req.tx!r}") from None
    layout = LAYOUT[tx]
    for name in _DATA_FIELDS:
        if name not in layout and getattr(req, name) is not None:
            raise EncodeError(f"{tx.name} has no {name} field")
    opts = req.options or NO_OPTIONS
    prefixes = opts.prefixes
    if prefixes is None:
        prefixes = choose_prefixes(request_iris(req)) if layout else ()
    elif prefixes and not layout:
        raise EncodeError(f"option PREFIX does not apply to {tx.name}")
    pfx = _Prefixes(prefixes)
    out = bytearray()
    allow_vars = not tx.is_data_update
    for name in layout:
        value = getattr(req, name)
        if name in _GRAPH_FIELDS:
            _put_graph(out, value or (), pfx, allow_vars, name)
        elif name == "projection":
            if value is None or not 0 <= value <= 255:
                raise EncodeError("SELECT needs a projection count 0..255")
            out.append(value)
        elif name == "optional":
            for graph in _put_count(out, value or (), name):
                _put_graph(out, graph, pfx, allow_vars, name)
        elif name == "graphs":
            for graph in _put_count(out, value or (), name, 1):
                if tx is Tx.CREATE and graph == "":
                    raise EncodeError("CREATE cannot name the default graph")
                out += _graph_name(pfx, graph)
        else:  # source, target
            if value is None:
                raise EncodeError(f"{tx.name} needs a {name} graph")
            out += _graph_name(pfx, value)
    _encode_options(out, tx, opts, prefixes, pfx)
    return tx | (0x80 if req.confirmable else 0), out


def _check_u16(value: int, what: str) -> int:
    if not 0 <= value <= 0xFFFF:
        raise EncodeError(f"{what} {value} outside 0..65535")
    return value


def _frame(transport: Transport, version: int, type_byte: int, tid: int, body: bytes | bytearray,
           seq: int | None = None) -> bytes:
    _check_u16(tid, "transaction ID")
    if transport is TCP:
        return _HDR_TCP.pack(version, type_byte, tid, 8 + len(body)) + body
    if seq is not None:
        return _HDR_IND.pack(version, type_byte, tid, _check_u16(seq, "sequence number")) + body
    return _HDR_UDP.pack(version, type_byte, tid) + body


def encode(msg: Message, transport: Transport = UDP, *, max_size: int | None = None) -> bytes:
    """The canonical bytes of `msg` over `transport`.

    For a Response, `max_size` is the requester's MAX RESPONSE SIZE: results are cut to fit
    (RC < TRC), or the answer becomes status RESPONSE_TOO_LARGE (§6.4).
    """
    transport = Transport(transport)
    if isinstance(msg, Request):
        type_byte, body = _encode_request(msg)
        return _frame(transport, msg.version, type_byte, msg.tid, body)
    if isinstance(msg, Response):
        return _encode_response(msg, transport, max_size)
    if isinstance(msg, Ack):
        if transport is TCP:
            raise EncodeError("there are no ACKs over TCP (R11)")
        body = b"" if msg.seq is None else _U16.pack(_check_u16(msg.seq, "sequence number"))
        return _frame(transport, msg.version, 0, msg.tid, body)
    raise EncodeError(f"{msg!r} is not a KSP message")


def _encode_response(msg: Response, transport: Transport, max_size: int | None) -> bytes:
    status = int(msg.status)
    if not 0 <= status <= 0x7F:
        raise EncodeError(f"status {status} outside 0..127")
    type_byte = status | (0x80 if msg.indication else 0)
    seq = None
    if msg.indication and transport is UDP:
        seq = 0 if msg.seq is None else msg.seq
    hsize = header_size(transport, msg.indication)
    result = msg.result
    if status != Status.OK or result is None:
        if result is not None:
            raise EncodeError("a RES/IND with an error status carries no result")
        return _frame(transport, msg.version, type_byte, msg.tid, b"", seq)
    limit = None if max_size is None else max_size - hsize
    body = _encode_result(result, limit)
    if body is None:
        type_byte = Status.RESPONSE_TOO_LARGE | (type_byte & 0x80)
        body = b""
    return _frame(transport, msg.version, type_byte, msg.tid, body, seq)


def _encode_result(result, limit: int | None) -> bytes | None:
    """The Data field of a query result within `limit` bytes, or None if nothing fits."""
    if isinstance(result, AskResult):
        if limit is not None and limit < 1:
            return None
        return b"\x01" if result.value else b"\x00"
    if isinstance(result, SelectResult):
        items, fixed = result.rows, 6
        if not 0 <= result.variables <= 255:
            raise EncodeError("VC outside 0..255")
        for row in items:
            if len(row) != result.variables:
                raise EncodeError(f"a row has {len(row)} terms, VC is {result.variables}")
    elif isinstance(result, ConstructResult):
        items, fixed = result.triples, 5
    else:
        raise EncodeError(f"{result!r} is not a query result")
    total = len(items) if result.total is None else result.total
    if total < len(items):
        raise EncodeError(f"total {total} is less than the {len(items)} results given")
    if result.prefixes is not None:
        return _pack_result(result, tuple(result.prefixes), items, total, fixed, limit)[0]
    triples = isinstance(result, ConstructResult)
    prefixes = choose_prefixes(result_iris(items, triples))
    body, count = _pack_result(result, prefixes, items, total, fixed, limit)
    if body is not None and count < len(items):
        # Cut short: a prefix list chosen for the results that fit may leave room for more.
        smaller = choose_prefixes(result_iris(items[:count], triples))
        body2, count2 = _pack_result(result, smaller, items, total, fixed, limit)
        if body2 is not None and (count2, -len(body2)) > (count, -len(body)):
            body = body2
    return body


def _pack_result(result, prefixes: tuple[str, ...], items, total: int, fixed: int,
                 limit: int | None) -> tuple[bytes | None, int]:
    pfx = _Prefixes(prefixes)
    head = bytearray((len(prefixes),))
    for prefix in prefixes:
        raw = prefix.encode("utf-8")
        head += b"\x00" + _uri_len(len(raw)) + raw
    room = None if limit is None else limit - len(head) - fixed + 1
    if room is not None and room < 0:
        return None, 0
    rows = bytearray()
    count = 0
    if isinstance(result, SelectResult):
        for row in items[:0xFFFF]:
            encoded = bytearray()
            for term in row:
                if term is None:
                    encoded.append(0)
                else:
                    code, payload = _member(term, pfx, "result")
                    if code == 3:
                        raise EncodeError("a result cannot bind a variable to a variable")
                    encoded.append(code)
                    encoded += payload
            if room is not None and len(rows) + len(encoded) > room:
                break
            rows += encoded
            count += 1
        tail = bytes((result.variables,))
    else:
        prev = None
        for t in items[:0xFFFF]:
            encoded = _triple(t, prev, pfx, False, "result")
            if room is not None and len(rows) + len(encoded) > room:
                break
            rows += encoded
            prev = t
            count += 1
        tail = b""
    body = bytes(head) + _U16.pack(min(total, 0xFFFF)) + _U16.pack(count) + tail + bytes(rows)
    return body, count


# ---------------------------------------------------------------------------------------------
# Decoding


class _Deferred(NamedTuple):
    """A URI whose prefix list comes later in the message (REQ options follow the data)."""

    index: int
    local: str


class _Reader:
    """Cursor over one message; `status` is what a failure in the current section answers."""

    __slots__ = ("buf", "pos", "end", "status", "path", "pfx", "deferred", "tid")

    def __init__(self, buf: bytes, pos: int, tid: int):
        self.buf = buf
        self.pos = pos
        self.end = len(buf)
        self.status = Status.INVALID_DATA_FORMAT
        self.path = "data"
        self.pfx: tuple[str, ...] | None = None
        self.deferred = False
        self.tid = tid

    def fail(self, message: str) -> DecodeError:
        return DecodeError(self.status, f"{message} (offset {self.pos})", self.path, self.tid)

    def take(self, n: int) -> bytes:
        pos = self.pos
        end = pos + n
        if end > self.end:
            raise self.fail(f"needs {n} bytes, {self.end - pos} left")
        self.pos = end
        return self.buf[pos:end]

    def u8(self) -> int:
        pos = self.pos
        if pos >= self.end:
            raise self.fail("truncated")
        self.pos = pos + 1
        return self.buf[pos]

    def u16(self) -> int:
        return _U16.unpack(self.take(2))[0]

    def uri_len(self) -> int:
        b0 = self.u8()
        if b0 < 0x80:
            return b0
        n = (b0 & 0x7F) | (self.u8() << 7)
        if n < 0x80:
            raise self.fail("two-byte URI length below 128 (not minimal)")
        return n

    def str_len(self) -> int:
        b0 = self.u8()
        width = b0 >> 6
        n = b0 & 0x3F
        if width:
            for shift in range(width):
                n |= self.u8() << (6 + 8 * shift)
            if n < (0x40, 0x4000, 0x400000)[width - 1]:
                raise self.fail("string length not in its shortest form")
        return n

    def text(self, n: int) -> str:
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail("invalid UTF-8") from None

    def string(self) -> str:
        return self.text(self.str_len())

    def uri(self) -> IRI | _Deferred:
        index = self.u8()
        local = self.text(self.uri_len())
        if not index:
            return IRI(local)
        pfx = self.pfx
        if pfx is None:
            self.deferred = True
            return _Deferred(index, local)
        if index > len(pfx):
            raise self.fail(f"prefix index {index} beyond the {len(pfx)} prefixes")
        return IRI(pfx[index - 1] + local)

    def literal(self, kind: int) -> Literal:
        if kind == 0:
            return Literal(self.string(), XSD_STRING)
        if kind == 1:
            return Literal(str(_I32.unpack(self.take(4))[0]), XSD_INTEGER)
        if kind == 2:
            return Literal(float_lexical(_F32.unpack(self.take(4))[0]), XSD_FLOAT)
        if kind == 3:
            raw = self.take(19)
            lex = raw.decode("latin-1")
            if not is_datetime19(lex):
                raise self.fail(f"invalid dateTime {raw!r}")
            return Literal(lex, XSD_DATETIME)
        if kind == 4:
            b = self.u8()
            if b > 1:
                raise self.fail(f"boolean byte {b}")
            return Literal("true" if b else "false", XSD_BOOLEAN)
        if kind == 5:
            tag = self.take(self.u8()).decode("latin-1")
            if not is_lang_tag(tag):
                raise self.fail(f"invalid language tag {tag!r}")
            return Literal(self.string(), RDF_LANGSTRING, tag)
        if kind == 6:
            datatype = self.uri()
            lex = self.string()
            if datatype == RDF_LANGSTRING:
                raise self.fail("an rdf:langString literal without a language tag")
            return Literal(lex, datatype)
        if kind == 7:
            return Literal(double_lexical(_F64.unpack(self.take(8))[0]), XSD_DOUBLE)
        raise self.fail(f"literal type {kind:#04x}")

    def member(self, code: int):
        if code == 1:
            return self.uri()
        if code == 2:
            word = self.u8()
            if word >= len(_RESERVED_IRIS):
                raise self.fail(f"reserved word {word:#04x}")
            return _RESERVED_IRIS[word]
        if code == 3:
            return Var(self.u8())
        if code == 4:
            return self.literal(self.u8())
        if code == 5:
            n = self.uri_len()
            if not n:
                raise self.fail("empty blank node label")
            return BNode(self.text(n))
        raise self.fail(f"member type {code:#04x}")

    def triples(self, count: int, allow_vars: bool, prev: Triple | None = None) -> list[Triple]:
        out = []
        member = self.member
        for _ in range(count):
            b = self.u8()
            st, pt, ot = b & 7, (b >> 3) & 3, b >> 5
            if st not in ST_ALLOWED or ot not in OT_ALLOWED:
                raise self.fail(f"triple type byte {b:#04x}")
            if (st == 0 or pt == 0 or ot == 0) and prev is None:
                raise self.fail("Empty member in the first triple")
            s = member(st) if st else prev[0]
            p = member(pt) if pt else prev[1]
            o = member(ot) if ot else prev[2]
            if not allow_vars and (st == 3 or pt == 3 or ot == 3):
                raise self.fail("variable in a DATA operation or a result")
            prev = Triple(s, p, o)
            out.append(prev)
        return out

    def graph(self, allow_vars: bool) -> tuple[Triple, ...]:
        return tuple(self.triples(self.u8(), allow_vars))

    def graph_name(self) -> IRI | _Deferred:
        return self.uri()

    def expression(self) -> tuple:
        count = self.u8()
        if not count:
            raise self.fail("empty expression")
        tokens = []
        for _ in range(count):
            code = self.u8()
            if code == TOKEN_VARIABLE:
                tokens.append(Var(self.u8()))
            elif code == TOKEN_URI:
                tokens.append(self.uri())
            elif code <= TOKEN_BOOLEAN:
                tokens.append(self.literal(code))
            elif code == TOKEN_LITERAL:
                tokens.append(self.literal(self.u8()))
            else:
                op = _OP_BY_CODE.get(code)
                if op is None:
                    raise self.fail(f"token type {code:#04x}")
                tokens.append(op)
        expr = tuple(tokens)
        _check_rpn(expr, DecodeError)
        return expr


def _header(buf: bytes, transport: Transport) -> tuple[int, int, int, int]:
    """(version, type byte, tid, header size) of any message; checks TCP Length."""
    if transport is TCP:
        if len(buf) < 8:
            raise DecodeError(Status.INVALID_DATA_FORMAT, f"{len(buf)} bytes, a TCP header is 8",
                              "header", peek_tid(buf))
        version, type_byte, tid, length = _HDR_TCP.unpack_from(buf)
        if length != len(buf):
            raise DecodeError(Status.INVALID_DATA_FORMAT,
                              f"TCP Length {length} but the message has {len(buf)} bytes",
                              "header.length", tid)
        size = 8
    else:
        if len(buf) < 4:
            raise DecodeError(Status.INVALID_DATA_FORMAT, f"{len(buf)} bytes, a UDP header is 4",
                              "header")
        version, type_byte, tid = _HDR_UDP.unpack_from(buf)
        size = 4
    if version != VERSION:
        raise DecodeError(Status.VERSION_NOT_SUPPORTED, f"version {version}", "header.version", tid)
    return version, type_byte, tid, size


def decode_kp_message(buf: bytes, transport: Transport = UDP) -> Request | Ack:
    """Decode what a SIB receives: a REQ, or (over UDP) an ACK."""
    buf = bytes(buf)
    version, type_byte, tid, pos = _header(buf, transport)
    code = type_byte & 0x7F
    if code == 0:
        if type_byte or transport is TCP:
            raise DecodeError(Status.INVALID_MESSAGE_TYPE,
                              "ACK over TCP" if transport is TCP else "type byte 0x80",
                              "header.type", tid)
        rest = len(buf) - pos
        if rest == 0:
            return Ack(tid, None, version)
        if rest == 2:
            return Ack(tid, _U16.unpack_from(buf, pos)[0], version)
        raise DecodeError(Status.INVALID_DATA_FORMAT, f"ACK data of {rest} bytes", "data", tid)
    tx = _TX_BY_CODE[code]
    if tx is None:
        raise DecodeError(Status.INVALID_TRANSACTION_TYPE, f"transaction type {code:#04x}",
                          "header.type", tid)
    r = _Reader(buf, pos, tid)
    fields = _read_request_data(r, tx)
    r.status = Status.INVALID_OPTION_FORMAT
    r.path = "options"
    options = _read_options(r, tx)
    if r.pos != r.end:
        raise r.fail(f"{r.end - r.pos} bytes after the last option")
    if r.deferred:
        r.status = Status.INVALID_DATA_FORMAT
        r.path = "data"
        prefixes = options.prefixes or ()
        fields = {k: _resolve(v, prefixes, r) for k, v in fields.items()}
        options = _resolve_options(options, prefixes, r)
    return Request(tx, tid, bool(type_byte & 0x80), options=options, version=version, **fields)


def _read_request_data(r: _Reader, tx: Tx) -> dict:
    fields: dict = {}
    allow_vars = not tx.is_data_update
    for name in LAYOUT[tx]:
        r.path = f"data.{name}"
        if name in _GRAPH_FIELDS:
            fields[name] = r.graph(allow_vars)
        elif name == "projection":
            fields[name] = r.u8()
        elif name == "optional":
            fields[name] = tuple(r.graph(allow_vars) for _ in range(r.u8()))
        elif name == "graphs":
            count = r.u8()
            if not count:
                raise r.fail("GC = 0")
            names = tuple(r.graph_name() for _ in range(count))
            if tx is Tx.CREATE and "" in names:
                raise r.fail("CREATE cannot name the default graph")
            fields[name] = names
        else:
            fields[name] = r.graph_name()
    return fields


def _read_options(r: _Reader, tx: Tx) -> Options:
    count = r.u8()
    if not count:
        return NO_OPTIONS
    values: dict = {}
    allow_vars = not tx.is_data_update
    for _ in range(count):
        code = r.u8()
        if code > 0x09:
            raise DecodeError(Status.INVALID_OPTION_TYPE, f"option type {code:#04x}", "options",
                              r.tid)
        opt = Opt(code)
        if tx not in OPTION_APPLIES[opt]:
            raise DecodeError(Status.INVALID_OPTION_TYPE, f"{opt.name} does not apply to {tx.name}",
                              "options", r.tid)
        r.path = f"options.{opt.name}"
        key = _OPTION_KEYS[opt]
        if key in values:
            raise r.fail(f"{opt.name} appears twice")
        if opt is Opt.MAX_RESPONSE_SIZE:
            values[key] = _U32.unpack(r.take(4))[0]
        elif opt is Opt.CREDENTIALS:
            kp_id = r.take(16)
            values[key] = Credentials(kp_id, r.text(r.u8()))
        elif opt is Opt.SOLUTION_MODIFIER:
            values[key] = _read_modifier(r)
        else:
            n = r.u8()
            if not n:
                raise r.fail(f"{opt.name} with count 0")
            if opt is Opt.PREFIX:
                prefixes = []
                for _ in range(n):
                    if r.u8():
                        raise r.fail("a prefix entry must have prefix index 0")
                    prefixes.append(r.text(r.uri_len()))
                values[key] = tuple(prefixes)
                if not r.deferred:
                    r.pfx = values[key]
            elif opt is Opt.OPTIONAL_PATTERN:
                values[key] = tuple(r.graph(allow_vars) for _ in range(n))
            elif opt is Opt.FILTER:
                values[key] = tuple(r.expression() for _ in range(n))
            elif opt is Opt.BIND:
                values[key] = tuple(Bind(r.u8(), r.expression()) for _ in range(n))
            else:
                values[key] = tuple(r.graph_name() for _ in range(n))
    if "prefixes" not in values:
        values["prefixes"] = ()
    return Options(**values)


_OPTION_KEYS = {
    Opt.PREFIX: "prefixes", Opt.DELETE_GRAPH: "delete_graphs", Opt.INSERT_GRAPH: "insert_graphs",
    Opt.QUERY_GRAPH: "query_graphs", Opt.OPTIONAL_PATTERN: "optional", Opt.FILTER: "filters",
    Opt.SOLUTION_MODIFIER: "modifier", Opt.BIND: "binds",
    Opt.MAX_RESPONSE_SIZE: "max_response_size", Opt.CREDENTIALS: "credentials",
}


def _read_modifier(r: _Reader) -> SolutionModifier:
    flags = r.u8()
    order = flags & 3
    if flags & 0xE0 or order == 3:
        raise r.fail(f"solution modifier flags {flags:#04x}")
    order_var = r.u8() if order else None
    limit = r.u16() if flags & 4 else None
    offset = r.u16() if flags & 8 else None
    return SolutionModifier(Order(order), order_var, limit, offset, bool(flags & 16))


def _resolve(value, prefixes: tuple[str, ...], r: _Reader):
    """`value` with every _Deferred URI completed from the prefix list."""
    if isinstance(value, _Deferred):
        if value.index > len(prefixes):
            raise r.fail(f"prefix index {value.index} beyond the {len(prefixes)} prefixes")
        return IRI(prefixes[value.index - 1] + value.local)
    if isinstance(value, Literal):
        if isinstance(value.datatype, _Deferred):
            return value._replace(datatype=_resolve(value.datatype, prefixes, r))
        return value
    if isinstance(value, Triple):
        return Triple(*(_resolve(v, prefixes, r) for v in value))
    if isinstance(value, tuple) and not isinstance(value, (Var, BNode)):
        return tuple(_resolve(v, prefixes, r) for v in value)
    if isinstance(value, Bind):
        return Bind(value.var, _resolve(value.expr, prefixes, r))
    return value


def _resolve_options(options: Options, prefixes: tuple[str, ...], r: _Reader) -> Options:
    r.status = Status.INVALID_OPTION_FORMAT
    r.path = "options"
    return options._replace(**{
        key: _resolve(getattr(options, key), prefixes, r)
        for key in ("delete_graphs", "insert_graphs", "query_graphs", "optional", "filters", "binds")
    })


def decode_sib_message(buf: bytes, transport: Transport = UDP, answers: Tx | None = None) -> Response:
    """Decode what a KP receives: a RES or IND.

    `answers` is the transaction type of the request it answers: a RES header does not say,
    and the Data field's layout depends on it. Without it, a Data field is an error.
    """
    buf = bytes(buf)
    version, type_byte, tid, pos = _header(buf, transport)
    indication = bool(type_byte & 0x80)
    seq = None
    if indication and transport is UDP:
        if len(buf) < 6:
            raise DecodeError(Status.INVALID_DATA_FORMAT, "an IND header is 6 bytes", "header", tid)
        seq = _U16.unpack_from(buf, 4)[0]
        pos = 6
    status = _STATUS_BY_CODE[type_byte & 0x7F]
    r = _Reader(buf, pos, tid)
    result = None
    if pos < r.end or (status == Status.OK and answers is not None and Tx(answers).is_query):
        if status != Status.OK:
            raise r.fail("a RES/IND with an error status has no Data field")
        if answers is None or not Tx(answers).is_query:
            raise r.fail("a Data field, but the request answered has no result "
                         f"({'unknown' if answers is None else Tx(answers).name})")
        result = _read_result(r, Tx(answers).base)
        if r.pos != r.end:
            raise r.fail(f"{r.end - r.pos} bytes after the result")
    return Response(tid, status, result, indication, seq, version)


def _read_result(r: _Reader, form: Tx):
    if form is Tx.ASK:
        r.path = "data.ask"
        b = r.u8()
        if b > 1:
            raise r.fail(f"ASK result byte {b}")
        return AskResult(bool(b))
    r.path = "data.prefixes"
    prefixes = []
    for _ in range(r.u8()):
        if r.u8():
            raise r.fail("a prefix entry must have prefix index 0")
        prefixes.append(r.text(r.uri_len()))
    r.pfx = prefixes = tuple(prefixes)
    r.path = "data.counts"
    total = r.u16()
    count = r.u16()
    if count > total:
        raise r.fail(f"RC {count} > TRC {total}")
    if form is Tx.CONSTRUCT:
        r.path = "data.triples"
        return ConstructResult(tuple(r.triples(count, False)), total, prefixes)
    variables = r.u8()
    r.path = "data.rows"
    rows = []
    u8 = r.u8
    member = r.member
    for _ in range(count):
        row = []
        for _ in range(variables):
            code = u8()
            if code == 0:
                row.append(None)
            elif code == 3:
                raise r.fail("a variable in a result row")
            else:
                row.append(member(code))
        rows.append(tuple(row))
    return SelectResult(variables, tuple(rows), total, prefixes)
