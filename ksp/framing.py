"""TCP framing (§2.2): a byte stream cut into KSP messages by the Length field of their header.

The TCP message layer of both sessions (`ksp.session`) reads its stream through a
`FrameReader`; UDP needs none (one datagram, one message). Sans-I/O: bytes in, messages out.
"""
from __future__ import annotations

from .codec import tcp_frame_length
from .wire import _U32
from .errors import DecodeError

__all__ = ["FrameReader", "FRAME", "OVERSIZE", "BROKEN", "DEFAULT_MAX_TCP_MESSAGE"]

DEFAULT_MAX_TCP_MESSAGE = 1 << 20
"""Default cap on a received TCP message (Length field), so a peer cannot make us buffer 4 GiB."""

FRAME, OVERSIZE, BROKEN = 0, 1, 2


class FrameReader:
    """Cuts a TCP byte stream into messages by their Length field (§2.2).

    Yields (FRAME, message), (OVERSIZE, header, length) for a message over `max_size`, which
    is skipped without being buffered, and (BROKEN, DecodeError) for Length < 8, after which the
    stream cannot be resynchronised and every further byte is ignored.
    """

    __slots__ = ("buf", "skip", "max_size", "broken")

    def __init__(self, max_size: int) -> None:
        self.buf = bytearray()
        self.skip = 0
        self.max_size = max_size
        self.broken = False

    def feed(self, data: bytes) -> list[tuple]:
        out: list[tuple] = []
        if self.broken:
            return out
        buf = self.buf
        if not buf and not self.skip and len(data) >= 8:
            # The usual read: whole messages, nothing held. Taken without copying through buf.
            length = _U32.unpack_from(data, 4)[0]
            if 8 <= length <= self.max_size and length == len(data):
                return [(FRAME, bytes(data))]
        if self.skip:
            n = min(self.skip, len(data))
            self.skip -= n
            data = data[n:]
        buf += data
        pos = 0
        while len(buf) - pos >= 8:
            header = bytes(buf[pos:pos + 8])
            try:
                length = tcp_frame_length(header)
            except DecodeError as exc:
                out.append((BROKEN, exc))
                self.broken = True
                buf.clear()
                return out
            if length > self.max_size:
                out.append((OVERSIZE, header, length))
                available = len(buf) - pos
                if available >= length:
                    pos += length
                    continue
                self.skip = length - available
                pos = len(buf)
                break
            if len(buf) - pos < length:
                break
            out.append((FRAME, bytes(buf[pos:pos + length])))
            pos += length
        del buf[:pos]
        return out
