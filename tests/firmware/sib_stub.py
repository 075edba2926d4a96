"""A minimal SIB for the firmware's CPython tests: a real UDP socket on loopback that decodes
each REQ/ACK with the reference codec (`ksp`) and answers through a policy function. It stands
in for the SIB's transport only — what is under test is the firmware on the other side. As a
SIB does (wire format 15.6), a RES it sends names the epoch of the last request it received
under that TID."""
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
        self.epochs: dict[int, int] = {}  # TID -> the epoch of the last request under it
        self._stop = threading.Event()
        self._thread = None

    # -- driven from the test thread
    def recv(self, timeout: float = 10.0):
        self.sock.settimeout(timeout)
        data, addr = self.sock.recvfrom(65535)
        self.peer = addr
        return self._heard(decode_kp_message(data)), data

    def recv_nowait(self):
        self.sock.setblocking(False)
        try:
            data, addr = self.sock.recvfrom(65535)
        except BlockingIOError:
            return None
        self.peer = addr
        return self._heard(decode_kp_message(data))

    def send(self, msg, addr=None) -> None:
        self.sock.sendto(self._named(encode(msg) if not isinstance(msg, bytes) else msg),
                         addr or self.peer)

    def _heard(self, msg):
        if isinstance(msg, Request) and msg.tx != Tx.TERMINATE:
            self.epochs[msg.tid] = msg.options.epoch or 0
        return msg

    def _named(self, data: bytes) -> bytes:
        """A RES `data` naming the epoch of the request under its TID (none for epoch 0)."""
        if len(data) < 4 or data[1] & 0xC0 or data[1] == Status.NUMBER_BEHIND:
            return data
        epoch = self.epochs.get(int.from_bytes(data[2:4], "little"), 0)
        if not epoch:
            return data
        return (data[:1] + bytes([data[1] | 0x40]) + data[2:4] + epoch.to_bytes(4, "little")
                + data[4:])

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
            msg = self._heard(decode_kp_message(data))
            self.received.append(msg)
            self.peer = addr
            if isinstance(msg, Request):
                reply = self.answer(msg)
                if reply is not None:
                    self.sock.sendto(self._named(encode(reply)), addr)

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
