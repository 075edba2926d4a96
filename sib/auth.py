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
- wrong passwords slow their guesser down, not the KP guessed at (`sib.guesses`): past
  `max_failures` failures of a source host, or of a KP ID from all sources, the failing source's
  new passwords are refused with LIMIT_EXCEEDED (0x0a) without being tried, for a wait that
  doubles with each further failure up to `backoff_cap` seconds. A source that has not failed
  is never held back, so a device gets in from its own address with its right password however
  many wrong ones others sent for it; a password proven before is accepted from anywhere. At
  most `max_pending_per_source` passwords of one source host are in flight at once.
"""
from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor

from ksp.codes import Status
from ksp.ratelog import RateLimitedLog

from .access import AccessPolicy, hash_password, verify_password
from .guesses import GuessLimit, source_key

log = logging.getLogger("ksp.sib.auth")
#: Lines a peer can set off, one per kind and minute (`ksp.ratelog`).
peer_log = RateLimitedLog(log, time.monotonic)

#: Verified against when the KP ID is unknown: same scrypt parameters as real hashes.
_DUMMY_HASH = hash_password("ksp-gateway: no such KP", salt=bytes(16))


class Authenticator:
    """See the module docstring. `policy` may be replaced (`ksp-sib` reloading its access
    configuration); what was proven or refused under the old one is forgotten with it."""

    def __init__(self, policy: AccessPolicy, *, max_failures: int = 10,
                 backoff_base: float = 1.0, backoff_cap: float = 60.0,
                 forget_after: float = 600.0, max_pending: int = 32,
                 max_pending_per_source: int = 4, workers: int = 1,
                 max_remembered: int = 4096,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._policy = policy
        self.max_failures = max_failures
        self.max_pending = max_pending
        self.max_pending_per_source = max_pending_per_source
        self.max_remembered = max_remembered
        self.clock = clock
        self.workers = workers
        self._pool: ThreadPoolExecutor | None = None
        #: The guess limit, shared with the SEPA gate's secret checks (`sib.guesses`).
        self.guesses = GuessLimit(free=max_failures, base=backoff_base, cap=backoff_cap,
                                  forget_after=forget_after, max_keys=max_remembered,
                                  clock=clock)
        self._pending_by_source: Counter[Hashable] = Counter()
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
        if (len(self._pending) >= self.max_pending
                or self._pending_by_source[source_key(source)] >= self.max_pending_per_source
                or self.guesses.wait(source) > 0):
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
            host = source_key(source)
            self._pending_by_source[host] += 1
            try:
                ok = await future
            finally:
                del self._pending[key]
                self._pending_by_source[host] -= 1
                if not self._pending_by_source[host]:
                    del self._pending_by_source[host]
            self.verified += 1
            if policy is not self._policy:
                return  # reloaded meanwhile: the next verdict asks again
            if ok and entry is not None:
                policy.remember(kp_id, token)
            else:
                self._failed(key, source)
            return
        await asyncio.shield(future)

    def _failed(self, key: tuple[bytes, bytes], source: Hashable) -> None:
        self._refused[key] = None
        while len(self._refused) > self.max_remembered:
            self._refused.popitem(last=False)
        wait = self.guesses.failed(key[0], source)
        if wait > 0:
            peer_log.warning("failures",
                             "authentication: %s past %d failures (its own or KP ID %s's); "
                             "its new passwords refused (LIMIT_EXCEEDED) for %.0f s",
                             source_key(source), self.max_failures, key[0].hex(), wait)

    def close(self) -> None:
        """Stop the worker thread (a later `verify` starts another)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

