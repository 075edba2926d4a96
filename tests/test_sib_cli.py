"""`ksp-sib` as a real subprocess: real clients over UDP and TCP, SIGTERM, restart on the same
data directory; persistent operations that survive the restart; the metrics endpoint; config."""
from __future__ import annotations

import asyncio
import signal
import subprocess
import sys

import pytest
from rdflib import Literal, URIRef

from ksp import Timing
from sib.testing import SibProcess, free_port, scrape
from transports import connect

# slow: ksp-sib processes
pytestmark = pytest.mark.slow

EX = "http://example.org/"
S, P = URIRef(EX + "s"), URIRef(EX + "p")
SELECT = f"SELECT ?o WHERE {{ <{S}> <{P}> ?o }}"
#: Short retransmission timing for the clients (the SIB side keeps its own).
FAST = Timing(ack_timeout=0.5, max_retransmit=6)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


def values(rows) -> set:
    return {row[0] for row in rows.rows}


def test_serves_udp_tcp_and_coap_shuts_down_cleanly_and_keeps_the_data(tmp_path):
    data = str(tmp_path / "data")
    with SibProcess("--data-dir", data, "--udp-port", "0", "--tcp-port", "0",
                    "--coap-port", "0") as sib:
        assert set(sib.ports) == {"udp", "tcp", "coap"}

        async def talk():
            async with await connect(f"udp://127.0.0.1:{sib.ports['udp']}", timing=FAST) as u, \
                    await connect(f"tcp://127.0.0.1:{sib.ports['tcp']}") as t, \
                    await connect(f"coap://127.0.0.1:{sib.ports['coap']}") as c:
                await u.insert_data([(S, P, Literal(1))])
                await t.insert_data([(S, P, Literal(2))])
                assert values(await t.query(SELECT)) == {Literal(1), Literal(2)}
                assert values(await u.query(SELECT)) == {Literal(1), Literal(2)}
                assert values(await c.query(SELECT)) == {Literal(1), Literal(2)}

        run(talk())
        assert sib.stop() == 0
        assert "connected over udp" in sib.log() and "connected over tcp" in sib.log()
        assert "store flushed" in sib.log()
    with SibProcess("--data-dir", data, "--udp-port", "0", "--tcp-port", "-1",
                    "--coap-port", "-1") as sib:
        async def check():
            async with await connect(f"udp://127.0.0.1:{sib.ports['udp']}", timing=FAST) as u:
                return values(await u.query(SELECT))

        assert run(check()) == {Literal(1), Literal(2)}
        assert sib.stop(signal.SIGINT) == 0


@pytest.mark.parametrize("kp_id", [None, "sleepy-sensor"])
def test_udp_subscription_survives_a_restart(tmp_path, kp_id):
    """A KP (same socket, same TIDs: a sleeping device) subscribed before the restart gets an
    IND for an insert made after it — numbered on, so its session takes it as new."""
    data, port = str(tmp_path / "data"), free_port()
    args = ("--data-dir", data, "--udp-port", str(port), "--tcp-port", "-1", "--coap-port", "-1")

    async def scenario(procs: list[SibProcess]):
        procs.append(SibProcess(*args))
        async with await connect(f"udp://127.0.0.1:{port}", kp_id=kp_id, timing=FAST) as kp:
            async with kp.subscribe(SELECT) as sub:
                first = await anext(sub)
                assert first.result.rows == ()
                await kp.insert_data([(S, P, Literal(1))])
                before = await asyncio.wait_for(anext(sub), 60)
                assert values(before.result) == {Literal(1)}
                assert await asyncio.to_thread(procs[0].stop) == 0
                assert "TERMINATED" not in procs[0].log()
                procs.append(sib2 := await asyncio.to_thread(SibProcess, *args))
                assert "1 persistent operations restored" in sib2.log()
                async with await connect(f"udp://127.0.0.1:{port}", timing=FAST) as other:
                    await other.insert_data([(S, P, Literal(2))])
                after = await asyncio.wait_for(anext(sub), 60)
                assert values(after.result) == {Literal(1), Literal(2)}
                assert after.seq == before.seq + 1
            # leaving the block TERMINATEd it on the restarted SIB
        assert await asyncio.to_thread(sib2.stop) == 0
        assert "persistent operation ended" in sib2.log()

    procs: list[SibProcess] = []
    try:
        run(scenario(procs))
    finally:
        for p in procs:
            p.__exit__()


def test_metrics_endpoint_over_http(tmp_path):
    with SibProcess("--memory", "--udp-port", "0", "--tcp-port", "0", "--coap-port", "-1",
                    "--metrics-port", "0") as sib:
        async def scenario():
            async with await connect(f"udp://127.0.0.1:{sib.ports['udp']}", timing=FAST) as kp:
                async with kp.subscribe(SELECT) as sub:
                    await anext(sub)
                    await kp.insert_data([(S, P, Literal(1))])
                    await asyncio.wait_for(anext(sub), 60)
                    text = await scrape(sib.ports["metrics"])
            return text

        text = run(scenario())
        assert sib.stop() == 0
    lines = text.splitlines()
    # the official client's text format (prometheus_client): values as floats
    assert 'ksp_requests_total{type="SELECT_PERSISTENT"} 1.0' in lines
    assert 'ksp_requests_total{type="INSERT_DATA"} 1.0' in lines
    assert "ksp_persistent_operations 1.0" in lines
    assert "ksp_indications_total 1.0" in lines
    assert "ksp_update_latency_seconds_count 1.0" in lines
    assert "ksp_notification_latency_seconds_count 1.0" in lines
    assert '# TYPE ksp_update_latency_seconds histogram' in lines
    assert any(line.startswith("ksp_ind_retransmissions_total ") for line in lines)
    # the process's own: memory, descriptors; the TCP listener's connections
    assert any(line.startswith("process_resident_memory_bytes ") for line in lines)
    assert any(line.startswith("process_open_fds ") for line in lines)
    assert "ksp_tcp_connections 0.0" in lines and "ksp_tcp_buffered_bytes 0.0" in lines


def test_config_file_flags_override_and_bad_config_exits_2(tmp_path):
    conf = tmp_path / "sib.toml"
    conf.write_text('[sib]\nmemory = true\nudp_port = 0\ntcp_port = -1\ncoap_port = -1\n'
                    'metrics_port = 0\n[limits]\nmax_queued = 5\n')
    with SibProcess("--config", str(conf), "--metrics-port", "-1") as sib:
        assert set(sib.ports) == {"udp"}  # the flag turned metrics off
        assert sib.stop() == 0
    bad = tmp_path / "bad.toml"
    bad.write_text("[sib]\nudp_prot = 7000\n")
    out = subprocess.run([sys.executable, "-m", "sib.cli", "--config", str(bad)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "udp_prot" in out.stderr


def test_example_config_loads():
    from sib.config import load

    config = load("sib.example.toml")
    assert config.udp_port == 7000
    policy = config.access_policy()
    assert len(policy.kps) == 0  # no account: its password would be in the file's history
    # anonymous clients read one public graph, nothing else (a safe copy for a deployment)
    grant = policy.anonymous_grant()
    assert grant.allows("read", ["http://example.org/public"])
    assert not grant.allows("read", ["default"]) and not grant.allows("read", ["*"])
    assert not grant.allows("write", ["http://example.org/public"])


@pytest.mark.slow
def test_the_example_config_has_no_account_a_reader_of_the_docs_could_use():
    """`ksp-sib --config sib.example.toml` (a real process): the account the example once
    shipped, with the password its comment printed, gets nothing; anonymous clients read the
    public graph only."""
    from pathlib import Path

    from transports import KspStatusError

    async def main(port: int) -> None:
        url = f"udp://127.0.0.1:{port}"
        async with connect(url, kp_id="greenhouse-autocontrol", password="greenhouse") as kp:
            with pytest.raises(KspStatusError):
                await kp.query("SELECT * WHERE { ?s ?p ?o }")
        async with connect(url) as anonymous:
            with pytest.raises(KspStatusError):
                await anonymous.query("SELECT * WHERE { ?s ?p ?o }")
            await anonymous.query("SELECT * FROM <http://example.org/public> WHERE { ?s ?p ?o }")

    example = Path(__file__).resolve().parent.parent / "sib.example.toml"
    with SibProcess("--config", str(example), "--memory", "--udp-port", "0", "--tcp-port", "-1",
                    "--coap-port", "-1", "--metrics-port", "-1") as sib:
        asyncio.run(asyncio.wait_for(main(sib.ports["udp"]), 60))
        assert sib.stop() == 0


def test_hash_password_subcommand():
    from sib.access import verify_password

    out = subprocess.run([sys.executable, "-m", "sib.cli", "hash-password"], input="s3cret\n",
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    stored = out.stdout.strip()
    assert stored.startswith("scrypt$") and "s3cret" not in stored
    assert verify_password("s3cret", stored) and not verify_password("s3cret!", stored)


def test_kill_9_mid_stream_loses_no_answered_insert_over_udp(tmp_path):
    """CON inserts over UDP from the real client; SIGKILL once 200 have been answered (more are
    in flight); every answered insert is in the store the restarted SIB serves."""
    data = str(tmp_path / "data")
    args = ("--data-dir", data, "--udp-port", "0", "--tcp-port", "-1", "--coap-port", "-1")
    answered: list[int] = []
    with SibProcess(*args) as sib:
        async def stream():
            async with await connect(f"udp://127.0.0.1:{sib.ports['udp']}",
                                     timing=Timing(ack_timeout=0.5, max_retransmit=1)) as kp:
                async def one(k: int):
                    await kp.insert_data([(S, P, Literal(k))])
                    answered.append(k)

                k = 0
                while len(answered) < 200:
                    await asyncio.gather(*(one(k + i) for i in range(8)))
                    k += 8
                pending = [asyncio.ensure_future(one(k + i)) for i in range(8)]
                await asyncio.sleep(0)  # sent, not answered
                sib.proc.kill()
                await asyncio.gather(*pending, return_exceptions=True)

        run(stream())
        assert sib.proc.wait(60) == -signal.SIGKILL
    with SibProcess(*args) as sib:
        async def check():
            async with await connect(f"udp://127.0.0.1:{sib.ports['udp']}", timing=FAST) as u:
                return values(await u.query(SELECT))

        stored = {int(v) for v in run(check())}
        assert sib.stop() == 0
    assert len(answered) >= 200 and set(answered) <= stored


def test_steady_heap_gives_big_blocks_mappings_of_their_own_under_glibc():
    """`ksp-sib` sets glibc's mmap threshold at start (`sib.lifecycle.steady_heap`), so its
    heap does not creep as big tables are replaced; elsewhere nothing is changed."""
    import platform

    from sib.lifecycle import steady_heap

    assert steady_heap() is (sys.platform.startswith("linux")
                             and platform.libc_ver()[0] == "glibc")
