"""The C module (ksp/_speedups.c) built with AddressSanitizer and UBSan, and a Python to run it.

`build_sanitized(dest)` compiles it with `SANITIZE` (no check left out, none recovering: the
first report ends the process); `sanitized_env(runtime)` is the environment that loads it into
the uninstrumented interpreter (the ASan runtime preloaded). `python -m tools.sanitized FILE
MODULE ARGS...` makes FILE the `ksp._speedups` that `ksp.codec` loads, then runs MODULE as
`python -m MODULE ARGS...` would: the suite's sanitized run (tests/test_fuzz.py) and `ksp bench
fuzz --sanitized` run `tools.fuzz` and the benchmark's worker so. Nothing of ksp is imported at
the top of this module, so that the module given is the one loaded.
"""
from __future__ import annotations

import os
import pathlib
import runpy
import shutil
import subprocess
import sys
import sysconfig

ROOT = pathlib.Path(__file__).resolve().parent.parent
SANITIZE = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all")
#: What a sanitizer writes when it finds something (ASan's, then UBSan's).
SANITIZER_REPORTS = ("ERROR: AddressSanitizer", "runtime error:")


def sanitizer_runtime(cc: str = "gcc") -> str | None:
    """The ASan runtime a sanitized extension needs preloaded into an uninstrumented Python,
    or None (no compiler, or one without it)."""
    if shutil.which(cc) is None:
        return None
    try:
        out = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True,
                             text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out if os.path.isabs(out) and os.path.exists(out) else None


def build_sanitized(dest: pathlib.Path, cc: str = "gcc") -> pathlib.Path:
    """ksp/_speedups.c compiled with `SANITIZE` into `dest`, its header written beside it from
    the layout table as setup.py writes it; returns the module's file. CalledProcessError, with
    the compiler's messages, when it fails."""
    from ksp import layout, model

    dest.mkdir(parents=True, exist_ok=True)
    (dest / "_layout.h").write_text(layout.c_header(model.Request._fields, model.Response._fields,
                                                    model.Ack._fields))
    source = dest / "_speedups.c"  # beside its header: `#include "_layout.h"` looks there first
    shutil.copyfile(ROOT / "ksp" / "_speedups.c", source)
    target = dest / ("_speedups" + sysconfig.get_config_var("EXT_SUFFIX"))
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-g", "-fno-omit-frame-pointer", *SANITIZE,
                    "-Wall", "-Wno-unused-function", f"-I{sysconfig.get_paths()['include']}",
                    str(source), "-o", str(target)],
                   check=True, capture_output=True, text=True, timeout=300)
    return target


def sanitized_env(runtime: str) -> dict[str, str]:
    """The environment of a Python running a sanitized module: the ASan runtime first, leaks
    not reported (the interpreter keeps its objects at exit), every allocation through malloc
    so that ASan sees Python objects' bounds, UBSan's reports with their stacks."""
    env = dict(os.environ, LD_PRELOAD=runtime, PYTHONMALLOC="malloc",
               ASAN_OPTIONS="detect_leaks=0:abort_on_error=1",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    env.pop("KSP_PURE_PYTHON", None)
    return env


def load_speedups(path: str) -> None:
    """Make the module file `path` the `ksp._speedups` that ksp.codec loads (before ksp is
    imported)."""
    import importlib.util

    if "ksp" in sys.modules:
        raise RuntimeError("load_speedups must run before ksp is imported")
    spec = importlib.util.spec_from_file_location("ksp._speedups", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["ksp._speedups"] = module
    spec.loader.exec_module(module)


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        raise SystemExit("usage: python -m tools.sanitized FILE MODULE [ARGS...]")
    path, module, *rest = argv
    load_speedups(path)
    sys.argv = [module, *rest]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
