"""Sealed freshness without state (wire format 13.5): a sealed datagram recorded before a restart
of `ksp-sib --memory` (a real process, real UDP sockets) and replayed after it executes nothing
and draws only a sealed ECHO REQUIRED, while the real KP's next request goes through
transparently (its client answers the echo)."""
from __future__ import annotations

import asyncio

from ksp import UDP, Options, Request, Status, Triple, Tx, Var, decode_sib_message, encode
from ksp.secure import Sealer
from sib.testing import SibProcess, ex, free_port
from transports import connect
from transports.client import kp_id_bytes

KEY = bytes(range(32))
SENSOR = kp_id_bytes("sensor")
P = ex("p")


class Sealed:
    """A raw UDP socket of KP `sensor` that seals what it sends, opens what it gets."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sealer = Sealer(KEY, SENSOR, sib=False)
        self.received: asyncio.Queue[bytes] = asyncio.Queue()

    async def open(self) -> "Sealed":
        queue = self.received

        class Proto(asyncio.DatagramProtocol):
            def datagram_received(self, data, addr):
                queue.put_nowait(data)

        self.transport, _ = await asyncio.get_running_loop().create_datagram_endpoint(
            Proto, local_addr=("127.0.0.1", 0), remote_addr=("127.0.0.1", self.port))
        return self

    def send(self, request: Request) -> bytes:
        data = self.sealer.seal(encode(request, UDP))
        self.transport.sendto(data)
        return data

    async def answer(self, tx: Tx):
        raw = await asyncio.wait_for(self.received.get(), 30)
        return decode_sib_message(self.sealer.open(raw), UDP, answers=tx)


def insert(tid: int, local: str, echo: bytes | None = None) -> Request:
    return Request(Tx.INSERT_DATA, tid, insert=(Triple(ex(local), P, ex("v")),),
                   options=Options(echo=echo))


def ask(local: str) -> str:
    return f"ASK {{ <{ex(local)}> <{P}> ?o }}"


def sib_process(config, port: int) -> SibProcess:
    return SibProcess("--memory", "--config", str(config), "--udp-port", str(port),
                      "--tcp-port", "-1", "--coap-port", "-1", "--metrics-port", "-1")


def test_a_sealed_datagram_recorded_before_a_memory_restart_executes_nothing(tmp_path):
    config = tmp_path / "sib.toml"
    config.write_text('[access]\nanonymous = "read"\n[[access.kp]]\nid = "sensor"\n'
                      f'key = "{KEY.hex()}"\nread = ["*"]\nwrite = ["*"]\n')
    port = free_port("udp")
    url = f"udp://127.0.0.1:{port}"

    async def before() -> tuple[bytes, Sealed]:
        peer = await Sealed(port).open()
        # no window for this KP yet: the first sealed request executes nothing
        peer.send(insert(1, "first"))
        asked = await peer.answer(Tx.INSERT_DATA)
        assert asked.status == Status.ECHO_REQUIRED and isinstance(asked.result, bytes)
        async with connect(url) as anonymous:
            assert not (await anonymous.query(ask("first")))
        recorded = peer.send(insert(2, "recorded", echo=asked.result))
        assert (await peer.answer(Tx.INSERT_DATA)).status == Status.OK
        async with connect(url) as anonymous:
            assert (await anonymous.query(ask("recorded")))
        peer.transport.close()
        return recorded, peer

    async def after(recorded: bytes, peer: Sealed) -> None:
        peer.received = asyncio.Queue()  # this loop's
        await peer.open()
        async with connect(url) as anonymous:  # the store is empty: --memory
            assert not (await anonymous.query(ask("recorded")))
        peer.transport.sendto(recorded)  # the replay
        answer = await peer.answer(Tx.INSERT_DATA)
        assert answer.status == Status.ECHO_REQUIRED and answer.tid == 2  # sealed, nothing done
        async with connect(url) as anonymous:
            assert not (await anonymous.query(ask("recorded")))
        peer.transport.close()
        # the real KP goes on transparently: one round trip more, then its request executes
        async with connect(url, kp_id="sensor", key=KEY) as kp:
            await kp.insert_data([Triple(ex("later"), P, ex("v"))])
            assert (await kp.query(ask("later")))

    with sib_process(config, port) as sib:
        recorded, peer = asyncio.run(asyncio.wait_for(before(), 90))
        assert sib.stop() == 0
    with sib_process(config, port) as sib:
        asyncio.run(asyncio.wait_for(after(recorded, peer), 90))
        assert sib.stop() == 0
