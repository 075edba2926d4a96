"""The job's warm-up: before its query starts, one micro-batch of synthetic messages through the
job's whole path (the source's executors reading a buffer file, the de-duplication's state
store, the observations' and dead letters' Parquet, the aggregates), in a directory of its own
that is removed after (`OUT/_warmup`), with no broker and no SIB.

Why: a new JVM's first micro-batch with rows costs seconds more than a warm one — its plans
compiled, the Python workers started and their imports loaded, the state store opened, the
JIT still cold (measured on 2 cores: 16,000 rows in 7.5 s, where a warm batch took 4 s for
100,000). Paid here, it holds back no reading: the receivers subscribed before Spark started
(`spark_ingest.receiving`) and what they take meanwhile waits in the buffer for the job's first
batch; `ingest ready` then means ready at the warm rate.
"""
from __future__ import annotations

import logging
import shutil
import threading
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

from .telemetry import reading, topic_of

log = logging.getLogger("ksp.ingest")

__all__ = ["MOST", "READINGS", "messages", "warm_up"]

#: Synthetic messages in the warm-up's batch: enough for the JIT's thresholds on the rows'
#: paths (C1 compiles a method after a few hundred calls), a fraction of a second when warm.
READINGS = 10_000
#: The most `--warm-up` takes: one micro-batch's worth (`--max-per-batch`'s default).
MOST = 100_000
#: Devices they come from, each a partition directory of the observations.
DEVICES = 10
#: Of them, dead letters (a payload that is not JSON): the dead letters' path warmed too.
DEAD_EVERY = 100
DIRECTORY = "_warmup"
#: Seconds between looks at whether the job was asked to stop while the batch runs.
POLL = 0.5


def messages(count: int, now: datetime | None = None) -> list[tuple[str, bytes]]:
    """`count` (topic, payload): readings of `DEVICES` devices, a millisecond apart before
    `now` (each its own, for the de-duplication), one in `DEAD_EVERY` not JSON."""
    now = now or datetime.now(timezone.utc)
    out = []
    for k in range(count):
        device = f"warm-up-{k % DEVICES}"
        payload = b"not json" if k % DEAD_EVERY == DEAD_EVERY - 1 else reading(
            device, "temperature", 20.0 + k % 7, "Cel", now - timedelta(milliseconds=k))
        out.append((topic_of(device), payload))
    return out


def warm_up(spark, options, count: int = READINGS, timeout: float = 600.0,
            stopped: threading.Event | None = None) -> float:
    """Run `count` synthetic messages through an `Ingest` on `spark` with `options` (its
    `out` replaced by `OUT/_warmup`, no SIB, one receiver's buffer) as one micro-batch;
    returns the seconds it took. A warm-up that fails or overruns `timeout` is logged and
    the job starts all the same (it only costs the job its head start); one `stopped` (the
    job asked to stop) has its Spark jobs cancelled and ends at once."""
    from .buffer import Buffer
    from .job import Ingest

    directory = Path(options.out) / DIRECTORY
    shutil.rmtree(directory, ignore_errors=True)  # a killed warm-up's
    started = time.monotonic()
    try:
        buffer = Buffer(directory / "_mqtt")
        try:
            buffer.append(messages(count))
        finally:
            buffer.close()
        ingest = Ingest(spark, replace(options, out=str(directory), sib=None, receivers=1,
                                       shards=()))
        query = ingest.start(offline=True)
        try:
            while not query.awaitTermination(POLL):
                if stopped is not None and stopped.is_set():
                    spark.sparkContext.cancelAllJobs()
                    return time.monotonic() - started
                if time.monotonic() - started > timeout:
                    log.warning("warm-up: not done after %g s; starting without it", timeout)
                    break
        finally:
            query.stop()
        if ingest.stats["observations"] + ingest.stats["dead_letters"] != count:
            log.warning("warm-up: %d of %d messages went through", ingest.stats[
                "observations"] + ingest.stats["dead_letters"], count)
    except Exception as exc:  # noqa: BLE001 - the job itself does not depend on it
        log.warning("warm-up failed: %s: %s", type(exc).__name__, exc)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return time.monotonic() - started
