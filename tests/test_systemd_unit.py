"""The systemd unit for `ksp-sib` on a gateway host (`sib/ksp-sib.service`, printed with this
installation's paths by `ksp-sib systemd-unit`): systemd's own checker accepts it, and the
command line it starts, its reload and its stop behave as the unit promises — run for real
with the unit's ExecStart and ExecReload, only the configuration file and the data directory
put in a temporary folder (systemd itself is not running on a test machine)."""
from __future__ import annotations

import asyncio
import configparser
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from rdflib import Literal, URIRef

from ksp.codes import Status
from sib.systemd import CONFIG, DATA_DIR, unit
from sib.testing import LoggedProcess, free_port
from transports import connect
from transports.errors import KspStatusError

S, P = URIRef("http://example.org/s"), URIRef("http://example.org/p")


def printed_unit(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "sib.cli", "systemd-unit", *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def sections(text: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # systemd's keys are case-sensitive
    parser.read_string(text)
    return parser


def test_the_unit_starts_on_boot_restarts_on_failure_and_reloads_with_sighup():
    service = sections(printed_unit())["Service"]
    assert sections(printed_unit())["Install"]["WantedBy"] == "multi-user.target"
    program, *args = shlex.split(service["ExecStart"])
    assert Path(program).is_file() and Path(program).name == "ksp-sib"
    assert Path(program).parent == Path(sys.executable).parent  # this installation's
    assert args == ["--config", CONFIG, "--data-dir", DATA_DIR]
    assert service["Restart"] == "on-failure"
    assert service["ExecReload"] == "/bin/kill -HUP $MAINPID"
    # The data directory is the one systemd makes for the service user.
    assert DATA_DIR == "/var/lib/" + service["StateDirectory"]
    assert service["User"] == "ksp-sib"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                    reason="systemd-analyze is not on this machine")
def test_systemd_analyze_verify_accepts_the_unit(tmp_path):
    path = tmp_path / "ksp-sib.service"
    path.write_text(printed_unit())
    done = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "ksp-sib.service" not in done.stderr, done.stderr  # no warning about our unit


def test_systemd_analyze_verify_rejects_a_broken_unit_the_same_way(tmp_path):
    """The check above can fail: a unit naming a program that does not exist is refused."""
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not on this machine")
    path = tmp_path / "ksp-sib.service"
    path.write_text(unit(str(tmp_path / "no-such-ksp-sib")))
    done = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode != 0 and "no-such-ksp-sib" in done.stderr


def test_paths_that_a_unit_cannot_hold_are_refused():
    done = subprocess.run([sys.executable, "-m", "sib.cli", "systemd-unit", "--config",
                           "sib.toml"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "absolute path" in done.stderr and "Traceback" not in done.stderr


def test_paths_the_unit_hides_from_the_service_are_warned_of():
    """ProtectHome and PrivateTmp hide home directories and /tmp from the service: a program,
    configuration or data directory there (a virtual environment in a home directory) is said
    on stderr, the unit still printed; paths elsewhere draw no warning."""
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "sib.cli", "systemd-unit", *args],
                              capture_output=True, text=True, timeout=60)

    done = run("--program", "/home/ann/venv/bin/ksp-sib", "--config", "/root/sib.toml",
               "--data-dir", "/tmp/ksp")
    assert done.returncode == 0 and "ExecStart=/home/ann/venv/bin/ksp-sib" in done.stdout
    warnings = done.stderr.splitlines()
    assert [w.split(" is under ")[0] for w in warnings] == [
        "ksp-sib systemd-unit: warning: --program /home/ann/venv/bin/ksp-sib",
        "ksp-sib systemd-unit: warning: --config /root/sib.toml",
        "ksp-sib systemd-unit: warning: --data-dir /tmp/ksp"]
    assert "(ProtectHome=yes)" in warnings[0] and "(PrivateTmp=yes)" in warnings[2]
    done = run("--program", "/opt/ksp-gateway/bin/ksp-sib")
    assert done.returncode == 0 and done.stderr == ""


def write_config(path: Path, port: int, anonymous: str) -> None:
    path.write_text(f"""
[sib]
host = "127.0.0.1"
udp_port = {port}
tcp_port = -1
coap_port = -1
metrics_port = -1

[sepa]
http_port = -1
ws_port = -1

[access]
anonymous = "{anonymous}"
""")


def test_the_service_runs_reloads_stops_and_comes_back_on_its_data(tmp_path):
    """ExecStart as the unit has it (the installed `ksp-sib` script): it serves; `systemctl
    reload` (ExecReload, run as written) puts a new access policy in force; `systemctl stop`
    (SIGTERM) ends it with status 0 and the store flushed; after a crash (SIGKILL: what
    Restart=on-failure restarts) the same command line comes back with the data written."""
    config, data = tmp_path / "sib.toml", tmp_path / "data"
    port = free_port()
    write_config(config, port, "read-write")
    service = sections(printed_unit("--config", str(config), "--data-dir", str(data)))["Service"]
    command = shlex.split(service["ExecStart"])

    def start() -> LoggedProcess:
        return LoggedProcess("sib.cli", ("--log-level", "info"), "SIB ready", program=command)

    async def write(value: int) -> None:
        async with await connect(f"udp://127.0.0.1:{port}") as kp:
            await kp.insert_data([(S, P, Literal(value))])

    async def read() -> set:
        async with await connect(f"udp://127.0.0.1:{port}") as kp:
            rows = await kp.query(f"SELECT ?o WHERE {{ <{S}> <{P}> ?o }}")
            return {row[0] for row in rows.rows}

    def run(coroutine):
        return asyncio.run(asyncio.wait_for(coroutine, 60))

    with start() as sib:
        run(write(1))
        write_config(config, port, "read")
        reload = shlex.split(service["ExecReload"].replace("$MAINPID", str(sib.proc.pid)))
        subprocess.run(reload, check=True, timeout=60)
        sib.wait_for("SIGHUP: access policy reloaded")
        with pytest.raises(KspStatusError) as refused:
            run(write(2))
        assert refused.value.status == Status.ACCESS_DENIED
        assert run(read()) == {Literal(1)}
        assert sib.stop(signal.SIGTERM) == 0
        assert "store flushed" in sib.log()

    with start() as sib:
        assert run(read()) == {Literal(1)}
        sib.proc.kill()  # a crash: Restart=on-failure starts the same command line again
        sib.proc.wait(60)

    with start() as sib:
        assert run(read()) == {Literal(1)}
        assert sib.stop() == 0
