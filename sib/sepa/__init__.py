"""The SIB's SEPA gate: SPARQL 1.1 Protocol (HTTP) and SE Protocol (WebSocket) on the SIB's
store and scheduler (docs/sepa.md). `gate.py` speaks HTTP and WebSocket (aiohttp),
`broker.py` runs queries, updates and subscriptions on the core, `update.py` turns any SPARQL
1.1 Update into exact deltas."""
from .broker import SepaBroker, SepaError
from .gate import GateLimits, GateListen, SepaGate

__all__ = ["GateLimits", "GateListen", "SepaBroker", "SepaError", "SepaGate"]
