"""Hypothesis against the firmware codec on CPython (same source as on the boards): undecodable
bytes give a KspError with the status the reference codec gives, never another exception;
float lexical forms round-trip and match CPython's repr for doubles; what the firmware encodes,
the reference decodes to the same message."""
from __future__ import annotations

import json
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from firmware import harness

harness.import_path()

from kspfw import codec, floats  # noqa: E402

from ksp import DecodeError, IRI, Literal, Transport, Tx, decode_kp_message, decode_sib_message  # noqa: E402
from ksp.terms import double_lexical  # noqa: E402

ANSWERS = [Tx.SELECT, Tx.ASK, Tx.SELECT_PERSISTENT, Tx.ASK_PERSISTENT, Tx.INSERT_DATA,
           Tx.UPDATE, Tx.TERMINATE]
SEEDS = [bytes.fromhex(v["hex"]) for v in (
    json.loads(p.read_text()) for p in sorted(harness.VECTORS.glob("*.json")))
    if v["direction"] == "sib_to_kp" and v["transport"] == "udp"
    and Tx[v["answers"]].base in (Tx.SELECT, Tx.ASK)]


def _check(raw: bytes, answers: Tx) -> None:
    try:
        want = decode_sib_message(raw, Transport.UDP, answers)
        want_status = None
    except DecodeError as exc:
        want, want_status = None, exc.status
    try:
        got = codec.decode(raw, int(answers))
    except codec.KspError as exc:
        assert exc.status == want_status, (raw.hex(), exc)
        return
    assert want_status is None, raw.hex()
    assert (got.tid, got.status, bool(got.ind), got.seq) == (want.tid, int(want.status),
                                                             want.indication, want.seq)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.binary(max_size=64), st.sampled_from(ANSWERS))
def test_random_bytes_decode_or_fail_like_the_reference(raw, answers):
    _check(raw, answers)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.sampled_from(SEEDS), st.data())
def test_mutated_results_decode_or_fail_like_the_reference(seed, data):
    raw = bytearray(seed)
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    answers = Tx.SELECT if raw[1:2] != b"\x80" and data.draw(st.booleans()) else Tx.SELECT_PERSISTENT
    _check(bytes(raw[:cut] if data.draw(st.booleans()) else raw), answers)


@given(st.integers(0, 2**64 - 1))
def test_double_lexical_is_cpython_repr_and_round_trips(b):
    lex = floats.lexical(b, True)
    assert lex == double_lexical(struct.unpack("<d", struct.pack("<Q", b))[0])
    if lex != "NaN":
        assert floats.bits(lex, True) == b


@given(st.integers(0, 2**32 - 1))
def test_float_lexical_round_trips_through_binary32(b):
    lex = floats.lexical(b, False)
    if lex == "NaN":
        return
    assert floats.bits(lex, False) == b
    assert struct.unpack("<I", struct.pack("<f", float(lex.replace("INF", "inf"))))[0] == b
    if b & 0x7FFFFF:  # not a power of two: no asymmetric interval, same as the reference
        from ksp.literals import float_lexical

        assert lex == float_lexical(struct.unpack("<f", struct.pack("<I", b))[0])


IRIS = st.sampled_from(["http://example.org/gh#s", "http://example.org/gh#temperature",
                        "http://www.w3.org/1999/02/22-rdf-syntax-ns#type", "urn:x:é"])
LITERALS = st.one_of(
    st.text(max_size=20).map(lambda s: codec.Lit(s)),
    st.integers(-2**40, 2**40).map(lambda n: codec.Lit(str(n), codec.XSD_INTEGER)),
    st.floats(width=32, allow_nan=False).map(
        lambda x: codec.Lit(floats.lexical(struct.unpack("<I", struct.pack("<f", x))[0], False),
                            codec.XSD_FLOAT)),
    st.sampled_from(["21.50", "1e5", "007", "-0", "true", "1"]).map(
        lambda s: codec.Lit(s, codec.XSD_FLOAT)))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(IRIS, IRIS, st.one_of(IRIS, LITERALS)), max_size=6))
def test_encoded_updates_decode_with_the_reference(triples):
    raw = bytes(codec.request(0x02, 5, graphs=(triples,), prefixes=("http://example.org/gh#",)))
    req = decode_kp_message(raw)
    want = tuple((IRI(s), IRI(p), IRI(o) if isinstance(o, str) else Literal(
        o.value, o.datatype, o.lang)) for s, p, o in triples)
    assert req.insert == want
