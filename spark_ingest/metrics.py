"""`ksp-ingest --metrics-port N`: Prometheus metrics (the official `prometheus_client`, as the
SIB's), read from the job's figures when scraped.

| name | kind | what |
|---|---|---|
| `ksp_ingest_observations_total` | counter | readings written as observations |
| `ksp_ingest_dead_letters_total` | counter | messages refused, with their reason |
| `ksp_ingest_dead_letter_reasons_total{reason}` | counter | the same, by reason |
| `ksp_ingest_batches_total` | counter | micro-batches done |
| `ksp_ingest_sib_updates_total` | counter | KSP updates sent to the SIB |
| `ksp_ingest_late_total` | counter | readings older than the watermark: dead letters `late` |
| `ksp_ingest_late_dropped_total` | counter | those Spark dropped all the same (expected: 0) |
| `ksp_ingest_merged_files_total` | counter | small files merged away (`spark_ingest.compaction`) |
| `ksp_ingest_lag_messages` | gauge | received, not yet in a committed batch |
| `ksp_ingest_lag_seconds` | gauge | how long the oldest of those has waited |
| `ksp_ingest_last_batch_seconds`, `..._rows` | gauge | the last batch's time and size |

The process's own (`process_resident_memory_bytes`, CPU, descriptors) come with them.
"""
from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import MetricsHandler

from .bounded_http import BoundedHTTPServer

__all__ = ["serve"]


class _Collector:
    def __init__(self, ingest) -> None:
        self.ingest = ingest

    def collect(self):
        s = self.ingest.stats
        for name, help_ in (("observations", "Readings written as observations."),
                            ("dead_letters", "Messages refused, with their reason."),
                            ("batches", "Micro-batches done."),
                            ("sib_updates", "KSP updates sent to the SIB."),
                            ("late", "Readings older than the watermark when they came: "
                                     "dead letters with reason late."),
                            ("late_dropped", "Readings older than the watermark that the "
                                             "de-duplication dropped, not dead-lettered."),
                            ("merged_files", "Small files merged away into bigger ones.")):
            yield CounterMetricFamily(f"ksp_ingest_{name}", help_, value=s[name])
        reasons = CounterMetricFamily("ksp_ingest_dead_letter_reasons",
                                      "Messages refused, by reason.", labels=["reason"])
        for reason, n in sorted(dict(s["dead_reasons"]).items()):
            reasons.add_metric([reason], n)
        yield reasons
        waiting, waited = self.ingest.lag()
        yield GaugeMetricFamily("ksp_ingest_lag_messages",
                                "Messages received and not yet in a committed batch.",
                                value=waiting)
        yield GaugeMetricFamily("ksp_ingest_lag_seconds",
                                "How long the oldest message not yet in a batch has waited.",
                                value=waited)
        yield GaugeMetricFamily("ksp_ingest_last_batch_seconds",
                                "How long the last micro-batch took.",
                                value=s["last_batch_seconds"])
        yield GaugeMetricFamily("ksp_ingest_last_batch_rows", "Rows in the last micro-batch.",
                                value=s["last_batch_rows"])


def serve(ingest, host: str, port: int, *, max_connections: int = 16,
          timeout: float = 10.0) -> BoundedHTTPServer:
    """Serve `GET /metrics` on a thread (0: any free port; `server_port` is the one bound).
    prometheus_client's own server takes any number of connections, a thread each, and waits
    on a silent one forever: this one takes `max_connections` at once, each read waiting
    `timeout` seconds at most."""
    registry = CollectorRegistry()
    registry.register(_Collector(ingest))
    ProcessCollector(registry=registry)
    handler = type("IngestMetricsHandler", (MetricsHandler,),
                   {"registry": registry, "timeout": timeout})
    server = BoundedHTTPServer((host, port), handler, max_connections=max_connections)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
