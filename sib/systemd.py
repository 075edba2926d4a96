"""`ksp-sib systemd-unit`: the systemd unit that runs this installation's `ksp-sib` on a gateway
host. The unit itself is package data (`sib/ksp-sib.service`), so the one a user reads in the
repository is the one the command prints; only its paths are filled in, since a unit must name
the program by its absolute path and that depends on where the project was installed."""
from __future__ import annotations

import argparse
import shutil
import sys
from importlib.resources import files
from pathlib import Path

#: The paths as written in the shipped unit, replaced by the command's.
PROGRAM = "/opt/ksp-gateway/bin/ksp-sib"
CONFIG = "/etc/ksp-sib/sib.toml"
DATA_DIR = "/var/lib/ksp-sib"


#: Directories the unit hides from the service, and the setting that hides them.
HIDDEN = (("/home", "ProtectHome=yes"), ("/root", "ProtectHome=yes"),
          ("/run/user", "ProtectHome=yes"), ("/tmp", "PrivateTmp=yes"),
          ("/var/tmp", "PrivateTmp=yes"))


def hidden(paths: dict[str, str]) -> list[str]:
    """A warning for each of `paths` (by its flag) that the service could not reach: under a
    directory the unit hides (a virtual environment in a home directory, say)."""
    said = []
    for flag, path in paths.items():
        for where in dict.fromkeys((Path(path), Path(path).resolve())):
            top = next(((d, why) for d, why in HIDDEN
                        if where == Path(d) or Path(d) in where.parents), None)
            if top is not None:
                said.append(f"{flag} {path} is under {top[0]}, which the unit hides from the "
                            f"service ({top[1]}): install ksp-gateway, its configuration and "
                            "its data outside home directories and the temporary directories "
                            "(e.g. /opt/ksp-gateway), or give another path")
                break
    return said


def shipped_unit() -> str:
    return (files("sib") / "ksp-sib.service").read_text(encoding="utf-8")


def this_program() -> str:
    """This installation's `ksp-sib`: beside the interpreter (a virtual environment's bin/),
    else on PATH."""
    beside = Path(sys.executable).parent / "ksp-sib"
    if beside.is_file():
        return str(beside.absolute())
    found = shutil.which("ksp-sib")
    if found is None:
        raise FileNotFoundError("no ksp-sib program beside this Python or on PATH; give it "
                                "with --program")
    return str(Path(found).absolute())


def unit(program: str, config: str = CONFIG, data_dir: str = DATA_DIR) -> str:
    """The shipped unit with its ExecStart naming `program`, `config` and `data_dir`. The data
    directory stays /var/lib/ksp-sib unless given: systemd creates that one (StateDirectory)."""
    for name, path in (("--program", program), ("--config", config), ("--data-dir", data_dir)):
        if not Path(path).is_absolute() or any(c.isspace() for c in path):
            raise ValueError(f"{name} {path!r}: a unit needs an absolute path without spaces")
    text = shipped_unit()
    exec_start = f"ExecStart={PROGRAM} --config {CONFIG} --data-dir {DATA_DIR}"
    assert exec_start in text, "the shipped unit's ExecStart changed: update sib/systemd.py"
    return text.replace(exec_start,
                        f"ExecStart={program} --config {config} --data-dir {data_dir}")


def systemd_unit_command(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="ksp-sib systemd-unit", description=(
        "Print a systemd unit that runs this installation's ksp-sib (start on boot, restart "
        "on failure, `systemctl reload` = SIGHUP). Save it as "
        "/etc/systemd/system/ksp-sib.service; its comments give the remaining steps."))
    p.add_argument("--config", default=CONFIG, metavar="FILE",
                   help=f"the configuration file the service reads (default {CONFIG})")
    p.add_argument("--data-dir", default=DATA_DIR, metavar="DIR",
                   help=f"the store's directory (default {DATA_DIR}, made by systemd)")
    p.add_argument("--program", metavar="PATH",
                   help="the ksp-sib to run (default: this installation's)")
    args = p.parse_args(argv)
    try:
        program = args.program or this_program()
        text = unit(program, args.config, args.data_dir)
    except (FileNotFoundError, ValueError) as exc:
        print(f"ksp-sib systemd-unit: {exc}", file=sys.stderr)
        return 2
    for warning in hidden({"--program": program, "--config": args.config,
                           "--data-dir": args.data_dir}):
        print(f"ksp-sib systemd-unit: warning: {warning}", file=sys.stderr)
    sys.stdout.write(text)
    return 0
