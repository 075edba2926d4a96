"""Fixtures more than one test module uses."""
from __future__ import annotations

import asyncio
import gc
import subprocess
from pathlib import Path

import pytest

# The capture replay (`ksp_replay`, `--ksp-replay`), under its installed name only: `tools` is
# the same module in a checkout, and loaded under both it would declare its options twice.
pytest_plugins = ["ksp_tools.pytest_ksp"]

#: What the event loops made during the current test reported to their exception handler: an
#: exception in a callback, a task's or a future's exception nobody retrieved, an unclosed
#: aiohttp session. asyncio only logs these, so without this a test passes over them.
UNHANDLED: list[str] = []


class _ReportingLoops(asyncio.DefaultEventLoopPolicy):
    loops = 0

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        loop = super().new_event_loop()
        loop.set_exception_handler(_unhandled)
        _ReportingLoops.loops += 1
        return loop


def _unhandled(loop: asyncio.AbstractEventLoop, context: dict) -> None:
    UNHANDLED.append(f"{context.get('message')}: {context.get('exception')!r}")
    loop.default_exception_handler(context)


asyncio.set_event_loop_policy(_ReportingLoops())


@pytest.fixture(autouse=True, scope="module")
def frozen_heap():
    """What earlier modules left is frozen (`gc.freeze`) during a module's tests, so that the
    full collections tests make to surface unclosed sockets and unretrieved futures
    (`transport_helpers.run`, `no_unhandled_loop_errors`) scan what the module made, not the
    whole run's history (0.2-0.3 s a collection with 400,000 objects, once per hypothesis
    example). Unfrozen after the module: its garbage is collected as usual."""
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


@pytest.fixture(autouse=True)
def full_log_allowance():
    """Each test starts with every rate-limited log line allowed again (`ksp.ratelog`:
    the limiters are per module, and the tests share one process)."""
    from ksp import ratelog

    ratelog.reset()


@pytest.fixture(autouse=True)
def no_unhandled_loop_errors():
    """Fail a test whose event loops reported anything to their exception handler (a test
    that expects such a report takes it out of `UNHANDLED`)."""
    UNHANDLED.clear()
    loops = _ReportingLoops.loops
    yield
    if _ReportingLoops.loops != loops:
        gc.collect()  # a task or future nobody retrieved reports when it is collected
    if UNHANDLED:
        reports, UNHANDLED[:] = list(UNHANDLED), []
        pytest.fail(f"the event loop reported: {reports}")


@pytest.fixture(scope="session")
def certificate(tmp_path_factory) -> tuple[Path, Path]:
    """A self-signed certificate for localhost and 127.0.0.1 (openssl, scripts/apt-packages):
    (certificate, key) PEM files."""
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "2", "-subj", "/CN=localhost", "-addext",
                    "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True)
    return cert, key
