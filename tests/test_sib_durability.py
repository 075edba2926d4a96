"""Answered writes survive a `kill -9` of the SIB process: a child process runs a SIB on an
on-disk store and prints each INSERT DATA's TID once its RES is out; the parent SIGKILLs it
mid-stream, reopens the store and finds every answered insert."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from ksp import DEFAULT_GRAPH
from sib import QuadStore
from sib.testing import ex

# slow: processes killed with SIGKILL, round after round
pytestmark = pytest.mark.slow

CHILD = textwrap.dedent("""
    import asyncio, sys
    from ksp import Literal, Request, Triple, Tx
    from sib import QuadStore, Sib
    from sib.testing import Client, ex

    async def main():
        sib = Sib(QuadStore(sys.argv[1]))
        kp = Client(sib)
        for i in range(100000):
            r = await kp.call(Request(Tx.INSERT_DATA, i % 65536, insert=(
                Triple(ex("s"), ex("n"), Literal.of(i)),)))
            assert r.status == 0
            print(i, flush=True)
    asyncio.run(main())
""")


def test_kill_9_loses_no_answered_insert(tmp_path):
    path = str(tmp_path / "db")
    child = subprocess.Popen([sys.executable, "-c", CHILD, path], stdout=subprocess.PIPE,
                             text=True, cwd=os.path.dirname(os.path.dirname(__file__)))
    answered = []
    try:
        for line in child.stdout:
            answered.append(int(line))
            if len(answered) == 300:
                child.send_signal(signal.SIGKILL)
                break
    finally:
        child.kill()
        child.wait(timeout=60)
    assert child.returncode == -signal.SIGKILL
    store = QuadStore(path)
    stored = {q[2].to_python() for q in store.match(ex("s"), ex("n"), None, DEFAULT_GRAPH)}
    assert set(answered) <= stored
    assert len(answered) == 300


LOOP_CHILD = textwrap.dedent("""
    import asyncio, sys
    from ksp import Literal, Request, Triple, Tx
    from sib import QuadStore, Sib
    from sib.testing import Client, ex

    async def main():
        # maintenance every 50 removals: compactions run (and get killed) all the time
        sib = Sib(QuadStore(sys.argv[1], maintain_after=50))
        kp = Client(sib)
        start = int(sys.argv[2])
        started, removed = 0, 0  # maintenances started: each one resets the removed count
        for i in range(start, start + 100000):
            slot = ex(f"slot{i % 20}")  # 20 values replaced over and over: a small store
            r = await kp.call(Request(Tx.UPDATE_DATA, i % 65536,
                delete=(Triple(slot, ex("n"), Literal.of(i - 20)),),
                insert=(Triple(slot, ex("n"), Literal.of(i)),)))
            assert r.status == 0
            started += sib.store.removed < removed
            removed = sib.store.removed
            print(i, started, flush=True)
    asyncio.run(main())
""")


def test_kill_9_loop_with_compactions_loses_no_answered_write(tmp_path):
    """Rounds of: start on the same directory, replace values (20 slots, over and over),
    SIGKILL at a random point — with background compactions running. After every round, each
    slot holds its last answered value (or the one written after it, not yet answered). Every
    line the child printed before it died is an answered write: read to the end, however far
    the child ran ahead of the reading on a busy machine."""
    import random

    rng = random.Random(9)
    rounds = 3 * max(1, int(os.environ.get("KSP_CHAOS_SCALE", "1")))
    path, answered, start, compactions = str(tmp_path / "db"), [], 20, 0
    for _ in range(rounds):
        child = subprocess.Popen([sys.executable, "-c", LOOP_CHILD, path, str(start)],
                                 stdout=subprocess.PIPE, text=True,
                                 cwd=os.path.dirname(os.path.dirname(__file__)))
        stop_after, started = rng.randrange(100, 400), 0
        try:
            for n, line in enumerate(child.stdout, 1):
                if n == stop_after:
                    child.send_signal(signal.SIGKILL)
                if not line.endswith("\n"):
                    break  # cut by the kill: not printed whole, not counted
                i, started = map(int, line.split())
                answered.append(i)
        finally:
            child.kill()
            child.wait(timeout=60)
        compactions += started
        store = QuadStore(path)
        held = {}
        for q in store.match(None, ex("n"), None, DEFAULT_GRAPH):
            held.setdefault(str(q[0]), []).append(q[2].to_python())
        last_answered = {}
        for i in answered:
            last_answered[str(ex(f"slot{i % 20}"))] = i
        for slot, i in last_answered.items():
            (value,) = held[slot]  # exactly one value per slot: no half-applied update
            assert value in (i, i + 20), (slot, value, i)
        start = max(v for vs in held.values() for v in vs) + 1  # the last write applied
        del store
    assert compactions >= 2  # compactions started along the way: kills hit them running
