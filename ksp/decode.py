"""Bytes → messages in pure Python: the oracle of the C decoder and its answer to everything
it declines. Raises nothing but `DecodeError`, with the status a SIB answers with.
"""
from __future__ import annotations

import struct

from .codes import (
    ECHO_MAX, OPTION_APPLIES, RES_EPOCH, TOKEN_BOOLEAN, TOKEN_LITERAL, TOKEN_URI, TOKEN_VARIABLE,
    VERSION, Opt, Status, Tx,
)
from .layout import LITERAL_SIZES
from .errors import DecodeError
from .literals import float_lexical, is_datetime19, is_lang_tag
from .model import (
    Ack, AskResult, Behind, Bind, Call, ConstructResult, Credentials, Options, Order, Request,
    Response, SelectResult, SolutionModifier,
)
from .terms import (
    RDF_LANGSTRING, XSD_BOOLEAN, XSD_DATETIME, XSD_DOUBLE, XSD_FLOAT, XSD_INTEGER, XSD_STRING,
    BNode, IRI, Literal, Triple, Var, double_lexical,
)
from .wire import (
    LAYOUT, OT_ALLOWED, ST_ALLOWED, TCP, Transport, UDP, _F32, _F64, _FIELD_KIND, _HDR_TCP,
    _HDR_UDP, _I32, _OP_BY_CODE, _RESERVED_IRIS, _STATUS_BITS, _STATUS_BY_CODE, _TX_BY_CODE,
    _U16, _U32, peek_tid,
)
from .encode import _check_rpn


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
            if op.variadic:
                tokens.append(Call(op, buf[pos]))
                pos += 1
            else:
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
    values: list = [None] * len(Options._fields)  # by option code, in Options field order
    path = "options"
    # Every URI of an option body waits for the prefix list, wherever PREFIX is among the
    # options: a prefix index beyond it is found in the late pass (§3.2, rule 1), after every
    # option is read, whatever the options' order.
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
            if code > _LAST_OPTION:
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
            elif opt is Opt.ECHO:
                values[key], pos = _echo_at(buf, pos)
            elif opt is Opt.EPOCH:
                epoch = _U32.unpack_from(buf, pos)[0]
                if not epoch:
                    raise _Bad("EPOCH 0 (epoch 0 is written as no option)")
                values[key] = epoch
                pos += 4
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
        if pos != len(buf):
            raise _Bad(f"{len(buf) - pos} bytes after the last option")
    except _FAILURES as exc:
        raise _failure(exc, Status.INVALID_OPTION_FORMAT, path, pos, tid) from None
    if values[0] is None:
        values[0] = ()
    return Options._make(values), pending.used


_LAST_OPTION = max(Opt)


def _echo_at(buf: bytes, pos: int) -> tuple[bytes, int]:
    """An echo value (§7.7): u8 length 1…ECHO_MAX, then that many bytes."""
    size = buf[pos]
    if not 1 <= size <= ECHO_MAX:
        raise _Bad(f"echo length {size} outside 1…{ECHO_MAX}")
    value = buf[pos + 1:pos + 1 + size]
    if len(value) != size:
        raise _Bad("echo value runs past the end")
    return bytes(value), pos + 1 + size


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
    status = _STATUS_BY_CODE[type_byte & _STATUS_BITS]
    epoch = None
    if type_byte & RES_EPOCH:
        epoch = _res_epoch(buf, transport, indication, status, tid)
        pos += 4
    form = None if answers is None else _RESULT_FORM[answers]
    if indication and status in _RES_ONLY:
        raise DecodeError(Status.INVALID_DATA_FORMAT, f"{status.name} is a RES's status, never "
                          "an IND's", "header.type", tid)
    if status == Status.ECHO_REQUIRED and not indication:
        try:
            value, pos = _echo_at(buf, pos)
            if pos != len(buf):
                raise _Bad(f"{len(buf) - pos} bytes after the echo value")
        except _FAILURES as exc:
            raise _failure(exc, Status.INVALID_DATA_FORMAT, "data", pos, tid) from None
        return Response(tid, status, value, indication, seq, version, epoch)
    if status == Status.NUMBER_BEHIND and not indication:
        if len(buf) - pos != _U32x2.size:
            raise DecodeError(Status.INVALID_DATA_FORMAT, f"NUMBER BEHIND with {len(buf) - pos} "
                              "bytes of Data, not 8", "data", tid)
        return Response(tid, status, Behind(*_U32x2.unpack_from(buf, pos)), indication, seq,
                        version)
    if status or form is None:
        if pos != len(buf):
            reason = ("a RES/IND with an error status has no Data field" if status else
                      "a Data field, but the request answered has no result "
                      f"({'unknown' if form is None else form.name})")
            raise DecodeError(Status.INVALID_DATA_FORMAT, reason, "data", tid)
        return Response(tid, status, None, indication, seq, version, epoch)
    path = "data"
    try:
        result, pos = _result_at(buf, pos, form)
        if pos != len(buf):
            raise _Bad(f"{len(buf) - pos} bytes after the result")
    except _FAILURES as exc:
        raise _failure(exc, Status.INVALID_DATA_FORMAT, path, pos, tid) from None
    return Response(tid, status, result, indication, seq, version, epoch)


def _res_epoch(buf: bytes, transport: Transport, indication: bool, status, tid: int) -> int:
    """The epoch a RES over UDP names after its 4-byte header (§15.6); the code's bit 6 means
    nothing else, so anywhere else it is a malformed message."""
    if indication or transport is TCP:
        where = "an IND" if indication else "a RES over TCP"
        raise DecodeError(Status.INVALID_DATA_FORMAT, f"type byte bit 6 on {where}",
                          "header.type", tid)
    if status == Status.NUMBER_BEHIND:
        raise DecodeError(Status.INVALID_DATA_FORMAT, "NUMBER BEHIND with bit 6: its Data field "
                          "names the epoch", "header.type", tid)
    if len(buf) < 8:
        raise DecodeError(Status.INVALID_DATA_FORMAT, f"{len(buf) - 4} bytes after the header, "
                          "the RES epoch is 4", "header.epoch", tid)
    epoch = _U32.unpack_from(buf, 4)[0]
    if not epoch:
        raise DecodeError(Status.INVALID_DATA_FORMAT, "RES epoch 0 (epoch 0 is written as no "
                          "field)", "header.epoch", tid)
    return epoch


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


#: Statuses only a RES carries (§3.2): an IND with one is malformed (0x04).
_RES_ONLY = frozenset((Status.ECHO_REQUIRED, Status.NUMBER_BEHIND))
_U16x2 = struct.Struct("<HH")
_U32x2 = struct.Struct("<II")
_RESULT_FORM = [tx.base if tx and tx.is_query else None for tx in _TX_BY_CODE]
