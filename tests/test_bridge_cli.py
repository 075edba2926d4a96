"""`ksp-bridge` as a process, in front of a `ksp-sib` (its gate the broker) in another: pointed
at the broker by the JSAP that `ksp-sib jsap` prints; a KP over UDP updates, queries and
subscribes through it; SIGTERM ends the subscription with a TERMINATED IND (--memory) and exits
0; with its journal, a device's persistent operations outlive a restart, clean or SIGKILL."""
from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from rdflib import Literal, URIRef

from ksp import Status
from bridge.testing import UDP_ONLY, BridgeProcess, gate_broker
from sib.testing import SibProcess
from transports import connect

# slow: ksp-bridge and ksp-sib processes
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
S, P = URIRef("http://example.org/s"), URIRef("http://example.org/p")
Q = URIRef("http://example.org/q")


def test_ksp_bridge_from_the_sib_s_jsap(tmp_path):
    with gate_broker() as broker:
        jsap = tmp_path / "broker.jsap"
        jsap.write_text(subprocess.run(
            [sys.executable, "-m", "sib.cli", "jsap", "--sepa-http-port",
             str(broker.ports["http"])], capture_output=True, text=True, check=True,
            cwd=ROOT).stdout)
        bridge = BridgeProcess("--jsap", str(jsap), "--memory", "--udp-port", "0",
                               "--tcp-port", "-1", "--coap-port", "-1")
        try:
            async def kp():
                async with connect(f"udp://127.0.0.1:{bridge.port}") as device:
                    await device.insert_data([(S, P, Literal(1))])
                    async with device.subscribe(f"SELECT ?o WHERE {{ <{S}> <{P}> ?o }}") as sub:
                        first = await asyncio.wait_for(anext(sub), 30)
                        assert [str(r[0]) for r in first.result.rows] == ["1"]
                        await device.insert_data([(S, P, Literal(2))])
                        ind = await asyncio.wait_for(anext(sub), 30)
                        assert sorted(str(r[0]) for r in ind.result.rows) == ["1", "2"]
                        stopped = asyncio.get_running_loop().run_in_executor(None, bridge.stop)
                        with pytest.raises(StopAsyncIteration):  # how a TERMINATED IND ends it
                            await asyncio.wait_for(anext(sub), 30)
                        assert sub.status is Status.TERMINATED
                        return await stopped

            assert asyncio.run(asyncio.wait_for(kp(), 90)) == 0
        finally:
            if bridge.proc.poll() is None:
                bridge.proc.kill()
        log = bridge.log()
        assert f"broker: http://127.0.0.1:{broker.ports['http']}" in log
        assert f"ws://127.0.0.1:{broker.ports['ws']}/subscribe" in log


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_persistent_operations_outlive_a_restart_of_the_bridge(how, tmp_path):
    """A UDP device's subscription and rule, journaled in --data-dir: the bridge stopped
    (SIGTERM: no TERMINATED IND) or killed, then started again on the same port, goes on
    where it was — the next IND numbered on from the last one, the rule firing on a change
    another device makes — and the device never subscribed again."""
    with gate_broker() as broker:
        args = ("--broker", f"http://127.0.0.1:{broker.ports['http']}", "--subscribe",
                f"ws://127.0.0.1:{broker.ports['ws']}/subscribe", "--data-dir",
                str(tmp_path / "data"), "--tcp-port", "-1", "--coap-port", "-1")
        bridges = [BridgeProcess(*args, "--udp-port", "0")]
        url = f"udp://127.0.0.1:{bridges[0].port}"

        def restart() -> int:
            first = bridges[0]
            if how is signal.SIGKILL:
                first.proc.kill()
                first.proc.wait(30)
                status = None
            else:
                status = first.stop()
            bridges.append(BridgeProcess(*args, "--udp-port", str(first.port)))
            return status

        try:
            async def kp():
                async with connect(url) as device:
                    await device.insert_data([(S, P, Literal(1))])
                    async with device.subscribe(f"SELECT ?o WHERE {{ <{S}> <{P}> ?o }}") as sub, \
                            device.subscribe(f"INSERT {{ <{S}> <{Q}> ?o }} "
                                             f"WHERE {{ <{S}> <{P}> ?o }}"):
                        first = await asyncio.wait_for(anext(sub), 30)
                        assert [str(r[0]) for r in first.result.rows] == ["1"]
                        await device.insert_data([(S, P, Literal(2))])
                        before = await asyncio.wait_for(anext(sub), 30)
                        assert sorted(str(r[0]) for r in before.result.rows) == ["1", "2"]
                        status = await asyncio.get_running_loop().run_in_executor(None, restart)
                        assert status in (None, 0) and sub.status is None  # not ended
                        async with connect(url) as other:
                            await other.insert_data([(S, P, Literal(3))])
                            seqs = []
                            while True:  # after a kill, the last state may come again first
                                ind = await asyncio.wait_for(anext(sub), 30)
                                seqs.append(ind.seq)
                                if len(ind.result.rows) == 3:
                                    break
                            assert seqs == sorted(seqs) and seqs[0] == before.seq + 1
                            if how is signal.SIGTERM:  # the last IND was ACKed and journaled
                                assert len(seqs) == 1
                            fired = await other.query(f"SELECT ?o WHERE {{ <{S}> <{Q}> ?o }}")
                            assert sorted(str(r[0]) for r in fired.rows) == ["1", "2", "3"]

            asyncio.run(asyncio.wait_for(kp(), 120))
            assert bridges[-1].stop() == 0
        finally:
            for bridge in bridges:
                if bridge.proc.poll() is None:
                    bridge.proc.kill()
        log = bridges[-1].log()
        assert "2 persistent operations restored" in log, log


def test_pcap_captures_what_the_devices_and_the_bridge_said(tmp_path):
    """`ksp-bridge --pcap FILE`: the device's request and the bridge's RES, as the SIB's
    capture has them (docs/capture.md), readable by `tools.capture_read`."""
    from bridge.testing import BridgedSib
    from ksp import Tx, decode_kp_message, decode_sib_message
    from tools.capture_read import messages

    out = tmp_path / "bridge.pcapng"
    with BridgedSib("--pcap", str(out)) as lab:
        async def kp():
            async with connect(f"udp://127.0.0.1:{lab.port}") as device:
                await device.insert_data([(S, P, Literal(1))])

        asyncio.run(asyncio.wait_for(kp(), 60))
        assert lab.bridge.stop() == 0
    said = messages(str(out), sib_ports={lab.port})
    requests = [decode_kp_message(m.data) for m in said if not m.from_sib]
    answers = [decode_sib_message(m.data) for m in said if m.from_sib]
    assert [r.tx for r in requests if hasattr(r, "tx")] == [Tx.INSERT_DATA]
    assert any(getattr(a, "status", None) is Status.OK for a in answers)
    assert f"capturing to {out}" in lab.bridge.log()


def test_sighup_reloads_the_access_policy(tmp_path):
    """As ksp-sib: SIGHUP re-reads `[access]`; a device's persistent query that the new policy
    does not allow ends with an ACCESS_DENIED IND and its next request is refused; a file that
    cannot be read is said in the log and the policy in force stays."""
    from sib.access import hash_password
    from transports import KspStatusError

    with gate_broker() as broker:
        config = tmp_path / "bridge.toml"

        password_hash = hash_password("pw")

        def write(grants: str) -> None:  # the KP as an inline table, TOML's other spelling
            config.write_text(
                UDP_ONLY + f'[broker]\nurl = "http://127.0.0.1:{broker.ports["http"]}"\n'
                f'subscribe = "ws://127.0.0.1:{broker.ports["ws"]}/subscribe"\n'
                f'[access]\nanonymous = "none"\n'
                f'kp = [{{ id = "dev", password_hash = "{password_hash}", {grants} }}]\n')

        write('read = ["*"], write = ["*"]')
        with BridgeProcess("--config", str(config)) as bridge:
            async def kp():
                async with connect(f"udp://127.0.0.1:{bridge.port}", kp_id="dev",
                                   password="pw") as device:
                    await device.insert_data([(S, P, Literal(1))])
                    async with device.subscribe(f"SELECT ?o WHERE {{ <{S}> <{P}> ?o }}") as sub:
                        await asyncio.wait_for(anext(sub), 30)
                        config.write_text("[access\n")  # a broken file: nothing changes
                        bridge.proc.send_signal(signal.SIGHUP)
                        await device.insert_data([(S, P, Literal(2))])
                        await asyncio.wait_for(anext(sub), 30)
                        write('read = [], write = []')
                        bridge.proc.send_signal(signal.SIGHUP)
                        with pytest.raises(KspStatusError) as ended:
                            await asyncio.wait_for(anext(sub), 30)
                        assert ended.value.status is Status.ACCESS_DENIED
                    with pytest.raises(KspStatusError) as refused:
                        await device.query(f"ASK {{ <{S}> <{P}> ?o }}")
                    assert refused.value.status is Status.ACCESS_DENIED

            asyncio.run(asyncio.wait_for(kp(), 90))
            assert bridge.stop() == 0
        log = bridge.log()
    assert "SIGHUP: configuration not reloaded, the access policy stays" in log
    assert "SIGHUP: access policy reloaded (1 KPs, anonymous none)" in log


def test_a_second_bridge_on_the_same_data_directory_is_refused(tmp_path):
    from sib.cli import lock_data_dir

    held = lock_data_dir(tmp_path, "ksp-bridge")  # as a running ksp-bridge holds it
    try:
        out = subprocess.run([sys.executable, "-m", "bridge.cli", "--broker",
                              "http://127.0.0.1:9", "--data-dir", str(tmp_path), "--udp-port",
                              "0", "--tcp-port", "-1", "--coap-port", "-1"],
                             capture_output=True, text=True, timeout=60, cwd=ROOT)
    finally:
        held.close()
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert f"another ksp-bridge (pid {os.getpid()}) holds the data directory" in out.stderr


@pytest.mark.parametrize("args, said", [
    ((), "--jsap FILE, or --broker URL"),
    (("--jsap", "/nonexistent.jsap"), "/nonexistent.jsap"),
    (("--broker", "http://127.0.0.1:8000", "--udp-port", "70000"), "a port is 0..65535"),
    (("--config", "{dir}/bad.toml"), "unknown key 'urll' in [broker]"),
    (("--config", "{dir}/bad.toml", "--broker", "http://127.0.0.1:8000"),
     "unknown key 'urll' in [broker]"),
    (("--config", "{dir}/zero.toml"), "max_queued = 0: must be above 0"),
    (("--config", "{dir}/missing.toml"), "missing.toml"),
    (("--config", "{dir}/half.toml"), "register and token go together"),
    (("--config", "{dir}/anon.toml"), "anonymous_identity is for a secure broker"),
    (("--config", "{dir}/ca.toml"), "ca_file /nonexistent.pem"),
    (("--config", "{dir}/access.toml"), "[[access.kp]] 'x': password_hash is not"),
    (("--broker", "ftp://127.0.0.1:8000"), "the broker at 'ftp://127.0.0.1:8000': the bridge "
                                            "reaches it at http://HOST[:PORT] or https://"),
    (("--broker", "http://127.0.0.1:8000", "--subscribe", "http://127.0.0.1:9000/subscribe"),
     "subscriptions at 'http://127.0.0.1:9000/subscribe': the bridge reaches it at "
     "ws://HOST[:PORT] or wss://"),
])
def test_configuration_errors_are_one_line(args, said, tmp_path):
    (tmp_path / "bad.toml").write_text('[broker]\nurll = "http://127.0.0.1:8000"\n')
    (tmp_path / "zero.toml").write_text('[broker]\nurl = "http://127.0.0.1:8000"\n'
                                        "[limits]\nmax_queued = 0\n")
    broker = '[broker]\nurl = "https://127.0.0.1:8443/secure"\n'
    (tmp_path / "half.toml").write_text(broker + 'register = "https://127.0.0.1:8443/r"\n')
    (tmp_path / "anon.toml").write_text(broker + 'anonymous_identity = "guest"\n')
    (tmp_path / "ca.toml").write_text(broker + 'ca_file = "/nonexistent.pem"\n')
    (tmp_path / "access.toml").write_text(broker + '[[access.kp]]\nid = "x"\n'
                                          'password_hash = "secret"\n')
    args = [a.format(dir=tmp_path) for a in args]
    out = subprocess.run([sys.executable, "-m", "bridge.cli", *args], capture_output=True,
                         text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 2 and said in out.stderr and "Traceback" not in out.stderr


def test_a_broker_that_does_not_answer_is_said_before_ready(tmp_path):
    """`ksp-bridge --broker` at a port nothing listens on: a warning that the broker does not
    answer comes before "bridge ready" (the bridge still starts: a broker may come after)."""
    from sib.testing import free_port

    url = f"http://127.0.0.1:{free_port('tcp')}"
    with BridgeProcess("--broker", url, "--memory", "--udp-port", "0", "--tcp-port", "-1",
                       "--coap-port", "-1", "--metrics-port", "-1") as bridge:
        lines = bridge.lines
        ready = next(i for i, line in enumerate(lines) if "bridge ready" in line)
        said = [line for line in lines[:ready] if "the broker does not answer" in line]
        assert len(said) == 1 and url in said[0] and "WARNING" in said[0], lines
        assert bridge.stop() == 0


def test_ksp_bridge_from_a_toml_file_with_metrics(tmp_path):
    """The broker and the ports from `--config` (flags still win), and Prometheus metrics: what
    a device did through the bridge shows in the bridge's own figures."""
    import urllib.request

    with gate_broker() as broker:
        config = tmp_path / "bridge.toml"
        config.write_text(f"""
[bridge]
udp_port = 0
tcp_port = -1
coap_port = -1
metrics_port = 0
[broker]
url = "http://127.0.0.1:{broker.ports['http']}"
subscribe = "ws://127.0.0.1:{broker.ports['ws']}/subscribe"
timeout = 5
[limits]
max_persistent_per_kp = 1
""")
        bridge = BridgeProcess("--config", str(config), "--log-level", "debug", "--data-dir",
                               str(tmp_path / "data"))
        try:
            metrics_port = int(re.search(r"metrics on http://[^:]+:(\d+)", bridge.log())[1])

            async def kp():
                async with connect(f"udp://127.0.0.1:{bridge.port}") as device:
                    await device.insert_data([(S, P, Literal(1))])
                    async with device.subscribe(f"SELECT ?o WHERE {{ <{S}> <{P}> ?o }}") as sub:
                        await asyncio.wait_for(anext(sub), 30)
                        await device.insert_data([(S, P, Literal(2))])
                        await asyncio.wait_for(anext(sub), 30)
                        with pytest.raises(Exception, match="LIMIT_EXCEEDED"):
                            async with device.subscribe(f"ASK {{ <{S}> <{P}> ?o }}") as other:
                                await anext(other)

            asyncio.run(asyncio.wait_for(kp(), 90))
            text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics",
                                          timeout=30).read().decode()
            assert bridge.stop() == 0
        finally:
            if bridge.proc.poll() is None:
                bridge.proc.kill()
    figures = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
               if line and not line.startswith("#")}
    assert figures['ksp_requests_total{type="INSERT_DATA"}'] == 2
    assert figures["ksp_bridge_forwarded_total"] >= 3  # two updates, the subscription's query
    assert figures["ksp_bridge_broker_notifications_total"] >= 1
    assert figures["ksp_indications_total"] >= 1
    assert figures["ksp_limit_exceeded_total"] == 1  # the second persistent query
    assert figures["ksp_bridge_broker_socket_up"] == 1
    assert figures["ksp_bridge_persistent_queries"] == 0  # the device ended its query
    assert figures["ksp_bridge_broker_update_seconds_count"] == 2
    assert figures["ksp_update_latency_seconds_count"] == 2


def test_the_example_configuration_loads_and_names_every_key():
    from dataclasses import fields

    from bridge.config import BridgeConfig
    from sib.config import load

    config = load(ROOT / "bridge.example.toml", kind=BridgeConfig)
    assert config == BridgeConfig(broker_url="http://127.0.0.1:8000",
                                  broker_subscribe="ws://127.0.0.1:9000/subscribe",
                                  access={"anonymous": "read-write"})
    text = (ROOT / "bridge.example.toml").read_text()
    docs = (ROOT / "docs" / "bridge.md").read_text()
    for section, keys in BridgeConfig.SECTIONS.items():
        assert f"[{section}]" in text
        for key in keys:
            assert re.search(rf"^{key} = ", text, re.M), key
            assert f"`{key}`" in docs, key
    assert "[access]" in text and "`[access]`" in docs  # the SIB's section, as a whole
    assert len(fields(BridgeConfig)) == sum(map(len, BridgeConfig.SECTIONS.values())) + 1


def test_the_readme_shows_the_bridge_in_three_commands(tmp_path):
    """The README's three commands, as written but for the ports (free ones, appended as
    flags that override its defaults): a broker, the bridge in front of it, a device's update
    that then is at the broker."""
    import json
    import shlex
    import urllib.parse
    import urllib.request

    from sib.testing import free_port

    readme = (ROOT / "README.md").read_text()
    block = re.search(r"## Devices in front of a SEPA broker.*?```sh\n(.*?)```", readme, re.S)[1]
    broker_cmd, bridge_cmd, device_cmd = [shlex.split(line.split("  #")[0])
                                          for line in block.strip().splitlines()]
    http, ws, udp = free_port("tcp"), free_port("tcp"), free_port("udp")
    bin_dir = Path(sys.executable).parent

    def local(cmd: list[str]) -> list[str]:
        return [str(bin_dir / Path(cmd[0]).name)] + [
            a.replace("127.0.0.1:8000", f"127.0.0.1:{http}").replace("127.0.0.1:9000",
                                                                      f"127.0.0.1:{ws}")
            for a in cmd[1:]]

    assert [Path(c[0]).name for c in (broker_cmd, bridge_cmd, device_cmd)] == [
        "ksp-sib", "ksp-bridge", "ksp"]
    broker = SibProcess(*local(broker_cmd)[1:], "--sepa-http-port", str(http),
                        "--sepa-ws-port", str(ws))
    with broker:
        bridge = subprocess.Popen(local(bridge_cmd) + ["--udp-port", str(udp), "--tcp-port",
                                                      "-1", "--coap-port", "-1"],
                                  cwd=tmp_path, stderr=subprocess.PIPE, text=True)
        try:
            for line in bridge.stderr:
                if "bridge ready" in line:
                    break
            done = subprocess.run(local(device_cmd) + ["--sib", f"udp://127.0.0.1:{udp}"],
                                  capture_output=True, text=True, timeout=60, cwd=tmp_path)
            assert done.returncode == 0, done.stderr
            asked = urllib.parse.urlencode({"query": "SELECT ?t WHERE { ?s ?p ?t }"})
            with urllib.request.urlopen(f"http://127.0.0.1:{http}/query?{asked}",
                                        timeout=30) as answer:
                rows = json.loads(answer.read())["results"]["bindings"]
            assert [r["t"]["value"] for r in rows] == ["21.5"]
            bridge.terminate()
            assert bridge.wait(30) == 0
        finally:
            if bridge.poll() is None:
                bridge.kill()
    assert (tmp_path / "ksp-bridge-data").is_dir()  # its journal, where it was started
