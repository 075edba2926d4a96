"""The SIB's TCP message layer, `TcpSIBSession`: one Length-framed stream per connection
(`ksp.framing`), no duplicates, no ACKs."""
from __future__ import annotations

from collections import deque
from collections.abc import Hashable

from ..codec import TCP, Transport
from ..delivery import Delivery
from ..framing import DEFAULT_MAX_TCP_MESSAGE, FRAME as _FRAME, OVERSIZE as _OVERSIZE, FrameReader
from .events import KPIdentity, ProtocolError, oversize_error
from .sib import SIBSession

__all__ = ["TcpSIBSession"]


class TcpSIBSession(SIBSession):
    """The SIB's TCP message layer: one stream per connection (each its own endpoint handle),
    cut into messages by their Length field (`ksp.framing`); no duplicates, no ACKs, an IND
    delivered or its connection gone (then `KPUnreachable`); a request waits behind one of its
    stream held for a verdict, so the stream keeps its order."""

    DEFAULT_MAX_MESSAGE = DEFAULT_MAX_TCP_MESSAGE

    def __init__(self, transport: Transport | str = TCP, **kwargs) -> None:
        if Transport(transport) is not TCP:
            raise ValueError("a TcpSIBSession is a TCP session")
        self._streams: dict[Hashable, bytearray] = {}
        self._readers: dict[Hashable, FrameReader] = {}
        super().__init__(TCP, **kwargs)

    def data_to_send(self) -> list[tuple[bytes, Hashable]]:
        """(bytes, connection) pairs, one per connection with something to send."""
        out = [(bytes(buf), conn) for conn, buf in self._streams.items() if buf]
        self._streams.clear()
        return out

    def receive_data(self, data: bytes, conn: Hashable, now: float) -> None:
        """Bytes of connection `conn` (any hashable handle), in any pieces; b"" = closed."""
        if not data:
            self.connection_lost(conn)
            return
        self._expire(now)
        reader = self._readers.get(conn)
        if reader is None:
            reader = self._readers[conn] = FrameReader(self.max_message_size)
        for item in reader.feed(data):
            if item[0] == _FRAME:
                self._on_message(item[1], conn, now)
            elif item[0] == _OVERSIZE:
                event = oversize_error(item[1], item[2], self.max_message_size, conn)
                self._reject(event)
            else:
                exc = item[1]
                self._reject(ProtocolError(exc.status, str(exc), exc.tid, conn, fatal=True))

    def buffered(self, conn: Hashable) -> int:
        """Bytes of an unfinished message held for connection `conn` (for a server's bound
        on buffered bytes, and its slow-frame timeout)."""
        reader = self._readers.get(conn)
        return len(reader.buf) if reader is not None else 0

    def connection_lost(self, conn: Hashable) -> None:
        """Forget connection `conn`: INDs for KPs last seen there report KPUnreachable."""
        self._readers.pop(conn, None)
        self._streams.pop(conn, None)
        if any(item[1] == conn for item in self._held):
            self._held = deque(item for item in self._held if item[1] != conn)

    def _out(self, data: bytes, addr: Hashable) -> None:
        if addr in self._readers:  # else the connection is gone: nowhere to send
            self._streams.setdefault(addr, bytearray()).extend(data)

    def _deliver(self, key: tuple[KPIdentity, int], d: Delivery, addr: Hashable, data: bytes,
                 now: float) -> None:
        self._send(data, addr)
        if d.final:
            self.end_persistent(*key)

    def _reachable(self, addr: Hashable) -> bool:
        return addr in self._readers

    def _behind_held(self, addr: Hashable) -> bool:
        return any(item[1] == addr for item in self._held)
