"""A `ksp-sib` (a real process) whose data directory's disk fills: writes are refused with
0x07 (SEPA: 503 `disk_full`) and one log line, no traceback; once room is made they succeed
again without a restart, and everything acknowledged — quads and journaled persistent
operations — is there after one. The disk is a small tmpfs the test mounts (root only)."""
from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest
from rdflib import Literal, URIRef

from ksp import IRI, Options, Request, Status, Timing, Triple, Tx, Var
from ksp.codec import UDP, decode_sib_message, encode
from sib.testing import SibProcess
from transports import KspStatusError, connect

# slow: a ksp-sib process on a tmpfs it fills
pytestmark = pytest.mark.slow

EX = "http://example.org/"
P = URIRef(EX + "p")
FAST = Timing(ack_timeout=0.5, max_retransmit=6)


@pytest.fixture
def small_disk(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(disk)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(path) -> None:
    """Write until the file system is full (1 MiB, then 4 KiB, then byte by byte)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        for size in (1 << 20, 4096, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError:
                pass
    finally:
        os.close(fd)


def sepa_update(port: int, text: str) -> tuple[int, dict]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/update", data=text.encode(),
                                     headers={"Content-Type": "application/sparql-update"})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, {}
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


async def subscribe_and_leave(port: int) -> None:
    """A UDP KP (a raw socket) subscribes to what no write below changes, and goes: its
    persistent query stays in the SIB's journal."""
    request = Request(Tx.SELECT_PERSISTENT, 7, projection=1,
                      where=(Triple(IRI(f"{EX}s0"), IRI(str(P)), Var(0)),))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as kp:
        kp.bind(("127.0.0.1", 0))
        kp.setblocking(False)
        loop = asyncio.get_running_loop()
        await loop.sock_sendto(kp, encode(request, UDP), ("127.0.0.1", port))
        res = decode_sib_message(await asyncio.wait_for(loop.sock_recv(kp, 65536), 30), UDP,
                                 Tx.SELECT)
        if res.status == Status.ECHO_REQUIRED:  # a new address (wire format 14): as a board does
            request = request._replace(tid=8, options=Options(echo=res.result))
            await loop.sock_sendto(kp, encode(request, UDP), ("127.0.0.1", port))
            res = decode_sib_message(await asyncio.wait_for(loop.sock_recv(kp, 65536), 30),
                                     UDP, Tx.SELECT)
        assert res.status == Status.OK


def subject(i: int) -> URIRef:
    return URIRef(f"{EX}s{i}")


def test_a_full_disk_refuses_writes_then_they_succeed_again_without_a_restart(small_disk):
    data = str(small_disk / "data")
    args = ("--data-dir", data, "--udp-port", "0", "--tcp-port", "0", "--coap-port", "-1",
            "--sepa-http-port", "0")
    acknowledged = set()
    with SibProcess(*args) as sib:
        udp, tcp = f"udp://127.0.0.1:{sib.ports['udp']}", f"tcp://127.0.0.1:{sib.ports['tcp']}"
        http = sib.ports["http"]

        async def before(kp):
            for i in range(10):
                await kp.insert_data([(subject(i), P, Literal("x" * 100))])
                acknowledged.add(subject(i))

        async def full(kp, n: int) -> list:
            """`n` inserts on the full disk: the status of each."""
            statuses = []
            for i in range(100, 100 + n):
                try:
                    await kp.insert_data([(subject(i), P, Literal("y" * 2000))])
                    acknowledged.add(subject(i))  # a write that still fit
                    statuses.append(Status.OK)
                except KspStatusError as exc:
                    statuses.append(exc.status)
            return statuses

        async def after(kp):
            deadline = time.monotonic() + 60
            while True:  # the store reopens at a write once there is room again
                try:
                    await kp.insert_data([(subject(200), P, Literal("z"))])
                    break
                except KspStatusError as exc:
                    assert exc.status == Status.INTERNAL_ERROR
                    assert time.monotonic() < deadline, "writes still refused after the disk emptied"
                    await asyncio.sleep(0.2)
            acknowledged.add(subject(200))
            for i in range(201, 205):
                await kp.insert_data([(subject(i), P, Literal("z"))])
                acknowledged.add(subject(i))

        async def scenario():
            async with await connect(udp, timing=FAST) as watcher, await connect(tcp) as kp:
                await before(kp)
                async with watcher.subscribe(f"SELECT ?s WHERE {{ ?s <{P}> ?o }}"):
                    pass  # ended (TERMINATE): out of the journal
                await subscribe_and_leave(sib.ports["udp"])  # journaled, kept
                fill(small_disk / "filler")
                statuses = await full(kp, 30)
                status, body = await asyncio.to_thread(
                    sepa_update, http, f"INSERT DATA {{ <{EX}sepa> <{P}> 1 }}")
                os.unlink(small_disk / "filler")
                await after(kp)
                return statuses, status, body

        statuses, status, body = asyncio.run(asyncio.wait_for(scenario(), 120))
        assert statuses[-20:] == [Status.INTERNAL_ERROR] * 20, statuses
        assert (status, body["error"]) == (503, "disk_full"), body
        log = sib.log()
        assert "Traceback" not in log
        refusals = [line for line in log.splitlines() if "No space left" in line]
        assert 1 <= len(refusals) <= 3, refusals
        assert "writable again" in log
        assert sib.stop() == 0
    with SibProcess(*args) as sib:
        async def check():
            async with await connect(f"tcp://127.0.0.1:{sib.ports['tcp']}") as kp:
                rows = await kp.query(f"SELECT ?s WHERE {{ ?s <{P}> ?o }}")
                return {row[0] for row in rows.rows}

        assert asyncio.run(asyncio.wait_for(check(), 60)) == acknowledged
        assert "1 persistent operations restored" in sib.log()
        assert sib.stop() == 0
