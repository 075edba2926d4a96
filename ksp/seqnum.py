"""The IND sequence-number rule (the paper's equation 1, read modulo 2^16: §9)."""
from __future__ import annotations

HALF = 0x8000


def is_newer(seq: int, last: int | None) -> bool:
    """Whether IND `seq` is to be delivered after IND `last` (None: nothing delivered yet).

    Discards d = (seq − last) mod 2^16 equal to 0 (a retransmission) or above 2^15 (older, also
    across the 65535 → 0 wrap); accepts 1 ≤ d ≤ 2^15.
    """
    if last is None:
        return True
    d = (seq - last) & 0xFFFF
    return 0 < d <= HALF


def next_seq(seq: int) -> int:
    """The sequence number after `seq` (1, 2, …, 65535, 0, 1, …)."""
    return (seq + 1) & 0xFFFF


FIRST_SEQ = 1
