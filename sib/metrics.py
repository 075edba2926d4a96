"""Prometheus metrics in the text exposition format (version 0.0.4), served over HTTP by a
small asyncio server: a few counters, one gauge and two histograms do not justify a dependency.
"""
from __future__ import annotations

import asyncio
import bisect
import logging
from collections import Counter
from collections.abc import Callable

log = logging.getLogger("ksp.sib.metrics")

#: Seconds; SEPA's 10–60 ms are in the upper buckets, the targets (< 10 ms) in the lower ones.
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class Histogram:
    def __init__(self, buckets: tuple[float, ...] = BUCKETS) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value
        self.count += 1

    def lines(self, name: str) -> list[str]:
        out, total = [], 0
        for bound, n in zip((*map(repr, self.buckets), "+Inf"), self.counts):
            total += n
            out.append(f'{name}_bucket{{le="{bound}"}} {total}')
        out += [f"{name}_sum {self.sum!r}", f"{name}_count {self.count}"]
        return out


class Metrics:
    """What the SIB counts. `gauges` are read when scraped (callables)."""

    def __init__(self) -> None:
        self.requests: Counter[str] = Counter()
        self.denied = 0
        self.limited = 0
        self.indications = 0
        self.update_latency = Histogram()
        self.notification_latency = Histogram()
        self.gauges: dict[str, tuple[str, Callable[[], float]]] = {}
        self.counters: dict[str, tuple[str, Callable[[], float]]] = {}

    def indicated(self) -> None:
        self.indications += 1

    def render(self) -> str:
        lines = ["# HELP ksp_requests_total Requests handled (refused ones included), by transaction type.",
                 "# TYPE ksp_requests_total counter"]
        lines += [f'ksp_requests_total{{type="{tx}"}} {n}'
                  for tx, n in sorted(self.requests.items())]
        simple = [("ksp_access_denied_total", "counter", "Requests denied (status 0x08).",
                   lambda: self.denied),
                  ("ksp_limit_exceeded_total", "counter", "Requests refused by a cap (0x0a).",
                   lambda: self.limited),
                  ("ksp_indications_total", "counter", "INDs handed to the transports.",
                   lambda: self.indications)]
        simple += [(n, "gauge", h, f) for n, (h, f) in self.gauges.items()]
        simple += [(n, "counter", h, f) for n, (h, f) in self.counters.items()]
        for name, kind, help_, value in simple:
            lines += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}", f"{name} {value()}"]
        for name, help_, hist in (
                ("ksp_update_latency_seconds",
                 "From dequeuing an update to its RES (store write included).",
                 self.update_latency),
                ("ksp_notification_latency_seconds",
                 "From dequeuing an update to the last IND it caused (rules included).",
                 self.notification_latency)):
            lines += [f"# HELP {name} {help_}", f"# TYPE {name} histogram", *hist.lines(name)]
        return "\n".join(lines) + "\n"

    async def serve(self, host: str, port: int) -> asyncio.Server:
        """`GET /metrics` (any path answers the same); port 0 = ephemeral."""

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                line = await asyncio.wait_for(reader.readline(), 10)
                while (h := await asyncio.wait_for(reader.readline(), 10)) not in (b"\r\n",
                                                                                   b"\n", b""):
                    pass
                if line.split(b" ")[0] not in (b"GET", b"HEAD"):
                    status, body = "405 Method Not Allowed", b""
                else:
                    status, body = "200 OK", self.render().encode()
                head = (f"HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; "
                        f"charset=utf-8\r\nContent-Length: {len(body)}\r\n"
                        f"Connection: close\r\n\r\n").encode()
                writer.write(head + (body if not line.startswith(b"HEAD") else b""))
                await writer.drain()
            except (asyncio.TimeoutError, ConnectionError):
                pass
            finally:
                writer.close()

        return await asyncio.start_server(handle, host, port)
