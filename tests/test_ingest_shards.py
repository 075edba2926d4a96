"""A receiver's shard served to the ingest's driver (`spark_ingest.shards`): signed requests
only, reads and commits that match the local buffer's, bad input answered 400. Real sockets
on loopback, the shard's real SQLite buffer; the end-to-end run with Spark, mosquitto and
kill -9 is in tests/test_ingest.py."""
from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_ingest import shards
from spark_ingest.buffer import Buffer
from spark_ingest.shards import RemoteShard, ShardServer, read_secret

# slow: mosquitto and ksp-ingest-shard processes
pytestmark = pytest.mark.slow

SECRET = b"a-secret-of-enough-bytes"


@contextmanager
def served(directory, messages: int = 0):
    buffer = Buffer(directory)
    if messages:
        buffer.append([(f"ksp/d{i}/telemetry", f"payload {i}".encode() + bytes([i % 256]))
                       for i in range(messages)], now=1000.0)
    server = ShardServer(("127.0.0.1", 0), buffer, SECRET)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        buffer.close()


def status(url: str, method: str = "GET", headers: dict | None = None) -> int:
    request = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_reads_and_commits_match_the_buffer_and_page(tmp_path, monkeypatch):
    monkeypatch.setattr(shards, "PAGE", 7)  # so that one read takes several requests
    with served(tmp_path, 40) as (server, url):
        remote, local = RemoteShard(url, SECRET), server.buffer
        assert (remote.last(), remote.committed()) == (40, 0)
        assert list(remote.read(3, 30)) == list(local.read(3, 30))  # bytes kept exactly
        assert len(list(remote.read(0, 40))) == 40
        remote.commit(25)
        remote.commit(10)  # a late or replayed commit moves nothing back
        assert (local.committed(), len(local)) == (25, 15)
        assert remote.backlog()[0] == 15 and remote.backlog()[1] > 0


def test_only_signed_requests_get_an_answer(tmp_path):
    """Unsigned, a wrong secret, a stale time, a signature for another request: 401, and
    nothing read or committed. The secret itself never travels."""
    with served(tmp_path, 5) as (server, url):
        when = f"{time.time():.3f}"

        def signed(target: str, method: str = "GET", secret: bytes = SECRET,
                   at: str = when) -> dict:
            return {"X-KSP-Time": at,
                    "X-KSP-Signature": shards.signature(secret, method, target, at)}

        assert status(url + "/state") == 401
        assert status(url + "/state", headers=signed("/state", secret=b"x" * 24)) == 401
        stale = f"{time.time() - shards.MAX_SKEW - 5:.3f}"
        assert status(url + "/state", headers=signed("/state", at=stale)) == 401
        assert status(url + "/commit?upto=5", "POST",
                      headers=signed("/commit?upto=1", "POST")) == 401
        assert status(url + "/commit?upto=5", "POST", headers=signed("/commit?upto=5")) == 401
        assert server.refused == 5 and server.buffer.committed() == 0
        assert status(url + "/state", headers=signed("/state")) == 200
        with pytest.raises(urllib.error.HTTPError, match="401"):
            RemoteShard(url, b"y" * 24).read(0, 5).__next__()
        sent = signed("/state")
        assert all(SECRET.decode() not in value for value in sent.values())


def test_connections_are_bounded_and_an_idle_one_gives_its_slot_back(tmp_path):
    """Two slots: two silent connections hold them, a third is closed unanswered (counted);
    once the silent ones pass the idle timeout they are dropped and requests are served."""
    import socket

    buffer = Buffer(tmp_path)
    server = ShardServer(("127.0.0.1", 0), buffer, SECRET, max_connections=2,
                         idle_timeout=1.0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        silent = [socket.create_connection(server.server_address[:2]) for _ in range(2)]
        time.sleep(0.3)
        with pytest.raises(OSError):
            RemoteShard(url, SECRET, timeout=5).state()
        assert server.busy == 1
        time.sleep(1.5)  # past the idle timeout: both silent connections dropped
        assert RemoteShard(url, SECRET, timeout=5).state()["last"] == 0
        for s in silent:
            s.settimeout(5)
            assert s.recv(1024) == b""  # closed by the shard
            s.close()
    finally:
        server.shutdown()
        buffer.close()


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(["/read", "/commit", "/state", "/nothing"]),
       query=st.text(st.sampled_from("afteruptoz=&-0123456789%x"), max_size=24),
       method=st.sampled_from(["GET", "POST"]))
def test_bad_requests_get_a_clear_status_and_change_nothing(tmp_path_factory, path, query,
                                                            method):
    directory = tmp_path_factory.mktemp("shard")
    with served(directory, 5) as (server, url):
        target = f"{path}?{query}" if query else path
        when = f"{time.time():.3f}"
        code = status(url + target, method, {
            "X-KSP-Time": when,
            "X-KSP-Signature": shards.signature(SECRET, method, target, when)})
        assert code in (200, 400, 404, 501)  # never a crash (500) or a hang
        if not (method == "POST" and path == "/commit" and code == 200):
            assert server.buffer.committed() == 0 and len(server.buffer) == 5


def test_a_secret_is_required_and_long_enough(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("KSP_INGEST_SECRET", raising=False)
    with pytest.raises(ValueError, match="16 bytes"):
        read_secret(None)
    monkeypatch.setenv("KSP_INGEST_SECRET", "short")
    with pytest.raises(ValueError, match="16 bytes"):
        read_secret(None)
    (tmp_path / "secret").write_text("from-a-file-0123456789\nignored\n")
    assert read_secret(str(tmp_path / "secret")) == b"from-a-file-0123456789"
    monkeypatch.delenv("KSP_INGEST_SECRET")
    assert shards.main(["--client-id", "s", "--buffer", str(tmp_path / "b")]) == 2
    assert "16 bytes" in capsys.readouterr().err
    with served(tmp_path / "taken") as (_, url):  # a port in use: said before MQTT
        monkeypatch.setenv("KSP_INGEST_SECRET", SECRET.decode())
        port = url.rsplit(":", 1)[1]
        assert shards.main(["--client-id", "s", "--buffer", str(tmp_path / "b"),
                            "--listen", f"127.0.0.1:{port}"]) == 2
        assert "in use" in capsys.readouterr().err
    assert shards.main(["--client-id", "s", "--buffer", str(tmp_path / "b"),
                        "--listen", "7400"]) == 2
    assert "HOST:PORT" in capsys.readouterr().err


def test_ksp_ingest_refuses_shards_with_receivers_or_without_a_secret(monkeypatch, capsys):
    from spark_ingest.cli import main

    monkeypatch.delenv("KSP_INGEST_SECRET", raising=False)
    assert main(["--shards", "http://127.0.0.1:7400"]) == 2
    assert "secret" in capsys.readouterr().err
    monkeypatch.setenv("KSP_INGEST_SECRET", SECRET.decode())
    assert main(["--shards", "http://127.0.0.1:7400", "--receivers", "2"]) == 2
    assert "the shards are the receivers" in capsys.readouterr().err
    assert main(["--shards", "ftp://somewhere"]) == 2
    assert "http://HOST:PORT" in capsys.readouterr().err


def test_the_shard_command_is_installed():
    import subprocess
    import sys
    from pathlib import Path

    command = Path(sys.executable).parent / "ksp-ingest-shard"
    done = subprocess.run([str(command), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "--listen HOST:PORT" in done.stdout


def test_the_metrics_endpoint_is_bounded_as_the_shards_are(tmp_path):
    """`ksp-ingest --metrics-port`: two slots, two silent connections hold them and a third
    is closed unanswered; past the read timeout the silent ones are dropped and a scrape reads
    the job's figures (prometheus_client's own server would start a thread for each and wait
    on them forever)."""
    import socket

    from spark_ingest.job import Ingest, IngestOptions
    from spark_ingest.metrics import serve

    ingest = Ingest(None, IngestOptions(out=str(tmp_path)))  # its figures; no Spark needed
    ingest.stats["observations"] = 7
    server = serve(ingest, "127.0.0.1", 0, max_connections=2, timeout=1.0)
    url = f"http://127.0.0.1:{server.server_port}/metrics"
    try:
        silent = [socket.create_connection(server.server_address[:2]) for _ in range(2)]
        time.sleep(0.3)
        with pytest.raises(OSError):
            urllib.request.urlopen(url, timeout=5).read()
        assert server.busy == 1
        time.sleep(1.5)  # past the timeout: both silent connections dropped
        text = urllib.request.urlopen(url, timeout=5).read().decode()
        assert "ksp_ingest_observations_total 7.0" in text.splitlines()
        for s in silent:
            s.settimeout(5)
            assert s.recv(1024) == b""
            s.close()
    finally:
        server.shutdown()
        server.server_close()
