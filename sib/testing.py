"""An in-process `Channel` that records what the SIB sends, for tests and the benchmark.

Real in the sense that matters: the SIB under test is driven through `Service.submit` exactly as
the transports drive it; only the network is left out.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ksp.codec import UDP, decode_kp_message, encode
from ksp.errors import EncodeError
from ksp.model import Request, Response
from ksp.session import KPIdentity

from .service import Sib


@dataclass(eq=False)
class RecordingChannel:
    kp: KPIdentity
    tid: int
    log: list
    transport: str = "udp"
    ended: bool = False

    def respond(self, response: Response) -> None:
        self.log.append(("res", self.kp, self.tid, response))

    def indicate(self, response: Response) -> None:
        self.log.append(("ind", self.kp, self.tid, response))

    def end(self) -> None:
        self.ended = True


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
