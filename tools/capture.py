"""`ksp capture --listen HOST:PORT --to HOST:PORT -w FILE`: a recording proxy for any KSP peer.

KPs talk to the proxy as if it were the SIB (or bridge); it forwards every UDP datagram and
TCP connection to `--to` and writes the KP's side of the traffic — the KP's real address and
the proxy's listening address, as the KP saw them — to a pcapng file (`transports.pcap`). CoAP
is UDP: it is recorded too. TCP is carried only where the target accepts TCP connections (a
`ksp-sib` takes UDP and TCP on different ports, 7000 and 7001 by default): checked at start,
with UDP alone carried otherwise and `--tcp-only` refused. No root needed. Bounded: at most `--max-clients` UDP clients (the
least recently heard is dropped) and `--max-connections` TCP connections at once.
"""
from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections import OrderedDict

from transports.pcap import PcapWriter
from transports.reads import small_reads

Addr = tuple[str, int]


class CaptureError(Exception):
    """Exit status 1: the proxy cannot carry what was asked (said in one line)."""


def host_port(text: str) -> Addr:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: HOST:PORT")
    if not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"port {port}: not a port number (1 to 65535)")
    return host.strip("[]") or "127.0.0.1", int(port)


async def takes_tcp(target: Addr, timeout: float = 5.0) -> bool:
    """Whether `target` accepts TCP connections (a connection opened and closed at once)."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(*target), timeout)
    except (OSError, TimeoutError):
        return False
    writer.close()
    return True


class _Upstream(asyncio.DatagramProtocol):
    """The proxy's socket towards the target for one UDP client."""

    def __init__(self, proxy: "UdpProxy", client: Addr) -> None:
        self.proxy, self.client = proxy, client
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        small_reads(transport)

    def datagram_received(self, data: bytes, addr) -> None:
        self.proxy.to_client(self.client, data)

    def error_received(self, exc: Exception) -> None:
        # the target is down: the KP retransmits and times out, as it would without us; said
        # once, so that the proxy's user knows why
        self.proxy.unreachable(exc)


class UdpProxy(asyncio.DatagramProtocol):
    def __init__(self, target: Addr, pcap: PcapWriter, max_clients: int,
                 report=print) -> None:
        self.target, self.pcap, self.max_clients = target, pcap, max_clients
        self.report = report
        self.told = False  # whether the user was told the target does not answer over UDP
        self.clients: OrderedDict[Addr, _Upstream] = OrderedDict()
        self.transport: asyncio.DatagramTransport | None = None
        self.local: Addr = ("0.0.0.0", 0)
        self.datagrams = 0

    def connection_made(self, transport) -> None:
        self.transport = transport
        small_reads(transport)
        self.local = transport.get_extra_info("sockname")[:2]

    def datagram_received(self, data: bytes, addr) -> None:
        client = addr[:2]
        self.pcap.udp(client, self.local, data)
        self.datagrams += 1
        upstream = self.clients.get(client)
        if upstream is None:
            upstream = self.clients[client] = _Upstream(self, client)
            asyncio.ensure_future(self._connect(upstream, data))
            while len(self.clients) > self.max_clients:
                _, old = self.clients.popitem(last=False)
                if old.transport is not None:
                    old.transport.close()
            return
        self.clients.move_to_end(client)
        if upstream.transport is not None:
            upstream.transport.sendto(data)

    async def _connect(self, upstream: _Upstream, first: bytes) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.create_datagram_endpoint(lambda: upstream, remote_addr=self.target)
        except OSError as exc:
            self.unreachable(exc)
            return
        upstream.transport.sendto(first)

    def unreachable(self, exc: Exception) -> None:
        if not self.told:
            self.told = True
            why = ("nothing listens there over UDP" if isinstance(exc, ConnectionRefusedError)
                   else exc.strerror or str(exc) if isinstance(exc, OSError) else str(exc))
            self.report(f"{self.target[0]}:{self.target[1]}: {why} (the KPs will time out)")

    def to_client(self, client: Addr, data: bytes) -> None:
        if self.transport is not None:
            self.pcap.udp(self.local, client, data)
            self.transport.sendto(data, client)
            self.datagrams += 1

    def close(self) -> None:
        for upstream in self.clients.values():
            if upstream.transport is not None:
                upstream.transport.close()
        if self.transport is not None:
            self.transport.close()


class TcpProxy:
    def __init__(self, target: Addr, pcap: PcapWriter, max_connections: int) -> None:
        self.target, self.pcap, self.max_connections = target, pcap, max_connections
        self.open = 0
        self.refused = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.open >= self.max_connections:
            self.refused += 1
            writer.close()
            return
        self.open += 1
        client = writer.get_extra_info("peername")[:2]
        local = writer.get_extra_info("sockname")[:2]
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            self.open -= 1
            writer.close()
            return
        self.pcap.tcp_open(client, local)
        small_reads(writer.transport)
        small_reads(up_writer.transport)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, a: Addr,
                       b: Addr) -> None:
            try:
                while data := await src.read(65536):
                    self.pcap.tcp(a, b, data)
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        try:
            await asyncio.gather(pipe(reader, up_writer, client, local),
                                 pipe(up_reader, writer, local, client))
        finally:
            self.open -= 1
            self.pcap.tcp_close(client, local)


async def run(listen: Addr, target: Addr, out: str, *, udp: bool = True, tcp: bool = True,
              max_bytes: int | None = None, max_clients: int = 1024, max_connections: int = 256,
              ready: asyncio.Event | None = None, stop: asyncio.Event | None = None,
              report=print) -> int:
    """Proxy until `stop` (or SIGINT/SIGTERM); returns the number of packets written."""
    loop = asyncio.get_running_loop()
    stop = stop or asyncio.Event()
    note = ""
    if tcp and not await takes_tcp(target):
        where = f"{target[0]}:{target[1]}"
        if not udp:
            raise CaptureError(f"--to {where}: nothing accepts TCP connections there (a "
                               "ksp-sib takes TCP on its --tcp-port, 7001 by default)")
        tcp, note = False, f" (no TCP: nothing accepts TCP connections at {where})"
    with PcapWriter(out, max_bytes=max_bytes) as pcap:
        udp_proxy = server = None
        if udp:
            udp_proxy = UdpProxy(target, pcap, max_clients, report)
            await loop.create_datagram_endpoint(lambda: udp_proxy, local_addr=listen)
        if tcp:
            tcp_proxy = TcpProxy(target, pcap, max_connections)
            server = await asyncio.start_server(tcp_proxy.handle, *listen)
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, stop.set)
            except (NotImplementedError, RuntimeError):
                pass
        kinds = "+".join(k for k, on in (("udp", udp), ("tcp", tcp)) if on)
        report(f"capturing {kinds} {listen[0]}:{listen[1]} -> {target[0]}:{target[1]} into "
               f"{out}{note}")
        if ready is not None:
            ready.set()
        try:
            await stop.wait()
        finally:
            if udp_proxy is not None:
                udp_proxy.close()
            if server is not None:
                server.close()
        report(f"stopped: {pcap.packets} packets in {', '.join(str(f) for f in pcap.files)}")
        return pcap.packets


def add_parser(sub) -> None:
    p = sub.add_parser("capture", help="a recording proxy: KSP traffic to a pcapng file",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("--listen", type=host_port, required=True, metavar="HOST:PORT",
                   help="where the KPs send (UDP and TCP)")
    p.add_argument("--to", type=host_port, required=True, metavar="HOST:PORT",
                   help="the SIB or bridge")
    p.add_argument("-w", "--write", required=True, metavar="FILE", help="the pcapng file")
    p.add_argument("--udp-only", action="store_true", help="carry UDP (and CoAP) only")
    p.add_argument("--tcp-only", action="store_true",
                   help="carry TCP only (refused if the target accepts no TCP connection)")
    p.add_argument("--max-bytes", type=int, metavar="N", help="rotate past N bytes")
    p.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    try:
        asyncio.run(run(args.listen, args.to, args.write, udp=not args.tcp_only,
                        tcp=not args.udp_only, max_bytes=args.max_bytes,
                        report=lambda text: print(text, flush=True)))
    except CaptureError as exc:
        print(f"ksp capture: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # the listening address taken, or not this host's
        where = f"{args.listen[0]}:{args.listen[1]}"
        print(f"ksp capture: --listen {where}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"ksp capture: {exc}", file=sys.stderr)
        return 2
    return 0
