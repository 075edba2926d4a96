"""Transport benchmark: KSP request round trips over UDP, TCP and CoAP on loopback, side by side
with a bare UDP echo and an MQTT publish→receive round trip through a real mosquitto.

Run as ``python -m tools.bench.transport [--quick] [--markdown] [--no-coap] [--no-mqtt]`` or
``ksp bench transport``. Without CoAP and MQTT, neither aiocoap nor paho is imported: the
process is what a plain KP's or SIB's is, whose reads differ (see `transports.reads`).

The exchange is a sensor's CON INSERT DATA (one triple with a float, ~70 bytes, UDP layout)
answered by a 4-byte OK RES. Every contender does the same thing, one request outstanding at a
time, client and server in this process on one asyncio loop (mosquitto is its own process):

- ``KSP/UDP``, ``KSP/TCP``, ``KSP/CoAP``: `transports.connect(...).update(request)` against
  `transports.Server` with a service that answers OK at once (no store: the cost measured is
  client API + session + codec + sockets + adapters);
- ``bare UDP echo``: an asyncio DatagramProtocol pair; the client sends a datagram of the
  request's size, the server answers one of the RES's size — the raw cost of the exchange
  (reading as the KSP adapters read, `transports.reads.small_reads`: asyncio's default
  256 KiB reads cost an mmap per datagram or not depending on what the process imported);
- ``KSP sessions, no sockets``: the same exchange through `KPSession` → `SIBSession` →
  `KPSession` in memory (encode, decode, dedup cache, matching): the protocol's own floor,
  which shows how much of the KSP rows is the sans-I/O core and how much the adapters;
- ``MQTT QoS 0`` / ``QoS 1``: paho-mqtt 2.x publishes a payload of the request's size to a topic
  it is subscribed to, through the project's mosquitto on a free loopback port
  (`spark_ingest.testing.Mosquitto`); the round trip ends when its own
  subscription delivers the message (paho's network thread, as applications use it).

The contenders run in interleaved rounds (each round runs every contender for the same number
of round trips, starting at a rotating position), so a slow phase of the machine hits all alike.
p50/p99 are over every round trip of the run; requests/s = round trips / time spent in them.
Ratios are p50 / the bare echo's p50 from the same run. Target: KSP/UDP within 3×.
"""
from __future__ import annotations

import asyncio
import os
import platform
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable

from ksp import IRI, UDP, Literal, Request, Response, Status, Triple, Tx, encode
from ksp.service import Service
from ksp.terms import XSD_FLOAT
from transports.reads import small_reads

from .report import bench_parser, command_line, markdown_table, text_table

TARGET_UDP_RATIO = 3.0

REQUEST = Request(Tx.INSERT_DATA, 0, insert=(Triple(
    IRI("http://example.org/greenhouse#sensor12"),
    IRI("http://example.org/greenhouse#temperature"), Literal("21.5", XSD_FLOAT)),))
REQUEST_SIZE = len(encode(REQUEST, UDP))
RESPONSE_SIZE = len(encode(Response(0, Status.OK), UDP))

_clock = time.perf_counter


class _AnswerOK(Service):
    """A Service that answers every request OK at once (what is measured is the transport)."""

    def submit(self, request, channel) -> None:
        channel.respond(Response(request.tid, Status.OK))

    def kp_unreachable(self, kp, tid) -> None:
        pass


@dataclass
class Result:
    name: str
    samples: list[float] = field(default_factory=list)  # seconds per round trip

    @property
    def p50(self) -> float:
        return statistics.median(self.samples)

    @property
    def p99(self) -> float:
        s = sorted(self.samples)
        return s[min(len(s) - 1, int(round(0.99 * (len(s) - 1))))]

    @property
    def rate(self) -> float:
        return len(self.samples) / sum(self.samples)


# -- the bare echo ---------------------------------------------------------------------------

class _Echo(asyncio.DatagramProtocol):
    def connection_made(self, transport) -> None:
        self.transport = transport
        small_reads(transport)

    def datagram_received(self, data, addr) -> None:
        self.transport.sendto(data[:RESPONSE_SIZE], addr)


class _EchoClient(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.waiter: asyncio.Future | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        small_reads(transport)

    def datagram_received(self, data, addr) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(data)


class SessionsOnly:
    """The exchange through the two sans-I/O sessions, bytes handed over in memory."""

    def __init__(self) -> None:
        from ksp import UDP as _UDP, KPSession, SIBSession

        self.kp, self.sib = KPSession(_UDP), SIBSession(_UDP)

    def once(self) -> None:
        kp, sib, now = self.kp, self.sib, time.monotonic()
        tid = kp.next_tid()
        kp.send(REQUEST._replace(tid=tid), now)
        for data in kp.datagrams_to_send(now):
            sib.receive_datagram(data, ("127.0.0.1", 1), now)
        event = sib.next_event()
        sib.respond(event.kp, tid, Response(tid, Status.OK), now)
        for data, _ in sib.datagrams_to_send(now):
            kp.receive_datagram(data, now)
        if kp.next_event().response.status != Status.OK:
            raise RuntimeError("the sessions did not complete the exchange")


# -- MQTT ------------------------------------------------------------------------------------

class MqttRoundTrip:
    """Publish to a topic this client subscribes to; wait for its delivery."""

    def __init__(self, port: int, qos: int) -> None:
        import paho.mqtt.client as mqtt

        self.qos = qos
        self.topic = f"ksp-bench/{qos}"
        self.received = threading.Event()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2,
                                  client_id=f"ksp-bench-{os.getpid()}-{qos}")
        self.client.on_message = lambda client, userdata, msg: self.received.set()
        subscribed = threading.Event()
        self.client.on_subscribe = lambda *args: subscribed.set()
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        self.client.subscribe(self.topic, qos=qos)
        if not subscribed.wait(10):
            raise RuntimeError("MQTT subscription not acknowledged")
        self.payload = b"x" * REQUEST_SIZE

    def once(self) -> None:
        self.received.clear()
        self.client.publish(self.topic, self.payload, qos=self.qos)
        if not self.received.wait(10):
            raise RuntimeError("MQTT message not delivered")

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


# -- the run ---------------------------------------------------------------------------------

async def _run_async(rounds: int, per_round: int, mqtt_port: int | None,
                     coap: bool = True) -> list[Result]:
    from transports import Server, connect

    loop = asyncio.get_running_loop()
    server = await Server.start(_AnswerOK(), udp=0, tcp=0, coap=0 if coap else None)
    echo_transport, _ = await loop.create_datagram_endpoint(_Echo, local_addr=("127.0.0.1", 0))
    echo_port = echo_transport.get_extra_info("sockname")[1]
    echo_client_transport, echo_client = await loop.create_datagram_endpoint(
        _EchoClient, remote_addr=("127.0.0.1", echo_port))
    kps = {
        "KSP/UDP": await connect(f"udp://127.0.0.1:{server.udp.port}"),
        "KSP/TCP": await connect(f"tcp://127.0.0.1:{server.tcp.port}"),
    }
    if coap:
        kps["KSP/CoAP"] = await connect(f"coap://127.0.0.1:{server.coap.port}")
    mqtt = {}
    if mqtt_port is not None:
        mqtt = {"MQTT QoS 0": MqttRoundTrip(mqtt_port, 0),
                "MQTT QoS 1": MqttRoundTrip(mqtt_port, 1)}
    payload = b"x" * REQUEST_SIZE

    async def echo_once() -> None:
        echo_client.waiter = loop.create_future()
        echo_client_transport.sendto(payload)
        await echo_client.waiter

    contenders: dict[str, Callable[[], Awaitable[None]] | Callable[[], None]] = {
        "bare UDP echo": echo_once,
        **{name: (lambda kp=kp: kp.update(REQUEST)) for name, kp in kps.items()},
        "KSP sessions, no sockets": SessionsOnly().once,
        **{name: rt.once for name, rt in mqtt.items()},
    }
    blocking = {"KSP sessions, no sockets", *mqtt}
    results = {name: Result(name) for name in contenders}
    try:
        for name, fn in contenders.items():  # warm-up: caches, lazy imports, first connections
            for _ in range(min(per_round, 20)):
                await _time_one(fn, name in blocking, loop)
        names = list(contenders)
        for r in range(rounds):
            start = r % len(names)
            for name in names[start:] + names[:start]:
                fn, sync = contenders[name], name in blocking
                samples = results[name].samples
                for _ in range(per_round):
                    samples.append(await _time_one(fn, sync, loop))
    finally:
        for rt in mqtt.values():
            rt.close()
        for kp in kps.values():
            await kp.close()
        echo_client_transport.close()
        echo_transport.close()
        await server.close()
    return list(results.values())


async def _time_one(fn, blocking: bool, loop) -> float:
    if blocking:  # plain calls (paho: its network thread delivers; we block as callers would)
        t0 = _clock()
        fn()
        return _clock() - t0
    t0 = _clock()
    await fn()
    return _clock() - t0


def run(quick: bool = False, *, rounds: int | None = None, per_round: int | None = None,
        mqtt: bool = True, coap: bool = True) -> tuple[list[Result], dict]:
    """`coap=False`: no CoAP row, and aiocoap is never imported (a KP or SIB process without
    CoAP, as most are)."""
    rounds = rounds or (5 if quick else 20)
    per_round = per_round or (100 if quick else 250)
    settings = {"rounds": rounds, "per_round": per_round}
    if not mqtt:
        return asyncio.run(_run_async(rounds, per_round, None, coap)), settings
    from spark_ingest.testing import Mosquitto  # the project's, on a free loopback port

    # The broker's store saved as mosquitto does by default: the transport measured, not it.
    with Mosquitto(save_every_change=False) as broker:
        return asyncio.run(_run_async(rounds, per_round, broker.port, coap)), settings


HEADERS = ["exchange", "p50 µs", "p99 µs", "requests/s", "p50 × bare echo"]


def table_rows(results: list[Result]) -> list[list[str]]:
    base = next(r for r in results if r.name == "bare UDP echo").p50
    rows = []
    for r in results:
        ratio = f"{r.p50 / base:.2f}×"
        if r.name == "KSP/UDP":
            ratio = f"**{ratio}**"
        rows.append([r.name, f"{r.p50 * 1e6:.0f}", f"{r.p99 * 1e6:.0f}", f"{r.rate:,.0f}", ratio])
    return rows


def target_line(results: list[Result]) -> str:
    base = next(r for r in results if r.name == "bare UDP echo").p50
    udp = next(r for r in results if r.name == "KSP/UDP").p50
    verdict = "met" if udp / base <= TARGET_UDP_RATIO else "MISSED"
    return (f"Target: KSP/UDP p50 within {TARGET_UDP_RATIO:g}× of the bare UDP echo — "
            f"{udp / base:.2f}× ({verdict}).")


def render(results: list[Result], settings: dict, command: str, markdown: bool) -> str:
    from importlib.metadata import version

    method = (f"{settings['rounds']} interleaved rounds × {settings['per_round']} sequential "
              f"round trips per exchange; request {REQUEST_SIZE} B, answer {RESPONSE_SIZE} B; "
              "client and server in one process (mosquitto separate), loopback")
    env = (f"Python {platform.python_version()}, aiocoap {version('aiocoap')}, "
           f"paho-mqtt {version('paho-mqtt')}; {platform.platform()}")
    if markdown:
        return "\n".join([markdown_table(HEADERS, table_rows(results)), "",
                          target_line(results), "", f"Method: {method}.", "",
                          f"Command: `{command}`  ", f"Environment: {env}"])
    return "\n".join(["KSP transport benchmark (round trip of one CON INSERT DATA)", "",
                      text_table(HEADERS, table_rows(results)), "", target_line(results),
                      method, f"command: {command}", env])


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = bench_parser("tools.bench.transport", __doc__, prog,
                          "5 rounds × 100 instead of 20 × 250")
    parser.add_argument("--no-coap", action="store_true",
                        help="no KSP/CoAP row, aiocoap never imported (a process without CoAP)")
    parser.add_argument("--no-mqtt", action="store_true",
                        help="no MQTT rows, paho and mosquitto never started")
    args = parser.parse_args(argv)
    command = command_line("tools.bench.transport", prog, argv)
    results, settings = run(args.quick, coap=not args.no_coap, mqtt=not args.no_mqtt)
    print(render(results, settings, command, args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
