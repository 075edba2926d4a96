"""Packet captures of KSP traffic, standard library only: `PcapWriter` (what `ksp-sib --pcap` and
`ksp capture` write) and `read_packets` (pcap or pcapng from any capturer: tcpdump, Wireshark,
dumpcap, ours).

The writer uses pcapng with LINKTYPE_RAW: each packet is an IPv4 or IPv6 header built here, then
a UDP or TCP header, then the KSP bytes, with the real addresses and ports and correct lengths
and checksums, so Wireshark's ordinary display filters (`udp.port == 7000`, `ip.addr == …`)
and its TCP reassembly work. A TCP connection gets a synthesised handshake, sequence numbers
that count the stream's bytes, and a FIN when it closes. Files rotate by size: `out.pcapng`,
then `out.1.pcapng`, … keeping the newest `max_files`.
"""
from __future__ import annotations

import ipaddress
import itertools
import os
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

__all__ = ["PcapWriter", "Packet", "read_packets", "PcapError", "PcapDamaged", "LINKTYPES"]

Addr = tuple[str, int]

LINKTYPE_NULL, LINKTYPE_ETHERNET, LINKTYPE_RAW, LINKTYPE_LINUX_SLL = 0, 1, 101, 113
LINKTYPE_LOOP, LINKTYPE_IPV4, LINKTYPE_IPV6, LINKTYPE_LINUX_SLL2 = 108, 228, 229, 276
LINKTYPES = {LINKTYPE_NULL: "BSD loopback", LINKTYPE_ETHERNET: "Ethernet", LINKTYPE_RAW: "raw IP",
             LINKTYPE_LINUX_SLL: "Linux cooked", LINKTYPE_LOOP: "OpenBSD loopback",
             LINKTYPE_IPV4: "raw IPv4", LINKTYPE_IPV6: "raw IPv6",
             LINKTYPE_LINUX_SLL2: "Linux cooked v2"}
UDP, TCP = 17, 6
SYN, FIN, PSH, ACK = 0x02, 0x01, 0x08, 0x10
_MAX_SEGMENT = 65_495  # an IPv4 packet's 65,535 bytes less the IP and TCP headers


class PcapError(ValueError):
    """A file that is not a pcap/pcapng capture, or is cut short."""


class PcapDamaged(PcapError):
    """A capture cut short or damaged at some byte: the packets before it were read."""


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    try:
        addr = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        addr = ipaddress.ip_address("0.0.0.0")  # a host name: no address to show
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


def _pair(src: str, dst: str):
    a, b = _ip(src), _ip(dst)
    if a.version != b.version:  # e.g. a listener on 0.0.0.0 answering ::1: one family
        if a.is_unspecified:
            a = ipaddress.ip_address("::") if b.version == 6 else ipaddress.ip_address("0.0.0.0")
        else:
            b = ipaddress.ip_address("::") if a.version == 6 else ipaddress.ip_address("0.0.0.0")
    return a, b


def ip_packet(src: Addr, dst: Addr, proto: int, transport: bytes, ident: int = 0) -> bytes:
    """An IPv4 or IPv6 packet around a UDP/TCP header + payload whose checksum field (offset 6
    for UDP, 16 for TCP) is zero: the checksum is computed here, over the pseudo-header."""
    a, b = _pair(src[0], dst[0])
    n = len(transport)
    if a.version == 4:
        pseudo = a.packed + b.packed + struct.pack("!BBH", 0, proto, n)
    else:
        pseudo = a.packed + b.packed + struct.pack("!IxxxB", n, proto)
    at = 6 if proto == UDP else 16
    csum = _checksum(pseudo + transport) or (0xFFFF if proto == UDP else 0)
    transport = transport[:at] + struct.pack("!H", csum) + transport[at + 2:]
    if a.version == 4:
        head = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + n, ident & 0xFFFF, 0x4000, 64, proto, 0,
                           a.packed, b.packed)
        head = head[:10] + struct.pack("!H", _checksum(head)) + head[12:]
        return head + transport
    return struct.pack("!IHBB16s16s", 6 << 28, n, proto, 64, a.packed, b.packed) + transport


def udp_packet(src: Addr, dst: Addr, payload: bytes, ident: int = 0) -> bytes:
    head = struct.pack("!HHHH", src[1], dst[1], 8 + len(payload), 0)
    return ip_packet(src, dst, UDP, head + payload, ident)


def tcp_packet(src: Addr, dst: Addr, seq: int, ack: int, flags: int, payload: bytes = b"",
               ident: int = 0) -> bytes:
    head = struct.pack("!HHIIBBHHH", src[1], dst[1], seq & 0xFFFFFFFF, ack & 0xFFFFFFFF,
                       5 << 4, flags, 65535, 0, 0)
    return ip_packet(src, dst, TCP, head + payload, ident)


@dataclass
class _Stream:
    """One TCP connection's next sequence number per direction (client, server)."""

    seq: dict[Addr, int] = field(default_factory=dict)


class PcapWriter:
    """Writes what a KSP endpoint sends and receives as a pcapng file. Call from one thread
    (the event loop's); every packet is flushed at once, so a killed process leaves a readable
    file. `max_bytes`: start the next file past this size (None: one file); `max_files`: how
    many to keep (the oldest is deleted)."""

    def __init__(self, path: str | os.PathLike, *, max_bytes: int | None = None,
                 max_files: int = 10, clock=time.time) -> None:
        if max_bytes is not None and max_bytes < 4096:
            raise ValueError("max_bytes: at least 4096")
        if max_files < 1:
            raise ValueError("max_files: at least 1")
        self.path = Path(path)
        self.max_bytes, self.max_files, self.clock = max_bytes, max_files, clock
        self.files: list[Path] = []
        self.packets = 0
        self._ids = itertools.count()
        self._streams: dict[tuple[Addr, Addr], _Stream] = {}
        self._file: BinaryIO | None = None
        self._size = 0
        self._next = 0  # the number of the next file
        self._open_next()

    # -- files ------------------------------------------------------------------------------

    def _name(self, n: int) -> Path:
        if n == 0:
            return self.path
        return self.path.with_name(f"{self.path.stem}.{n}{self.path.suffix}")

    def _open_next(self) -> None:
        if self._file is not None:
            self._file.close()
        name = self._name(self._next)
        self._next += 1
        self._file = open(name, "wb")
        self.files.append(name)
        while len(self.files) > self.max_files:
            self.files.pop(0).unlink(missing_ok=True)
        self._size = 0
        appl = b"ksp-gateway"
        shb_opts = struct.pack("<HH", 4, len(appl)) + _pad(appl) + struct.pack("<HH", 0, 0)
        self._block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1) + shb_opts)
        name_opt = b"ksp"
        idb_opts = struct.pack("<HH", 2, len(name_opt)) + _pad(name_opt) + struct.pack("<HH", 0, 0)
        self._block(1, struct.pack("<HHI", LINKTYPE_RAW, 0, 262_144) + idb_opts)

    def _block(self, kind: int, body: bytes) -> None:
        n = 12 + len(body)
        data = struct.pack("<II", kind, n) + body + struct.pack("<I", n)
        assert self._file is not None
        self._file.write(data)
        self._size += len(data)

    def _packet(self, packet: bytes, when: float | None) -> None:
        if self._file is None:
            return
        us = int((self.clock() if when is None else when) * 1_000_000)
        self._block(6, struct.pack("<IIIII", 0, us >> 32, us & 0xFFFFFFFF, len(packet),
                                   len(packet)) + _pad(packet))
        self._file.flush()
        self.packets += 1
        if self.max_bytes is not None and self._size >= self.max_bytes:
            self._open_next()

    # -- what endpoints call ------------------------------------------------------------------

    def udp(self, src: Addr, dst: Addr, data: bytes, when: float | None = None) -> None:
        """One datagram from `src` to `dst`."""
        self._packet(udp_packet(src, dst, data, next(self._ids)), when)

    def tcp_open(self, client: Addr, server: Addr, when: float | None = None) -> None:
        """A connection accepted or made: its three-way handshake (ISN 0 both ways)."""
        self._streams[(client, server)] = _Stream({client: 1, server: 1})
        self._packet(tcp_packet(client, server, 0, 0, SYN, ident=next(self._ids)), when)
        self._packet(tcp_packet(server, client, 0, 1, SYN | ACK, ident=next(self._ids)), when)
        self._packet(tcp_packet(client, server, 1, 1, ACK, ident=next(self._ids)), when)

    def tcp(self, src: Addr, dst: Addr, data: bytes, when: float | None = None) -> None:
        """Stream bytes from `src` to `dst` (either direction of a connection; one opened
        before the capture began is picked up mid-stream)."""
        key = (src, dst) if (src, dst) in self._streams else (dst, src)
        stream = self._streams.get(key)
        if stream is None:
            stream = self._streams[(src, dst)] = _Stream({src: 1, dst: 1})
        for i in range(0, len(data), _MAX_SEGMENT):
            chunk = data[i:i + _MAX_SEGMENT]
            self._packet(tcp_packet(src, dst, stream.seq[src], stream.seq[dst], PSH | ACK, chunk,
                                    next(self._ids)), when)
            stream.seq[src] += len(chunk)

    def tcp_close(self, src: Addr, dst: Addr, when: float | None = None) -> None:
        """The connection ended (by `src`): FIN both ways."""
        key = (src, dst) if (src, dst) in self._streams else (dst, src)
        stream = self._streams.pop(key, None)
        if stream is None:
            return
        s, d = stream.seq[src], stream.seq[dst]
        self._packet(tcp_packet(src, dst, s, d, FIN | ACK, ident=next(self._ids)), when)
        self._packet(tcp_packet(dst, src, d, s + 1, FIN | ACK, ident=next(self._ids)), when)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> "PcapWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _pad(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 4)


# -------------------------------------------------------------------------------------------
# Reading


@dataclass(frozen=True)
class Packet:
    """A UDP datagram or TCP segment of a capture. `seq` and `flags` are TCP's (None for UDP)."""

    time: float
    proto: str  # "udp" | "tcp"
    src: Addr
    dst: Addr
    payload: bytes
    seq: int | None = None
    flags: int | None = None


def read_packets(path: str | os.PathLike) -> Iterator[Packet]:
    """The UDP and TCP packets of a pcap or pcapng file (other protocols and IP fragments other
    than the first are skipped). Raises `PcapError` for a file that is not a capture,
    `PcapDamaged` (naming the file and the byte) where one is cut short or damaged, after the
    packets before it."""
    with open(path, "rb") as f:
        head = f.read(4)
        f.seek(0)
        if head == b"\x0a\x0d\x0d\x0a":
            frames = _pcapng_frames(f)
        elif head in (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1",
                      b"\xa1\xb2\x3c\x4d"):
            frames = _pcap_frames(f)
        else:
            raise PcapError(f"{path}: not a pcap or pcapng file (starts {head.hex()})")
        try:
            for when, linktype, frame in frames:
                ip = _link_payload(linktype, frame)
                if ip is not None:
                    packet = _ip_payload(when, ip)
                    if packet is not None:
                        yield packet
        except PcapDamaged as exc:  # the file and where: the packets before it were yielded
            raise PcapDamaged(f"{path}: {exc}") from None


def _read(f: BinaryIO, n: int) -> bytes:
    at = f.tell()
    data = f.read(n)
    if len(data) != n:
        raise PcapDamaged(_cut(at))
    return data


def _cut(at: int) -> str:
    return f"the capture is cut short at byte {at}"


def _pcap_frames(f: BinaryIO) -> Iterator[tuple[float, int, bytes]]:
    head = _read(f, 24)
    magic = head[:4]
    order = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    nano = magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
    linktype = struct.unpack(order + "I", head[20:24])[0] & 0x0FFFFFFF
    while True:
        at = f.tell()
        rec = f.read(16)
        if not rec:
            return
        if len(rec) < 16:
            raise PcapDamaged(_cut(at))
        sec, frac, incl, _ = struct.unpack(order + "IIII", rec)
        yield sec + frac / (1e9 if nano else 1e6), linktype, _read(f, incl)


def _pcapng_frames(f: BinaryIO) -> Iterator[tuple[float, int, bytes]]:
    order = "<"
    interfaces: list[tuple[int, float]] = []  # (linktype, seconds per tick)
    while True:
        at = f.tell()
        head = f.read(8)
        if not head:
            return
        if len(head) < 8:
            raise PcapDamaged(_cut(at))
        kind = struct.unpack("<I", head[:4])[0]
        if kind == 0x0A0D0D0A:  # section header: its byte order
            magic = _read(f, 4)
            order = "<" if magic == b"\x4d\x3c\x2b\x1a" else ">"
            length = struct.unpack(order + "I", head[4:])[0]
            _read(f, length - 12)
            interfaces = []
            continue
        kind, length = struct.unpack(order + "II", head)
        if length < 12 or length % 4:
            raise PcapDamaged(f"a damaged pcapng block at byte {at}: length {length}")
        block = _read(f, length - 8)
        body, trailing = block[:-4], struct.unpack(order + "I", block[-4:])[0]
        if trailing != length:  # a block's length is written at both ends: a check
            raise PcapDamaged(f"a damaged pcapng block at byte {at}: its length fields say "
                              f"{length} and {trailing}")
        if kind == 1:  # interface description
            linktype = struct.unpack(order + "H", body[:2])[0]
            interfaces.append((linktype, _tsresol(body[8:], order)))
        elif kind == 6:  # enhanced packet
            iface, hi, lo, cap = struct.unpack(order + "IIII", body[:16])
            linktype, unit = interfaces[iface]
            yield ((hi << 32) | lo) * unit, linktype, body[20:20 + cap]
        elif kind == 3 and interfaces:  # simple packet
            orig = struct.unpack(order + "I", body[:4])[0]
            yield 0.0, interfaces[0][0], body[4:4 + orig]


def _tsresol(options: bytes, order: str) -> float:
    i = 0
    while i + 4 <= len(options):
        code, n = struct.unpack(order + "HH", options[i:i + 4])
        if code == 0:
            break
        if code == 9 and n >= 1:
            v = options[i + 4]
            return 2.0 ** -(v & 0x7F) if v & 0x80 else 10.0 ** -v
        i += 4 + n + (-n % 4)
    return 1e-6


def _link_payload(linktype: int, frame: bytes) -> bytes | None:
    """The IP packet inside a link-layer frame (None: not IP, or a link type not read)."""
    if linktype == LINKTYPE_ETHERNET:
        ethertype, at = struct.unpack("!H", frame[12:14])[0] if len(frame) >= 14 else 0, 14
        while ethertype in (0x8100, 0x88A8) and len(frame) >= at + 4:  # VLAN tags
            ethertype, at = struct.unpack("!H", frame[at + 2:at + 4])[0], at + 4
        return frame[at:] if ethertype in (0x0800, 0x86DD) else None
    if linktype in (LINKTYPE_RAW, LINKTYPE_IPV4, LINKTYPE_IPV6, 12, 14):
        return frame
    if linktype == LINKTYPE_LINUX_SLL:
        return frame[16:] if frame[14:16] in (b"\x08\x00", b"\x86\xdd") else None
    if linktype == LINKTYPE_LINUX_SLL2:
        return frame[20:] if frame[:2] in (b"\x08\x00", b"\x86\xdd") else None
    if linktype in (LINKTYPE_NULL, LINKTYPE_LOOP):
        return frame[4:]
    return None


def _ip_payload(when: float, ip: bytes) -> Packet | None:
    if not ip:
        return None
    version = ip[0] >> 4
    if version == 4 and len(ip) >= 20:
        ihl = (ip[0] & 0x0F) * 4
        total = struct.unpack("!H", ip[2:4])[0]
        if struct.unpack("!H", ip[6:8])[0] & 0x1FFF:
            return None  # a later fragment: no transport header
        proto, src, dst = ip[9], ip[12:16], ip[16:20]
        body = ip[ihl:total] if total >= ihl else ip[ihl:]
        host = (str(ipaddress.IPv4Address(src)), str(ipaddress.IPv4Address(dst)))
    elif version == 6 and len(ip) >= 40:
        plen, proto = struct.unpack("!HB", ip[4:7])
        src, dst = ip[8:24], ip[24:40]
        body, at = ip[40:40 + plen], 0
        while proto in (0, 43, 60) and len(body) >= at + 8:  # hop-by-hop, routing, options
            proto, at = body[at], at + 8 + body[at + 1] * 8
        if proto == 44:  # a fragment header: only a first fragment carries the ports
            if len(body) < at + 8 or struct.unpack("!H", body[at + 2:at + 4])[0] & 0xFFF8:
                return None
            proto, at = body[at], at + 8
        body = body[at:]
        host = (str(ipaddress.IPv6Address(src)), str(ipaddress.IPv6Address(dst)))
    else:
        return None
    if proto == UDP and len(body) >= 8:
        sport, dport, length = struct.unpack("!HHH", body[:6])
        return Packet(when, "udp", (host[0], sport), (host[1], dport), body[8:max(8, length)])
    if proto == TCP and len(body) >= 20:
        sport, dport, seq = struct.unpack("!HHI", body[:8])
        offset, flags = body[12] >> 4, body[13]
        return Packet(when, "tcp", (host[0], sport), (host[1], dport), body[offset * 4:], seq,
                      flags)
    return None
