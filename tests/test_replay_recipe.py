"""README's "Capture, decode, replay" recipe as a user runs it: the README's own
command lines through bash, ports chosen free, the capture stopped by `kill` (SIGTERM), the
replay against a fresh `ksp-sib` started in the background just before it (the replay waits
for it to listen); and a capture that ends with the recorded SIB's shutdown
(TERMINATED INDs no KP request caused) replayed without a difference."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sib.testing import SibProcess, free_port

pytestmark = pytest.mark.slow  # ksp and ksp-sib processes

ROOT = Path(__file__).resolve().parent.parent
OFF = "--tcp-port -1 --coap-port -1 --sepa-http-port -1 --sepa-ws-port -1"


def readme_recipe() -> list[str]:
    """The command lines of the README's capture/decode/replay block."""
    text = (ROOT / "README.md").read_text()
    block = text.split("## Capture, decode, replay", 1)[1].split("```sh\n", 1)[1]
    return [line for line in block.split("```", 1)[0].splitlines() if line.strip()]


@pytest.fixture
def venv(tmp_path):
    """`.venv/bin/ksp` and `.venv/bin/ksp-sib` in a scratch directory, running this tree."""
    bin_ = tmp_path / ".venv" / "bin"
    bin_.mkdir(parents=True)
    for name, module in (("ksp", "tools.cli"), ("ksp-sib", "sib.cli")):
        (bin_ / name).write_text(f'#!/bin/sh\nPYTHONPATH="{ROOT}" exec "{sys.executable}" '
                                 f'-m {module} "$@"\n')
        (bin_ / name).chmod(0o755)
    return tmp_path


def bash(lines: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", "\n".join(lines)], cwd=cwd, capture_output=True,
                          text=True, timeout=600)


def test_the_readme_recipe_as_written(venv):
    lines = readme_recipe()
    capture = [line for line in lines if "ksp replay" not in line]
    (replay,) = [line for line in lines if "ksp replay" in line]
    assert "kill %1" in capture[1] and "ksp-sib --memory --pcap gh.pcapng &" in capture[0]
    port = free_port()
    capture[0] = capture[0].replace("--memory", f"--memory --udp-port {port} {OFF}")
    run = bash([line.replace("127.0.0.1:7000", f"127.0.0.1:{port}") for line in capture]
               + ["wait"], venv)
    assert run.returncode == 0, run.stderr
    assert re.search(r"^(\d+) of \1 KSP messages$", run.stdout, re.M), run.stdout
    # step 3 as a user types it: a fresh SIB in the background and the replay at once, before
    # that SIB listens (the replay waits for it)
    fresh = free_port()
    out = bash([f".venv/bin/ksp-sib --memory --udp-port {fresh} {OFF} 2>/dev/null &",
                replay.replace("127.0.0.1:7000", f"127.0.0.1:{fresh}"),
                "status=$?; kill %1; wait; exit $status"], venv)
    assert out.returncode == 0, (out.stdout, out.stderr)
    assert re.match(r"\d+ requests replayed(, \d+ operations ended by the recorded SIB's "
                    r"shutdown \(not expected\))?: every answer as recorded$", out.stdout)


def ksp(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.cli", *args], capture_output=True,
                          text=True, timeout=120, **kw)


def test_a_capture_ending_in_the_sibs_shutdown_replays_without_difference(tmp_path):
    """The TERMINATED IND the recorded SIB sent as it stopped is not expected of the replay:
    nothing the KP did caused it (without the fix: "IND 2 missing", after a wait)."""
    from ksp import Response, Status
    from ksp.codec import UDP, encode
    from transports.pcap import PcapWriter, read_packets

    raw, pcap = tmp_path / "raw.pcapng", tmp_path / "gh.pcapng"
    query = "SELECT ?o WHERE { <http://example.org/s> <http://example.org/p> ?o }"
    with SibProcess("--memory", "--pcap", str(raw), "--udp-port", "0", *OFF.split()) as sib:
        url = f"udp://127.0.0.1:{sib.ports['udp']}"
        sub = subprocess.Popen([sys.executable, "-m", "tools.cli", "sub", query, "-s", url,
                                "-o", "json"], stdout=subprocess.PIPE, text=True)
        try:
            first = sub.stdout.readline()  # subscribed: its initial state is out
            assert '"seq": null' in first
            insert = ksp("update", "INSERT DATA { <http://example.org/s> <http://example.org/p> "
                         "1 }", "-s", url)
            assert insert.returncode == 0, insert.stderr
            assert '"seq": 1' in sub.stdout.readline()
        finally:
            sub.kill()  # gone without a TERMINATE: its operation is live when the SIB stops
            sub.wait()
        sib.stop()
    packets = list(read_packets(raw))
    sub_kp = packets[0].src
    tid = int(json.loads(first)["tid"])
    # the shutdown's TERMINATED IND as `ksp-sib` sends it, after everything else
    ind = encode(Response(tid, Status.TERMINATED, indication=True, seq=2), UDP)
    with PcapWriter(pcap) as w:
        for p in packets:
            w.udp(p.src, p.dst, p.payload, when=p.time)
        w.udp(packets[0].dst, sub_kp, ind, when=packets[-1].time + 1)
    with SibProcess("--memory", "--udp-port", "0", *OFF.split()) as fresh:
        out = ksp("replay", str(pcap), "--to", f"udp://127.0.0.1:{fresh.ports['udp']}",
                  "--sib-port", str(packets[0].dst[1]))
    assert out.returncode == 0, (out.stdout, out.stderr)
    assert out.stdout.strip() == ("2 requests replayed, 1 operations ended by the recorded "
                                  "SIB's shutdown (not expected): every answer as recorded")


def test_replay_says_a_bad_target_once_in_the_users_terms():
    greenhouse = str(ROOT / "tests" / "captures" / "greenhouse.pcapng")
    for to, status, line in (
            ("udp://127.0.0.1:99999", 2, "port 99999: not a port number (1 to 65535)"),
            ("http://127.0.0.1:7000", 2, "--to 'http://127.0.0.1:7000': expected "
                                         "udp|tcp|coap://HOST:PORT")):
        out = ksp("replay", greenhouse, "--to", to)
        assert (out.returncode, out.stderr) == (status, f"ksp replay: {line}\n")
    for scheme in ("udp", "tcp"):
        url = f"{scheme}://127.0.0.1:{free_port(scheme)}"
        out = ksp("replay", greenhouse, "--to", url, "--wait", "1")
        assert (out.returncode, out.stdout, out.stderr) == (1, "", (
            f"ksp replay: {url}: nothing listens there (no SIB running, or none taking "
            f"{scheme} on this port)\n"))
    out = ksp("replay", greenhouse, "--to", "udp://127.0.0.1:7000", "--timeout", "0")
    assert out.returncode == 2 and out.stderr.splitlines()[-1] == (
        "ksp replay: error: argument --timeout: 0: must be a number of seconds above 0")
