"""Log lines a peer can set off are rate-limited (`ksp.ratelog`): the limiter on an
injected clock, and a KP flooding a SIB past `max_queued` over a real TCP connection, which leaves
a few lines in the log, not one per refused request."""
from __future__ import annotations

import asyncio
import logging

from ksp import Literal, Request, Status, Triple, Tx
from ksp.codec import TCP, decode_sib_message, encode
from sib import Sib
from sib import service
from sib.testing import ex
from transports import Server
from ksp.ratelog import RateLimitedLog, RateLimitFilter


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_library_logger_filtered_by_the_same_limit(caplog):
    """`RateLimitFilter` on another library's logger: a template's first record a period, the
    rest counted and said with the next one let through, each template apart."""
    caplog.set_level(logging.INFO, "test.library")
    clock = Clock()
    library = logging.getLogger("test.library")
    limit = RateLimitFilter(clock, period=60.0)
    library.addFilter(limit)
    try:
        for port in range(5):
            library.warning("Ignoring unparsable message from %s", ("::1", port))
            library.info("50% no resource")
        clock.now += 60.0
        library.warning("Ignoring unparsable message from %s", ("::1", 9))
        library.info("50% no resource")
    finally:
        library.removeFilter(limit)
    assert [r.getMessage() for r in caplog.records] == [
        "Ignoring unparsable message from ('::1', 0)", "50% no resource",
        "Ignoring unparsable message from ('::1', 9) (4 more like it left out of the log)",
        "50% no resource (4 more like it left out of the log)"]


def test_one_line_per_kind_and_period_then_the_count_left_out(caplog):
    caplog.set_level(logging.INFO, "test.ratelog")
    clock = Clock()
    limited = RateLimitedLog(logging.getLogger("test.ratelog"), period=60.0, clock=clock)
    assert limited.warning("a", "refused %d", 1)
    for i in range(2, 100):
        clock.now += 0.1
        assert not limited.warning("a", "refused %d", i)
    assert limited.warning("b", "other kind")  # each kind its own allowance
    clock.now += 60.0
    assert limited.warning("a", "refused %d", 100)
    assert not limited.warning("a", "refused %d", 101)
    clock.now += 60.0
    assert limited.warning("a", "refused %d", 102)
    assert [r.getMessage() for r in caplog.records] == [
        "refused 1", "other kind", "refused 100 (98 more like it left out of the log)",
        "refused 102 (1 more like it left out of the log)"]
    burst = RateLimitedLog(logging.getLogger("test.ratelog"), burst=3, clock=clock,
                           max_kinds=2)
    assert [burst.info("x", "x") for _ in range(4)] == [True, True, True, False]
    burst.info("y", "y")
    burst.info("z", "z")  # past max_kinds: "x", silent longest, is forgotten
    assert burst.info("x", "x again")
    assert caplog.records[-1].getMessage() == "x again"


def test_a_kp_flooding_past_max_queued_leaves_a_few_lines(caplog, monkeypatch):
    caplog.set_level(logging.INFO, "ksp.sib")
    clock = Clock()
    monkeypatch.setattr(service.peer_log, "clock", clock)

    async def go():
        sib = Sib(max_queued=1)
        async with await Server.start(sib, tcp=0) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.tcp.port)
            tids = iter(range(1, 60000))

            async def flood(batches: int, size: int = 100) -> int:
                """`batches` of `size` INSERT DATA written at once (one read at the SIB, so
                its queue overflows), each batch answered before the next; how many were
                refused (LIMIT_EXCEEDED)."""
                refused = 0
                for _ in range(batches):
                    batch = []
                    for _ in range(size):
                        tid = next(tids)
                        batch.append(encode(Request(Tx.INSERT_DATA, tid, insert=(
                            Triple(ex("s"), ex("p"), Literal.of(tid)),)), TCP))
                    writer.write(b"".join(batch))
                    for _ in range(size):
                        head = await asyncio.wait_for(reader.readexactly(8), 30)
                        body = await reader.readexactly(int.from_bytes(head[4:8], "little") - 8)
                        res = decode_sib_message(head + body, TCP, Tx.INSERT_DATA)
                        refused += res.status == Status.LIMIT_EXCEEDED
                return refused

            try:
                first = await flood(10)
                clock.now += 61.0  # a minute later, another flood
                second = await flood(10)
            finally:
                writer.close()
                await writer.wait_closed()
        await sib.close()
        return first, second

    first, second = asyncio.run(asyncio.wait_for(go(), 120))
    assert first >= 10 and second >= 2, (first, second)  # the queue did overflow, twice
    lines = [r.getMessage() for r in caplog.records if "requests queued" in r.getMessage()]
    assert len(lines) == 2, lines[:5]
    assert lines[1].endswith(f"({first - 1} more like it left out of the log)")
