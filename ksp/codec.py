"""Bytes ⇄ messages: the hot codec (docs/wire-format.md is the spec it implements).

Written with `struct` and plain indexing because construct's compiled parsers cost 2.4 µs for
a 4-byte header (measured), more than the budget of a whole message; `ksp.reference.schema` declares
the same layouts in construct, and the tests check both agree on every vector.

Decoding never raises anything but `DecodeError` (with the status a SIB answers with).
Encoding produces the canonical encoding (§10) and raises `EncodeError` for messages the wire
cannot carry.
"""
from __future__ import annotations

import os
import struct
from contextlib import contextmanager
from enum import Enum
from typing import Iterable, Iterator

from .codes import (
    OPTION_APPLIES, RESERVED_CODE, RESERVED_WORDS, TOKEN_BOOLEAN, TOKEN_LITERAL, TOKEN_URI,
    TOKEN_VARIABLE, VERSION, LiteralType,
    Op, Opt, Status, Tx,
)
from .compress import choose_prefixes, request_iris, result_iris
from .layout import LITERAL_SIZES, MEMBER_TYPES, OPTION_FIELDS, REQUEST_FIELDS, Body
from .errors import DecodeError, EncodeError
from .literals import compact_type, float_lexical, is_datetime19, is_lang_tag
from .model import (
    NO_OPTIONS, UNSET_OPTIONS, Ack, AskResult, Bind, ConstructResult, Credentials, Message,
    Options, Order, Request, Response, SelectResult, SolutionModifier,
)
from .terms import (
    RDF_LANGSTRING, XSD_BOOLEAN, XSD_DATETIME, XSD_DOUBLE, XSD_FLOAT, XSD_INTEGER, XSD_STRING,
    COMPACT_DATATYPES, BNode, IRI, Literal, Triple, Var, double_lexical,
)

__all__ = [
    "Transport", "UDP", "TCP", "LAYOUT", "encode", "decode_kp_message", "decode_sib_message",
    "tcp_frame_length", "header_size", "peek_tid", "retag", "use_speedups", "speedups_enabled",
    "pure_python", "set_interning",
]


class Transport(str, Enum):
    UDP = "udp"
    TCP = "tcp"


UDP = Transport.UDP
TCP = Transport.TCP

# Data fields of each transaction, in wire order (§5), by name: the layout table's, which also
# says how each is written (`ksp.layout.REQUEST_FIELDS`).
LAYOUT: dict[Tx, tuple[str, ...]] = {tx: tuple(name for name, _ in fields)
                                     for tx, fields in REQUEST_FIELDS.items()}
_FIELD_KIND: dict[str, int] = {name: int(body) for fields in REQUEST_FIELDS.values()
                               for name, body in fields}  # plain ints: compared per field
_GRAPH_FIELDS = frozenset(name for name, kind in _FIELD_KIND.items() if kind == Body.GRAPH)
_DATA_FIELDS = ("delete", "insert", "where", "optional", "template", "projection", "graphs",
                "source", "target")  # the order encoding checks them in (error messages)

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

ST_ALLOWED = frozenset(int(m) for m in MEMBER_TYPES["s"])  # no Literal subject
PT_ALLOWED = frozenset(int(m) for m in MEMBER_TYPES["p"])
OT_ALLOWED = frozenset(int(m) for m in MEMBER_TYPES["o"])


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


def _is_tcp(transport: Transport) -> bool:
    """For the C module, which takes the transport as a flag (a str such as "tcp" works too)."""
    return transport is TCP or (transport is not UDP and Transport(transport) is TCP)


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

    __slots__ = ("items", "order", "cache", "entries")

    _instances: dict[tuple[str, ...], "_Prefixes"] = {}

    @classmethod
    def of(cls, prefixes: Iterable[str]) -> "_Prefixes":
        """The matcher of a prefix list, shared by every message with that list: its URI-field
        cache then serves them all (a sensor sends the same IRIs again and again)."""
        key = prefixes if type(prefixes) is tuple else tuple(prefixes)
        pfx = cls._instances.get(key)
        if pfx is None:
            pfx = cls(key)
            if len(cls._instances) >= 256:
                cls._instances.clear()
            cls._instances[key] = pfx
        return pfx

    def __init__(self, prefixes: Iterable[str]):
        self.items = tuple(prefixes)
        if len(self.items) > 255:
            raise EncodeError(f"{len(self.items)} prefixes; KSP carries at most 255")
        if not all(self.items):
            raise EncodeError("a prefix list entry cannot be empty")
        self.order = sorted(((p, i + 1) for i, p in enumerate(self.items) if p),
                            key=lambda pi: (-len(pi[0]), pi[1]))
        self.cache: dict[str, bytes] = {}
        self.entries = b"".join(map(_prefix_entry, self.items))  # the PREFIX entries (§7.2)

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
            if len(self.cache) >= 4096:
                self.cache.clear()
            self.cache[iri] = field
        return field


def _prefix_entry(prefix: str) -> bytes:
    """One entry of a prefix list (§7.2): a URI field with prefix index 0."""
    raw = prefix.encode("utf-8")
    return b"\x00" + _uri_len(len(raw)) + raw


def _string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return _str_len(len(raw)) + raw


_compact_cache: dict[Literal, tuple[int, bytes]] = {}


def _literal_payload(lit: Literal, pfx: _Prefixes) -> tuple[int, bytes]:
    """(literal type, payload) of a literal by the compact-form rule."""
    cached = _compact_cache.get(lit)
    if cached is not None:
        return cached
    kind, payload = _literal_payload_uncached(lit, pfx)
    if kind != LiteralType.TYPED:  # TYPED payloads depend on the message's prefix list
        if len(_compact_cache) >= 8192:
            _compact_cache.clear()
        _compact_cache[lit] = (kind, payload)
    return kind, payload


def _literal_payload_uncached(lit: Literal, pfx: _Prefixes) -> tuple[int, bytes]:
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
    cls = type(term)
    if cls is IRI:
        code = RESERVED_CODE.get(term)
        if code is not None:
            return 2, bytes((code,))
        return 1, pfx.uri(term)
    if cls is Literal:
        kind, payload = _literal_payload(term, pfx)
        return 4, bytes((kind,)) + payload
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
                raise error("bound() must follow a variable token")
            arity = token.arity
            if depth < arity:
                raise error(f"{token.name} needs {arity} operands, has {depth}")
            depth -= arity - 1
        else:
            depth += 1
    if depth != 1:
        raise error(f"expression leaves {depth} values, not 1")


def _graph_name(pfx: _Prefixes, name: str) -> bytes:
    if not isinstance(name, str):
        raise EncodeError(f"graph name {name!r} is not an IRI")
    return pfx.uri(name)


def _encode_options(out: bytearray, tx: Tx, opts: Options, prefixes: tuple[str, ...],
                    pfx: _Prefixes) -> None:
    present: list[tuple[Opt, object]] = [(Opt.PREFIX, prefixes)] if prefixes else []
    if opts[1:] != UNSET_OPTIONS:  # (the common case, no option but PREFIX, skips the walk)
        for opt, value in ((Opt.DELETE_GRAPH, opts.delete_graphs),
                           (Opt.INSERT_GRAPH, opts.insert_graphs),
                           (Opt.QUERY_GRAPH, opts.query_graphs),
                           (Opt.OPTIONAL_PATTERN, opts.optional), (Opt.FILTER, opts.filters),
                           (Opt.SOLUTION_MODIFIER, opts.modifier), (Opt.BIND, opts.binds),
                           (Opt.MAX_RESPONSE_SIZE, opts.max_response_size),
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
            _put_count(out, value, where, 1)
            out += pfx.entries
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
    tx = req.tx
    try:
        if type(tx) is not Tx:
            tx = Tx(tx)
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
    pfx = _Prefixes.of(prefixes)
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
    if _speedups is not None and (max_size is None or type(msg) is not Response):
        data = _speedups.encode(msg, _is_tcp(transport))
        if data is not None:
            return data
    try:
        if type(transport) is not Transport:
            transport = Transport(transport)
        return _encode(msg, transport, max_size)
    except UnicodeEncodeError as exc:
        raise EncodeError(f"text that UTF-8 cannot carry: {exc}") from None


def retag(data: bytes, tid: int, seq: int | None = None) -> bytes:
    """The encoded RES/IND `data` with Transaction ID `tid` and, for a UDP IND, sequence
    number `seq`. Nothing else in a message depends on them (the header has a fixed size per
    transport), so the subscribers of one result can share one encoding."""
    buf = bytearray(data)
    _U16.pack_into(buf, 2, _check_u16(tid, "transaction ID"))
    if seq is not None:
        _U16.pack_into(buf, 4, _check_u16(seq, "sequence number"))
    return bytes(buf)


def _encode(msg: Message, transport: Transport, max_size: int | None) -> bytes:
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
        if msg.seq is None:
            raise EncodeError("an IND over UDP needs a sequence number (§2.3)")
        seq = msg.seq
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
    body, count = _pack_result(result, choose_prefixes(result_iris(items, triples)), items, total,
                               fixed, limit)
    if body is None or count < len(items):
        # Cut short: a prefix list for just the results that fit, or none at all, may leave
        # room for more results (or for the empty result, rather than RESPONSE_TOO_LARGE).
        for prefixes in (choose_prefixes(result_iris(items[:count], triples)), ()):
            body2, count2 = _pack_result(result, prefixes, items, total, fixed, limit)
            if body2 is not None and (body is None or (count2, -len(body2)) > (count, -len(body))):
                body, count = body2, count2
    return body


def _pack_result(result, prefixes: tuple[str, ...], items, total: int, fixed: int,
                 limit: int | None) -> tuple[bytes | None, int]:
    pfx = _Prefixes.of(prefixes)
    head = bytearray((len(prefixes),))
    head += pfx.entries
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
#
# Free functions over (buf, pos) returning (value, new pos): attribute access and method calls
# per byte cost more than the parsing itself. A function that finds bad bytes raises _Bad; an
# IndexError, struct.error or UnicodeDecodeError means the same. The section being read turns
# either into a DecodeError with its status (data 0x04, options 0x06).


class _Bad(Exception):
    pass


# A URI whose prefix list comes later in the message (REQ options follow the data) is held as
# a plain `(index, local)` tuple until the options are read: no term is a plain tuple, and a
# tuple costs a tenth of a named one.
_Deferred = tuple


_FAILURES = (_Bad, IndexError, struct.error, UnicodeDecodeError, ValueError)
_LITERAL_SIZES = LITERAL_SIZES
_literal_cache: dict[bytes, Literal] = {}


def _uri_len_at(buf: bytes, pos: int) -> tuple[int, int]:
    n = buf[pos]
    if n < 0x80:
        return n, pos + 1
    n = (n & 0x7F) | buf[pos + 1] << 7
    if n < 0x80:
        raise _Bad("two-byte URI length below 128 (not minimal)")
    return n, pos + 2


def _str_len_at(buf: bytes, pos: int) -> tuple[int, int]:
    b0 = buf[pos]
    if b0 < 0x40:
        return b0, pos + 1
    width = b0 >> 6
    n = b0 & 0x3F
    for i in range(width):
        n |= buf[pos + 1 + i] << (6 + 8 * i)
    if n < (0x40, 0x4000, 0x400000)[width - 1]:
        raise _Bad("string length not in its shortest form")
    return n, pos + 1 + width


def _text_at(buf: bytes, pos: int, n: int) -> tuple[str, int]:
    end = pos + n
    if end > len(buf):
        raise _Bad(f"{n} bytes of text run past the end")
    return buf[pos:end].decode("utf-8"), end


class _Pending:
    """Stands for a REQ's prefix list while its data is read; notes whether any URI needed it."""

    __slots__ = ("used",)

    def __init__(self) -> None:
        self.used = False


def _prefix_entry_at(buf: bytes, pos: int) -> tuple[str, int]:
    """One entry of a prefix list: a URI field with prefix index 0 and a non-empty string."""
    if buf[pos]:
        raise _Bad("a prefix entry must have prefix index 0")
    n, pos = _uri_len_at(buf, pos + 1)
    if not n:
        raise _Bad("an empty prefix entry")
    return _text_at(buf, pos, n)


def _uri_at(buf: bytes, pos: int, pfx) -> tuple[IRI | _Deferred, int]:
    index = buf[pos]
    n = buf[pos + 1]
    pos += 2
    if n > 0x7F:
        n = (n & 0x7F) | buf[pos] << 7
        pos += 1
        if n < 0x80:
            raise _Bad("two-byte URI length below 128 (not minimal)")
    end = pos + n
    if end > len(buf):
        raise _Bad("URI runs past the end")
    local = buf[pos:end].decode("utf-8")
    if not index:
        return IRI(local), end
    if type(pfx) is _Pending:
        pfx.used = True
        return (index, local), end
    if index > len(pfx):
        raise _Bad(f"prefix index {index} beyond the {len(pfx)} prefixes")
    return IRI(pfx[index - 1] + local), end


def _literal_at(buf: bytes, pos: int, pfx) -> tuple[Literal, int]:
    kind = buf[pos]
    size = _LITERAL_SIZES.get(kind)
    if size is not None:  # fixed-size payloads: decoded once, then cached by their bytes
        end = pos + 1 + size
        raw = buf[pos:end]
        lit = _literal_cache.get(raw)
        if lit is None:
            if len(raw) != size + 1:
                raise _Bad("literal runs past the end")
            lit = _fixed_literal(kind, raw[1:])
            if len(_literal_cache) >= 8192:
                _literal_cache.clear()
            _literal_cache[raw] = lit
        return lit, end
    pos += 1
    if kind == 0:
        n, pos = _str_len_at(buf, pos)
        text, pos = _text_at(buf, pos, n)
        return Literal(text, XSD_STRING), pos
    if kind == 5:
        n = buf[pos]
        tag, pos = _text_at(buf, pos + 1, n)
        if not is_lang_tag(tag):
            raise _Bad(f"invalid language tag {tag!r}")
        n, pos = _str_len_at(buf, pos)
        text, pos = _text_at(buf, pos, n)
        return Literal(text, RDF_LANGSTRING, tag), pos
    if kind == 6:
        datatype, pos = _uri_at(buf, pos, pfx)
        if datatype == RDF_LANGSTRING:
            raise _Bad("an rdf:langString literal without a language tag")
        if datatype == "":
            raise _Bad("a literal with an empty datatype IRI")
        n, pos = _str_len_at(buf, pos)
        text, pos = _text_at(buf, pos, n)
        return Literal(text, datatype), pos
    raise _Bad(f"literal type {kind:#04x}")


def _fixed_literal(kind: int, raw: bytes) -> Literal:
    if kind == 1:
        return Literal(str(_I32.unpack(raw)[0]), XSD_INTEGER)
    if kind == 2:
        return Literal(float_lexical(_F32.unpack(raw)[0]), XSD_FLOAT)
    if kind == 3:
        lex = raw.decode("latin-1")
        if not is_datetime19(lex):
            raise _Bad(f"invalid dateTime {raw!r}")
        return Literal(lex, XSD_DATETIME)
    if kind == 4:
        if raw[0] > 1:
            raise _Bad(f"boolean byte {raw[0]}")
        return Literal("true" if raw[0] else "false", XSD_BOOLEAN)
    return Literal(double_lexical(_F64.unpack(raw)[0]), XSD_DOUBLE)


def _member_at(buf: bytes, pos: int, code: int, pfx):
    if code == 1:
        return _uri_at(buf, pos, pfx)
    if code == 4:
        return _literal_at(buf, pos, pfx)
    if code == 3:
        return Var(buf[pos]), pos + 1
    if code == 2:
        word = buf[pos]
        if word >= len(_RESERVED_IRIS):
            raise _Bad(f"reserved word {word:#04x}")
        return _RESERVED_IRIS[word], pos + 1
    if code == 5:
        n, pos = _uri_len_at(buf, pos)
        if not n:
            raise _Bad("empty blank node label")
        label, pos = _text_at(buf, pos, n)
        return BNode(label), pos
    raise _Bad(f"member type {code:#04x}")


def _triples_at(buf: bytes, pos: int, count: int, pfx, allow_vars: bool) -> tuple[list, int]:
    out = []
    prev = None
    for _ in range(count):
        b = buf[pos]
        pos += 1
        st, pt, ot = b & 7, (b >> 3) & 3, b >> 5
        if st not in ST_ALLOWED or ot not in OT_ALLOWED:
            raise _Bad(f"triple type byte {b:#04x}")
        if prev is None and not (st and pt and ot):
            raise _Bad("Empty member in the first triple")
        if st == 1:
            s, pos = _uri_at(buf, pos, pfx)
        elif st:
            s, pos = _member_at(buf, pos, st, pfx)
        else:
            s = prev[0]
        if pt == 1:
            p, pos = _uri_at(buf, pos, pfx)
        elif pt:
            p, pos = _member_at(buf, pos, pt, pfx)
        else:
            p = prev[1]
        if ot:
            o, pos = _member_at(buf, pos, ot, pfx)
        else:
            o = prev[2]
        if not allow_vars and (st == 3 or pt == 3 or ot == 3):
            raise _Bad("a variable where variables are not allowed")
        prev = Triple(s, p, o)
        out.append(prev)
    return out, pos


def _graph_at(buf: bytes, pos: int, pfx, allow_vars: bool) -> tuple[tuple, int]:
    triples, pos = _triples_at(buf, pos + 1, buf[pos], pfx, allow_vars)
    return tuple(triples), pos


def _expression_at(buf: bytes, pos: int, pfx) -> tuple[tuple, int]:
    count = buf[pos]
    pos += 1
    if not count:
        raise _Bad("empty expression")
    tokens = []
    for _ in range(count):
        code = buf[pos]
        pos += 1
        if code == TOKEN_VARIABLE:
            tokens.append(Var(buf[pos]))
            pos += 1
        elif code == TOKEN_URI:
            iri, pos = _uri_at(buf, pos, pfx)
            tokens.append(iri)
        elif code <= TOKEN_BOOLEAN:
            lit, pos = _literal_at(buf, pos - 1, pfx)  # operand codes 0-4 = literal types 0-4
            tokens.append(lit)
        elif code == TOKEN_LITERAL:
            lit, pos = _literal_at(buf, pos, pfx)
            tokens.append(lit)
        else:
            op = _OP_BY_CODE.get(code)
            if op is None:
                raise _Bad(f"token type {code:#04x}")
            tokens.append(op)
    expr = tuple(tokens)
    _check_rpn(expr, _Bad)
    return expr, pos


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


def _failure(exc: Exception, status: Status, path: str, pos: int, tid: int) -> DecodeError:
    if isinstance(exc, _Bad):
        reason = str(exc)
    elif isinstance(exc, (IndexError, struct.error)):
        reason = "message ends inside this field"
    elif isinstance(exc, UnicodeDecodeError):
        reason = "invalid UTF-8"
    else:
        reason = str(exc)
    return DecodeError(status, f"{reason} (after offset {pos})", path, tid)


def decode_kp_message(buf: bytes, transport: Transport = UDP) -> Request | Ack:
    """Decode what a SIB receives: a REQ, or (over UDP) an ACK."""
    if _speedups is not None:
        msg = _speedups.decode_request(buf, _is_tcp(transport))
        if msg is not None:
            return msg
    return _decode_kp_message(buf, transport)


def _decode_kp_message(buf: bytes, transport: Transport = UDP) -> Request | Ack:
    """The pure-Python decoder of REQs and ACKs (the C one's oracle, and its answer to errors)."""
    if type(transport) is not Transport:
        transport = Transport(transport)
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
    allow_vars = _ALLOW_VARS[code]
    pending = _Pending()
    fields: dict = {}
    path = "data"
    try:
        for name, kind in _LAYOUT_KINDS[code]:
            path = name
            if kind == 0:  # graph
                fields[name], pos = _graph_at(buf, pos, pending, allow_vars)
            elif kind == 1:  # projection
                fields[name] = buf[pos]
                pos += 1
            elif kind == 2:  # optional graphs
                graphs = []
                count = buf[pos]
                pos += 1
                for _ in range(count):
                    graph, pos = _graph_at(buf, pos, pending, allow_vars)
                    graphs.append(graph)
                fields[name] = tuple(graphs)
            elif kind == 3:  # graph names
                count = buf[pos]
                pos += 1
                if not count:
                    raise _Bad("GC = 0")
                names = []
                for _ in range(count):
                    iri, pos = _uri_at(buf, pos, pending)
                    names.append(iri)
                if code == Tx.CREATE and "" in names:
                    raise _Bad("CREATE cannot name the default graph")
                fields[name] = tuple(names)
            else:  # source, target
                fields[name], pos = _uri_at(buf, pos, pending)
    except _FAILURES as exc:
        raise _failure(exc, Status.INVALID_DATA_FORMAT, "data." + path, pos, tid) from None
    options, pending_options = _read_options(buf, pos, code, tid)
    if pending.used or pending_options:
        prefixes = options.prefixes
        try:
            fields = {k: _resolve_field(k, v, prefixes) for k, v in fields.items()}
        except _Bad as exc:
            raise _failure(exc, Status.INVALID_DATA_FORMAT, "data", pos, tid) from None
        if pending_options:
            try:
                options = _resolve_options(options, prefixes)
            except _Bad as exc:
                raise _failure(exc, Status.INVALID_OPTION_FORMAT, "options", pos, tid) from None
    return Request(tx, tid, type_byte > 0x7F, options=options, version=version, **fields)


# Tables indexed by the integer code: IntEnum hashes in Python, a dict lookup by member costs
# several times one by int.
_ALLOW_VARS = [not tx.is_data_update if tx else True for tx in _TX_BY_CODE]
_LAYOUT_KINDS = [tuple((name, _FIELD_KIND[name]) for name in LAYOUT[tx]) if tx else ()
                 for tx in _TX_BY_CODE]
_OPT_BY_CODE = tuple(Opt)
_OPTS_ALLOWED = [frozenset(int(o) for o, txs in OPTION_APPLIES.items() if tx in txs) if tx else None
                 for tx in _TX_BY_CODE]


def _read_options(buf: bytes, pos: int, code_tx: int, tid: int) -> tuple[Options, bool]:
    """(options, whether option values hold URIs waiting for the prefix list)."""
    values: list = [None] * 10  # by option code, in Options field order
    path = "options"
    pfx = pending = _Pending()
    try:
        count = buf[pos]
        pos += 1
        if not count and pos == len(buf):
            return NO_OPTIONS_DECODED, False
        allow_vars = _ALLOW_VARS[code_tx]
        allowed = _OPTS_ALLOWED[code_tx]
        for _ in range(count):
            code = buf[pos]
            pos += 1
            if code > 0x09:
                raise DecodeError(Status.INVALID_OPTION_TYPE, f"option type {code:#04x}",
                                  "options", tid)
            opt = _OPT_BY_CODE[code]
            if code not in allowed:
                raise DecodeError(Status.INVALID_OPTION_TYPE,
                                  f"{opt.name} does not apply to {Tx(code_tx).name}", "options", tid)
            path = _OPTION_PATHS[code]
            key = code
            if values[key] is not None:
                raise _Bad(f"{opt.name} appears twice")
            if opt is Opt.MAX_RESPONSE_SIZE:
                values[key] = _U32.unpack_from(buf, pos)[0]
                pos += 4
            elif opt is Opt.CREDENTIALS:
                kp_id = buf[pos:pos + 16]
                if len(kp_id) != 16:
                    raise _Bad("KP ID runs past the end")
                password, pos = _text_at(buf, pos + 17, buf[pos + 16])
                values[key] = Credentials(kp_id, password)
            elif opt is Opt.SOLUTION_MODIFIER:
                values[key], pos = _modifier_at(buf, pos)
            else:
                n = buf[pos]
                pos += 1
                if not n:
                    raise _Bad(f"{opt.name} with count 0")
                items = []
                for _ in range(n):
                    if opt is Opt.PREFIX:
                        item, pos = _prefix_entry_at(buf, pos)
                    elif opt is Opt.OPTIONAL_PATTERN:
                        item, pos = _graph_at(buf, pos, pfx, allow_vars)
                    elif opt is Opt.FILTER:
                        item, pos = _expression_at(buf, pos, pfx)
                    elif opt is Opt.BIND:
                        var = buf[pos]
                        expr, pos = _expression_at(buf, pos + 1, pfx)
                        item = Bind(var, expr)
                    else:
                        item, pos = _uri_at(buf, pos, pfx)
                    items.append(item)
                values[key] = tuple(items)
                if opt is Opt.PREFIX and not pending.used:
                    pfx = values[key]  # options after PREFIX resolve directly
        if pos != len(buf):
            raise _Bad(f"{len(buf) - pos} bytes after the last option")
    except _FAILURES as exc:
        raise _failure(exc, Status.INVALID_OPTION_FORMAT, path, pos, tid) from None
    if values[0] is None:
        values[0] = ()
    return Options._make(values), pending.used


_OPTION_PATHS = tuple("options." + opt.name for opt in Opt)


NO_OPTIONS_DECODED = Options(prefixes=())


def _modifier_at(buf: bytes, pos: int) -> tuple[SolutionModifier, int]:
    flags = buf[pos]
    pos += 1
    order = flags & 3
    if flags & 0xE0 or order == 3:
        raise _Bad(f"solution modifier flags {flags:#04x}")
    order_var = None
    if order:
        order_var = buf[pos]
        pos += 1
    limit = offset = None
    if flags & 4:
        limit = _U16.unpack_from(buf, pos)[0]
        pos += 2
    if flags & 8:
        offset = _U16.unpack_from(buf, pos)[0]
        pos += 2
    return SolutionModifier(Order(order), order_var, limit, offset, bool(flags & 16)), pos


def _resolve_iri(value, prefixes: tuple[str, ...]):
    """A term with a deferred URI (also a literal's datatype) completed from the prefix list."""
    cls = type(value)
    if cls is tuple:
        index, local = value
        if index > len(prefixes):
            raise _Bad(f"prefix index {index} beyond the {len(prefixes)} prefixes")
        return IRI(prefixes[index - 1] + local)
    if cls is Literal and type(value.datatype) is tuple:
        datatype = _resolve_iri(value.datatype, prefixes)
        if datatype == RDF_LANGSTRING:
            raise _Bad("an rdf:langString literal without a language tag")
        if datatype == "":
            raise _Bad("a literal with an empty datatype IRI")
        return value._replace(datatype=datatype)
    return value


def _resolve_graph(graph: tuple, prefixes: tuple[str, ...]) -> tuple:
    r = _resolve_iri
    return tuple(Triple(r(s, prefixes), r(p, prefixes), r(o, prefixes)) for s, p, o in graph)


def _resolve_field(name: str, value, prefixes: tuple[str, ...]):
    kind = _FIELD_KIND[name]
    if kind == 0:
        return _resolve_graph(value, prefixes)
    if kind == 2:
        return tuple(_resolve_graph(g, prefixes) for g in value)
    if kind == 3:
        return tuple(_resolve_iri(n, prefixes) for n in value)
    if kind == 4:
        return _resolve_iri(value, prefixes)
    return value


def _resolve_options(options: Options, prefixes: tuple[str, ...]) -> Options:
    r = _resolve_iri
    changes = {}
    for key in ("delete_graphs", "insert_graphs", "query_graphs"):
        names = getattr(options, key)
        if names is not None:
            changes[key] = tuple(r(n, prefixes) for n in names)
    if options.optional is not None:
        changes["optional"] = tuple(_resolve_graph(g, prefixes) for g in options.optional)
    if options.filters is not None:
        changes["filters"] = tuple(tuple(r(t, prefixes) for t in e) for e in options.filters)
    if options.binds is not None:
        changes["binds"] = tuple(Bind(b.var, tuple(r(t, prefixes) for t in b.expr))
                                 for b in options.binds)
    return options._replace(**changes)


def decode_sib_message(buf: bytes, transport: Transport = UDP, answers: Tx | None = None) -> Response:
    """Decode what a KP receives: a RES or IND.

    `answers` is the transaction type of the request it answers: a RES header does not say,
    and the Data field's layout depends on it. Without it, a Data field is an error.
    """
    if _speedups is not None:
        form = -1 if answers is None else _RESULT_FORM[answers]
        msg = _speedups.decode_response(buf, _is_tcp(transport), -1 if form is None else form)
        if msg is not None:
            return msg
    return _decode_sib_message(buf, transport, answers)


def _decode_sib_message(buf: bytes, transport: Transport = UDP,
                        answers: Tx | None = None) -> Response:
    """The pure-Python decoder of RESs and INDs (the C one's oracle, and its answer to errors)."""
    if type(transport) is not Transport:
        transport = Transport(transport)
    buf = bytes(buf)
    version, type_byte, tid, pos = _header(buf, transport)
    indication = type_byte > 0x7F
    seq = None
    if indication and transport is UDP:
        if len(buf) < 6:
            raise DecodeError(Status.INVALID_DATA_FORMAT, "an IND header is 6 bytes", "header", tid)
        seq = _U16.unpack_from(buf, 4)[0]
        pos = 6
    status = _STATUS_BY_CODE[type_byte & 0x7F]
    form = None if answers is None else _RESULT_FORM[answers]
    if status or form is None:
        if pos != len(buf):
            reason = ("a RES/IND with an error status has no Data field" if status else
                      "a Data field, but the request answered has no result "
                      f"({'unknown' if form is None else form.name})")
            raise DecodeError(Status.INVALID_DATA_FORMAT, reason, "data", tid)
        return Response(tid, status, None, indication, seq, version)
    path = "data"
    try:
        result, pos = _result_at(buf, pos, form)
        if pos != len(buf):
            raise _Bad(f"{len(buf) - pos} bytes after the result")
    except _FAILURES as exc:
        raise _failure(exc, Status.INVALID_DATA_FORMAT, path, pos, tid) from None
    return Response(tid, status, result, indication, seq, version)


def _result_at(buf: bytes, pos: int, form: Tx):
    if form is Tx.ASK:
        b = buf[pos]
        if b > 1:
            raise _Bad(f"ASK result byte {b}")
        return AskResult(bool(b)), pos + 1
    prefixes = []
    count = buf[pos]
    pos += 1
    for _ in range(count):
        prefix, pos = _prefix_entry_at(buf, pos)
        prefixes.append(prefix)
    pfx = tuple(prefixes)
    total, count = _U16x2.unpack_from(buf, pos)
    pos += 4
    if count > total:
        raise _Bad(f"RC {count} > TRC {total}")
    if form is Tx.CONSTRUCT:
        triples, pos = _triples_at(buf, pos, count, pfx, False)
        return ConstructResult(tuple(triples), total, pfx), pos
    variables = buf[pos]
    pos += 1
    rows = []
    member_at = _member_at
    for _ in range(count):
        row = []
        append = row.append
        for _ in range(variables):
            code = buf[pos]
            pos += 1
            if code == 0:
                append(None)
            elif code == 3:
                raise _Bad("a variable in a result row")
            else:
                term, pos = member_at(buf, pos, code, pfx)
                append(term)
        rows.append(tuple(row))
    return SelectResult(variables, tuple(rows), total, pfx), pos


_U16x2 = struct.Struct("<HH")
_RESULT_FORM = [tx.base if tx and tx.is_query else None for tx in _TX_BY_CODE]


# ---------------------------------------------------------------------------------------------
# The C decoder (ksp/_speedups.c): same answers for valid bytes, None for anything else, which
# the Python decoders above then answer. KSP_PURE_PYTHON=1 in the environment turns it off.


def _load_speedups():
    if os.environ.get("KSP_PURE_PYTHON"):
        return None
    try:
        from . import _speedups as c
    except ImportError:
        return None
    built_with = getattr(c, "MODEL_FIELDS", None)
    if (built_with != (Request._fields, Response._fields, Ack._fields)
            or Options._fields != tuple(name for name, _ in OPTION_FIELDS.values())):
        raise ImportError("ksp._speedups does not match ksp.model")  # a test guards this
    layout, slots = [], []
    for tx in _TX_BY_CODE:
        names = LAYOUT[tx] if tx else ()
        layout += [_FIELD_KIND[n] for n in names] + [-1] * (4 - len(names))
        slots += [Request._fields.index(n) for n in names] + [-1] * (4 - len(names))
    c.setup({
        "IRI": IRI, "Literal": Literal, "Var": Var, "BNode": BNode, "Triple": Triple,
        "Request": Request, "Response": Response, "Ack": Ack, "Options": Options,
        "SelectResult": SelectResult, "ConstructResult": ConstructResult,
        "AskResult": AskResult, "SolutionModifier": SolutionModifier, "Bind": Bind,
        "Credentials": Credentials, "float_lexical": float_lexical, "is_lang_tag": is_lang_tag,
        "xsd_integer": XSD_INTEGER, "xsd_float": XSD_FLOAT, "xsd_datetime": XSD_DATETIME,
        "xsd_boolean": XSD_BOOLEAN, "xsd_double": XSD_DOUBLE,
        "reserved_code": RESERVED_CODE, "compact_cache": _compact_cache,
        "compact_datatypes": COMPACT_DATATYPES,
        "xsd_string": XSD_STRING, "rdf_langstring": RDF_LANGSTRING,
        "no_options": NO_OPTIONS_DECODED,
        "tx_by_code": tuple(_TX_BY_CODE), "status_by_code": tuple(_STATUS_BY_CODE),
        "op_by_code": tuple(_OP_BY_CODE.get(i) for i in range(256)),
        "op_arity": tuple(_OP_BY_CODE[i].arity if i in _OP_BY_CODE else 0 for i in range(256)),
        "order": tuple(Order), "vars": tuple(Var(i) for i in range(256)),
        "reserved": _RESERVED_IRIS,
        "layout": tuple(layout), "layout_slot": tuple(slots),
        "allow_vars": tuple(int(a) for a in _ALLOW_VARS),
        "opts_allowed": tuple(sum(1 << o for o in allowed) if allowed else 0
                              for allowed in _OPTS_ALLOWED),
        "scalars": (Op.BOUND, Tx.CREATE, VERSION),
    })
    return c


_BUILT = _load_speedups()
_speedups = _BUILT  # what encode/decode call: the C module, or None for pure Python


def speedups_enabled() -> bool:
    """Whether encoding and decoding go through the C module (built, loaded and switched on)."""
    return _speedups is not None


def use_speedups(on: bool = True) -> bool:
    """Switch the C module on or off for the whole process; returns the previous setting.

    Off, every message takes the pure-Python codec (the C module's oracle), as with
    KSP_PURE_PYTHON=1 but at run time: for benchmarks and tests that compare the two. On
    without a built module stays off. Not thread-safe: switch before sharing the codec.
    """
    global _speedups
    was = _speedups is not None
    _speedups = _BUILT if on else None
    return was


@contextmanager
def pure_python() -> Iterator[None]:
    """`with pure_python():` the pure-Python codec inside, the previous setting after."""
    was = use_speedups(False)
    try:
        yield
    finally:
        use_speedups(was)


def _no_interning_without_c(on: bool) -> bool:
    return False


#: `set_interning(on) -> previous`: turn the C decoder's term interning on or off (on by
#: default; False and no effect without the C module). Off, decoding costs what it costs for
#: bytes never seen before, which the codec benchmark's `ksp_decode_nointern` measures. The C
#: function itself when built, so that timing around a decode adds no Python call.
set_interning = _BUILT.set_interning if _BUILT is not None else _no_interning_without_c
