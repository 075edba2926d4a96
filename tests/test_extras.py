"""The base install (no extra) carries the protocol core and the KP client: with every extra's
package unimportable, a KP still talks KSP over UDP and TCP to a server on loopback."""
from __future__ import annotations

import pathlib
import subprocess
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXTRA_ONLY = ("aiocoap", "pyoxigraph", "paho", "matplotlib", "pyspark", "mpremote")

PROGRAM = r'''
import asyncio, importlib.abc, sys

BLOCKED = set(sys.argv[1].split(","))

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is not in the base install")
        return None

sys.meta_path.insert(0, Block())
sys.path.insert(0, "tests")

import ksp, ksp.sparql, ksp.reference.explain, transports
from ksp import IRI, Literal, Triple
from transports import Server, connect
from memory_service import MemoryService

async def main():
    server = await Server.start(MemoryService(answer_later=False), udp=0, tcp=0)
    try:
        for scheme, port in (("udp", server.udp.port), ("tcp", server.tcp.port)):
            async with await connect(f"{scheme}://127.0.0.1:{port}") as kp:
                s = IRI("http://example.org/" + scheme)
                await kp.update(ksp.compile_sparql(
                    f"INSERT DATA {{ <{s}> <http://example.org/p> 1 }}"))
                print(scheme, await kp.query(f"ASK {{ <{s}> ?p ?o }}"))
    finally:
        await server.close()
    try:
        transports.CoapServer
    except ImportError as exc:
        print("coap:", exc)

asyncio.run(main())
print(sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED))
'''


def test_base_dependencies_leave_the_extras_out():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = " ".join(project["dependencies"])
    for name in ("aiocoap", "pyoxigraph", "paho-mqtt", "matplotlib", "pyspark", "mpremote"):
        assert name not in base, name
    extras = project["optional-dependencies"]
    assert {"sib", "coap", "bench", "firmware", "spark", "bridge", "test"} <= set(extras)
    assert any(r.startswith("paho-mqtt") for r in extras["bench"])


def test_the_kp_client_works_without_any_extra():
    proc = subprocess.run([sys.executable, "-c", PROGRAM, ",".join(EXTRA_ONLY)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:2] == ["udp True", "tcp True"]
    assert lines[2] == "coap: aiocoap is not in the base install"
    assert lines[3] == "[]"
