"""`ksp_mqtt`: MQTT telemetry as a Spark streaming source (a Python Data Source,
`pyspark.sql.datasource`).

    spark.dataSource.register(MqttTelemetry)
    spark.readStream.format("ksp_mqtt").option("broker", "mqtt://127.0.0.1:1883")
         .option("topic", "ksp/+/telemetry").option("buffer", "data/_mqtt").load()

The reader (on the driver) runs the `Receiver`, which fills the durable buffer; an offset is a
buffer sequence number, so a micro-batch is a range of them, split into `partitions` ranges
that the executors read from the buffer file (a directory every executor can open: the local
disk in local mode, a shared one on a cluster). `commit` deletes what a committed batch read.
Each row is one message, checked and parsed by `spark_ingest.telemetry.parse` on the
executors: the reading's fields, or `reason` for a dead letter.

Options: `broker`, `topic` (default `ksp/+/telemetry`), `buffer` (directory), `client_id`
(default `ksp-ingest`: keep it across restarts, it names the broker's persistent session),
`partitions` (default 2), `maxMessagesPerBatch` (default 100000, admission control),
`maxBuffered` (default 1000000).
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadMaxRows

__all__ = ["MqttTelemetry", "SCHEMA"]

SCHEMA = ("seq long, topic string, payload string, received timestamp, device string, "
          "property string, value double, unit string, time timestamp, reason string")


@dataclass
class _Range(InputPartition):
    directory: str
    after: int
    upto: int


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
        self._options = dict(options)
        self._receiver = None

    # Spark pickles the reader to the executors for `read`: the receiver stays on the driver.
    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_receiver"] = None
        return state

    def _started(self):
        if self._receiver is None:
            import logging
            import sys

            from .buffer import Buffer
            from .mqtt import Receiver

            # This runs in a Python worker the JVM started: its log lines to stderr too.
            log = logging.getLogger("ksp.ingest")
            if not log.handlers:
                handler = logging.StreamHandler(sys.stderr)
                handler.setFormatter(logging.Formatter(
                    "%(asctime)s %(levelname)s %(name)s: %(message)s"))
                log.addHandler(handler)
                log.setLevel(logging.INFO)
                log.propagate = False

            buffer = Buffer(self.directory,
                            max_messages=int(self._options.get("maxBuffered", 1_000_000)))
            self._receiver = Receiver(self._options["broker"],
                                      self._options.get("topic", "ksp/+/telemetry"),
                                      self._options.get("client_id", "ksp-ingest"),
                                      buffer).start()
        return self._receiver

    def initialOffset(self) -> dict:
        return {"seq": self._started().buffer.committed()}

    def getDefaultReadLimit(self):
        return ReadMaxRows(self.max_batch)

    def latestOffset(self, start: dict, limit) -> dict:
        """Up to the newest message buffered, at most `limit` rows past `start` (admission
        control; Trigger.AvailableNow asks for all)."""
        last = self._started().buffer.last()
        if isinstance(limit, ReadMaxRows):
            last = min(last, int(start["seq"]) + limit.max_rows)
        return {"seq": max(last, int(start["seq"]))}

    def reportLatestOffset(self) -> dict:
        return {"seq": self._started().buffer.last()}

    def partitions(self, start: dict, end: dict) -> list[_Range]:
        first, last = int(start["seq"]), int(end["seq"])
        if last <= first:
            return []
        step = max(1, -(-(last - first) // self.parts))
        return [_Range(self.directory, a, min(a + step, last)) for a in range(first, last, step)]

    def read(self, partition: _Range):
        from .buffer import Buffer
        from .telemetry import parse

        buffer = Buffer(partition.directory, readonly=True)
        try:
            for seq, topic, payload, received in buffer.read(partition.after, partition.upto):
                fields = parse(topic, payload)
                yield (seq, topic, payload.decode("utf-8", "replace"),
                       datetime.fromtimestamp(received, timezone.utc), *fields)
        finally:
            buffer.close()

    def commit(self, end: dict) -> None:
        self._started().buffer.commit(int(end["seq"]))

    def stop(self) -> None:
        if self._receiver is not None:
            self._receiver.stop()
            self._receiver.buffer.close()
