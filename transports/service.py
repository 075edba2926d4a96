"""Re-export of the `Service`/`Channel` seam, which lives in `ksp/service.py` (so `sib/` can import
it without importing `transports/`)."""
from ksp.service import Channel, Service

__all__ = ["Channel", "Service"]
