"""Verdicts on CREDENTIALS for the transports, before anything of a KP ID is looked at.

The transports' sessions ask `Authenticator.verdict` about every request that names a KP ID,
before their duplicate cache and every table keyed by that ID (`ksp.session.Authenticate`): a
stranger who names a KP's ID gets none of its cached answers, cannot redirect its exchanges and
cannot poison its transaction IDs. The verdict must be cheap, and a password check is slow on
purpose (scrypt, ~50 ms), so:

- a password already proven for that KP ID (its SHA-256, kept by `AccessPolicy`) is accepted at
  once, and a wrong one already seen for that ID (bounded table) is refused at once;
- any other password is verified *off the request path*: `verdict` answers None, the session
  holds the request, the adapter awaits `verify` (one worker thread, at most `max_pending`
  passwords in flight; more is LIMIT_EXCEEDED) and resumes the session. Other KPs' requests go
  on meanwhile;
- an unknown KP ID costs the same scrypt run as a known one (against a dummy hash), so KP IDs
  cannot be told apart by timing;
- failures are counted per source host and per KP ID over `failure_window` seconds; past
  `max_failures` either way, new passwords from that source or for that ID are refused with
  LIMIT_EXCEEDED (0x0a) without being tried, until the window ends. A password proven before
  is still accepted, so a guesser cannot lock a working device out.
"""
from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor

from ksp.codes import Status
from ksp.ratelog import RateLimitedLog

from .access import AccessPolicy, hash_password, verify_password

log = logging.getLogger("ksp.sib.auth")
#: Lines a peer can set off, one per kind and minute (`ksp.ratelog`).
peer_log = RateLimitedLog(log, time.monotonic)

#: Verified against when the KP ID is unknown: same scrypt parameters as real hashes.
_DUMMY_HASH = hash_password("ksp-gateway: no such KP", salt=bytes(16))


class _Window:
    """Failure counts per key over a fixed window, the oldest keys dropped past `max_keys`."""

    __slots__ = ("length", "max_keys", "_counts")

    def __init__(self, length: float, max_keys: int) -> None:
        self.length = length
        self.max_keys = max_keys
        self._counts: OrderedDict[Hashable, list] = OrderedDict()  # key -> [start, count]

    def count(self, key: Hashable, now: float) -> int:
        entry = self._counts.get(key)
        if entry is None or now - entry[0] >= self.length:
            return 0
        return entry[1]

    def add(self, key: Hashable, now: float) -> int:
        entry = self._counts.get(key)
        if entry is None or now - entry[0] >= self.length:
            entry = self._counts[key] = [now, 0]
        entry[1] += 1
        self._counts.move_to_end(key)
        while len(self._counts) > self.max_keys:
            self._counts.popitem(last=False)
        return entry[1]

    def __len__(self) -> int:
        return len(self._counts)


class Authenticator:
    """See the module docstring. `policy` may be replaced (`ksp-sib` reloading its access
    configuration); what was proven or refused under the old one is forgotten with it."""

    def __init__(self, policy: AccessPolicy, *, max_failures: int = 10,
                 failure_window: float = 60.0, max_pending: int = 32, workers: int = 1,
                 max_remembered: int = 4096,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._policy = policy
        self.max_failures = max_failures
        self.max_pending = max_pending
        self.max_remembered = max_remembered
        self.clock = clock
        self.workers = workers
        self._pool: ThreadPoolExecutor | None = None
        self._by_source = _Window(failure_window, max_remembered)
        self._by_kp = _Window(failure_window, max_remembered)
        self._refused: OrderedDict[tuple[bytes, bytes], None] = OrderedDict()
        self._pending: dict[tuple[bytes, bytes], asyncio.Future] = {}
        #: For metrics: passwords verified (scrypt runs), refusals by status.
        self.verified = 0
        self.denied = 0
        self.limited = 0

    @property
    def policy(self) -> AccessPolicy:
        return self._policy

    @policy.setter
    def policy(self, policy: AccessPolicy) -> None:
        self._policy = policy
        self._refused.clear()

    @property
    def pending(self) -> int:
        return len(self._pending)

    def verdict(self, kp_id: bytes, password: str, source: Hashable) -> Status | None:
        """OK, ACCESS_DENIED, LIMIT_EXCEEDED, or None: not known yet, `await verify(...)`."""
        policy = self._policy
        if policy.is_open:
            return Status.OK  # no access control: nothing to prove (docs/sib.md)
        if policy.requires_auth(kp_id):  # sealed messages only (wire format 13.6)
            self.denied += 1
            return Status.ACCESS_DENIED
        token = hashlib.sha256(password.encode()).digest()
        if policy.proven(kp_id, token):
            return Status.OK
        key = (kp_id, token)
        if key in self._refused:
            self.denied += 1
            return Status.ACCESS_DENIED
        if key in self._pending:
            return None
        now = self.clock()
        if (self._by_source.count(_host(source), now) >= self.max_failures
                or self._by_kp.count(kp_id, now) >= self.max_failures
                or len(self._pending) >= self.max_pending):
            self.limited += 1
            return Status.LIMIT_EXCEEDED
        return None

    async def verify(self, kp_id: bytes, password: str, source: Hashable) -> None:
        """Check the password in the worker thread (once, however many requests wait for it)
        and remember the outcome, so that the next `verdict` on it is final."""
        token = hashlib.sha256(password.encode()).digest()
        key = (kp_id, token)
        future = self._pending.get(key)
        if future is None:
            if self.verdict(kp_id, password, source) is not None:
                return  # decided meanwhile, or over a limit: `verdict` says so again
            policy = self._policy
            entry = policy.kps.get(kp_id)
            stored = entry.password_hash if entry is not None else _DUMMY_HASH
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="ksp-auth")
            loop = asyncio.get_running_loop()
            future = self._pending[key] = loop.run_in_executor(
                self._pool, verify_password, password, stored)
            try:
                ok = await future
            finally:
                del self._pending[key]
            self.verified += 1
            if policy is not self._policy:
                return  # reloaded meanwhile: the next verdict asks again
            if ok and entry is not None:
                policy.remember(kp_id, token)
            else:
                self._failed(key, _host(source))
            return
        await asyncio.shield(future)

    def _failed(self, key: tuple[bytes, bytes], host: Hashable) -> None:
        now = self.clock()
        self._refused[key] = None
        while len(self._refused) > self.max_remembered:
            self._refused.popitem(last=False)
        per_source = self._by_source.add(host, now)
        per_kp = self._by_kp.add(key[0], now)
        if max(per_source, per_kp) == self.max_failures:
            peer_log.warning("failures",
                             "authentication: %d failures from %s or for KP ID %s within %.0f "
                             "s; new passwords refused (LIMIT_EXCEEDED) until the window ends",
                             self.max_failures, host, key[0].hex(), self._by_kp.length)

    def close(self) -> None:
        """Stop the worker thread (a later `verify` starts another)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


def _host(source: Hashable) -> Hashable:
    """The host part of a transport address ((host, port) over UDP and CoAP; a TCP connection
    handle says its own `peer_host`)."""
    if isinstance(source, tuple) and source:
        return source[0]
    return getattr(source, "peer_host", source)
