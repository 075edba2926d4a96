"""Ingest benchmark (`ksp bench ingest`): sustained MQTT messages per second through `ksp-ingest`
(Spark, local[2]) against a plain paho subscriber writing the same Parquet with pyarrow, in one
run, through the same mosquitto; and publish → SIB latency.

Run as ``python -m tools.bench.ingest [--quick] [--messages N]
[--sustained RATE [RATE ...]] [--consumers C,...]``.

Both sides get the same N readings (`ksp telemetry`'s, 100 devices), published by a separate
process as fast as the broker takes them (QoS 1), a second after the consumer is ready (the
ingest: its `ingest ready` line, which comes after its warm-up, `spark_ingest.warmup`, and the
SUBACK). The clock runs from the first publish to the moment the last reading is in Parquet:
for the ingest, its `ksp_ingest_observations_total` reaching N (de-duplicated, dead letters split, SOSA rows, partitioned by date and device, the
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

A steady stream (`--sustained RATE`, instead of the rows above): the light publisher paced at
RATE readings/s for `--seconds` (120 by default) into the plain subscriber, `ksp-ingest` and
`ksp-ingest --master local[1]`, one after the other: does each keep up, and how far behind the
stream is it (`steady`)? Every reading is then counted in its Parquet. Several rates
(`--sustained 10000 20000 30000`) run each in turn, a sweep for where a consumer falls behind
(each row then names the rate asked); `--consumers paho,local2,local1` picks the consumers.

Same-run rounds (`--rounds R`, instead of the rows above): R interleaved rounds, each the
plain subscriber then `ksp-ingest` (Spark local[2]) on `--messages` readings from the light
publisher, first publish → last row, and with `--sustained RATE ...` each rate paced for
`--seconds` into both; the ingest's rate over the plain subscriber's in each round, and the
min/median/max over the rounds (on a loaded machine the ratio within a round is what counts).

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
from collections.abc import Callable
from pathlib import Path

from .report import bench_parser, environment, print_report, spread

DEVICES = 100
#: Seconds without a new observation after which a run is given up (a reading lost).
STALLED = 300.0


def _publisher(url: str, count: int, seed: int, raw: bool = False,
               rate: float | None = None) -> subprocess.Popen:
    """`ksp telemetry` in a process of its own; `rate`: readings per second in all."""
    return subprocess.Popen([sys.executable, "-m", __package__.rsplit(".", 1)[0] + ".cli", "telemetry", "--mqtt", url,
                             "--devices", str(DEVICES), "--count", str(count), "--seed",
                             str(seed), *(["--raw"] if raw else []),
                             *(["--rate", str(rate / DEVICES)] if rate else [])],
                            stdout=subprocess.PIPE, text=True)


def _forget(url: str, *client_ids: str) -> None:
    """End these clients' persistent sessions at the broker (a clean-session connect): a
    session left behind would keep every later run's readings for its next connect, and make
    the broker store them meanwhile."""
    from ..telemetry import publish_raw

    for client_id in client_ids:
        publish_raw(url, [], client_id=client_id)


def _published(proc: subprocess.Popen) -> dict:
    out, _ = proc.communicate(timeout=3600)
    return json.loads(out.strip().splitlines()[-1])


def baseline(url: str, count: int, out: Path, backlog: bool = False, raw: bool = False,
             rate: float | None = None, samples: list | None = None,
             dropped: Callable[[], int] | None = None) -> dict:
    """The plain subscriber: seconds from the first publish to the last row in Parquet; with
    `backlog`, the N readings are published while it is away (a persistent session), and the
    clock starts when it connects again. `rate`: the publisher's pace (readings/s in all);
    `samples` gets (seconds from the start, rows in Parquet) at each file written; `dropped`:
    as `_until_observed`'s."""
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
            if samples is not None:
                samples.append((time.perf_counter() - started, written))
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
        started, wall = time.perf_counter(), time.time()
        client = subscriber()
        client.loop_start()
    else:
        client = subscriber()
        client.loop_start()
        time.sleep(1)  # subscribed
        started, wall = time.perf_counter(), time.time()
        publisher = _publisher(url, count, seed=1, raw=raw, rate=rate)
    deadline = time.monotonic() + 3600
    while not done.wait(2) and time.monotonic() < deadline:
        lost = dropped() if dropped is not None else 0
        with lock:
            if lost and written + len(rows) >= count - lost:  # the rest will never come
                flush()
                break
    seconds = time.perf_counter() - started
    client.loop_stop()
    client.disconnect()
    if backlog:
        _forget(url, "bench-baseline-backlog")
    else:
        published = _published(publisher)
    return {"seconds": seconds, "published": published, "wall": wall,
            "second_half": seconds - (marks.get("half", started + seconds) - started)}


def _job(url: str, out: Path, client_id: str, receivers: int = 1, shards: str = "",
         master: str = "local[2]"):
    from spark_ingest.testing import IngestProcess

    more = ("--shards", shards) if shards else ("--receivers", str(receivers))
    return IngestProcess("--mqtt", url, "--out", str(out), "--metrics-port", "0",
                         "--status", "0", "--client-id", client_id, "--master", master, *more,
                         ready="ingest ready")


def _observed(job) -> float:
    import re

    port = int(re.search(r"metrics on http://[^:]+:(\d+)", job.log())[1])
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("ksp_ingest_observations_total "):
                return float(line.split()[1])
    return 0.0


def _until_observed(job, count: int, started: float, samples: list | None = None,
                    dropped: Callable[[], int] | None = None) -> dict:
    """Poll the job's metrics until N observations: seconds from `started`, and of the second
    half (from N/2 to N); `samples` gets (seconds from `started`, observations) at each
    poll. `dropped`: how many of the N the broker dropped so far, which will never come:
    then until N less those."""
    half = None
    last, moved = 0.0, time.perf_counter()
    lost = 0
    while (n := _observed(job)) < count - lost:
        now = time.perf_counter()
        if dropped is not None:
            lost = dropped()
        if samples is not None:
            samples.append((now - started, n))
        if half is None and n * 2 >= count:
            half = now
        if n != last:
            last, moved = n, now
        elif now - moved > STALLED:
            raise RuntimeError(f"the ingest stalled at {n:,.0f} of {count:,} observations "
                               f"({STALLED:g} s without one more)")
        time.sleep(0.1)
    end = time.perf_counter()
    if samples is not None:
        samples.append((end - started, n))
    return {"seconds": end - started, "second_half": end - (end if half is None else half)}


def ingest(url: str, count: int, out: Path, receivers: int = 1, shards: str = "",
           raw: bool = False, rate: float | None = None, samples: list | None = None,
           master: str = "local[2]", dropped: Callable[[], int] | None = None) -> dict:
    """`ksp-ingest`: seconds from the first publish to its observation count reaching N
    (`rate`, `samples`: as `baseline`'s; `dropped`: as `_until_observed`'s)."""
    client_id = f"bench-ingest-{receivers}"
    with _job(url, out, client_id, receivers, shards, master) as job:
        time.sleep(1)
        started, wall = time.perf_counter(), time.time()
        publisher = _publisher(url, count, seed=2, raw=raw, rate=rate)
        timed = _until_observed(job, count, started, samples, dropped)
        published = _published(publisher)
        job.proc.terminate()
        job.proc.wait(120)
    _forget(url, client_id, *(f"{client_id}-{k}" for k in range(receivers)))
    return {**timed, "published": published, "wall": wall}


def sharded(url: str, count: int, out: Path, n: int = 2) -> dict:
    """`ksp-ingest --shards`: N receivers as processes of their own (`ksp-ingest-shard`, as on
    N machines), read over signed HTTP, the executors reading their spans."""
    import contextlib
    import os
    import secrets

    from spark_ingest.testing import ShardProcess

    os.environ.setdefault("KSP_INGEST_SECRET", secrets.token_hex(16))
    with contextlib.ExitStack() as stack:
        # last, once the shards have stopped
        stack.callback(_forget, url, *(f"bench-shard-{k}" for k in range(n)))
        urls = [stack.enter_context(ShardProcess(
            "--mqtt", url, "--client-id", f"bench-shard-{k}", "--share-group", "bench-shards",
            "--buffer", str(out / f"shard-{k}"), "--listen", "127.0.0.1:0")).url
            for k in range(n)]
        return ingest(url, count, out / "job", shards=",".join(urls))


def drain(url: str, count: int, out: Path, master: str = "local[2]",
          dropped: Callable[[], int] | None = None) -> dict:
    """`ksp-ingest` alone: N readings published while it was stopped (the broker keeps them
    for its persistent session), then seconds from its start (Spark's session up, the
    receiver subscribed) to N observations: its own rate, no publisher sharing the cores.
    `dropped`: as `_until_observed`'s."""
    client_id = f"bench-drain-{master}"
    with _job(url, out, client_id, master=master) as job:  # the session, at the broker
        job.proc.terminate()
        job.proc.wait(120)
    published = _published(_publisher(url, count, seed=3))
    with _job(url, out, client_id, master=master) as job:
        timed = _until_observed(job, count, time.perf_counter(), dropped=dropped)
        job.proc.terminate()
        job.proc.wait(120)
    _forget(url, client_id)
    return {**timed, "published": published}


def sustained(url: str, rate: float, seconds: float, out: Path, consumer: str = "baseline",
              master: str = "local[2]", broker=None) -> dict:
    """A steady stream: the light publisher paced at `rate` readings/s for `seconds`, into the
    plain subscriber (`consumer` "baseline") or `ksp-ingest` ("ingest", on `master`); what
    `steady` makes of the consumer's rows over time, and the rows in its Parquet at the end
    (`stored`: the readings, each once). With `broker` (a `spark_ingest.testing.Mosquitto`),
    also `dropped`: the readings it dropped over the consumer's queue (a consumer that fell
    behind by more than `max_queued_messages` beyond its own buffer), which the ingest's run
    then stops waiting for."""
    count = int(rate * seconds)
    samples: list[tuple[float, float]] = []
    import pyarrow.dataset as ds

    dropped = None if broker is None else broker.drops_from_now()
    if consumer == "baseline":
        r = baseline(url, count, out, raw=True, rate=rate, samples=samples, dropped=dropped)
        stored = ds.dataset(str(out)).count_rows()
    else:
        r = ingest(url, count, out, raw=True, rate=rate, samples=samples, master=master,
                   dropped=dropped)
        stored = ds.dataset(str(out / "observations"), partitioning="hive").count_rows()
    if dropped is not None:
        time.sleep(1.5)  # $SYS is refreshed every second
    late = r["published"]["began"] - r["wall"]
    return {**r, "stored": stored, "dropped": dropped() if dropped else None,
            **steady(samples, rate, seconds, count, late, r["seconds"],
                     r["published"]["seconds"])}


def steady(samples: list[tuple[float, float]], rate: float, seconds: float, count: int,
           late: float, total: float, publishing: float) -> dict:
    """What a paced run's (seconds, rows) samples say, on the publisher's clock (it began
    `late` seconds after the consumer's clock and published for `publishing` seconds; the
    consumer had every row after `total`):
    `kept`, the consumer's rows/s over the second half of the publishing, from the first
    batch written in it to the last (samples between batches repeat the count);
    its lag behind the pace — readings due by then less rows written, over the rate, in
    seconds of the stream (none when ahead of it, as a hundred written at once can be): the
    trigger interval and a batch's work are in it — as means over the third and the last
    quarter of the publishing (`lag_q3`, `lag_q4`) and at most over its second half
    (`lag_max`); `catch_up`, seconds from the last publish to the last row. A consumer that
    keeps up holds `kept` near the rate and a lag that does not grow from one quarter to the
    next; one that does not falls behind by (rate − kept)/rate each second."""
    timeline = [(t - late, n) for t, n in samples]
    half = [(t, n) for t, n in timeline if seconds / 2 <= t <= seconds]
    # rows arrive a batch (a file) at a time: the rate from the first batch to the last
    commits = [(t, n) for k, (t, n) in enumerate(timeline)
               if seconds / 2 <= t <= seconds and (k == 0 or n != timeline[k - 1][1])]
    kept = None
    if len(commits) >= 2 and commits[-1][0] > commits[0][0]:
        kept = (commits[-1][1] - commits[0][1]) / (commits[-1][0] - commits[0][0])

    def lag(t: float, n: float) -> float:
        return max(0.0, (min(count, rate * t) - n) / rate)

    def mean_lag(start: float, end: float) -> float | None:
        lags = [lag(t, n) for t, n in half if start <= t <= end]
        return sum(lags) / len(lags) if lags else None

    return {"kept": kept, "lag_q3": mean_lag(seconds / 2, seconds * 3 / 4),
            "lag_q4": mean_lag(seconds * 3 / 4, seconds),
            "lag_max": max((lag(t, n) for t, n in half), default=None),
            "catch_up": max(0.0, total - late - publishing)}


def latency(url: str, samples: int, out: Path) -> list[float]:
    """Publish → IND through the ingest and a `ksp-sib`, ms."""
    from sib.testing import SibProcess
    from spark_ingest.telemetry import reading, topic_of
    from spark_ingest.testing import IngestProcess
    from ..telemetry import publish
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


SUSTAINED = {"paho": ("paho + pyarrow, one process", "baseline", "local[2]"),  # no Spark
             "local2": ("ksp-ingest (Spark local[2])", "ingest", "local[2]"),
             "local1": ("ksp-ingest, one executor core (local[1])", "ingest", "local[1]")}
"""The steady stream's consumers by `--consumers` name: (row, `sustained`'s consumer, master)."""


def sustained_runs(rates: list[float], consumers: str) -> list[tuple[float, str, str, str]]:
    """(rate, row, consumer, master) for each rate in turn, each consumer within it; with
    several rates, a row names its rate."""
    names = [c.strip() for c in consumers.split(",") if c.strip()]
    unknown = [c for c in names if c not in SUSTAINED]
    if unknown or not names:
        raise SystemExit(f"--consumers: {', '.join(unknown) or 'none'}; "
                         f"choose from {', '.join(SUSTAINED)}")
    if any(rate <= 0 for rate in rates):
        raise SystemExit("--sustained: rates are readings per second, above 0")
    return [(rate, SUSTAINED[c][0] + ("" if len(rates) == 1 else f", {rate:,.0f}/s asked"),
             *SUSTAINED[c][1:]) for rate in rates for c in names]


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = bench_parser(__name__, __doc__, prog, "20,000 messages, 5 latency samples")
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--long", type=int, default=1_000_000,
                        help="readings in the long rows: the light publisher's and the "
                             "backlogs (published before the consumer starts)")
    parser.add_argument("--samples", type=int, default=20, help="latency samples")
    parser.add_argument("--sustained", type=float, metavar="RATE", nargs="+",
                        help="instead: a steady stream of RATE readings/s (the light "
                             "publisher, paced) for --seconds into each consumer; do they "
                             "keep up? Several rates: each in turn (a sweep)")
    parser.add_argument("--seconds", type=float, default=120.0,
                        help="the steady stream's length")
    parser.add_argument("--consumers", default=",".join(SUSTAINED),
                        help="the steady stream's consumers, comma-separated, of "
                             f"{', '.join(SUSTAINED)} (default: all)")
    parser.add_argument("--rounds", type=int, default=0,
                        help="instead: R interleaved rounds of the plain subscriber and "
                             "ksp-ingest (--messages readings, and each --sustained rate): "
                             "their ratio per round")
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.long, args.samples, args.seconds = 20_000, 20_000, 5, 20.0
    if args.rounds:
        return _rounds(args, prog, argv)
    if args.sustained:
        return _sustained(args, prog, argv)
    from spark_ingest.testing import Mosquitto

    # The broker's store saved as mosquitto does by default: the ingest measured, not the store.
    with tempfile.TemporaryDirectory() as tmp, Mosquitto(Path(tmp) / "mqtt",
                                                         save_every_change=False) as broker:
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
    return _report(args, prog, argv, headers, rows, lambda python: (
        f"Ingest: {args.messages:,} readings of {DEVICES} devices over MQTT (mosquitto, "
        f"QoS 1) into Parquet, publish to the last row written, {python}; "
        f"publish → SIB IND p50 {statistics.median(lat):.0f} ms, max {max(lat):.0f} ms "
        f"({len(lat)} samples)"))


def _report(args, prog: str | None, argv: list[str], headers: list[str],
            rows: list[list[str]], title: Callable[[str], str]) -> int:
    """Print the table under `title(the Python it ran on)`, with the libraries' versions."""
    env = environment("pyspark", "paho-mqtt", "pyarrow")
    print_report(title(env["python"]), headers, rows, markdown=args.markdown,
                 module="tools.bench.ingest", prog=prog, argv=argv, libraries=env["libraries"])
    return 0


def achieved(r: dict) -> float:
    """A paced run's rate: its rows over the seconds from the first publish to the last row
    (the publishing, and the catching up after it)."""
    return r["stored"] / (r["published"]["seconds"] + r["catch_up"])


def _rounds(args, prog: str | None, argv: list[str]) -> int:
    from spark_ingest.testing import Mosquitto

    n, rates = args.messages, args.sustained or []
    kinds = [("first publish → last row", None)] + [
        (f"steady {rate:,.0f}/s for {args.seconds:g} s", rate) for rate in rates]
    got: dict[str, list[tuple[dict, dict]]] = {name: [] for name, _ in kinds}
    with tempfile.TemporaryDirectory() as tmp, Mosquitto(Path(tmp) / "mqtt",
                                                         save_every_change=False) as broker:
        if rates:
            broker.dropped()  # watched from the start: later its value is no longer sent
        for k in range(args.rounds):
            for name, rate in kinds:
                where = Path(tmp) / f"round-{k}-{rate or 0:.0f}"
                if rate is None:
                    pair = (baseline(broker.url, n, where / "paho", raw=True),
                            ingest(broker.url, n, where / "ingest", raw=True))
                else:
                    pair = (sustained(broker.url, rate, args.seconds, where / "paho",
                                      "baseline", broker=broker),
                            sustained(broker.url, rate, args.seconds, where / "ingest",
                                      "ingest", broker=broker))
                print(f"round {k + 1}, {name}: {pair}", file=sys.stderr)
                got[name].append(pair)
    rows = []
    for name, rate in kinds:
        pairs = got[name]
        if rate is None:  # readings over seconds, first publish to last row
            speeds = [(n / p["seconds"], n / i["seconds"]) for p, i in pairs]
            lags = ["–"] * 2
        else:  # the readings over the seconds from the first publish to the last row
            speeds = [(achieved(p), achieved(i)) for p, i in pairs]
            lags = [spread([r["catch_up"] for r in side], ".1f")
                    for side in zip(*pairs)]
        ratios = [i / p for p, i in speeds]
        rows.append([name, spread([p for p, _ in speeds], ",.0f"),
                     spread([i for _, i in speeds], ",.0f"),
                     ", ".join(f"{r:.2f}" for r in ratios), f"**{spread(ratios)}**",
                     *lags])
    headers = ["run", "paho + pyarrow, readings/s", "ksp-ingest, readings/s",
               "ksp-ingest / paho, each round", "ratio min / median / max",
               "paho: last row after the last publish, s",
               "ksp-ingest: last row after the last publish, s"]
    return _report(args, prog, argv, headers, rows, lambda python: (
        f"Ingest against the plain subscriber, same run: {args.rounds} interleaved rounds of "
        f"{n:,} readings of {DEVICES} devices (the light publisher), first publish → last "
        f"row{', and a steady stream' if rates else ''}; min / median / max over the rounds, "
        f"{python}"))


def _sustained(args, prog: str | None, argv: list[str]) -> int:
    from spark_ingest.testing import Mosquitto

    rates, seconds = args.sustained, args.seconds
    runs = sustained_runs(rates, args.consumers)
    results = []
    with tempfile.TemporaryDirectory() as tmp, Mosquitto(Path(tmp) / "mqtt",
                                                         save_every_change=False) as broker:
        for k, (rate, name, consumer, master) in enumerate(runs):
            r = sustained(broker.url, rate, seconds, Path(tmp) / f"run-{k}", consumer, master,
                          broker)
            print(f"{name}, {rate:,.0f}/s: {r}", file=sys.stderr)
            results.append((name, r))

    def fixed(v: float | None, form: str) -> str:
        return "–" if v is None else format(v, form)

    rows = [[name, f"{r['published']['ok'] / r['published']['seconds']:,.0f}",
             f"**{fixed(r['kept'], ',.0f')}**", fixed(r["lag_q3"], ".1f"),
             fixed(r["lag_q4"], ".1f"), fixed(r["lag_max"], ".1f"), f"{r['catch_up']:.1f}",
             f"{r['stored']:,}", f"{r['dropped']:,}"] for name, r in results]
    headers = ["consumer", "publisher's readings/s", "consumer's readings/s, second half",
               "mean lag, third quarter, s", "mean lag, last quarter, s",
               "most lag, second half, s", "last row after the last publish, s",
               "rows in Parquet", "dropped by the broker"]
    asked = ", ".join(f"{rate:,.0f}" for rate in rates)
    return _report(args, prog, argv, headers, rows, lambda python: (
        f"Ingest, a steady stream: {asked} readings/s of {DEVICES} devices for {seconds:g} s "
        f"({', '.join(f'{int(r * seconds):,}' for r in rates)} readings, the light publisher "
        f"paced) into each consumer in turn, {python}"))


if __name__ == "__main__":
    sys.exit(main())
