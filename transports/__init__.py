"""KSP transports: thin asyncio adapters (TCP, UDP, CoAP) around the sans-I/O core in ksp, and
the Python KP client (`transports.connect`). CoAP needs aiocoap (the `coap` extra), imported
only when a `coap://` URL is connected or a CoAP listener starts."""
from ksp.service import Channel, Service

from .client import KP, Indication, Row, SelectRows, Subscription, Triples, connect
from .errors import (
    ClientError, KspConnectionError, KspProtocolError, KspStatusError, KspTimeout,
    KspUsageError, SubscriptionLost,
)
from .server import Server, TcpServer, UdpServer
from .statements import CompileCache, Statement

__all__ = [
    "connect", "KP", "Statement", "CompileCache", "Subscription", "Indication", "SelectRows", "Row",
    "Triples", "ClientError", "KspStatusError", "KspTimeout", "KspConnectionError",
    "KspProtocolError", "KspUsageError", "SubscriptionLost",
    "Server",
    "UdpServer", "TcpServer", "CoapServer", "Channel", "Service",
]


def __getattr__(name: str):
    if name == "CoapServer":  # aiocoap on first use (the `coap` extra)
        from .coap import CoapServer
        return CoapServer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
