"""Device firmware benchmark: heap, bundle size, codec speed on MicroPython beside CPython.

Run as ``python -m tools.bench.firmware [--quick] [--markdown]`` or ``ksp bench firmware``.
Measured in one run (the ratios never mix runs):

- heap (``gc.mem_alloc()``) of client + codec right after import, and while subscribed (a
  persistent SELECT with its RES and one IND held, plus a 1 KiB receive buffer; and the same
  subscription made through the ECHO retry of an unvalidated address), inside
  MicroPython's WebAssembly build under Node, importing the compiled ``.mpy`` bundle as a board
  does (32-bit object model, like ESP32 and RP2040). Two figures: the live heap (collected
  between calls from JavaScript, as a board's gc.collect() leaves it: the target's figure)
  and what was allocated since the import began, garbage included (this build's gc.collect()
  inside one call collects nothing);
- per board role (the example sensor, the same in the MQTT mode, the example actuator): the
  ``.mpy`` bundle ``ksp flash --config`` builds for it, and its live heap after import and
  while running (tools/bench/firmware_roles.py);
- size of the ``.mpy`` bundle ``ksp flash`` builds without a config, per board, and of its
  client + codec core;
- µs per message for the same messages encoded/decoded by the firmware codec on MicroPython
  (WASM) and on CPython (same source), and their ratio;
- agreement with the golden vectors: the firmware runner inside MicroPython against every
  vector in its scope (tests/firmware/scope.py lists the rest).

Targets: heap after import < 16 KiB, heap while subscribed < 20 KiB (live), bundle < 24 KiB,
100 % vector agreement.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from ksp import (
    IRI, AskResult, Literal, Response, SelectResult, Status, Transport, Tx, decode_sib_message,
    encode,
)
from ksp.reference.jsonmodel import from_json, to_json
from .. import flash

from .report import bench_parser, command_line, markdown_table

ROOT = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).with_name("firmware_probe.py")
ROLES = Path(__file__).with_name("firmware_roles.py")
SIMBOARD = ROOT / "tests" / "firmware"
RUN_MPY = ROOT / "tests" / "firmware" / "run_mpy.mjs"
RUNNER = ROOT / "tests" / "firmware" / "runner.py"
SHIMS = ROOT / "tests" / "firmware" / "cpython"
CORE = ("kspfw/__init__.mpy", "kspfw/codec.mpy", "kspfw/client.mpy", "kspfw/floats.mpy",
        "kspfw/options.mpy", "kspfw/results.mpy")
HEAP_TARGET, SUBSCRIBED_TARGET, BUNDLE_TARGET = 16 * 1024, 20 * 1024, 24 * 1024
GH = "http://example.org/greenhouse#"
XSD_FLOAT = "http://www.w3.org/2001/XMLSchema#float"


def inputs() -> dict[str, str]:
    """Messages a board receives, encoded by the reference codec. The SELECT answers carry
    TID 1: the probe's client (random start 0) gives its subscription that TID, in epoch 1 (a
    board's count starts at a random epoch, 1 here), which a SIB's RES names (wire format
    15.6)."""
    rows = tuple((IRI(GH + f"sensor{i}"), Literal(v, XSD_FLOAT))
                 for i, v in ((1, "21.5"), (2, "19.25"), (3, "23.0")))
    select = SelectResult(2, rows, 3, (GH,))
    return {"ind_select": encode(Response(1, Status.OK, select, True, 17)).hex(),
            "res_select": encode(Response(1, Status.OK, select, epoch=1)).hex(),
            # the same subscription through the ECHO retry: it runs under TID 2
            "res_echo_required": encode(Response(1, Status.ECHO_REQUIRED, bytes(10),
                                                 epoch=1)).hex(),
            "ind_select_2": encode(Response(2, Status.OK, select, True, 17)).hex(),
            "res_select_2": encode(Response(2, Status.OK, select, epoch=1)).hex(),
            "res_ask": encode(Response(9, Status.OK, AskResult(True))).hex(),
            "res_ok": encode(Response(7)).hex()}


def node_cmd(copies: dict[str, Path], script: Path, *args: str,
             step: str | None = None) -> list[str]:
    cmd = ["node", str(RUN_MPY)] + (["--step", step] if step else [])
    for target, host in copies.items():
        cmd += ["--copy", f"{host}:{target}"]
    return cmd + [str(script), *args]


def run_probe(bundle: Path, work: Path, rounds: int, target_ms: int) -> tuple[dict, dict]:
    (work / "in").mkdir()
    (work / "in" / "inputs.json").write_text(json.dumps(inputs()))
    copies = {"/b": bundle, "/in": work / "in"}
    straight = subprocess.run(node_cmd(copies, PROBE, "/b", "/in/inputs.json", "0", "0",
                                       "--straight"),
                              cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if straight.returncode:
        raise SystemExit(f"MicroPython probe failed:\n{straight.stderr}")
    mpy = subprocess.run(node_cmd(copies, PROBE, "/b", "/in/inputs.json", str(rounds),
                                  str(target_ms), step="step"),
                         cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if mpy.returncode:
        raise SystemExit(f"MicroPython probe failed:\n{mpy.stderr}")
    env = dict(os.environ, PYTHONPATH=str(SHIMS))
    cpy = subprocess.run([sys.executable, str(PROBE), str(flash.FIRMWARE),
                          str(work / "in" / "inputs.json"), str(rounds), str(target_ms)],
                         cwd=ROOT, capture_output=True, text=True, timeout=1800, env=env)
    if cpy.returncode:
        raise SystemExit(f"CPython probe failed:\n{cpy.stderr}")
    live, allocated = json.loads(mpy.stdout), json.loads(straight.stdout)
    live["allocated_after_import"] = allocated["heap_after_import"]
    live["allocated_subscribed"] = allocated["heap_subscribed"]
    return live, json.loads(cpy.stdout)


def role_configs() -> dict[str, dict]:
    """The board roles measured: the example configurations (config.example.json in KSP and in
    MQTT mode, config.actuator.example.json), with a 1 KiB MAX RESPONSE SIZE where the
    configuration would take it from the free heap, so the roles compare."""
    sensor = json.loads((flash.FIRMWARE / "config.example.json").read_text())
    actuator = json.loads((flash.FIRMWARE / "config.actuator.example.json").read_text())
    return {"sensor (KSP)": sensor, "sensor (MQTT)": dict(sensor, mqtt={"host": "10.0.0.3"}),
            "actuator (ASK)": actuator}


def role_inputs() -> dict[str, str]:
    """The Data field of a SELECT answer a role receives (the sensor's period: one integer)."""
    integer = "http://www.w3.org/2001/XMLSchema#integer"
    res = encode(Response(0, Status.OK, SelectResult(1, ((Literal("30", integer),),), 1, ())))
    return {"select_body": res[4:].hex()}


def run_roles(work: Path, board: str = "esp32") -> dict[str, dict]:
    """Per role: the bundle `ksp flash --config` builds and its live heap in MicroPython."""
    sys.path.insert(0, str(flash.FIRMWARE))
    from kspfw import config

    inp = work / "roles"
    inp.mkdir()
    (inp / "inputs.json").write_text(json.dumps(role_inputs()))
    (inp / "socket.py").write_text("# the board's built-in socket; umqtt.simple imports it\n")
    out = {}
    for i, (name, raw) in enumerate(role_configs().items()):
        if raw.get("max_response_size", "auto") == "auto":
            raw = dict(raw, max_response_size=1024)
        (inp / f"{i}.json").write_text(json.dumps(raw))
        bundle = work / f"role-{i}"
        files = flash.build(bundle, board, cfg=config.check(raw, 64 * 1024))
        proc = subprocess.run(node_cmd({"/b": bundle, "/t": SIMBOARD, "/in": inp}, ROLES, "/b",
                                       "/t", f"/in/{i}.json", "/in/inputs.json", step="step"),
                              cwd=ROOT, capture_output=True, text=True, timeout=600)
        if proc.returncode:
            raise SystemExit(f"role {name}: MicroPython failed:\n{proc.stderr}")
        out[name] = dict(json.loads(proc.stdout.splitlines()[-1]),
                         bundle=sum(f.stat().st_size for f in files), modules=len(files))
    return out


def vector_agreement(work: Path) -> tuple[int, int]:
    """(vectors in the firmware's scope that agree, vectors in its scope), in MicroPython."""
    sys.path.insert(0, str(ROOT / "tests"))
    from firmware import harness
    from firmware.scope import OUT_OF_SCOPE

    harness.vector_inputs(work / "vin")
    cmd = node_cmd({"/fw": flash.FIRMWARE, "/in": work / "vin"}, RUNNER, "/fw", "/in", "/r.txt")
    cmd[2:2] = ["--fetch", f"/r.txt:{work / 'r.txt'}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if proc.returncode:
        raise SystemExit(f"vector runner failed:\n{proc.stderr}")
    results = harness.read_results(work / "r.txt")
    agree = total = 0
    for path in sorted(harness.VECTORS.glob("*.json")):
        if path.stem in OUT_OF_SCOPE:
            continue
        total += 1
        v = json.loads(path.read_text(encoding="utf-8"))
        rec, hexed = results.get(path.stem, ({"kind": "missing"}, None))
        if "error" in v:
            agree += rec["kind"] == "reject" and rec.get("status") == v["error"]["status"]
        elif v["direction"] == "kp_to_sib":
            agree += rec["kind"] == "encode" and hexed == v["hex"]
        else:
            python = to_json(decode_sib_message(bytes.fromhex(v["hex"]), Transport(v["transport"]),
                                                Tx[v["answers"]]))
            want = v.get("decoded", v["message"])
            agree += rec["kind"] == "decode" and rec["json"] == want == python == to_json(
                from_json(want))
    return agree, total


def run(quick: bool) -> dict:
    rounds, target_ms = (3, 50) if quick else (7, 200)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        sizes = {}
        for board in flash.BOARDS:
            files = flash.build(work / f"build-{board}", board)
            sizes[board] = sum(f.stat().st_size for f in files)
        core = sum((work / "build-esp32" / name).stat().st_size for name in CORE)
        mpy, cpy = run_probe(work / "build-esp32", work, rounds, target_ms)
        roles = run_roles(work)
        agree, total = vector_agreement(work)
    return {"sizes": sizes, "core": core, "mpy": mpy, "cpy": cpy, "agree": agree,
            "total": total, "rounds": rounds, "target_ms": target_ms, "roles": roles}


def _kib(n: int) -> str:
    return f"{n:,} B ({n / 1024:.1f} KiB)"


def rows(report: dict) -> tuple[list[list[str]], list[list[str]]]:
    mpy, cpy = report["mpy"], report["cpy"]
    memory = [
        ["heap after import (client + codec, .mpy), live", _kib(mpy["heap_after_import"]),
         "< 16 KiB", "yes" if mpy["heap_after_import"] < HEAP_TARGET else "**no**"],
        ["heap while subscribed (+ 1 KiB buffer, lazily loaded float and result readers, "
         "the newest IND's result held), live", _kib(mpy["heap_subscribed"]),
         "< 20 KiB", "yes" if mpy["heap_subscribed"] < SUBSCRIBED_TARGET else "**no**"],
        ["the same, allocated since the import began (garbage included)",
         f"{_kib(mpy['allocated_after_import'])}; {_kib(mpy['allocated_subscribed'])}", "", ""],
        ["heap while subscribed through the ECHO retry (ECHO REQUIRED first, its first TID "
         "watched; the same buffer, readers and IND), live",
         _kib(mpy["heap_subscribed_echo"]), "< 20 KiB",
         "yes" if mpy["heap_subscribed_echo"] < SUBSCRIBED_TARGET else "**no**"],
    ]
    for board, size in report["sizes"].items():
        memory.append([f".mpy bundle, {board}, every module (`ksp flash --board {board}`)",
                       _kib(size), "", ""])
    for name, r in report["roles"].items():
        memory.append([f"{name}: `ksp flash --config` bundle ({r['modules']} modules); live "
                       "heap after import; while running", f"{_kib(r['bundle'])}; "
                       f"{_kib(r['heap_after_import'])}; {_kib(r['heap_running'])}",
                       "bundle < 24 KiB", "yes" if r["bundle"] < BUNDLE_TARGET else "**no**"])
    memory.append([".mpy of client + codec (codec, client, floats, options, results)",
                   _kib(report["core"]), "", ""])
    pct = 100 * report["agree"] / report["total"]
    memory.append(["golden vectors agreeing (in the firmware's scope)",
                   f"{report['agree']}/{report['total']} ({pct:.0f} %)", "100 %",
                   "yes" if report["agree"] == report["total"] else "**no**"])
    speed = []
    for (name, m_times), (_, c_times) in zip(mpy["ops"], cpy["ops"]):
        m, c = statistics.median(m_times), statistics.median(c_times)
        speed.append([name, f"{m:.1f}", f"{c:.2f}", f"{m / c:.1f}×"])
    return memory, speed


def render(report: dict, command: str, markdown: bool) -> str:
    memory, speed = rows(report)
    m_head = ["firmware (MicroPython 1.29, WebAssembly build)", "measured", "target", "met"]
    s_head = ["message", "MicroPython µs", "CPython µs", "MicroPython / CPython"]
    method = (f"µs: median of {report['rounds']} interleaved rounds of ~{report['target_ms']} ms "
              "per message, same messages and same firmware source on both (CPython with the "
              "`micropython.const` stand-in); heap: gc.mem_alloc(), live: collected between "
              "calls from JavaScript (run_mpy.mjs --step); roles: MAX RESPONSE SIZE 1 KiB, "
              "board.py and the drivers not imported (the simulated board stands in)")
    if not markdown:
        strip = lambda rs: [[c.replace("**", "").replace("`", "") for c in r] for r in rs]  # noqa
        return "\n".join(["\t".join(m_head), *("\t".join(r) for r in strip(memory)), "",
                          "\t".join(s_head), *("\t".join(r) for r in strip(speed)), "",
                          method, f"command: {command}"])
    return "\n".join([markdown_table(m_head, memory), "", markdown_table(s_head, speed), "",
                      f"Method: {method}.", "", f"Command: `{command}`  ",
                      f"CPython: {sys.version.split()[0]}"])


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = bench_parser("tools.bench.firmware", __doc__, prog,
                        "3 rounds of ~50 ms instead of 7 of ~200 ms").parse_args(argv)
    command = command_line("tools.bench.firmware", prog, argv)
    print(render(run(args.quick), command, args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
