"""KSP sessions, sans-I/O: request matching, retransmission, duplicate detection, IND delivery.

Theory of operation
-------------------
A session is a state machine driven by three inputs only: API calls (`send`; `respond`,
`indicate`), bytes received (`receive_datagram` over UDP, `receive_data` over TCP) and the clock
(`handle_timer(now)`). It answers with three outputs: bytes to transmit (`datagrams_to_send(now)`
/ `data_to_send()`), events (`next_event()`, frozen dataclasses) and the time it next wants to
be woken (`get_timer()`). It never reads a clock, opens a socket or sleeps; `now` is any
monotonic time in seconds. An adapter, after every input::

    while (event := session.next_event()) is not None:
        handle(event)                       # may call send / respond / indicate
    for datagram in session.datagrams_to_send(now):
        sock.sendto(datagram, sib_addr)     # SIBSession: (datagram, addr) pairs
    rearm(session.get_timer())              # when it fires: session.handle_timer(loop.time())

Both sides stand on the transaction layer every transport shares (`ksp.transactions`: RES
matching, the persistent lifecycle, the NON rule, MAX RESPONSE SIZE, IND numbering in one
`ksp.delivery.Delivery` per operation, TIDs and the stale-IND rule); this package holds the
message layers under it: `UdpKPSession` and `UdpMessageLayer` (CON retransmission with
back-off, ACKs, the duplicate cache, sealing) and `TcpKPSession` and `TcpMessageLayer`
(framing, `ksp.framing`). `KPSession(transport)` and `SIBSession(transport)` build the one for
the transport; a SIB session holds its message layer as an object keeping the contract of
`SibMessageLayer` (`ksp.session.layer`), which the CoAP server implements too.

`KPSession` is the client: one per KP and transport endpoint. It allocates Transaction IDs,
remembers which transaction type each pending TID answers (the RES Data field depends on it),
retransmits CON requests over UDP with CoAP's exponential back-off (RFC 7252 §4.2), ACKs every
UDP IND and delivers only newer ones (§9 serial arithmetic).

`SIBSession` is the server: one per UDP socket, or one for all the TCP connections of a listener.
It keys everything on the KP identity (R12: the CREDENTIALS KP ID, else the transport address),
surfaces each request once (a retransmission within EXCHANGE_LIFETIME gets the cached RES, or
nothing while the first copy is still executing), answers undecodable input itself, numbers
INDs and retransmits the newest unacknowledged one until an ACK covers it (R10).

Every table is bounded; the oldest entry goes first. State machines, timers and defaults:
docs/sessions.md.

Modules, one role each: `timing` (retransmission parameters, the deadline heap), `options`
(the bounds of a SIB session's tables, `SessionOptions`), `events` (what a session reports,
the KP identity), `kp` (the KP side and its UDP and TCP message layers), `dedup` (the SIB's
duplicate cache), `sib` (the SIB side), `layer` (the contract between the SIB session and its
message layer, `SibMessageLayer`), `sib_udp` and `sib_tcp` (the SIB's UDP and TCP message
layers, and the sessions over them).
"""
from __future__ import annotations
from __future__ import annotations

from ..delivery import MAX_UDP_PAYLOAD
from ..framing import DEFAULT_MAX_TCP_MESSAGE
from ..transactions import SessionError, TidsBusy
from ..transactions import _Persistent  # noqa: F401  (where tests plant a kept TID)
from .dedup import DuplicateCache
from .events import (
    AckReceived, Authenticate, CredentialsPending, Event, IndicationReceived, KPIdentity,
    KPUnreachable, PersistentEnded, ProtocolError, RequestReceived, RequestRefused,
    PersistentLost, RequestRetried, RequestTimedOut, ResponseReceived,
)
from .kp import KPSession, TcpKPSession, UdpKPSession
from .layer import SibMessageLayer
from .options import SessionOptions
from .sib import SessionStats, SIBSession
from .sib_tcp import TcpMessageLayer, TcpSIBSession
from .sib_udp import UdpMessageLayer, UdpSIBSession
from .timing import Timing

__all__ = [
    "Timing", "KPIdentity", "KPSession", "SIBSession", "SessionError", "MAX_UDP_PAYLOAD",
    "DEFAULT_MAX_TCP_MESSAGE", "Event", "ResponseReceived", "IndicationReceived",
    "RequestTimedOut", "PersistentEnded", "ProtocolError", "RequestReceived", "AckReceived",
    "KPUnreachable", "SessionStats", "DuplicateCache", "Authenticate", "CredentialsPending",
    "RequestRefused", "RequestRetried", "PersistentLost", "UdpKPSession", "TcpKPSession", "UdpSIBSession",
    "TcpSIBSession",
    "TidsBusy", "SibMessageLayer", "UdpMessageLayer", "TcpMessageLayer", "SessionOptions",
]
