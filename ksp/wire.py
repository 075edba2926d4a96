"""What the encoder and the decoder share: the transports and their headers (§2), the struct
formats, the code tables indexed by integer code and the layout table's names (`ksp.layout`).
"""
from __future__ import annotations

import struct
from enum import Enum

from .codes import RES_EPOCH, RESERVED_WORDS, Op, Status, Tx
from .layout import MEMBER_TYPES, REQUEST_FIELDS, Body
from .errors import DecodeError
from .terms import IRI


class Transport(str, Enum):
    UDP = "udp"
    TCP = "tcp"


UDP = Transport.UDP
TCP = Transport.TCP

# Data fields of each transaction, in wire order (§5), by name: the layout table's, which also
# says how each is written (`ksp.layout.REQUEST_FIELDS`).
LAYOUT: dict[Tx, tuple[str, ...]] = {tx: tuple(name for name, _ in fields)
                                     for tx, fields in REQUEST_FIELDS.items()}
_FIELD_KIND: dict[str, int] = {name: int(body) for fields in REQUEST_FIELDS.values()
                               for name, body in fields}  # plain ints: compared per field
_GRAPH_FIELDS = frozenset(name for name, kind in _FIELD_KIND.items() if kind == Body.GRAPH)
_DATA_FIELDS = ("delete", "insert", "where", "optional", "template", "projection", "graphs",
                "source", "target")  # the order encoding checks them in (error messages)

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_F32 = struct.Struct("<f")
_F64 = struct.Struct("<d")
_HDR_UDP = struct.Struct("<BBH")
_HDR_IND = struct.Struct("<BBHH")
_HDR_TCP = struct.Struct("<BBHI")

_STATUS_BITS = RES_EPOCH - 1  # of a RES/IND type byte: bit 7 is IND, bit 6 the RES epoch
_TX_BY_CODE: list[Tx | None] = [None] * 128
for _tx in Tx:
    _TX_BY_CODE[_tx] = _tx
_STATUS_BY_CODE: list[Status | int] = list(range(128))
for _st in Status:
    _STATUS_BY_CODE[_st] = _st
_OP_BY_CODE: dict[int, Op] = {op.value: op for op in Op}
_RESERVED_IRIS = tuple(IRI(w) for w in RESERVED_WORDS)

ST_ALLOWED = frozenset(int(m) for m in MEMBER_TYPES["s"])  # no Literal subject
PT_ALLOWED = frozenset(int(m) for m in MEMBER_TYPES["p"])
OT_ALLOWED = frozenset(int(m) for m in MEMBER_TYPES["o"])


def header_size(transport: Transport, indication: bool = False, epoch: bool = False) -> int:
    """Bytes before the Data field; `epoch`: a UDP RES naming its request's epoch (§15.6)."""
    if transport is TCP:
        return 8
    return 6 if indication else 8 if epoch else 4


def tcp_frame_length(buf: bytes | bytearray | memoryview) -> int | None:
    """Length of the TCP message at the start of `buf`, or None until 8 bytes are there."""
    if len(buf) < 8:
        return None
    length = _U32.unpack_from(buf, 4)[0]
    if length < 8:
        raise DecodeError(Status.INVALID_DATA_FORMAT, f"TCP Length {length} < 8", "header.length",
                          _U16.unpack_from(buf, 2)[0])
    return length


def _is_tcp(transport: Transport) -> bool:
    """For the C module, which takes the transport as a flag (a str such as "tcp" works too)."""
    return transport is TCP or (transport is not UDP and Transport(transport) is TCP)


def peek_tid(buf: bytes) -> int | None:
    """The Transaction ID of a message, if it has one (for answering undecodable REQs)."""
    return _U16.unpack_from(buf, 2)[0] if len(buf) >= 4 else None
