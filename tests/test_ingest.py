"""`ksp-ingest` with real parts: Debian's mosquitto on a free loopback port, a real
local Spark (the ingest as a process, `local[2]`), a real `ksp-sib`; the telemetry published
by `ksp telemetry`'s code with known duplicates and broken messages. Marked `spark`: the
default test command runs them."""
from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from lengths import LONG
from spark_ingest.cli import LOCAL_JAVA_OPTIONS
from spark_ingest.receiving import NICENESS
from spark_ingest.job import observation_iri
from spark_ingest.telemetry import REASONS, parse
from spark_ingest.testing import IngestProcess, until
from tools.telemetry import messages, publish

# slow: Spark, mosquitto and ksp-sib processes
pytestmark = [pytest.mark.spark, pytest.mark.slow]
pa = pytest.importorskip("pyarrow.dataset")  # the spark extra brings it
pq = pytest.importorskip("pyarrow.parquet")

BASE = "http://example.org/greenhouse#"


@pytest.fixture
def mosquitto(tmp_path):
    from spark_ingest.testing import Mosquitto

    with Mosquitto(tmp_path) as broker:
        yield broker.url


def table(out: Path, name: str):
    path = out / name
    if not path.exists():
        return None
    for attempt in range(10):
        try:
            return pa.dataset(str(path), format="parquet", partitioning="hive").to_table()
        except FileNotFoundError:  # listed before a merge replaced the files: list again
            if attempt == 9:
                raise


def count(out: Path, name: str) -> int:
    t = table(out, name)
    return 0 if t is None else t.num_rows  # files appear whole (moved into place)


def assert_each_once(out: Path, n: int) -> None:
    obs = table(out, "observations").to_pylist()
    seen = Counter((o["device"], o["observedProperty"], o["resultTime"]) for o in obs)
    assert len(seen) == n and max(seen.values()) == 1


def assert_minutes(out: Path, sent, delay: float) -> int:
    """The aggregates hold, once each, exactly the minutes of the readings in `sent` that the
    watermark (the newest reading's time minus `delay` seconds) has passed, with each one's
    count, min, max and mean; returns how many."""
    from datetime import timedelta, timezone

    parsed = [parse(topic, payload) for topic, payload, kind in sent if kind == "ok"]
    closed = max(r[4] for r in parsed) - timedelta(seconds=delay)
    want: dict = {}
    for d, p, v, _, when, _ in parsed:
        minute = when.replace(second=0, microsecond=0)
        if minute + timedelta(minutes=1) <= closed:
            want.setdefault((d, BASE + p, minute), []).append(v)
    rows = table(out, "aggregates").to_pylist()
    got = {(r["device"], r["observedProperty"], r["minute"].replace(tzinfo=timezone.utc)): r
           for r in rows}
    assert len(got) == len(rows)  # each minute once
    assert set(got) == set(want)  # the open minutes not yet
    for key, values in want.items():
        r = got[key]
        assert (r["count"], r["min"], r["max"]) == (len(values), min(values), max(values))
        assert r["mean"] == pytest.approx(sum(values) / len(values))
    return len(want)


def cli(*args: str) -> subprocess.CompletedProcess:
    """`ksp-ingest ARGS` run to its end (a backfill, or a job refused before Spark starts)."""
    return subprocess.run([sys.executable, "-m", "spark_ingest.cli", *args], capture_output=True,
                          text=True, timeout=120, cwd=Path(__file__).resolve().parent.parent)


def ingest_args(mqtt: str, out: Path, *more: str) -> list[str]:
    """No warm-up: it only moves the JVM's first slow batch before "ingest ready"
    (tests/test_ingest_warmup.py runs it through a job; these tests are about what is stored)."""
    return ["--mqtt", mqtt, "--out", str(out), "--trigger", "500 milliseconds",
            "--status", "1", "--warm-up", "0", *more]


def test_readings_become_observations_duplicates_go_and_bad_messages_are_dead_letters(
        mosquitto, tmp_path):
    from sib.testing import SibProcess
    from transports import connect

    out = tmp_path / "data"
    sent = list(messages(600, devices=6, duplicates=0.1, bad=0.05, seed=3))
    with SibProcess("--memory", "--udp-port", "0", "--tcp-port", "-1",
                    "--coap-port", "-1") as sib:
        with IngestProcess(*ingest_args(mosquitto, out, "--sib",
                                        f"udp://127.0.0.1:{sib.ports['udp']}",
                                        "--ntriples", "--metrics-port", "0")) as ingest:
            counts = publish(mosquitto, sent)
            assert counts["ok"] == 600 and counts["duplicate"] > 0 and counts["bad"] > 0
            until(lambda: count(out, "observations") >= 600
                  and count(out, "dead_letters") >= counts["bad"], 240,
                  "the observations and dead letters")
            port = int(re.search(r"metrics on http://[^:]+:(\d+)", ingest.log())[1])

            def scrape() -> dict:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
                    return {line.split(" ")[0]: float(line.split(" ")[1])
                            for line in r.read().decode().splitlines()
                            if line and not line.startswith("#")}

            until(lambda: scrape()["ksp_ingest_observations_total"] == 600, 60,
                  "the batch's figures")  # counted once its SIB update is sent
            figures = scrape()
            java = jvm_command_line(ingest.proc.pid)
            family = descendants(ingest.proc.pid)
            listening = listening_addresses(next(pid for pid, command, _ in family
                                                 if "java" in command.split(" ")[0]))
            niceness = {command.split(" ")[0].rsplit("/", 1)[-1] if "java" in command else
                        command.split(" -m ")[-1].split(" ")[0]: nice
                        for _, command, nice in family}
            ingest.stop_when(lambda: True, "the end")

        async def in_the_sib():
            async with connect(f"udp://127.0.0.1:{sib.ports['udp']}") as kp:
                rows = await kp.query("SELECT ?s ?p ?v WHERE { ?s ?p ?v }")
                return {(str(r[0]), str(r[1])): float(r[2]) for r in rows.rows}

        state = asyncio.run(asyncio.wait_for(in_the_sib(), 60))

    readings = [parse(t, p) for t, p, kind in sent if kind == "ok"]
    obs = table(out, "observations").to_pylist()
    assert len(obs) == 600  # every reading once: the duplicates dropped
    keys = {(o["madeBySensor"], o["observedProperty"], o["resultTime"]) for o in obs}
    assert len(keys) == 600
    assert sorted((o["madeBySensor"], o["observedProperty"], o["hasSimpleResult"])
                  for o in obs) == sorted((BASE + d, BASE + p, v)
                                          for d, p, v, _, _, _ in readings)
    assert {o["device"] for o in obs} == {f"sensor{k}" for k in range(6)}  # the partitions
    dead = table(out, "dead_letters").to_pylist()
    assert len(dead) == counts["bad"]
    assert {d["reason"] for d in dead} <= set(REASONS) and len({d["reason"] for d in dead}) > 3
    newest = {}
    for d, p, v, _, when, _ in readings:
        if (BASE + d, BASE + p) not in newest or newest[BASE + d, BASE + p][0] < when:
            newest[BASE + d, BASE + p] = (when, v)
    assert state == {k: v for k, (_, v) in newest.items()}
    nt = "".join(f.read_text() for f in sorted((out / "ntriples").glob("date=*/*.nt")))
    assert nt.count("\n") == 5 * 600 and nt.count("sosa/Observation>") == 600
    assert any(re.search(r"ingest: .* readings/s, .* lag [\d,]+ messages \([\d.]+ s\)",
                         line) for line in ingest.lines)
    assert figures["ksp_ingest_observations_total"] == 600
    assert figures["ksp_ingest_dead_letters_total"] == counts["bad"]
    by_reason = Counter(d["reason"] for d in dead)
    assert {k: v for k, v in figures.items()
            if k.startswith("ksp_ingest_dead_letter_reasons_total")} == {
        f'ksp_ingest_dead_letter_reasons_total{{reason="{r}"}}': float(n)
        for r, n in by_reason.items()}
    assert figures["ksp_ingest_sib_updates_total"] >= 1
    assert "ksp_ingest_lag_messages" in figures and "process_resident_memory_bytes" in figures
    assert LOCAL_JAVA_OPTIONS in java  # local[2]: the JVM compiles with C1 only
    # Its UI (no login), py4j and block manager: on the loopback only (Spark's UI binds to
    # every interface otherwise).
    assert listening and all(address.startswith("127.") for address in listening), listening
    # The receivers in a process of their own; Spark's below them (`spark_ingest.receiving`).
    lower = min(19, niceness["spark_ingest.receiving"] + NICENESS)  # 19: the lowest there is
    assert niceness["java"] == niceness["pyspark.daemon"] == lower, niceness


def jvm_command_line(pid: int) -> str:
    """The command line of the JVM that process `pid` (the ingest) started, from /proc."""
    return jvm_command_lines(pid)[0]


def jvm_command_lines(pid: int) -> list[str]:
    """The command lines of the JVMs under process `pid`, the driver's first, from /proc."""
    commands = [command for _, command, _ in descendants(pid)
                if "java" in command.split(" ")[0]]
    if not commands:
        raise AssertionError(f"no JVM under process {pid}")
    return sorted(commands, key=lambda c: "CoarseGrainedExecutorBackend" in c)


def listening_addresses(pid: int) -> list[str]:
    """The addresses process `pid` listens on for TCP ("127.0.0.1:4040", "0.0.0.0:4040",
    "::"), from /proc: its sockets' inodes matched in /proc/net/tcp and tcp6."""
    import ipaddress

    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                continue
            host, port = fields[1].split(":")
            raw = bytes.fromhex(host)
            # /proc writes each 32-bit word in the host's order (little-endian here)
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            address = ipaddress.ip_address(raw)
            if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
                address = address.ipv4_mapped
            out.append(f"{address}:{int(port, 16)}")
    return out


def descendants(pid: int) -> list[tuple[int, str, int]]:
    """(pid, command line, niceness) of each process under process `pid`, from /proc."""
    parents, nice = {}, {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry)], nice[int(entry)] = int(fields[1]), int(fields[16])
    family, grew = {pid}, True
    while grew:
        more = {child for child, parent in parents.items() if parent in family} - family
        family |= more
        grew = bool(more)
    out = []
    for member in sorted(family - {pid}):
        try:
            command = Path(f"/proc/{member}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        out.append((member, command, nice[member]))
    return out


def test_on_a_cluster_master_executors_of_their_own_take_the_rows(mosquitto, tmp_path):
    """`--master` takes any Spark master: with `local-cluster[2,1,1024]` Spark starts two
    executors, each a JVM of its own as on a cluster's machines, so the rows of each batch
    travel in its tasks (the buffer stays on the driver's disk) and the parsing and the writes
    run there: every reading once, the duplicates dropped, the broken messages dead letters."""
    out = tmp_path / "data"
    sent = list(messages(600, devices=6, duplicates=0.1, bad=0.05, seed=5))
    with IngestProcess(*ingest_args(mosquitto, out, "--master",
                                    "local-cluster[2,1,1024]")) as ingest:
        counts = publish(mosquitto, sent)
        until(lambda: count(out, "observations") >= 600
              and count(out, "dead_letters") >= counts["bad"], 240,
              "the observations and dead letters")
        jvms = jvm_command_lines(ingest.proc.pid)
        ingest.stop_when(lambda: True, "the end")
    executors = [c for c in jvms if "CoarseGrainedExecutorBackend" in c]
    assert len(executors) == 2 and LOCAL_JAVA_OPTIONS not in jvms[0]  # a driver only
    assert_each_once(out, 600)
    obs = table(out, "observations").to_pylist()
    assert sorted((o["madeBySensor"], o["observedProperty"], o["hasSimpleResult"])
                  for o in obs) == sorted(
        (BASE + d, BASE + p, v) for d, p, v, *_ in (
            parse(t, payload) for t, payload, kind in sent if kind == "ok"))
    assert len(table(out, "dead_letters").to_pylist()) == counts["bad"]


def publisher_held_at(mosquitto: str, sent: list, rate: float, held_at: int):
    """A thread publishing `sent` at `rate`, which stops after the first `held_at` readings
    until its event is set: the readings after those are certain to come after whatever the
    test does meanwhile (a kill is then mid-stream however slow the machine)."""
    go_on = threading.Event()

    def run() -> None:
        publish(mosquitto, sent[:held_at], rate=rate)
        if go_on.wait(600):
            publish(mosquitto, sent[held_at:], rate=rate)

    return threading.Thread(target=run, daemon=True), go_on


# Two receivers by default (the harder case: two buffers to read again); one as well in the
# whole form (KSP_LONG_TESTS=1): each case starts Spark twice, about a minute here.
@pytest.mark.parametrize("receivers", [1, 2] if LONG else [2])
def test_killed_and_restarted_mid_stream_nothing_lost_nothing_twice(mosquitto, tmp_path,
                                                                     receivers):
    """kill -9 while readings arrive, then the same command again: every reading is in the
    observations exactly once (what was buffered and not committed is read again from the
    buffer; what was not acknowledged comes again from the broker's persistent session), and
    every closed minute in the aggregates once, with all its readings (the open minutes are
    saved with each batch), while each device's small files are merged. With
    two receivers, an MQTT 5 shared subscription splits the messages between their sessions
    and buffer shards, and the same holds."""
    from datetime import datetime, timedelta, timezone

    out = tmp_path / "data"
    start = datetime.now(timezone.utc) - timedelta(minutes=30)  # 20 minutes of readings
    sent = list(messages(1500, devices=5, seed=7, bad=0.02, start=start, step=4.0))
    args = ingest_args(mosquitto, out, "--receivers", str(receivers), "--watermark",
                       "5 minutes", "--max-per-batch", "100",  # 15 batches at least
                       "--compact-after", "2")  # and small files merged meanwhile
    first = IngestProcess(*args)
    publisher, go_on = publisher_held_at(mosquitto, sent, 75, 1000)
    publisher.start()
    try:  # after two committed batches: the aggregates' open minutes are in a saved state
        until(lambda: count(out, "observations") >= 300 and len(list(
            (out / "_checkpoint" / "commits").glob("[0-9]*"))) >= 2, 240, "two batches")
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(30)
        killed_at = count(out, "observations")
        go_on.set()  # the last 500 readings: while the job is down and after it is back
        with IngestProcess(*args) as second:
            publisher.join(300)
            second.stop_when(lambda: count(out, "observations") >= 1500, "every observation")
    finally:
        go_on.set()
        if first.proc.poll() is None:
            first.proc.kill()
    assert_each_once(out, 1500)  # none lost, none twice
    assert 300 <= killed_at <= 1000  # it was killed mid-stream, with readings still to come
    assert list(out.glob("observations/*/*/merged-*.parquet"))  # merged as they came
    assert assert_minutes(out, sent, 300) >= 5 * 3 * 10  # the minutes open at the kill too
    assert os.path.exists(out / "_checkpoint")
    bad = sum(kind == "bad" for *_, kind in sent)
    letters = table(out, "dead_letters").to_pylist()
    assert len(letters) >= bad and {d["payload"] for d in letters} == {
        p.decode("utf-8", "replace") for _, p, kind in sent if kind == "bad"}
    subscribed = [line for line in first.lines + second.lines if "subscribed to" in line]
    if receivers == 1:
        assert len(subscribed) == 2 and "$share" not in "".join(subscribed)
    else:  # each receiver its own session, in the shared subscription, twice (restarted)
        assert len(subscribed) == 4
        assert all("subscribed to $share/ksp-ingest/ksp/+/telemetry" in line
                   for line in subscribed)
        assert {d["seq"] % 2 for d in letters} == {0, 1}  # both shards had messages
        assert sorted(p.name for p in (out / "_mqtt").iterdir() if p.is_dir()) == [
            "shard-0", "shard-1"]


def test_receivers_on_other_machines_a_shard_and_the_job_killed(mosquitto, tmp_path,
                                                               monkeypatch):
    """Two receivers as processes of their own (`spark_ingest.shards`, as on two machines:
    own buffer, own MQTT 5 session in one shared subscription), read by `ksp-ingest --shards`
    over signed HTTP. kill -9 one shard mid-stream and start it again, then the job: every
    reading is in the observations once, and both shards carried some."""
    from sib.testing import free_port
    from spark_ingest.testing import ShardProcess

    monkeypatch.setenv("KSP_INGEST_SECRET", "a-secret-for-the-shards-test")
    out = tmp_path / "data"
    sent = list(messages(1500, devices=5, seed=13, bad=0.02))
    ports = [free_port("tcp"), free_port("tcp")]

    def shard(k: int) -> ShardProcess:
        return ShardProcess("--mqtt", mosquitto, "--client-id", f"shard-{k}",
                            "--buffer", str(tmp_path / f"shard-{k}"),
                            "--listen", f"127.0.0.1:{ports[k]}")

    shards = [shard(0), shard(1)]
    urls = ",".join(s.url for s in shards)
    args = ingest_args(mosquitto, out, "--shards", urls)
    publisher, go_on = publisher_held_at(mosquitto, sent, 60, 1000)
    first = IngestProcess(*args, ready="ingest ready")
    publisher.start()
    try:
        until(lambda: count(out, "observations") >= 1, 240, "the first observations")
        shards[0].proc.send_signal(signal.SIGKILL)
        shards[0].proc.wait(30)
        time.sleep(2)
        shards[0] = shard(0)  # the same buffer, session and port
        until(lambda: count(out, "observations") >= 300, 240, "more observations")
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(30)
        killed_at = count(out, "observations")
        go_on.set()  # the last 500 readings: while the job is down and after it is back
        with IngestProcess(*args, ready="ingest ready") as second:
            publisher.join(300)
            second.stop_when(lambda: count(out, "observations") >= 1500, "every observation")
    finally:
        go_on.set()
        for process in (first, *shards):
            if process.proc.poll() is None:
                process.proc.kill()
    assert_each_once(out, 1500)  # none lost, none twice
    assert 300 <= killed_at <= 1000  # both kills came mid-stream, readings still to come
    letters = table(out, "dead_letters").to_pylist()
    assert {d["payload"] for d in letters} == {
        p.decode("utf-8", "replace") for _, p, kind in sent if kind == "bad"}
    assert {d["seq"] % 2 for d in letters} == {0, 1}  # both shards had messages
    assert not (out / "_mqtt").exists()  # no receiver ran in the job


def test_per_minute_aggregates_are_final_and_written_once(mosquitto, tmp_path):
    """Readings a second apart over six minutes: every minute the watermark (30 s) has passed
    is in the aggregates once, with the min, max, mean and count of its readings."""
    from datetime import datetime, timedelta, timezone

    out = tmp_path / "data"
    start = datetime.now(timezone.utc).replace(second=0, microsecond=0) - timedelta(hours=1)
    sent = list(messages(720, devices=2, seed=11, start=start, step=1.0))
    with IngestProcess(*ingest_args(mosquitto, out, "--watermark", "30 seconds")) as ingest:
        publish(mosquitto, sent)
        until(lambda: count(out, "observations") >= 720, 240, "the observations")
        ingest.stop_when(lambda: count(out, "aggregates") >= 2 * 3 * 5, "the closed minutes")
    assert assert_minutes(out, sent, 30) == 2 * 3 * 5  # 2 devices, 3 properties, 5 minutes


def test_neither_a_clock_ahead_nor_a_broken_message_costs_the_readings_after_it(mosquitto,
                                                                                 tmp_path):
    """Readings half an hour old (a backlog, or a fleet whose clocks lag), then one reading from
    a clock a year ahead and broken messages, then more readings as old: the bad ones are
    dead letters, and every reading is an observation. Before, either moved the watermark past
    the readings (the reading's time, or the broken message's arrival), and the
    de-duplication dropped every later reading as late, silently. The broken messages include
    those that once failed every batch, the SIB push and --ntriples included, and the job for
    good (`tools.telemetry.poison`); each dead letter keeps its message's bytes. The
    first readings go out right after "ingest ready", on a new session: the broker had the
    subscription by then, and delivers them."""
    from datetime import datetime, timedelta, timezone

    from sib.testing import SibProcess
    from spark_ingest.telemetry import reading, topic_of
    from tools.telemetry import poison

    out = tmp_path / "data"
    back = datetime.now(timezone.utc) - timedelta(minutes=30)

    def readings(start: datetime) -> list:
        return [(topic_of("s1"), reading("s1", "t", float(k), time=start + timedelta(
            milliseconds=k)), "ok") for k in range(20)]

    bad = [(topic_of("s1"), reading("s1", "t", 99.0, time=back + timedelta(days=365)),
            "future_time"), (topic_of("s1"), b"{not json", "not_json")]
    bad += [(topic_of("s1"), body, reason) for _, body, reason in poison("s1", back.isoformat(
        timespec="milliseconds").replace("+00:00", "Z"))]
    with SibProcess("--memory", "--udp-port", "0", "--tcp-port", "-1",
                    "--coap-port", "-1") as sib:
        with IngestProcess(*ingest_args(mosquitto, out, "--watermark", "1 minute",
                                        "--ntriples", "--sib",
                                        f"udp://127.0.0.1:{sib.ports['udp']}")) as ingest:
            publish(mosquitto, readings(back))  # right after "ingest ready"
            until(lambda: count(out, "observations") >= 20, 240, "the first readings")
            publish(mosquitto, [(t, p, "bad") for t, p, _ in bad])
            until(lambda: count(out, "dead_letters") >= len(bad), 120, "the dead letters")
            publish(mosquitto, readings(back + timedelta(seconds=1)))
            ingest.stop_when(lambda: count(out, "observations") >= 40, "the later readings")
    assert_each_once(out, 40)
    letters = table(out, "dead_letters").to_pylist()
    assert sorted(d["reason"] for d in letters) == sorted(reason for *_, reason in bad)
    assert sorted(d["payload_bytes"] or d["payload"].encode() for d in letters) == sorted(
        p for _, p, _ in bad)  # byte for byte, the one not UTF-8 too
    assert [d["payload_bytes"] is not None for d in letters].count(True) == 1
    assert all(d["error"] is None for d in letters)
    nt = "".join(f.read_text() for f in sorted((out / "ntriples").glob("date=*/*.nt")))
    assert nt.count("\n") == 5 * 40  # every line a triple
    assert "ingest ready" in ingest.log()


def recorded_watermark(out: Path) -> int:
    """The newest watermark (ms) in the job's offset log: 0 until a batch has moved it."""
    import json

    marks = [0]
    for entry in (out / "_checkpoint" / "offsets").glob("[0-9]*"):
        try:
            lines = entry.read_text(encoding="utf-8").splitlines()
            marks.append(int(json.loads(lines[1]).get("batchWatermarkMs", 0)))
        except (OSError, IndexError, ValueError):
            continue  # being written
    return max(marks)


def counters(ingest: IngestProcess):
    """`metric(name)`: the running ingest's counter `ksp_ingest_<name>_total`, scraped."""
    port = int(re.search(r"metrics on http://[^:]+:(\d+)", ingest.log())[1])

    def metric(name: str) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
            return float(re.search(rf"^ksp_ingest_{name}_total (\S+)$", r.read().decode(),
                                   re.MULTILINE)[1])

    return metric


def test_a_fresh_ingest_keeps_readings_dated_at_or_before_1970_and_payloads_not_utf8(
        mosquitto, tmp_path):
    """A fresh `ksp-ingest` (empty output: its watermark still at the epoch, where Spark drops
    rows at or before it) gets four readings dated 0001-01-01, 1970-01-01T00:00:00Z, a
    millisecond before it, and now, and two readings that are not UTF-8 (UTF-16 with a byte
    order mark; an extra field holding an encoded lone surrogate): one observation, three
    `late` and two `not_json` dead letters with their exact bytes, none dropped by Spark."""
    from datetime import datetime, timedelta, timezone

    from spark_ingest.telemetry import reading, topic_of

    out = tmp_path / "data"
    epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
    now = datetime.now(timezone.utc)
    dated = [reading("s1", "t", float(k), time=when) for k, when in enumerate(
        (datetime(1, 1, 1, tzinfo=timezone.utc), epoch, epoch - timedelta(milliseconds=1), now))]
    utf16 = ("\ufeff" + reading("s1", "t", 5.0, time=now).decode()).encode("utf-16-le")
    surrogate = reading("s1", "t", 6.0, time=now)[:-1] + b',"note":"\xed\xa0\x80"}'
    sent = [(topic_of("s1"), p, "ok") for p in (*dated, utf16, surrogate)]
    with IngestProcess(*ingest_args(mosquitto, out, "--metrics-port", "0")) as ingest:
        publish(mosquitto, sent)
        metric = counters(ingest)
        until(lambda: count(out, "observations") >= 1 and count(out, "dead_letters") >= 5,
              240, "the reading and the dead letters")
        assert metric("late") == 3 and metric("late_dropped") == 0
        ingest.stop_when(lambda: True, "the end")
    assert count(out, "observations") == 1
    dead = table(out, "dead_letters").to_pylist()
    kept = {(d["payload_bytes"] or d["payload"].encode()): d["reason"] for d in dead}
    assert kept == {dated[0]: "late", dated[1]: "late", dated[2]: "late",
                    utf16: "not_json", surrogate: "not_json"}


def test_readings_older_than_the_watermark_are_late_dead_letters(mosquitto, tmp_path):
    """A reading older than the watermark when it comes, which Spark's de-duplication would
    drop, is a dead letter `late` with the message as sent, counted (metrics, status line);
    Spark drops none."""
    from datetime import datetime, timedelta, timezone

    from spark_ingest.telemetry import reading, topic_of

    out = tmp_path / "data"
    now = datetime.now(timezone.utc)
    fresh = [(topic_of("s1"), reading("s1", "t", float(k), time=now + timedelta(
        milliseconds=k)), "ok") for k in range(10)]
    old = [(topic_of("s1"), reading("s1", "t", float(k), time=now - timedelta(
        hours=1, milliseconds=-k)), "ok") for k in range(7)]
    with IngestProcess(*ingest_args(mosquitto, out, "--watermark", "1 minute",
                                    "--metrics-port", "0")) as ingest:
        publish(mosquitto, fresh)
        until(lambda: count(out, "observations") >= 10, 240, "the readings")
        # the watermark moves on after the batch with them (a batch of its own records it):
        # the old readings, published after that, come in a batch planned past it
        until(lambda: recorded_watermark(out) > 0, 240, "the watermark past the readings")
        publish(mosquitto, old)
        metric = counters(ingest)
        until(lambda: metric("late") >= 7, 120, "the late readings dead-lettered")
        assert metric("late") == 7 and metric("late_dropped") == 0
        # the running job holds its output: neither a backfill nor a second job may start
        for args in (["backfill", "--out", str(out)], ingest_args(mosquitto, out)):
            refused = cli(*args)
            assert refused.returncode == 2 and "in use by ksp-ingest (pid" in refused.stderr
        ingest.stop_when(lambda: True, "the end")
    assert count(out, "observations") == 10
    dead = table(out, "dead_letters").to_pylist()
    assert sorted(d["payload"].encode() for d in dead) == sorted(p for _, p, _ in old)
    assert {d["reason"] for d in dead} == {"late"}
    assert any(re.search(r", 7 late readings \(dead letters\)", line) for line in ingest.lines)
    assert not any("dropped by Spark" in line for line in ingest.lines)
    # stopped, the late readings can be told from copies: the backfill adds them, once
    done = cli("backfill", "--out", str(out))
    assert done.returncode == 0 and "7 late readings in the dead letters: 7 added" in done.stdout
    assert_each_once(out, 17)
    rows = table(out, "observations").to_pylist()
    assert {parse(t, p)[4].replace(tzinfo=None) for t, p, _ in old} <= {
        o["resultTime"] for o in rows}
    for o in rows:  # the job's IRIs and the backfill's are made alike
        ms = round(o["resultTime"].replace(tzinfo=timezone.utc).timestamp() * 1000)
        assert o["observation"] == observation_iri(BASE, o["device"], "t", ms)
    job_file = next((out / "observations").rglob("batch-*.parquet"))
    for path in (out / "observations").rglob("backfill-*.parquet"):
        assert pq.ParquetFile(path).schema == pq.ParquetFile(job_file).schema
    # their minutes had no reading in time and the job closed them: the backfill wrote them
    def late_minutes() -> dict:
        rows = table(out, "aggregates").to_pylist()
        keys = {(r["device"], r["observedProperty"], r["minute"]) for r in rows}
        assert len(keys) == len(rows)  # each minute once
        return {r["minute"]: r for r in rows if r["minute"] < now - timedelta(minutes=30)}

    got = late_minutes()
    want = Counter(parse(t, p)[4].replace(second=0, microsecond=0) for t, p, _ in old)
    assert {m: r["count"] for m, r in got.items()} == dict(want)
    assert (min(r["min"] for r in got.values()), max(r["max"] for r in got.values())) == (
        0.0, 6.0)
    assert f"aggregates written for {len(want)} minute" in done.stdout, done.stdout
    again = cli("backfill", "--out", str(out))
    assert "7 late readings in the dead letters: 0 added" in again.stdout, again.stdout
    assert count(out, "observations") == 17
    assert late_minutes() == got
    # Spark reads the job's files and the backfill's as one table
    spark = subprocess.run([sys.executable, "-c", (
        "import sys; from spark_ingest.cli import spark_session; "
        "s = spark_session('local[1]', 'read'); d = s.read.parquet(sys.argv[1]); "
        "print(d.count(), d.select('device', 'observedProperty', 'resultTime').distinct()"
        ".count(), d.where(d.hasSimpleResult.isNull()).count()); s.stop()"),
        str(out / "observations")], capture_output=True, text=True, timeout=300)
    assert spark.stdout.split() == ["17", "17", "0"], spark.stderr[-2000:]


def test_a_full_buffer_stops_the_acknowledgements_and_loses_nothing(mosquitto, tmp_path):
    """The receiver alone (no Spark): with room for 5 messages, 5 are buffered and acknowledged
    and the rest wait unacknowledged; as a batch commits (through the job's own connection to
    the file, as from the job's process), the rest come, in order, once each."""
    from spark_ingest.buffer import Buffer
    from spark_ingest.mqtt import Receiver

    kept = Buffer(tmp_path / "buffer", max_messages=5)
    buffer = Buffer(tmp_path / "buffer")  # the job's
    receiver = Receiver(mosquitto, "ksp/+/telemetry", "bounded-test", kept, batch=1).start()
    try:
        assert receiver.wait_subscribed(30)
        sent = list(messages(12, devices=2, seed=2))
        publish(mosquitto, sent)
        until(lambda: len(buffer) == 5, 30, "a full buffer")
        time.sleep(0.5)
        assert len(buffer) == 5 and receiver.received == 5  # the rest held, not acknowledged
        got = [p for _, _, p, _ in buffer.read(0, buffer.last())]
        buffer.commit(buffer.last())
        until(lambda: receiver.received == 10, 30, "the next five")
        got += [p for _, _, p, _ in buffer.read(buffer.committed(), buffer.last())]
        buffer.commit(buffer.last())
        until(lambda: receiver.received == 12, 30, "the last two")
        got += [p for _, _, p, _ in buffer.read(buffer.committed(), buffer.last())]
    finally:
        receiver.stop()
        kept.close()
        buffer.close()
    assert got == [p for _, p, _ in sent]


def test_the_readmes_greenhouse_over_mqtt_through_the_ingest(mosquitto, tmp_path):
    """The README's "Telemetry into Parquet and the SIB": a SIB, ksp-ingest on the broker and
    the SIB, and `ksp demo greenhouse --url … --mqtt …`, whose Sensor KPs publish telemetry;
    the ingest puts each reading into the SIB, the Autocontrol KP's rules switch the actuators
    exactly as when the sensors write over KSP, and every reading is an observation."""
    import subprocess
    import sys

    from sib.testing import SibProcess
    from tools.greenhouse import READINGS

    out = tmp_path / "data"
    with SibProcess("--memory", "--udp-port", "0", "--tcp-port", "-1",
                    "--coap-port", "-1") as sib:
        url = f"udp://127.0.0.1:{sib.ports['udp']}"
        with IngestProcess(*ingest_args(mosquitto, out, "--sib", url)) as ingest:
            demo = subprocess.run([sys.executable, "-m", "tools.cli", "demo", "greenhouse",
                                   "--url", url, "--mqtt", mosquitto], capture_output=True,
                                  text=True, timeout=600)
            assert demo.returncode == 0, demo.stderr + "".join(ingest.lines[-30:])
            ingest.stop_when(lambda: count(out, "observations") >= len(READINGS),
                             "the greenhouse's readings")
    assert demo.stdout.count("(MQTT: ksp/") == len(READINGS)
    # what the rules did, reading by reading, is what they do when the sensors write over KSP
    direct = subprocess.run([sys.executable, "-m", "tools.cli", "demo", "greenhouse"],
                            capture_output=True, text=True, timeout=600)
    assert direct.returncode == 0, direct.stderr

    def story(text: str) -> list[str]:
        return [re.sub(r" \(MQTT: .*\)$", "", line.strip()) for line in text.splitlines()
                if line.strip().startswith(("Sensor KP:", "Actuator KP:"))]

    assert story(demo.stdout) == story(direct.stdout)
    assert "Actuator KP: fan1 ON" in story(demo.stdout)
    rows = table(out, "observations").to_pylist()
    assert sorted((r["observedProperty"].rsplit("#", 1)[1], r["hasSimpleResult"])
                  for r in rows) == sorted(READINGS)
    assert {r["madeBySensor"].rsplit("#", 1)[1] for r in rows} == {
        "thermometer1", "hygrometer1", "luxmeter1"}


def test_a_broker_over_tls_with_a_password(tmp_path):
    """`--mqtt mqtts://…` with the broker's CA, a user and the password from a file (never on
    the command line, never over plain mqtt://): the readings come in; a wrong password is
    refused by the broker and said in the log."""
    from sib.testing import LoggedProcess
    from spark_ingest.testing import ROOT, Mosquitto, secure_settings

    settings = secure_settings(tmp_path, "ingest", "pw-of-ingest")
    (tmp_path / "pw").write_text("pw-of-ingest\n")
    (tmp_path / "wrong").write_text("not-it\n")
    with Mosquitto(tmp_path / "broker", settings=settings) as broker:
        url = f"mqtts://127.0.0.1:{broker.port}"
        out = tmp_path / "data"
        secure = ["--mqtt-ca", str(tmp_path / "ca.pem"), "--mqtt-user", "ingest"]
        refused = LoggedProcess("spark_ingest.cli", [
            *ingest_args(url, tmp_path / "refused"), *secure, "--mqtt-password-file",
            str(tmp_path / "wrong")], "refused the connection", 180, cwd=ROOT)
        refused.stop()
        assert "Not authorized" in refused.log() and "not-it" not in refused.log()
        with IngestProcess(*ingest_args(url, out), *secure, "--mqtt-password-file",
                           str(tmp_path / "pw")) as ingest:
            import subprocess
            import sys

            load = subprocess.run(  # ksp telemetry on the same broker, as a user would
                [sys.executable, "-m", "tools.cli", "telemetry", "--mqtt", url, *secure,
                 "--count", "40", "--devices", "2"], capture_output=True, text=True,
                timeout=120, env=dict(os.environ, KSP_MQTT_PASSWORD="pw-of-ingest"))
            assert load.returncode == 0, load.stderr
            ingest.stop_when(lambda: count(out, "observations") >= 40, "the readings over TLS")
        assert "pw-of-ingest" not in ingest.log()
    assert count(out, "observations") == 40
