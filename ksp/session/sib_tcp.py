"""The SIB over TCP: `TcpMessageLayer` (one Length-framed stream per connection, `ksp.framing`;
no duplicates, no ACKs) and `TcpSIBSession`, the session over it with the stream's input."""
from __future__ import annotations

from collections.abc import Hashable

from ..codec import TCP
from ..delivery import Delivery, DeliveryPolicy
from ..framing import DEFAULT_MAX_TCP_MESSAGE, FRAME as _FRAME, OVERSIZE as _OVERSIZE, FrameReader
from .events import KPIdentity, ProtocolError, oversize_error
from .layer import SibMessageLayer
from .sib import SIBSession

__all__ = ["TcpMessageLayer", "TcpSIBSession"]


class TcpMessageLayer(SibMessageLayer):
    """The SIB's TCP message layer: one stream per connection (each its own endpoint handle);
    an IND delivered once written, or its connection gone (then `KPUnreachable`); a request
    waits behind one of its stream held for a verdict, so the stream keeps its order."""

    policy = DeliveryPolicy.STREAMED
    ordered = True

    def __init__(self) -> None:
        #: Bytes to send, per connection; and the reader of each connection's stream (a
        #: connection without one is gone).
        self.streams: dict[Hashable, bytearray] = {}
        self.readers: dict[Hashable, FrameReader] = {}

    def send(self, data: bytes, addr: Hashable, answering: tuple | None = None) -> None:
        out = self.session.seal(data, addr)
        if out is not None and out[1] in self.readers:  # else the connection is gone
            self.streams.setdefault(out[1], bytearray()).extend(out[0])

    def deliver(self, key: tuple[KPIdentity, int], d: Delivery, addr: Hashable, data: bytes,
                now: float) -> None:
        self.send(data, addr)
        if d.final:
            self.session.end_persistent(*key)

    def reachable(self, addr: Hashable) -> bool:
        return addr in self.readers


class TcpSIBSession(SIBSession):
    """The SIB over TCP: the session over a `TcpMessageLayer`, cutting each connection's
    stream into messages by their Length field (`ksp.framing`)."""

    DEFAULT_MAX_MESSAGE = DEFAULT_MAX_TCP_MESSAGE
    LAYER = TcpMessageLayer
    TRANSPORT = TCP

    def data_to_send(self) -> list[tuple[bytes, Hashable]]:
        """(bytes, connection) pairs, one per connection with something to send."""
        streams = self.layer.streams
        out = [(bytes(buf), conn) for conn, buf in streams.items() if buf]
        streams.clear()
        return out

    def receive_data(self, data: bytes, conn: Hashable, now: float) -> None:
        """Bytes of connection `conn` (any hashable handle), in any pieces; b"" = closed."""
        if not data:
            self.connection_lost(conn)
            return
        self.layer.expire(now)
        readers = self.layer.readers
        reader = readers.get(conn)
        if reader is None:
            reader = readers[conn] = FrameReader(self.max_message_size)
        for item in reader.feed(data):
            if item[0] == _FRAME:
                self.receive_message(item[1], conn, now)
            elif item[0] == _OVERSIZE:
                self.reject(oversize_error(item[1], item[2], self.max_message_size, conn))
            else:
                exc = item[1]
                self.reject(ProtocolError(exc.status, str(exc), exc.tid, conn, fatal=True))

    def buffered(self, conn: Hashable) -> int:
        """Bytes of an unfinished message held for connection `conn` (for a server's bound
        on buffered bytes, and its slow-frame timeout)."""
        reader = self.layer.readers.get(conn)
        return len(reader.buf) if reader is not None else 0

    def connection_lost(self, conn: Hashable) -> None:
        """Forget connection `conn`: INDs for KPs last seen there report KPUnreachable."""
        self.layer.readers.pop(conn, None)
        self.layer.streams.pop(conn, None)
        self.drop_held(conn)
