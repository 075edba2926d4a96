"""Annotated field tables of KSP messages, driven by the construct grammar (`ksp.reference.schema`).

`explain(buf, transport, direction, answers=None)` parses `buf` with the reference grammar and
returns one `(offset, length, field path, meaning)` row per wire field, in wire order.
Offsets come from construct's own parse: the grammar is copied once with every named field
and every array element wrapped in a transparent span recorder (`_Span`), which notes the
stream position before and after its subconstruct when a tracer is passed in the parse
context. No Probe, no second parser: the rows are exactly the fields the grammar reads.
Sub-byte fields (type/status byte, triple type byte, modifier flags, length fields) show their
bits with bitstring's `Bits`, separated per field (`1|0000010`).

`render(rows, buf)` is the text table; `format_message` a readable `ksp.model` message (the
`ksp decode` command that prints them is `tools/decode.py`).
"""
from __future__ import annotations

import uuid
from typing import NamedTuple

from bitstring import Bits
from construct import Array, ConstructError, Construct, FocusedSeq, Renamed, Subconstruct

from . import schema
from ..codec import TCP, UDP, Transport, decode_kp_message, decode_sib_message
from ..codes import (
    OWL, RDF, RDFS, RESERVED_WORDS, TOKEN_LITERAL, TOKEN_URI, TOKEN_VARIABLE, XSD, LiteralType,
    Member, Op, Opt, Status, Tx,
)
from ..errors import DecodeError
from ..terms import BNode, Literal, Triple, Var, double_lexical

__all__ = ["Row", "Explained", "explain", "explain_partial", "render", "format_message"]

Row = tuple[int, int, str, str]


# -------------------------------------------------------------------------------------------
# Span recording


class _Span(Subconstruct):
    """Transparent wrapper: records where its subconstruct starts and ends in the stream when
    the parse context carries a `_tracer`; otherwise just parses."""

    def __init__(self, subcon: Construct, label: str | None, leaf: Construct):
        super().__init__(subcon)
        self.label = label  # a field name, or None for an array element ("[i]")
        self.leaf = leaf  # the innermost construct (UriLength, BitFields, Int8ul, …)
        self.counts: Construct | None = None  # for a count field: the counted element

    def _parse(self, stream, context, path):
        tracer = context._params.get("_tracer")
        if tracer is None:
            return self.subcon._parsereport(stream, context, path)
        label = self.label if self.label is not None else f"[{context._index}]"
        tracer.enter(label, stream.tell())
        try:
            obj = self.subcon._parsereport(stream, context, path)
        except BaseException:
            tracer.abort()
            raise
        tracer.leave(stream.tell(), obj, context, self)
        return obj


class _Field(NamedTuple):
    start: int
    end: int
    labels: tuple[str, ...]
    value: object
    context: object  # the enclosing Struct's context (siblings parsed so far)
    span: _Span


class _Tracer:
    def __init__(self) -> None:
        self.stack: list[list] = []  # [label, start, child count]
        self.fields: list[_Field] = []
        self.failed: tuple[str, ...] | None = None

    def enter(self, label: str, start: int) -> None:
        self.stack.append([label, start, 0])

    def _pop(self) -> tuple[tuple[str, ...], int, int]:
        label, start, children = self.stack.pop()
        labels = tuple(frame[0] for frame in self.stack) + (label,)
        if self.stack:
            self.stack[-1][2] += 1
        return labels, start, children

    def leave(self, end: int, obj, context, span: _Span) -> None:
        labels, start, children = self._pop()
        # Leaves only; zero-length ones (Empty members, absent fields) are left out, except an
        # empty string, which still says something (the empty IRI: the default graph).
        if not children and (end > start or isinstance(obj, str)):
            self.fields.append(_Field(start, end, labels, obj, context, span))

    def abort(self) -> None:
        labels, _, _ = self._pop()
        if self.failed is None:
            self.failed = labels


def _innermost(node: Construct) -> Construct:
    while isinstance(node, Subconstruct) and not isinstance(node, Array):
        node = node.subcon
    return node


def _instrument(node, memo: dict):
    """A copy of the grammar under `node` with every Renamed field and Array element spanned."""
    if isinstance(node, Construct):
        key = id(node)
        if key in memo:
            return memo[key]
        attrs = {k: _instrument(v, memo) for k, v in vars(node).items()}
        changed = any(attrs[k] is not v for k, v in vars(node).items())
        if changed or isinstance(node, (Renamed, Array)):
            clone = object.__new__(type(node))
            clone.__dict__.update(attrs)
            if isinstance(node, Renamed):
                clone.subcon = _Span(clone.subcon, node.name, _innermost(node.subcon))
            elif isinstance(node, Array):
                clone.subcon = _Span(clone.subcon, None, _innermost(node.subcon))
            if isinstance(node, FocusedSeq):  # PrefixedArray / Counted: note what is counted
                named = {sc.name: sc for sc in node.subcons if sc.name}
                if "count" in named and "items" in named:
                    array = _innermost(named["items"])
                    if isinstance(array, Array):
                        memo[id(named["count"])].subcon.counts = _innermost(array.subcon)
        else:
            clone = node
        memo[key] = clone
        return clone
    if isinstance(node, list):
        return [_instrument(v, memo) for v in node]
    if isinstance(node, tuple):
        return tuple(_instrument(v, memo) for v in node)
    if isinstance(node, dict):
        return type(node)((k, _instrument(v, memo)) for k, v in node.items())
    return node


_TRACED: dict[tuple[bool, str], Construct] = {}


def _traced_grammar(transport, direction: str) -> Construct:
    tcp = Transport(getattr(transport, "value", transport)) is TCP
    key = (tcp, direction)
    if key not in _TRACED:
        _TRACED[key] = _instrument(schema.grammar(TCP if tcp else UDP, direction), {})
    return _TRACED[key]


# -------------------------------------------------------------------------------------------
# Meanings

_CURIES = {RDF: "rdf:", RDFS: "rdfs:", OWL: "owl:", XSD: "xsd:"}
_LITERAL_NAMES = {
    LiteralType.STRING: "xsd:string", LiteralType.INTEGER: "xsd:integer",
    LiteralType.FLOAT: "xsd:float", LiteralType.DATETIME: "xsd:dateTime",
    LiteralType.BOOLEAN: "xsd:boolean", LiteralType.LANG_STRING: "language-tagged string",
    LiteralType.TYPED: "other datatype", LiteralType.DOUBLE: "xsd:double",
}
_MEMBER_NAMES = {Member.EMPTY: "Empty", Member.URI: "URI", Member.RESERVED: "Reserved",
                 Member.VARIABLE: "Var", Member.LITERAL: "Literal", Member.BNODE: "BNode"}
_OPERAND_NAMES = {0: "xsd:string operand", 1: "xsd:integer operand", 2: "xsd:float operand",
                  3: "xsd:dateTime operand", 4: "xsd:boolean operand",
                  TOKEN_VARIABLE: "variable", TOKEN_URI: "URI operand",
                  TOKEN_LITERAL: "literal operand (Literal field)"}
_COUNTS = [  # (counted element, label)
    (schema.TripleField, "TC: {n} triple{s}"),
    (schema.DataTripleField, "TC: {n} triple{s}"),
    (schema.PrefixEntry, "PC: {n} prefix{es}"),
    (schema.UriField, "GC: {n} graph name{s}"),
    (schema.Graph, "{n} optional graph{s}"),
    (schema.Option, "OC: {n} option{s}"),
    (schema.Token, "{n} token{s}"),
    (schema.BindItem, "BC: {n} bind{s}"),
    (schema.Expression, "FC: {n} expression{s}"),
]


def _name(enum, value: int) -> str:
    try:
        return enum(value).name
    except ValueError:
        return f"invalid {value:#04x}"


def _curie(iri: str) -> str:
    for ns, short in _CURIES.items():
        if iri.startswith(ns):
            return short + iri[len(ns):]
    return f"<{iri}>"


def _short(text: str, limit: int = 60) -> str:
    shown = repr(text)
    return shown if len(shown) <= limit else f"{shown[:limit - 1]}…' ({len(text)} chars)"


def _bits(raw: bytes, widths: tuple[int, ...]) -> str:
    """Bits of the first byte split per field (most significant first), then the other bytes."""
    b = Bits(uint=raw[0], length=8).bin
    parts, pos = [], 0
    for width in widths:
        parts.append(b[pos:pos + width])
        pos += width
    rest = [Bits(uint=x, length=8).bin for x in raw[1:]]
    return " ".join(["|".join(parts)] + rest)


def _counted(element) -> str:
    for construct, label in _COUNTS:
        if element is _innermost(construct):
            return label
    return "count {n}"


class _Info(NamedTuple):
    prefixes: tuple[str, ...] | None


def _iri(text: str, limit: int = 72) -> str:
    shown = f"<{text}>"
    return shown if len(shown) <= limit else f"{shown[:limit - 2]}…> ({len(text)} chars)"


def _resolved(prefix: int, local: str, info: _Info) -> str:
    if not prefix:
        return _iri(local) if local else "<> (the empty IRI: the default graph as a graph name)"
    if info.prefixes is not None and prefix <= len(info.prefixes):
        return _iri(info.prefixes[prefix - 1] + local)
    return f"prefix {prefix} + {local!r}"


def _literal_value(kind: int, value) -> str:
    if kind == LiteralType.INTEGER:
        return str(value)
    if kind == LiteralType.FLOAT:
        return schema.float_lexical(value)
    if kind == LiteralType.DOUBLE:
        return double_lexical(value)
    if kind == LiteralType.BOOLEAN:
        return "true" if value else "false"
    return repr(value)  # the dateTime string


def _meaning(f: _Field, raw: bytes, info: _Info) -> str:
    label, v, ctx, leaf = f.labels[-1], f.value, f.context, f.span.leaf
    if leaf is schema.RequestType:
        if v.tx == 0:
            text = "ACK" if not v.con else "invalid: 0x80 is neither REQ nor ACK"
        else:
            text = f"{'CON' if v.con else 'NON'}, {_name(Tx, v.tx)} ({v.tx:#04x})"
        return f"{_bits(raw, (1, 7))}  {text}"
    if leaf is schema.ResponseType:
        epoch = ", the request's epoch follows" if v.epoch else ""
        return (f"{_bits(raw, (1, 1, 6))}  {'IND' if v.ind else 'RES'}, "
                f"{_name(Status, v.status)} ({v.status:#04x}){epoch}")
    if leaf is schema.TripleType:
        members = " ".join(f"{k.upper()}={_MEMBER_NAMES.get(v[c], '?')}"
                           for k, c in (("s", "st"), ("p", "pt"), ("o", "ot")))
        return f"{_bits(raw, (3, 2, 3))}  {members}"
    if leaf is schema.ModifierFlags:
        words = [("unordered", "ASC", "DESC", "invalid order")[v.order]]
        words += [w for w, on in (("Limit", v.limit), ("Offset", v.offset),
                                  ("Distinct", v.distinct)) if on]
        return f"{_bits(raw, (3, 1, 1, 1, 2))}  {', '.join(words)}"
    if leaf is schema.UriLength:
        return f"{_bits(raw, (1, 7))}  URI length {v}"
    if leaf is schema.StringLength:
        return f"{_bits(raw, (2, 6))}  string length {v}"
    if f.span.counts is not None:
        return _counted(f.span.counts).format(n=v, s="" if v == 1 else "s",
                                              es="" if v == 1 else "es")
    if label == "version":
        return f"KSP version {v}"
    if label == "tid":
        return f"transaction ID {v}"
    if label == "length":
        return f"TCP Length {v}: the whole message, header included"
    if label == "seq":
        return f"sequence number {v}"
    if label == "prefix":
        if not v:
            return "prefix index 0: none (full IRI)"
        if info.prefixes is not None and v <= len(info.prefixes):
            return f"prefix index {v}: {_iri(info.prefixes[v - 1])}"
        return f"prefix index {v}"
    if label == "local":
        return _resolved(ctx["prefix"], v, info)
    if label == "word":
        iri = RESERVED_WORDS[v]
        return f"reserved word {v:#04x}: {_curie(iri)}"
    if label == "var":
        return f"?v{v}"
    if label == "label":
        return f"_:{v}"
    if label == "littype":
        return f"literal type {v:#04x}: {_LITERAL_NAMES.get(v, 'invalid')}"
    if label == "payload":
        return _literal_value(ctx["littype"], v)
    if label == "string":
        return _short(v)
    if label == "tag_length":
        return f"language tag length {v}"
    if label == "tag":
        return f"@{v}"
    if label == "member":
        return f"result term type {v:#04x}: " + (
            "Empty (unbound)" if v == Member.EMPTY else _MEMBER_NAMES.get(v, "invalid"))
    if label == "token":
        if v in _OPERAND_NAMES:
            return f"token {v:#04x}: {_OPERAND_NAMES[v]}"
        if v in schema._OP_CODES:
            op = Op(v)
            if op.variadic:
                return f"token {v:#04x}: {op.symbol} ({op.name}, count follows)"
            return f"token {v:#04x}: {op.symbol} ({op.name}, {op.arity}-ary)"
        return f"token {v:#04x}: invalid"
    if label == "operand":
        token = ctx["token"]
        if token == TOKEN_VARIABLE:
            return f"?v{v}"
        if token in schema._OP_CODES:
            return f"count {v}"
        return _literal_value(token, v)
    if label == "option":
        return f"option {v:#04x}: {_name(Opt, v)}"
    if label == "body" and ctx.get("option") == Opt.MAX_RESPONSE_SIZE:
        return f"MAX RESPONSE SIZE {v} bytes"
    if label == "body" and ctx.get("option") == Opt.EPOCH:
        return f"EPOCH {v}: request number {v} × 65536 + TID"
    if label == "epoch":
        return f"the request's epoch {v}"
    if label == "next_epoch":
        return f"next epoch {v}: the first whose every number the SIB takes as new"
    if label == "order_var":
        return f"ORDER BY ?v{v}"
    if label in ("limit", "offset"):
        return f"{label.upper()} {v}"
    if label == "kp_id":
        return f"KP ID {uuid.UUID(bytes=bytes(v))}"
    if label == "password_length":
        return f"password length {v}"
    if label == "password":
        return f"password {_short(v)}"
    if label == "projection":
        return f"VC: {v} projected variable{'' if v == 1 else 's'}"
    if label == "trc":
        return f"TRC: {v} result{'' if v == 1 else 's'} in total"
    if label == "rc":
        return f"RC: {v} in this message"
    if label == "vc":
        return f"VC: {v} variable{'' if v == 1 else 's'} per row"
    if label == "answer":
        return "ASK: true (at least one solution)" if v else "ASK: false (no solution)"
    return repr(v)


def _path(labels: tuple[str, ...]) -> str:
    out = ""
    for label in labels:
        if label == "items":  # PrefixedArray's list: data.where[0], not data.where.items[0]
            continue
        out += label if label.startswith("[") or not out else "." + label
    return out


def _prefixes(container, direction: str) -> tuple[str, ...] | None:
    try:
        if direction == "kp_to_sib":
            for o in container["options"] or ():
                if o["option"] == Opt.PREFIX:
                    return tuple(e["local"] for e in o["body"])
            return ()
        data = container["data"]
        return tuple(e["local"] for e in data["prefixes"]) if data and "prefixes" in data else ()
    except (KeyError, TypeError):
        return None


# -------------------------------------------------------------------------------------------
# Public API


class Explained(NamedTuple):
    rows: list[Row]
    error: ConstructError | None  # the grammar's error for invalid bytes (rows stop there)
    failed_path: str | None  # the field being parsed when it failed
    container: object | None


def explain_partial(buf: bytes, transport, direction: str, answers=None) -> Explained:
    """Like `explain`, but for invalid bytes returns the rows parsed before the failure."""
    buf = bytes(buf)
    tracer = _Tracer()
    grammar = _traced_grammar(transport, direction)
    kwargs = {"_tracer": tracer}
    if direction == "sib_to_kp":
        kwargs["answers"] = None if answers is None else Tx(answers)
    error = container = None
    try:
        container = grammar.parse(buf, **kwargs)
    except ConstructError as exc:
        error = exc
    info = _Info(_prefixes(container, direction) if container is not None else None)
    rows = [(f.start, f.end - f.start, _path(f.labels), _meaning(f, buf[f.start:f.end], info))
            for f in tracer.fields]
    failed = _path(tracer.failed) if tracer.failed else None
    return Explained(rows, error, failed, container)


def explain(buf: bytes, transport, direction: str, answers=None) -> list[Row]:
    """(offset, length, field path, meaning) of every field of the message in `buf`.

    `direction` is "kp_to_sib" (REQ/ACK) or "sib_to_kp" (RES/IND, which needs `answers`, the
    transaction type of the request answered, to read a result). Raises the construct error
    for bytes the grammar rejects.
    """
    result = explain_partial(buf, transport, direction, answers)
    if result.error is not None:
        raise result.error
    return result.rows


def render(rows: list[Row], buf: bytes, max_hex: int = 8) -> str:
    """The field table as text: offset, bytes (hex), field path, meaning."""
    lines = []
    hexes = []
    for offset, length, _, _ in rows:
        raw = buf[offset:offset + length]
        shown = raw[:max_hex].hex(" ")
        hexes.append(shown + (f" …(+{length - max_hex})" if length > max_hex else ""))
    hex_w = max((len(h) for h in hexes), default=5)
    path_w = max((len(r[2]) for r in rows), default=5)
    lines.append(f"{'off':>4}  {'bytes':<{hex_w}} | {'field':<{path_w}} | meaning")
    for (offset, _, path, meaning), h in zip(rows, hexes):
        lines.append(f"{offset:04x}  {h:<{hex_w}} | {path:<{path_w}} | {meaning}")
    return "\n".join(lines)


def format_message(msg, indent: str = "") -> str:
    """A `ksp.model` message (or part of one), one field per line, None fields left out."""
    inner = indent + "  "
    if hasattr(msg, "_fields") and not _is_term(msg):
        items = [(k, getattr(msg, k)) for k in msg._fields if getattr(msg, k) is not None]
        body = "".join(f"{inner}{k}={format_message(v, inner)},\n" for k, v in items)
        return f"{type(msg).__name__}(\n{body}{indent})" if items else f"{type(msg).__name__}()"
    if hasattr(msg, "__dataclass_fields__"):
        items = [(k, getattr(msg, k)) for k in msg.__dataclass_fields__
                 if getattr(msg, k) is not None]
        return f"{type(msg).__name__}(" + ", ".join(f"{k}={v!r}" for k, v in items) + ")"
    if isinstance(msg, tuple) and msg and not _is_term(msg) and not isinstance(msg, str):
        if all(_is_term(x) or isinstance(x, (str, int)) for x in msg) and len(repr(msg)) < 90:
            return repr(msg)
        body = "".join(f"{inner}{format_message(v, inner)},\n" for v in msg)
        return f"(\n{body}{indent})"
    if isinstance(msg, (Tx, Status, Op)):
        return f"{type(msg).__name__}.{msg.name}"
    return repr(msg)


def _is_term(x) -> bool:
    return isinstance(x, (BNode, Literal, Var, Triple))
