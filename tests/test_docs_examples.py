"""The Python examples of the README files and docs/ run as written (a block whose first line
is `# fragment...` is only compiled: it needs a host or a board that the tests do not have)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([ROOT / "README.md", *ROOT.glob("*/README.md"), *ROOT.glob("docs/*.md")])
BLOCKS = [(path, n, m.group(1)) for path in DOCS
          for n, m in enumerate(re.finditer(r"^```python\n(.*?)^```$", path.read_text(),
                                            re.S | re.M))]


def test_there_are_examples():
    assert {p.name for p, _, _ in BLOCKS} >= {"README.md"} and len(BLOCKS) >= 3


@pytest.mark.parametrize("path, n, code", BLOCKS,
                         ids=[f"{p.relative_to(ROOT)}#{n}" for p, n, _ in BLOCKS])
def test_example_runs(path, n, code, tmp_path):
    compile(code, f"{path.name} block {n}", "exec", flags=0x2000)  # top-level await allowed
    if code.startswith("# fragment"):
        return
    script = tmp_path / "example.py"
    script.write_text(code)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr

