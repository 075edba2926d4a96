"""The SIB as a `Service` (the seam documented in `ksp/service.py`): the gates hand requests to
`submit`, which only queues them; one scheduler task executes them one at a time in arrival
order on the core (gates → scheduler → core, as in SEPA's broker)."""
from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import ClassVar, TypeVar

from ksp.codes import Status, Tx
from ksp.model import Request, Response
from ksp.secure import SealerTable
from ksp.service import Service
from ksp.session import KPIdentity
from ksp.ratelog import RateLimitedLog

from .access import AccessPolicy
from .auth import Authenticator
from .budget import OverBudget
from .core import SibCore
from .fairness import ShareExceeded, Shares, current_party, kp_party
from .persistent import Channel
from .readers import Readers, ReadersBusy, ReadersStopped
from .store import QuadStore

log = logging.getLogger("ksp.sib")
#: Lines a peer can set off, one per kind and minute (`ksp.ratelog`).
peer_log = RateLimitedLog(log, time.monotonic)
#: A new KP's first request: ten lines a minute, the rest counted.
connected_log = RateLimitedLog(log, time.monotonic, burst=10)

T = TypeVar("T")


# -- the scheduler's jobs -------------------------------------------------------------------
# One class per kind of job in the queue, dispatched by type in `Sib._run`. `writes` says
# whether queueing it closed the readers' gate (`sib.budget.Gate`), opened again once it is done.

@dataclass(slots=True)
class _Handle:
    """A KSP request for the core; its KP's share is given back when it starts."""
    writes: ClassVar[bool] = True
    request: Request
    channel: Channel
    since: float  # `time.perf_counter()` when queued


@dataclass(slots=True)
class _KspRead:
    """A KSP one-shot query, started on a reader thread once it reaches the head of the
    queue; its KP's share is held until it is done."""
    writes: ClassVar[bool] = False
    request: Request
    channel: Channel


@dataclass(slots=True)
class _GateRead:
    """One of the gate's reads (`Sib.read`): its caller starts once `started` is set."""
    writes: ClassVar[bool] = False
    started: asyncio.Future


@dataclass(slots=True)
class _Unreachable:
    """A KP that did not ACK `tid`: its persistent operations end (`Sib.kp_unreachable`)."""
    writes: ClassVar[bool] = True
    kp: KPIdentity
    tid: int


@dataclass(slots=True)
class _Work:
    """Work for the core between two requests: the gate's `call`, a new access policy."""
    writes: ClassVar[bool] = True
    run: Callable[[], None]


@dataclass(slots=True)
class _Stop:
    """The scheduler's last job (`Sib.close`)."""
    writes: ClassVar[bool] = False


_Job = _Handle | _KspRead | _GateRead | _Unreachable | _Work | _Stop
#: The one-shot queries: the reads, run beside the writes.
_READS = frozenset({Tx.SELECT, Tx.ASK, Tx.CONSTRUCT})


class Sib(Service):
    """The SIB: a store, a core and the scheduler in front of it.

    Everything the core does runs on the scheduler task, in the event loop's thread (channels
    are not thread-safe). `await drain()` waits until everything submitted so far is done.
    """

    def __init__(self, store: QuadStore | None = None, *, smart: bool = True,
                 max_queued: int | None = None, max_queued_per_kp: int | None = None,
                 auth_options: dict | None = None, reader_threads: int = 2,
                 **core_options) -> None:
        self.store = store if store is not None else QuadStore()
        self.core = SibCore(self.store, smart=smart, **core_options)
        #: One-shot queries run here, beside the writes (`sib.readers`), each started in
        #: arrival order with the rest: a KP's query sees what it wrote before it.
        self.readers = Readers(reader_threads, max_waiting=max_queued or 10_000)
        self._reads: set[asyncio.Task] = set()
        #: What the transports ask about CREDENTIALS before their duplicate caches (`sib.auth`);
        #: `auth_options` go to it (failure limits, pending verifications).
        self.authenticator = Authenticator(self.core.access, **(auth_options or {}))
        core = self.core
        #: The sealed mode's state per KP (wire format 13), one table for every transport; keys
        #: from the policy in force (it may be reloaded), windows and counters kept in the
        #: journal when there is one (a data directory), so they outlive a restart.
        self.sealers = SealerTable(lambda kp_id: core.access.key_of(kp_id), time.time,
                                   state=core.journal)
        me = weakref.ref(self)  # no cycle: the store closes when the SIB is dropped

        def read(get):
            return lambda: get(sib) if (sib := me()) is not None else 0

        metrics = self.core.metrics
        for table, name, help_, get in (
                (metrics.counters, "ksp_store_maintenance_total",
                 "Store maintenance runs (compaction on disk, rebuild in memory).",
                 lambda sib: sib.store.maintenance_runs),
                (metrics.counters, "ksp_store_renewals_total",
                 "Store reopenings that gave back what RocksDB's caches grew to.",
                 lambda sib: sib.store.renewals),
                (metrics.gauges, "ksp_store_maintenance_last_seconds",
                 "How long the last store maintenance took.",
                 lambda sib: sib.store.maintenance_seconds),
                (metrics.gauges, "ksp_store_removed_since_maintenance",
                 "Quads removed since the last store maintenance.", lambda sib: sib.store.removed),
                (metrics.gauges, "ksp_store_quads",
                 "Quads in the store (`[limits] max_quads` caps it).",
                 lambda sib: sib.store.size),
                (metrics.counters, "ksp_password_verifications_total",
                 "Passwords checked (scrypt), off the request path.",
                 lambda sib: sib.authenticator.verified),
                (metrics.counters, "ksp_credentials_denied_total",
                 "Requests refused by the transports for their CREDENTIALS (0x08).",
                 lambda sib: sib.authenticator.denied),
                (metrics.counters, "ksp_credentials_limited_total",
                 "Requests refused by the failure or verification limits (0x0a).",
                 lambda sib: sib.authenticator.limited)):
            table[name] = (help_, read(get))
        #: Cap on requests waiting in the queue; beyond it a request is answered at once with
        #: LIMIT_EXCEEDED (0x0a) and not queued, so memory stays bounded.
        self.max_queued = max_queued
        #: Requests queued and not yet executed per party (`sib.fairness`: a KP ID, a SEPA
        #: client, else a host address), at most `max_queued_per_kp` each: beyond, 0x0a too
        #: (SEPA: 429), so one KP flooding cannot fill the queue for everyone.
        self.queued_by = Shares(max_queued_per_kp)
        metrics.gauges["ksp_persistent_operations"] = (
            "Active persistent operations (queries and rules).",
            read(lambda sib: sib.core.persistent_count))
        metrics.gauges["ksp_queued_requests"] = (
            "Requests waiting for the scheduler.", read(lambda sib: sib.queued))
        self._queue: asyncio.Queue | None = None
        self._task: asyncio.Task | None = None
        self._closing = False
        self._kps: OrderedDict = OrderedDict()

    @property
    def queued(self) -> int:
        return self._queue.qsize() if self._queue is not None else 0

    # -- Service --------------------------------------------------------------------------

    def _full(self) -> bool:
        """Whether the queue is at `max_queued` (counted as a refusal when it is)."""
        self._ensure_started()
        if self.max_queued is not None and self._queue.qsize() >= self.max_queued:
            self.core.metrics.limited += 1
            return True
        return False

    def submit(self, request: Request, channel: Channel) -> None:
        if self._full():
            peer_log.warning("queue full", "%s %s tid %d refused: %d requests queued",
                             self.core.access.who(channel.kp), request.tx.name, request.tid,
                             self.max_queued)
            channel.respond(Response(request.tid, Status.LIMIT_EXCEEDED))
            return
        party = kp_party(channel.kp)
        if not self.queued_by.take(party):
            self.core.metrics.limited += 1
            peer_log.warning("share full", "%s %s tid %d refused: %d of its requests queued",
                             self.core.access.who(channel.kp), request.tx.name, request.tid,
                             self.queued_by.per_party)
            channel.respond(Response(request.tid, Status.LIMIT_EXCEEDED))
            return
        if request.tx in _READS:  # at once if simple and nothing is queued before it
            # (`_answer_at_once`), else started from the queue and run beside it
            if self._queue.qsize() or self._closing or not self._answer_at_once(
                    request, channel, party):
                self._put(_KspRead(request, channel))
        else:
            self._put(_Handle(request, channel, time.perf_counter()))
        self._seen(channel)

    async def read(self, work: Callable[[], T]) -> T:
        """Run `work()` (it only reads) on a reader thread once everything submitted before it
        has been started, under the query budget: the SEPA gate's queries. `OverBudget` past
        it; `QueueFull` past `max_queued`."""
        party = self._admit()
        try:
            started = asyncio.get_running_loop().create_future()
            self._put(_GateRead(started))
            await started
            return await self.readers.run(work, self.core.budgets.query)
        except ReadersBusy as exc:
            raise asyncio.QueueFull(str(exc)) from None
        finally:
            if party is not None:
                self.queued_by.give(party)  # the client's share: held until done

    def _admit(self):
        """Admit one of the gate's jobs (`call`, `read`): `QueueFull` past `max_queued`,
        `ShareExceeded` past the share of the party in `sib.fairness.current_party`, whose
        share it then holds (returned; None: no party) until the caller gives it back."""
        if self._full():
            raise asyncio.QueueFull(f"{self.max_queued} requests queued")
        party = current_party.get()
        if party is not None and not self.queued_by.take(party):
            self.core.metrics.limited += 1
            raise ShareExceeded(f"{self.queued_by.per_party} requests of this client queued")
        return party

    def _put(self, job: _Job) -> None:
        """Queue `job`, closing the readers' gate for one on the write path (`_run` opens it
        once the job is done)."""
        if job.writes:
            self.readers.gate.close()
        self._queue.put_nowait(job)

    def _answer_at_once(self, request: Request, channel: Channel, party=None) -> bool:
        """Answer a simple read now (`SibCore.read_at_once`), if it is one: with nothing queued
        before it, at its turn as from the queue. Its KP's share, taken, is given back (`party`:
        its `kp_party`, if known)."""
        response = self.core.read_at_once(request, channel.kp,
                                          getattr(channel, "payload_cap", None))
        if response is None:
            return False
        self.queued_by.give(kp_party(channel.kp) if party is None else party)
        channel.respond(response)
        return True

    def _start_read(self, job: _KspRead) -> None:
        """A KSP read reached the head of the queue: it starts now, beside what follows."""
        task = asyncio.get_running_loop().create_task(self._ksp_read(job.request, job.channel))
        self._reads.add(task)
        task.add_done_callback(self._reads.discard)

    async def _ksp_read(self, request: Request, channel: Channel) -> None:
        core = self.core
        try:
            payload = getattr(channel, "payload_cap", None)  # the RES's most bytes
            response = await self.readers.run(lambda: core.read(request, channel.kp, payload),
                                              core.budget("query", channel.kp))
        except ReadersStopped:  # as the requests still queued when the SIB stops
            response = Response(request.tid, Status.INTERNAL_ERROR)
        except (OverBudget, ReadersBusy) as exc:
            peer_log.info("read refused", "%s %s tid %d: LIMIT_EXCEEDED (%s)",
                          core.access.who(channel.kp), request.tx.name, request.tid, exc)
            core.metrics.limited += 1
            response = Response(request.tid, Status.LIMIT_EXCEEDED)
        finally:
            self.queued_by.give(kp_party(channel.kp))  # the KP's share: held until done
        channel.respond(response)

    async def call(self, work):
        """Run `work()` on the scheduler, in arrival order with the KSP requests, and return
        what it returns (or raise what it raises): the SEPA gate's queries, updates and
        subscriptions. Past `max_queued` it raises `QueueFull` without queueing, past
        `max_queued_per_kp` of the party in `sib.fairness.current_party` `ShareExceeded`."""
        party = self._admit()
        future = asyncio.get_running_loop().create_future()

        def job():
            if party is not None:
                self.queued_by.give(party)
            try:
                result = work()
            except BaseException as exc:  # handed to the caller, never to the scheduler
                if not future.done():
                    future.set_exception(exc)
                return
            if not future.done():  # the caller may have gone (a closed HTTP connection)
                future.set_result(result)

        self._put(_Work(job))
        return await future

    def _seen(self, channel: Channel) -> None:
        """Log a KP's first request (the transports have no notion of a connected KP)."""
        key = (channel.transport, channel.kp)
        if key in self._kps:
            self._kps.move_to_end(key)
            return
        self._kps[key] = None
        if len(self._kps) > 4096:
            self._kps.popitem(last=False)
        connected_log.info("connected", "%s connected over %s", self.core.access.who(channel.kp),
                           channel.transport)

    def set_access(self, access: AccessPolicy) -> None:
        """Put a new access policy in force between two requests (a reloaded configuration):
        the transports' verdicts from now on, and every persistent operation re-checked
        (`SibCore.set_access`)."""
        self._ensure_started()
        self.authenticator.policy = access
        self._put(_Work(partial(self.core.set_access, access)))

    def kp_unreachable(self, kp: KPIdentity, tid: int) -> None:
        """Not capped: it frees memory. Its operations end with a final TERMINATED IND each
        (`SibCore.give_up`), which a KP back in time still gets."""
        self._ensure_started()
        self._put(_Unreachable(kp, tid))

    def _give_up(self, kp: KPIdentity, tid: int) -> None:
        ended = self.core.give_up(kp)
        if ended:  # the final INDs' own retries running out end nothing more: no line
            peer_log.warning("unreachable", "%s unreachable (no ACK for tid %d): its %d "
                             "persistent operations end (TERMINATED)",
                             self.core.access.who(kp), tid, ended)

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> "Sib":
        self._ensure_started()
        return self

    async def drain(self) -> None:
        """Wait until everything submitted so far is done, the reads it started included."""
        if self._queue is not None:
            await self._queue.join()
        while self._reads:
            await asyncio.gather(*self._reads, return_exceptions=True)

    async def close(self) -> None:
        """Stop: KSP requests still queued are answered INTERNAL_ERROR (0x07) unexecuted, the
        rest queued (the gate's work, a new policy) is done; persistent operations end with
        TERMINATED."""
        if self._task is None:
            return
        self._closing = True
        self._put(_Stop())
        await self._task
        self._task = None
        for task in list(self._reads):  # a reader thread still on one is a daemon
            task.cancel()
        self.core.terminate_all()
        self.store.flush()
        self.authenticator.close()

    def _ensure_started(self) -> None:
        if self._task is None:
            self._queue = asyncio.Queue()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="sib-scheduler")

    async def _run(self) -> None:
        queue = self._queue
        gate = self.readers.gate
        while True:
            job: _Job = await queue.get()
            try:
                match job:
                    case _Stop():
                        return
                    case _Handle(request, channel) | _KspRead(request, channel) \
                            if self._closing:
                        self.queued_by.give(kp_party(channel.kp))
                        channel.respond(Response(request.tid, Status.INTERNAL_ERROR))
                    case _Handle(request, channel, since):
                        self.queued_by.give(kp_party(channel.kp))
                        self.core.handle(request, channel, since)
                    case _KspRead(request, channel):
                        if not self._answer_at_once(request, channel):
                            self._start_read(job)
                    case _GateRead(started):
                        if not started.done():
                            started.set_result(None)
                    case _Unreachable(kp, tid):
                        self._give_up(kp, tid)
                    case _Work(run):
                        run()
                if self.store.maintenance_due():  # between two requests (sib.store)
                    self.store.maintain()
                elif (self.store.renewal_due() and not self.readers.running
                      and not self.readers.waiting):  # nothing else holds the store open
                    self.store.renew()
            except Exception:  # never let one request stop the scheduler
                peer_log.exception("scheduler", "scheduler: unhandled error")
            finally:
                queue.task_done()
                if job.writes:
                    gate.open()
            # Let the transports run between requests (the core itself never awaits).
            await asyncio.sleep(0)
