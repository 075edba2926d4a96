"""Ingest benchmark (`ksp bench ingest`): sustained MQTT messages per second through `ksp-ingest`
(Spark, local[2]) against a plain paho subscriber writing the same Parquet with pyarrow, in one
run, through the same mosquitto; and publish → SIB latency.

Run as ``python -m tools.bench.ingest [--quick] [--messages N]``.

Both sides get the same N readings (`ksp telemetry`'s, 100 devices), published by a separate
process as fast as the broker takes them (QoS 1). The clock runs from the first publish to the
moment the last reading is in Parquet: for the ingest, its `ksp_ingest_observations_total`
reaching N (de-duplicated, dead letters split, SOSA rows, partitioned by date and device, the
buffer, the checkpoint); for the baseline, a paho client (QoS 1, clean session) that parses
each message with the same `spark_ingest.telemetry.parse` and writes a Parquet file with
pyarrow every 10,000 readings — no buffer, no de-duplication, no restart safety, so it is what
the hardware gives a single process. Reported: messages/s each, and the publisher's own rate
(neither side can be faster than it).

The light publisher (`ksp telemetry --raw`: packets written straight to the socket, an eighth
of paho's CPU per message), N readings (`--long N`, 1,000,000 by default: long enough for a
warm JVM to be most of it) to the plain subscriber, then to `ksp-ingest`: the live rate with
a publisher that takes little of the two cores.

A backlog: N (`--long`) readings published while the consumer is stopped (its persistent
session keeps them at the broker), then timed from its start to N rows — the consumer's own
rate, with no publisher on the same cores: the plain subscriber (a persistent session instead
of a clean one), then `ksp-ingest`, then `ksp-ingest --master local[1]`, one executor core
instead of two: how the executors' part of the work scales on this machine. Every row also
gives its second half's rate (from N/2 rows to N): for a backlog, the warm rate, without the
JVM's start.

Shards: the same with two `ksp-ingest-shard` processes (receivers as on other machines, here
on the same two cores) read by `ksp-ingest --shards` over signed HTTP.

Latency: with `--sib`, a reading published every 2 s and a KP subscribed (persistent SELECT)
to that sensor in a `ksp-sib`; publish → IND, whose floor is the trigger interval (1 s by
default) plus one micro-batch.
"""
from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from .report import bench_parser, environment, print_report

DEVICES = 100


def _publisher(url: str, count: int, seed: int, raw: bool = False) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tools.cli", "telemetry", "--mqtt", url,
                             "--devices", str(DEVICES), "--count", str(count), "--seed",
                             str(seed), *(["--raw"] if raw else [])],
                            stdout=subprocess.PIPE, text=True)


def _published(proc: subprocess.Popen) -> dict:
    out, _ = proc.communicate(timeout=3600)
    return json.loads(out.strip().splitlines()[-1])


def baseline(url: str, count: int, out: Path, backlog: bool = False, raw: bool = False) -> dict:
    """The plain subscriber: seconds from the first publish to the last row in Parquet; with
    `backlog`, the N readings are published while it is away (a persistent session), and the
    clock starts when it connects again."""
    import paho.mqtt.client as mqtt
    import pyarrow as pa
    import pyarrow.parquet as pq

    from spark_ingest.mqtt import broker_address
    from spark_ingest.telemetry import parse

    out.mkdir(parents=True, exist_ok=True)
    rows: list[tuple] = []
    written = 0
    done = threading.Event()
    lock = threading.Lock()
    marks: dict[str, float] = {}

    def flush() -> None:
        nonlocal rows, written
        taken, rows = rows, []
        if taken:
            devices, props, values, units, times, _ = zip(*taken)
            pq.write_table(pa.table({"device": devices, "property": props, "value": values,
                                     "unit": units, "time": times}),
                           out / f"part-{written:09d}.parquet")
            written += len(taken)
            if written * 2 >= count and "half" not in marks:
                marks["half"] = time.perf_counter()
            if written >= count:
                done.set()

    def on_message(client, userdata, m) -> None:
        fields = parse(m.topic, m.payload)
        if fields[-1] is None:
            with lock:
                rows.append(fields)
                if len(rows) >= 10_000 or written + len(rows) >= count:
                    flush()

    host, port = broker_address(url)

    def subscriber():
        client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2,
                             client_id="bench-baseline-backlog" if backlog else "bench-baseline",
                             clean_session=not backlog, protocol=mqtt.MQTTv311)
        client.on_message = on_message
        client.connect(host, port)
        client.subscribe("ksp/+/telemetry", qos=1)
        return client

    if backlog:  # the session, at the broker; then the readings, while it is away
        client = subscriber()
        client.loop_start()
        time.sleep(1)
        client.loop_stop()
        client.disconnect()
        published = _published(_publisher(url, count, seed=1))
        started = time.perf_counter()
        client = subscriber()
        client.loop_start()
    else:
        client = subscriber()
        client.loop_start()
        time.sleep(1)  # subscribed
        started = time.perf_counter()
        publisher = _publisher(url, count, seed=1, raw=raw)
    done.wait(3600)
    seconds = time.perf_counter() - started
    client.loop_stop()
    client.disconnect()
    if not backlog:
        published = _published(publisher)
    return {"seconds": seconds, "published": published,
            "second_half": seconds - (marks["half"] - started)}


def _job(url: str, out: Path, client_id: str, receivers: int = 1, shards: str = "",
         master: str = "local[2]"):
    from spark_ingest.testing import IngestProcess

    more = ("--shards", shards) if shards else ("--receivers", str(receivers))
    return IngestProcess("--mqtt", url, "--out", str(out), "--metrics-port", "0",
                         "--status", "0", "--client-id", client_id, "--master", master, *more,
                         ready="ingest ready" if shards else "subscribed to")


def _observed(job) -> float:
    import re

    port = int(re.search(r"metrics on http://[^:]+:(\d+)", job.log())[1])
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("ksp_ingest_observations_total "):
                return float(line.split()[1])
    return 0.0


def _until_observed(job, count: int, started: float) -> dict:
    """Poll the job's metrics until N observations: seconds from `started`, and of the second
    half (from N/2 to N)."""
    half = None
    while (n := _observed(job)) < count:
        if half is None and n * 2 >= count:
            half = time.perf_counter()
        time.sleep(0.1)
    end = time.perf_counter()
    return {"seconds": end - started, "second_half": end - (end if half is None else half)}


def ingest(url: str, count: int, out: Path, receivers: int = 1, shards: str = "",
           raw: bool = False) -> dict:
    """`ksp-ingest`: seconds from the first publish to its observation count reaching N."""
    with _job(url, out, f"bench-ingest-{receivers}", receivers, shards) as job:
        time.sleep(1)
        started = time.perf_counter()
        publisher = _publisher(url, count, seed=2, raw=raw)
        timed = _until_observed(job, count, started)
        published = _published(publisher)
        job.proc.terminate()
        job.proc.wait(120)
    return {**timed, "published": published}


def sharded(url: str, count: int, out: Path, n: int = 2) -> dict:
    """`ksp-ingest --shards`: N receivers as processes of their own (`ksp-ingest-shard`, as on
    N machines), read over signed HTTP, the executors reading their spans."""
    import contextlib
    import os
    import secrets

    from spark_ingest.testing import ShardProcess

    os.environ.setdefault("KSP_INGEST_SECRET", secrets.token_hex(16))
    with contextlib.ExitStack() as stack:
        urls = [stack.enter_context(ShardProcess(
            "--mqtt", url, "--client-id", f"bench-shard-{k}", "--share-group", "bench-shards",
            "--buffer", str(out / f"shard-{k}"), "--listen", "127.0.0.1:0")).url
            for k in range(n)]
        return ingest(url, count, out / "job", shards=",".join(urls))


def drain(url: str, count: int, out: Path, master: str = "local[2]") -> dict:
    """`ksp-ingest` alone: N readings published while it was stopped (the broker keeps them
    for its persistent session), then seconds from its start (Spark's session up, the
    receiver subscribed) to N observations: its own rate, no publisher sharing the cores."""
    client_id = f"bench-drain-{master}"
    with _job(url, out, client_id, master=master) as job:  # the session, at the broker
        job.proc.terminate()
        job.proc.wait(120)
    published = _published(_publisher(url, count, seed=3))
    with _job(url, out, client_id, master=master) as job:
        timed = _until_observed(job, count, time.perf_counter())
        job.proc.terminate()
        job.proc.wait(120)
    return {**timed, "published": published}


def latency(url: str, samples: int, out: Path) -> list[float]:
    """Publish → IND through the ingest and a `ksp-sib`, ms."""
    from sib.testing import SibProcess
    from spark_ingest.telemetry import reading, topic_of
    from spark_ingest.testing import IngestProcess
    from tools.telemetry import publish
    from transports import connect

    base = "http://example.org/greenhouse#"
    with SibProcess("--memory", "--udp-port", "0", "--tcp-port", "-1",
                    "--coap-port", "-1") as sib, \
            IngestProcess("--mqtt", url, "--out", str(out), "--sib",
                          f"udp://127.0.0.1:{sib.ports['udp']}", "--status", "0",
                          "--client-id", "bench-latency"):
        async def measure() -> list[float]:
            out_ms = []
            async with connect(f"udp://127.0.0.1:{sib.ports['udp']}") as kp:
                async with kp.subscribe(f"SELECT ?v WHERE {{ <{base}probe> "
                                        f"<{base}temperature> ?v }}") as sub:
                    await asyncio.wait_for(anext(sub), 30)
                    for k in range(samples + 1):
                        payload = reading("probe", "temperature", 20.0 + k)
                        sent = time.perf_counter()
                        await asyncio.to_thread(publish, url, [(topic_of("probe"), payload,
                                                                 "ok")])
                        await asyncio.wait_for(anext(sub), 60)
                        if k:  # the first pays the job's warm-up
                            out_ms.append((time.perf_counter() - sent) * 1e3)
                        await asyncio.sleep(2)
            return out_ms

        return asyncio.run(measure())


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = bench_parser(__name__, __doc__, prog, "20,000 messages, 5 latency samples")
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--long", type=int, default=1_000_000,
                        help="readings in the long rows: the light publisher's and the "
                             "backlogs (published before the consumer starts)")
    parser.add_argument("--samples", type=int, default=20, help="latency samples")
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.long, args.samples = 20_000, 20_000, 5
    from spark_ingest.testing import Mosquitto

    with tempfile.TemporaryDirectory() as tmp, Mosquitto(Path(tmp) / "mqtt") as broker:
        base = baseline(broker.url, args.messages, Path(tmp) / "baseline")
        print(f"baseline: {base}", file=sys.stderr)
        job = ingest(broker.url, args.messages, Path(tmp) / "ingest")
        print(f"ingest: {job}", file=sys.stderr)
        shared = ingest(broker.url, args.messages, Path(tmp) / "ingest-2", receivers=2)
        print(f"ingest, 2 receivers: {shared}", file=sys.stderr)
        remote = sharded(broker.url, args.messages, Path(tmp) / "shards")
        print(f"ingest, 2 shards: {remote}", file=sys.stderr)
        base_light = baseline(broker.url, args.long, Path(tmp) / "baseline-light", raw=True)
        print(f"baseline, the light publisher: {base_light}", file=sys.stderr)
        light = ingest(broker.url, args.long, Path(tmp) / "ingest-light", raw=True)
        print(f"ingest, the light publisher: {light}", file=sys.stderr)
        base_backlog = baseline(broker.url, args.long, Path(tmp) / "baseline-backlog",
                                backlog=True)
        print(f"baseline, a backlog: {base_backlog}", file=sys.stderr)
        alone = drain(broker.url, args.long, Path(tmp) / "drain")
        print(f"ingest, a backlog: {alone}", file=sys.stderr)
        one = drain(broker.url, args.long, Path(tmp) / "drain-1", master="local[1]")
        print(f"ingest, a backlog, one executor core: {one}", file=sys.stderr)
        lat = latency(broker.url, args.samples, Path(tmp) / "latency")
    rows = []
    backlogs = (base_backlog, alone, one)
    long = (base_light, light, *backlogs)
    for name, r in (("paho + pyarrow, one process", base), ("ksp-ingest (Spark local[2])", job),
                    ("ksp-ingest --receivers 2 (MQTT 5 shared subscription)", shared),
                    ("ksp-ingest --shards: 2 ksp-ingest-shard processes", remote),
                    ("paho + pyarrow, the light publisher (`ksp telemetry --raw`)", base_light),
                    ("ksp-ingest (Spark local[2]), the light publisher", light),
                    ("paho + pyarrow draining a backlog (published before it started)",
                     base_backlog),
                    ("ksp-ingest draining a backlog", alone),
                    ("the same with one executor core (local[1])", one)):
        n = args.long if any(r is b for b in long) else args.messages
        rate = n / r["seconds"]
        pub = n / r["published"]["seconds"]
        rows.append([name, f"{n:,}", f"{r['seconds']:.1f}", f"**{rate:,.0f}**",
                     f"{n / 2 / r['second_half']:,.0f}" if r["second_half"] > 0 else "–",
                     f"({pub:,.0f}, before)" if any(r is b for b in backlogs)
                     else f"{pub:,.0f}"])
    headers = ["consumer", "messages", "seconds", "messages/s", "second half, messages/s",
               "publisher's messages/s"]
    env = environment("pyspark", "paho-mqtt", "pyarrow")
    title = (f"Ingest: {args.messages:,} readings of {DEVICES} devices over MQTT (mosquitto, "
             f"QoS 1) into Parquet, publish to the last row written, {env['python']}; "
             f"publish → SIB IND p50 {statistics.median(lat):.0f} ms, max {max(lat):.0f} ms "
             f"({len(lat)} samples)")
    print_report(title, headers, rows, markdown=args.markdown, module="tools.bench.ingest",
                 prog=prog, argv=argv, libraries=env["libraries"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
