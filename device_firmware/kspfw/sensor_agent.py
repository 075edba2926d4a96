"""The sensor agent: every period, each configured sensor's reading replaces the previous one in
the SIB (UPDATE DATA: delete the value sent last, insert the new one, as xsd:float). Optionally
it deep-sleeps between readings; its KSP state (next TID, persistent transactions) and the last
values survive in the board's state, so a wake-up neither RESETs nor re-subscribes. With
"period_property" it subscribes (SELECT_PERSISTENT) to its own sampling period in the SIB; a
sleeping one stays awake "listen_ms" after its readings for the INDs (the SIB sends them to the
board's new address only when it retransmits)."""
from .agent import Agent, due_in, later
from .codec import ECHO_REQUIRED, XSD_FLOAT, Lit

UPDATE_DATA = 0x03
DELETE = 0x04
SELECT_PERSISTENT = 0x0D


class SensorAgent(Agent):
    def __init__(self, cfg, board):
        Agent.__init__(self, cfg, board)
        self.readers = [(s["property"], board.sensor(s)) for s in cfg["sensors"]]
        self.period = cfg["period_s"] * 1000
        self.last = {}  # property -> lexical form of the value the SIB holds
        self.due = None
        self.synced = False
        self.in_flight = None
        self.rest = None  # ticks after which to deep sleep, once no RES is awaited

    def begin(self):
        """Cold start: drop whatever values of ours the SIB holds, then report."""
        dev = self.cfg["device"]
        for t in [(dev, prop, 0) for prop, _ in self.readers]:  # one DELETE per property, so a missing one does not block the rest
            self.request(DELETE, self._synced, graphs=([t], [t]))
        self.subscribe()

    def subscribe(self):
        """The period subscription, unless one is running (a resync keeps it)."""
        prop = self.cfg.get("period_property")
        if prop and SELECT_PERSISTENT not in [p[0] for p in self.client.persistent.values()]:
            self.request(SELECT_PERSISTENT, self._period, vc=1,
                         graphs=([(self.cfg["device"], prop, 0)],))

    def resume(self, state):
        self.last = state.get("last", {})
        self.period = state.get("period", self.period)
        self.synced = True
        for tid, p in self.client.persistent.items():  # INDs of the kept subscription
            if p[0] == SELECT_PERSISTENT:
                self.calls[tid] = self._period

    def _synced(self, kind, r):
        if kind == "res" and not r.status:
            self.synced = True

    def _period(self, kind, r):
        # Lost, ended by the SIB, or its retry refused too (an echo value from before a SIB
        # restart): subscribe again.
        if kind in ("timeout", "end") or r.status == ECHO_REQUIRED:
            self.subscribe()
            return
        rows = getattr(r.result, "rows", None) if r is not None and not r.status else None
        if rows and rows[0][0] is not None:
            try:
                self.period = max(1, int(float(rows[0][0].value))) * 1000
            except (AttributeError, ValueError):
                print("sensor: ignoring period", rows[0][0])

    def read(self):
        from .floats import float32  # loaded by the first reading, as the codec loads it

        values = {}
        for prop, read in self.readers:
            try:
                values[prop] = float32(read())
            except (OSError, ValueError) as e:  # skip this sensor for this reading
                print("sensor: reading %s failed: %s" % (prop, e))
        return values

    def tick(self, now):
        if self.rest is not None:
            return self.idle(now)
        if self.due is None:
            self.due = now
        if not self.synced and not self.client.pending and not due_in(now, self.due):
            self.due = later(now, self.period)  # the resync failed: again, once a period
            self.begin()
        if not self.synced or self.in_flight is not None:
            return 200 if self.in_flight is None else 1000
        if due_in(now, self.due):
            return due_in(now, self.due)
        self.due = later(now, self.period)
        values = self.read()
        if values:
            self.send(values)
        elif self.cfg["deep_sleep"]:
            self.sleep()
        return self.period

    def send(self, values):
        dev = self.cfg["device"]
        old = [(dev, p, Lit(v, XSD_FLOAT)) for p, v in self.last.items() if p in values]
        new = [(dev, p, Lit(v, XSD_FLOAT)) for p, v in values.items()]
        self.in_flight = values
        if self.request(UPDATE_DATA, self._sent, graphs=(old, new)) is None:
            self.in_flight = None  # not sent: this reading is skipped, the next period sends

    def _sent(self, kind, r):
        values, self.in_flight = self.in_flight or {}, None
        if kind == "res" and r is not None and not r.status:
            self.last.update(values)
        else:  # unknown what the SIB holds now: start over with a clean slate
            self.synced = False
            self.last = {}
            self.begin()
        if self.cfg["deep_sleep"] and self.synced:
            now = self.board.ticks_ms()
            self.rest = later(now, self.cfg["listen_ms"])
            self.idle(now)

    def idle(self, now):
        """Deep sleep after listening `listen_ms` for INDs, once no request awaits its RES (a
        subscription whose RES was lost must not be taken for running after the wake-up)."""
        wait = due_in(now, self.rest)
        if wait or self.client.pending:
            return wait or 200
        self.sleep()
        return self.period

    def sleep(self):
        self.rest = None
        self.save({"last": self.last, "period": self.period})
        self.board.deep_sleep(self.period)
