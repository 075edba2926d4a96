"""The firmware codec (device_firmware/kspfw) against every golden vector, on real MicroPython.

The runner (tests/firmware/runner.py) is run once per session inside MicroPython's WebAssembly
build under Node, and once with CPython; it sees the vectors without their answers. Per vector:
a message the firmware sends is encoded byte for byte as `hex`; a message it receives decodes to
the vector's description (and to what the Python codec decodes); an invalid one is rejected with
the vector's status. Vectors outside the firmware's scope are listed in tests/firmware/scope.py
with the reason; a vector neither handled nor listed fails.
"""
from __future__ import annotations

import json

import pytest

from firmware import harness
from firmware.scope import OUT_OF_SCOPE
from ksp import Transport, decode_sib_message
from ksp.codes import Tx
from ksp.reference.jsonmodel import from_json, to_json

# slow: the firmware under MicroPython (WebAssembly, in Node)
pytestmark = pytest.mark.slow

VECTORS = {p.stem: json.loads(p.read_text(encoding="utf-8"))
           for p in sorted(harness.VECTORS.glob("*.json"))}
NAMES = sorted(VECTORS)


@pytest.fixture(scope="session")
def vector_inputs(tmp_path_factory):
    path = tmp_path_factory.mktemp("fw-vectors")
    harness.vector_inputs(path)
    return path


@pytest.fixture(scope="session")
def micropython_results(vector_inputs, tmp_path_factory):
    out = tmp_path_factory.mktemp("fw-mpy") / "results.txt"
    proc = harness.run_mpy(harness.HERE / "runner.py", "/fw", "/in", "/results.txt",
                           copies={"/in": vector_inputs}, fetch={"/results.txt": out})
    assert proc.returncode == 0, proc.stderr
    return harness.read_results(out)


@pytest.fixture(scope="session")
def cpython_results(vector_inputs, tmp_path_factory):
    out = tmp_path_factory.mktemp("fw-cpy") / "results.txt"
    proc = harness.run_cpython(harness.HERE / "runner.py", str(harness.FIRMWARE),
                               str(vector_inputs), str(out))
    assert proc.returncode == 0, proc.stderr
    return harness.read_results(out)


@pytest.fixture(params=["micropython", "cpython"])
def results(request):
    return request.getfixturevalue(f"{request.param}_results")


def test_scope_list_names_real_vectors():
    assert set(OUT_OF_SCOPE) <= set(VECTORS)
    assert len(OUT_OF_SCOPE) < len(VECTORS) / 2


@pytest.mark.parametrize("name", NAMES)
def test_vector(name, results):
    v = VECTORS[name]
    assert name in results, "the runner did not report this vector"
    rec, hexed = results[name]
    if name in OUT_OF_SCOPE:
        assert rec["kind"] == "unsupported", f"listed as out of scope but handled: {rec}"
        return
    assert rec["kind"] != "unsupported", f"neither handled nor listed in scope.py: {rec['why']}"
    assert rec["kind"] != "crash", rec["error"]
    if "error" in v:
        assert rec["kind"] == "reject"
        assert rec.get("status") == v["error"]["status"], rec
    elif v["direction"] == "kp_to_sib":
        assert rec["kind"] == "encode"
        assert hexed == v["hex"]
    else:
        assert rec["kind"] == "decode"
        want = v.get("decoded", v["message"])
        assert rec["json"] == to_json(from_json(want)) == want
        python = decode_sib_message(bytes.fromhex(v["hex"]), Transport(v["transport"]),
                                    Tx[v["answers"]])
        assert rec["json"] == to_json(python)


def test_micropython_is_really_micropython(tmp_path):
    script = tmp_path / "which.py"
    script.write_text("import sys\nprint(sys.implementation.name, sys.platform)\n")
    proc = harness.run_mpy(script)
    assert proc.stdout.split() == ["micropython", "webassembly"], proc.stderr
