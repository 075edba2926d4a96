"""A threaded HTTP server with a bound on its connections, for the ingest's two listeners (a
shard's `ksp-ingest-shard` server and the metrics endpoint): each connection is a thread, so
the bound is on threads too. A connection over it is closed unanswered (`busy` counts them);
a handler's `timeout` (seconds a read may wait) gives a silent connection's slot back."""
from __future__ import annotations

import socket
import threading
from http.server import ThreadingHTTPServer


class BoundedHTTPServer(ThreadingHTTPServer):
    """`BoundedHTTPServer(address, handler_class, max_connections=16)`; `serve_forever()` in a
    thread, `shutdown()` at the end."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler, *, max_connections: int = 16) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.busy = 0  # connections closed for want of a slot
        self._slots = threading.BoundedSemaphore(max_connections)
        super().__init__(address, handler)

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):
            self.busy += 1
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)  # its thread releases the slot
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()
