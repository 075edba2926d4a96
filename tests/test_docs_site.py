"""The documentation site builds as `scripts/run docs` builds it: `mkdocs build --strict`
(mkdocs.yml), so a broken link, a page left out of the navigation or an API reference that
cannot be resolved fails here, and the API reference names every public name of the modules it
documents (their `__all__`), from today's docstrings."""
from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: module -> its page of the API reference (docs/api/)
API_PAGES = {"transports": "transports", "ksp": "ksp", "sib": "sib", "sib.engine": "sib-engine"}


def test_the_site_builds_strict_with_every_public_name(tmp_path):
    site = tmp_path / "site"
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
                          "--site-dir", str(site)], cwd=ROOT, capture_output=True, text=True,
                         timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert out.returncode == 0, out.stdout + out.stderr
    for page in ("index", "architecture", "capacity", "benchmarks", "wire-format", "sib"):
        assert (site / ("" if page == "index" else page) / "index.html").is_file(), page
    missing = {}
    for name, page in API_PAGES.items():
        html = (site / "api" / page / "index.html").read_text()
        module = importlib.import_module(name)
        missing[name] = [n for n in module.__all__ if f"{name}.{n}" not in html]
    assert missing == {name: [] for name in API_PAGES}, missing


def test_every_page_of_docs_is_in_the_navigation():
    """mkdocs --strict warns of a page left out of `nav` (validation.omitted_files); this says
    which, without a build."""
    import yaml

    def pages(nav) -> set[str]:
        found: set[str] = set()
        for item in nav:
            value = item if isinstance(item, str) else next(iter(item.values()))
            found |= pages(value) if isinstance(value, list) else {value}
        return found

    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    on_disk = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert on_disk == pages(config["nav"])
