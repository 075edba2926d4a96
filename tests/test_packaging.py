"""The package as other environments see it: pyproject.toml states ranges, so the wheel can
share an environment with other packages, and constraints.txt the exact versions the scripts
and CI install, one for each package pyproject names and inside its range; the pytest plugin
loads only where a project asks for it."""
from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
SELF = "ksp-gateway"


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def requirements() -> list[Requirement]:
    """Every requirement of pyproject's build system, dependencies and extras, but the extras'
    own `ksp-gateway[...]`."""
    meta = pyproject()
    lines = [*meta["build-system"]["requires"], *meta["project"]["dependencies"],
             *(line for extra in meta["project"]["optional-dependencies"].values()
               for line in extra)]
    return [r for r in map(Requirement, lines) if canonicalize_name(r.name) != SELF]


def constraints() -> list[Requirement]:
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    return [Requirement(line) for line in lines if line.strip() and not line.startswith("#")]


def test_pyproject_states_ranges_not_pins():
    pinned = [str(r) for r in requirements()
              if any(spec.operator in ("==", "===") for spec in r.specifier)]
    assert not pinned, pinned


def test_constraints_fix_one_version_in_range_for_each_package():
    fixed: dict[str, list[str]] = {}
    for c in constraints():
        (spec,) = c.specifier
        assert spec.operator == "==" and not c.extras and c.marker is None, str(c)
        fixed.setdefault(canonicalize_name(c.name), []).append(spec.version)
    assert {name: v for name, v in fixed.items() if len(v) > 1} == {}
    named = {canonicalize_name(r.name) for r in requirements()}
    assert set(fixed) == named, (sorted(named - set(fixed)), sorted(set(fixed) - named))
    outside = [f"{r.name}=={fixed[canonicalize_name(r.name)][0]} not in {r.specifier}"
               for r in requirements()
               if not r.specifier.contains(fixed[canonicalize_name(r.name)][0], prereleases=True)]
    assert not outside, outside


def test_a_checkout_s_install_hint_keeps_the_tested_versions():
    """A command that lacks its extra names the pip command; from a checkout, with the
    constraints the scripts install with."""
    from tools.commands import install_command

    assert install_command("sib").endswith(f"-e '{ROOT}[sib]' -c '{ROOT}/constraints.txt'")


def test_the_pytest_plugin_is_not_registered_for_every_environment():
    assert "pytest11" not in pyproject()["project"].get("entry-points", {})


def pytest_help(tmp_path: Path, *args: str) -> str:
    """`pytest --help` run in an empty folder (no conftest.py, no pyproject.toml)."""
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args,
                          "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_the_pytest_plugin_loads_when_asked_for_and_only_then(tmp_path):
    assert "--ksp-replay" not in pytest_help(tmp_path)
    assert "--ksp-replay" in pytest_help(tmp_path, "-p", "ksp_tools.pytest_ksp")
