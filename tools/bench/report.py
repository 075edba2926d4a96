"""What every benchmark's report shares: the command line (`--quick`, `--markdown`), the exact
command printed under its table (so a table always says what produced it), the tables
themselves (markdown for docs/benchmarks.md, aligned text for a terminal) and the environment."""
from __future__ import annotations

import argparse
import os
import platform
import resource
import shlex
import statistics
import sys
from importlib.metadata import version
from typing import Sequence


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


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A markdown table: the first column left-aligned, the others right-aligned (numbers)."""
    lines = ["| " + " | ".join(headers) + " |",
             "|" + "|".join("---" if i == 0 else "---:" for i in range(len(headers))) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """The same table as aligned text, markdown's `**` stripped."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    fmt = lambda cells: "  ".join(  # noqa: E731
        c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([fmt(headers), fmt(["-" * w for w in widths])]
                     + [fmt([c.replace("**", "") for c in r]) for r in rows])


def environment(*packages: str) -> dict[str, str]:
    """The interpreter, the platform and the installed versions of `packages` (distribution
    names), as each table's footer reports them."""
    return {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "libraries": ", ".join(f"{name} {version(name)}" for name in packages),
    }


def percentile(values: Sequence[float], p: int) -> float:
    """The p-th percentile (1..99) of `values`, inclusive method; one value is its own."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def spread(values: Sequence[float], form: str = ".2f") -> str:
    """min / median / max of `values`: how a figure measured over rounds is reported (on a
    noisy machine, each round against its own baseline)."""
    return " / ".join(format(v, form) for v in (min(values), statistics.median(values),
                                                max(values)))


def print_report(title: str, headers: Sequence[str], body: Sequence[Sequence[str]], *,
                 markdown: bool, module: str, prog: str | None, argv: list[str],
                 libraries: str) -> None:
    """The title and the table; in markdown, the command that produced it and the libraries
    under it (docs/benchmarks.md's form)."""
    if markdown:
        print(title + "\n\n" + markdown_table(headers, body))
        print(f"\nCommand: `{command_line(module, prog, argv)}`  \n{libraries}")
    else:
        print(title + "\n\n" + text_table(headers, body))


def rss_mib(pid: int | str = "self") -> float:
    """Resident memory now of this process (or `pid`'s; Linux: /proc), MiB."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize() / 2**20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
