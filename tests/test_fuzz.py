"""The fuzz harness (tools/fuzz.py) in the suite: a short differential run of the decoders (C,
pure Python, the construct reference) and of the SPARQL compiler from the seed corpus; the C
module built with AddressSanitizer and UBSan running every golden vector and a short fuzz; and
`ksp bench fuzz` under atheris, briefly. The long runs are `ksp bench fuzz`
(docs/benchmarks.md, "Fuzzing").
"""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from ksp import TCP, UDP, DecodeError, Status, codec
from ksp.terms import IRI
from tools import fuzz, sanitized

ROOT = pathlib.Path(__file__).resolve().parent.parent
needs_c = pytest.mark.skipif(not codec.speedups_enabled(), reason="the C decoder is not built "
                                                                  "(or KSP_PURE_PYTHON=1)")
#: An INSERT DATA of <a> <p> 42: a fixed-size literal, URIs without a prefix.
INSERT = bytes.fromhex("010200000189000161000170012a00000000")


def test_decoders_agree_on_a_short_run():
    tally = fuzz.run("decode", fuzz.mutate_inputs("decode", 3000, seed=1),
                     c=codec.speedups_enabled())
    assert tally.inputs == 3000
    assert not tally.findings, json.dumps(tally.to_json(), indent=1)


def test_sparql_compiles_to_typed_errors_or_round_trips_on_a_short_run():
    tally = fuzz.run("sparql", fuzz.mutate_inputs("sparql", 3000, seed=1))
    assert tally.inputs == 3000 and not tally.findings, json.dumps(tally.to_json(), indent=1)


def test_the_seed_corpus_holds_the_vectors_and_the_kept_inputs():
    decode = fuzz.seeds("decode")
    assert len(decode) > len(fuzz.vector_cases()) and fuzz.Case(INSERT, UDP, "kp_to_sib").input() \
        in decode
    assert len(fuzz.seeds("sparql")) >= 5
    for case in fuzz.vector_cases():  # a case's input reads back as that case
        assert fuzz.case_of(case.input()) == case


@needs_c
def test_the_differential_finds_a_changed_value_and_a_refusal(monkeypatch):
    """A C decoder that answers with another message, or refuses valid bytes, is found."""
    data = fuzz.Case(INSERT, UDP, "kp_to_sib").input()
    assert fuzz.check_decode(data) == []
    real = codec.c_decode_kp_message
    monkeypatch.setattr(codec, "c_decode_kp_message",
                        lambda buf, transport: real(buf, transport)._replace(source=IRI("x")))
    assert [f.kind for f in fuzz.check_decode(data)] == ["value"]
    monkeypatch.setattr(codec, "c_decode_kp_message", lambda buf, transport: None)
    assert [f.kind for f in fuzz.check_decode(data)] == ["accept"]


def test_the_differential_finds_a_status_that_depends_on_the_framing(monkeypatch):
    """A REQ refused over UDP with one status and over TCP (the same bytes after the header)
    with another is found."""
    cut = fuzz.Case(INSERT[:-1], UDP, "kp_to_sib")  # the options count missing
    twin = fuzz.framing_twin(cut)
    assert twin.transport is TCP and twin.buf[8:] == cut.buf[4:]
    assert fuzz.check_decode(cut.input(), reference=False) == []
    real = fuzz.python_decode

    def tcp_says_otherwise(case):
        if case.transport is TCP:
            return DecodeError(Status.INVALID_DATA_FORMAT, "another status", "data")
        return real(case)

    monkeypatch.setattr(fuzz, "python_decode", tcp_says_otherwise)
    assert [f.kind for f in fuzz.check_decode(cut.input(), reference=False)] == ["status"]


def test_a_sparql_rendering_that_changes_the_request_is_found(monkeypatch):
    text = (fuzz.CORPUS / "sparql" / "select.rq").read_bytes()
    assert fuzz.check_sparql(text) == []
    from ksp import sparql

    real = sparql.render
    monkeypatch.setattr(sparql, "render", lambda req: real(req).replace("LIMIT 10", "LIMIT 11"))
    assert [f.kind for f in fuzz.check_sparql(text)] == ["value"]


# ---------------------------------------------------------------------------------------------
# The C module under AddressSanitizer and UBSan


@pytest.fixture(scope="session")
def sanitized_build(tmp_path_factory):
    """(the sanitized module's file, the ASan runtime to preload), built once."""
    runtime = sanitized.sanitizer_runtime()
    if runtime is None:
        pytest.skip("no gcc with AddressSanitizer's runtime (libasan) on this machine")
    try:
        path = sanitized.build_sanitized(tmp_path_factory.mktemp("sanitized"))
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"gcc cannot build with {' '.join(sanitized.SANITIZE)}: {exc.stderr[-1500:]}")
    return path, runtime


def run_sanitized(build, *args: str) -> subprocess.CompletedProcess:
    path, runtime = build
    return subprocess.run([sys.executable, "-m", "tools.sanitized", str(path), *args], cwd=ROOT,
                          env=sanitized.sanitized_env(runtime), capture_output=True, text=True,
                          timeout=1800)


def reports(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stderr.splitlines()
            if any(r in line for r in sanitized.SANITIZER_REPORTS)]


def test_the_sanitizers_report_and_end_the_process(sanitized_build, tmp_path):
    """The harness can fail: a module with a null pointer passed to memcpy (the fault this
    build was made to find) ends its process with UBSan's report, under the same flags and
    environment."""
    source = tmp_path / "canary.c"
    source.write_text("#include <string.h>\n"
                      "int copy(char *dst, const char *src, int n) {\n"
                      "    memcpy(dst, src, n);\n    return n;\n}\n")
    library = tmp_path / "canary.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", *sanitized.SANITIZE, str(source), "-o",
                    str(library)], check=True, capture_output=True, timeout=300)
    probe = (f"import ctypes; lib = ctypes.CDLL({str(library)!r}); "
             "buf = ctypes.create_string_buffer(4); print(lib.copy(buf, None, 0))")
    proc = subprocess.run([sys.executable, "-c", probe], env=sanitized.sanitized_env(
        sanitized_build[1]), capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and reports(proc), proc.stderr[-3000:]


def test_vectors_and_a_short_fuzz_are_clean_under_the_sanitizers(sanitized_build):
    """Every golden vector, in every framing and direction, then 3,000 mutated inputs: the C
    decoder against Python, in a process that a sanitizer's report would end."""
    proc = run_sanitized(sanitized_build, "tools.fuzz", "--vectors", "--no-reference",
                         "--inputs", "3000")
    assert not reports(proc), "\n".join(proc.stderr.splitlines()[-80:])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout.splitlines()[-1])
    vectors = len(fuzz.vector_cases()) * len(fuzz.every_way(fuzz.vector_cases()[0]))
    assert report["c"] and report["inputs"] == vectors + 3000, report


# ---------------------------------------------------------------------------------------------
# The benchmark, under atheris


@pytest.mark.slow
def test_the_benchmark_runs_atheris_over_both_targets(tmp_path):
    pytest.importorskip("atheris", reason="atheris (the bench extra) is not installed")
    findings = tmp_path / "findings.jsonl"
    proc = subprocess.run([sys.executable, "-m", "tools.bench.fuzz", "--inputs", "1500",
                           "--findings", str(findings)], cwd=ROOT, capture_output=True,
                          text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines()
            if line.split()[:2] in (["decode", "atheris"], ["sparql", "atheris"])}
    assert set(rows) == {"decode", "sparql"}, proc.stdout
    for target, cells in rows.items():
        assert cells[3] == "1,500", cells  # inputs: libFuzzer ran them all
        assert int(cells[5]) > 0, cells  # coverage: the instrumented code was seen
