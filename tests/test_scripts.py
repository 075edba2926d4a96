"""scripts/_env.sh: pip runs again only when what the install depends on changed (pyproject,
constraints.txt, setup.py, the C module's source, the extras asked for) — `scripts/run` stays
instant."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

# slow: pip in a scratch environment
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


def test_pip_runs_only_when_the_install_inputs_change(tmp_path):
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    (repo / "ksp").mkdir()
    shutil.copy(ROOT / "scripts" / "_env.sh", repo / "scripts")
    for name in ("pyproject.toml", "constraints.txt", "setup.py"):
        shutil.copy(ROOT / name, repo)
    (repo / "ksp" / "_speedups.c").write_text("/* C */\n")
    venv_bin = repo / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    calls = tmp_path / "pip-calls"
    # A pip that only records its arguments: what is tested is when the script calls it.
    (venv_bin / "pip").write_text(f'#!/bin/sh\necho "$*" >> {calls}\n')
    (venv_bin / "python").write_text("#!/bin/sh\nexit 0\n")
    for exe in ("pip", "python"):
        (venv_bin / exe).chmod(0o755)

    def ensure(extras: str) -> int:
        subprocess.run(["bash", "-c", f'source scripts/_env.sh && ensure_venv "{extras}"'],
                       cwd=repo, check=True, timeout=60)
        return len(calls.read_text().splitlines()) if calls.exists() else 0

    assert ensure("") == 1
    assert ensure("") == 1  # nothing changed: no pip
    assert ensure("[test,bench]") == 2  # other extras: pip
    assert ensure("") == 2 and ensure("[test,bench]") == 2  # both known now
    (repo / "ksp" / "_speedups.c").write_text("/* changed */\n")
    assert ensure("") == 3
    with (repo / "pyproject.toml").open("a") as f:
        f.write("\n# a new dependency\n")
    assert ensure("[test,bench]") == 4
    with (repo / "constraints.txt").open("a") as f:
        f.write("# another version\n")
    assert ensure("[test,bench]") == 5
    assert calls.read_text().splitlines()[-1] == "install -q -c constraints.txt setuptools -e .[test,bench]"
