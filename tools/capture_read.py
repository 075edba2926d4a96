"""KSP messages out of a packet capture, each decoded by what it answers.

`messages(path)` reads a pcap/pcapng file (`transports.pcap.read_packets`: ours, tcpdump's,
Wireshark's), keeps the KSP traffic — UDP datagrams, TCP streams reassembled from their
segments and cut at each message's Length field, KSP inside CoAP payloads — and tells which
side is the SIB: the side on a SIB port (7000 UDP, 7001 TCP, 5683 CoAP, or `sib_ports`), else
the side that did not speak first. `annotate` then decodes each message as the KP or SIB sent
it: a RES by the transaction type of its request (matched by KP and transaction ID, a
TERMINATE's RES included) and an IND by the type of the persistent request it belongs to.
A sealed message (wire format 13) is shown with its KP ID and counter and its inner message
decoded (the envelope authenticates, it does not encrypt).
"""
from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from ksp import Ack, DecodeError, Request, Response, Tx
from ksp.codec import TCP, UDP, decode_kp_message, decode_sib_message
from ksp.secure import MAGIC, OVERHEAD, TAG_SIZE
from transports.pcap import Packet, PcapDamaged, read_packets

SIB_PORTS = frozenset({7000, 7001, 5683})
COAP_PORT = 5683
Addr = tuple[str, int]


@dataclass
class Captured:
    """One KSP message of a capture. `transport` is "udp", "tcp" or "coap" (KSP's UDP layout
    inside a CoAP payload); `sealed`: (KP ID, counter) of its envelope."""

    time: float
    transport: str
    src: Addr
    dst: Addr
    data: bytes
    from_sib: bool
    sealed: tuple[bytes, int] | None = None
    coap: str | None = None  # "POST 0x1a2b", "2.05", … for CoAP
    # filled by `annotate`
    message: Request | Response | Ack | None = None
    error: DecodeError | None = None
    answers: Tx | None = None
    kp: str = ""

    @property
    def kp_addr(self) -> Addr:
        return self.dst if self.from_sib else self.src

    @property
    def inner(self) -> bytes:
        return self.data[21:-TAG_SIZE] if self.sealed else self.data


@dataclass
class _Flow:
    next_seq: int | None = None
    pending: dict[int, bytes] = field(default_factory=dict)
    buffer: bytearray = field(default_factory=bytearray)
    broken: bool = False


def messages(path: str, sib_ports: Iterable[int] | None = None) -> list[Captured]:
    """The KSP messages of a capture, in capture order; `PcapDamaged` (naming the file and
    where) for one cut short or damaged: a replay of part of it would report the rest as
    lost."""
    out, damage = read_messages(path, sib_ports)
    if damage is not None:
        raise damage
    return out


def read_messages(path: str, sib_ports: Iterable[int] | None = None
                  ) -> tuple[list[Captured], PcapDamaged | None]:
    """The KSP messages of a capture as far as it can be read, and what stopped the reading
    there (None: the whole file was read)."""
    out: list[Captured] = []
    try:
        _read_into(out, path, sib_ports)
    except PcapDamaged as exc:
        return out, exc
    return out, None


def _read_into(out: list[Captured], path: str, sib_ports: Iterable[int] | None) -> None:
    ports = frozenset(sib_ports) if sib_ports is not None else SIB_PORTS
    first_speaker: dict[frozenset, Addr] = {}
    flows: dict[tuple[Addr, Addr], _Flow] = {}
    for p in read_packets(path):
        conv = frozenset((p.src, p.dst))
        if p.proto == "tcp" and p.flags is not None and p.flags & 0x12 == 0x02:
            first_speaker[conv] = p.src  # SYN: the client, a KP
        first_speaker.setdefault(conv, p.src)
        if p.dst[1] in ports and p.src[1] not in ports:
            from_sib = False
        elif p.src[1] in ports and p.dst[1] not in ports:
            from_sib = True
        else:
            from_sib = first_speaker[conv] != p.src
        if p.proto == "udp":
            if COAP_PORT in (p.src[1], p.dst[1]) or _looks_coap(p.payload):
                item = _coap(p, from_sib)
                if item is not None:
                    out.append(item)
            elif p.payload:
                out.append(_captured(p.time, "udp", p.src, p.dst, p.payload, from_sib))
        else:
            for data in _reassemble(flows.setdefault((p.src, p.dst), _Flow()), p):
                out.append(_captured(p.time, "tcp", p.src, p.dst, data, from_sib))


def _captured(when: float, transport: str, src: Addr, dst: Addr, data: bytes,
              from_sib: bool, coap: str | None = None) -> Captured:
    sealed = None
    if data[:1] == bytes((MAGIC,)) and len(data) >= OVERHEAD:
        sealed = (bytes(data[1:17]), struct.unpack("<I", data[17:21])[0])
    return Captured(when, transport, src, dst, bytes(data), from_sib, sealed, coap)


def _reassemble(flow: _Flow, p: Packet) -> Iterator[bytes]:
    """In-order stream bytes of one TCP direction (retransmissions trimmed, out-of-order
    segments held), cut into KSP messages by the Length field (wire format 2.2)."""
    assert p.seq is not None and p.flags is not None
    if p.flags & 0x02:  # SYN: the stream starts after it
        flow.next_seq = (p.seq + 1) & 0xFFFFFFFF
        return
    if flow.next_seq is None:
        flow.next_seq = p.seq  # picked up mid-stream
    if p.payload:
        flow.pending[p.seq] = p.payload
    while flow.pending:
        progressed = False
        for seq in list(flow.pending):
            offset = (flow.next_seq - seq) & 0xFFFFFFFF
            data = flow.pending[seq]
            if offset == 0 or offset < len(data):
                del flow.pending[seq]
                flow.buffer += data[offset:]
                flow.next_seq = (flow.next_seq + len(data) - offset) & 0xFFFFFFFF
                progressed = True
            elif offset < 0x80000000:  # entirely before next_seq: a retransmission
                del flow.pending[seq]
        if not progressed:
            break
    while not flow.broken and len(flow.buffer) >= 8:
        length = struct.unpack("<I", flow.buffer[4:8])[0]
        if length < 8:  # framing error: the stream cannot be followed further (2.2)
            flow.broken = True
            yield bytes(flow.buffer)
            flow.buffer.clear()
            return
        if len(flow.buffer) < length:
            return
        yield bytes(flow.buffer[:length])
        del flow.buffer[:length]


def _looks_coap(data: bytes) -> bool:
    return len(data) >= 4 and data[0] >> 6 == 1 and (data[0] & 0x0F) <= 8 and \
        data[1] in (0x02, 0x01, 0x41, 0x44, 0x45, 0x84, 0x85)


def _coap(p: Packet, from_sib: bool) -> Captured | None:
    """The KSP payload of a CoAP message (POST /ksp, a response, a notification), if any."""
    data = p.payload
    if len(data) < 4 or data[0] >> 6 != 1:
        return None
    tkl, code, mid = data[0] & 0x0F, data[1], struct.unpack("!H", data[2:4])[0]
    at, number, content_format = 4 + tkl, 0, None
    while at < len(data) and data[at] != 0xFF:
        delta, length = data[at] >> 4, data[at] & 0x0F
        at += 1
        ext = []
        for nibble in (delta, length):
            if nibble == 13:
                ext.append(data[at] + 13)
                at += 1
            elif nibble == 14:
                ext.append(struct.unpack("!H", data[at:at + 2])[0] + 269)
                at += 2
            else:
                ext.append(nibble)
        number += ext[0]
        value = data[at:at + ext[1]]
        at += ext[1]
        if number == 12:
            content_format = int.from_bytes(value, "big")
    if at >= len(data) or content_format not in (None, 65000):
        return None
    label = f"{code >> 5}.{code & 0x1F:02d}" if code >= 0x40 else \
        {1: "GET", 2: "POST", 3: "PUT", 4: "DELETE"}.get(code, str(code))
    return _captured(p.time, "coap", p.src, p.dst, data[at + 1:], code >= 0x40,
                     f"{label} mid {mid:#06x}")


def annotate(items: list[Captured]) -> list[Captured]:
    """Decode every message as its side sent it; a RES or IND by what it answers."""
    tx_of: dict[tuple, Tx] = {}  # (KP key, TID) -> the request's transaction type
    kp_of: dict[Addr, str] = {}  # an address -> the KP ID last seen from it
    for item in items:
        layout = TCP if item.transport == "tcp" else UDP
        if item.sealed:
            kp_of[item.kp_addr] = item.sealed[0].hex()
        data = item.inner
        if not item.from_sib:
            try:
                msg = decode_kp_message(data, layout)
            except DecodeError as exc:
                item.error = exc
                continue
            item.message = msg
            if isinstance(msg, Request) and msg.options.credentials is not None:
                kp_of[item.src] = bytes(msg.options.credentials.kp_id).hex()
            item.kp = kp_of.get(item.src, f"{item.src[0]}:{item.src[1]}")
            if isinstance(msg, Request):
                tx_of[(item.kp, msg.tid, "res")] = msg.tx
                if msg.tx.persistent:
                    tx_of[(item.kp, msg.tid, "ind")] = msg.tx
        else:
            item.kp = kp_of.get(item.dst, f"{item.dst[0]}:{item.dst[1]}")
            tid = struct.unpack("<H", data[2:4])[0] if len(data) >= 4 else None
            ind = len(data) >= 2 and bool(data[1] & 0x80)
            item.answers = tx_of.get((item.kp, tid, "ind" if ind else "res"))
            try:
                item.message = decode_sib_message(data, layout, answers=item.answers)
            except DecodeError as exc:
                item.error = exc
    return items


def kind(item: Captured) -> str:
    """REQ/RES/IND/ACK and the transaction type, as a one-word label."""
    msg = item.message
    if isinstance(msg, Ack):
        return f"ACK seq={msg.seq}"
    if isinstance(msg, Request):
        return f"REQ {msg.tx.name} {'CON' if msg.confirmable else 'NON'}"
    if isinstance(msg, Response):
        what = item.answers.name if item.answers is not None else "?"
        head = f"IND {what} seq={msg.seq}" if msg.indication else f"RES {what}"
        return f"{head} {msg.status.name}"
    return "undecodable"


def print_capture(path: str, *, kp: str | None = None, tx: str | None = None,
                  sib_ports: Iterable[int] | None = None, brief: bool = False,
                  out=None) -> int:
    """`ksp decode --pcap`: every KSP message of a capture with its time (seconds from the first
    packet), direction, transport and decoded content; filters by KP (KP ID in hex, a name as
    `connect(kp_id=)` takes it, or HOST:PORT) and transaction type. Returns the exit code."""
    import sys

    from ksp.kpid import kp_id_bytes
    from ksp.reference.explain import format_message

    out = out or sys.stdout
    found, damage = read_messages(path, sib_ports)
    items = annotate(found)
    wanted_kp = None
    if kp is not None:
        wanted_kp = {kp}
        try:
            wanted_kp.add(kp_id_bytes(kp).hex())
        except (ValueError, TypeError):
            pass
    wanted_tx = tx.upper().replace("-", "_") if tx else None
    start = items[0].time if items else 0.0
    shown = 0
    for item in items:
        if wanted_kp is not None and item.kp not in wanted_kp:
            continue
        label = kind(item)
        if wanted_tx is not None and wanted_tx not in label.split():
            continue
        shown += 1
        arrow = "SIB -> KP" if item.from_sib else "KP -> SIB"
        src, dst = f"{item.src[0]}:{item.src[1]}", f"{item.dst[0]}:{item.dst[1]}"
        tid = getattr(item.message, "tid", None)
        extra = f" {item.coap}" if item.coap else ""
        seal = f" sealed(kp {item.sealed[0].hex()} ctr {item.sealed[1]})" if item.sealed else ""
        print(f"{item.time - start:10.6f}  {arrow}  {src} -> {dst}  {item.transport.upper()}"
              f"{extra}{seal}  kp {item.kp}  tid {tid}  {label}  ({len(item.data)} bytes)",
              file=out)
        if brief:
            continue
        if item.error is not None:
            print(f"    DecodeError: status {item.error.status:#04x} {item.error.status.name}: "
                  f"{item.error}", file=out)
        elif item.message is not None:
            for line in format_message(item.message).splitlines():
                print("    " + line, file=out)
    print(f"{shown} of {len(items)} KSP messages", file=out)
    if damage is not None:  # what came before it is shown above
        print(f"error: {damage}; the messages before it are shown", file=sys.stderr)
        return 1
    return 0
