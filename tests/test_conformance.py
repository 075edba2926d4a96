"""The conformance table of docs/wire-format.md (its last section) is complete and true: every
rule id of the spec has a row, every vector file is named by some row (by name, or by a pattern
that starts with a fixed part: `*_tcp` says little about which vectors a rule has), every
pattern names at least one vector, and every test a row names exists in its file.
"""
from __future__ import annotations

import ast
import fnmatch
import re
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "docs" / "wire-format.md"
VECTORS = sorted(p.stem for p in (ROOT / "tests" / "vectors").glob("*.json"))
TABLE_HEADING = "## 16. Conformance table"


def spec_parts() -> tuple[str, str]:
    """(the spec before the table, the table's section)."""
    text = SPEC.read_text(encoding="utf-8")
    body, _, table = text.partition(TABLE_HEADING)
    assert table, f"{TABLE_HEADING!r} not found"
    return body, table


def rule_ids(body: str) -> list[str]:
    """R1 … of section 12; `<section>.<n>` for a numbered item of a section (3.2.1, 15.6);
    `<section>.P<n>` for a pass of 3.2."""
    ids, section = [], None
    for line in body.splitlines():
        if m := re.match(r"^#{2,3} (\d+(?:\.\d+)?)\.?\s", line):
            section = m.group(1)
        elif m := re.match(r"^\*\*(R\d+)\.", line):
            ids.append(m.group(1))
        elif section and (m := re.match(r"^(\d+)\. ", line)):
            ids.append(f"{section}.{m.group(1)}")
        elif section and (m := re.match(r"^- \*\*Pass (\d+)", line)):
            ids.append(f"{section}.P{m.group(1)}")
    return ids


def rows(table: str) -> list[tuple[str, list[str], list[str]]]:
    """(rule id, vector names or patterns, test node ids) of each row."""
    out = []
    for line in table.splitlines():
        if not line.startswith("| ") or line.startswith(("| rule ", "|---")):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        assert len(cells) == 4, line
        out.append((cells[0], re.findall(r"`([^`]+)`", cells[2]),
                    re.findall(r"`([^`]+)`", cells[3])))
    return out


@lru_cache(maxsize=None)
def functions(path: Path) -> frozenset[str]:
    """The names of the test functions of a file, and Class::method for methods."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names |= {f"{node.name}::{f.name}" for f in node.body
                      if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return frozenset(names)


def test_every_rule_id_has_a_row():
    body, table = spec_parts()
    ids = rule_ids(body)
    assert len(ids) > 40 and {"R1", "R19", "3.2.1", "3.2.P4", "15.6"} <= set(ids)
    listed = [r[0] for r in rows(table)]
    assert len(listed) == len(set(listed)), "a rule with two rows"
    assert [i for i in ids if i not in listed] == []


def test_every_vector_file_is_in_the_table():
    _, table = spec_parts()
    names = [n for _, vectors, _ in rows(table) for n in vectors]
    unmatched = [n for n in names if not fnmatch.filter(VECTORS, n)]
    assert unmatched == [], "names or patterns that match no vector file"
    specific = [n for n in names if not n.startswith("*")]
    missing = [v for v in VECTORS if not any(fnmatch.fnmatchcase(v, n) for n in specific)]
    assert missing == []


def test_every_test_named_exists():
    _, table = spec_parts()
    named = {t for _, _, tests in rows(table) for t in tests}
    assert len(named) > 50
    gone = []
    for node in sorted(named):
        path, _, name = node.partition("::")
        file = ROOT / path
        if not (path.startswith("tests/test_") and file.is_file() and name in functions(file)):
            gone.append(node)
    assert gone == []
