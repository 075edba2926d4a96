"""KP IDs (16 bytes, wire-format §7.5 CREDENTIALS) from what people write: the one rule that
the KP client and the SIB's access policy must share, so a name means the same KP on both."""
from __future__ import annotations

import uuid
from typing import Any

__all__ = ["kp_id_bytes"]


def kp_id_bytes(kp_id: Any) -> bytes:
    """A KP ID (16 bytes): a UUID, its text, 16 raw bytes, or any other name (hashed to a
    UUIDv5, so the same name is always the same KP)."""
    if isinstance(kp_id, uuid.UUID):
        return kp_id.bytes
    if isinstance(kp_id, (bytes, bytearray)):
        if len(kp_id) != 16:
            raise ValueError(f"a KP ID is 16 bytes, got {len(kp_id)}")
        return bytes(kp_id)
    if isinstance(kp_id, str):
        try:
            return uuid.UUID(kp_id).bytes
        except ValueError:
            return uuid.uuid5(uuid.NAMESPACE_URL, "ksp:kp:" + kp_id).bytes
    raise TypeError(f"not a KP ID: {kp_id!r}")
