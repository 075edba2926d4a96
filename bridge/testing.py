"""`ksp-bridge` as a real subprocess, for tests and demos, as `sib.testing.SibProcess` is for
`ksp-sib`: started with the given flags, its log read on a thread, `port` the UDP port it
bound. `BridgedSib` is the pair the tests put devices in front of: a `ksp-sib` whose SEPA gate
is the broker, and a bridge whose UDP port the devices use as they would a SIB's."""
from __future__ import annotations

import re
from pathlib import Path

from sib.testing import LoggedProcess, SibProcess

ROOT = Path(__file__).resolve().parent.parent

__all__ = ["BridgeProcess", "BridgedSib", "UDP_ONLY", "gate_broker"]

#: The `[bridge]` section of a test's configuration file: no journal, UDP on a free port only.
UDP_ONLY = "[bridge]\nmemory = true\nudp_port = 0\ntcp_port = -1\ncoap_port = -1\n"


def gate_broker(*args: str) -> SibProcess:
    """A `ksp-sib` in memory whose SEPA gate is the broker (HTTP and WebSocket on free
    ports), its KSP listeners off; `args` go to it."""
    return SibProcess("--memory", "--udp-port", "-1", "--tcp-port", "-1", "--coap-port", "-1",
                      "--sepa-http-port", "0", "--sepa-ws-port", "0", *args)


class BridgeProcess(LoggedProcess):
    name = "ksp-bridge"

    def __init__(self, *args: str, timeout: float = 60.0) -> None:
        self.args = args
        self.port = self.metrics_port = None

        def ports(line: str) -> None:
            if m := re.search(r"listening on udp://[^:]+:(\d+)", line):
                self.port = int(m[1])
            if m := re.search(r"metrics on http://[^:]+:(\d+)", line):
                self.metrics_port = int(m[1])

        super().__init__("bridge.cli", args, "bridge ready", timeout, ports, cwd=ROOT)


class BridgedSib:
    """`with BridgedSib() as lab:` a `ksp-sib` broker (in memory, its KSP listeners off) and a
    `ksp-bridge` (in memory, UDP only) in front of it; `lab.port` is the bridge's UDP port.
    `bridge_args` go to the bridge."""

    def __init__(self, *bridge_args: str) -> None:
        self.broker = gate_broker()
        try:
            self.bridge = BridgeProcess(
                "--broker", f"http://127.0.0.1:{self.broker.ports['http']}", "--subscribe",
                f"ws://127.0.0.1:{self.broker.ports['ws']}/subscribe", "--memory",
                "--udp-port", "0", "--tcp-port", "-1", "--coap-port", "-1", *bridge_args)
        except BaseException:
            self.broker.__exit__()
            raise
        self.port = self.bridge.port

    def __enter__(self) -> "BridgedSib":
        return self

    def __exit__(self, *exc) -> None:
        self.bridge.__exit__()
        self.broker.__exit__()
