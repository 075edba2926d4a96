"""Prometheus metrics, exposed with the official `prometheus_client` (the text format its
`generate_latest` writes) over a small asyncio HTTP server in the SIB's own loop: the SIB's
counters, gauges and latency histograms, read when scraped, and the process's own (resident
memory, open descriptors, CPU time: `ProcessCollector`).
"""
from __future__ import annotations

import asyncio
import bisect
import logging
import weakref
from collections import Counter
from collections.abc import Callable

from prometheus_client import (
    CONTENT_TYPE_PLAIN_0_0_4, CollectorRegistry, ProcessCollector, generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily,
)

log = logging.getLogger("ksp.sib.metrics")

#: Seconds; SEPA's 10–60 ms are in the upper buckets, the targets (< 10 ms) in the lower ones.
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class Histogram:
    """Counted on the request path as plain integers (cheaper than the library's locks);
    exposed as a Prometheus histogram when scraped."""

    def __init__(self, buckets: tuple[float, ...] = BUCKETS) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value
        self.count += 1

    def family(self, name: str, help_: str) -> HistogramMetricFamily:
        cumulative, total = [], 0
        for bound, n in zip((*map(repr, self.buckets), "+Inf"), self.counts):
            total += n
            cumulative.append((bound, total))
        return HistogramMetricFamily(name, help_, buckets=cumulative, sum_value=self.sum)


class Metrics:
    """What the SIB counts. `gauges` and `counters` are read when scraped (callables); a
    counter's name ends in `_total`, as exposed."""

    def __init__(self) -> None:
        self.requests: Counter[str] = Counter()
        self.denied = 0
        self.limited = 0
        self.indications = 0
        self.update_latency = Histogram()
        self.notification_latency = Histogram()
        self.gauges: dict[str, tuple[str, Callable[[], float]]] = {}
        self.counters: dict[str, tuple[str, Callable[[], float]]] = {}
        #: Counters with one label: name -> (help, label name, read -> {label value: count}).
        self.labelled: dict[str, tuple[str, str, Callable[[], dict]]] = {}
        #: Other parts' histograms (the SEPA gate's): name -> (help, Histogram).
        self.histograms: dict[str, tuple[str, Histogram]] = {}
        self.registry = CollectorRegistry()
        self.registry.register(_Collector(self))
        ProcessCollector(registry=self.registry)

    def indicated(self) -> None:
        self.indications += 1

    def render(self) -> str:
        return generate_latest(self.registry).decode()


    async def serve(self, host: str, port: int, *, max_connections: int = 16,
                    timeout: float = 10.0) -> asyncio.Server:
        """`GET /metrics` (any path answers the same); port 0 = ephemeral. Bounded as the
        ingest's shard server is: at most `max_connections` at once (a scraper needs one), one
        more closed unanswered, and each answered or closed within `timeout` seconds of its
        accept, however slowly its request comes."""
        active = 0

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal active
            if active >= max_connections:
                writer.close()
                return
            active += 1
            try:
                async with asyncio.timeout(timeout):
                    line = await reader.readline()
                    while await reader.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    if line.split(b" ")[0] not in (b"GET", b"HEAD"):
                        status, body = "405 Method Not Allowed", b""
                    else:
                        status, body = "200 OK", self.render().encode()
                    head = (f"HTTP/1.1 {status}\r\nContent-Type: {CONTENT_TYPE_PLAIN_0_0_4}\r\n"
                            f"Content-Length: {len(body)}\r\n"
                            f"Connection: close\r\n\r\n").encode()
                    writer.write(head + (body if not line.startswith(b"HEAD") else b""))
                    await writer.drain()
            except (TimeoutError, ConnectionError, ValueError):  # ValueError: a line too long
                pass
            finally:
                active -= 1
                writer.close()

        return await asyncio.start_server(handle, host, port)


class _Collector:
    """The SIB's metrics as Prometheus families, built when scraped."""

    def __init__(self, metrics: Metrics) -> None:
        # A weak reference: the registry belongs to the metrics, and a cycle would keep the
        # SIB's store (and its RocksDB lock) alive until a collector pass.
        self.metrics = weakref.ref(metrics)

    def collect(self):
        m = self.metrics()
        if m is None:
            return
        requests = CounterMetricFamily(
            "ksp_requests", "Requests handled (refused ones included), by transaction type.",
            labels=["type"])
        for tx, n in sorted(m.requests.items()):
            requests.add_metric([tx], n)
        yield requests
        for name, help_, value in (
                ("ksp_access_denied", "Requests denied (status 0x08).", m.denied),
                ("ksp_limit_exceeded", "Requests refused by a cap (0x0a).", m.limited),
                ("ksp_indications", "INDs handed to the transports.", m.indications)):
            yield CounterMetricFamily(name, help_, value=value)
        for name, (help_, read) in m.counters.items():
            yield CounterMetricFamily(name.removesuffix("_total"), help_, value=read())
        for name, (help_, read) in m.gauges.items():
            yield GaugeMetricFamily(name, help_, value=read())
        for name, (help_, label, read) in m.labelled.items():
            family = CounterMetricFamily(name.removesuffix("_total"), help_, labels=[label])
            for value, n in sorted(read().items()):
                family.add_metric([str(value)], n)
            yield family
        for name, (help_, histogram) in m.histograms.items():
            yield histogram.family(name, help_)
        yield m.update_latency.family(
            "ksp_update_latency_seconds",
            "From dequeuing an update to its RES (store write included).")
        yield m.notification_latency.family(
            "ksp_notification_latency_seconds",
            "From dequeuing an update to the last IND it caused (rules included).")
