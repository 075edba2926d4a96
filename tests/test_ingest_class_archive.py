"""The Spark driver's class archive (`spark_ingest.class_archive`): one start at a time makes
it, a finished one is taken by the next start, archives of other JVMs or Spark versions are
pruned; and with a real JVM, the first start writes it at its exit, the next maps it, and one
the JVM refuses is removed while the job runs on without it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from spark_ingest import class_archive
from spark_ingest.testing import until

ROOT = Path(__file__).resolve().parent.parent


def dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_one_start_makes_the_archive_the_next_takes_it(tmp_path):
    assert class_archive.prepare("off") is None
    assert class_archive.prepare(tmp_path, make=False) is None and not any(tmp_path.iterdir())
    maker = class_archive.prepare(tmp_path)
    assert maker is not None and not maker.reading
    assert f"-XX:ArchiveClassesAtExit={maker.path}.partial" in maker.option
    assert class_archive.prepare(tmp_path) is None  # the lock is ours, and we live
    maker.started(jvm_pid=dead_pid())
    # Its process and JVM gone with the archive written: the next start renames and maps it.
    maker.lock.write_text(f"{dead_pid()} {dead_pid()}\n")
    Path(f"{maker.path}.partial").write_bytes(b"archive")
    reader = class_archive.prepare(tmp_path)
    assert reader is not None and reader.reading and reader.path == maker.path
    assert reader.option.startswith(f"-XX:SharedArchiveFile={maker.path} ")
    assert [p.name for p in tmp_path.iterdir()] == [maker.path.name]


def test_an_archive_left_unfinished_is_made_again(tmp_path):
    first = class_archive.prepare(tmp_path)
    first.lock.write_text(f"{dead_pid()} 0\n")  # gone before its JVM was known
    Path(f"{first.path}.partial").write_bytes(b"half")
    again = class_archive.prepare(tmp_path)
    assert again is not None and not again.reading
    assert not Path(f"{first.path}.partial").exists() and again.lock.is_file()


def test_archives_of_other_versions_are_pruned(tmp_path):
    for k in range(4):
        old = tmp_path / f"spark-driver-old{k}.jsa"
        old.write_bytes(b"x")
        os.utime(old, (1_000 + k, 1_000 + k))
    maker = class_archive.prepare(tmp_path)
    kept = sorted(p.name for p in tmp_path.glob("spark-driver-*.jsa"))
    assert kept == [f"spark-driver-old{k}.jsa" for k in range(4 - class_archive.KEEP + 1, 4)]
    assert maker.lock.is_file()


START = """
import logging, sys
from pathlib import Path
logging.basicConfig(level="INFO")
from spark_ingest.cli import spark_session
spark = spark_session("local[1]", "class-archive", apart=True, class_cache=sys.argv[1])
jvm = spark.sparkContext._gateway.proc.pid
maps = Path(f"/proc/{jvm}/maps").read_text()
print("mapped" if sys.argv[1] in maps else "not mapped", spark.range(7).count(), jvm, flush=True)
spark.stop()
"""


def start(directory: Path) -> tuple[str, str]:
    """A Spark session in a process of its own: what it printed, and its log."""
    done = subprocess.run([sys.executable, "-c", START, str(directory)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout, done.stderr


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.spark
@pytest.mark.slow  # three JVMs
def test_a_real_jvm_writes_the_archive_at_its_exit_and_the_next_maps_it(tmp_path):
    said, log = start(tmp_path)
    assert said.startswith("not mapped 7 ") and "classes go into" in log
    jvm = int(said.split()[-1])
    until(lambda: not alive(jvm), 600, "the first JVM's exit (it writes the archive)")
    said, log = start(tmp_path)
    assert said.startswith("mapped 7 "), (said, log[-2000:])
    archive = next(tmp_path.glob("spark-driver-*.jsa"))
    assert archive.stat().st_size > 10_000_000 and "did not use" not in log
    archive.chmod(0o644)
    archive.write_bytes(os.urandom(1 << 20))  # damaged (or made by another JVM's build)
    said, log = start(tmp_path)
    assert said.startswith("not mapped 7 ")  # the job ran on without it
    assert f"did not use the class archive {archive}" in log and not archive.exists()
