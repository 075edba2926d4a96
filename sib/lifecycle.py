"""Start and shutdown of a serving process, the same for `ksp-sib` and `ksp-bridge`: logging and
exit codes (`run_main`), the data directory's lock, the metrics endpoint, and the wait for the
stop (`run_until_stopped`: SIGINT/SIGTERM stop it, SIGHUP reloads the access policy). What each
program builds and closes stays in its own `cli.py`."""
from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from .config import ConfigError, ServingConfig
from .metrics import Metrics

log = logging.getLogger("ksp.sib")

__all__ = ["DataDirLocked", "claim_data_dir", "lock_data_dir", "on_signals", "reload_access",
           "run_main", "run_until_stopped", "start_metrics", "steady_heap", "stop_metrics"]

#: glibc's `mallopt` parameter for the size from which a block gets a mapping of its own.
_M_MMAP_THRESHOLD = -3


def steady_heap(threshold: int = 128 * 1024) -> bool:
    """Blocks of `threshold` bytes or more get mappings of their own, given back to the system
    when freed (glibc's `mallopt(M_MMAP_THRESHOLD)`). By default glibc raises that threshold
    when the first such block is freed, and from then on serves big blocks from its main
    heap: a process that replaces big tables all its life (the duplicate cache's dict, the
    store's memtables) grows that heap in steps it never gives back. Measured (`ksp-sib
    --memory`, the soak's workload): 119 → 132 MiB from 90,000 to 420,000 updates without,
    110 → 115 MiB with. False where it does not apply (not glibc): nothing is changed."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt  # this process's C library
    except (OSError, AttributeError):
        return False
    return mallopt(_M_MMAP_THRESHOLD, threshold) == 1


def run_main(logger: logging.Logger, level: str, serve: Callable[[], Awaitable[None]]) -> int:
    """Log at `level` on stderr and run `serve()` to its end; the exit status: 0 once stopped,
    2 for a configuration found wrong only when used (a capture file that cannot be written),
    1 for an `OSError` (a port in use, a data directory held by another process), each said
    in one line on `logger`, never a traceback."""
    logging.basicConfig(level=level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(serve())
    except ConfigError as exc:
        logger.error("%s", exc)
        return 2
    except OSError as exc:
        logger.error("%s", exc.strerror if exc.strerror and exc.filename is None else exc)
        return 1
    return 0


async def run_until_stopped(service, stop: asyncio.Event | None,
                            reload: Callable[[], ServingConfig] | None, *,
                            logger: logging.Logger, ready_message: str,
                            ready: asyncio.Event | None = None,
                            interrupt: Callable[[], None] | None = None) -> None:
    """Say `ready_message` (and set `ready`), then return once `stop` is set or on SIGINT or
    SIGTERM. SIGHUP puts the access policy of `reload()` in force on `service`
    (`reload_access`). `interrupt` runs inside the SIGINT/SIGTERM handler itself, besides the
    loop's (whose wake-up stays): work keeping the loop busy can stop before the loop runs."""
    stop = stop or asyncio.Event()
    earlier = signal.getsignal(signal.SIGINT)
    on_signals(stop, reload and (lambda: reload_access(service, reload)))
    if getattr(earlier, "received", None) is not None:
        # A Ctrl-C during the start whose KeyboardInterrupt Python dropped (raised inside a
        # weakref callback of an import): the console script's handler kept it
        # (`ksp_tools.commands.SigintLatch`).
        stop.set()
    if interrupt is not None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError):  # not the main thread
                signal.signal(sig, lambda *_: interrupt())
    logger.info("%s", ready_message)
    if ready is not None:
        ready.set()
    await stop.wait()


def on_signals(stop: asyncio.Event, reload: Callable[[], None] | None) -> None:
    """SIGINT and SIGTERM set `stop`; SIGHUP calls `reload`, or, without a configuration file
    to read again, says so in the log: it never kills the process (its default action). The
    SIB's and the bridge's."""
    loop = asyncio.get_running_loop()
    handlers = {signal.SIGINT: stop.set, signal.SIGTERM: stop.set,
                signal.SIGHUP: reload or (lambda: log.info(
                    "SIGHUP: no configuration file (--config), nothing to reload"))}
    for sig, handler in handlers.items():
        try:
            loop.add_signal_handler(sig, handler)
        except (NotImplementedError, RuntimeError):  # not the main thread
            pass


def reload_access(sib, reload: Callable[[], ServingConfig]) -> None:
    """SIGHUP: `sib.set_access` with the policy of the configuration read again (the SIB's
    and the bridge's alike); a file that cannot be read keeps the old one."""
    try:
        policy = reload().access_policy()
    except (ConfigError, OSError, ValueError, KeyError) as exc:
        log.error("SIGHUP: configuration not reloaded, the access policy stays: %s", exc)
        return
    sib.set_access(policy)
    log.info("SIGHUP: access policy reloaded (%d KPs, anonymous %s)", len(policy.kps),
             policy.anonymous)


async def start_metrics(metrics: Metrics, config: ServingConfig,
                        logger: logging.Logger) -> asyncio.Server | None:
    """The Prometheus endpoint `[metrics] port` asks for (None: off)."""
    if config.metrics_port < 0:
        return None
    server = await metrics.serve(config.metrics_host, config.metrics_port)
    logger.info("metrics on http://%s:%d/metrics", config.metrics_host,
                server.sockets[0].getsockname()[1])
    return server


async def stop_metrics(server: asyncio.Server | None) -> None:
    if server is not None:
        server.close()
        await server.wait_closed()


class DataDirLocked(OSError):
    pass


def claim_data_dir(data: Path, program: str = "ksp-sib"):
    """Make `data` if need be and hold its lock (`lock_data_dir`); returns (lock, created).
    If the lock cannot be had, a directory this call made is removed again."""
    created = not data.exists()
    data.mkdir(parents=True, exist_ok=True)
    try:
        return lock_data_dir(data, program), created
    except OSError:
        if created:
            shutil.rmtree(data, ignore_errors=True)
        raise


def lock_data_dir(data: Path, program: str = "ksp-sib"):
    """Hold `data/<program>.lock` (flock) for the life of the process: a second `program` on
    the same directory is told so, in plain words, before it opens anything."""
    import fcntl
    import os

    handle = open(data / f"{program}.lock", "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "?"
        handle.close()
        raise DataDirLocked(f"another {program} (pid {holder}) holds the data directory "
                            f"{data.resolve()}") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle
