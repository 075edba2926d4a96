"""The golden vectors (`tests/vectors/`, schema in its README) against the codec.

For every valid vector: `ksp.codec` decodes `hex` to the message (or to `decoded`) and encodes
the message to `hex`; and an independent reading of the bytes written here from
docs/wire-format.md alone (`Wire`, no `ksp.codec`) gives the same JSON description, so the
vectors are checked against the spec, not only against the codec that produced them.
For every invalid vector the decoder raises `DecodeError` with the vector's status.
Coverage: every code of every table occurs in a valid vector (counted from the bytes and from
the decoded messages). Drift: the files are exactly what `tools/make_vectors.py` writes.
"""
from __future__ import annotations

import json
import math
import struct
from collections import defaultdict
from pathlib import Path

import pytest

from ksp import DecodeError, Transport, decode_kp_message, decode_sib_message, encode
from ksp.codes import (
    RESERVED_CODE, RESERVED_WORDS, TOKEN_LITERAL, LiteralType, Member, Op, Opt, Status, Tx,
)
from ksp.reference.jsonmodel import from_json, to_json
from ksp.model import AskResult, Call, ConstructResult, Request, Response, SelectResult

VECTOR_DIR = Path(__file__).parent / "vectors"
FILES = sorted(VECTOR_DIR.glob("*.json"))


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


VECTORS = {p.stem: load(p) for p in FILES}
VALID = sorted(n for n, v in VECTORS.items() if "error" not in v)
INVALID = sorted(n for n, v in VECTORS.items() if "error" in v)


def decode(v: dict):
    raw = bytes.fromhex(v["hex"])
    transport = Transport(v["transport"])
    if v["direction"] == "kp_to_sib":
        return decode_kp_message(raw, transport)
    return decode_sib_message(raw, transport, Tx[v["answers"]] if "answers" in v else None)


def test_vector_set_is_sane():
    assert 120 <= len(VECTORS)
    for name, v in VECTORS.items():
        assert v["name"] == name
        assert v["description"].strip()
        assert v["transport"] in ("udp", "tcp")
        assert v["direction"] in ("kp_to_sib", "sib_to_kp")
        assert ("message" in v) != ("error" in v), name
        assert v["hex"] == v["hex"].lower() and bytes.fromhex(v["hex"])
        if v["direction"] == "sib_to_kp" and "message" in v:
            assert v["answers"] in Tx.__members__
        assert ("decoded" in v) == ("max_size" in v), name
        if "error" in v:
            assert Status(v["error"]["status"]).name == v["error"]["name"]
        msg = v.get("message", {})
        if msg.get("type") == "request":  # explicit prefix lists: no automatic choice
            assert "prefixes" in msg["options"], name
        if msg.get("result", {}).get("type") in ("select", "construct"):
            assert "prefixes" in msg["result"], name


# ---------------------------------------------------------------------------------------------
# Valid vectors: decode, encode


@pytest.mark.parametrize("name", VALID)
def test_decode(name):
    v = VECTORS[name]
    assert decode(v) == from_json(v.get("decoded", v["message"]))


@pytest.mark.parametrize("name", VALID)
def test_encode(name):
    v = VECTORS[name]
    msg = from_json(v["message"])
    assert encode(msg, Transport(v["transport"]), max_size=v.get("max_size")).hex() == v["hex"]


@pytest.mark.parametrize("name", VALID)
def test_independent_reading(name):
    """Bytes read by the spec alone (`Wire`) give the vector's description."""
    v = VECTORS[name]
    want = to_json(from_json(v.get("decoded", v["message"])))
    assert Wire(v).read() == want


@pytest.mark.parametrize("name", INVALID)
def test_invalid(name):
    v = VECTORS[name]
    with pytest.raises(DecodeError) as info:
        decode(v)
    assert info.value.status == v["error"]["status"], str(info.value)


@pytest.mark.parametrize("name", sorted(n for n in VALID if "max_size" in VECTORS[n]))
def test_max_size_semantics(name):
    """§6.4: as many whole results as fit, all counted in TRC; else RC = 0; else status 0x0c."""
    v = VECTORS[name]
    transport = Transport(v["transport"])
    full, got = from_json(v["message"]), from_json(v["decoded"])
    limit = v["max_size"]
    assert len(v["hex"]) // 2 <= limit or got.status == Status.RESPONSE_TOO_LARGE
    if got.status == Status.RESPONSE_TOO_LARGE:
        assert got.result is None and len(v["hex"]) // 2 == (6 if full.indication and
                                                            transport is Transport.UDP else
                                                            8 if transport is Transport.TCP
                                                            else 4)
        smallest = full._replace(result=_cut(full.result, 0))
        assert len(encode(smallest, transport)) > limit
        return
    assert got.status == Status.OK
    if isinstance(full.result, AskResult):
        assert got.result == full.result
        return
    items, got_items = _items(full.result), _items(got.result)
    assert got_items == items[:len(got_items)]
    assert got.result.total == full.result.total
    assert got.result.prefixes == full.result.prefixes
    if len(got_items) < len(items):
        one_more = full._replace(result=_cut(full.result, len(got_items) + 1))
        assert len(encode(one_more, transport)) > limit


def _items(result):
    return result.rows if isinstance(result, SelectResult) else result.triples


def _cut(result, n: int):
    if isinstance(result, AskResult):
        return result
    if isinstance(result, SelectResult):
        return result._replace(rows=result.rows[:n])
    return result._replace(triples=result.triples[:n])


# ---------------------------------------------------------------------------------------------
# Coverage: every code of every table in some valid vector

ALL_TOKENS = set(range(0x07)) | {TOKEN_LITERAL} | {op.value for op in Op}
MEMBER_POSITIONS = {  # table 3.3
    "s": {0, 1, 2, 3, 5}, "p": {0, 1, 2, 3}, "o": {0, 1, 2, 3, 4, 5}, "row": {0, 1, 2, 4, 5},
}


def _wire_coverage() -> dict[str, set]:
    seen: dict[str, set] = defaultdict(set)
    for name in VALID:
        w = Wire(VECTORS[name])
        w.read()
        for key, values in w.seen.items():
            seen[key] |= values
    return seen


def test_coverage_from_bytes():
    seen = _wire_coverage()
    assert seen["tx"] >= {(t.value, con) for t in Tx for con in (False, True)}
    assert seen["res_status"] >= {s.value for s in Status}
    assert seen["ind_status"] >= {Status.OK.value, Status.TERMINATED.value}
    assert seen["option"] >= {o.value for o in Opt}
    assert seen["token"] >= ALL_TOKENS
    assert seen["literal"] >= {t.value for t in LiteralType}
    assert seen["reserved"] >= set(range(len(RESERVED_WORDS)))
    for position, codes in MEMBER_POSITIONS.items():
        assert {c for p, c in seen["member"] if p == position} >= codes, position
    assert {c for _, c in seen["member"]} >= {m.value for m in Member}
    assert seen["uri_len_width"] >= {1, 2}
    assert seen["str_len_width"] >= {1, 2, 3, 4}
    assert seen["modifier_flags"] >= {0x01, 0x02, 0x04, 0x08, 0x10}
    assert seen["modifier_order"] >= {0, 1, 2}
    assert seen["ind_seq"] >= {65534, 65535, 0, 1}
    assert seen["ack"] >= {"seq", "bare"}
    assert seen["header"] >= {"udp4", "udp6", "udp8", "tcp8"}
    assert seen["res_epoch"] >= {Status.OK.value, Status.ECHO_REQUIRED.value, 0x3F}
    assert seen["default_graph"] >= {"COPY", "MOVE", "ADD"}


def _terms_of(msg):
    """(position, term, previous term at that position or a sentinel) of every member."""
    none = object()

    def graph(g):
        prev = None
        for t in g:
            for pos, term in zip(("s", "p", "o"), t):
                yield pos, term, none if prev is None else prev[("s", "p", "o").index(pos)]
            prev = t

    if isinstance(msg, Request):
        for key in ("delete", "insert", "where", "template"):
            yield from graph(getattr(msg, key) or ())
        for g in (msg.optional or ()) + (msg.options.optional or ()):
            yield from graph(g)
    elif isinstance(msg, Response) and msg.result is not None:
        if isinstance(msg.result, SelectResult):
            for row in msg.result.rows:
                for term in row:
                    yield "row", term, none
        elif isinstance(msg.result, ConstructResult):
            yield from graph(msg.result.triples)


def test_coverage_from_messages():
    from ksp.literals import compact_type
    from ksp.terms import BNode, Literal, Var

    txs, statuses, options, ops, operands, literals, reserved, members = (set() for _ in range(8))
    for name in VALID:
        v = VECTORS[name]
        msg = decode(v)
        if isinstance(msg, Request):
            txs.add((msg.tx, msg.confirmable))
            opts = msg.options
            for opt, value in zip(Opt, (opts.prefixes or None, opts.delete_graphs,
                                        opts.insert_graphs, opts.query_graphs, opts.optional,
                                        opts.filters, opts.modifier, opts.binds,
                                        opts.max_response_size, opts.credentials,
                                        opts.echo, opts.epoch)):
                if value is not None:
                    options.add(opt)
            exprs = list(opts.filters or ()) + [b.expr for b in opts.binds or ()]
            for token in (t for e in exprs for t in e):
                if isinstance(token, Op):
                    ops.add(token)
                elif isinstance(token, Call):
                    ops.add(token.op)
                elif isinstance(token, Var):
                    operands.add(0x05)
                elif isinstance(token, str):
                    operands.add(0x06)
                else:
                    kind = compact_type(token)
                    literals.add(kind)
                    operands.add(kind if kind <= LiteralType.BOOLEAN else TOKEN_LITERAL)
        elif isinstance(msg, Response) and not msg.indication:
            statuses.add(msg.status)
        for pos, term, prev in _terms_of(msg):
            if term is None:
                members.add(Member.EMPTY)
            elif pos != "row" and term == prev:
                members.add(Member.EMPTY)
            elif isinstance(term, str) and term in RESERVED_CODE:
                members.add(Member.RESERVED)
                reserved.add(RESERVED_CODE[term])
            elif isinstance(term, str):
                members.add(Member.URI)
            elif isinstance(term, Var):
                members.add(Member.VARIABLE)
            elif isinstance(term, BNode):
                members.add(Member.BNODE)
            elif isinstance(term, Literal):
                members.add(Member.LITERAL)
                literals.add(compact_type(term))
    assert txs == {(t, con) for t in Tx for con in (False, True)}
    assert statuses >= set(Status)
    assert options == set(Opt)
    assert ops == set(Op)
    assert operands == set(range(0x07)) | {TOKEN_LITERAL}
    assert literals == set(LiteralType)
    assert reserved == set(range(len(RESERVED_WORDS)))
    assert members == set(Member)


def test_invalid_vectors_cover_every_decode_status():
    statuses = {VECTORS[n]["error"]["status"] for n in INVALID}
    assert statuses >= {s.value for s in Status if 0x01 <= s <= 0x06}


# ---------------------------------------------------------------------------------------------
# Drift: the files are what the generator writes


def test_files_match_generator(tmp_path):
    from tools import make_vectors

    make_vectors.write(tmp_path)
    generated = sorted(p.name for p in tmp_path.glob("*.json"))
    assert generated == [p.name for p in FILES]
    for name in generated:
        assert (tmp_path / name).read_bytes() == (VECTOR_DIR / name).read_bytes(), name


# ---------------------------------------------------------------------------------------------
# An independent reader of valid messages, written from docs/wire-format.md only


_LAYOUT = {  # table 3.1 / §5
    "DELETE_DATA": ("g:delete",), "INSERT_DATA": ("g:insert",),
    "UPDATE_DATA": ("g:delete", "g:insert"), "DELETE": ("g:delete", "g:where"),
    "INSERT": ("g:insert", "g:where"), "UPDATE": ("g:delete", "g:insert", "g:where"),
    "SELECT": ("projection", "g:where", "optional"), "ASK": ("g:where", "optional"),
    "CONSTRUCT": ("g:template", "g:where", "optional"), "TERMINATE": (), "RESET": (),
    "CREATE": ("graphs",), "DROP": ("graphs",), "COPY": ("source", "target"),
    "MOVE": ("source", "target"), "ADD": ("source", "target"),
}
_STATUS_NAMES = {s.value: s.name for s in Status}
_OP_NAMES = {op.value: op.name for op in Op}
_VARIADIC_CODES = {0x4B, 0x4C, 0x4D, 0x4E}  # table 8.2, read from the spec, not from ksp
_XSD = "http://www.w3.org/2001/XMLSchema#"
_LANGSTRING = "http://www.w3.org/1999/02/22-rdf-syntax-ns#langString"
_OPTION_KEYS = ("prefixes", "delete_graphs", "insert_graphs", "query_graphs", "optional",
                "filters", "modifier", "binds", "max_response_size", "credentials", "echo",
                "epoch")


def _f32_lexical(x: float) -> str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "INF" if x > 0 else "-INF"
    for digits in range(1, 10):
        candidate = float(f"{x:.{digits}g}")
        try:
            if struct.unpack("<f", struct.pack("<f", candidate))[0] == x:
                return repr(candidate)
        except OverflowError:
            continue
    return repr(x)


def _f64_lexical(x: float) -> str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "INF" if x > 0 else "-INF"
    return repr(x)


class _Pending:
    """A URI field whose prefix list is not known yet (REQ options come after the data)."""

    def __init__(self, index: int, local: str):
        self.index, self.local = index, local


class Wire:
    """Reads one valid vector's bytes into the JSON description; records every code it meets."""

    def __init__(self, vector: dict):
        self.v = vector
        self.buf = bytes.fromhex(vector["hex"])
        self.pos = 0
        self.seen: dict[str, set] = defaultdict(set)

    # primitives
    def take(self, n: int) -> bytes:
        assert self.pos + n <= len(self.buf), "message too short"
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def u8(self) -> int:
        return self.take(1)[0]

    def u16(self) -> int:
        return struct.unpack("<H", self.take(2))[0]

    def u32(self) -> int:
        return struct.unpack("<I", self.take(4))[0]

    def uri_len(self) -> int:
        b0 = self.u8()
        if not b0 & 0x80:
            self.seen["uri_len_width"].add(1)
            return b0
        n = (b0 & 0x7F) | self.u8() << 7
        assert n >= 128, "non-minimal URI length"
        self.seen["uri_len_width"].add(2)
        return n

    def str_len(self) -> int:
        b0 = self.u8()
        extra = b0 >> 6
        n = b0 & 0x3F
        for k in range(extra):
            n |= self.u8() << (6 + 8 * k)
        assert n >= (0, 0x40, 0x4000, 0x400000)[extra], "non-minimal string length"
        self.seen["str_len_width"].add(extra + 1)
        return n

    def text(self, n: int) -> str:
        return self.take(n).decode("utf-8")

    def uri(self):
        index = self.u8()
        local = self.text(self.uri_len())
        return local if index == 0 else _Pending(index, local)

    def literal(self, kind: int) -> dict:
        self.seen["literal"].add(kind)
        if kind == 0:
            value = self.text(self.str_len())
            return {"type": "literal", "value": value, "datatype": _XSD + "string"}
        if kind == 1:
            value = str(struct.unpack("<i", self.take(4))[0])
            return {"type": "literal", "value": value, "datatype": _XSD + "integer"}
        if kind == 2:
            value = _f32_lexical(struct.unpack("<f", self.take(4))[0])
            return {"type": "literal", "value": value, "datatype": _XSD + "float"}
        if kind == 3:
            return {"type": "literal", "value": self.take(19).decode("ascii"),
                    "datatype": _XSD + "dateTime"}
        if kind == 4:
            byte = self.u8()
            assert byte in (0, 1)
            return {"type": "literal", "value": ("false", "true")[byte],
                    "datatype": _XSD + "boolean"}
        if kind == 5:
            tag = self.take(self.u8()).decode("ascii")
            return {"type": "literal", "value": self.text(self.str_len()), "datatype": _LANGSTRING,
                    "lang": tag}
        if kind == 6:
            datatype = self.uri()
            return {"type": "literal", "value": self.text(self.str_len()), "datatype": datatype}
        assert kind == 7, f"literal type {kind}"
        value = _f64_lexical(struct.unpack("<d", self.take(8))[0])
        return {"type": "literal", "value": value, "datatype": _XSD + "double"}

    def member(self, code: int, position: str):
        self.seen["member"].add((position, code))
        if code == 1:
            return {"type": "uri", "value": self.uri()}
        if code == 2:
            word = self.u8()
            self.seen["reserved"].add(word)
            return {"type": "uri", "value": RESERVED_WORDS[word]}
        if code == 3:
            return {"type": "var", "index": self.u8()}
        if code == 4:
            return self.literal(self.u8())
        assert code == 5, f"member type {code}"
        return {"type": "bnode", "value": self.text(self.uri_len())}

    def triples(self, count: int) -> list:
        out, prev = [], None
        for _ in range(count):
            b = self.u8()
            codes = {"s": b & 7, "p": (b >> 3) & 3, "o": b >> 5}
            triple = {}
            for position, code in codes.items():
                if code == 0:
                    assert prev is not None, "Empty in the first triple"
                    self.seen["member"].add((position, 0))
                    triple[position] = prev[position]
                else:
                    triple[position] = self.member(code, position)
            out.append(triple)
            prev = triple
        return out

    def graph(self) -> list:
        return self.triples(self.u8())

    def expression(self) -> list:
        tokens = []
        for _ in range(self.u8()):
            code = self.u8()
            self.seen["token"].add(code)
            if code <= 0x04:
                tokens.append(self.literal(code))
            elif code == 0x05:
                tokens.append({"type": "var", "index": self.u8()})
            elif code == 0x06:
                tokens.append({"type": "uri", "value": self.uri()})
            elif code == 0x18:
                tokens.append(self.literal(self.u8()))
            elif code in _VARIADIC_CODES:  # CONCAT, COALESCE, IN, NOT IN: a u8 count follows
                tokens.append({"type": "op", "op": _OP_NAMES[code], "count": self.u8()})
            else:
                tokens.append({"type": "op", "op": _OP_NAMES[code]})
        return tokens

    # messages
    def read(self) -> dict:
        v = self.v
        tcp = v["transport"] == "tcp"
        version, type_byte, tid = self.u8(), self.u8(), self.u16()
        if tcp:
            assert self.u32() == len(self.buf), "TCP Length"
        if v["direction"] == "kp_to_sib":
            if type_byte == 0:
                assert not tcp
                self.seen["header"].add("udp4")
                out = {"type": "ack", "tid": tid, "version": version}
                if self.pos < len(self.buf):
                    out["seq"] = self.u16()
                self.seen["ack"].add("seq" if "seq" in out else "bare")
            else:
                out = self.request(version, type_byte, tid)
        else:
            out = self.response(version, type_byte, tid, tcp)
        self.seen["header"].add("tcp8" if tcp else "udp6" if out.get("seq") is not None and
                                out["type"] == "response" else "udp8" if "epoch" in out and
                                out["type"] == "response" else "udp4")
        assert self.pos == len(self.buf), "trailing bytes"
        return _resolve(out, ())

    def request(self, version: int, type_byte: int, tid: int) -> dict:
        code, con = type_byte & 0x7F, bool(type_byte & 0x80)
        self.seen["tx"].add((code, con))
        tx = Tx(code).name
        out: dict = {"type": "request", "tx": tx, "tid": tid, "confirmable": con,
                     "version": version}
        for field in _LAYOUT[tx.removesuffix("_PERSISTENT")]:
            if field.startswith("g:"):
                out[field[2:]] = self.graph()
            elif field == "projection":
                out[field] = self.u8()
            elif field == "optional":
                out[field] = [self.graph() for _ in range(self.u8())]
            elif field == "graphs":
                out[field] = [self.uri() for _ in range(self.u8())]
            else:
                out[field] = self.uri()
                if out[field] == "":
                    self.seen["default_graph"].add(tx)
        options: dict = {}
        for _ in range(self.u8()):
            opt = self.u8()
            self.seen["option"].add(opt)
            key = _OPTION_KEYS[opt]
            if opt == 0x06:
                options[key] = self.modifier()
            elif opt == 0x08:
                options[key] = self.u32()
            elif opt == 0x0B:
                options[key] = self.u32()
                assert options[key] >= 1, "EPOCH 0"
            elif opt == 0x09:
                kp_id = self.take(16).hex()
                options[key] = {"kp_id": kp_id, "password": self.text(self.u8())}
            elif opt == 0x0A:
                options[key] = self.echo()
            else:
                count = self.u8()
                assert count >= 1
                items = []
                for _ in range(count):
                    if opt == 0x00:
                        assert self.u8() == 0
                        items.append(self.text(self.uri_len()))
                    elif opt == 0x04:
                        items.append(self.graph())
                    elif opt == 0x05:
                        items.append(self.expression())
                    elif opt == 0x07:
                        var = self.u8()
                        items.append({"var": var, "expr": self.expression()})
                    else:
                        items.append(self.uri())
                options[key] = items
        options.setdefault("prefixes", [])
        out["options"] = options
        return _resolve(out, tuple(options["prefixes"]))

    def echo(self) -> str:
        size = self.u8()
        assert 1 <= size <= 10
        return self.take(size).hex()

    def modifier(self) -> dict:
        flags = self.u8()
        assert not flags & 0xE0 and flags & 3 != 3
        self.seen["modifier_flags"] |= {bit for bit in (1, 2, 4, 8, 16) if flags & bit}
        self.seen["modifier_order"].add(flags & 3)
        out = {"order": ("NONE", "ASC", "DESC")[flags & 3], "distinct": bool(flags & 0x10)}
        if flags & 3:
            out["order_var"] = self.u8()
        if flags & 4:
            out["limit"] = self.u16()
        if flags & 8:
            out["offset"] = self.u16()
        return out

    def response(self, version: int, type_byte: int, tid: int, tcp: bool) -> dict:
        indication = bool(type_byte & 0x80)
        status = type_byte & 0x3F
        self.seen["ind_status" if indication else "res_status"].add(status)
        out: dict = {"type": "response", "tid": tid, "status": _STATUS_NAMES.get(status, status),
                     "indication": indication, "version": version}
        if indication and not tcp:
            out["seq"] = self.u16()
            self.seen["ind_seq"].add(out["seq"])
        if type_byte & 0x40:  # a UDP RES names its request's epoch, 1 or more (15.6)
            assert not (indication or tcp) and status != 0x10
            out["epoch"] = self.u32()
            assert out["epoch"]
            self.seen["res_epoch"].add(status)
        form = self.v["answers"].removesuffix("_PERSISTENT")
        if status == 0x0F and not indication:  # ECHO REQUIRED: the echo value (7.7)
            out["result"] = {"type": "echo", "value": self.echo()}
            return out
        if status == 0x10 and not indication:  # NUMBER BEHIND: two epochs (15)
            out["result"] = {"type": "behind", "epoch": self.u32(), "next_epoch": self.u32()}
            return out
        if status != 0 or form not in ("SELECT", "ASK", "CONSTRUCT"):
            return out
        if form == "ASK":
            byte = self.u8()
            assert byte in (0, 1)
            out["result"] = {"type": "ask", "value": bool(byte)}
            return out
        prefixes = []
        for _ in range(self.u8()):
            assert self.u8() == 0
            prefixes.append(self.text(self.uri_len()))
        total, count = self.u16(), self.u16()
        assert count <= total
        if form == "CONSTRUCT":
            result = {"type": "construct", "triples": self.triples(count)}
        else:
            variables = self.u8()
            rows = []
            for _ in range(count):
                row = []
                for _ in range(variables):
                    code = self.u8()
                    if code == 0:
                        self.seen["member"].add(("row", 0))
                        row.append(None)
                    else:
                        row.append(self.member(code, "row"))
                rows.append(row)
            result = {"type": "select", "variables": variables, "rows": rows}
        result["total"] = total
        result["prefixes"] = prefixes
        out["result"] = _resolve(result, tuple(prefixes))
        return out


def _resolve(value, prefixes: tuple[str, ...]):
    if isinstance(value, _Pending):
        assert value.index <= len(prefixes), "prefix index beyond the list"
        return prefixes[value.index - 1] + value.local
    if isinstance(value, dict):
        return {k: _resolve(x, prefixes) for k, x in value.items()}
    if isinstance(value, list):
        return [_resolve(x, prefixes) for x in value]
    return value
