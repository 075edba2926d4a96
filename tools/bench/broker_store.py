"""What saving mosquitto's store after every change costs: QoS 1 readings per second into the
project's mosquitto (`spark_ingest.testing.Mosquitto`) while the ingest's session is away, so
that every reading stays queued in the store, with `SAVE_EVERY_CHANGE` (what spark_ingest's
README tells a deployment to run: a killed broker keeps what it acknowledged) against
mosquitto's default (the store saved every 30 minutes).

Run as ``python -m tools.bench.broker_store [--quick] [--markdown]`` or ``ksp bench
broker-store``. Each round publishes `--messages` readings (every PUBACK waited for, 1,000 in
flight) to a fresh broker of each kind in turn, A then B; the table has min, median and max
over the rounds, and the ratio of the medians. Each save rewrites the whole store, so the cost
grows with what the broker holds: try more `--messages`.
"""
from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from .report import bench_parser, environment, print_report

KINDS = (("mosquitto's default (autosave_interval 1800)", False),
         ("autosave_on_changes true, autosave_interval 1", True))


def one_round(messages: int, save_every_change: bool) -> float:
    """Readings per second into a fresh broker whose only subscriber is away."""
    from spark_ingest.telemetry import reading, topic_of
    from spark_ingest.testing import Mosquitto, Subscriber
    from ..telemetry import publish

    sent = [(topic_of(f"s{k % 50}"), reading(f"s{k % 50}", "t", float(k)), "ok")
            for k in range(messages)]
    with tempfile.TemporaryDirectory() as tmp, Mosquitto(
            Path(tmp), save_every_change=save_every_change) as broker:
        Subscriber(broker.port).close()  # a persistent session, away: its queue fills
        started = time.perf_counter()
        publish(broker.url, sent)
        return messages / (time.perf_counter() - started)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    import sys

    argv = sys.argv[1:] if argv is None else argv
    parser = bench_parser("tools.bench.broker_store", __doc__, prog, "2 rounds of 1,000")
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.rounds = 1_000, 2
    rates: dict[str, list[float]] = {name: [] for name, _ in KINDS}
    for _ in range(args.rounds):  # interleaved: the machine's noise falls on both
        for name, every in KINDS:
            rates[name].append(one_round(args.messages, every))
    base = statistics.median(rates[KINDS[0][0]])
    body = [[name, f"{min(r):,.0f}", f"{statistics.median(r):,.0f}", f"{max(r):,.0f}",
             f"{statistics.median(r) / base:.3f}×"] for name, r in rates.items()]
    env = environment("paho-mqtt")
    print_report(f"QoS 1 readings/s into mosquitto, {args.messages:,} queued for a session "
                 f"away, {args.rounds} rounds", ["store saved", "min", "median", "max",
                                                 "median ÷ default"], body,
                 markdown=args.markdown, module="tools.bench.broker_store", prog=prog,
                 argv=argv, libraries=f"{env['python']}, {env['libraries']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
