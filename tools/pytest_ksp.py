"""pytest plugin: replay KSP packet captures in tests. Opt-in, so that installing ksp-gateway
changes no other project's test runs: `pytest_plugins = ["ksp_tools.pytest_ksp"]` in a
conftest.py, or `pytest -p ksp_tools.pytest_ksp`.

- Fixture `ksp_replay`: `ksp_replay("greenhouse.pcapng")` starts a fresh SIB in the test's
  process (in-memory store, UDP and TCP on loopback; `access=` a `[access]` table as in
  `ksp-sib`'s TOML), replays the capture's KP side against it (`tools.replay`: each KP over
  the transport it used), stops the SIB and returns the `Report`; with `check=True` (the
  default) a difference fails the test with the report's text.
- `pytest --ksp-replay DIR`: one test per `.pcap`/`.pcapng` file in DIR, each against its own
  fresh SIB (or against `--ksp-replay-to URL`).
"""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from .replay import Report, replay


async def replay_fresh(path: str | Path, *, access: dict | None = None,
                       timeout: float = 10.0) -> Report:
    """Replay `path` against a new in-process SIB; the report."""
    from sib import Sib
    from sib.access import AccessPolicy
    from transports import Server

    sib = Sib(access=AccessPolicy.from_config(access) if access is not None else None)
    server = await Server.start(sib, udp=0, tcp=0)
    try:
        return await replay(str(path), {"udp": f"udp://127.0.0.1:{server.udp.port}",
                                        "tcp": f"tcp://127.0.0.1:{server.tcp.port}"},
                            timeout=timeout)
    finally:
        await server.close()
        await sib.close()
        sib.store.close()


class ReplayMismatch(AssertionError):
    """The SIB did not answer as the capture recorded."""


@pytest.fixture
def ksp_replay():
    """`ksp_replay(path, access=None, check=True, to=None) -> Report` (see the module)."""
    def run(path: str | Path, *, access: dict | None = None, check: bool = True,
            to: str | None = None, timeout: float = 10.0) -> Report:
        if to is not None:
            report = asyncio.run(replay(str(path), to, timeout=timeout))
        else:
            report = asyncio.run(replay_fresh(path, access=access, timeout=timeout))
        if check and not report.ok:
            raise ReplayMismatch(f"{path}: {report.text()}")
        return report

    return run


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ksp", "KSP capture replay (ksp-gateway)")
    group.addoption("--ksp-replay", metavar="DIR",
                    help="replay every .pcap/.pcapng capture in DIR as a test, each against a "
                         "fresh in-process SIB")
    group.addoption("--ksp-replay-to", metavar="URL",
                    help="with --ksp-replay: replay against this SIB instead (udp://HOST:PORT)")


class CaptureItem(pytest.Item):
    """One capture of `--ksp-replay DIR`, replayed as a test."""

    def __init__(self, *, capture: Path, **kwargs) -> None:
        super().__init__(**kwargs)
        self.capture = capture

    def runtest(self) -> None:
        to = self.config.getoption("ksp_replay_to")
        if to is not None:
            report = asyncio.run(replay(str(self.capture), to))
        else:
            report = asyncio.run(replay_fresh(self.capture))
        if not report.ok:
            raise ReplayMismatch(report.text())

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, ReplayMismatch):
            return f"{self.capture}: {excinfo.value}"
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.capture, None, f"replay {self.capture.name}"


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    directory = config.getoption("ksp_replay")
    if not directory:
        return
    captures = sorted(p for p in Path(directory).iterdir()
                      if p.suffix in (".pcap", ".pcapng") and p.is_file())
    if not captures:
        raise pytest.UsageError(f"--ksp-replay {directory}: no .pcap or .pcapng file there")
    for path in captures:
        items.append(CaptureItem.from_parent(session, name=f"ksp-replay[{path.name}]",
                                             capture=path))
