"""`ksp-sib jsap`: the running SIB's JSAP, used unchanged by sepa-js's JSAP
API and by the Python client, which finds the SIB's KSP listener in it."""
from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sib.testing import SibProcess
from transports.client import connect
from transports.jsap import Jsap, JsapError

# slow: ksp-sib and sepa-js (Node) processes
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
GH = "http://example.org/gh#"
APP = {
    "namespaces": {"gh": GH},
    "queries": {"TEMP": {"sparql": "SELECT ?v WHERE { ?sensor gh:temp ?v }",
                         "forcedBindings": {"sensor": {"type": "uri"}}}},
    "updates": {"SET_TEMP": {"sparql": "DELETE { ?sensor gh:temp ?old } "
                                       "INSERT { ?sensor gh:temp ?value } "
                                       "WHERE { OPTIONAL { ?sensor gh:temp ?old } }",
                             "forcedBindings": {"sensor": {"type": "uri"},
                                                "value": {"type": "literal"}}}},
}


def jsap(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "sib.cli", "jsap", *args],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    if check:
        assert out.returncode == 0, out.stderr
    return out


@pytest.fixture(scope="module")
def sib(tmp_path_factory):
    config = tmp_path_factory.mktemp("jsap") / "sib.toml"
    config.write_text('[sepa]\nnamespaces = { dev = "http://example.org/devices#" }\n')
    with SibProcess("--config", str(config), "--memory", "--udp-port", "0", "--tcp-port", "0",
                    "--coap-port", "-1", "--sepa-http-port", "0", "--sepa-ws-port", "0") as s:
        s.config = config
        yield s


def test_the_jsap_describes_the_running_sib(sib):
    """Ports as bound (0 in the configuration), SEPA's paths, the namespaces of `[sepa]` beside
    the standard ones, the KSP listeners as URLs; `--name` for a host other than the address."""
    printed = json.loads(jsap("--config", str(sib.config), "--sepa-http-port",
                              str(sib.ports["http"])).stdout)
    assert printed["host"] == "127.0.0.1"
    assert printed["oauth"] == {"enable": False}  # no secure mode
    assert printed["sparql11protocol"] == {
        "protocol": "http", "port": sib.ports["http"],
        "query": {"path": "/query", "method": "POST", "format": "JSON"},
        "update": {"path": "/update", "method": "POST", "format": "JSON"}}
    assert printed["sparql11seprotocol"] == {
        "protocol": "ws",
        "availableProtocols": {"ws": {"port": sib.ports["ws"], "path": "/subscribe"}}}
    assert printed["namespaces"]["dev"] == "http://example.org/devices#"
    assert printed["namespaces"]["rdf"] == "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
    assert printed["extended"]["ksp"] == {"udp": f"udp://127.0.0.1:{sib.ports['udp']}",
                                          "tcp": f"tcp://127.0.0.1:{sib.ports['tcp']}"}
    assert (printed["queries"], printed["updates"]) == ({}, {})
    named = json.loads(jsap("--config", str(sib.config), "--sepa-http-port",
                            str(sib.ports["http"]), "--name", "gateway.local").stdout)
    assert named["host"] == "gateway.local"
    assert named["extended"]["ksp"]["udp"] == f"udp://gateway.local:{sib.ports['udp']}"


def test_sepa_js_and_the_python_client_use_the_printed_jsap(sib, tmp_path):
    """The application's JSAP merged with the SIB's (`--merge`): sepa-js's JSAP API runs its
    named update, query and subscription unchanged; then the Python client, given only that
    file, finds the SIB over KSP and uses the same aliases."""
    if shutil.which("node") is None or not (ROOT / "node_modules/@arces-wot/sepa-js").is_dir():
        pytest.fail("node and npm's @arces-wot/sepa-js are installed by scripts/_env.sh")
    app = tmp_path / "app.jsap"
    app.write_text(json.dumps(APP))
    merged = tmp_path / "greenhouse.jsap"
    merged.write_text(jsap("--config", str(sib.config), "--sepa-http-port",
                           str(sib.ports["http"]), "--merge", str(app)).stdout)
    data = json.loads(merged.read_text())
    assert set(data["queries"]) == {"TEMP"} and set(data["updates"]) == {"SET_TEMP"}
    assert data["namespaces"]["gh"] == GH and data["namespaces"]["dev"]

    out = subprocess.run(["node", str(ROOT / "tests/sepajs/jsap.js"), str(merged)],
                         capture_output=True, text=True, timeout=120)
    steps = {s.pop("step"): s for s in map(json.loads, out.stdout.splitlines())}
    assert out.returncode == 0, (out.stdout, out.stderr)
    assert steps["update"] == {"status": 200}
    assert steps["query"] == {"values": ["20"]}
    assert steps["subscribed"] == {"sequence": 0, "added": ["20"]}
    assert steps["notification"] == {"added": ["21"], "removed": ["20"]}

    async def python_client():
        async with connect(jsap=str(merged)) as kp:  # no URL: extended.ksp.udp
            assert kp.url == f"udp://127.0.0.1:{sib.ports['udp']}"
            (row,) = (await kp.query("TEMP", bindings={"sensor": GH + "s1"})).rows
            assert str(row.v) == "21"
            await kp.update("SET_TEMP", bindings={"sensor": GH + "s1", "value": "22"})
            (row,) = (await kp.query("SELECT ?v WHERE { gh:s1 gh:temp ?v }")).rows
            return str(row.v)

    assert asyncio.run(asyncio.wait_for(python_client(), 60)) == "22"


def test_jsap_errors_are_one_line():
    """No SIB at the configured port (exit 1), a port only the running SIB knows (exit 2), a
    bad application JSAP (exit 2); and a JSAP without `extended.ksp` cannot stand for a URL."""
    out = jsap("--sepa-http-port", "1", check=False)
    assert out.returncode == 1 and "no SIB answers at http://127.0.0.1:1/jsap" in out.stderr
    assert "Traceback" not in out.stderr
    out = jsap("--sepa-http-port", "0", check=False)
    assert out.returncode == 2 and "--sepa-http-port" in out.stderr
    out = jsap("--merge", "/nonexistent.jsap", check=False)
    assert out.returncode == 2 and "/nonexistent.jsap" in out.stderr
    with pytest.raises(JsapError, match="extended.ksp"):
        Jsap(APP).url()
    with pytest.raises(TypeError, match="URL"):
        connect()
