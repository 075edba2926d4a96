"""`ksp-ingest`: MQTT telemetry into Parquet (SOSA observations, dead letters) and the latest
readings into the SIB, on PySpark Structured Streaming — local[2] by default.

    ksp-ingest --mqtt mqtt://127.0.0.1:1883 --topic 'ksp/+/telemetry' \\
               --sib udp://127.0.0.1:7000 --out data/
    ksp-ingest ... --master spark://HOST:7077      # or: spark-submit spark_ingest/cli.py ...

Until SIGINT/SIGTERM, which stop the query after its current batch (exit 0). A one-line status
goes to stderr every `--status` seconds: readings/s, the buffer's backlog, the last batch, dead
letters. `--readings N` stops after N observations (for tests and demos).

    ksp-ingest backfill --out data/                # the late readings, with the job stopped
"""
from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path

from . import class_archive
from . import receiving as receivers_apart
from . import warmup
from .aggregates import interval_ms
from .job import Ingest, IngestOptions, local_master, lost_checkpoint, source_options
from .outlock import hold

log = logging.getLogger("ksp.ingest")


#: What the job imports from the `spark` extra, by module (`missing_extra`).
SPARK_MODULES = ("pyspark", "pyarrow", "paho")


def missing_extra(modules: tuple[str, ...] = SPARK_MODULES) -> str | None:
    """None when `modules` are importable, else one line saying which are not and the command
    that installs them (the `spark` extra into this interpreter's environment; from a checkout
    at the versions constraints.txt fixes)."""
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if not missing:
        return None
    root = Path(__file__).resolve().parent.parent
    project = (f"-e '{root}[spark]' -c '{root / 'constraints.txt'}'"
               if (root / "pyproject.toml").is_file() else "'ksp-gateway[spark]'")
    return (f"ksp-ingest: {', '.join(missing)} not installed (the spark extra): "
            f"{sys.executable} -m pip install {project}")


def build_parser() -> argparse.ArgumentParser:
    from .broker_args import add_broker_flags

    d = IngestOptions()
    p = argparse.ArgumentParser(prog="ksp-ingest", description=__doc__.split("\n\n")[0],
                                epilog="ksp-ingest backfill --out DIR: the late readings into "
                                       "the observations, with the job stopped (--help)")
    p.add_argument("--mqtt", default=d.mqtt, metavar="URL",
                   help="the MQTT broker: mqtt://HOST[:PORT], or mqtts://HOST[:PORT] (TLS)")
    add_broker_flags(p)
    p.add_argument("--topic", default=d.topic, help="topic filter (default %(default)s)")
    p.add_argument("--sib", metavar="URL", help="push each batch's latest readings there "
                                                "(udp://, tcp://, coap://)")
    p.add_argument("--out", default=d.out, metavar="DIR",
                   help="observations, dead letters, checkpoint and buffer (default "
                        "%(default)s/)")
    p.add_argument("--base", default=d.base, metavar="IRI",
                   help="namespace of sensors and properties (default %(default)s)")
    p.add_argument("--client-id", default=d.client_id,
                   help="MQTT client id, the broker's persistent session: keep it")
    p.add_argument("--receivers", type=int, default=d.receivers, metavar="N",
                   help="MQTT receivers splitting the topic through an MQTT 5 shared "
                        "subscription, each with its own buffer shard (default 1: one MQTT "
                        "3.1.1 subscription); keep it across restarts")
    p.add_argument("--share-group", metavar="NAME",
                   help="the shared subscription's group (default: the client id)")
    p.add_argument("--shards", metavar="URL,URL", help="receivers on other machines "
                   "(`ksp-ingest-shard` on each, a shared subscription's "
                   "members): read from their http://HOST:PORT instead of receiving here")
    p.add_argument("--shard-secret-file", metavar="FILE", help="the secret the shards' "
                   "requests are signed with (default: $KSP_INGEST_SECRET)")
    p.add_argument("--master", default="local[2]", help="Spark master (default %(default)s)")
    p.add_argument("--watermark", default=d.watermark,
                   help="how late a duplicate may come and still be dropped")
    p.add_argument("--trigger", default=d.trigger, help="micro-batch interval")
    p.add_argument("--max-per-batch", type=int, default=d.max_per_batch, metavar="N",
                   help="messages per micro-batch at most (default %(default)s)")
    p.add_argument("--ntriples", action="store_true", help="also write N-Triples")
    p.add_argument("--compact-after", type=int, default=d.compact_after, metavar="N",
                   help="merge a partition's small files, N of one level into one "
                        "(default %(default)s; 0: never)")
    p.add_argument("--warm-up", type=int, default=warmup.READINGS, metavar="N",
                   help="before subscribing, N synthetic messages through the job in a "
                        "throwaway directory, so that it is ready at its warm rate "
                        f"(default %(default)s; 0: none; at most {warmup.MOST:,})")
    p.add_argument("--class-cache", metavar="DIR", help="the Spark driver's class archive "
                   "(~150 MB, made by the first start, mapped by the next: they start in "
                   "half the time; default $KSP_INGEST_CLASS_CACHE, else "
                   f"{class_archive.default_directory()}; off: none)")
    p.add_argument("--status", type=float, default=5.0, metavar="S",
                   help="status line every S seconds (0: none)")
    p.add_argument("--readings", type=int, metavar="N", help="stop after N observations")
    p.add_argument("--metrics-port", type=int, default=-1, metavar="N",
                   help="Prometheus metrics on this port (0: any free one; default off)")
    p.add_argument("--metrics-host", default="127.0.0.1", metavar="ADDR")
    p.add_argument("--log-level", default="info",
                   choices=("debug", "info", "warning", "error"))
    return p


#: The local JVM's default options (`spark.driver.defaultJavaOptions` for a `local` master:
#: a user's `spark.driver.extraJavaOptions` come after them, so they add to them and win).
LOCAL_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"
#: The exit status of a job interrupted (SIGINT) before it was ready: a shell's 128 + SIGINT.
INTERRUPTED = 130


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM before Spark runs: the start ends where it is."""


class Signals:
    """SIGINT and SIGTERM for the job. Until Spark runs, a signal ends the start where it is
    (`Interrupted`); from `polled()` on it only sets `event`, which the job looks at between
    its calls into Spark: an exception raised inside a py4j call would leave its connection
    in the middle of an answer (and pyspark's own SIGINT handler calls into the JVM from the
    handler), so the job is never interrupted there."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.received: int | None = None
        self._raise = True

    def install(self) -> "Signals":
        earlier = signal.getsignal(signal.SIGINT)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)
        if self.received is None and getattr(earlier, "received", None) is not None:
            # A Ctrl-C whose KeyboardInterrupt Python dropped while the command started (the
            # console script's handler kept it: `ksp_tools.commands.SigintLatch`).
            self._on_signal(signal.SIGINT, None)
        return self

    def polled(self) -> None:
        """From now on a signal sets `event` (installed again: over pyspark's SIGINT handler)."""
        self._raise = False
        self.install()

    def status(self) -> int:
        """The exit status of a job stopped before it was ready: SIGTERM is a stop asked for
        (0), SIGINT a user's interrupt (`INTERRUPTED`)."""
        return INTERRUPTED if self.received == signal.SIGINT else 0

    def said(self) -> str:
        return "interrupted" if self.received == signal.SIGINT else "SIGTERM"

    def _on_signal(self, signum, frame) -> None:
        self.received = signum
        self.event.set()
        if self._raise:
            raise Interrupted


def spark_session(master: str, app: str = "ksp-ingest", *, apart: bool = False,
                  class_cache: str | None = None):
    """The job's Spark session. `apart`: its JVM in a session of its own (one per process: the
    first Spark of this process), so that a signal to the job's process group — Ctrl-C at a
    terminal, `timeout`, `kill -- -PGID`, a service manager's stop — reaches this process
    alone, which then stops the queries and Spark in order; the JVM still ends with this
    process (pyspark's gateway exits when its standard input closes). `class_cache`: where
    the driver's class archive is (`spark_ingest.class_archive`; "off": none)."""
    import os

    from pyspark.sql import SparkSession

    # The Python workers (the MQTT source's reader, `read` on the executors) are this
    # interpreter, with this environment's pyspark, paho and pyarrow; not `python3` off PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    settings = {"spark.master": master, "spark.app.name": app}
    if local_master(master):  # not local-cluster[...]: executors apart
        # One JVM on this host: its UI (no login) and its endpoints on the loopback only,
        # where Spark binds them to every interface (the UI's host is SPARK_LOCAL_IP, else
        # 0.0.0.0); a SPARK_LOCAL_IP of the user's own wins.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # The JVM is driver and executor, and shares the cores with the receiver: C2, the
        # optimising JIT, took half its CPU here and was still compiling after 90 s
        # (on the 2-core host); C1 alone leaves the cores to the rows. A cluster's
        # long-lived executors keep the default.
        settings["spark.driver.defaultJavaOptions"] = LOCAL_JAVA_OPTIONS
    from pyspark import SparkContext

    # A JVM this process started already (pyspark keeps it for the next session) has its
    # classes loaded.
    archive = (None if SparkContext._gateway is not None
               else class_archive.prepare(class_cache, make=apart))
    if archive is not None:
        settings["spark.driver.defaultJavaOptions"] = " ".join(
            filter(None, (settings.get("spark.driver.defaultJavaOptions"), archive.option)))
    settings.update({
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "4",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        # A batch's commit writes the changes it made, not a checkpoint of the whole store
        # (which it then does in the background): the de-duplication's commit took 300-480 ms
        # a batch, 140-150 ms so (on the 2-core host). Existing checkpoints carry on under it.
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        # Its count of the keys kept (a metric nothing here reads) costs a look-up before
        # each put, beside the de-duplication's own.
        "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows": "false",
        # The checkpoint is on a local or shared disk (the driver renames in --out). Hadoop's
        # FileContext API, Spark's default there, asks of each file it renames whether it is
        # a link, which without Hadoop's native library runs `readlink` in a process of its
        # own: about 300 in 10 s of micro-batches, ~10 ms each on the batch's thread. The
        # FileSystem API renames with rename(2), atomic on such a disk; OUT/.lock keeps a
        # second job off the checkpoint (`spark_ingest.outlock`).
        "spark.sql.streaming.checkpointFileManagerClass":
            "org.apache.spark.sql.execution.streaming.checkpointing."
            "FileSystemBasedCheckpointFileManager",
    })
    if apart:
        from pyspark import SparkConf
        from pyspark.java_gateway import launch_gateway

        conf = SparkConf().setAll(settings.items())
        SparkContext(conf=conf, gateway=launch_gateway(
            conf, popen_kwargs={"start_new_session": True}))
    spark = SparkSession.builder.config(map=settings).getOrCreate()
    if archive is not None:
        jvm = getattr(spark.sparkContext._gateway, "proc", None)
        archive.started(jvm.pid if jvm is not None else None)
    return spark


def status_line(ingest: Ingest, previous: dict, seconds: float) -> str:
    """Rate, lag (the buffer's backlog: received, not yet in a committed batch), the last
    batch, dead letters."""
    s = ingest.stats
    rate = (s["observations"] - previous.get("observations", 0)) / max(seconds, 1e-9)
    previous.update(s)
    waiting, waited = ingest.lag()
    return (f"ingest: {rate:,.0f} readings/s, {s['observations']:,} in all, lag "
            f"{waiting:,} messages ({waited:.1f} s), {s['dead_letters']:,} dead letters, "
            f"last batch {s['last_batch_rows']:,} rows in {s['last_batch_seconds']:.2f} s, "
            f"{s['sib_updates']:,} SIB updates, {s['late']:,} late readings (dead letters), "
            f"{s['merged_files']:,} small files merged"
            + (f", {s['late_dropped']:,} late readings dropped by Spark"
               if s["late_dropped"] else ""))


def failed(ingest: Ingest) -> bool:
    """Whether one of the ingest's queries has failed (said in the log)."""
    query = next((q for q in ingest.queries if q.exception() is not None), None)
    if query is not None:
        log.error("the query %s failed: %s", query.name, query.exception())
    return query is not None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    missing = missing_extra(("pyarrow",) if argv[:1] == ["backfill"] else SPARK_MODULES)
    if missing is not None:
        print(missing, file=sys.stderr)
        return 2
    if argv[:1] == ["backfill"]:
        from .backfill import main as backfill

        return backfill(argv[1:])
    from .broker_args import broker_login

    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        broker = broker_login(args)
    except (OSError, ValueError) as exc:
        print(f"ksp-ingest: {exc}", file=sys.stderr)
        return 2
    try:
        interval_ms(args.watermark)
    except ValueError as exc:
        print(f"ksp-ingest: --watermark: {exc}", file=sys.stderr)
        return 2
    if args.compact_after == 1 or args.compact_after < 0:
        print(f"ksp-ingest: --compact-after {args.compact_after}: 0 (never) or at least 2",
              file=sys.stderr)
        return 2
    if args.max_per_batch < 1:
        print(f"ksp-ingest: --max-per-batch {args.max_per_batch}: at least 1", file=sys.stderr)
        return 2
    if not 0 <= args.warm_up <= warmup.MOST:
        print(f"ksp-ingest: --warm-up {args.warm_up}: 0 to {warmup.MOST:,}", file=sys.stderr)
        return 2
    if not 1 <= args.receivers <= 64:
        print(f"ksp-ingest: --receivers {args.receivers}: 1 to 64", file=sys.stderr)
        return 2
    if args.share_group is not None and not re.fullmatch(r"[^/+#]+", args.share_group):
        print(f"ksp-ingest: --share-group {args.share_group!r}: a name without / + #",
              file=sys.stderr)
        return 2
    shards: tuple[str, ...] = ()
    secret = b""
    if args.shards:
        from .shards import RemoteShard, read_secret

        try:
            if args.receivers != 1:
                raise ValueError("--receivers and --shards: the shards are the receivers")
            secret = read_secret(args.shard_secret_file)
            shards = tuple(RemoteShard(url, secret).url for url in args.shards.split(","))
        except (OSError, ValueError) as exc:
            print(f"ksp-ingest: {exc}", file=sys.stderr)
            return 2
    try:  # held while the job runs (released when this returns, or the process dies)
        lock = hold(Path(args.out), "ksp-ingest")
    except OSError as exc:  # `Busy`: another job or a backfill has it; or not writable
        print(f"ksp-ingest: {exc}", file=sys.stderr)
        return 2
    lost = lost_checkpoint(Path(args.out))
    if lost is not None:
        print(f"ksp-ingest: {args.out} holds the output of batches up to {lost} of a checkpoint "
              f"that is gone ({args.out}/_checkpoint has no committed batch): a new checkpoint "
              f"would number its batches from 0 again and write over theirs. Use another "
              f"--out, or move {args.out} away first.", file=sys.stderr)
        return 2
    options = IngestOptions(mqtt=args.mqtt, topic=args.topic, out=args.out, sib=args.sib,
                            base=args.base, client_id=args.client_id,
                            watermark=args.watermark, trigger=args.trigger,
                            ntriples=args.ntriples, receivers=args.receivers,
                            share=args.share_group, mqtt_ca=broker["ca"],
                            mqtt_user=broker["user"], mqtt_password=broker["password"],
                            shards=shards, shard_secret=secret,
                            compact_after=args.compact_after,
                            max_per_batch=args.max_per_batch)
    signals = Signals().install()
    # The receivers first, in a process of their own at this one's priority, subscribed at
    # once; then Spark, whose processes inherit the lower one this takes
    # (`spark_ingest.receiving`).
    receiving = None
    try:
        receiving = None if shards else receivers_apart.spawn(source_options(options))
        if receiving is not None:
            receivers_apart.lower_priority()
        return _run(args, options, lock, receiving, signals)
    except Interrupted:
        log.info("%s while starting: stopped (a next start resumes from %s)", signals.said(),
                 args.out)
        return signals.status()
    finally:
        if receiving is not None:
            receivers_apart.stop(receiving)


def _run(args, options: IngestOptions, lock, receiving, signals: Signals) -> int:
    """The job, once its receivers run (`receiving`: their process; None: shards)."""
    spark = spark_session(args.master, apart=True, class_cache=args.class_cache)
    signals.polled()
    stop = signals.event
    spark.sparkContext.setLogLevel("WARN")
    if args.warm_up:
        took = warmup.warm_up(spark, options, args.warm_up, stopped=stop)
        if not stop.is_set():
            log.info("warmed up in %.1f s (%d synthetic messages through the job)", took,
                     args.warm_up)
    if stop.is_set():
        log.info("%s while starting: stopped (a next start resumes from %s)", signals.said(),
                 args.out)
        spark.stop()
        return signals.status()
    ingest = Ingest(spark, options)
    ingest.start(apart=receiving is not None)
    # Its settings are its flags: a SIGHUP (a closed terminal, a reload by habit) is logged.
    signal.signal(signal.SIGHUP, lambda *_: log.info("SIGHUP: nothing to reload (the "
                                                     "settings are the command line's)"))
    if args.metrics_port >= 0:
        from .metrics import serve

        log.info("metrics on http://%s:%d/metrics", args.metrics_host,
                 serve(ingest, args.metrics_host, args.metrics_port).server_port)
    previous: dict = {}
    try:
        # Ready once the broker has every subscription (its SUBACK): a new session gets none
        # of what is published before.
        while (answer := ingest.subscription()) is None and not stop.wait(0.1):
            if failed(ingest) or gone(receiving):
                return 1
        if answer is not None and answer != "ok":
            log.error("the broker refused the subscription to %s: %s", args.topic, answer)
            return 1
        if answer == "ok":
            log.info("ingest ready: %s %s → %s%s",
                     ", ".join(options.shards) if options.shards else args.mqtt,
                     args.topic, args.out,
                     f", latest readings to {args.sib}" if args.sib else "")
        last = time.monotonic()
        while not stop.wait(0.2):
            if failed(ingest) or gone(receiving):
                return 1
            if args.readings is not None and ingest.stats["observations"] >= args.readings:
                break
            now = time.monotonic()
            if args.status and now - last >= args.status:
                print(status_line(ingest, previous, now - last), file=sys.stderr, flush=True)
                last = now
    finally:
        for running in ingest.queries:
            running.stop()
        try:
            ingest.count_dropped()  # the last batch's report
        except Exception:  # the JVM gone with a failed query: its figure goes unsaid
            log.debug("no last progress report", exc_info=True)
        spark.stop()
    log.info("stopped: %s", status_line(ingest, previous, 1.0))
    lock.close()
    return 0


def gone(receiving) -> bool:
    """Whether the receivers' process has ended (said in the log): the job would read
    nothing more."""
    if receiving is None or receiving.poll() is None:
        return False
    log.error("the MQTT receivers' process ended (status %s)", receiving.returncode)
    return True


if __name__ == "__main__":
    sys.exit(main())
