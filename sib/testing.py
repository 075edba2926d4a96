"""An in-process `Channel` that records what the SIB sends, for tests and the benchmark.

Real in the sense that matters: the SIB under test is driven through `Service.submit` exactly as
the transports drive it; only the network is left out.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ksp.codec import UDP, decode_kp_message, encode
from ksp.delivery import Delivery, DeliveryState
from ksp.errors import EncodeError
from ksp.model import Request, Response
from ksp.session import KPIdentity

from .service import Sib

__all__ = ["RecordingChannel", "Client", "ex", "LoggedProcess", "SibProcess", "free_port",
           "scrape"]


@dataclass(eq=False)
class RecordingChannel:
    """A subscriber of its own kind: it owns its `Delivery` as any channel does, numbers INDs
    as the transport it plays would ("udp", "coap": numbered; "tcp": not), and is durable as a
    UDP one (the journal keeps it). An IND is never ACKed: it stays awaited."""

    kp: KPIdentity
    tid: int
    log: list
    transport: str = "udp"
    ended: bool = False

    def __post_init__(self) -> None:
        self.durable = self.transport == "udp"
        self.delivery = Delivery(self.kp, self.tid, self.kp.addr,
                                 numbered=self.transport != "tcp", durable=self.durable)

    def respond(self, response: Response) -> None:
        self.log.append(("res", self.kp, self.tid, response))
        if response.status == 0:  # for a persistent request: the KP has its first result
            self.delivery.responded(response)

    def indicate(self, response: Response) -> None:
        d = self.delivery
        if d.redundant(response):
            return
        seq = d.next_seq(response)
        if seq is not None:
            response = response._replace(seq=seq)
        d.indicated(response)
        self.log.append(("ind", self.kp, self.tid, response))

    def end(self) -> None:
        self.ended = True

    def export(self) -> DeliveryState:
        return self.delivery.export()

    def restore(self, state: DeliveryState) -> None:
        self.delivery = Delivery.restore(self.kp, self.tid, state,
                                         numbered=self.transport != "tcp", durable=self.durable)


@dataclass
class Client:
    """A KP as the SIB sees it: an identity plus the log of everything sent to it."""

    sib: Sib
    name: str = "kp"
    log: list = field(default_factory=list)

    def __post_init__(self) -> None:
        self.kp = KPIdentity(addr=(self.name, 1))
        self.channels: dict[int, RecordingChannel] = {}

    def submit(self, request: Request) -> RecordingChannel:
        """Submit `request` as the SIB would get it from a transport: encoded and decoded
        (requests the codec refuses to encode go in as they are, to test the SIB's checks)."""
        try:
            request = decode_kp_message(encode(request, UDP), UDP)
        except EncodeError:
            pass
        ch = RecordingChannel(self.kp, request.tid, self.log)
        self.channels.setdefault(request.tid, ch)  # the first: a TERMINATE reuses the TID
        self.sib.submit(request, ch)
        return ch

    async def call(self, request: Request) -> Response:
        """Submit, wait until the SIB is idle, return the RES."""
        self.submit(request)
        await self.sib.drain()
        for kind, _, tid, resp in reversed(self.log):
            if kind == "res" and tid == request.tid:
                return resp
        raise AssertionError(f"no RES for {request.tid}")

    def inds(self, tid: int | None = None) -> list[Response]:
        return [r for kind, _, t, r in self.log if kind == "ind" and (tid is None or t == tid)]

    def clear(self) -> None:
        self.log.clear()


EX = "http://example.org/"


def ex(local: str):
    """An IRI in the test namespace."""
    from ksp.terms import IRI
    return IRI(EX + local)


class LoggedProcess:
    """A project command as a real subprocess (`python -m MODULE ARGS`), its stderr log read
    on a thread: `lines` so far, `wait_for` a line, `stop` with a signal; ready once a line
    contains `ready` (`each` sees every line until then). `program`: run that command line
    instead of `python -m MODULE` (an installed console script). The base of `SibProcess`,
    `bridge.testing.BridgeProcess` and `spark_ingest.testing.IngestProcess`."""

    name = "process"

    def __init__(self, module: str, args, ready: str, timeout: float = 60.0, each=None,
                 cwd=None, program: list[str] | None = None, group: bool = False) -> None:
        import queue
        import subprocess
        import sys
        import threading

        self.lines: list[str] = []
        self._lines: queue.Queue = queue.Queue()
        self.group = group
        command = [sys.executable, "-m", module] if program is None else program
        self.proc = subprocess.Popen([*command, *args], cwd=cwd,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True, start_new_session=group)

        def read() -> None:
            for line in self.proc.stderr:
                self.lines.append(line)
                self._lines.put(line)
            self._lines.put(None)

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()
        try:
            self.wait_for(ready, timeout, each)
        except BaseException:
            self.__exit__()
            raise

    def wait_for(self, text: str, timeout: float = 60.0, each=None) -> str:
        """Block until a log line contains `text` (returns it); fails if the process ends."""
        import queue
        import time

        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {text!r} in the {self.name} log:\n{self.log()}")
            if line is None:
                raise AssertionError(f"{self.name} exited ({self.proc.wait()}) before "
                                     f"{text!r}:\n{self.log()}")
            if each is not None:
                each(line)
            if text in line:
                return line

    def stop(self, sig: int | None = None, timeout: float = 60.0) -> int:
        """Send SIGTERM (or `sig`) and wait for the exit status. Started with `group`, the
        signal goes to its whole process group, as a terminal's Ctrl-C, `timeout` and a
        service manager send it."""
        import os
        import signal

        sig = signal.SIGTERM if sig is None else sig
        if self.group:
            os.killpg(self.proc.pid, sig)
        else:
            self.proc.send_signal(sig)
        status = self.proc.wait(timeout)
        self._close_log()
        return status

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def _close_log(self) -> None:
        """The log pipe, once the reader has seen its end (no unclosed file left to the GC)."""
        self._reader.join(10)
        if not self._reader.is_alive() and self.proc.stderr is not None:
            self.proc.stderr.close()

    def log(self) -> str:
        return "".join(self.lines)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.kill()
        self._close_log()


class SibProcess(LoggedProcess):
    """`ksp-sib` as a real subprocess (`python -m sib.cli`), for tests and demos: started with
    the given flags, its log read on a thread; `ports` are the bound ports it logged. `cwd`:
    the directory it runs in, whose `sib` package it runs (another checkout's); `program`:
    the command line that runs ``python -m sib.cli`` (under valgrind, say), else that."""

    name = "SIB"

    def __init__(self, *args: str, timeout: float = 60.0, cwd: str | None = None,
                 program: list[str] | None = None) -> None:
        import re

        self.args = args
        self.ports: dict[str, int] = {}
        pattern = re.compile(r"(?:listening on (\w+)://[^:]+|metrics on http://[^:]+):(\d+)")
        # The SEPA gate off unless asked for: its default ports are fixed (8000, 9000), and
        # tests run several SIBs at once.
        super().__init__("sib.cli", ("--log-level", "info", "--sepa-http-port", "-1",
                                     "--sepa-ws-port", "-1", *args), "SIB ready", timeout,
                         lambda line: (m := pattern.search(line)) and self.ports.__setitem__(
                             m[1] or "metrics", int(m[2])), cwd, program)


def free_port(kind: str = "udp") -> int:
    """A port free right now (for a SIB that must come back on the same port)."""
    import socket

    with socket.socket(socket.AF_INET,
                       socket.SOCK_DGRAM if kind == "udp" else socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def scrape(port: int, host: str = "127.0.0.1") -> str:
    """GET the metrics endpoint over a real HTTP connection; the body (checks the head)."""
    import asyncio

    reader, writer = await asyncio.open_connection(host, port)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
    await writer.drain()
    raw = await asyncio.wait_for(reader.read(), 30)
    writer.close()
    await writer.wait_closed()
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK"), head
    assert b"text/plain; version=0.0.4" in head
    return body.decode()
