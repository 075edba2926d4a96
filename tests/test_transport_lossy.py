"""KSP over a lossy UDP link: a real relay between client and server drops 20 % of the
datagrams in each direction, duplicates 10 % and delays (reorders) 30 %."""
from __future__ import annotations

import asyncio

import pytest

from ksp import IRI, Literal, Request, Timing, Triple, Tx, Var, is_newer
from transports import Server, connect

from lossy_proxy import LossyProxy
from memory_service import MemoryService
from transport_helpers import run

EX = "http://example.org/"
VALUE = IRI(EX + "value")

LOSSY = Timing(ack_timeout=0.05, ack_random_factor=1.5, max_retransmit=12, max_latency=1.0)
"""A request is lost with p = 1 − 0.8² = 0.36 per attempt; 13 attempts fail together with
p ≈ 2·10⁻⁶, so 1,000 requests all get through in all but one run in ~500."""

COUNT_ALL = Request(Tx.SELECT_PERSISTENT, 0, projection=0,
                    where=(Triple(Var(0), VALUE, Var(1)),))


def item(i: int) -> Triple:
    return Triple(IRI(f"{EX}item{i}"), VALUE, Literal(str(i), "http://www.w3.org/2001/XMLSchema#integer"))


@pytest.mark.slow
def test_1000_con_inserts_execute_once_and_the_subscriber_ends_current():
    n = 1000

    async def scenario():
        service = MemoryService()
        server = await Server.start(service, udp=0, timing=LOSSY)
        proxy = await LossyProxy.start(("127.0.0.1", server.udp.port), seed=20)
        url = f"udp://127.0.0.1:{proxy.port}"
        seen: list[int] = []
        try:
            async with await connect(url, kp_id="writer", timing=LOSSY) as writer, \
                    await connect(url, kp_id="watcher", timing=LOSSY) as watcher:
                async with watcher.subscribe(COUNT_ALL) as sub:
                    async def watch():
                        last_seq = None
                        async for ind in sub:
                            if ind.seq is not None:  # the RES's initial state has none
                                assert is_newer(ind.seq, last_seq), (ind.seq, last_seq)
                                last_seq = ind.seq
                            seen.append(len(ind.result.rows))
                            if seen[-1] == n:
                                return

                    watching = asyncio.create_task(watch())
                    queue = list(range(n))

                    async def insert_worker():
                        while queue:
                            i = queue.pop()
                            await writer.update(Request(Tx.INSERT_DATA, 0, insert=(item(i),)))

                    await asyncio.gather(*(insert_worker() for _ in range(32)))
                    await asyncio.wait_for(watching, 60)
        finally:
            await proxy.close()
            await server.close()
        return service, proxy, seen

    service, proxy, seen = run(scenario(), timeout=300)
    inserts = {k: v for k, v in service.executions.items()
               if k[0] is Tx.INSERT_DATA and isinstance(k[1], Triple)}
    assert len(inserts) == n and set(inserts.values()) == {1}  # each executed exactly once
    assert set(service.executions.values()) == {1}  # and no (KP, TID) request ran twice
    assert len(service.store) == n
    assert seen[-1] == n                       # the last state delivered is the final one
    assert seen == sorted(seen)                # no stale (older) state ever delivered
    assert proxy.stats["dropped"] > 300 and proxy.stats["duplicated"] > 100
    assert proxy.stats["delayed"] > 300


def test_persistent_transaction_across_the_sequence_wrap_with_reordering():
    start, changes = 65_490, 120  # numbering 65490 … 65535, 0, 1, … 73

    async def scenario():
        service = MemoryService(first_seq=start)
        server = await Server.start(service, udp=0, timing=LOSSY)
        proxy = await LossyProxy.start(("127.0.0.1", server.udp.port), seed=7,
                                       reorder=0.5, max_delay=0.05)
        delivered: list[tuple[int | None, int]] = []
        try:
            async with await connect(f"udp://127.0.0.1:{proxy.port}", kp_id="watcher",
                                     timing=LOSSY) as kp:
                async with kp.subscribe(COUNT_ALL) as sub:
                    async def watch():
                        async for ind in sub:
                            delivered.append((ind.seq, len(ind.result.rows)))
                            if len(ind.result.rows) == changes:
                                return

                    watching = asyncio.create_task(watch())
                    for i in range(changes):
                        # INDs are produced faster than they are acknowledged: supersede,
                        # reordering and the wrap all happen
                        service._execute(Request(Tx.INSERT_DATA, 0, insert=(item(i),)),
                                         _NoReply())
                        await asyncio.sleep(0.004)
                    await asyncio.wait_for(watching, 60)
        finally:
            await proxy.close()
            await server.close()
        return service, delivered

    service, delivered = run(scenario(), timeout=300)
    assert service.indications_sent == changes
    seqs = [s for s, _ in delivered if s is not None]
    counts = [c for _, c in delivered]
    assert counts[-1] == changes and counts == sorted(counts)
    assert all(is_newer(b, a) for a, b in zip(seqs, seqs[1:]))
    assert seqs[0] >= start and seqs[-1] < 1000  # it crossed 65535 → 0
    assert any(b < a for a, b in zip(seqs, seqs[1:]))
    # the final state is seq (start + changes - 1) mod 2^16
    assert seqs[-1] == (start + changes - 1) % 65536


class _NoReply:
    """The channel of a change made by the SIB itself (no request to answer)."""

    transport, kp, tid = "test", None, 0

    def respond(self, response) -> None:
        pass
