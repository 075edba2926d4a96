"""Round trips through the codec: encode → decode → encode, for every kind of valid message.

For every generated message m and transport t: b = encode(m, t); d = decode(b); then
encode(d, t) == b (byte-exact: the encoding is canonical, §1/§10) and d == normalise(m, t)
(the decoder gives back m, up to what the wire legitimately does not keep).
Also: options in any order decode the same (§7); the compact-form rule for literals against an
independent reading of §4.3; both widths of every length field; MAX RESPONSE SIZE (§6.4); IND
sequence numbers against an independent reference of §9 and its worked examples.
"""
from __future__ import annotations

import math
import re
import struct
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ksp import (
    IRI, TCP, UDP, Ack, ConstructResult, Literal, Options, Request, Response, SelectResult,
    Status, Triple, Tx, decode_kp_message, decode_sib_message, encode, header_size, is_newer,
    next_seq,
)
from ksp.codec import LAYOUT
from ksp.compress import choose_prefixes, request_iris, result_iris
from ksp.literals import float_lexical
from ksp.terms import (
    XSD_BOOLEAN, XSD_DATETIME, XSD_DOUBLE, XSD_FLOAT, XSD_INTEGER, XSD_STRING,
)
from strategies import acks, literals, over, requests, responses

TRANSPORTS = (UDP, TCP)
transports = st.sampled_from(TRANSPORTS)
_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
_GRAPH_FIELDS = ("delete", "insert", "where", "template")


def fast(n: int):
    return settings(max_examples=n, deadline=None, suppress_health_check=_HEALTH)


# ---------------------------------------------------------------------------------------------
# What the wire does not keep


def normalise(msg, transport):
    """`msg` as a decoder gives it back: only the changes the wire format legitimately makes."""
    if isinstance(msg, Request):
        tx = Tx(msg.tx)
        layout = LAYOUT[tx]
        opts = msg.options
        fields = {}
        for name in layout:
            value = getattr(msg, name)
            if name in _GRAPH_FIELDS or name == "optional":
                # An absent Graph field travels as an empty one (TC = 0), absent optional
                # graphs as OGC = 0: the wire has no "None", the decoder gives ().
                fields[name] = () if value is None else tuple(value)
        if opts.prefixes is None:
            # prefixes=None lets the encoder choose (§10, ksp.compress); the message then
            # carries that list, which is what the decoder reads back. TERMINATE and RESET have
            # no Data field, hence no prefix list: ().
            prefixes = choose_prefixes(request_iris(msg)) if layout else ()
        else:
            prefixes = tuple(opts.prefixes)
        return msg._replace(tx=tx, options=opts._replace(prefixes=prefixes), **fields)
    if isinstance(msg, Response):
        seq = msg.seq
        if transport is TCP or not msg.indication:
            # Only UDP INDs have a sequence number (R11: TCP INDs carry none; RES never does).
            seq = None
        result = msg.result
        if isinstance(result, (SelectResult, ConstructResult)):
            triples = isinstance(result, ConstructResult)
            items = result.triples if triples else result.rows
            # total=None lets the encoder count: TRC = number of results given.
            total = len(items) if result.total is None else result.total
            # TRC is a u16 that saturates at 65535 (§6.1).
            total = min(total, 0xFFFF)
            # prefixes=None: the encoder's automatic choice (§10), carried in the message.
            prefixes = (choose_prefixes(result_iris(items, triples))
                        if result.prefixes is None else tuple(result.prefixes))
            result = result._replace(total=total, prefixes=prefixes)
        return msg._replace(seq=seq, result=result)
    if isinstance(msg, Ack):
        return msg  # an ACK keeps everything (a bare ACK decodes with seq=None)
    raise TypeError(msg)


def roundtrip(msg, transport, answers=None):
    """(bytes, decoded message), checking the byte-exact re-encode on the way."""
    b = encode(msg, transport)
    if isinstance(msg, Response):
        d = decode_sib_message(b, transport, answers)
    else:
        d = decode_kp_message(b, transport)
    assert encode(d, transport) == b, "decode → encode is not byte-exact"
    return b, d


# ---------------------------------------------------------------------------------------------
# Round trips


@pytest.mark.slow
@fast(300)
@given(m=requests(), transport=transports)
def test_request_roundtrip(m, transport):
    _, d = roundtrip(m, transport)
    assert d == normalise(m, transport)


@pytest.mark.slow
@pytest.mark.parametrize("tx", list(Tx), ids=lambda t: t.name)
@fast(15)
@given(data=st.data(), transport=transports)
def test_request_roundtrip_every_transaction_type(tx, data, transport):
    m = data.draw(requests(txs=[tx]))
    _, d = roundtrip(m, transport)
    assert d.tx is tx
    assert d == normalise(m, transport)


@pytest.mark.slow
@fast(300)
@given(pair=responses(), transport=transports)
def test_response_roundtrip(pair, transport):
    m, answers = pair
    m = over(m, transport)
    _, d = roundtrip(m, transport, answers)
    assert d == normalise(m, transport)


@pytest.mark.slow
@pytest.mark.parametrize("transport", TRANSPORTS, ids=str)
@fast(100)
@given(data=st.data())
def test_response_roundtrip_per_transport(transport, data):
    """Responses made for one transport (seq only on UDP INDs) keep their seq exactly."""
    m, answers = data.draw(responses(transport=transport))
    _, d = roundtrip(m, transport, answers)
    assert d.seq == m.seq
    assert d == normalise(m, transport)


@fast(100)
@given(m=acks())
def test_ack_roundtrip(m):
    b, d = roundtrip(m, UDP)
    assert len(b) == (4 if m.seq is None else 6)
    assert d == normalise(m, UDP)


@pytest.mark.parametrize("n", [0, 1, 63, 64, 16383, 16384, 4194303, 4194304])
def test_string_length_widths(n):
    """Every width of the string length (§4.2), at both sides of each boundary."""
    m = Request(Tx.INSERT_DATA, 1, insert=(Triple(IRI("urn:s"), IRI("urn:p"), Literal("a" * n)),),
                options=Options(prefixes=()))
    b, d = roundtrip(m, UDP)
    assert d.insert[0].o.lexical == "a" * n
    width = 1 if n < 64 else 2 if n < 16384 else 3 if n < 4194304 else 4
    assert len(b) == 4 + 1 + 1 + 7 + 7 + 1 + width + n + 1


@pytest.mark.parametrize("n", [0, 1, 127, 128, 32767])
def test_uri_length_widths(n):
    """Both widths of the URI length (§4.1)."""
    m = Request(Tx.DROP, 1, graphs=(IRI("u" * n),))
    b, d = roundtrip(m, UDP)
    assert d.graphs == (IRI("u" * n),)
    assert len(b) == 4 + 1 + 1 + (1 if n < 128 else 2) + n + 1


# ---------------------------------------------------------------------------------------------
# Options in any order (§7: "canonical order is ascending type code (decoders accept any order)")


def prefix_option_bytes(prefixes) -> bytes:
    if not prefixes:
        return b""
    out = bytearray((0x00, len(prefixes)))
    for p in prefixes:
        raw = p.encode()
        out += b"\x00" + (bytes((len(raw),)) if len(raw) < 128
                           else bytes((0x80 | len(raw) & 0x7F, len(raw) >> 7))) + raw
    return bytes(out)


@pytest.mark.slow
@fast(200)
@given(m=requests(small=True), data=st.data())
def test_options_in_any_order(m, data):
    canonical = normalise(m, UDP)  # explicit prefix list: the data bytes no longer depend on it
    opts = canonical.options
    present = [k for k in Options._fields if k != "prefixes" and getattr(opts, k) is not None]
    base = canonical._replace(options=Options(prefixes=opts.prefixes))
    base_bytes = encode(base, UDP)
    prefix_option = prefix_option_bytes(opts.prefixes)
    core = base_bytes[:len(base_bytes) - 1 - len(prefix_option)]  # header + Data
    assert base_bytes == core + bytes((1 if prefix_option else 0,)) + prefix_option
    pieces = [prefix_option] if prefix_option else []
    for key in present:  # each option's bytes: what it adds after the PREFIX option
        alone = encode(base._replace(options=base.options._replace(**{key: getattr(opts, key)})),
                       UDP)
        pieces.append(alone[len(base_bytes):])
    shuffled = data.draw(st.permutations(pieces), label="option order")
    buf = core + bytes((len(pieces),)) + b"".join(shuffled)
    assert decode_kp_message(buf, UDP) == decode_kp_message(encode(canonical, UDP), UDP)


# ---------------------------------------------------------------------------------------------
# The compact-form rule (§4.3), from an independent reading of the spec


def _f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def _ref_float_lexical(v: float) -> str:
    """§4.3 "Writing a float" for binary32 `v`, in exact rational arithmetic: the fewest digits
    inside v's rounding interval, the closest of them, a tie to the even digit."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "INF" if v > 0 else "-INF"
    if v == 0:
        return "-0.0" if math.copysign(1.0, v) < 0 else "0.0"
    bits = struct.unpack("<I", struct.pack("<f", abs(v)))[0]
    a = Fraction(abs(v))

    def f32_at(b: int) -> Fraction:
        if b >= 0x7F800000:  # one step past the largest: where rounding overflows
            return Fraction(2) ** 128
        return Fraction(struct.unpack("<f", struct.pack("<I", b))[0])

    lo, hi = (a + f32_at(bits - 1)) / 2, (a + f32_at(bits + 1)) / 2
    inclusive = bits % 2 == 0  # round-half-even keeps the interval's ends for an even mantissa
    e10 = math.floor(math.log10(abs(v)))  # an estimate, made exact below
    while Fraction(10) ** e10 > a:
        e10 -= 1
    while Fraction(10) ** (e10 + 1) <= a:
        e10 += 1
    for n in range(1, 10):
        e = e10 - n + 1
        unit = Fraction(10) ** e
        c = a // unit
        fits = [(abs(d * unit - a), d % 2, d) for d in (c, c + 1)
                if (lo <= d * unit <= hi if inclusive else lo < d * unit < hi)]
        if fits:
            d = min(fits)[2]
            return repr(math.copysign(float(f"{d}e{e}"), v))
    raise AssertionError(v)


@pytest.mark.parametrize("bits, text", [
    (0x0F800000, "1.2621775e-29"),  # 2^-96: the nearest 8-digit decimal does not read back
    (0x39800000, "0.00024414062"),  # 2^-12: two 11-digit decimals equally close, the even one
    (0x41AC0000, "21.5"), (0x3DCCCCCD, "0.1"), (0x7F7FFFFF, "3.4028235e+38"), (0x00000001, "1e-45"),
])
def test_float_lexical_examples(bits, text):
    value = struct.unpack("<f", struct.pack("<I", bits))[0]
    assert float_lexical(value) == _ref_float_lexical(value) == text


@pytest.mark.slow
@settings(max_examples=2000)
@given(st.integers(0, 2**32 - 1))
def test_float_lexical_is_the_spec_rule(bits):
    value = struct.unpack("<f", struct.pack("<I", bits))[0]
    assert float_lexical(value) == _ref_float_lexical(value)


def _ref_double_lexical(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "INF" if v > 0 else "-INF"
    return repr(v)


def expected_literal_type(lit: Literal) -> int:
    """Table 3.4 code the canonical encoding must use for `lit`."""
    if lit.lang is not None:
        return 0x05
    dt, lex = lit.datatype, lit.lexical
    if dt == XSD_STRING:
        return 0x00
    if dt == XSD_INTEGER and re.fullmatch(r"0|-?[1-9][0-9]*", lex, re.ASCII) \
            and -2**31 <= int(lex) < 2**31:
        return 0x01
    if dt in (XSD_FLOAT, XSD_DOUBLE) and re.fullmatch(r"[-+0-9.eEINFNa]+", lex, re.ASCII):
        try:
            value = float(lex)
            if dt == XSD_FLOAT and lex == _ref_float_lexical(_f32(value)):
                return 0x02
        except (ValueError, OverflowError):
            pass
        else:
            if dt == XSD_DOUBLE and lex == _ref_double_lexical(value):
                return 0x07
    if dt == XSD_DATETIME and re.fullmatch(
            r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3])(:[0-5][0-9]){2}",
            lex):
        return 0x03
    if dt == XSD_BOOLEAN and lex in ("true", "false"):
        return 0x04
    return 0x06


def _literal_type_on_wire(lit: Literal) -> tuple[int, Literal]:
    m = Request(Tx.INSERT_DATA, 7, insert=(Triple(IRI("urn:s"), IRI("urn:p"), lit),))
    b, d = roundtrip(m._replace(options=m.options._replace(prefixes=())), UDP)
    # header 4, TC 1, type byte 1, subject 7 (index, length, "urn:s"), predicate 7, then Literal
    return b[20], d.insert[0].o


@fast(300)
@given(lit=st.one_of(literals(small=True),
                     st.floats(width=32).map(lambda x: Literal(float_lexical(x), XSD_FLOAT))))
def test_literal_uses_compact_form_exactly_when_lossless(lit):
    kind, back = _literal_type_on_wire(lit)
    assert back == lit
    assert kind == expected_literal_type(lit)


def test_float_zero_sign_does_not_depend_on_history():
    """+0.0 and −0.0 are distinct binary32 values with distinct lexical forms (§4.3)."""
    for lex in ("0.0", "-0.0", "0.0", "-0.0"):
        kind, back = _literal_type_on_wire(Literal(lex, XSD_FLOAT))
        assert (kind, back.lexical) == (0x02, lex)
        # decoding the binary32 itself must give the sign back, whatever was decoded before
        b = bytes.fromhex("01020700" "01" "89" "0005") + b"urn:s" + bytes.fromhex("0005") \
            + b"urn:p" + b"\x02" + struct.pack("<f", float(lex)) + b"\x00"
        assert decode_kp_message(b, UDP).insert[0].o == Literal(lex, XSD_FLOAT)


def test_auto_prefix_rule_counts_bytes():
    """§10 takes a namespace when `uses × length > length + 2`; lengths are bytes (§1)."""
    # "é:" is 2 characters but 3 bytes: 2 uses × 3 > 3 + 2, so it saves a byte.
    assert choose_prefixes(["é:a", "é:b"]) == ("é:",)


# ---------------------------------------------------------------------------------------------
# MAX RESPONSE SIZE (§6.4, R16)

_EMPTY_RESULT = {Tx.SELECT: 6, Tx.CONSTRUCT: 5, Tx.ASK: 1}  # PC 0 | TRC | RC [| VC]


def _prefix_bytes(prefixes) -> int:
    return sum(1 + (1 if len(p.encode()) < 128 else 2) + len(p.encode()) for p in prefixes)


@pytest.mark.slow
@fast(300)
@given(pair=responses(query_ok=True), transport=transports, data=st.data())
def test_max_response_size(pair, transport, data):
    resp, answers = pair
    resp = over(resp, transport)
    form = answers.base
    full = encode(resp, transport)
    hsize = header_size(transport, resp.indication, resp.epoch is not None)
    n = data.draw(st.one_of(st.integers(0, len(full) + 4),
                            st.integers(hsize, hsize + _EMPTY_RESULT[form] + 4)), label="max_size")
    b = encode(resp, transport, max_size=n)
    assert len(b) <= max(n, hsize)
    d = decode_sib_message(b, transport, answers)
    want = normalise(resp, transport)
    assert (d.tid, d.indication, d.seq) == (want.tid, want.indication, want.seq)
    if n >= len(full):
        assert b == full  # everything fits: the limit changes nothing
    if d.status == Status.RESPONSE_TOO_LARGE:
        assert d.result is None and len(b) == hsize
        # 0x0c only when not even the empty result fits: with the encoder choosing the prefix
        # list it may drop it; an explicit list must travel.
        explicit = getattr(resp.result, "prefixes", None)
        smallest = hsize + _EMPTY_RESULT[form] + (_prefix_bytes(explicit) if explicit else 0)
        assert n < smallest
        return
    assert d.status == Status.OK
    if form is Tx.ASK:
        assert d.result == want.result
        return
    triples = form is Tx.CONSTRUCT
    got = d.result.triples if triples else d.result.rows
    items = want.result.triples if triples else want.result.rows
    assert got == items[:len(got)]  # whole results, in order, from the start
    assert d.result.total == want.result.total  # TRC: all of them, not just those sent
    if not triples:
        assert d.result.variables == want.result.variables
    if len(got) < len(items):
        # As many as fit: with the prefix list the encoder used, one more would not.
        more = d.result._replace(**{"triples" if triples else "rows": items[:len(got) + 1]})
        assert len(encode(d._replace(result=more), transport)) > n


# ---------------------------------------------------------------------------------------------
# Sequence numbers (§9)


def reference_is_newer(seq: int, last: int | None) -> bool:
    """§9 from plain integers: the difference I₂ − I₁, taken as the signed difference of two
    16-bit serial numbers in (−32768, 32768], is positive. (The paper's −2^15 < I₂ − I₁ < 0
    discards; d = 0 is a duplicate; exactly half the space, 32768, is kept by the strict bound.)
    """
    if last is None:
        return True
    diff = seq - last
    while diff <= -32768:
        diff += 65536
    while diff > 32768:
        diff -= 65536
    return diff > 0


u16 = st.integers(0, 0xFFFF)


@pytest.mark.slow
@fast(1000)
@given(seq=u16, last=st.one_of(st.none(), u16))
def test_is_newer_matches_reference(seq, last):
    assert is_newer(seq, last) == reference_is_newer(seq, last)


@fast(300)
@given(last=u16, delta=st.integers(-40000, 40000))
def test_is_newer_near_the_boundaries(last, delta):
    seq = (last + delta) % 65536
    assert is_newer(seq, last) == reference_is_newer(seq, last)


@pytest.mark.parametrize("last,seq,d,accept", [
    (5, 6, 1, True),             # next
    (5, 3, 65534, False),        # older
    (5, 5, 0, False),            # duplicate (ACK again)
    (65534, 1, 3, True),         # newer, across the wrap (65535, 0, 1)
    (65535, 0, 1, True),         # the wrap itself
    (0, 65535, 65535, False),    # the one before the wrap, arriving late
    (1, 65534, 65533, False),    # stale from before the wrap
    (100, 32868, 32768, True),   # exactly half the space: the strict left bound keeps it
    (100, 32869, 32769, False),  # more than half behind
])
def test_is_newer_worked_examples(last, seq, d, accept):
    assert (seq - last) % 65536 == d
    assert is_newer(seq, last) is accept
    assert reference_is_newer(seq, last) is accept


def test_is_newer_without_previous():
    assert all(is_newer(s, None) for s in (0, 1, 32768, 65535))


@fast(200)
@given(seq=u16)
def test_next_seq(seq):
    assert next_seq(seq) == (seq + 1) % 65536
    assert is_newer(next_seq(seq), seq)
    assert not is_newer(seq, next_seq(seq))
