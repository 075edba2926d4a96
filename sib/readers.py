"""Reads beside the writes: one-shot queries (KSP SELECT/ASK/CONSTRUCT, SEPA /query) run on a
few threads of their own, each against the store as it is when it starts (pyoxigraph reads a
snapshot and releases the GIL while it evaluates), so a slow read never holds the scheduler,
the writes or the INDs, and the second core works. They give way to the write path
(`sib.budget.Gate`) and run at a lower CPU priority (`_lower_priority`).

Each read has its time budget (`sib.budget`): its caller gets `OverBudget` at the deadline
whether the thread has stopped or not. The thread stops at its next look at the clock (every
few hundred rows); a single step of pyoxigraph (a sort, an aggregate) runs to its end, holding
its thread meanwhile — at most `threads` of them, with `max_waiting` reads waiting their turn
(past it a read is refused at once). Threads are daemons: a stopping SIB never waits for one.
"""
from __future__ import annotations

import asyncio
import gc
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from .budget import Deadline, Gate, OverBudget, within

__all__ = ["Readers", "ReadersBusy", "ReadersStopped"]

T = TypeVar("T")
SWITCH_INTERVAL = 0.0005
"""Seconds a thread holds the GIL before another that waits for it gets it, once readers run."""


def _bare(exc: BaseException) -> BaseException:
    """`exc` and the exceptions chained to it without their tracebacks: their frames hold
    what the read made (pyoxigraph's results), which must be dropped on this thread."""
    seen = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        e.__traceback__ = None
        e = e.__cause__ or e.__context__
    return exc


class _OldGeneration:
    """Python's collections of its oldest generation walk every object the process holds,
    holding the GIL throughout: a read of millions of rows set off collections of half a
    second each, every thread waiting (`ksp bench stall`). While reads run they are put off
    (the young generations are still collected, and the rows a read makes go with it, by
    their reference counts); at most `longest` seconds in a row, then one runs."""

    longest = 60.0

    def __init__(self) -> None:
        self._since: float | None = None
        self._threshold = gc.get_threshold()

    def hold(self) -> None:
        if self._since is None:
            self._since = time.monotonic()
            self._threshold = gc.get_threshold()
        elif time.monotonic() - self._since > self.longest:
            gc.collect()
            self._since = time.monotonic()
        first, second, _ = self._threshold
        gc.set_threshold(first, second, 1 << 30)

    def release(self) -> None:
        if self._since is not None:
            gc.set_threshold(*self._threshold)
            self._since = None


_OLD_GENERATION = _OldGeneration()


def _lower_priority(nice: int) -> None:
    """This thread yields the CPU to the event loop's (and to every other process's): a read
    that pyoxigraph evaluates without the GIL (an aggregate over millions of rows) otherwise
    takes a core the event loop and the clients on a small gateway need. Linux sets a
    thread's niceness by its thread id; elsewhere, or where not allowed, it stays as it is."""
    if nice and hasattr(os, "setpriority") and sys.platform.startswith("linux"):
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(),
                           min(19, os.getpriority(os.PRIO_PROCESS, 0) + nice))
        except OSError:
            pass


class ReadersBusy(Exception):
    """`max_waiting` reads wait already."""


class ReadersStopped(OverBudget):
    """The SIB is stopping (`Readers.stop`): a read under way or asked for now is given up."""


class Readers:
    """A bounded pool of reader threads (see the module docstring)."""

    #: How much lower the reader threads' CPU priority is than the process's (`nice`).
    nice = 10

    def __init__(self, threads: int = 2, max_waiting: int = 1024) -> None:
        self.threads = threads
        self.max_waiting = max_waiting
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._workers: list[threading.Thread] = []
        self._waiting = 0
        self._lock = threading.Lock()
        #: Reads given up at their deadline (counted once each), and how many of those were
        #: still evaluating then (a thread held until pyoxigraph's step ended).
        self.over_budget = 0
        self.running = 0
        #: Closed while the write path runs: the reads wait for it (`sib.budget.Gate`).
        self.gate = Gate()
        #: Set by `stop`: every caller waiting for a read is answered at once.
        self._stopping: asyncio.Future | None = None
        self.stopped = False

    @property
    def waiting(self) -> int:
        return self._waiting

    async def run(self, work: Callable[[], T], seconds: float | None, what: str = "the query"
                  ) -> T:
        """`work()` on a reader thread under a budget of `seconds`; its result, or what it
        raises; `OverBudget` at the deadline; `ReadersBusy` when too many wait;
        `ReadersStopped` once the SIB stops (`stop`), whether the thread has ended or not."""
        if self.stopped:
            raise ReadersStopped(f"{what} was given up: the SIB is stopping")
        with self._lock:
            if self._waiting >= self.max_waiting:
                raise ReadersBusy(f"{self.max_waiting} reads waiting")
            self._waiting += 1
        self._start()
        deadline = Deadline(seconds, what, self.gate)
        future: Future = Future()
        self._jobs.put((work, deadline, future))
        waiting = asyncio.wrap_future(future)
        waiting.add_done_callback(lambda f: f.cancelled() or f.exception())  # read: no warning
        try:
            done, _ = await asyncio.wait((waiting, self._stop_signal()), timeout=seconds,
                                         return_when=asyncio.FIRST_COMPLETED)
            if waiting in done:
                return waiting.result()
            deadline.cancel()  # a thread still on it stops at its next look at the clock
            if self.stopped:
                raise ReadersStopped(f"{what} was given up: the SIB is stopping")
            self.over_budget += 1
            raise OverBudget(f"{what} took longer than its {seconds:g} s budget")
        finally:
            future.cancel()  # if it still waits, it never runs: it waits no more
            if future.cancelled():
                with self._lock:
                    self._waiting -= 1

    def _stop_signal(self) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        if self._stopping is None or self._stopping.get_loop() is not loop:
            self._stopping = loop.create_future()
            if self.stopped:
                self._stopping.set_result(None)
        return self._stopping

    def stop(self) -> None:
        """The SIB stops: every read under way is given up now (its caller gets
        `ReadersStopped`; a thread still evaluating is a daemon, and stops at its next look at
        the clock), and so is every read asked for from now on."""
        self.stopped = True
        if self._stopping is not None and not self._stopping.done():
            self._stopping.set_result(None)

    def _start(self) -> None:
        if not self._workers:
            # A reader turning rows into terms holds the GIL for Python's switch interval
            # (5 ms) at a time, and the event loop, whose every step needs it, waits that
            # long each time: at 0.5 ms a sensor's round trip beside a heavy read stays close
            # to its quiet time (`ksp bench stall`).
            sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL))
        while len(self._workers) < self.threads:
            worker = threading.Thread(target=self._work, name="sib-reader", daemon=True)
            worker.start()
            self._workers.append(worker)

    def _work(self) -> None:
        _lower_priority(self.nice)
        jobs = self._jobs
        while True:
            work, deadline, future = jobs.get()
            if not future.set_running_or_notify_cancel():
                continue  # given up while it waited (and no longer counted)
            with self._lock:
                self._waiting -= 1
                self.running += 1
                if self.running == 1:
                    _OLD_GENERATION.hold()
            try:
                with within(deadline):
                    deadline.check()
                    result: Any = work()
            except BaseException as exc:  # handed to the caller, without its frames
                future.set_exception(_bare(exc))
            else:
                future.set_result(result)
            finally:
                with self._lock:
                    self.running -= 1
                    if not self.running:
                        _OLD_GENERATION.release()
