"""The docs, code and tests describe what is, not how the work went: no text in the tree names
a tracker issue of this project, a stage of the work or a work session by its ordinal. Git keeps the
history; a reader of a page, a comment or a test's name should not need it.

The one allowance: a reference to another project's issue written as `owner/repo#N`
(`vaimee/SEPA#94`, `chrysn/aiocoap#80`), which cites an upstream bug a behaviour works around.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: What the scan reads: documentation, code and configuration the project writes.
SUFFIXES = {".md", ".py", ".c", ".h", ".lua", ".sh", ".toml", ".yml", ".yaml", ".cfg", ".in",
            ".html", ".js", ".mjs", ".service", ".txt"}
#: Folders that are not the project's own text (installed, generated or fetched).
SKIP_DIRS = {".git", ".venv", "node_modules", "typings", "build", "dist", "site", "w3c",
             "vectors", "__pycache__", ".hypothesis", ".pytest_cache"}

FORBIDDEN = re.compile(
    r"\bissues? ?#?\d"                        # a tracker issue by number
    r"|\bissue-\d"
    r"|(?<![\w.-])#\d{2,}\b"                  # a bare #NN (not owner/repo#NN)
    r"|\bround of work"
    r"|\b(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|last|this)"
    r" round\b"
    r"|\b(?:eleventh|twelfth|thirteenth|fourteenth|fifteenth|sixteenth|seventeenth|eighteenth"
    r"|nineteenth|twentieth|twenty-\w+) session\b",
    re.IGNORECASE)


def project_files() -> list[Path]:
    found = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        for name in files:
            path = Path(folder, name)
            if path.suffix in SUFFIXES or name.startswith("README") or (
                    path.parent.name == "scripts" and not path.suffix):
                found.append(path)
    return found


def test_the_scan_reads_the_docs_the_code_and_the_tests():
    names = {str(p.relative_to(ROOT)) for p in project_files()}
    assert {"README.md", "docs/benchmarks.md", "sib/core.py", "tests/test_layers.py",
            "scripts/run", "mkdocs.yml"} <= names


def test_nothing_names_an_issue_or_a_round_of_work():
    hits = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
            for path in project_files()
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
            if FORBIDDEN.search(line)]
    assert hits == [], "\n".join(hits)
