"""Fuzzing benchmark: the decoders' differential and the SPARQL compiler under atheris, a
coverage-guided fuzzer (libFuzzer's engine over Python's bytecode), or the plain mutator; and the
C module built with AddressSanitizer and UBSan (`ksp bench fuzz`).

The targets are tools/fuzz.py's: `decode` (C vs pure Python vs the construct reference, both
framings, both directions) and `sparql` (typed error, or a request that round-trips through its
rendering). Each target runs in a process of its own (libFuzzer ends its process when done),
from the seed corpus (the golden vectors and tests/fuzz_corpus/), for `--inputs` inputs or
`--seconds`, whichever comes first. The table gives inputs/s, the coverage libFuzzer counted
(`cov`: edges of the instrumented Python code, ksp/ and construct; `ft`: features; the C
module is not instrumented, which would take clang's `-fsanitize=fuzzer-no-link`: its paths
mirror the Python decoder's, which the differential compares them with), the
disagreements (of which error-precedence ones, see `tools.fuzz.PRECEDENCE_REASONS`) and the
crashes: a decoder's unexpected exception, or a sanitizer's report (which ends the process).

`--sanitized` loads the C module built with `-fsanitize=address,undefined
-fno-sanitize-recover=all` (gcc, its ASan runtime preloaded) and runs the decode target through
the plain mutator, C against Python (libFuzzer's own runtime and ASan's do not share a
process); `--vectors` puts every golden vector first, in every framing and direction.
Findings are written to `--findings FILE` (JSON lines, one input each).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

from .report import bench_parser, environment, print_report

MODULE = __spec__.name if __spec__ else "tools.bench.fuzz"  # or ksp_tools.bench.fuzz, installed
TOOLS = MODULE.rsplit(".", 2)[0]
TARGETS = ("decode", "sparql")
#: The Python modules atheris instruments for coverage: the code under test.
INSTRUMENTED = ["ksp", "construct"]


def _parser(prog: str | None):
    parser = bench_parser(MODULE, __doc__, prog, "10,000 inputs a target")
    parser.add_argument("--target", choices=(*TARGETS, "all"), default="all")
    parser.add_argument("--inputs", type=int, default=100_000, help="inputs a target")
    parser.add_argument("--seconds", type=int, default=3600, help="at most, a target")
    parser.add_argument("--engine", choices=("atheris", "mutate"), default="atheris")
    parser.add_argument("--sanitized", action="store_true",
                        help="the C module under ASan and UBSan (decode, the mutate engine)")
    parser.add_argument("--vectors", action="store_true",
                        help="every golden vector in every case first (decode, mutate engine)")
    parser.add_argument("--findings", metavar="FILE", help="write the findings here (JSON lines)")
    parser.add_argument("--seed", type=int, default=0, help="the mutate engine's seed")
    parser.add_argument("--worker", choices=TARGETS, help=argparse.SUPPRESS)  # one target
    parser.add_argument("--corpus", help=argparse.SUPPRESS)  # the worker's, the parent's to remove
    return parser


# ---------------------------------------------------------------------------------------------
# The worker: one target in this process


def _atheris_worker(args) -> int:
    """libFuzzer over one target: it prints its statistics on stderr and ends the process."""
    import atheris

    with atheris.instrument_imports(include=INSTRUMENTED):
        from ksp import codec
        from ksp.reference import schema  # noqa: F401 - instrumented before first use
        from ksp import sparql  # noqa: F401
    from .. import fuzz

    check = fuzz.TARGETS[args.worker]
    options = {"c": codec.speedups_enabled()} if args.worker == "decode" else {}
    out = open(args.findings, "a", encoding="utf-8")  # libFuzzer ends the process: no close

    def one_input(data: bytes) -> None:
        for finding in check(data, **options):
            out.write(json.dumps(finding.to_json()) + "\n")
            out.flush()

    for n, seed in enumerate(fuzz.seeds(args.worker)):
        pathlib.Path(args.corpus, f"seed-{n:04d}").write_bytes(seed)
    libfuzzer = [sys.argv[0], args.corpus, f"-runs={args.inputs}", f"-max_total_time={args.seconds}",
                 "-print_final_stats=1", "-max_len=4096", "-timeout=60", "-rss_limit_mb=8192"]
    atheris.Setup(libfuzzer, one_input)
    atheris.Fuzz()
    return 0


def _mutate_worker(args) -> int:
    """The plain mutator over one target; prints the same statistics lines as libFuzzer."""
    from ksp import codec
    from .. import fuzz

    options = {}
    if args.worker == "decode":
        options = {"c": codec.speedups_enabled(), "reference": not args.sanitized}
    inputs = fuzz.mutate_inputs(args.worker, args.inputs, args.seed)
    if args.vectors and args.worker == "decode":
        inputs = (*(i for case in fuzz.vector_cases() for i in fuzz.every_way(case)), *inputs)
    check = fuzz.TARGETS[args.worker]
    count, start = 0, time.perf_counter()
    deadline = start + args.seconds
    with open(args.findings, "a", encoding="utf-8") as out:
        for data in inputs:
            count += 1
            for finding in check(data, **options):
                out.write(json.dumps(finding.to_json()) + "\n")
            if count % 1024 == 0 and time.perf_counter() > deadline:
                break
    seconds = time.perf_counter() - start
    print(f"stat::number_of_executed_units: {count}", file=sys.stderr)
    print(f"stat::average_exec_per_sec: {count / seconds:.0f}", file=sys.stderr)
    print(f"c module: {codec.speedups_enabled()}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------------------------------
# The parent: one worker a target, the table


def _stat(text: str, name: str) -> int | None:
    found = re.findall(rf"stat::{name}:\s+(\d+)", text)
    return int(found[-1]) if found else None


def _coverage(text: str) -> str:
    """The last `cov: N ft: M` libFuzzer printed."""
    found = re.findall(r"cov: (\d+) ft: (\d+)", text)
    return f"{found[-1][0]} / {found[-1][1]}" if found else "–"


def run_target(target: str, args, findings: pathlib.Path, scratch: str) -> dict:
    from .. import fuzz, sanitized

    cmd = [sys.executable, "-m", MODULE, "--worker", target, "--inputs", str(args.inputs),
           "--seconds", str(args.seconds), "--findings", str(findings), "--seed", str(args.seed)]
    env = dict(os.environ)
    engine = "mutate" if args.sanitized else args.engine
    if engine == "mutate":
        cmd.append("--engine=mutate")
    if args.vectors:
        cmd.append("--vectors")
    if args.sanitized:
        runtime = sanitized.sanitizer_runtime()
        if runtime is None:
            raise SystemExit("--sanitized: no gcc with AddressSanitizer's runtime (libasan)")
        build = sanitized.build_sanitized(pathlib.Path(scratch, "sanitized"))
        cmd[1:3] = ["-m", f"{TOOLS}.sanitized", str(build), MODULE]
        cmd.append("--sanitized")
        env = sanitized.sanitized_env(runtime)
    before = findings.stat().st_size if findings.exists() else 0
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ksp-fuzz-corpus-") as corpus:
        proc = subprocess.run([*cmd, "--corpus", corpus], env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    records = []
    if findings.exists():
        with open(findings, encoding="utf-8") as f:
            f.seek(before)
            records = [json.loads(line) for line in f if line.strip()]
    sanitizer = any(report in proc.stderr for report in sanitized.SANITIZER_REPORTS)
    crashed = proc.returncode != 0 or sanitizer
    kinds = [r["kind"] for r in records]
    inputs = _stat(proc.stderr, "number_of_executed_units") or 0
    return {
        "target": target, "engine": engine, "c": "sanitized" if args.sanitized else "built",
        "inputs": inputs,  # libFuzzer's rate, whole inputs/s: 0 for a run under a second
        "per_second": _stat(proc.stderr, "average_exec_per_sec") or round(inputs / seconds),
        "coverage": _coverage(proc.stderr) if engine == "atheris" else "–",
        "disagreements": sum(k != "crash" for k in kinds),
        "precedence": kinds.count("precedence"),
        "crashes": kinds.count("crash") + crashed, "seconds": seconds,
        "stderr": proc.stderr[-4000:] if crashed else "",
    }


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parser(prog).parse_args(argv)
    if args.worker:
        return _atheris_worker(args) if args.engine == "atheris" and not args.sanitized \
            else _mutate_worker(args)
    if args.quick:
        args.inputs = min(args.inputs, 10_000)
    targets = ("decode",) if args.sanitized else TARGETS if args.target == "all" else (args.target,)
    findings = pathlib.Path(args.findings or tempfile.mkstemp(prefix="ksp-fuzz-", suffix=".jsonl")[1])
    with tempfile.TemporaryDirectory(prefix="ksp-fuzz-") as scratch:  # the sanitized build
        rows = [run_target(t, args, findings, scratch) for t in targets]
    headers = ["target", "engine", "C module", "inputs", "inputs/s", "coverage (cov / ft)",
               "disagreements (precedence)", "crashes", "seconds"]
    body = [[r["target"], r["engine"], r["c"], f"{r['inputs']:,}", f"{r['per_second']:,}",
             r["coverage"], f"{r['disagreements']} ({r['precedence']})", str(r["crashes"]),
             f"{r['seconds']:.0f}"] for r in rows]
    env = environment("atheris", "construct")
    print_report("Fuzzing: the decoders' differential and the SPARQL compiler", headers, body,
                 markdown=args.markdown, module=MODULE, prog=prog, argv=argv,
                 libraries=f"{env['python']}, {env['libraries']}; {env['platform']}")
    print(f"\nfindings: {findings}")
    for r in rows:
        if r["stderr"]:
            print(f"\n{r['target']}: the worker failed (exit or sanitizer report):\n{r['stderr']}")
    return 1 if any(r["crashes"] or r["disagreements"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
