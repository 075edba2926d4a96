"""KSP transports: thin asyncio adapters (TCP, UDP, CoAP) around the sans-I/O core in ksp, and
the Python KP client (`transports.connect`)."""
from .client import KP, Indication, Row, SelectRows, Subscription, connect
from .errors import ClientError, KspConnectionError, KspProtocolError, KspStatusError, KspTimeout
from .server import CoapServer, Server, TcpServer, UdpServer
from .service import Channel, Service

__all__ = [
    "connect", "KP", "Subscription", "Indication", "SelectRows", "Row", "ClientError",
    "KspStatusError", "KspTimeout", "KspConnectionError", "KspProtocolError", "Server",
    "UdpServer", "TcpServer", "CoapServer", "Channel", "Service",
]
