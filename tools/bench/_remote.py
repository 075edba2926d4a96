"""A benchmark's simulated devices in a process of their own, commanded over a pipe, so that
the event loop of the SIB under test does none of their work (as with real devices)."""
from __future__ import annotations

import asyncio
from collections.abc import Callable


class Remote:
    """`target(conn)` in a spawned process; it answers each command (method name, args) with
    the result or the exception, and ends at None. One command at a time; `call` awaits its
    answer without blocking the event loop."""

    def __init__(self, target: Callable, timeout: float) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self.timeout = timeout
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=target, args=(child,), daemon=True)
        self.process.start()
        child.close()

    async def call(self, name: str, *args):
        loop = asyncio.get_running_loop()
        reply = loop.create_future()
        fd = self.conn.fileno()
        loop.add_reader(fd, lambda: reply.done() or reply.set_result(self.conn.recv()))
        try:
            self.conn.send((name, args))
            answer = await asyncio.wait_for(reply, self.timeout)
        finally:
            loop.remove_reader(fd)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def shutdown(self) -> None:
        self.conn.send(None)
        self.process.join(30)
        if self.process.is_alive():
            self.process.kill()
        self.conn.close()
