# Sealed KSP messages on the board (docs/wire-format.md section 13). Imported only when the
# config has a key. MicroPython has hashlib.sha256 but no hmac: HMAC is built here.
from hashlib import sha256


def hmac(k, m):
    k = bytes(x ^ 0x36 for x in k) + b"6" * 32, bytes(x ^ 0x5C for x in k) + b"\\" * 32
    h = sha256(k[0])
    h.update(m)
    h2 = sha256(k[1])
    h2.update(h.digest())
    return h2.digest()


class Sealer:
    # ctr: next counter to send (kept in RTC memory across deep sleep, 13.5). With a board,
    # counters come in blocks of 1024 whose end is written to its flash before the first is
    # used (board.save_counter), so a cold boot starts past every counter ever sent.
    def __init__(self, key, kp_id, ctr=0, board=None):
        self.out = hmac(key, b"ksp-seal kp->sib")
        self.inn = hmac(key, b"ksp-seal sib->kp")
        self.id = kp_id
        self.board = board
        self.ctr = self.limit = board.load_counter() if board else ctr
        self.hi = -1
        self.bits = 0

    def seal(self, msg):
        if self.board and self.ctr >= self.limit:
            self.limit = self.ctr + 1024
            self.board.save_counter(self.limit)
        # past 0xFFFFFFFF to_bytes raises OverflowError: the KP needs a new key (13.2)
        b = b"\xa1" + self.id + self.ctr.to_bytes(4, "little") + msg
        self.ctr += 1
        return b + hmac(self.out, b)[:8]

    def open(self, d):
        # The inner message, or None (not sealed, other KP, bad tag, replay: dropped).
        if len(d) < 29 or d[0] != 0xA1 or d[1:17] != self.id:
            return None
        b = bytes(d[:-8])
        if hmac(self.inn, b)[:8] != bytes(d[-8:]):
            return None
        c = int.from_bytes(b[17:21], "little")
        o = self.hi - c
        if o < 0:
            self.bits = (self.bits << -o | 1) & 0xFFFFFFFFFFFFFFFF if o > -64 else 1
            self.hi = c
        elif o > 63 or self.bits >> o & 1:
            return None
        else:
            self.bits |= 1 << o
        return b[21:]
