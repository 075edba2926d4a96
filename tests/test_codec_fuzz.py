"""Decoder robustness: whatever bytes arrive, the decoders raise `ksp.DecodeError` or return a
message, never anything else (codec.py: "Decoding never raises anything but DecodeError").

Inputs: random bytes (some shaped like a header, so they get past the version check and the
TCP Length), and valid encodings of generated messages mutated by byte flips, truncation,
insertions, deletions and duplicated segments. Every input goes to both decoders, over both
transports, with every `answers` value. What a decoder accepts must be a message the encoder
can carry, and must decode back the same (the decoder may accept non-canonical bytes, §1, but
never a message the spec forbids). Also: every truncation of every valid message is rejected
with the status §3.2 names, and header faults are reported before anything else.

Example counts keep this file at ~10 s on a 2-core machine (well under 60 s on a slow one).
"""
from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ksp import (
    IRI, TCP, UDP, Ack, DecodeError, Literal, Options, Request, Response, Status, Triple, Tx,
    decode_kp_message, decode_sib_message, encode,
)
from ksp.terms import RDF_LANGSTRING
from strategies import messages, over
from test_codec_roundtrip import prefix_option_bytes, normalise

TRANSPORTS = (UDP, TCP)
ALL_ANSWERS = (None, *Tx)
_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]


def fast(n: int):
    return settings(max_examples=n, deadline=None, suppress_health_check=_HEALTH)


def _check_accepted(decoded, transport, redecode) -> None:
    """A decoded message re-encodes (no EncodeError) and decodes back to itself."""
    try:
        again = encode(decoded, transport)
    except Exception as exc:  # noqa: BLE001 - any failure here is the decoder's fault
        raise AssertionError(f"decoder accepted a message the encoder refuses: {decoded!r}: "
                             f"{exc!r}") from exc
    assert redecode(again) == decoded


def _decode(fn, transport, redecode) -> None:
    try:
        decoded = fn()
    except DecodeError as exc:
        assert isinstance(exc.status, Status), exc
        return
    # Anything but DecodeError propagates and fails the test.
    _check_accepted(decoded, transport, redecode)


def decode_every_way(buf: bytes) -> None:
    """Feed `buf` to both decoders, both transports, every `answers`."""
    for transport in TRANSPORTS:
        _decode(lambda: decode_kp_message(buf, transport), transport,
                lambda b: decode_kp_message(b, transport))
        for answers in ALL_ANSWERS:
            _decode(lambda: decode_sib_message(buf, transport, answers), transport,
                    lambda b: decode_sib_message(b, transport, answers))


def with_tcp_length(buf: bytes) -> bytes:
    """`buf` with its TCP Length field set to its own length (so decoding goes past it)."""
    if len(buf) < 8:
        return buf
    return buf[:4] + struct.pack("<I", len(buf)) + buf[8:]


# ---------------------------------------------------------------------------------------------
# (a) random bytes

_header_like = st.builds(
    lambda type_byte, tid, body, tcp: (
        bytes((1, type_byte)) + tid + (struct.pack("<I", 8 + len(body)) if tcp else b"") + body),
    st.one_of(st.integers(0, 255), st.sampled_from([0x00, 0x80, 0x02, 0x07, 0x08, 0x09, 0x87])),
    st.binary(min_size=2, max_size=2),
    st.binary(max_size=48),
    st.booleans(),
)


@fast(400)
@given(buf=st.one_of(st.binary(max_size=64), _header_like))
def test_random_bytes(buf):
    decode_every_way(buf)


@fast(300)
@given(version=st.integers(0, 255), type_byte=st.integers(0, 255),
       tid=st.binary(min_size=2, max_size=2), body=st.binary(max_size=24),
       transport=st.sampled_from(TRANSPORTS))
def test_header_faults_come_first(version, type_byte, tid, body, transport):
    """§3.2 "Which fault is reported": header size and TCP Length, then Version (0x01), then
    the type byte (0x02 / 0x03), whatever garbage follows."""
    length = struct.pack("<I", 8 + len(body)) if transport is TCP else b""
    buf = bytes((version, type_byte)) + tid + length + body
    code = type_byte & 0x7F
    if version != 1:
        want = Status.VERSION_NOT_SUPPORTED
    elif type_byte == 0x80 or (code == 0 and transport is TCP):
        want = Status.INVALID_MESSAGE_TYPE  # 0x80 from a KP; an ACK over TCP
    elif code >= 0x17:
        want = Status.INVALID_TRANSACTION_TYPE
    else:
        want = None
    if want is not None:
        with pytest.raises(DecodeError) as info:
            decode_kp_message(buf, transport)
        assert info.value.status is want
    if version != 1:
        for answers in ALL_ANSWERS:
            with pytest.raises(DecodeError) as info:
                decode_sib_message(buf, transport, answers)
            assert info.value.status is Status.VERSION_NOT_SUPPORTED


# ---------------------------------------------------------------------------------------------
# (b) valid encodings, mutated

_MUTATIONS = ("flip", "truncate", "insert", "delete", "duplicate")


@st.composite
def mutated_encodings(draw):
    msg, _ = draw(messages(small=True))
    transport = UDP if isinstance(msg, Ack) else draw(st.sampled_from(TRANSPORTS))
    buf = bytearray(encode(over(msg, transport), transport))
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(_MUTATIONS))
        n = len(buf)
        if kind == "flip" and n:
            buf[draw(st.integers(0, n - 1))] ^= draw(st.integers(1, 255))
        elif kind == "truncate":
            del buf[draw(st.integers(0, n)):]
        elif kind == "insert":
            at = draw(st.integers(0, n))
            buf[at:at] = draw(st.binary(min_size=1, max_size=4))
        elif kind == "delete" and n:
            at = draw(st.integers(0, n - 1))
            del buf[at:at + draw(st.integers(1, 4))]
        elif kind == "duplicate" and n:
            start = draw(st.integers(0, n - 1))
            segment = buf[start:start + draw(st.integers(1, 16))]
            at = draw(st.integers(0, n))
            buf[at:at] = segment
    buf = bytes(buf)
    if transport is TCP and draw(st.booleans()):
        buf = with_tcp_length(buf)  # else the Length check rejects nearly every mutation
    return buf


@pytest.mark.slow
@fast(500)
@given(buf=mutated_encodings())
def test_mutated_encodings(buf):
    decode_every_way(buf)


# ---------------------------------------------------------------------------------------------
# Truncation never decodes silently to something else


@pytest.mark.slow
@fast(150)
@given(pair=messages(small=True), transport=st.sampled_from(TRANSPORTS))
def test_every_truncation_is_rejected(pair, transport):
    msg, answers = pair
    if isinstance(msg, Ack):
        transport = UDP  # there are no ACKs over TCP (R11)
    msg = over(msg, transport)
    if isinstance(msg, Response):
        def decode(b):
            return decode_sib_message(b, transport, answers)
    else:
        def decode(b):
            return decode_kp_message(b, transport)
    full = encode(msg, transport)
    # Which fault is reported (§3.2): the first in wire order. A REQ cut inside its header or
    # Data field is 0x04; cut at or after its OC byte, 0x06. Every other message: 0x04.
    data_end = _request_data_end(msg, transport) if isinstance(msg, Request) else len(full)
    for n in range(len(full)):
        cut = full[:n]
        # Over TCP a cut message contradicts its Length; with the Length patched to match, the
        # decoder must still notice the missing fields.
        for buf in {cut, with_tcp_length(cut)} if transport is TCP else {cut}:
            if isinstance(msg, Ack) and msg.seq is not None and n == 4:
                # The one genuine exception: a 6-byte ACK cut after its 4-byte header is a bare
                # ACK, which the spec accepts for compatibility with the paper (§2.4, R10).
                # The sequence number is lost: it then acknowledges the newest IND.
                assert decode(buf) == Ack(msg.tid, None)
                continue
            with pytest.raises(DecodeError) as info:
                decode(buf)
            length_ok = transport is UDP or buf is not cut or n < 8
            want = (Status.INVALID_OPTION_FORMAT if n >= data_end and length_ok
                    else Status.INVALID_DATA_FORMAT)
            assert info.value.status is want, (n, data_end, info.value)


def _request_data_end(msg: Request, transport) -> int:
    """Offset of a REQ's OC byte in its encoding (header + Data field)."""
    canonical = normalise(msg, transport)  # explicit prefix list: the Data bytes stay the same
    bare = encode(canonical._replace(options=Options(prefixes=canonical.options.prefixes)),
                  transport)
    return len(bare) - 1 - len(prefix_option_bytes(canonical.options.prefixes))


# ---------------------------------------------------------------------------------------------
# Accepting only what the spec allows, also when a prefix resolves a URI after the fact
# (a REQ's prefix list is in its options, after the Data field).

_LANGSTRING_NS, _LANGSTRING_LOCAL = RDF_LANGSTRING.rsplit("#", 1)


def _req(tx: Tx, data: bytes, options: bytes) -> bytes:
    return bytes((1, 0x80 | tx, 9, 0)) + data + options


def _prefix_option(*prefixes: str) -> bytes:
    body = b"".join(b"\x00" + bytes((len(p.encode()),)) + p.encode() for p in prefixes)
    return bytes((1, 0x00, len(prefixes))) + body


def test_langstring_datatype_direct_is_rejected():
    """§4.3: a 0x06 literal's datatype MUST NOT be rdf:langString (control case)."""
    dt = RDF_LANGSTRING.encode()
    triple = b"\x89" + b"\x00\x05urn:s" + b"\x00\x05urn:p" + b"\x06\x00" + bytes((len(dt),)) \
        + dt + b"\x01x"
    with pytest.raises(DecodeError) as info:
        decode_kp_message(_req(Tx.INSERT_DATA, b"\x01" + triple, b"\x00"), UDP)
    assert info.value.status == Status.INVALID_DATA_FORMAT


def test_langstring_datatype_through_prefix_is_rejected():
    """The same literal, its datatype spelt with a prefix from the PREFIX option."""
    ns = _LANGSTRING_NS + "#"
    local = _LANGSTRING_LOCAL.encode()
    triple = b"\x89" + b"\x00\x05urn:s" + b"\x00\x05urn:p" + b"\x06\x01" + bytes((len(local),)) \
        + local + b"\x01x"
    buf = _req(Tx.INSERT_DATA, b"\x01" + triple, _prefix_option(ns))
    with pytest.raises(DecodeError) as info:
        d = decode_kp_message(buf, UDP)
        pytest.fail(f"accepted {d.insert[0].o!r}")
    assert info.value.status == Status.INVALID_DATA_FORMAT


def test_create_default_graph_through_prefix_is_rejected():
    """§5.3: CREATE cannot name the default graph, also when IRI("") is prefix "" + ""."""
    with pytest.raises(DecodeError) as info:  # control case: spelt out
        decode_kp_message(_req(Tx.CREATE, b"\x01\x00\x00", b"\x00"), UDP)
    assert info.value.status == Status.INVALID_DATA_FORMAT
    buf = _req(Tx.CREATE, b"\x01\x01\x00", _prefix_option(""))
    with pytest.raises(DecodeError) as info:
        d = decode_kp_message(buf, UDP)
        pytest.fail(f"accepted CREATE {d.graphs!r}")
    # §7.2: the empty prefix entry itself is refused, so "" + "" can never spell the default graph.
    assert info.value.status == Status.INVALID_OPTION_FORMAT


def test_empty_datatype_iri_is_refused_by_both_or_neither():
    """A 0x06 literal whose datatype URI field is empty (`00 00`): the encoder refuses such a
    literal ("a literal needs a datatype IRI"), so the decoder must not produce one."""
    triple = b"\x89" + b"\x00\x05urn:s" + b"\x00\x05urn:p" + b"\x06\x00\x00" + b"\x01x"
    buf = _req(Tx.INSERT_DATA, b"\x01" + triple, b"\x00")
    try:
        decoded = decode_kp_message(buf, UDP)
    except DecodeError as exc:
        assert exc.status == Status.INVALID_DATA_FORMAT
    else:
        _check_accepted(decoded, UDP, lambda b: decode_kp_message(b, UDP))


def test_encoder_refuses_what_the_decoder_refuses():
    """The two cases above from the model side: the encoder does refuse them."""
    from ksp import EncodeError
    with pytest.raises(EncodeError):
        encode(Request(Tx.CREATE, 1, graphs=(IRI(""),), options=Options(prefixes=("",))))
    with pytest.raises(EncodeError):
        encode(Request(Tx.INSERT_DATA, 1, insert=(
            Triple(IRI("urn:s"), IRI("urn:p"), Literal("x", RDF_LANGSTRING)),)))
