"""Smoke test of the request benchmark (tools/bench/request.py): a real `ksp-sib` and an echo
process, every row printed — no timing assertions (speed is the benchmark's job)."""
from __future__ import annotations

import pytest

from tools.bench import request
from tools.cli import BENCH_SUITES

# slow: a ksp-sib and an echo process
pytestmark = pytest.mark.slow


def test_the_table_has_every_row(monkeypatch):
    monkeypatch.setattr(request, "SENSORS", 50)
    results, settings = request.run(quick=True)
    names = [c.name for c in results]
    assert names == ["bare UDP echo", "minimal KP → ksp-sib", "transports.connect → ksp-sib",
                     "transports.connect, SPARQL text → ksp-sib",
                     "…, SPARQL text never sent before", "Sib.submit, no sockets"]
    assert all(len(c.samples) == settings["rounds"] * settings["per_round"] for c in results)
    rows = request.table_rows(results)
    assert [r[0] for r in rows] == names
    line = request.target_line(results)
    assert line.startswith("Target: the p50") and line.count("×") == 3
    assert BENCH_SUITES["request"] == ".bench.request"


@pytest.mark.skipif(not __import__("tools.bench.request_instructions",
                                   fromlist=["available"]).available(),
                    reason="valgrind (callgrind) is not installed")
def test_instructions_per_request_are_counted_in_both_servers():
    """`--instructions`: each server's counted part is its requests only (the SIB's is more
    than the echo's, and neither is 0, which a dump never read would give)."""
    from tools.bench import request_instructions

    counts = request_instructions.run(count=50, warm=50)
    assert 0 < counts["echo"] < counts["sib"]
