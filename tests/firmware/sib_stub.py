"""A minimal SIB for the firmware's CPython tests: a real UDP socket on loopback that decodes
each REQ/ACK with the reference codec (`ksp`) and answers through a policy function. It stands
in for the SIB's transport only — what is under test is the firmware on the other side."""
from __future__ import annotations

import socket
import threading

from ksp import Ack, AskResult, Request, Response, SelectResult, Status, Tx, decode_kp_message, encode


class UdpSib:
    def __init__(self, answer=None):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.05)
        self.port = self.sock.getsockname()[1]
        self.received: list = []  # (message, addr)
        self.answer = answer or (lambda req: Response(req.tid))
        self.peer = None
        self._stop = threading.Event()
        self._thread = None

    # -- driven from the test thread
    def recv(self, timeout: float = 10.0):
        self.sock.settimeout(timeout)
        data, addr = self.sock.recvfrom(65535)
        self.peer = addr
        return decode_kp_message(data), data

    def recv_nowait(self):
        self.sock.setblocking(False)
        try:
            data, addr = self.sock.recvfrom(65535)
        except BlockingIOError:
            return None
        self.peer = addr
        return decode_kp_message(data)

    def send(self, msg, addr=None) -> None:
        self.sock.sendto(encode(msg) if not isinstance(msg, bytes) else msg, addr or self.peer)

    # -- or answering by itself in a thread
    def start(self) -> "UdpSib":
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        return self

    def _serve(self) -> None:
        self.sock.settimeout(0.05)
        while not self._stop.is_set():
            try:
                data, addr = self.sock.recvfrom(65535)
            except (TimeoutError, socket.timeout):
                continue
            msg = decode_kp_message(data)
            self.received.append(msg)
            self.peer = addr
            if isinstance(msg, Request):
                reply = self.answer(msg)
                if reply is not None:
                    self.sock.sendto(encode(reply), addr)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        self.sock.close()


def ok_answer(req: Request) -> Response:
    """OK to everything; an empty result for queries."""
    base = Tx(req.tx).base
    if base is Tx.SELECT:
        return Response(req.tid, Status.OK, SelectResult(req.projection or 0, (), 0, ()))
    if base is Tx.ASK:
        return Response(req.tid, Status.OK, AskResult(False))
    return Response(req.tid)


__all__ = ["UdpSib", "ok_answer", "Ack"]
