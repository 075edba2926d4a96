"""The sealed envelope (`ksp/secure.py`, spec section 13): vectors, tags, directions, replays."""
from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from ksp.codes import Status
from ksp.secure import (
    MAGIC, OVERHEAD, ReplayWindow, SealError, Sealer, derive_keys, open_sealed, parse_key,
    peek_kp_id, seal,
)
from tools import make_secure_vectors

VECTOR_DIR = Path(__file__).parent / "vectors" / "secure"
FILES = sorted(VECTOR_DIR.glob("*.json"))
KEY = bytes(range(32))
KP = bytes(range(16))


def test_vector_files_are_what_the_generator_writes() -> None:
    expected = make_secure_vectors.vectors()
    assert sorted(p.stem for p in FILES) == sorted(expected)
    for p in FILES:
        assert p.read_text() == make_secure_vectors.render(expected[p.stem])


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_vector_opens_and_reseals(path: Path) -> None:
    v = json.loads(path.read_text())
    keys = derive_keys(bytes.fromhex(v["key"]))
    dir_key = keys.kp_to_sib if v["direction"] == "kp_to_sib" else keys.sib_to_kp
    assert dir_key.hex() == v["direction_key"]
    # The derivation is HMAC-SHA256(key, label), independent of this module's code path.
    label = b"ksp-seal kp->sib" if v["direction"] == "kp_to_sib" else b"ksp-seal sib->kp"
    assert hmac.new(bytes.fromhex(v["key"]), label, hashlib.sha256).hexdigest() == v["direction_key"]
    data = bytes.fromhex(v["hex"])
    opened = open_sealed(dir_key, data)
    assert opened.inner.hex() == v["inner_hex"]
    assert opened.counter == v["counter"] and opened.kp_id.hex() == v["kp_id"]
    assert len(data) == len(opened.inner) + OVERHEAD
    assert seal(dir_key, opened.kp_id, opened.counter, opened.inner) == data
    other = keys.sib_to_kp if dir_key == keys.kp_to_sib else keys.kp_to_sib
    with pytest.raises(SealError):  # reflected to its sender
        open_sealed(other, data)


def test_magic_is_not_a_ksp_version() -> None:
    kp, sib = Sealer(KEY, KP, sib=False), Sealer(KEY, KP, sib=True)
    data = kp.seal(b"\x01\x82\x00\x01")
    assert data[0] == MAGIC != 0x01
    assert peek_kp_id(data) == KP
    assert sib.open(data) == b"\x01\x82\x00\x01"


def test_every_flipped_bit_is_refused() -> None:
    keys = derive_keys(KEY)
    data = seal(keys.kp_to_sib, KP, 7, b"\x01\x82\x00\x01payload")
    for i in range(len(data)):
        for bit in range(8):
            bad = bytearray(data)
            bad[i] ^= 1 << bit
            with pytest.raises(SealError):
                open_sealed(keys.kp_to_sib, bytes(bad))


def test_wrong_key_is_refused() -> None:
    data = Sealer(KEY, KP, sib=False).seal(b"\x01\x82\x00\x01")
    with pytest.raises(SealError) as err:
        Sealer(bytes(32), KP, sib=True).open(data)
    assert err.value.status is Status.ACCESS_DENIED


def test_replay_is_refused_and_does_not_move_the_window() -> None:
    kp, sib = Sealer(KEY, KP, sib=False), Sealer(KEY, KP, sib=True)
    first = kp.seal(b"\x01\x82\x00\x01")
    assert sib.open(first) == b"\x01\x82\x00\x01"
    with pytest.raises(SealError, match="replayed"):
        sib.open(first)
    # A forged high counter (bad tag) does not move the window.
    forged = seal(bytes(32), KP, 1000, b"\x01\x82\x00\x02")
    with pytest.raises(SealError):
        sib.open(forged)
    assert sib.window.highest == 0
    assert sib.open(kp.seal(b"\x01\x82\x00\x02")) == b"\x01\x82\x00\x02"


def test_sealed_for_another_kp_id_is_refused() -> None:
    other = Sealer(KEY, bytes(16), sib=False).seal(b"\x01\x82\x00\x01")
    with pytest.raises(SealError, match="another KP"):
        Sealer(KEY, KP, sib=True).open(other)


def test_window_across_64() -> None:
    w = ReplayWindow()
    assert w.accept(100)
    assert w.accept(37)  # 63 below: inside the window
    assert not w.accept(36)  # 64 below: too old
    assert not w.accept(37) and not w.accept(100)
    assert w.accept(99) and w.accept(101)
    assert not w.accept(99)
    assert w.accept(101 + 64)  # jump: everything before forgotten and too old
    assert not w.accept(101) and w.accept(164)


@given(st.lists(st.integers(0, 300), max_size=200))
def test_window_accepts_each_counter_at_most_once(counters: list[int]) -> None:
    w, seen, highest = ReplayWindow(), set(), -1
    for c in counters:
        ok = w.accept(c)
        expected = c not in seen and (c > highest or highest - c < 64)
        assert ok == expected
        if ok:
            seen.add(c)
            highest = max(highest, c)


@given(st.binary(max_size=80))
def test_garbage_is_a_typed_error(data: bytes) -> None:
    with pytest.raises(SealError):
        Sealer(KEY, KP, sib=True).open(data)


def test_counter_exhaustion_is_an_error() -> None:
    s = Sealer(KEY, KP, sib=False, counter=0xFFFFFFFF)
    s.seal(b"\x01")
    with pytest.raises(SealError) as err:
        s.seal(b"\x01")
    assert err.value.status is Status.LIMIT_EXCEEDED


def test_parse_key() -> None:
    import base64
    assert parse_key(KEY.hex()) == KEY
    assert parse_key(base64.b64encode(KEY).decode()) == KEY
    for bad in ("", "zz" * 32, "00" * 31, base64.b64encode(bytes(16)).decode()):
        with pytest.raises(ValueError):
            parse_key(bad)
