"""The size of asyncio's reads on the KSP sockets.

asyncio's selector transports read each datagram (and each TCP `recv`) into a fresh bytes
object of `max_size`, 256 KiB, then shrink it to what arrived. That is above glibc's initial
mmap threshold (128 KiB), so every read cost an mmap, an mremap and an munmap, with their page
faults, until the threshold happened to rise (glibc raises it to the largest mmapped block
freed; importing aiocoap did that as a side effect). With the reads below, a KSP/UDP round
trip in a process without aiocoap and paho took half as long (docs/benchmarks.md, `ksp bench
transport --no-coap --no-mqtt`).
"""
from __future__ import annotations

import asyncio

READ_SIZE = 65536
"""Bytes per read: any UDP datagram fits (65,507 payload bytes over IPv4, 65,527 over IPv6), and
it is below the mmap threshold. A TCP message larger than it arrives in several reads."""


def small_reads(transport: asyncio.BaseTransport) -> None:
    """Read at most `READ_SIZE` bytes at a time (asyncio's selector transports; other event
    loops, such as uvloop's, read into buffers of their own and are left alone)."""
    if getattr(transport, "max_size", 0) > READ_SIZE:
        transport.max_size = READ_SIZE  # type: ignore[attr-defined]
