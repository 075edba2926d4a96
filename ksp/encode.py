"""Messages → bytes in pure Python: the canonical encoding (§10) of every message, and
`EncodeError` for what the wire cannot carry. `ksp.codec.encode` calls it for whatever the C
module leaves (options beyond PREFIX, results cut to a MAX RESPONSE SIZE, every error).
"""
from __future__ import annotations

from typing import Iterable

from .codes import (
    ECHO_MAX, OPTION_APPLIES, RES_EPOCH, RESERVED_CODE, TOKEN_LITERAL, TOKEN_URI, TOKEN_VARIABLE,
    LiteralType, Op, Opt, Status, Tx,
)
from .compress import choose_prefixes, request_iris, result_iris
from .errors import EncodeError
from .literals import compact_type, is_lang_tag
from .model import (
    NO_OPTIONS, UNSET_OPTIONS, Ack, AskResult, Behind, Call, ConstructResult, Message, Options,
    Order, Request, Response, SelectResult, SolutionModifier,
)
from .terms import BNode, IRI, Literal, Triple, Var
from .wire import (
    LAYOUT, OT_ALLOWED, PT_ALLOWED, ST_ALLOWED, TCP, Transport, UDP, _DATA_FIELDS, _F32, _F64,
    _GRAPH_FIELDS, _HDR_IND, _HDR_TCP, _HDR_UDP, _I32, _STATUS_BITS, _U16, _U32, header_size,
)


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


_compact_cache: dict[Literal, tuple[int, bytes | None]] = {}
"""Literal -> (literal type, payload), at most `COMPACT_CACHED` entries; a TYPED literal's
payload is None: its datatype IRI is written against each message's prefix list (the C encoder
writes it so too)."""
COMPACT_CACHED = 8192


def literals_cached() -> int:
    """Literals whose compact form the encoders keep now (at most `COMPACT_CACHED`)."""
    return len(_compact_cache)


def _literal_payload(lit: Literal, pfx: _Prefixes) -> tuple[int, bytes]:
    """(literal type, payload) of a literal by the compact-form rule."""
    cached = _compact_cache.get(lit)
    if cached is not None:
        if cached[1] is not None:
            return cached
        return cached[0], pfx.uri(lit.datatype) + _string(lit.lexical)
    kind, payload = _literal_payload_uncached(lit, pfx)
    if len(_compact_cache) >= COMPACT_CACHED:
        _compact_cache.clear()
    _compact_cache[lit] = (kind, None if kind == LiteralType.TYPED else payload)
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
        elif isinstance(token, Call):
            out += bytes((token.op, token.count))
        else:
            out += _operand(token, pfx)


def _check_rpn(expr: tuple, error) -> None:
    """§8.1's stack rule, bound() after a variable, and each operator token's own form: a
    variadic operator only as a `Call` with a u8 count, a fixed-arity one never."""
    depth = 0
    for i, token in enumerate(expr):
        if isinstance(token, (Op, Call)):
            if token is Op.BOUND and (i == 0 or not isinstance(expr[i - 1], Var)):
                raise error("bound() must follow a variable token")
            if isinstance(token, Call):
                if not isinstance(token.op, Op) or not token.op.variadic:
                    raise error(f"{token!r}: only a variadic operator carries a count")
                if not 0 <= token.count <= 255:
                    raise error(f"{token.op.name} with count {token.count}; the count is a u8")
            elif token.variadic:
                raise error(f"{token.name} is variadic: write it as Call({token.name}, n)")
            arity = token.arity
            if depth < arity:
                name = f"{token.op.name}({token.count})" if isinstance(token, Call) else token.name
                raise error(f"{name} needs {arity} operands, has {depth}")
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
                           (Opt.CREDENTIALS, opts.credentials), (Opt.ECHO, opts.echo),
                           (Opt.EPOCH, opts.epoch)):
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
        elif opt is Opt.ECHO:
            out += echo_body(value)
        elif opt is Opt.EPOCH:
            if not _is_u32(value) or not value:
                raise EncodeError(f"epoch {value!r} outside 1…2^32 − 1 (epoch 0 is no option)")
            out += _U32.pack(value)
        else:  # CREDENTIALS
            kp_id = bytes(value.kp_id)
            if len(kp_id) != 16:
                raise EncodeError(f"a KP ID is 16 bytes, not {len(kp_id)}")
            password = value.password.encode("utf-8")
            if len(password) > 255:
                raise EncodeError("a password is at most 255 bytes")
            out += kp_id + bytes((len(password),)) + password


def echo_body(value) -> bytes:
    """The ECHO option body and the ECHO REQUIRED Data field (§7.7): u8 length 1…ECHO_MAX,
    bytes."""
    if not isinstance(value, (bytes, bytearray)) or not 1 <= len(value) <= ECHO_MAX:
        raise EncodeError(f"an echo value is 1…{ECHO_MAX} bytes, not {value!r}")
    return bytes((len(value),)) + bytes(value)


def _is_u32(value) -> bool:
    return type(value) is int and 0 <= value <= 0xFFFFFFFF


def behind_body(value) -> bytes:
    """The NUMBER BEHIND Data field (§15): u32 the request's epoch, u32 the next epoch."""
    if not isinstance(value, Behind) or not (_is_u32(value.epoch) and _is_u32(value.next_epoch)):
        raise EncodeError(f"a NUMBER_BEHIND RES carries a Behind of two u32, not {value!r}")
    return _U32.pack(value.epoch) + _U32.pack(value.next_epoch)


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


def retag(data: bytes, tid: int, seq: int | None = None) -> bytes:
    """The encoded message `data` with Transaction ID `tid` and, for a UDP IND, sequence
    number `seq`. Nothing else in a message depends on them (the header has a fixed size per
    transport), so the subscribers of one result can share one encoding, and a KP can move a
    request to another TID."""
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
    if not 0 <= status < RES_EPOCH:
        raise EncodeError(f"status {status} outside 0..63")
    type_byte = status | (0x80 if msg.indication else 0)
    seq = None
    if msg.indication and transport is UDP:
        if msg.seq is None:
            raise EncodeError("an IND over UDP needs a sequence number (§2.3)")
        seq = msg.seq
    epoch = b""
    if msg.epoch is not None:
        epoch = _res_epoch(msg, transport, status)
        type_byte |= RES_EPOCH
    hsize = header_size(transport, msg.indication, bool(epoch))
    result = msg.result
    if msg.indication and status in (Status.ECHO_REQUIRED, Status.NUMBER_BEHIND):
        raise EncodeError(f"{Status(status).name} is a RES's status, never an IND's (§3.2)")
    if status == Status.ECHO_REQUIRED and not msg.indication:
        return _frame(transport, msg.version, type_byte, msg.tid, epoch + echo_body(result), seq)
    if status == Status.NUMBER_BEHIND and not msg.indication:
        return _frame(transport, msg.version, type_byte, msg.tid, behind_body(result), seq)
    if status != Status.OK or result is None:
        if result is not None:
            raise EncodeError("a RES/IND with an error status carries no result")
        return _frame(transport, msg.version, type_byte, msg.tid, epoch, seq)
    limit = None if max_size is None else max_size - hsize
    body = _encode_result(result, limit)
    if body is None:
        type_byte = Status.RESPONSE_TOO_LARGE | (type_byte & ~_STATUS_BITS)
        body = b""
    return _frame(transport, msg.version, type_byte, msg.tid, epoch + body, seq)


def _res_epoch(msg: Response, transport: Transport, status: int) -> bytes:
    """The u32 after a UDP RES header naming the answered request's epoch (§15.6)."""
    if msg.indication or transport is TCP:
        raise EncodeError("only a RES over UDP names an epoch (§15.6)")
    if status == Status.NUMBER_BEHIND:
        raise EncodeError("a NUMBER_BEHIND RES names the epoch in its Data field, not `epoch`")
    if not _is_u32(msg.epoch) or not msg.epoch:
        raise EncodeError(f"RES epoch {msg.epoch!r} outside 1…2^32 − 1 (epoch 0 is None)")
    return _U32.pack(msg.epoch)



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
