"""Ctrl-C at any moment of a command's start, through the installed console scripts: the
command ends with a shell's status for SIGINT (130) or, once it handles the signal itself, its
own clean stop (0) — never a Python traceback."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
#: Seconds after the start at which Ctrl-C comes: while Python imports, while the command
#: starts, and once it runs.
MOMENTS = (0.05, 0.2, 0.4, 0.7, 1.0, 1.5, 3.0)

COMMANDS = {
    "ksp-sib": ["ksp-sib", "--memory", "--udp-port", "0", "--tcp-port", "0", "--coap-port", "-1",
                "--sepa-http-port", "-1", "--sepa-ws-port", "-1"],
    "ksp sub": ["ksp", "sub", "--sib", "udp://127.0.0.1:{udp}",
                "SELECT ?o WHERE { <http://example.org/s> <http://example.org/p> ?o }"],
}


#: The console scripts' own wrappers (what pip writes: one import, one call).
SCRIPTS = {command[0] for command in COMMANDS.values()}


@pytest.fixture(scope="module")
def sib():
    from sib.testing import SibProcess

    with SibProcess("--memory", "--udp-port", "0", "--tcp-port", "-1",
                    "--coap-port", "-1") as process:
        yield process


@pytest.mark.parametrize("name", ["ksp sub", "ksp-sib"])
def test_ctrl_c_at_any_moment_of_the_start_says_no_traceback(name, sib):
    command = [part.replace("{udp}", str(sib.ports["udp"])) for part in COMMANDS[name]]
    if not (BIN / command[0]).exists():
        pytest.skip(f"{command[0]} is not installed in this environment")
    for moment in MOMENTS:
        proc = subprocess.Popen([str(BIN / command[0]), *command[1:]], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        time.sleep(moment)
        os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: the whole process group
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
        if before_our_code(err) or (proc.returncode == -signal.SIGINT and not err):
            # The interpreter was still starting (a loaded machine): not ours to catch. With
            # nothing said and the signal's own death, Python had not yet installed its
            # handler (the signal's default action ended the process).
            continue
        assert "Traceback" not in err and "KeyboardInterrupt" not in err, (moment, err)
        assert proc.returncode in (0, 130), (moment, proc.returncode, err)


def before_our_code(err: str) -> bool:
    """Whether a KeyboardInterrupt came while Python itself started — its `site` import, or the
    console script's own first line, before any function of the project runs — where Python,
    not the command, reports it."""
    if "init_import_site" in err:  # "Fatal Python error": the site import (its .pth files)
        return "KeyboardInterrupt" in err
    frames = re.findall(r'File "([^"]+)"', err)
    return "KeyboardInterrupt" in err and bool(frames) and all(
        f.startswith("<frozen") or Path(f).name in SCRIPTS
        or ("/lib/python3" in f and "site-packages" not in f)
        for f in frames)


#: A start during which Python drops the KeyboardInterrupt of a Ctrl-C: the handler runs inside
#: a `__del__` (as inside importlib's weakref callbacks, seen on a loaded machine), where an
#: exception is "ignored"; then the command's own start.
DROPPED = """
import os, signal, sys

class Dropped:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)

def main():
    Dropped()
    print("dropped", file=sys.stderr, flush=True)
    from {module} import main as command
    return command({argv!r})
"""


@pytest.mark.parametrize("name,module", [("ksp-sib", "sib.cli"), ("ksp sub", "tools.cli"),
                                         ("ksp-ingest", "spark_ingest.cli")])
def test_a_ctrl_c_python_drops_during_the_start_still_stops_the_command(name, module, sib,
                                                                       tmp_path):
    if name == "ksp-ingest":
        pytest.importorskip("pyspark")
        command = ["ksp-ingest", "--mqtt", "mqtt://127.0.0.1:1", "--out", str(tmp_path / "out")]
    else:
        command = [part.replace("{udp}", str(sib.ports["udp"])) for part in COMMANDS[name]]
    (tmp_path / "dropped_start.py").write_text(DROPPED.format(module=module, argv=command[1:]))
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); from tools.commands import run; "
             "sys.exit(run('dropped_start:main', 'probe'))")
    proc = subprocess.Popen([sys.executable, "-c", probe, str(tmp_path)],
                            cwd=Path(__file__).resolve().parent.parent, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{name} still ran 60 s after a Ctrl-C of its start: {err[-2000:]}")
    # The Ctrl-C came and Python dropped it, as the probe meant; the command stopped anyway.
    assert "Exception ignored in" in err and "KeyboardInterrupt" in err, err
    assert "dropped" in err
    assert proc.returncode in (0, 130), (proc.returncode, err)
