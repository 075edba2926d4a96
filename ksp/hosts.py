"""Which clients count as one party for the per-address limits: the transports' connection
limits (`transports.limits`) and the SIB's shares (`sib.fairness`) key on it, so both need it
from below them."""
from __future__ import annotations

import functools
import ipaddress
from collections.abc import Hashable

__all__ = ["address_key"]


@functools.lru_cache(maxsize=4096)  # parsing IPv6 costs ~12 µs, and it runs per KSP request
def address_key(host: Hashable) -> Hashable:
    """What connections count against per address: an IPv4 address as it is, an IPv6 one as its
    /64 network (an IPv4-mapped one as the IPv4 address); anything else (None, a name) as is."""
    if not isinstance(host, str) or ":" not in host:
        return host
    try:
        ip = ipaddress.IPv6Address(host)
    except ValueError:
        return host
    if ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return f"{ipaddress.IPv6Address(int(ip) >> 64 << 64)}/64"
