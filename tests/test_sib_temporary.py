"""`ksp-sib --memory` keeps its store in a temporary directory that it deletes at exit. A SIB
killed with SIGKILL cannot: the next temporary store sweeps what such SIBs left
(`sib.store.sweep_abandoned`), never a store that is still open, in this process or another."""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time

import pytest
from rdflib import Literal, URIRef

from ksp import DEFAULT_GRAPH, IRI, Timing
from ksp import Literal as KspLiteral
from sib.store import TEMPORARY_PREFIX, Delta, QuadStore, sweep_abandoned
from sib.testing import SibProcess
from transports import connect

# slow: ksp-sib processes killed with SIGKILL
pytestmark = pytest.mark.slow

EX = "http://example.org/"
S, P = URIRef(EX + "s"), URIRef(EX + "p")
FAST = Timing(ack_timeout=0.5, max_retransmit=6)


def stores(parent) -> set[str]:
    return {n for n in os.listdir(parent) if n.startswith(TEMPORARY_PREFIX)}


def lock_is_held(path: str) -> bool:
    """Asked of another process: a process never conflicts with its own POSIX locks."""
    probe = ("import fcntl, os, sys\n"
             "fd = os.open(sys.argv[1], os.O_RDWR)\n"
             "try:\n    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
             "except OSError:\n    sys.exit(3)\n")
    return subprocess.run([sys.executable, "-c", probe, os.path.join(path, "LOCK")],
                          timeout=60).returncode == 3


def memory_sib() -> SibProcess:
    return SibProcess("--memory", "--udp-port", "0", "--tcp-port", "-1", "--coap-port", "-1")


def test_a_killed_memory_sib_leaves_a_store_that_only_a_dead_owner_loses(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the SIBs' temporary stores go there
    with memory_sib() as first:
        first_store = stores(tmp_path)
        assert len(first_store) == 1
        with memory_sib() as second:
            second_store = stores(tmp_path) - first_store
            assert len(second_store) == 1
            # Both alive: however old, neither is taken for abandoned.
            assert sweep_abandoned(str(tmp_path), min_age=0) == []
            first.kill()  # SIGKILL: nothing of it runs to delete its store
            assert stores(tmp_path) == first_store | second_store
            gone = sweep_abandoned(str(tmp_path), min_age=0)
            assert [os.path.basename(p) for p in gone] == sorted(first_store)
            assert stores(tmp_path) == second_store

            async def use() -> set:
                url = f"udp://127.0.0.1:{second.ports['udp']}"
                async with await connect(url, timing=FAST) as kp:
                    await kp.insert_data([(S, P, Literal(7))])
                    rows = await kp.query(f"SELECT ?o WHERE {{ <{S}> <{P}> ?o }}")
                    return {row[0] for row in rows.rows}

            assert asyncio.run(asyncio.wait_for(use(), 60)) == {Literal(7)}  # unharmed
            assert second.stop() == 0
    assert stores(tmp_path) == set()  # the clean exit deleted its own


def test_a_new_temporary_store_sweeps_only_old_unlocked_stores(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    old = tmp_path / (TEMPORARY_PREFIX + "died-before-opening")  # no LOCK: never opened
    old.mkdir()
    young = tmp_path / (TEMPORARY_PREFIX + "being-opened")  # as old: a SIB may be opening it
    young.mkdir()
    other = tmp_path / "someone-else"
    other.mkdir()
    an_hour_ago = time.time() - 3600
    os.utime(old, (an_hour_ago, an_hour_ago))
    os.utime(other, (an_hour_ago, an_hour_ago))

    mine = QuadStore(temporary=True)
    try:
        assert not old.exists()
        assert young.exists() and other.exists()
        (path,) = stores(tmp_path) - {young.name}
        assert mine.path == str(tmp_path / path)
        # This process's own open store: never probed, so its lock stays held.
        assert sweep_abandoned(str(tmp_path), min_age=0) == [str(young)]
        assert os.path.isdir(mine.path) and lock_is_held(mine.path)
        mine.apply(Delta(added=((IRI(EX + "s"), IRI(EX + "p"), KspLiteral.of(1), DEFAULT_GRAPH),)))
        assert len(mine) == 1
    finally:
        mine.close()
    assert stores(tmp_path) == set() and other.exists()
