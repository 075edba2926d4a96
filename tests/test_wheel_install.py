"""The wheel, installed by role as on a gateway host: a wheel built from the tracked files,
installed into fresh virtual environments with each role's extras (base, `[sib]`,
`[firmware]`), runs each role's commands; a command whose extra is missing says in one line
which to install; the firmware and the dissector come with the wheel; no top-level `tools`.
The wheel carries the licences and no pytest plugin entry point; building it (or the C module
in place) leaves no `build/` or egg-info in the source tree.

Dependencies come from the package index at the versions constraints.txt fixes (pip's cache
makes a second run quick)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import time
import venv
import zipfile
from pathlib import Path

import pytest

from sib.testing import free_port

# slow: builds a wheel and installs it into three new environments from the package index
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
ASK = "ASK { <http://example.org/s> <http://example.org/p> ?o }"
INSERT = "INSERT DATA { <http://example.org/s> <http://example.org/p> 1 }"


def tracked_files() -> list[str]:
    """The files a clean clone has (a checkout's build/, .venv/ and caches stay out)."""
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    return [name for name in out.stdout.decode().split("\0") if name]


def clone(dest: Path) -> Path:
    """The tracked files copied to `dest`, as a clean clone has them."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout to list the tracked files")
    for name in tracked_files():
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


def untracked(tree: Path) -> set[str]:
    """The files in `tree` that are not tracked files: what a build left there."""
    return {p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file()} - set(
        tracked_files())


#: What a build of the C module leaves in the tree by design: its generated header (setup.py).
HEADER = "ksp/_layout.h"
SPEEDUPS = "ksp/_speedups" + sysconfig.get_config_var("EXT_SUFFIX")
COMPILER = shutil.which((sysconfig.get_config_var("CC") or "cc").split()[0]) is not None


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    """A clean clone and the wheel `pip wheel .` made of it, as a user builds it (in an
    isolated build environment)."""
    src, out = clone(tmp_path_factory.mktemp("src")), tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out),
                    "."], cwd=src, check=True, timeout=600)
    (found,) = out.glob("ksp_gateway-*.whl")
    return src, found


@pytest.fixture(scope="module")
def wheel(built) -> Path:
    return built[1]


def test_building_the_wheel_leaves_nothing_in_the_source_tree(built):
    """No build/ or egg-info beside the sources (setup.py builds in a temporary folder)."""
    src, wheel = built
    assert untracked(src) <= {HEADER}, sorted(untracked(src))
    assert not (src / "build").exists()
    if COMPILER:
        assert SPEEDUPS in zipfile.ZipFile(wheel).namelist()


def test_an_in_place_build_leaves_the_c_module_and_no_build_folder(tmp_path):
    """`python setup.py build_ext --inplace`, as developers and the benchmarks' baselines run
    it: the C module beside its source, and nothing else."""
    src = clone(tmp_path / "src")
    out = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=src,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert untracked(src) == ({HEADER, SPEEDUPS} if COMPILER else {HEADER}), untracked(src)


class Env:
    """A fresh virtual environment with the wheel installed with `extras`."""

    def __init__(self, where: Path, wheel: Path, extras: str = "") -> None:
        venv.create(where, with_pip=True)
        self.bin = where / "bin"
        subprocess.run([str(self.bin / "python"), "-m", "pip", "install", "-q", "-c",
                        str(ROOT / "constraints.txt"), f"{wheel}{extras}"], check=True, timeout=900)
        self.home = where / "home"
        self.home.mkdir()
        self.site = Path(subprocess.run(
            [str(self.bin / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True, text=True, check=True).stdout.strip())

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """A command of the environment, from a folder outside the checkout (nothing of the
        repository on the path), with its own home and cache."""
        env = {"PATH": f"{self.bin}:/usr/bin:/bin", "HOME": str(self.home),
               "XDG_CACHE_HOME": str(self.home / ".cache"), "LANG": "C.UTF-8"}
        return subprocess.run([str(self.bin / args[0]), *args[1:]], capture_output=True,
                              text=True, timeout=timeout, cwd=self.home, env=env)

    def ok(self, *args: str, **kw) -> str:
        out = self.run(*args, **kw)
        assert out.returncode == 0, (args, out.stdout, out.stderr)
        assert "Traceback" not in out.stderr, out.stderr
        return out.stdout

    def lacks(self, extra: str, *args: str) -> None:
        """`args` exits 2 with one line naming `extra` and the command that installs it."""
        out = self.run(*args)
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2 and len(lines) == 1, (args, out.stdout, out.stderr)
        assert f"(the {extra} extra)" in lines[0] and f"'ksp-gateway[{extra}]'" in lines[0], lines


def test_the_wheel_carries_the_firmware_and_the_dissector_and_no_tools_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert "tools" not in tops and "ksp_tools" in tops, sorted(tops)
    assert {"ksp_tools/firmware/main.py", "ksp_tools/firmware/simulate.py",
            "ksp_tools/firmware/config.example.json", "ksp_tools/wireshark/ksp.lua"} <= set(names)
    firmware = {n for n in names if n.startswith("ksp_tools/firmware/kspfw/")}
    tree = {f"ksp_tools/firmware/{p.relative_to(ROOT / 'device_firmware').as_posix()}"
            for p in (ROOT / "device_firmware" / "kspfw").rglob("*.py")
            if "__pycache__" not in p.parts}
    assert tree and tree <= firmware


def dist_info(wheel: Path) -> tuple[str, set[str]]:
    """The wheel's .dist-info folder and every name in the wheel."""
    names = set(zipfile.ZipFile(wheel).namelist())
    return next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA")), names


def test_the_wheel_says_its_licence_and_carries_both_texts(wheel):
    """PEP 639 metadata, and umqtt's own licence beside the module in the firmware copy."""
    info, names = dist_info(wheel)
    meta = zipfile.ZipFile(wheel).read(f"{info}/METADATA").decode().splitlines()
    assert "License-Expression: MIT" in meta, meta[:30]
    assert {f"{info}/licenses/LICENSE", f"{info}/licenses/device_firmware/lib/umqtt/LICENSE",
            "ksp_tools/firmware/lib/umqtt/LICENSE"} <= names


def test_the_wheel_registers_no_pytest_plugin(wheel):
    """The replay plugin is opt-in (`-p ksp_tools.pytest_ksp`): no `pytest11` entry point."""
    info, _ = dist_info(wheel)
    entry_points = zipfile.ZipFile(wheel).read(f"{info}/entry_points.txt").decode()
    assert "[console_scripts]" in entry_points and "pytest11" not in entry_points, entry_points

def test_the_base_install(wheel, tmp_path):
    env = Env(tmp_path / "base", wheel)
    assert not (env.site / "tools").exists()
    assert env.ok("ksp", "--version").strip().startswith("ksp 0.1")
    assert "COMMAND" in env.ok("ksp", "--help")
    vector = (ROOT / "tests" / "vectors" / "ack_bare.json").read_text()
    assert "ACK" in env.ok("ksp", "decode", vector.split('"hex": "')[1].split('"')[0]).upper()
    lua = Path(env.ok("ksp", "dissector").strip())
    assert lua.is_file() and env.site in lua.parents
    env.ok("ksp", "simulate-board", "--help")
    # every role's command without its extra: one line that says which to install
    env.lacks("sib", "ksp-sib", "--memory")
    env.lacks("bridge", "ksp-bridge", "--help")
    env.lacks("spark", "ksp-ingest-shard", "--help")
    env.lacks("bench", "ksp", "bench", "codec")
    env.lacks("bench", "ksp", "telemetry", "--mqtt", "mqtt://127.0.0.1:1", "--count", "1")
    env.lacks("firmware", "ksp", "flash", "/dev/ttyUSB0", "--dry-run")
    out = env.run("ksp-ingest", "--help")
    assert out.returncode == 2 and "'ksp-gateway[spark]'" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_the_sib_role_serves_a_kp(wheel, tmp_path):
    """`[sib]` is all a gateway host needs for ksp-sib's default listeners (UDP, TCP, CoAP)."""
    env = Env(tmp_path / "sib", wheel, "[sib]")
    port = free_port("udp")
    sib = subprocess.Popen([str(env.bin / "ksp-sib"), "--memory", "--udp-port", str(port),
                            "--tcp-port", "0", "--coap-port", "0", "--sepa-http-port", "-1",
                            "--sepa-ws-port", "-1"], cwd=env.home, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
    url = f"udp://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:  # until the SIB answers
            out = env.run("ksp", "update", INSERT, "--sib", url, "--timeout", "5")
            if out.returncode == 0 or time.monotonic() > deadline or sib.poll() is not None:
                break
        assert out.returncode == 0, (out.stderr, sib.poll())
        assert json.loads(env.ok("ksp", "query", ASK, "--sib", url)) == {"boolean": True}
    finally:
        sib.terminate()
        sib.wait(60)


def test_the_firmware_role_builds_from_the_installed_firmware(wheel, tmp_path):
    env = Env(tmp_path / "firmware", wheel, "[firmware]")
    out = env.ok("ksp", "flash", "/dev/ttyUSB0", "--dry-run")
    assert "mpremote" in out and ":main.py" in out, out
    built = env.home / ".cache" / "ksp-gateway" / "firmware"
    assert (built / "main.py").is_file() and list(built.rglob("*.mpy")), sorted(built.rglob("*"))
    assert not list(env.site.rglob("*.mpy"))  # nothing written into site-packages
