"""Answered writes survive a `kill -9` of the SIB process: a child process runs a SIB on an
on-disk store and prints each INSERT DATA's TID once its RES is out; the parent SIGKILLs it
mid-stream, reopens the store and finds every answered insert."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from ksp import DEFAULT_GRAPH
from sib import QuadStore
from sib.testing import ex

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
