"""Helpers for the loopback transport tests: running a coroutine with leak checks, a TLS
certificate made by the `openssl` CLI, a server of any transport around a MemoryService, and
checking what a SIB sent back against what a fuzz test sent it, waiting for a condition."""
from __future__ import annotations

import asyncio
import contextlib
import gc
import ssl
import subprocess
import warnings
from collections import Counter
from pathlib import Path

from ksp import DecodeError, Response, Timing, decode_sib_message, peek_tid
from transports import Server, connect

from memory_service import MemoryService

FAST = Timing(ack_timeout=0.1, ack_random_factor=1.5, max_retransmit=6, max_latency=1.0)
"""Short timeouts so lossy tests take seconds; 6 retransmissions (gives up after ~19 s) keep
them robust on a loaded machine."""

TRANSPORTS = ("udp", "tcp", "tls", "coap")


def run(coro, timeout: float = 120.0):
    """Run `coro` in a fresh loop; fail on leaked tasks or any ResourceWarning (unclosed
    sockets, transports)."""
    async def main():
        try:
            return await asyncio.wait_for(coro, timeout)
        finally:
            await asyncio.sleep(0)  # let closing callbacks run
            leaked = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            assert not leaked, f"leaked tasks: {leaked}"

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        result = asyncio.run(main())
        gc.collect()
    leaks = [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert not leaks, [str(w.message) for w in leaks]
    return result



async def until(predicate, timeout: float = 30.0, what: str = "the condition") -> None:
    """Wait in the running loop until `predicate()` holds; AssertionError naming `what` after
    `timeout` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, f"not reached in {timeout} s: {what}"
        await asyncio.sleep(0.02)


async def closed_by_peer(reader: asyncio.StreamReader, within: float = 10.0) -> bool:
    """Whether the server ends the connection within `within` seconds with nothing (more) to
    say: EOF right away, or a reset (or a broken pipe from a write after its close)."""
    try:
        return await asyncio.wait_for(reader.read(), within) == b""
    except ConnectionError:
        return True


_CERT: tuple[Path, Path] | None = None


def certificate(tmpdir: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1/localhost (made once per test session)."""
    global _CERT
    if _CERT is None:
        cert, key = tmpdir / "cert.pem", tmpdir / "key.pem"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2",
             "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
            check=True, capture_output=True)
        _CERT = (cert, key)
    return _CERT


def tls_contexts(tmpdir: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    cert, key = certificate(tmpdir)
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert, key)
    client = ssl.create_default_context(cafile=str(cert))
    return server, client


@contextlib.asynccontextmanager
async def serving(transport: str, tmpdir: Path, service: MemoryService | None = None,
                  timing: Timing = FAST, **server_args):
    """(service, server, url, connect kwargs) for a server of `transport` on loopback."""
    service = service or MemoryService()
    ports = {"udp": {"udp": 0}, "tcp": {"tcp": 0}, "tls": {"tcp": 0}, "coap": {"coap": 0}}
    client_args: dict = {"timing": timing}
    if transport == "tls":
        server_ctx, client_ctx = tls_contexts(tmpdir)
        server_args["ssl"] = server_ctx
        client_args["ssl"] = client_ctx
    server = await Server.start(service, timing=timing, **ports[transport], **server_args)
    try:
        adapter = server.coap or server.tcp or server.udp
        scheme = {"tls": "tcps"}.get(transport, transport)
        yield service, server, f"{scheme}://127.0.0.1:{adapter.port}", client_args
    finally:
        await server.close()


@contextlib.asynccontextmanager
async def client_of(transport: str, tmpdir: Path, service: MemoryService | None = None,
                    kp_id: str | None = "kp-1", **server_args):
    async with serving(transport, tmpdir, service, **server_args) as (svc, server, url, args):
        async with await connect(url, kp_id=kp_id, password="pw", **args) as kp:
            yield svc, server, kp


def sent_to_sib(messages) -> tuple[dict[int, set], set[int]]:
    """What a fuzz test sends, as `(bytes, Request | None)` (the request when known valid):
    TID -> the transaction types the headers with it named (what an answer may answer), and
    the TIDs of valid CON requests no other message shares (each must get its RES)."""
    from strategies import sent_tx

    named: dict[int, set] = {}
    count: Counter[int] = Counter()
    for data, _ in messages:
        if len(data) >= 4:
            tid = peek_tid(data)
            named.setdefault(tid, set()).add(sent_tx(data))
            count[tid] += 1
    owed = {r.tid for _, r in messages if r is not None and r.confirmable and count[r.tid] == 1}
    return named, owed


def answer_to(data: bytes, named: dict[int, set], transport) -> Response:
    """`data` decoded as a RES or IND to one of the transactions sent with its TID (`named`):
    the SIB names no TID it was not sent, and what it sends decodes."""
    tid = peek_tid(data)
    assert tid in named, f"an answer to TID {tid}, never sent"
    errors = []
    for tx in sorted(named[tid] - {None}, key=int) + [None]:
        try:
            return decode_sib_message(data, transport, answers=tx)
        except DecodeError as exc:
            errors.append(f"{tx}: {exc}")
    raise AssertionError(f"an answer that does not decode: {data[:64].hex()} {errors}")
