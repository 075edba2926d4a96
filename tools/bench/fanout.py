"""Fan-out benchmark: what one update costs when 100 subscribers watch the same sensor.

Run as ``python -m tools.bench.fanout [--quick] [--markdown] [--no-mqtt]`` or ``ksp bench fanout``.

The 100 subscribers (and the publisher) live in a process of their own, "the devices", as
real devices would: plain non-blocking sockets and paho clients driven by one selector loop,
no threads, commanded over a pipe; every timestamp is taken there (`time.monotonic_ns`). Each
KSP subscriber is its own socket, ACKing every IND it receives at once.

Two tables, each from interleaved rounds (every row once per round, in a rotating order):

1. **Cost per IND** (the SIB's side only): the SIB sends one IND to each of the 100
   subscribers and takes in their 100 ACKs. The rows:

   - ``bare sendto + recvfrom``: a plain socket sends a datagram of the IND's size to each
     subscriber and reads the 100 ACK-sized answers: the floor;
   - ``asyncio datagram pair``: the same through an asyncio `DatagramProtocol` (`sendto` per
     datagram, `datagram_received` per answer): what the event loop alone costs;
   - ``KSP UdpServer``: `transports.UdpServer` around a `SIBSession`: 100 `Channel.indicate`
     calls in one callback (encode, number, keep for retransmission, send), then the ACKs in
     (decode, match, settle, timer).

   CPU µs per IND is the thread's CPU time over the round (`time.thread_time_ns`: waiting for
   the devices is not counted) divided by 100; wall µs per round is from the first send to the
   last ACK handled. Ratios are to the bare row's median. Target: KSP ≤ 3×.

2. **Update → IND against MQTT**: 100 KSP subscribers of one sensor's value (each its own
   socket and SELECT_PERSISTENT) on a `sib.Sib` served by `transports.Server` in this process,
   against 100 paho-mqtt QoS 1 subscribers of one topic on the project's mosquitto
   (`spark_ingest.testing.Mosquitto`, TCP_NODELAY). The publisher sends a CON UPDATE DATA of
   the sensor (a datagram) or a QoS 1 PUBLISH of the same size; times are from just before
   that send to the last of the 100 receipts ("last") and to each receipt ("each"). Target:
   KSP's median last ≤ 1.5× MQTT's; the per-round ratio (KSP last / MQTT last of the same
   round) shows how steady that is.
"""
from __future__ import annotations

import asyncio
import gc
import os
import platform
import selectors
import socket
import statistics
import sys
import time

from ksp import UDP, Ack, Literal, Request, Response, Status, Triple, Tx, Var, encode
from ksp.codes import res_status
from ksp.model import SelectResult
from ksp.service import Service
from ksp.session import SessionOptions
from ksp.terms import IRI

from ._remote import Remote
from .report import bench_parser, command_line, markdown_table, percentile

#: The simulated devices subscribe with bare datagrams from loopback addresses: address
#: validation (wire format 14) is off here, this benchmark measures the fan-out (its cost is
#: `ksp bench validation`'s).
NO_VALIDATION = SessionOptions(amplification_factor=0)

MODULE = "tools.bench.fanout"
SUBSCRIBERS = 100
TARGET_IND = 3.0
TARGET_MQTT = 1.5
TIMEOUT = 60.0
EX = "http://example.org/fanout#"
SENSOR, VALUE = IRI(EX + "sensor0"), IRI(EX + "value")
TOPIC = "ksp-bench/fanout"
SUBSCRIPTION = Request(Tx.SELECT_PERSISTENT, 0, projection=1,
                       where=(Triple(SENSOR, VALUE, Var(0)),))


def update(tid: int, old: int, new: int) -> Request:
    return Request(Tx.UPDATE_DATA, tid, delete=(Triple(SENSOR, VALUE, Literal.of(old)),),
                   insert=(Triple(SENSOR, VALUE, Literal.of(new)),))


# -- the devices (a process of their own) ---------------------------------------------------

class Devices:
    """The subscribers and the publisher, on one selector loop. Each command returns when its
    round is over: (send time, receipt time of each subscriber), in monotonic ns."""

    def __init__(self, conn) -> None:
        self.conn = conn
        self.sel = selectors.DefaultSelector()
        self.sel.register(conn.fileno(), selectors.EVENT_READ, None)
        self.ksp = []       # the KSP subscribers' sockets
        self.writer = None  # the KSP publisher's socket
        self.receipts: dict[int, int] = {}  # subscriber index -> receipt time in this update
        self.res: dict[int, int] = {}       # TID -> status of the writer's RES
        self.answered: set[int] = set()     # the subscribers that got a RES
        self.mqtt = []      # paho clients: the subscribers, then the publisher
        self.value = 0
        self.tid = 0

    # KSP ---------------------------------------------------------------------------------

    def _socket(self, index: int) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        sock.bind(("127.0.0.1", 0))
        sock.setblocking(False)
        self.sel.register(sock, selectors.EVENT_READ, ("ksp", index, sock))
        return sock

    def open_ksp(self, n: int) -> list[tuple[str, int]]:
        """n subscriber sockets (unconnected: they answer whoever sent) and the writer's."""
        self.ksp = [self._socket(i) for i in range(n)]
        self.writer = self._socket(-1)
        return [s.getsockname() for s in self.ksp]

    def _ksp_readable(self, index: int, sock: socket.socket) -> None:
        while True:
            try:
                data, addr = sock.recvfrom(65536)
            except (BlockingIOError, InterruptedError):
                return
            now = time.monotonic_ns()
            kind, tid = data[1], data[2] | data[3] << 8
            if kind > 0x7F:  # an IND (or the bare row's look-alike): ACK its sequence number
                sock.sendto(encode(Ack(tid, data[4] | data[5] << 8), UDP), addr)
                self.receipts.setdefault(index, now)
            elif index < 0:
                self.res[tid] = res_status(kind)
            else:
                self.answered.add(index)

    def subscribe(self, port: int) -> int:
        """Each KSP subscriber subscribes to the sensor at the SIB on `port`; the SIB's answers."""
        self.answered.clear()
        for sock in self.ksp:
            sock.sendto(encode(SUBSCRIPTION, UDP), ("127.0.0.1", port))
        self._until(lambda: len(self.answered) >= len(self.ksp), "subscriptions")
        return len(self.ksp)

    def ksp_update(self, port: int) -> tuple[int, list[int]]:
        self.receipts.clear()
        self.tid = (self.tid + 1) % 60000
        request = update(self.tid, self.value, self.value + 1)
        self.value += 1
        data = encode(request, UDP)
        t0 = time.monotonic_ns()
        self.writer.sendto(data, ("127.0.0.1", port))
        self._until(lambda: len(self.receipts) >= len(self.ksp) and self.tid in self.res,
                    "INDs")
        if self.res.pop(self.tid):
            raise RuntimeError("the update was refused")
        return t0, [self.receipts[i] for i in range(len(self.ksp))]

    # MQTT --------------------------------------------------------------------------------

    def open_mqtt(self, port: int, n: int) -> int:
        import paho.mqtt.client as mqtt

        self.mqtt_port = port
        pending = set()
        for i in range(n + 1):
            client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2,
                                 client_id=f"fanout-{os.getpid()}-{i}")
            client.connect("127.0.0.1", port)
            client.socket().setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if i < n:
                client.on_message = (lambda c, u, m, i=i:
                                     self.receipts.setdefault(i, time.monotonic_ns()))
                client.on_subscribe = lambda c, u, mid, *a, i=i: pending.discard(i)
                client.on_connect = lambda c, *a: c.subscribe(TOPIC, qos=1)
                pending.add(i)
            self.mqtt.append(client)
            self.sel.register(client.socket(), selectors.EVENT_READ, ("mqtt", i, client))
        self._until(lambda: not pending, "MQTT subscriptions")
        return n

    def mqtt_publish(self) -> tuple[int, list[int]]:
        self.receipts.clear()
        publisher = self.mqtt[-1]
        payload = b"x" * len(encode(update(self.tid, self.value, self.value + 1), UDP))
        t0 = time.monotonic_ns()
        publisher.publish(TOPIC, payload, qos=1)
        if publisher.want_write():
            publisher.loop_write()
        n = len(self.mqtt) - 1
        self._until(lambda: len(self.receipts) >= n, "MQTT messages")
        return t0, [self.receipts[i] for i in range(n)]

    # the loop ----------------------------------------------------------------------------

    def _until(self, done, what: str) -> None:
        deadline = time.monotonic() + TIMEOUT
        while not done():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the devices timed out waiting for {what}")
            self._poll()

    def _poll(self) -> bool:
        """Handle what is readable (waiting at most a second); whether a command came."""
        for client in self.mqtt:  # paho's keepalive and queued writes
            if client.want_write():
                client.loop_write()
        command = False
        for key, _ in self.sel.select(1.0):
            data = key.data
            if data is None:
                command = True  # taken when no command runs
            elif data[0] == "ksp":
                self._ksp_readable(data[1], data[2])
            else:
                client = data[2]
                client.loop_read()
                if client.want_write():
                    client.loop_write()
        return command

    def serve(self) -> None:
        """Between commands too, the subscribers ACK what comes (the per-IND rounds)."""
        while True:
            if not self._poll():
                continue
            command = self.conn.recv()
            if command is None:
                break
            name, args = command
            try:
                self.conn.send(getattr(self, name)(*args))
            except Exception as exc:  # reported to the benchmark, which raises it
                self.conn.send(exc)
        for client in self.mqtt:
            client.disconnect()


def _devices_process(conn) -> None:
    Devices(conn).serve()


class RemoteDevices(Remote):
    """`Devices` in a spawned process; each call awaits its answer on the pipe without
    blocking the event loop (the SIB in this process keeps running)."""

    def __init__(self) -> None:
        super().__init__(_devices_process, TIMEOUT * 2)


# -- table 1: the cost per IND ---------------------------------------------------------------

class _Subscribers(Service):
    """A service that answers every request OK and keeps the channel of each subscription."""

    def __init__(self) -> None:
        super().__init__()
        self.channels = []

    def submit(self, request, channel) -> None:
        channel.respond(Response(request.tid, Status.OK, SelectResult(1, ())))
        self.channels.append(channel)

    def kp_unreachable(self, kp, tid) -> None:
        raise RuntimeError(f"{kp} unreachable in the benchmark")


class _AckWaiter:
    """Sets `done` once the session holds no unacknowledged IND."""

    def __init__(self, server) -> None:
        self.server, self.done = server, None
        inner = server.datagram_received

        def received(data, addr) -> None:
            inner(data, addr)
            if not server.session.layer.unacked and self.done is not None:
                self.done.set_result(None)
                self.done = None

        server.datagram_received = received


class _BarePair(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.left, self.done = 0, None

    def connection_made(self, transport) -> None:
        from transports.reads import small_reads

        self.transport = transport
        small_reads(transport)

    def datagram_received(self, data, addr) -> None:
        self.left -= 1
        if not self.left and self.done is not None:
            self.done.set_result(None)


async def per_ind(devices: RemoteDevices, addrs: list, rounds: int) -> dict[str, list]:
    """{row: [(CPU ns, wall ns) per round]} for 100 INDs out and their ACKs in."""
    from transports.udp import UdpServer

    loop = asyncio.get_running_loop()
    subs = _Subscribers()
    server = await UdpServer.start(subs, "127.0.0.1", 0, options=NO_VALIDATION)
    waiter = _AckWaiter(server)
    session = server.session
    for addr in addrs:  # the subscriptions, made in the session as if they came in
        session.receive_datagram(encode(SUBSCRIPTION, UDP), tuple(addr), loop.time())
    server.pump()
    result = SelectResult(1, ((Literal.of(0),),))
    ind = encode(Response(0, Status.OK, result, indication=True, seq=1), UDP)
    transport, pair = await loop.create_datagram_endpoint(_BarePair,
                                                          local_addr=("127.0.0.1", 0))
    bare = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    bare.bind(("127.0.0.1", 0))
    bare.setblocking(False)
    bare_done: list = []

    def bare_readable() -> None:
        while True:
            try:
                bare.recvfrom(65536)
            except (BlockingIOError, InterruptedError):
                return
            bare_done[0] -= 1
            if not bare_done[0]:
                bare_done[1].set_result(None)
    loop.add_reader(bare.fileno(), bare_readable)

    async def bare_round() -> None:
        bare_done[:] = [len(addrs), loop.create_future()]
        for addr in addrs:
            bare.sendto(ind, addr)
        await bare_done[1]

    async def asyncio_round() -> None:
        pair.left, pair.done = len(addrs), loop.create_future()
        for addr in addrs:
            transport.sendto(ind, addr)
        await pair.done

    counter = [0]

    async def ksp_round() -> None:
        counter[0] += 1
        waiter.done = done = loop.create_future()
        response = Response(0, Status.OK, SelectResult(1, ((Literal.of(counter[0]),),)),
                            indication=True)
        for channel in subs.channels:
            channel.indicate(response)
        await done

    rows = {"bare sendto + recvfrom": bare_round, "asyncio datagram pair": asyncio_round,
            "KSP UdpServer": ksp_round}
    samples: dict[str, list] = {name: [] for name in rows}
    names = list(rows)
    try:
        for name in names:  # warm-up
            for _ in range(20):
                await rows[name]()
        for r in range(rounds):
            start = r % len(names)
            for name in names[start:] + names[:start]:
                c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
                await asyncio.wait_for(rows[name](), TIMEOUT)
                samples[name].append((time.thread_time_ns() - c0, time.perf_counter_ns() - w0))
    finally:
        loop.remove_reader(bare.fileno())
        bare.close()
        transport.close()
        await server.close()
    return samples


# -- table 2: update -> IND against MQTT ------------------------------------------------------

async def versus_mqtt(devices: RemoteDevices, rounds: int, mqtt_port: int | None
                      ) -> dict[str, list[tuple[int, list[int]]]]:
    from sib import QuadStore, Sib
    from transports import Server

    from ksp.terms import DEFAULT_GRAPH

    store = QuadStore()
    store.load([(SENSOR, VALUE, Literal.of(0), DEFAULT_GRAPH)])
    sib = Sib(store)
    server = await Server.start(sib, udp=0, options=NO_VALIDATION)
    port = server.udp.port
    rows = {"KSP/UDP": lambda: devices.call("ksp_update", port)}
    if mqtt_port is not None:
        rows["MQTT QoS 1"] = lambda: devices.call("mqtt_publish")
    samples: dict[str, list] = {name: [] for name in rows}
    names = list(rows)
    try:
        await devices.call("subscribe", port)
        for name in names:  # warm-up
            for _ in range(10):
                await rows[name]()
        gc.collect()
        for r in range(rounds):
            start = r % len(names)
            for name in names[start:] + names[:start]:
                samples[name].append(await rows[name]())
    finally:
        await server.close()
        await sib.close()
    return samples


# -- the run and the tables -------------------------------------------------------------------

async def _run(rounds: int, mqtt_port: int | None) -> tuple[dict, dict]:
    devices = RemoteDevices()
    try:
        addrs = [tuple(a) for a in await devices.call("open_ksp", SUBSCRIBERS)]
        if mqtt_port is not None:
            await devices.call("open_mqtt", mqtt_port, SUBSCRIBERS)
        ind = await per_ind(devices, addrs, rounds)
        vs = await versus_mqtt(devices, rounds, mqtt_port)
    finally:
        devices.shutdown()
    return ind, vs


def run(quick: bool = False, mqtt: bool = True, rounds: int | None = None
        ) -> tuple[dict, dict]:
    """({row: [(CPU ns, wall ns) per round]}, {row: [(send time, [receipt times])]})."""
    rounds = rounds or (30 if quick else 200)
    if not mqtt:
        return asyncio.run(_run(rounds, None))
    from spark_ingest.testing import Mosquitto

    with Mosquitto() as broker:
        return asyncio.run(_run(rounds, broker.port))


def _med(values) -> float:
    return statistics.median(values)


def ind_table(samples: dict) -> tuple[list[str], list[list[str]], str]:
    base = _med(c for c, _ in samples["bare sendto + recvfrom"])
    rows = []
    for name, s in samples.items():
        cpu = [c / SUBSCRIBERS / 1e3 for c, _ in s]
        wall = [w / 1e3 for _, w in s]
        rows.append([name, f"{_med(cpu):.2f}", f"{percentile(cpu, 99):.2f}",
                     f"{_med(wall):.0f}", f"{percentile(wall, 99):.0f}",
                     f"{_med(c for c, _ in s) / base:.2f}×"])
    ksp = _med(c for c, _ in samples["KSP UdpServer"]) / base
    verdict = "met" if ksp <= TARGET_IND else "MISSED"
    line = (f"Target: KSP CPU per IND (encode, send, ACK in) ≤ {TARGET_IND:g}× the bare pair — "
            f"{ksp:.2f}× ({verdict}).")
    return (["row", "CPU µs/IND p50", "p99", "wall µs/round p50", "p99", "CPU × bare"], rows,
            line)


def mqtt_table(samples: dict) -> tuple[list[str], list[list[str]], str]:
    rows = []
    lasts = {}
    for name, s in samples.items():
        last = [(max(ts) - t0) / 1e3 for t0, ts in s]
        each = [(t - t0) / 1e3 for t0, ts in s for t in ts]
        lasts[name] = last
        rows.append([name, f"{_med(last):.0f}", f"{percentile(last, 99):.0f}",
                     f"{_med(each):.0f}", f"{percentile(each, 99):.0f}"])
    line = ""
    if "MQTT QoS 1" in lasts:
        k, m = lasts["KSP/UDP"], lasts["MQTT QoS 1"]
        ratio = _med(k) / _med(m)
        per_round = sorted(a / b for a, b in zip(k, m))
        verdict = "met" if ratio <= TARGET_MQTT else "MISSED"
        line = (f"Target: KSP median last ≤ {TARGET_MQTT:g}× MQTT QoS 1's — {ratio:.2f}× "
                f"({verdict}); per round KSP/MQTT: min {per_round[0]:.2f}×, median "
                f"{_med(per_round):.2f}×, max {per_round[-1]:.2f}×.")
    return (["publisher → 100 subscribers", "last µs p50", "last µs p99", "each µs p50",
             "each µs p99"], rows, line)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = bench_parser(MODULE, __doc__, prog, "30 rounds instead of 200")
    parser.add_argument("--no-mqtt", action="store_true", help="no MQTT row, no mosquitto")
    args = parser.parse_args(argv)
    ind, vs = run(args.quick, mqtt=not args.no_mqtt)
    out = []
    for headers, rows, line in (ind_table(ind), mqtt_table(vs)):
        if args.markdown:
            out += [markdown_table(headers, rows), "", line, ""]
        else:
            from .report import text_table
            out += [text_table(headers, rows), line, ""]
    load = os.getloadavg()
    out.append(f"Command: `{command_line(MODULE, prog, argv)}`; load {load[0]:.2f}; "
               f"{os.cpu_count()} cores; Python {platform.python_version()}")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
