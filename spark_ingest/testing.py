"""For tests and benchmarks: a mosquitto of the project's own (Debian's `mosquitto` on a free
loopback port, with a persistent store saved after every change, and room for an ingest's
backlog while it is away: the default keeps 1,000 messages per offline client, then drops) and
`ksp-ingest` as a process."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sib.testing import LoggedProcess

__all__ = ["IngestProcess", "Mosquitto", "SAVE_EVERY_CHANGE", "ShardProcess", "Subscriber",
           "secure_settings", "until"]

ROOT = Path(__file__).resolve().parent.parent
DROPPED = "$SYS/broker/publish/messages/dropped"


#: mosquitto.conf: the store saved after every change (a message queued, a subscription),
#: not every 30 minutes (`autosave_interval`'s default): a broker killed (`kill -9`, a crash)
#: has its sessions and the messages it acknowledged back when it restarts (spark_ingest/README).
SAVE_EVERY_CHANGE = "autosave_on_changes true\nautosave_interval 1\n"
#: Its log without `information`, which has a line for each save ("Saving in-memory
#: database"): a line per message received.
QUIET_SAVES = "log_type error\nlog_type warning\nlog_type notice\n"


class Mosquitto:
    """`with Mosquitto() as broker: broker.url` → `mqtt://127.0.0.1:PORT`. Again on the same
    `directory` and `port`: the same broker restarted, its store (sessions, queued messages)
    read back. `max_queued`: messages kept per client beyond its in-flight window, then
    dropped (`dropped`). `save_every_change`: `SAVE_EVERY_CHANGE`, what a deployment should
    run (a killed broker loses at most its last pass's messages); False, mosquitto's default
    (every 30 minutes), for the benchmarks: each save rewrites the whole store, and with a
    backlog of 10,000 messages it took 339 readings/s where the default took 23,152
    (docs/benchmarks.md), which would measure the store rather than the ingest."""

    def __init__(self, directory: str | Path | None = None, port: int | None = None,
                 settings: str = "", max_queued: int = 1_000_000,
                 save_every_change: bool = True) -> None:
        self._own = directory is None
        self.directory = Path(tempfile.mkdtemp(prefix="mosquitto-") if directory is None
                              else directory)
        if port is None:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
        self.port = port
        self.url = f"mqtt://127.0.0.1:{self.port}"
        self._watcher = None  # of `dropped`, and the newest count it saw
        self._drops: int | None = None
        store = self.directory / "mqtt-store"
        store.mkdir(parents=True, exist_ok=True)
        # As root, mosquitto drops to the user `mosquitto`, who cannot write in a root-only
        # temporary directory: its store would silently not be kept.
        user = "user root\n" if os.geteuid() == 0 else ""
        # `settings`: more of the listener's (TLS files, a password_file: no anonymous then)
        anonymous = "false" if "password_file" in settings else "true"
        conf = self.directory / "mosquitto.conf"
        conf.write_text(f"listener {self.port} 127.0.0.1\n{settings}"
                        f"allow_anonymous {anonymous}\n{user}"
                        f"persistence true\npersistence_location {store}/\n"
                        f"{SAVE_EVERY_CHANGE if save_every_change else ''}"
                        f"max_queued_messages {max_queued}\nmax_inflight_messages 1000\n"
                        f"{QUIET_SAVES}"
                        "set_tcp_nodelay true\n"
                        "sys_interval 1\n")  # `dropped` reads $SYS at most 1 s old
        self.log = self.directory / "mosquitto.log"
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(["mosquitto", "-c", str(conf)],
                                         stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 1).close()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"mosquitto did not start: {self.log.read_text()}")
                time.sleep(0.05)

    def dropped(self, timeout: float = 10.0) -> int:
        """Messages the broker has dropped since it started (`$SYS/broker/publish/messages/
        dropped`, refreshed every second): over a client's queue (`max_queued_messages`, also
        for a client that is connected but falls behind), what no subscriber will receive.

        Watched from the first call on: mosquitto publishes the value when it changes,
        retained with an expiry (60 s, seen with 2.0), so a subscriber that comes later to an
        unchanged count gets nothing. Call it first within a minute of the start. Asked
        anonymously, without TLS: a broker started with plain `settings`."""
        if self._watcher is None:
            import paho.mqtt.client as mqtt

            client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
            client.on_message = lambda c, u, m: setattr(self, "_drops", int(m.payload))
            client.on_connect = lambda c, *a: c.subscribe(DROPPED, 0)
            client.connect("127.0.0.1", self.port)
            client.loop_start()
            self._watcher = client
        until(lambda: self._drops is not None, timeout, f"{DROPPED} (its retained value "
              "expires unchanged: watch it within a minute of the broker's start)", every=0.02)
        return self._drops

    def drops_from_now(self) -> Callable[[], int]:
        """A count of the messages dropped from this call on: one run's, on a broker that
        served others before."""
        start = self.dropped()
        return lambda: self.dropped() - start

    def kill(self) -> None:
        """SIGKILL, as a crash: the broker saves nothing on its way out."""
        self.proc.kill()
        self.proc.wait(10)

    def __enter__(self) -> "Mosquitto":
        return self

    def __exit__(self, *exc) -> None:
        if self._watcher is not None:
            self._watcher.disconnect()
            self._watcher.loop_stop()
        self.proc.terminate()
        self.proc.wait(10)
        if self._own:
            shutil.rmtree(self.directory, ignore_errors=True)


class Subscriber:
    """A QoS 1 subscriber to `ksp/+/telemetry` on a persistent session: it gets what came while
    a broker it was subscribed to restarted. `got` holds `keep(topic, payload)` of each
    message received (the payload by default); `credentials` as `spark_ingest.mqtt.login`'s."""

    def __init__(self, port: int, tls: bool = False, keep=lambda topic, payload: payload,
                 **credentials) -> None:
        import paho.mqtt.client as mqtt

        from .mqtt import login

        self.got: list = []
        self.subscribed = False
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="watcher",
                                  clean_session=False)
        # as the ingest logs in: TLS checked against `ca`, then user and password
        login(self.client, f"{'mqtts' if tls else 'mqtt'}://127.0.0.1:{port}", **credentials)
        self.client.on_message = lambda c, u, m: self.got.append(keep(m.topic, m.payload))
        self.client.on_subscribe = lambda *a: setattr(self, "subscribed", True)
        self.client.on_connect = lambda c, *a: c.subscribe("ksp/+/telemetry", 1)
        self.client.connect_async("127.0.0.1", port)
        self.client.reconnect_delay_set(0.2, 1)
        self.client.loop_start()
        until(lambda: self.subscribed, 30, "subscribed")

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def secure_settings(directory: Path, user: str, password: str) -> str:
    """`Mosquitto(settings=...)` for a TLS listener that wants a password: a test CA
    (`ca.pem`), the broker's certificate for 127.0.0.1 signed by it, a second CA that signed
    nothing (`other-ca.pem`), and a password file with `user` (openssl, mosquitto_passwd)."""
    def run(*args: str) -> None:
        subprocess.run(args, cwd=directory, check=True, capture_output=True)

    for ca in ("ca", "other-ca"):
        run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", f"/CN={ca}", "-keyout", f"{ca}.key", "-out", f"{ca}.pem")
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
        "-keyout", "broker.key", "-out", "broker.csr")
    (directory / "san.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    run("openssl", "x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", "san.cnf", "-out", "broker.pem")
    run("mosquitto_passwd", "-b", "-c", "passwords", user, password)
    d = directory
    return (f"cafile {d / 'ca.pem'}\ncertfile {d / 'broker.pem'}\nkeyfile {d / 'broker.key'}\n"
            f"password_file {d / 'passwords'}\n")


def until(predicate, timeout: float, what: str, every: float = 0.25) -> None:
    """Wait for `predicate()`; AssertionError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"not reached in {timeout} s: {what}"
        time.sleep(every)


class ShardProcess(LoggedProcess):
    """A receiver on a machine of its own (`python -m spark_ingest.shards ARGS`), ready once
    subscribed; `url` is where it serves its shard."""

    name = "shard"

    def __init__(self, *args: str, timeout: float = 60.0) -> None:
        super().__init__("spark_ingest.shards", args, "subscribed to", timeout, cwd=ROOT)
        serving = next(line for line in self.lines if " serving http://" in line)
        self.url = "http://" + serving.rsplit("http://")[1].strip()


class IngestProcess(LoggedProcess):
    """`ksp-ingest` as a real subprocess (`python -m spark_ingest.cli ARGS`), its log read on a
    thread; ready when it says so, once the broker has answered its subscription."""

    name = "ksp-ingest"

    def __init__(self, *args: str, timeout: float = 180.0, ready: str = "ingest ready",
                 group: bool = False) -> None:
        super().__init__("spark_ingest.cli", args, ready, timeout, cwd=ROOT, group=group)

    def stop_when(self, ready, what: str) -> None:
        """Wait for `ready()`, a batch more (nothing else may come), then SIGTERM: exit 0."""
        until(ready, 240, what)
        time.sleep(2)
        assert self.stop(timeout=120) == 0, "".join(self.lines[-40:])
