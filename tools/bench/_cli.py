"""What every benchmark's command line shares: `--quick` and `--markdown`, and the exact command
printed under its table (so a table always says what produced it)."""
from __future__ import annotations

import argparse
import os
import shlex
import sys


def bench_parser(module: str, doc: str, prog: str | None, quick: str) -> argparse.ArgumentParser:
    """A parser for `python -m <module>` (or `prog`, e.g. ``ksp bench codec``) with `--quick`
    (its help: `quick`) and `--markdown`."""
    parser = argparse.ArgumentParser(prog=prog or f"python -m {module}",
                                     description=doc.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument("--markdown", action="store_true",
                        help="print the markdown table for docs/benchmarks.md")
    return parser


def command_line(module: str, prog: str | None, argv: list[str]) -> str:
    """`prog` plus `argv`; by default ``<python> -m <module>``, the interpreter as a path
    relative to here when it lies below (``.venv/bin/python``)."""
    if prog:
        return shlex.join([*shlex.split(prog), *argv])
    python = sys.executable
    rel = os.path.relpath(python)
    if not rel.startswith(".."):
        python = rel if os.sep in rel else f".{os.sep}{rel}"
    return shlex.join([python, "-m", module, *argv])
