"""Run firmware code on real MicroPython (WebAssembly build under Node) and on CPython.

`run_mpy` starts `run_mpy.mjs` with the firmware tree copied to /fw; `run_cpython` runs the
same script with CPython, the firmware directory and the CPython stand-ins (`cpython/`) on
sys.path. `vector_inputs` writes the golden vectors without their expected answers, which is
what the firmware runner gets to see.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIRMWARE = ROOT / "device_firmware"
HERE = Path(__file__).resolve().parent
VECTORS = ROOT / "tests" / "vectors"
NODE_MODULES = ROOT / "node_modules"
MPY_PACKAGE = NODE_MODULES / "@micropython" / "micropython-webassembly-pyscript"
CPYTHON_SHIMS = HERE / "cpython"
TIMEOUT = 900  # seconds; generous, the machine is shared and loaded


def node() -> str:
    path = shutil.which("node")
    if path is None or not MPY_PACKAGE.is_dir():
        raise RuntimeError("node and node_modules/@micropython/micropython-webassembly-pyscript "
                           "are needed: run scripts/test (its bootstrap runs `npm ci`)")
    return path


def run_mpy(script: Path, *args: str, copies: dict[str, Path] | None = None,
            fetch: dict[str, Path] | None = None, heap: int | None = None,
            timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    """Run `script` in MicroPython with the firmware at /fw (plus `copies`: MP dir -> host dir);
    `fetch` copies files the script wrote (MP path -> host path) back."""
    cmd = [node(), str(HERE / "run_mpy.mjs"), "--copy", f"{FIRMWARE}:/fw"]
    if heap:
        cmd += ["--heap", str(heap)]
    for target, host in (copies or {}).items():
        cmd += ["--copy", f"{host}:{target}"]
    for source, host in (fetch or {}).items():
        cmd += ["--fetch", f"{source}:{host}"]
    cmd += [str(script), *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def run_cpython(script: Path, *args: str, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(CPYTHON_SHIMS), str(FIRMWARE)]))
    return subprocess.run([sys.executable, str(script), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=env)


def vector_inputs(target: Path) -> None:
    """The vectors with the answers taken out: a KP→SIB vector loses `hex`, a SIB→KP vector
    `message`, `decoded` and `error` (an invalid one says `"invalid": true`)."""
    target.mkdir(parents=True, exist_ok=True)
    for path in sorted(VECTORS.glob("*.json")):
        v = json.loads(path.read_text(encoding="utf-8"))
        invalid = "error" in v
        for key in (("hex",) if v["direction"] == "kp_to_sib" else ()) + (
                ("message", "decoded", "max_size") if v["direction"] == "sib_to_kp" else ()) + (
                "error", "description"):
            v.pop(key, None)
        if invalid:
            v["invalid"] = True
        (target / path.name).write_text(json.dumps(v, ensure_ascii=False), encoding="utf-8")


def run_runner(inputs: Path, out: Path, micropython: bool) -> dict[str, tuple[dict, str | None]]:
    """The vectors' runner (runner.py) over the vector files in `inputs`, in MicroPython or
    CPython, writing `out`: its results, as `read_results` gives them."""
    if micropython:
        proc = run_mpy(HERE / "runner.py", "/fw", "/in", "/results.txt", copies={"/in": inputs},
                       fetch={"/results.txt": out})
    else:
        proc = run_cpython(HERE / "runner.py", str(FIRMWARE), str(inputs), str(out))
    assert proc.returncode == 0, proc.stderr
    return read_results(out)


def read_results(path: Path) -> dict[str, tuple[dict, str | None]]:
    """name -> (record, hex or None) from a runner output file."""
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        meta, _, hexed = line.partition("\t")
        rec = json.loads(meta)
        out[rec["name"]] = (rec, hexed or None)
    return out


def import_path() -> None:
    """Make the firmware importable in this (CPython) process: `kspfw`, and the stand-in
    `micropython` module."""
    for path in (str(CPYTHON_SHIMS), str(FIRMWARE), str(HERE)):
        if path not in sys.path:
            sys.path.insert(0, path)
