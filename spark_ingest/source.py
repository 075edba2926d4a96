"""`ksp_mqtt`: MQTT telemetry as a Spark streaming source (a Python Data Source,
`pyspark.sql.datasource`).

    spark.dataSource.register(MqttTelemetry)
    spark.readStream.format("ksp_mqtt").option("broker", "mqtt://127.0.0.1:1883")
         .option("topic", "ksp/+/telemetry").option("buffer", "data/_mqtt").load()

The reader (on the driver) runs the `Receiver`, which fills the durable buffer; an offset is a
buffer sequence number, so a micro-batch is a range of them, split into `partitions`. With
`localBuffer` (what the job sets for a `local` master: the executors on the driver's host),
a partition is a span of sequence numbers that its executor reads from the buffer file
itself, so the messages go from SQLite to the executor once and the tasks stay small. Without
it, the driver reads the range and the partitions carry their messages to the executors
(which then need no access to the buffer file: on a cluster they run on other machines, and
SQLite's WAL needs its readers on its own host). `commit` deletes what a committed batch read.
Each row is one message, checked and parsed by `spark_ingest.telemetry.parse` on the
executors: the reading's fields, or `reason` for a dead letter. `payload` is the message as
text; `payload_bytes` its exact bytes when they are not UTF-8 (else null: `payload` is them).
A message whose reading raises, or that Arrow refuses, is a dead letter `error` (`error` names
the exception's type): one message never fails a batch.

With `checkpoint` (the query's checkpoint directory), a reading whose time is at or before the
watermark Spark drops late rows by in the batch being read comes as a dead letter with reason
`late` instead, so that it is kept (the message as received) rather than dropped without a
trace. That watermark is the previous batch's (Spark's `PropagateWatermarkSimulator`: "we use
watermark for previous microbatch to determine late events"), which the previous batch's entry
of the checkpoint's offset log records (`batchWatermarkMs`); the driver reads it when it plans
the batch (Spark writes the batch's own entry before), so a batch run again after a crash
tags the same rows.

With `receivers` N > 1, N receivers split the topic through an MQTT 5 shared subscription
(`$share/<share>/<topic>`: the broker gives each message to one of them), each with its own
persistent session (`<client_id>-<k>`) and its own buffer (`<buffer>/shard-<k>`); an offset is
then one sequence number per shard, and every shard's range is read by its own partitions. A
row's `seq` is then the shard's number × N + k, unique in the job.

With `shards` (comma-separated `http://HOST:PORT`), the receivers run on other machines
(`spark_ingest.shards`), one shard each: the driver asks them for offsets and commits, and each
partition is a span of sequence numbers that its executor reads from the shard itself (so the
readings go from receiver to executor, not through the driver); every request signed with
`secret` (Spark redacts it like `password`). No receiver runs in the driver then.

With `offline` (`true`), no receiver runs in the reader: the batches read what the buffer
holds, as another process fills it (`ksp-ingest` runs its receivers apart,
`spark_ingest.receiving`) or none does (the job's warm-up, `spark_ingest.warmup`, runs its
synthetic readings so, with no broker).

Options: `broker`, `topic` (default `ksp/+/telemetry`), `buffer` (directory), `client_id`
(default `ksp-ingest`: keep it across restarts, it names the broker's persistent session),
`checkpoint` (the query's, for the late readings above), `localBuffer` (`true`: the
executors read the buffer file, above), `offline` (`true`: no receiver, above),
`partitions` (default 2, per shard), `maxMessagesPerBatch` (default 100000, admission control),
`maxBuffered` (default 1000000, per shard), `receivers` (default 1), `share` (the shared
subscription's group, default the client id); for a broker that wants them, `ca` (with an
`mqtts://` broker: the CA file it is checked against), `user` and `password` (Spark redacts
options named so in its UI and plans).
"""
from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadMaxRows

from .telemetry import ERROR, LATE, is_utf8

__all__ = ["MqttTelemetry", "SCHEMA"]

SCHEMA = ("seq long, topic string, payload string, payload_bytes binary, received timestamp, "
          "device string, property string, value double, unit string, time timestamp, "
          "reason string, error string")


#: Rows per Arrow batch a partition yields (Spark's own default size).
ARROW_ROWS = 10_000


def _arrow_schema():
    """`SCHEMA` in Arrow, as Spark expects it from a Python source (timestamps: µs, UTC)."""
    import pyarrow as pa

    stamp = pa.timestamp("us", tz="UTC")
    return pa.schema([("seq", pa.int64()), ("topic", pa.string()), ("payload", pa.string()),
                      ("payload_bytes", pa.binary()), ("received", stamp),
                      ("device", pa.string()), ("property", pa.string()),
                      ("value", pa.float64()), ("unit", pa.string()), ("time", stamp),
                      ("reason", pa.string()), ("error", pa.string())])


def _arrays(rows: list[tuple], schema):
    import pyarrow as pa

    return pa.RecordBatch.from_arrays([pa.array(column, type=field.type) for column, field
                                       in zip(zip(*rows), schema)], schema=schema)


def _batch(rows: list[tuple], schema):
    """`rows` as an Arrow batch; a row Arrow refuses (whatever `parse` let through that no
    column takes) becomes a dead letter `error`, and the others go as they are."""
    try:
        return _arrays(rows, schema)
    except Exception:
        pass
    kept = []
    for row in rows:
        try:
            _arrays([row], schema)
            kept.append(row)
        except Exception as exc:
            _log().warning("message %d: %s: %s", row[0], type(exc).__name__, exc)
            kept.append(_failed(row, exc))
    return _arrays(kept, schema)


def _text(payload: bytes) -> tuple[str, bytes | None]:
    """(the payload as text, its bytes if that text is not them): a payload that is not UTF-8
    keeps its exact bytes beside a readable text (U+FFFD for each invalid sequence)."""
    try:
        return payload.decode("utf-8"), None
    except UnicodeDecodeError:
        return payload.decode("utf-8", "replace"), bytes(payload)


def _failed(row: tuple, exc: Exception) -> tuple:
    """A row as a dead letter `error` naming `exc`'s type: the message kept, nothing parsed."""
    seq, topic, text, raw, received = row[:5]
    if not isinstance(topic, str) or not is_utf8(topic):
        topic = str(topic).encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return (seq, topic, text, raw, received, None, None, None, None, None, ERROR,
            type(exc).__name__)


@dataclass
class _Range(InputPartition):
    """A partition carries its messages (the driver read them from the buffer, so the
    executors, wherever they run, need no access to its file), or the `span` (after, upto) its
    executor reads itself: from the buffer file in `path` (an executor on the driver's host),
    or from a shard served from another machine."""
    rows: list
    shard: int = 0
    shards: int = 1
    span: tuple[int, int] | None = None
    late_ms: int | None = None  # a reading at or before this (ms) is late: a dead letter
    path: str | None = None  # the buffer's directory, read by the executor


def late_watermark(checkpoint: str | None) -> int | None:
    """The watermark (ms) by which Spark drops late rows in the batch being planned: the one
    recorded for the batch before it (the offset log's second newest entry); 0 before there is
    one (Spark's watermark starts at the epoch, and drops the rows at or before it from the
    first batch on: a reading dated 1970-01-01T00:00:00Z or earlier, a board's whose clock was
    never set); None without a checkpoint (no watermark known: nothing is tagged)."""
    import json
    import os

    if not checkpoint:
        return None
    directory = os.path.join(checkpoint, "offsets")
    try:
        numbers = [int(name) for name in os.listdir(directory) if name.isdigit()]
    except FileNotFoundError:
        return 0
    if not numbers:
        return 0
    try:
        with open(os.path.join(directory, str(max(numbers) - 1)), encoding="utf-8") as f:
            f.readline()  # the log's version, "v1"
            return max(0, int(json.loads(f.readline()).get("batchWatermarkMs", 0)))
    except FileNotFoundError:  # the first batch: nothing is late
        return 0


_LATE_FIELDS = (None, None, None, None, None, LATE)
_ERROR_FIELDS = (None, None, None, None, None, ERROR)


def _log():
    import logging

    return logging.getLogger("ksp.ingest")


def _last(r, otherwise: int | None = None) -> int:
    """The newest sequence number of a shard (see `_Served.last` for one that is away)."""
    return r.last(otherwise) if isinstance(r, _Served) else r.buffer.last()


def _buffered(directory: str, after: int, upto: int):
    """The messages after < seq <= upto of the buffer in `directory`, read by an executor on
    the receiver's host (read-only: the receiver writes it meanwhile; a committed batch
    deletes them only once every partition of it is done)."""
    from .buffer import Buffer

    buffer = Buffer(directory, readonly=True)
    try:
        yield from buffer.read(after, upto)
    finally:
        buffer.close()


class _Served:
    """A shard whose receiver runs on another machine (`spark_ingest.shards`)."""

    def __init__(self, buffer) -> None:
        self.buffer = buffer
        self.known = 0  # the newest number it told

    def last(self, otherwise: int | None = None) -> int:
        """Its newest number; while it is away (restarting, say) `otherwise`, else the last
        one it told: nothing new from it until it is back."""
        try:
            self.known = self.buffer.last()
        except OSError as exc:
            _log().warning("shard %s: %s", self.buffer.url, exc)
            return self.known if otherwise is None else otherwise
        return self.known

    def stop(self) -> None:
        pass


class _Kept:
    """A shard with no receiver (`offline`): its buffer as it is."""

    def __init__(self, buffer) -> None:
        self.buffer = buffer

    def stop(self) -> None:
        pass


class MqttTelemetry(DataSource):
    @classmethod
    def name(cls) -> str:
        return "ksp_mqtt"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema) -> "_Reader":
        return _Reader(self.options)


class _Reader(DataSourceStreamReader):
    def __init__(self, options) -> None:
        self.directory = options["buffer"]
        self.parts = int(options.get("partitions", 2))
        self.max_batch = int(options.get("maxMessagesPerBatch", 100_000))
        self.remote = [url for url in options.get("shards", "").split(",") if url]
        self.secret = options.get("secret", "").encode()  # the shards' (redacted by Spark)
        self.shards = len(self.remote) or int(options.get("receivers", 1))
        if self.shards < 1:
            raise ValueError(f"receivers: {self.shards}; at least 1")
        self.checkpoint = options.get("checkpoint") or None
        self.local = options.get("localBuffer", "false").lower() == "true" and not self.remote
        self.offline = options.get("offline", "false").lower() == "true" and not self.remote
        self._options = dict(options)
        self._receivers: list | None = None

    # Spark pickles the reader to the executors for `read`: the receivers stay on the driver.
    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_receivers"] = None
        return state

    def _directory(self, k: int) -> str:
        from .buffer import shard_directory

        return str(shard_directory(self.directory, k, self.shards))

    def _started(self) -> list:
        if self._receivers is None and self.remote:
            from .shards import RemoteShard

            self._receivers = [_Served(RemoteShard(url, self.secret)) for url in self.remote]
        if self._receivers is None and self.offline:
            from .buffer import Buffer

            self._receivers = [_Kept(Buffer(self._directory(k))) for k in range(self.shards)]
        if self._receivers is None:
            import logging
            import sys

            from .mqtt import receivers

            # This runs in a Python worker the JVM started: its log lines to stderr too.
            log = logging.getLogger("ksp.ingest")
            if not log.handlers:
                handler = logging.StreamHandler(sys.stderr)
                handler.setFormatter(logging.Formatter(
                    "%(asctime)s %(levelname)s %(name)s: %(message)s"))
                log.addHandler(handler)
                log.setLevel(logging.INFO)
                log.propagate = False
            self._receivers = receivers(self._options)
        return self._receivers

    def _offset(self, seqs: list[int]) -> dict:
        return {"seq": seqs[0] if self.shards == 1 else seqs}

    def _seqs(self, offset: dict) -> list[int]:
        seq = offset["seq"]
        seqs = [int(seq)] if isinstance(seq, int) else [int(n) for n in seq]
        if len(seqs) != self.shards:  # a checkpoint of another number of receivers
            raise ValueError(f"the checkpoint has {len(seqs)} receiver shard(s), this job "
                             f"{self.shards}: keep --receivers, or start a new --out")
        return seqs

    def initialOffset(self) -> dict:
        return self._offset([r.buffer.committed() for r in self._started()])

    def getDefaultReadLimit(self):
        return ReadMaxRows(self.max_batch)

    def latestOffset(self, start: dict, limit) -> dict:
        """Up to the newest message buffered, at most `limit` rows past `start` (admission
        control, split evenly between the shards; Trigger.AvailableNow asks for all)."""
        seqs = []
        for r, first in zip(self._started(), self._seqs(start)):
            last = _last(r, first)
            if isinstance(limit, ReadMaxRows):
                last = min(last, first + max(1, limit.max_rows // self.shards))
            seqs.append(max(last, first))
        return self._offset(seqs)

    def reportLatestOffset(self) -> dict:
        return self._offset([_last(r) for r in self._started()])

    def partitions(self, start: dict, end: dict) -> list[_Range]:
        out = []
        late = late_watermark(self.checkpoint)
        for k, (first, last) in enumerate(zip(self._seqs(start), self._seqs(end))):
            if last <= first:
                continue
            if self.remote or self.local:  # numbers are contiguous: split the span evenly
                step = -(-(last - first) // self.parts)
                path = self._directory(k) if self.local else None
                out += [_Range([], k, self.shards, (a, min(a + step, last)), late, path)
                        for a in range(first, last, step)]
                continue
            rows = list(self._started()[k].buffer.read(first, last))
            step = max(1, -(-len(rows) // self.parts))
            out += [_Range(rows[i:i + step], k, self.shards, None, late)
                    for i in range(0, len(rows), step)]
        return out

    def read(self, partition: _Range):
        """Arrow batches of `ARROW_ROWS`: Spark takes them as they are, where it converts
        tuples cell by cell in Python (a fifth less time per row here, measured)."""
        from .telemetry import parse

        n, k = partition.shards, partition.shard
        rows = partition.rows
        if partition.path is not None:
            rows = _buffered(partition.path, *partition.span)
        elif partition.span is not None:
            from .shards import RemoteShard

            rows = RemoteShard(self.remote[k], self.secret).read(*partition.span)
        schema = _arrow_schema()
        late = partition.late_ms  # times have milliseconds at most: compared exactly
        out = []
        for seq, topic, payload, received in rows:
            try:  # whatever a message does, it is a row: a batch never fails on one message
                fields = parse(topic, payload, received)
                if (late is not None and fields[5] is None
                        and round(fields[4].timestamp() * 1000) <= late):
                    fields = _LATE_FIELDS
                error = None
            except Exception as exc:
                _log().warning("message %d: %s: %s", seq, type(exc).__name__, exc)
                fields, error = _ERROR_FIELDS, type(exc).__name__
            out.append((seq * n + k, topic, *_text(payload), round(received * 1_000_000),
                        *fields, error))
            if len(out) == ARROW_ROWS:
                yield _batch(out, schema)
                out = []
        if out:
            yield _batch(out, schema)

    def commit(self, end: dict) -> None:
        for r, seq in zip(self._started(), self._seqs(end)):
            try:
                r.buffer.commit(seq)
            except OSError as exc:  # a shard away: its next commit (up to a later number)
                _log().warning("shard %s: commit: %s", getattr(r.buffer, "url", "?"), exc)

    def stop(self) -> None:
        for r in self._receivers or ():
            r.stop()
            r.buffer.close()
