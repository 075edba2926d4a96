"""The driver JVM's class-data archive (JDK AppCDS): the classes Spark loads while it starts,
parsed and verified once, then mapped by every later start.

Why: a Spark driver spends its start loading and verifying some 15,000 classes (Scala
reflection, the SQL function registry, the session catalog). Measured on the 2-core host, a
`local[2]` session to its first job: 12–15 s of JVM CPU and 13–25 s wall without the archive,
6 s of CPU and 6–7 s wall with it (docs/benchmarks.md, "Spark's start").

The first start with no archive asks the JVM to write one when it exits
(`-XX:ArchiveClassesAtExit`, into `NAME.partial`); a later start renames a finished partial
to `NAME` and maps it (`-XX:SharedArchiveFile`). One start at a time makes it: a lock file
holds the pids of the process and of its JVM, and a start that finds the lock held by a live
one runs without an archive. The name carries a digest of the JVM and of Spark's jars, so an
upgraded JDK or pyspark makes a new archive instead of being refused by the old one. The JVM
checks an archive itself and runs without it when it does not fit; `check` finds that out
afterwards (the archive is not among the JVM's mappings) and removes it, so the next start
makes it again.
"""
from __future__ import annotations

import hashlib
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

__all__ = ["OFF", "ClassArchive", "default_directory", "prepare"]

log = logging.getLogger("ksp.ingest")

#: `--class-cache off`: no archive read or written.
OFF = "off"
#: The JVM's notes on the archive (a line per class it leaves out, to its standard output)
#: are not the job's: only its errors are said.
QUIET = "-Xlog:cds*=error"
#: Archives older than the newest of a directory are removed past this many (an upgraded JDK
#: or pyspark leaves its predecessor's, each ~150 MB).
KEEP = 2


def default_directory() -> Path:
    """`$KSP_INGEST_CLASS_CACHE`, else `$XDG_CACHE_HOME/ksp-gateway`, else
    `~/.cache/ksp-gateway`."""
    explicit = os.environ.get("KSP_INGEST_CLASS_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ksp-gateway"


def _java() -> Path | None:
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found else None


def _digest() -> str | None:
    """Of the JVM Spark starts (its binary) and of Spark's jars (names, sizes, times): what
    an archive is valid for."""
    import pyspark

    java = _java()
    jars = Path(pyspark.__file__).resolve().parent / "jars"
    if java is None or not jars.is_dir():
        return None
    h = hashlib.sha256()
    for path in (java, *sorted(jars.iterdir())):
        st = path.stat()
        h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return pid > 0


@dataclass
class ClassArchive:
    """One start's part in the archive: `option` goes on the driver's command line."""

    path: Path
    option: str
    lock: Path | None = None  # held by this start, which writes the archive

    @property
    def reading(self) -> bool:
        return self.lock is None

    def started(self, jvm_pid: int | None) -> None:
        """Record the driver JVM's pid in the lock (it writes the archive at its exit), or,
        when it maps an existing archive, check that it really does."""
        if self.lock is not None:
            self.lock.write_text(f"{os.getpid()} {jvm_pid or 0}\n")
            log.info("the JVM's classes go into %s when it stops (later starts are faster)",
                     self.path)
        elif jvm_pid:
            check(self.path, jvm_pid)


def check(path: Path, jvm_pid: int) -> bool:
    """Whether the JVM `jvm_pid` maps the archive `path`; when it does not (it refused it),
    the archive is removed so that the next start makes a new one."""
    try:
        mapped = str(path) in Path(f"/proc/{jvm_pid}/maps").read_text()
    except OSError:
        return True  # no /proc (or the JVM gone): nothing to tell
    if not mapped:
        log.warning("the JVM did not use the class archive %s; removed, the next start makes "
                    "it again", path)
        path.unlink(missing_ok=True)
    return mapped


def _settle(final: Path, partial: Path, lock: Path) -> bool:
    """A lock left by an earlier start: its archive finished (renamed to `final`) or
    abandoned (removed) once its process and JVM are gone. False while either lives."""
    try:
        pids = [int(p) for p in lock.read_text().split()]
    except (OSError, ValueError):
        pids = []
    if any(_alive(p) for p in pids if p):
        return False
    if len(pids) == 2 and pids[1] and partial.is_file() and partial.stat().st_size:
        partial.replace(final)
    else:
        partial.unlink(missing_ok=True)
    lock.unlink(missing_ok=True)
    return True


def prepare(setting: str | Path | None = None, make: bool = True) -> ClassArchive | None:
    """This start's archive option, or None (`off`, no JVM or pyspark found, the directory
    not writable, another start making the archive right now, or none yet and not `make`: a
    JVM that lives as long as a longer process, such as a session in a test run, would hold
    the lock all that time)."""
    if setting is not None and str(setting) == OFF:
        return None
    directory = Path(setting) if setting is not None else default_directory()
    digest = _digest()
    if digest is None:
        return None
    final = directory / f"spark-driver-{digest}.jsa"
    partial = final.with_name(final.name + ".partial")
    lock = final.with_name(final.name + ".lock")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if lock.exists() and not _settle(final, partial, lock):
            return None  # another start is making it
        if final.is_file():
            return ClassArchive(final, f"-XX:SharedArchiveFile={final} {QUIET}")
        if not make:
            return None
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        os.write(fd, f"{os.getpid()} 0\n".encode())
        os.close(fd)
        _prune(directory, final)
    except FileExistsError:
        return None  # another start took the lock first
    except OSError as exc:
        log.warning("no class archive in %s: %s", directory, exc)
        return None
    return ClassArchive(final, f"-XX:ArchiveClassesAtExit={partial} {QUIET}", lock)


def _prune(directory: Path, keep: Path) -> None:
    """Remove archives of other JVMs or Spark versions beyond the `KEEP` newest."""
    others = sorted((p for p in directory.glob("spark-driver-*.jsa") if p != keep),
                    key=lambda p: p.stat().st_mtime, reverse=True)
    for old in others[KEEP - 1:]:
        old.unlink(missing_ok=True)
