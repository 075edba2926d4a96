"""The firmware's sealing (device_firmware/kspfw/secure.py) on real MicroPython (WebAssembly
build under Node) and on CPython: its HMAC equals Python's `hmac`, it seals the KP→SIB golden
vector byte for byte, opens the SIB→KP ones, and drops a replay, a flipped byte, a wrong key."""
from __future__ import annotations

import hashlib
import hmac
import json
import random

import pytest

from firmware import harness

from test_secure import VECTOR_DIR

# slow: the firmware under MicroPython (WebAssembly, in Node)
pytestmark = pytest.mark.slow

VECTORS = [json.loads(p.read_text()) for p in sorted(VECTOR_DIR.glob("*.json"))]
_rng = random.Random(17)
HMAC_CASES = [(bytes(32).hex(), b"".hex()), (bytes(range(32)).hex(), b"ksp-seal kp->sib".hex())] + [
    (_rng.randbytes(32).hex(), _rng.randbytes(n).hex()) for n in (1, 55, 56, 63, 64, 65, 200)]


@pytest.fixture(scope="module", params=["micropython", "cpython"])
def results(request, tmp_path_factory):
    work = tmp_path_factory.mktemp(f"fw-secure-{request.param}")
    (work / "in").mkdir()
    (work / "in" / "cases.json").write_text(json.dumps(
        {"hmac": HMAC_CASES, "vectors": VECTORS, "rounds": 200}))
    out = work / "out.json"
    if request.param == "micropython":
        proc = harness.run_mpy(harness.HERE / "secure_checks.py", "/fw", "/in/cases.json",
                               "/out.json", copies={"/in": work / "in"},
                               fetch={"/out.json": out})
    else:
        proc = harness.run_cpython(harness.HERE / "secure_checks.py", str(harness.FIRMWARE),
                                   str(work / "in" / "cases.json"), str(out))
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text())


def test_hmac_equals_pythons(results):
    assert results["hmac"] == [hmac.new(bytes.fromhex(k), bytes.fromhex(m), hashlib.sha256)
                               .hexdigest() for k, m in HMAC_CASES]


@pytest.mark.parametrize("v", VECTORS, ids=lambda v: v["name"])
def test_sealed_vectors(results, v):
    r = results["vectors"][v["name"]]
    if v["direction"] == "kp_to_sib":
        assert r == {"sealed": v["hex"]}
    else:
        assert r == {"opened": v["inner_hex"], "replay": True, "tampered": True,
                     "wrong_key": True}


def test_every_sealed_message_opens_once(results):
    assert results["cost"]["opened"] == results["cost"]["n"]
