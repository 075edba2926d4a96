"""Instructions per request (`ksp bench request --instructions`): the 1-row SELECT of
`tools.bench.request` counted in user-space instructions by valgrind's callgrind, in the
``ksp-sib --memory`` process and in the bare echo's, so that the SIB's cost can be compared
with the echo's on a loaded host (an instruction count does not depend on what else runs; a
time does). Each server runs under callgrind with its counting off; the client (this
process, not counted) loads the store, sends `warm` requests, turns counting on
(``callgrind_control -i on``), sends `count` requests one at a time, turns it off and has the
counts written. Kernel time (the sockets' system calls, the wake-ups) is not counted: the
round-trip ratio of `ksp bench request` stays the figure the target bounds."""
from __future__ import annotations

import asyncio
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

from . import request as rq

_TOTAL = re.compile(r"^(?:summary|totals):\s+(\d+)", re.M)


def available() -> bool:
    """Whether valgrind and callgrind_control are on PATH."""
    return shutil.which("valgrind") is not None and shutil.which("callgrind_control") is not None


def _valgrind(out: str) -> list[str]:
    return ["valgrind", "--tool=callgrind", "--instr-atstart=no",
            f"--callgrind-out-file={out}"]


def _control(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _counted(out: str) -> int:
    """The instructions of the dumps written to `out`.* (the part counted; the rest is 0)."""
    total = 0
    for name in glob.glob(out + ".*"):
        with open(name, encoding="utf-8", errors="replace") as f:
            total = max([total, *map(int, _TOTAL.findall(f.read()))])
    return total


async def _counting(pid: int, out: str, once, count: int, warm: int) -> float:
    """Instructions per call of `once` in process `pid` (`count` calls after `warm`)."""
    for _ in range(warm):
        await once()
    _control(pid, "-z")
    _control(pid, "-i", "on")
    for _ in range(count):
        await once()
    _control(pid, "-i", "off")
    _control(pid, "-d")
    for _ in range(200):  # the dump is written by the process, a moment later
        if _counted(out):
            break
        await asyncio.sleep(0.05)
    return _counted(out) / count


_ECHO = ("import sys\nfrom tools.bench.request import _echo_process, RESPONSE_SIZE\n"
         "class Pipe:\n"
         "    def send(self, port): print(port, flush=True)\n"
         "    def recv(self): sys.stdin.readline()\n"
         "_echo_process(Pipe(), RESPONSE_SIZE)\n")


async def _echo(workdir: str, count: int, warm: int) -> float:
    out = os.path.join(workdir, "echo")
    proc = subprocess.Popen([*_valgrind(out), sys.executable, "-c", _ECHO], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                                os.path.abspath(__file__)))))
    try:
        client = await rq.open_client(int(proc.stdout.readline()))
        payload = b"x" * rq.REQUEST_SIZE
        return await _counting(proc.pid, out, lambda: client.exchange(payload), count, warm)
    finally:
        proc.stdin.write("\n")
        proc.stdin.flush()
        proc.wait(120)


async def _sib(workdir: str, count: int, warm: int, tree: str | None = None) -> float:
    """The SIB's count; `tree`: run the ``ksp-sib`` of that source tree (another checkout)."""
    from sib.testing import SibProcess

    out = os.path.join(workdir, "sib" if tree is None else "tree")
    with SibProcess("--memory", "--udp-port", "0", "--tcp-port", "-1", "--coap-port", "-1",
                    "--metrics-port", "-1", timeout=600,
                    cwd=None if tree is None else os.path.abspath(tree),
                    program=[*_valgrind(out), sys.executable, "-m", "sib.cli"]) as sib:
        port = sib.ports["udp"]
        await rq._load(port)
        kp = rq.MinimalKP(await rq.open_client(port))
        await kp.check()
        kp.prepare(warm + count)
        per_request = await _counting(sib.proc.pid, out, kp.once, count, warm)
        sib.stop(timeout=120)
    return per_request


def run(count: int = 1000, warm: int = 1000, tree: str | None = None) -> dict[str, float]:
    """Instructions per request: {"echo": …, "sib": …} and, with `tree`, "tree": the
    ``ksp-sib`` of that source tree's."""
    with tempfile.TemporaryDirectory(prefix="ksp-callgrind-") as workdir:
        counts = {"echo": asyncio.run(_echo(workdir, count, warm)),
                  "sib": asyncio.run(_sib(workdir, count, warm))}
        if tree is not None:
            counts["tree"] = asyncio.run(_sib(workdir, count, warm, tree))
    return counts


def report(count: int = 1000, warm: int = 1000, tree: str | None = None) -> str:
    counts = run(count, warm, tree)
    echo = counts["echo"]
    said = [f"ksp-sib {counts['sib']:,.0f} ({counts['sib'] / echo:.2f}× the echo's)"]
    if tree is not None:
        said.append(f"ksp-sib ({tree}) {counts['tree']:,.0f} ({counts['tree'] / echo:.2f}×)")
    return (f"Instructions per request (callgrind, user space, {count} requests after {warm}): "
            f"bare UDP echo {echo:,.0f}; " + "; ".join(said) + ".")
