"""The KSP client of a board: matches RESs to requests, retransmits CON requests over UDP, ACKs
INDs and drops stale ones. Sans-I/O like `ksp/session/` (docs/sessions.md), small.

The link (net.py, or a test's) has `send(bytes)`; received messages go in through
`feed(buf, now)` and the clock through `poll(now)` (ms ticks). Outcomes go to `handler(kind,
tid, response)`, kind one of "res", "ind", "timeout", "end" (a persistent transaction ended by
the SIB or by our TERMINATE/RESET), or "retry" with the new TID in place of the response.
Timing is CoAP's, like KPSession's: first timeout uniform in [ack_timeout, 1.5 × ack_timeout],
doubled per retransmission, give up after `max_retransmit`.

ECHO REQUIRED (a SIB that has not validated our address, or, sealed, keeps no replay window for
us): the request is sent again once, with the RES's value as its ECHO option, under a new TID
(TERMINATE: its target's, the only one it may carry), and "retry" tells the caller the TID its
outcome will come under; a second ECHO REQUIRED is the request's outcome. A copy of the first
request still on its way (a retransmission, a datagram the network duplicated or delayed) starts
it at the SIB once the retry has validated the address: a persistent request's first TID is
watched (the last `_RETIRED`), and a RES OK or an IND under it is answered with its TERMINATE,
so the SIB is left no subscription whose INDs nobody ACKs (it would give up on the KP, and end
its other ones with it).

Over UDP each request has a number (wire format 15): an epoch (the EPOCH option) above its TID,
counting up; a board's identity is its KP ID, which outlives a cold boot, so the count starts at
a random epoch then, and goes on from the saved one across deep sleep (`state`). A NUMBER BEHIND
RES naming the pending request's epoch moves the count to the epoch the SIB names and sends the
request again once ("retry"); one naming another epoch answers an earlier request's late copy
and is ignored.

A persistent transaction silent for `keepalive` ms gets a keepalive (a bare ACK, §2.4), sent
again twice with the back-off: a RES OK or any IND means it runs; a RES 0x0b, or no answer at
all, ends it ("end", the agents subscribe again), so a board that only listens learns within a
minute that the SIB ended its subscription or is gone.
"""
import random

from micropython import const

from . import codec

_TX = const(0)  # pending entry fields
_MSG = const(1)
_DUE = const(2)
_WAIT = const(3)
_LEFT = const(4)
_REQ = const(5)  # the codec.request arguments, for the ECHO retry
_PERIOD = const(0x40000000)  # MicroPython's time.ticks_ms() wraps at 2^30 ms on the boards
_HALF = const(0x20000000)
_RETIRED = const(2)  # first TIDs of persistent requests sent again with the ECHO, watched
_EPOCH = const(6)  # the epoch of the request's number (-1: none, TERMINATE)
_AGAIN = const(7)  # sent again after NUMBER BEHIND: another is its outcome
_UNKNOWN = const(0x0B)


class NoTid(OSError):
    """No transaction ID may be used now (every one pending or persistent): nothing was sent;
    try again later."""


def ticks_add(a, b):
    return (a + b) & (_PERIOD - 1)


def ticks_diff(a, b):
    """a - b for ticks that wrap at 2^30 (time.ticks_diff without importing time)."""
    return ((a - b + _HALF) & (_PERIOD - 1)) - _HALF


def is_newer(seq, last):
    """§9: deliver IND `seq` after `last` (None: none yet) iff 1 <= (seq - last) mod 2^16 <= 2^15."""
    return last is None or 0 < (seq - last) & 0xFFFF <= 0x8000


class Client:
    def __init__(self, link, handler, tcp=False, ack_timeout=2000, max_retransmit=4,
                 rand=random.getrandbits, lifetime=247000, sealer=None, keepalive=25000):
        self.link = link
        self.sealer = sealer  # secure.Sealer: every datagram out sealed, only sealed ones in
        self.handler = handler
        self.tcp = tcp
        self.ack_timeout = ack_timeout
        self.max_retransmit = max_retransmit
        self.lifetime = lifetime
        self.rand = rand
        # tid -> [tx, bytes or None, due, wait, retransmissions left, request arguments]
        self.pending = {}
        self.persistent = {}  # tid -> [tx, last seq delivered or None]
        self.retired = []  # [first TID, credentials] of requests sent again, newest last
        self.tid = rand(16)
        self.epoch = 0 if tcp else rand(31) or 1  # TCP numbers nothing
        self.keepalive = keepalive
        self.heard = {}  # persistent tid -> ticks of its last RES OK or IND
        self.probes = {}  # persistent tid -> [due, wait, retransmissions left]

    def next_tid(self, now=0):
        """The TID of the next request number whose TID is free (the epoch counts the
        wraps)."""
        t = self.tid
        for _ in range(0x10000):
            t = (t + 1) & 0xFFFF
            if not t:
                self.epoch += 1
            if t not in self.pending and t not in self.persistent:
                self.tid = t
                return t
        raise NoTid("no free transaction ID")

    def send(self, now, tx, con=True, tid=None, **req):
        """Send a REQ (codec.request arguments); returns its TID. TERMINATE takes the target's
        `tid`."""
        if not con and not self.tcp and 0x0A <= tx <= 0x0F:
            raise ValueError("persistent requests go CON over UDP (wire format 14.4)")
        if tid is None:
            tid = self.next_tid(now)
        elif tid in self.pending or tid in self.persistent and tx != codec.TERMINATE:
            raise ValueError("TID in use")
        req["con"] = con
        epoch = -1 if tx == codec.TERMINATE or self.tcp else self.epoch
        msg = bytes(codec.request(tx, tid, tcp=self.tcp, epoch=max(epoch, 0), **req))
        self._out(msg)
        if con and not self.tcp:
            wait = self.ack_timeout + (self.ack_timeout * self.rand(8) >> 9)
            self.pending[tid] = [tx, msg, ticks_add(now, wait), wait, self.max_retransmit, req,
                                 epoch, False]
        else:  # NON or TCP: no retransmission; wait a lifetime for a RES that may not come
            self.pending[tid] = [tx, None, ticks_add(now, self.lifetime), 0, 0, req, epoch,
                                 False]
        if 0x0A <= tx <= 0x0F:
            self.persistent[tid] = [tx, None]
        return tid

    def _out(self, msg):
        # Sealed afresh on every retransmission: a new counter, so the SIB's replay window
        # takes it and its duplicate cache answers it (wire format 13.3).
        s = self.sealer
        self.link.send(s.seal(msg) if s else msg)

    def feed(self, buf, now=0):
        """One received message (a datagram, or one whole TCP frame)."""
        if self.sealer:
            buf = self.sealer.open(buf) or b""  # unsealed, forged, replayed: dropped (13.3)
        tid = codec.peek_tid(buf)
        if tid is None or len(buf) < 2:
            return
        if buf[1] & 0x80:
            p = self.persistent.get(tid)
            if p is None:  # unknown transaction: no ACK, so the SIB gives up on it (R13)
                self._stray(tid, now)
                return
            try:
                r = codec.decode(buf, p[0], self.tcp)
            except codec.KspError:
                return
            self._heard(tid, now)
            if r.seq is not None:
                self._out(codec.ack(tid, r.seq))
                if not is_newer(r.seq, p[1]):
                    return
                p[1] = r.seq
            if r.status:
                del self.persistent[tid]
                self.handler("end", tid, r)
            else:
                self.handler("ind", tid, r)
            return
        entry = self.pending.pop(tid, None)
        if entry is None:  # late or duplicate RES, or a keepalive's answer
            if tid in self.probes:  # the status: bits 0-5 when bit 6 names an epoch (15.6)
                self._answered(tid, buf[1] & (0x3F if buf[1] & 0x40 else 0x7F), now)
            elif not buf[1]:  # OK: it started something
                self._stray(tid, now)
            return
        tx = entry[_TX]
        try:
            r = codec.decode(buf, tx, self.tcp)
        except codec.KspError as e:
            r = codec.Response(tid, e.status, False, None, None)
        req = entry[_REQ]
        ep = entry[_EPOCH]
        if ep >= 0 and r.status != codec.NUMBER_BEHIND and (r.epoch or 0) != ep and not (
                r.epoch is None and 1 <= r.status <= 6):
            self.pending[tid] = entry  # an earlier request's late copy answered (15.6)
            return
        if r.status == codec.NUMBER_BEHIND and ep >= 0:
            if r.result[0] != ep:  # an earlier request's late copy: still waiting
                self.pending[tid] = entry
                return
            if not entry[_AGAIN]:
                self.persistent.pop(tid, None)
                if r.result[1] > self.epoch:  # the next number: the first of that epoch
                    self.epoch, self.tid = r.result[1] - 1, 0xFFFF
                try:
                    new = self.send(now, tx, **req)
                except NoTid:
                    pass
                else:
                    self.pending[new][_AGAIN] = True
                    self.handler("retry", tid, new)
                    return
        if r.status == codec.ECHO_REQUIRED and "echo" not in req:
            term = tx == codec.TERMINATE
            try:
                new = self.send(now, tx, tid=tid if term else None, echo=r.result, **req)
            except NoTid:  # not sent again: the caller gets the ECHO REQUIRED
                pass
            else:
                if not term and self.persistent.pop(tid, None) is not None:
                    retired = self.retired
                    retired.append([tid, req.get("credentials", ())])
                    if len(retired) > _RETIRED:
                        retired.pop(0)
                self.handler("retry", tid, new)
                return
        if not r.status and tid in self.persistent:
            self._heard(tid, now)
        if r.status and tid in self.persistent and tx != codec.TERMINATE:
            del self.persistent[tid]  # it never started
        elif tx == codec.TERMINATE and r.status in (0, 0x0B):  # ended, or was already gone
            self._end(tid)
        elif not r.status and tx == codec.RESET:
            for t in list(self.persistent):
                self._end(t)
        self.handler("res", tid, r)

    def _stray(self, tid, now):
        """A RES OK or an IND under a watched first TID: a late copy of that request started
        it at the SIB; TERMINATE it (once)."""
        for r in self.retired:
            if r[0] == tid:
                self.retired.remove(r)
                self.send(now, codec.TERMINATE, tid=tid, credentials=r[1])
                return

    def _end(self, tid):
        if self.persistent.pop(tid, None) is not None:
            self.handler("end", tid, None)

    def _heard(self, tid, now):
        """Persistent `tid` runs (its RES OK, an IND): the keepalive waits again."""
        self.heard[tid] = now
        self.probes.pop(tid, None)

    def _answered(self, tid, status, now):
        """A keepalive's answer: OK, it runs; 0x0b, the SIB has it no more."""
        if not status:
            self._heard(tid, now)
        elif status == _UNKNOWN:
            self.probes.pop(tid, None)
            self._end(tid)

    def _keepalives(self, now):
        """A bare ACK for each persistent transaction silent for `keepalive` ms, sent again with
        the back-off; unanswered, it ends ("end")."""
        if self.tcp or not self.keepalive:
            return
        for tid in list(self.persistent):
            probe = self.probes.get(tid)
            if probe is None:
                if ticks_diff(now, self.heard.setdefault(tid, now)) < self.keepalive:
                    continue
                wait = self.ack_timeout
                probe = self.probes[tid] = [now, wait, 2]
            elif ticks_diff(now, probe[0]) < 0:
                continue
            elif not probe[2]:
                del self.probes[tid]
                self._end(tid)
                continue
            else:
                probe[2] -= 1
                probe[1] *= 2
            probe[0] = ticks_add(now, probe[1])
            self._out(codec.ack(tid, None))
        for tid in [t for t in self.heard if t not in self.persistent]:
            del self.heard[tid]

    def poll(self, now):
        """Retransmit what is due; give up on what has run out; keepalives."""
        self._keepalives(now)
        for tid in [t for t, e in self.pending.items() if ticks_diff(now, e[_DUE]) >= 0]:
            e = self.pending[tid]
            if e[_MSG] is not None and e[_LEFT]:
                e[_LEFT] -= 1
                e[_WAIT] *= 2
                e[_DUE] = ticks_add(now, e[_WAIT])
                self._out(e[_MSG])
                continue
            del self.pending[tid]
            self.persistent.pop(tid, None)
            if e[_MSG] is not None:
                self.handler("timeout", tid, None)

    def next_due(self, now):
        """Milliseconds until `poll` has work (None: nothing pending)."""
        waits = [ticks_diff(e[_DUE], now) for e in self.pending.values()]
        waits += [ticks_diff(p[0], now) for p in self.probes.values()]
        if self.keepalive and not self.tcp:
            waits += [ticks_diff(ticks_add(t, self.keepalive), now) for t in self.heard.values()]
        return max(0, min(waits)) if waits else None

    def state(self):
        """What survives deep sleep: the next TID and the persistent transactions (R12/R13)."""
        st = [[self.tid, self.epoch], [[t, p[0], p[1]] for t, p in self.persistent.items()]]
        s = self.sealer
        if s:  # its counters and replay window, kept in RTC memory across deep sleep (13.5)
            st.append([s.ctr, s.limit, s.hi, s.bits])
        return st

    def restore(self, state):
        self.tid, self.epoch = state[0] if isinstance(state[0], list) else (state[0], self.epoch)
        self.persistent = {t: [tx, seq] for t, tx, seq in state[1]}
        s = self.sealer
        if s and state[2:]:
            s.ctr, s.limit, s.hi, s.bits = state[2]
