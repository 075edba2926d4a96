"""The soak benchmarks' workload (`bridge-soak`, `transport-soak`): sensors replacing their
readings through a KSP URL under persistent queries and a rule, devices coming and going.

Two KPs: a device and a watcher. The watcher subscribes to one persistent SELECT per sensor; a
rule (persistent DELETE/INSERT) keeps a fan's state equal to sensor 0's reading. Each cycle is
one UPDATE DATA by one of the sensors (its old reading out, the new one in), timed from sending
it to the IND that carries the new reading. Every `churn` cycles a new device comes (a new
socket: a new address), makes a persistent query of its own (a distinct one), reads its first
state, and goes (TERMINATE, then it closes).
"""
from __future__ import annotations

import asyncio
import statistics
import sys
import time
from typing import Callable

from ksp.codes import Tx
from ksp.model import Request
from ksp.terms import XSD_INTEGER, IRI, Literal, Triple, Var

EX = "http://example.org/soak#"
SENSORS = 10
VALUE, FAN, STATE = IRI(EX + "value"), IRI(EX + "fan"), IRI(EX + "state")


def sensor(k: int) -> IRI:
    return IRI(f"{EX}s{k}")


def reading(n: int) -> Literal:
    return Literal(str(2_000_000 + n), XSD_INTEGER)


def watch(k: int) -> Request:
    return Request(Tx.SELECT_PERSISTENT, projection=1, where=(Triple(sensor(k), VALUE, Var(0)),))


async def drive(url: str, cycles: int, window: int, churn: int,
                row: Callable[[], dict], rate: float | None = None) -> list[dict]:
    """Run the workload against `url`, at most `rate` cycles a second if given; one row per
    `window` cycles: the cycle count, update → IND p50 and p99 (seconds), and what `row()`
    adds."""
    from transports import connect

    rows: list[dict] = []
    last = {k: reading(0) for k in range(SENSORS)}
    async with connect(url) as device, connect(url) as watcher:
        await device.request(Request(Tx.INSERT_DATA, insert=tuple(
            Triple(sensor(k), VALUE, last[k]) for k in range(SENSORS))
            + (Triple(FAN, STATE, last[0]),)))
        subs = [watcher.subscribe(watch(k)) for k in range(SENSORS)]
        for sub in subs:
            await sub.__aenter__()
            await asyncio.wait_for(anext(sub), 30)
        await device.request(Request(
            Tx.UPDATE_PERSISTENT, delete=(Triple(FAN, STATE, Var(1)),),
            insert=(Triple(FAN, STATE, Var(0)),),
            where=(Triple(sensor(0), VALUE, Var(0)), Triple(FAN, STATE, Var(1)))),
            persistent=True)
        latencies: list[float] = []
        begun = time.perf_counter()
        for n in range(1, cycles + 1):
            if rate is not None and (ahead := begun + n / rate - time.perf_counter()) > 0:
                await asyncio.sleep(ahead)
            k = n % SENSORS
            new = reading(n)
            started = time.perf_counter()
            sent = asyncio.ensure_future(device.request(Request(
                Tx.UPDATE_DATA, delete=(Triple(sensor(k), VALUE, last[k]),),
                insert=(Triple(sensor(k), VALUE, new),))))
            ind = await asyncio.wait_for(anext(subs[k]), 30)
            latencies.append(time.perf_counter() - started)
            await sent
            assert [str(r[0]) for r in ind.result.rows] == [new.lexical], ind
            last[k] = new
            if n % churn == 0:
                async with connect(url) as visitor:
                    async with visitor.subscribe(
                            f"SELECT ?v WHERE {{ <{sensor(k)}> <{VALUE}> ?v "
                            f"FILTER(?v > {-n}) }}") as own:
                        await asyncio.wait_for(anext(own), 30)
            if n % window == 0:
                latencies.sort()
                rows.append({"cycles": n, "p50": statistics.median(latencies),
                             "p99": latencies[int(len(latencies) * 0.99)], **row()})
                latencies = []
                print(f"{url}: {n:,} cycles, p99 {rows[-1]['p99'] * 1e3:.2f} ms, "
                      f"{rows[-1].get('rss', 0):.0f} MiB", file=sys.stderr)
        for sub in subs:
            await sub.__aexit__(None, None, None)
    return rows
