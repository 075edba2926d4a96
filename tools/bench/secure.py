"""Cost of sealed messages (docs/wire-format.md section 13): bytes per message and µs per seal
and per open of a 40-byte KSP message, by the firmware's `kspfw.secure` inside MicroPython's
WebAssembly build under Node and on CPython (same source), and by `ksp.secure` on CPython.

Run as ``python -m tools.bench.secure [--quick] [--markdown]``. The baseline, measured in the
same run, is the firmware's own code on CPython: the table gives MicroPython as a ratio to it.
"""
from __future__ import annotations

import json
import sys
import tempfile
import timeit
from pathlib import Path

from ksp.secure import OVERHEAD, Sealer, SealedAddr, SealerTable

from .report import bench_parser, command_line

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from firmware import harness  # noqa: E402

MODULE = "tools.bench.secure"
CHECKS = ROOT / "tests" / "firmware" / "secure_checks.py"


def firmware_cost(rounds: int) -> dict[str, dict]:
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "in").mkdir()
        (work / "in" / "cases.json").write_text(json.dumps(
            {"hmac": [], "vectors": [], "rounds": rounds}))
        for name in ("micropython", "cpython"):
            res = work / f"{name}.json"
            if name == "micropython":
                proc = harness.run_mpy(CHECKS, "/fw", "/in/cases.json", "/out.json",
                                       copies={"/in": work / "in"}, fetch={"/out.json": res})
            else:
                proc = harness.run_cpython(CHECKS, str(harness.FIRMWARE),
                                           str(work / "in" / "cases.json"), str(res))
            if proc.returncode:
                raise SystemExit(proc.stderr)
            out[name] = json.loads(res.read_text())["cost"]
    return out


def reference_cost(number: int) -> dict[str, float]:
    kp, sib = Sealer(bytes(32), bytes(16), sib=False), Sealer(bytes(32), bytes(16), sib=True)
    msg = bytes(40)
    sealed = [kp.seal(msg) for _ in range(number)]
    it = iter(sealed)
    t_open = timeit.timeit(lambda: sib.open(next(it)), number=number) / number * 1e6
    t_seal = timeit.timeit(lambda: kp.seal(msg), number=number) / number * 1e6
    return {"seal_us": t_seal, "open_us": t_open}


def sib_table_cost(number: int) -> dict[str, dict[str, float]]:
    """The SIB's `SealerTable` (what its transports call per message): in memory, and with the
    journal keeping windows and counters (a SIB with a data directory: one sqlite write per
    message opened, one per 1,024 sealed)."""
    from sib.journal import Journal

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, state in (("memory", None), ("journal", Journal(str(Path(tmp) / "j.sqlite3")))):
            table = SealerTable(lambda _: bytes(32), lambda: 1.8e9, state=state)
            kp = Sealer(bytes(32), bytes(16), sib=False)
            it = iter([kp.seal(bytes(40)) for _ in range(number)])
            to = SealedAddr(bytes(16), ("h", 1))
            t_open = timeit.timeit(lambda: table.open(next(it), ("h", 1)), number=number)
            t_seal = timeit.timeit(lambda: table.seal(bytes(40), to), number=number)
            out[name] = {"seal_us": t_seal / number * 1e6, "open_us": t_open / number * 1e6}
            if state is not None:
                state.close()
    return out


def main(argv: list[str] | None = None, prog: str | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = bench_parser(MODULE, __doc__, prog, "fewer rounds").parse_args(argv)
    fw = firmware_cost(500 if args.quick else 3000)
    ref = reference_cost(2000 if args.quick else 20000)
    table = sib_table_cost(2000 if args.quick else 20000)
    base = fw["cpython"]
    rows = [("firmware `kspfw.secure`, MicroPython (WASM)", fw["micropython"]),
            ("firmware `kspfw.secure`, CPython (baseline)", base),
            ("`ksp.secure`, CPython", ref),
            ("SIB `SealerTable`, in memory (`--memory`)", table["memory"]),
            ("SIB `SealerTable`, windows in the journal (`--data-dir`)", table["journal"])]
    print(f"Envelope overhead: {OVERHEAD} bytes per message (1 magic + 16 KP ID + 4 counter"
          " + 8 tag).\n")
    print("| implementation | µs per seal | µs per open | seal ÷ baseline |")
    print("|---|---|---|---|")
    for name, c in rows:
        print(f"| {name} | {c['seal_us']:.1f} | {c['open_us']:.1f} | "
              f"{c['seal_us'] / base['seal_us']:.1f}× |")
    print(f"\n`{command_line(MODULE, prog, argv)}`")


if __name__ == "__main__":
    main()
