"""The ingest job: MQTT telemetry (`spark_ingest.source`) → SOSA observations in Parquet, dead
letters, and the latest readings in the SIB, one Structured Streaming query.

Per micro-batch (`foreachBatch`, after the stream's de-duplication):

- **de-duplication**: a reading is known by (device, property, time); repeats within the
  watermark (`watermark`, 10 minutes by default, on the reading's time) are dropped, as are
  the copies an MQTT redelivery makes. A reading older than the watermark when it comes, which
  Spark would drop, is a dead letter with reason `late` instead (tagged by the source, which
  reads the watermark from the checkpoint: `spark_ingest.source.late_watermark`), counted in
  `stats["late"]`; what Spark drops all the same is counted in `stats["late_dropped"]`. Dead
  letters are never merged, and have no event time: they neither move the watermark nor are
  dropped as late.
- **observations** (`OUT/observations/date=…/device=…/*.parquet`): one row per reading, in
  SOSA's terms — `observation`, `madeBySensor` (``BASE + device``), `observedProperty`
  (``BASE + property``), `hasSimpleResult`, `unit`, `resultTime`; and with `ntriples`, the
  same as N-Triples (`OUT/ntriples/date=…/*.nt`).
- **dead letters** (`OUT/dead_letters/date=…/`): the message as received (`payload`, and
  `payload_bytes` when it is not UTF-8), its topic, when it came and why it was refused
  (`spark_ingest.telemetry.REASONS`, or `late`, `error`, `sib_refused` with the exception's
  type in `error`). One message never fails a batch.
- **the SIB**: the newest reading of each (device, property) in the batch, newer than what was
  sent before, as one KSP update (``DELETE { s p ?old } INSERT { s p value } WHERE { OPTIONAL
  { s p ?old } }`` for each; in chunks of 100 pairs, a Graph field's limit), so that the SIB's
  persistent queries and rules fire on ingested telemetry. An update the SIB refuses is halved
  down to the reading at fault (`push`), which is also a dead letter `sib_refused`.

Each batch's files are written under a staging directory and moved into place named by the
batch id (one per partition directory), each rename replacing an earlier attempt's file of the
same name (and what that attempt left under other names removed after): a batch re-run after a
crash (Spark re-runs the last uncommitted one, from the same offsets) writes the same rows once,
and a reader listing the directories meanwhile never finds a listed file gone (but when small
files are merged: `spark_ingest.compaction`). That needs an output directory the driver can
rename in (local or shared disk).

Where the batch is worked on: on a cluster, by Spark's jobs on the executors (a cached batch,
an aggregation, Spark's partitioned writer); on a local master, whose executors share the
driver's process and cores with the MQTT receiver, the batch comes to the driver once as Arrow
and the same outputs are computed and written there with pyarrow (`spark_ingest.arrow_batch`,
`spark_ingest.partitioned`), which costs a fraction of the JVM's time (docs/benchmarks.md, "Ingest": the job keeps pace
with a plain subscriber).

**Aggregates** (`OUT/aggregates/date=…/device=…`): per minute, device and property, the min,
max, mean and count of the readings, each minute written once the watermark has passed its end,
so every row is final (`spark_ingest.aggregates`: the open minutes kept by the driver).

Every batch adds a file to each partition directory it writes to, so nothing per batch walks a
table: the files an attempt of a batch placed are listed in that batch's manifest
(`OUT/_staging/<table>/batch-N.files`), kept until the next batch; and after each batch the
directories it wrote to are merged where `compact_after` committed files of one level have
piled up (`spark_ingest.compaction`).
"""
from __future__ import annotations

import asyncio
import logging
import math
import os
import re
import shutil
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from .aggregates import Minutes, interval_ms, write_atomic
from .compaction import THRESHOLD, Compactor
from .partitioned import write_partitioned
from .telemetry import LATE, NAME, SIB_REFUSED

log = logging.getLogger("ksp.ingest")

__all__ = ["Ingest", "IngestOptions", "local_master", "lost_checkpoint", "push",
           "source_options"]

#: SOSA's namespace; the observation rows use its terms as column names.
SOSA = "http://www.w3.org/ns/sosa/"
XSD_DOUBLE = "http://www.w3.org/2001/XMLSchema#double"
XSD_DATETIME = "http://www.w3.org/2001/XMLSchema#dateTime"
RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
#: Pairs (device, property) per KSP update to the SIB: a Graph field holds 255 triples.
SIB_CHUNK = 100
#: Pairs whose newest reading sent to the SIB is remembered (`SentReadings`).
MAX_SENT = 1_000_000


@dataclass
class IngestOptions:
    mqtt: str = "mqtt://127.0.0.1:1883"
    topic: str = "ksp/+/telemetry"
    out: str = "data"
    sib: str | None = None  # udp://127.0.0.1:7000; None: no pushing
    base: str = "http://example.org/greenhouse#"
    client_id: str = "ksp-ingest"
    watermark: str = "10 minutes"
    trigger: str = "1 second"
    partitions: int = 2
    max_per_batch: int = 100_000
    receivers: int = 1  # > 1: MQTT 5 shared subscription, one buffer shard each
    shards: tuple[str, ...] = ()  # receivers on other machines: their URLs (`shards.py`)
    shard_secret: bytes = b""  # what their requests are signed with
    share: str | None = None  # the shared subscription's group (default: client_id)
    mqtt_ca: str | None = None  # mqtts://: the CA file the broker is checked against
    mqtt_user: str | None = None
    mqtt_password: str | None = field(default=None, repr=False)
    ntriples: bool = False
    compact_after: int = THRESHOLD  # files of one level merged into one (0: never)
    extra: dict = field(default_factory=dict)  # more source options


def source_options(o: IngestOptions, *, local: bool = False,
                   offline: bool = False) -> dict[str, str]:
    """The `ksp_mqtt` source's options for the job `o` (`spark_ingest.source`): `local`, the
    executors read the buffer file (a local master); `offline`, the reader runs no
    receiver."""
    out = Path(o.out)
    return {"broker": o.mqtt, "topic": o.topic, "buffer": str(out / "_mqtt"),
            "client_id": o.client_id, "partitions": str(o.partitions),
            "maxMessagesPerBatch": str(o.max_per_batch), "receivers": str(o.receivers),
            "share": o.share or "", "ca": o.mqtt_ca or "", "user": o.mqtt_user or "",
            "password": o.mqtt_password or "", "shards": ",".join(o.shards),
            "checkpoint": str(out / "_checkpoint"), "localBuffer": str(local).lower(),
            "offline": str(offline).lower(), "secret": o.shard_secret.decode(), **o.extra}


class Ingest:
    """`Ingest(spark, options).start()` → the running `StreamingQuery`; `stats` counts what
    each batch did (for the status line and the metrics)."""

    def __init__(self, spark, options: IngestOptions) -> None:
        self.spark, self.o = spark, options
        self.out = Path(options.out)
        self.stats = {"batches": 0, "observations": 0, "dead_letters": 0, "sib_updates": 0,
                      "aggregates": 0, "late": 0, "late_dropped": 0, "merged_files": 0,
                      "dead_reasons": {},
                      "last_batch_seconds": 0.0, "last_batch_rows": 0}
        self._sent = SentReadings()
        self.minutes = Minutes(self.out / "_aggregates_state", interval_ms(options.watermark))
        self.compactor = Compactor(self.out, options.compact_after)
        self._touched: list[tuple[str, Path]] = []  # the running batch's partitions
        self.queries: list = []  # the running query (`start`)
        self._counted = -1  # the newest batch whose progress report `count_dropped` read
        self._counting = threading.Lock()

    def lag(self) -> tuple[int, float]:
        """(messages received and not yet in a committed batch, seconds the oldest waited),
        read from the buffer file (its receiver runs in a worker process)."""
        from .buffer import FILE, Buffer
        from .shards import RemoteShard

        total, oldest = 0, 0.0
        for url in self.o.shards:
            try:
                n, waited = RemoteShard(url, self.o.shard_secret, timeout=5).backlog()
            except OSError:  # away: its backlog is not known now
                continue
            total, oldest = total + n, max(oldest, waited)
        for path in (self.out / "_mqtt").glob(f"**/{FILE}"):  # one file, or one per shard
            buffer = Buffer(path.parent, readonly=True)
            try:
                n, waited = buffer.backlog()
            finally:
                buffer.close()
            total, oldest = total + n, max(oldest, waited)
        return total, oldest

    def _buffers(self) -> list[Path]:
        """The directories of the buffer shards the driver's receivers fill (`source`'s)."""
        from .buffer import shard_directory

        if self.o.shards:
            return []
        return [shard_directory(self.out / "_mqtt", k, self.o.receivers)
                for k in range(self.o.receivers)]

    def subscription(self) -> str | None:
        """"ok" once the broker has answered every receiver's subscription (its SUBACK, which
        the receivers write beside their buffers, or the shards' `/state` tells), a refusal
        ("WHERE: refused: …") as soon as one is refused, else None: not yet."""
        from .mqtt import subscription

        answers = [(str(d), subscription(d)) for d in self._buffers()]
        if self.o.shards:
            from .shards import RemoteShard

            for url in self.o.shards:
                try:
                    state = RemoteShard(url, self.o.shard_secret, timeout=5).state()
                    answers.append((url, state.get("subscription")))
                except OSError:  # away, or still starting: not subscribed yet
                    answers.append((url, None))
        for where, answer in answers:
            if answer is not None and answer != "ok":
                return f"{where}: {answer}"
        return "ok" if all(answer == "ok" for _, answer in answers) else None

    def count_dropped(self) -> None:
        """Adds to `stats["late_dropped"]` the readings Spark's de-duplication dropped as
        older than the watermark, from the query's last progress report: none while the
        source tags them as dead letters, so any here is a reading lost. Called as each batch
        starts (the batch before it has reported by then) and once the query has stopped; a
        Python `StreamingQueryListener` had every report converted over py4j instead, 0.4-0.6 s
        of the JVM's CPU in a 200,000-reading burst on the 2-core host."""
        with self._counting:
            progress = self.queries[0].lastProgress if self.queries else None
            if progress is None or progress.batchId <= self._counted:
                return
            self._counted = progress.batchId
            self.stats["late_dropped"] += sum(op.numRowsDroppedByWatermark
                                              for op in progress.stateOperators)

    def start(self, *, offline: bool = False, apart: bool = False):
        """Start the query. `offline`: no receiver, the batches read what the buffer holds,
        then it ends (Trigger.AvailableNow: `spark_ingest.warmup`'s run). `apart`: the
        receivers run in a process of their own (`spark_ingest.receiving`), subscribed
        before this, and the reader none."""
        from pyspark.sql import functions as F

        from .mqtt import SUBSCRIBED
        from .source import MqttTelemetry

        if not apart:  # apart, the receivers' process was begun clean (`receiving.spawn`)
            for directory in self._buffers():  # an earlier run's answer is not this one's
                (directory / SUBSCRIBED).unlink(missing_ok=True)
        self.spark.dataSource.register(MqttTelemetry)
        o = self.o
        reader = self.spark.readStream.format("ksp_mqtt")
        local = local_master(self.spark.sparkContext.master)
        for key, value in source_options(o, local=local, offline=offline or apart).items():
            reader = reader.option(key, value)
        stream = reader.load()
        keyed = (stream
                 # A dead letter has no time: it neither moves the watermark (its arrival
                 # would, past every reading of a backlog or of a fleet whose clocks lag, and
                 # the de-duplication would drop them all as late) nor is dropped as late.
                 .withColumn("event_time", F.col("time"))
                 .withColumn("key", F.when(F.col("reason").isNull(), F.concat_ws(
                     "|", "device", "property", F.date_format(
                         "time", "yyyy-MM-dd'T'HH:mm:ss.SSS"))).otherwise(
                     F.concat(F.lit("dead|"), F.col("seq").cast("string"))))
                 .withWatermark("event_time", o.watermark)
                 .dropDuplicatesWithinWatermark(["key"]))
        _never_committed(self.out / "_checkpoint")
        writer = (keyed.writeStream.foreachBatch(self._batch)
                  .option("checkpointLocation", str(self.out / "_checkpoint")))
        if offline:
            writer = writer.trigger(availableNow=True).queryName("ksp-ingest-warm-up")
        else:
            writer = writer.trigger(processingTime=o.trigger).queryName("ksp-ingest")
        self.queries = [writer.start()]
        return self.queries[0]

    # -- one micro-batch ---------------------------------------------------------------------

    def _batch(self, batch, batch_id: int) -> None:
        started = time.perf_counter()
        self._touched = []
        self.count_dropped()
        # A local master's executors share this process and its cores: the batch comes to
        # the driver once, as Arrow (`spark_ingest.arrow_batch`); a cluster's executors work.
        if local_master(batch.sparkSession.sparkContext.master):
            n_obs, n_dead, reasons, partials = self.arrow_outputs(batch, batch_id)
        else:
            n_obs, n_dead, reasons, partials = self.spark_outputs(batch, batch_id)
        closed = self.minutes.add(batch_id, [r[:8] for r in partials])
        self._write_aggregates(closed, batch_id)
        if partials or closed:
            self.minutes.save(batch_id)
        s = self.stats
        s["merged_files"] += self.compactor.after_batch(batch_id, self._touched)
        s["batches"] += 1
        s["observations"] += n_obs
        s["dead_letters"] += n_dead
        s["late"] += reasons.get(LATE, 0)
        for reason, n in reasons.items():
            s["dead_reasons"][reason] = s["dead_reasons"].get(reason, 0) + n
        s["aggregates"] += len(closed)
        s["last_batch_rows"] = n_obs + n_dead
        s["last_batch_seconds"] = time.perf_counter() - started

    def spark_outputs(self, batch, batch_id: int) -> tuple[int, int, dict, list[tuple]]:
        """The batch's observations and dead letters written, by Spark's jobs on the
        executors: (observations, dead letters, dead letters per reason, partial
        aggregates)."""
        from pyspark.sql import functions as F

        batch = batch.persist()
        try:
            readings = batch.filter(F.col("reason").isNull())
            dead = batch.filter(F.col("reason").isNotNull())
            base = self.o.base
            observations = readings.select(
                F.concat(F.lit(base + "observation/"), "device", F.lit("/"), "property",
                         F.lit("/"), (F.unix_millis("time")).cast("string")).alias(
                    "observation"),
                F.concat(F.lit(base), "device").alias("madeBySensor"),
                F.concat(F.lit(base), "property").alias("observedProperty"),
                F.col("value").alias("hasSimpleResult"), "unit",
                F.col("time").alias("resultTime"),
                F.to_date("time").alias("date"), "device")
            # The partial aggregates count the readings: the observations are written with
            # their number known, from the batch as persisted, with no pass of their own.
            partials = self._minutes(readings)
            n_obs = self._write(observations, "observations", batch_id, ["date", "device"],
                                sum(p[6] for p in partials))
            if self.o.sib and partials:
                refused = self._push(_latest(partials))
                if refused:  # observations all the same; the SIB's refusal kept with them
                    dead = dead.unionByName(self._refused(readings, refused))
            letters = dead.select("seq", "topic", "payload", "payload_bytes", "received",
                                  "reason", "error", F.to_date("received").alias("date"))
            reasons = dict(dead.groupBy("reason").count().collect())
            n_dead = self._write(letters, "dead_letters", batch_id, ["date"],
                                 sum(reasons.values()))
            if self.o.ntriples and n_obs:
                rows = observations.withColumn("at", F.date_format(
                    "resultTime", "yyyy-MM-dd'T'HH:mm:ss.SSSXXX")).toLocalIterator()
                self._ntriples(((r.date, r.observation, r.madeBySensor, r.observedProperty,
                                 r.hasSimpleResult, r.at) for r in rows), batch_id)
            return n_obs, n_dead, reasons, partials
        finally:
            batch.unpersist()

    def arrow_outputs(self, batch, batch_id: int) -> tuple[int, int, dict, list[tuple]]:
        """As `spark_outputs`, from the batch taken to the driver as one Arrow table (one
        Spark job: the source's read and the de-duplication) and written with pyarrow."""
        import pyarrow as pa

        from . import arrow_batch as ab

        readings, dead = ab.split(batch.drop("key", "event_time").toArrow())
        observations = ab.observations(readings, self.o.base)
        partials = ab.partials(readings)
        n_obs = self._write_arrow(observations, "observations", batch_id, ["date", "device"])
        if self.o.sib and partials:
            refused = self._push(_latest(partials))
            if refused:  # observations all the same; the SIB's refusal kept with them
                dead = pa.concat_tables([dead, ab.refused(readings, [
                    (r.device, r.property, r.ms, error) for r, error in refused])])
        reasons = ab.reasons(dead)
        n_dead = self._write_arrow(ab.letters(dead), "dead_letters", batch_id, ["date"])
        if self.o.ntriples and n_obs:
            self._ntriples(zip(*(observations[name].to_pylist() for name in [
                "date", "observation", "madeBySensor", "observedProperty",
                "hasSimpleResult"]), map(_xsd_millis, observations["resultTime"].to_pylist())),
                batch_id)
        return n_obs, n_dead, reasons, partials

    @staticmethod
    def _minutes(readings) -> list[tuple]:
        """The batch's partial aggregates, one row per minute, device and property: (minute
        ms, device, property, min, max, sum, count, newest ms, the newest reading's value)."""
        from pyspark.sql import functions as F

        ms = F.unix_millis("time")
        return [tuple(r) for r in readings.groupBy(
            (F.floor(ms / 60_000) * 60_000).alias("minute"), "device", "property").agg(
            F.min("value"), F.max("value"), F.sum("value"), F.count(F.lit(1)), F.max(ms),
            F.max_by("value", "time")).collect()]

    def _write(self, frame, table: str, batch_id: int, partition_by: list[str],
               rows: int) -> int:
        """Write `frame` (`rows` rows) as this batch's files of `table`, by Spark's
        partitioned writer on the executors, replacing any earlier attempt's; returns
        `rows`."""
        staging = self.out / "_staging" / table / str(batch_id)
        files = []
        if rows:
            (frame.repartition(*partition_by).write.mode("overwrite")
             .partitionBy(*partition_by).parquet(str(staging)))
            files = [(part, part.parent.relative_to(staging))
                     for part in staging.rglob("*.parquet")]  # this batch's only
        self._place(table, batch_id, files, staging)
        return rows

    def _write_arrow(self, table, name: str, batch_id: int, partition_by: list[str]) -> int:
        """`_write` of an Arrow table, by the driver (`spark_ingest.partitioned`); returns its
        row count."""
        staging = self.out / "_staging" / name / str(batch_id)
        shutil.rmtree(staging, ignore_errors=True)  # an attempt killed before its renames
        files = [(path, rel) for path, rel, _ in write_partitioned(table, staging,
                                                                   partition_by, flat=True)]
        self._place(name, batch_id, files, staging)
        return table.num_rows

    def _write_aggregates(self, closed: list[tuple], batch_id: int) -> None:
        """The minutes this batch closed, one file per date and device (pyarrow, in the
        driver: a few rows per device and minute)."""
        import pyarrow.parquet as pq

        staging = self.out / "_staging" / "aggregates" / str(batch_id)
        groups: dict[tuple[str, str], list[tuple]] = {}
        for row in closed:
            day = time.strftime("%Y-%m-%d", time.gmtime(row[0] // 1000))
            groups.setdefault((day, row[1]), []).append(row)
        files = []
        for (day, device), rows in sorted(groups.items()):
            rel = Path(f"date={day}") / f"device={device}"
            path = staging / rel / "part.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(aggregate_table(self.o.base, rows), path)
            files.append((path, rel))
        self._place("aggregates", batch_id, files, staging)

    def _place(self, table: str, batch_id: int, files: list[tuple[Path, Path]],
               staging: Path, suffix: str = ".parquet") -> None:
        """The staged `files` into `table` (`place_batch`), their partitions noted for the
        compactor, the staging directory removed."""
        self._touched.extend((table, rel) for rel in place_batch(self.out, table, batch_id,
                                                                   files, suffix))
        shutil.rmtree(staging, ignore_errors=True)

    def _ntriples(self, rows, batch_id: int) -> None:
        """The batch's observations as N-Triples, a file per date (placed and merged as the
        tables' files are); `rows`: (date, observation, sensor, property, value, time as
        xsd:dateTime) each."""
        staging = self.out / "_staging" / "ntriples" / str(batch_id)
        shutil.rmtree(staging, ignore_errors=True)
        files: dict[str, tuple] = {}  # date → (open file, path, partition)
        try:
            for day, observation, sensor, prop, value, at in rows:
                day = str(day)
                if day not in files:
                    rel = Path(f"date={day}")
                    (staging / rel).mkdir(parents=True)
                    path = staging / rel / "part.nt"
                    files[day] = (open(path, "w", encoding="utf-8"), path, rel)
                files[day][0].write(ntriples(observation, sensor, prop, value, at))
        finally:
            for f, _, _ in files.values():
                f.close()
        placed = [(path, rel) for _, path, rel in files.values()]
        self._place("ntriples", batch_id, placed, staging, ".nt")

    def _push(self, latest: list[Reading]) -> list[tuple[Reading, str]]:
        """The newest readings to the SIB: one KSP update per `SIB_CHUNK` pairs. Returns those
        the SIB refused, each with the exception's type (`push`); a SIB that cannot be reached
        fails the batch (it runs again)."""
        fresh = self._sent.fresh(latest)
        if not fresh:
            return []
        updates, refused = push(self.o.sib, self.o.base, fresh)
        gone = {r for r, _ in refused}
        self._sent.record([r for r in fresh if r not in gone])
        self.stats["sib_updates"] += updates
        return refused

    def _refused(self, readings, refused: list[tuple[Reading, str]]):
        """The messages of the readings the SIB refused, as dead letters `sib_refused` (in
        the dead letters' columns), found by (device, property, time)."""
        from pyspark.sql import functions as F

        keys = self.spark.createDataFrame(
            [(r.device, r.property, r.ms, error) for r, error in refused],
            "device string, property string, ms long, why string")
        return (readings.withColumn("ms", F.unix_millis("time"))
                .join(keys, ["device", "property", "ms"])
                .withColumn("reason", F.lit(SIB_REFUSED)).withColumn("error", F.col("why"))
                .select(*readings.columns))


def aggregate_table(base: str, rows: list[tuple]):
    """Closed minutes — (minute ms, device, property, min, max, mean, count) — as the rows of
    an aggregates file (one date and device)."""
    import pyarrow as pa

    return pa.table({
        "minute": pa.array([r[0] * 1000 for r in rows], pa.timestamp("us", tz="UTC")),
        "observedProperty": [base + r[2] for r in rows],
        "min": pa.array([r[3] for r in rows], pa.float64()),
        "max": pa.array([r[4] for r in rows], pa.float64()),
        "mean": pa.array([r[5] for r in rows], pa.float64()),
        "count": pa.array([r[6] for r in rows], pa.int64())})


def _xsd_millis(when) -> str:
    """A UTC datetime as Spark's `date_format(t, "yyyy-MM-dd'T'HH:mm:ss.SSSXXX")` gives it."""
    return (f"{when.year:04d}-{when.month:02d}-{when.day:02d}T{when.hour:02d}:"
            f"{when.minute:02d}:{when.second:02d}.{when.microsecond // 1000:03d}Z")


def observation_iri(base: str, device: str, prop: str, ms: int) -> str:
    """An observation's IRI: one per (device, property, time), as the de-duplication's key
    (the job's own Spark expression, in `Ingest._batch`, makes the same)."""
    return f"{base}observation/{device}/{prop}/{ms}"


def ntriples(observation: str, sensor: str, prop: str, value: float, at: str) -> str:
    """One observation's N-Triples; `at`, its time as xsd:dateTime (milliseconds, Z)."""
    o = f"<{observation}>"
    return (f"{o} <{RDF_TYPE}> <{SOSA}Observation> .\n"
            f"{o} <{SOSA}madeBySensor> <{sensor}> .\n"
            f"{o} <{SOSA}observedProperty> <{prop}> .\n"
            f'{o} <{SOSA}hasSimpleResult> "{value!r}"^^<{XSD_DOUBLE}> .\n'
            f'{o} <{SOSA}resultTime> "{at}"^^<{XSD_DATETIME}> .\n')


def place_batch(out: Path, table: str, batch_id: int, files: list[tuple[Path, Path]],
                suffix: str = ".parquet") -> list[Path]:
    """Move a batch's files (staged path, partition directory) into `table`, each named by
    the batch: a re-run of the batch (the same rows) writes the same paths, each replaced in
    one rename, so a reader listing the directory meanwhile never finds a file gone; what
    an earlier attempt placed in a partition this one does not write is removed. The
    attempts' files are found in the batch's manifest, written before the renames. Returns
    the partition directories written to."""
    root = out / table
    name = f"batch-{batch_id:012d}{suffix}"
    manifests = out / "_staging" / table
    manifest = manifests / f"batch-{batch_id:012d}.files"
    earlier = set(manifest.read_text().splitlines()) if manifest.exists() else set()
    targets = [str(rel / name) for _, rel in files]
    if targets or earlier:
        manifests.mkdir(parents=True, exist_ok=True)
        write_atomic(manifest, "\n".join(sorted(earlier | set(targets))))
    for (path, rel), target in zip(files, targets):
        (root / rel).mkdir(parents=True, exist_ok=True)
        os.replace(path, root / target)
    for stale in earlier - set(targets):  # an earlier attempt's that this one did not make
        (root / stale).unlink(missing_ok=True)
    if earlier - set(targets):
        write_atomic(manifest, "\n".join(sorted(targets)))
    for old in manifests.glob("batch-*.files") if manifests.exists() else ():
        if old.name < manifest.name:  # committed batches': never run again
            old.unlink(missing_ok=True)
    return [rel for _, rel in files]


class Reading(NamedTuple):
    """The newest value of one (device, property) in a batch, as pushed to the SIB and kept
    by `SentReadings`."""

    device: str
    property: str
    value: float
    ms: int  # its time


class SentReadings:
    """The time of the newest reading sent to the SIB for each (device, property), so that a
    late reading never replaces a newer value there. At most `limit` pairs: the least recently
    sent are forgotten first (a fleet's pairs are far fewer; a flood of new device names
    must not grow it without end)."""

    def __init__(self, limit: int = MAX_SENT) -> None:
        self.limit = limit
        self._ms: OrderedDict[tuple[str, str], int] = OrderedDict()

    def __len__(self) -> int:
        return len(self._ms)

    def fresh(self, latest: list[Reading]) -> list[Reading]:
        """Those of `latest` newer than what was sent for their pair."""
        return [r for r in latest if self._ms.get((r.device, r.property), -1) < r.ms]

    def record(self, sent: list[Reading]) -> None:
        for r in sent:
            self._ms[(r.device, r.property)] = r.ms
            self._ms.move_to_end((r.device, r.property))
        while len(self._ms) > self.limit:
            self._ms.popitem(last=False)


def _latest(partials: list[tuple]) -> list[Reading]:
    """The newest reading of each (device, property) among a batch's partial aggregates."""
    newest: dict[tuple[str, str], Reading] = {}
    for _, device, prop, _, _, _, _, ms, value in partials:
        if (device, prop) not in newest or newest[device, prop].ms < ms:
            newest[device, prop] = Reading(device, prop, value, ms)
    return list(newest.values())


def last_committed(checkpoint: Path) -> int | None:
    """The newest batch the query of `checkpoint` committed (its commit log's files are named
    by batch; Spark's temporary ones start with a dot), or None."""
    commits = checkpoint / "commits"
    done = [int(p.name) for p in commits.iterdir() if p.name.isdigit()] if (
        commits.is_dir()) else []
    return max(done, default=None)


def lost_checkpoint(out: Path) -> int | None:
    """The last batch placed in `out` by a checkpoint that is gone — `out/_checkpoint` has no
    committed batch (deleted, or replaced) while the tables' manifests or the aggregates'
    state name a batch after the first — or None. A new checkpoint numbers its batches from 0
    again, and its files would replace those of the batches of the same numbers. (Batch 0
    alone is the first batch of a job killed before it committed it: run again, as it should.)
    """
    if last_committed(out / "_checkpoint") is not None:
        return None
    numbers = [int(m[1]) for path in [*(out / "_staging").glob("*/batch-*.files"),
                                      *(out / "_aggregates_state").glob("*.json")]
               if (m := re.fullmatch(r"(?:batch|delta)-(\d+)\.(?:files|json)", path.name))]
    last = max(numbers, default=-1)
    return last if last >= 1 else None


def local_master(master: str) -> bool:
    """Whether `master` runs the executors in the driver's process, on its host (`local`,
    `local[N]`; not `local-cluster`): they share its JVM, and can read the receiver's buffer
    file themselves."""
    return re.fullmatch(r"local(\[[^\]]*\])?", master) is not None


def _never_committed(checkpoint: Path) -> None:
    """A query killed before it committed its first batch leaves offsets and no commit, and
    Spark refuses to start a stateful query on that (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY).
    It has nothing to resume: start it afresh. (The MQTT source re-reads from the buffer's
    committed number, 0 then; a re-run batch 0 writes the same file names.)"""
    offsets = checkpoint / "offsets"
    if offsets.is_dir() and any(offsets.iterdir()) and last_committed(checkpoint) is None:
        log.warning("%s: no batch was committed; starting that query afresh", checkpoint)
        shutil.rmtree(checkpoint)


def _replace_update(base: str, rows) -> str:
    """DELETE the pairs' old values and INSERT the new ones, in one SPARQL update."""
    deletes, inserts, optionals = [], [], []
    for k, r in enumerate(rows):
        s, p = f"<{base}{r.device}>", f"<{base}{r.property}>"
        deletes.append(f"{s} {p} ?old{k} .")
        inserts.append(f'{s} {p} "{float(r.value)!r}"^^<{XSD_DOUBLE}> .')
        optionals.append(f"OPTIONAL {{ {s} {p} ?old{k} }}")
    return (f"DELETE {{ {' '.join(deletes)} }} INSERT {{ {' '.join(inserts)} }} "
            f"WHERE {{ {' '.join(optionals)} }}")


def push(url: str, base: str, readings: list[Reading]) -> tuple[int, list[tuple[Reading, str]]]:
    """Readings to the SIB at `url`, `SIB_CHUNK` pairs per KSP update: (updates the SIB took,
    the readings it refused, each with the exception's type). An update refused (a SPARQL
    error, a status) is split in halves and each sent again, down to the one reading at fault,
    so one reading never costs the others; a reading whose names or value no update could
    carry (`telemetry.NAME`, a finite value) is refused before. OSError (the SIB unreachable,
    a timeout: not one reading's fault) is raised."""
    sendable, refused = [], []
    for r in readings:
        if NAME.fullmatch(r.device) and NAME.fullmatch(r.property) and math.isfinite(r.value):
            sendable.append(r)
        else:
            refused.append((r, "ValueError"))
    chunks = [sendable[i:i + SIB_CHUNK] for i in range(0, len(sendable), SIB_CHUNK)]
    updates = asyncio.run(_send(url, base, chunks, refused)) if chunks else 0
    return updates, refused


async def _send(url: str, base: str, chunks: list[list[Reading]],
                refused: list[tuple[Reading, str]]) -> int:
    from transports import connect

    async with connect(url) as kp:
        return sum([await _update(kp, base, chunk, refused) for chunk in chunks])


async def _update(kp, base: str, rows: list[Reading], refused: list[tuple[Reading, str]]
                  ) -> int:
    """Updates taken of `rows` (split while refused), the refused readings added to
    `refused`."""
    try:
        await kp.update(_replace_update(base, rows))
        return 1
    except OSError:
        raise
    except Exception as exc:  # the SIB's or the SPARQL compiler's refusal
        if len(rows) == 1:
            log.warning("the SIB refused %s/%s: %s: %s", rows[0].device, rows[0].property,
                        type(exc).__name__, exc)
            refused.append((rows[0], type(exc).__name__))
            return 0
    half = len(rows) // 2
    return (await _update(kp, base, rows[:half], refused)
            + await _update(kp, base, rows[half:], refused))
