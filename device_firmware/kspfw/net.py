"""Sockets and Wi-Fi for the client: a UDP or TCP link to the SIB, non-blocking, reading into
one preallocated buffer, and reconnection after Wi-Fi loss. Not imported by the codec (the
WebAssembly MicroPython the tests use has no `socket`)."""
import socket
import struct

import select

_AGAIN = (11, 35, 115)  # EAGAIN, EWOULDBLOCK (BSD), EINPROGRESS

class Link:
    """The SIB endpoint over UDP (one datagram = one message) or TCP (Length-framed).
    `recv()` returns a memoryview of the next whole message, or None when there is none yet."""

    def __init__(self, host, port, tcp=False, bufsize=1024):
        self.tcp = tcp
        self.buf = bytearray(bufsize)
        self.view = memoryview(self.buf)
        self.have = 0  # TCP: bytes of the current frame in buf
        self.skip = 0  # TCP: bytes of an oversized frame still to discard
        addr = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM if tcp else socket.SOCK_DGRAM)
        self.addr = addr[0][-1]
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM if tcp else socket.SOCK_DGRAM)
        if tcp:
            self.sock.settimeout(10)
            self.sock.connect(self.addr)
        self.sock.setblocking(False)
        self._readinto = getattr(self.sock, "recv_into", None) or getattr(self.sock, "readinto")
        self.poller = select.poll()
        self.poller.register(self.sock, select.POLLIN)

    def send(self, msg):
        if not self.tcp:
            self.sock.sendto(msg, self.addr)
            return
        view = memoryview(msg)
        while view:
            try:
                n = self.sock.send(view)
            except OSError as e:
                if e.args[0] not in _AGAIN:
                    raise
                n = 0
                self.poller.poll(100)
            view = view[n or 0:]

    def wait(self, ms):
        """Block up to `ms` for input; True if something arrived."""
        return bool(self.poller.poll(max(0, ms)))

    def _read(self, view):
        """Bytes read into `view`; None when nothing is waiting; OSError at EOF."""
        try:
            n = self._readinto(view)
        except OSError as e:
            if e.args[0] in _AGAIN:
                return None
            raise
        if n == 0 and self.tcp:
            raise OSError(104, "connection closed")
        return n

    def recv(self):
        if not self.tcp:
            n = self._read(self.buf)
            return self.view[:n] if n else None
        while True:
            if self.skip:  # a frame larger than the buffer (than MAX RESPONSE SIZE): dropped
                n = self._read(self.view[:min(self.skip, len(self.buf))])
                if n is None:
                    return None
                self.skip -= n
                continue
            want = 8 if self.have < 8 else struct.unpack_from("<I", self.buf, 4)[0]
            if want < 8:
                raise OSError(104, "bad TCP framing")
            if want > len(self.buf):
                self.skip, self.have = want - self.have, 0
                continue
            if self.have == want:
                self.have = 0
                return self.view[:want]
            n = self._read(self.view[self.have:want])
            if n is None:
                return None
            self.have += n

    def close(self):
        self.sock.close()


def wifi(ssid, password, timeout_ms=20000):
    """Connect the station interface (no-op when connected); returns it, or raises OSError."""
    import network  # noqa: PLC0415  (boards only)
    import time

    wlan = network.WLAN(network.STA_IF)
    wlan.active(True)
    if not wlan.isconnected():
        print("wifi: connecting to", ssid)
        wlan.connect(ssid, password)
        start = time.ticks_ms()
        while not wlan.isconnected():
            if time.ticks_diff(time.ticks_ms(), start) > timeout_ms:
                raise OSError(110, "Wi-Fi connection timed out")
            time.sleep_ms(200)
        print("wifi: connected", wlan.ifconfig()[0])
    return wlan
