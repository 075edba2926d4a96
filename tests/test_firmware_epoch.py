"""The firmware codec (device_firmware/kspfw/codec.py) encodes the EPOCH option and decodes the
NUMBER BEHIND RES and the RES epoch (wire format 15) as the reference codec does, inside real
MicroPython (WebAssembly build under Node) and on CPython, through the vectors' runner
(tests/firmware/runner.py). The golden vectors hold the canonical bytes; these cases add the
edges: the u32 bounds, TERMINATE, an IND 0x10, Data of the wrong length, the RES epoch's bit
where it does not belong."""
from __future__ import annotations

import json

import pytest

from firmware import harness
from ksp import (
    TCP, UDP, AskResult, Behind, Credentials, DecodeError, EncodeError, Options, Request, Response,
    Status, Tx, decode_sib_message, encode,
)
from ksp.reference.jsonmodel import to_json

# slow: the firmware under MicroPython (WebAssembly, in Node)
pytestmark = pytest.mark.slow

CREDS = Credentials(bytes(range(16)), "pw")
#: name -> (request, transport): the firmware encodes what the reference codec does, or refuses.
REQUESTS = {
    "reset_epoch_1": (Request(Tx.RESET, 0x1234, options=Options(prefixes=(), epoch=1)), UDP),
    "reset_epoch_u32_max_creds_tcp": (Request(Tx.RESET, 7, options=Options(
        prefixes=(), credentials=CREDS, epoch=0xFFFFFFFF)), TCP),
    "ask_epoch_creds": (Request(Tx.ASK, 8, where=(), optional=(), options=Options(
        prefixes=(), credentials=CREDS, epoch=0x7FFFFFFF)), UDP),
    "reset_epoch_2_32": (Request(Tx.RESET, 7, options=Options(prefixes=(), epoch=1 << 32)), UDP),
    "terminate_epoch": (Request(Tx.TERMINATE, 7, options=Options(prefixes=(), epoch=1)), UDP),
}
_BEHIND = encode(Response(9, Status.NUMBER_BEHIND, Behind(3, 0xFFFFFFFF)))
_IND = bytes.fromhex("01900900 0200")  # an IND with status 0x10: a RES's status only (3.2)
#: name -> (bytes, answers, transport)
ANSWERS = {
    "behind_insert_data": (_BEHIND, Tx.INSERT_DATA, UDP),
    "behind_select": (_BEHIND, Tx.SELECT, UDP),  # whatever the request: no SELECT result
    "behind_tcp": (encode(Response(9, Status.NUMBER_BEHIND, Behind(0, 1)), TCP), Tx.RESET, TCP),
    "ind_behind": (_IND, Tx.SELECT_PERSISTENT, UDP),  # refused, with or without a Data field
    "behind_7_bytes": (_BEHIND[:-1], Tx.RESET, UDP),
    "behind_9_bytes": (_BEHIND + b"\x00", Tx.RESET, UDP),
    "behind_no_data": (_BEHIND[:4], Tx.RESET, UDP),
    "ind_behind_with_data": (_IND + b"\x00", Tx.SELECT_PERSISTENT, UDP),
    "res_epoch_u32_max": (encode(Response(9, epoch=0xFFFFFFFF)), Tx.RESET, UDP),
    "res_epoch_ask": (encode(Response(9, result=AskResult(False), epoch=5)), Tx.ASK, UDP),
    "res_epoch_error": (encode(Response(9, Status.ACCESS_DENIED, epoch=5)), Tx.SELECT, UDP),
    "res_epoch_0": (bytes.fromhex("01400900 00000000"), Tx.RESET, UDP),
    "res_epoch_2_bytes": (bytes.fromhex("01400900 0100"), Tx.RESET, UDP),
    "res_epoch_tcp": (bytes.fromhex("014009000c000000 01000000"), Tx.RESET, TCP),
    "ind_epoch": (bytes.fromhex("01c00900 0200 01000000 01"), Tx.ASK_PERSISTENT, UDP),
    "behind_epoch": (bytes.fromhex("01500900 01000000") + _BEHIND[4:], Tx.RESET, UDP),
}


def _reference_encoding(msg, transport) -> str | None:
    try:
        return encode(msg, transport).hex()
    except EncodeError:
        return None


def _reference_decoding(data, answers, transport):
    try:
        return to_json(decode_sib_message(data, transport, answers))
    except DecodeError as exc:
        return int(exc.status)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    path = tmp_path_factory.mktemp("fw-epoch")
    for name, (msg, transport) in REQUESTS.items():
        (path / f"{name}.json").write_text(json.dumps(
            {"name": name, "transport": transport.value, "direction": "kp_to_sib",
             "message": to_json(msg)}))
    for name, (data, answers, transport) in ANSWERS.items():
        v = {"name": name, "transport": transport.value, "direction": "sib_to_kp",
             "hex": data.hex(), "answers": answers.name}
        if isinstance(_reference_decoding(data, answers, transport), int):
            v["invalid"] = True
        (path / f"{name}.json").write_text(json.dumps(v))
    return path


@pytest.fixture(scope="module", params=["micropython", "cpython"])
def results(request, inputs, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"fw-epoch-{request.param}") / "results.txt"
    return harness.run_runner(inputs, out, request.param == "micropython")


@pytest.mark.parametrize("name", REQUESTS)
def test_epoch_option_encodes_as_the_reference_codec(name, results):
    rec, hexed = results[name]
    want = _reference_encoding(*REQUESTS[name])
    if want is None:  # out of 1 … 2^32 - 1, or on TERMINATE: refused by both
        assert rec["kind"] == "crash" and rec["error"].startswith("ValueError"), rec
    else:
        assert rec["kind"] == "encode" and hexed == want


@pytest.mark.parametrize("name", ANSWERS)
def test_number_behind_decodes_as_the_reference_codec(name, results):
    rec, _ = results[name]
    want = _reference_decoding(*ANSWERS[name])
    if isinstance(want, int):
        assert rec == {"name": name, "kind": "reject", "status": want}
    else:
        assert rec["kind"] == "decode" and rec["json"] == want


def test_the_cases_cover_both_outcomes():
    assert to_json(decode_sib_message(_BEHIND, UDP, Tx.SELECT))["result"] == {
        "type": "behind", "epoch": 3, "next_epoch": 0xFFFFFFFF}
    assert {_reference_encoding(*r) is None for r in REQUESTS.values()} == {True, False}
    assert {isinstance(_reference_decoding(*a), int) for a in ANSWERS.values()} == {True, False}
