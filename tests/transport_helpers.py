"""Helpers for the loopback transport tests: running a coroutine with leak checks, a TLS
certificate made by the `openssl` CLI, and a server of any transport around a MemoryService."""
from __future__ import annotations

import asyncio
import contextlib
import gc
import ssl
import subprocess
import warnings
from pathlib import Path

from ksp import Timing
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
