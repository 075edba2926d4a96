"""What every agent does: one KSP client with the board's credentials, a RESET on a cold boot
(R13: IDs from before are forgotten), the persistent transactions kept across deep sleep (their
IDs and sequence numbers in the board's state, R12), and the loop that keeps the link up."""
from . import codec
from .client import Client, NoTid, ticks_add, ticks_diff

_IDLE = 60000


class Agent:
    def __init__(self, cfg, board):
        self.cfg = cfg
        self.board = board
        seal = cfg["kp_key"]
        if seal:  # the authenticated mode (wire format 13): no password, every message sealed
            from .secure import Sealer

            seal = Sealer(seal, cfg["kp_id"], board=board)
        self.client = Client(None, self._event, tcp=cfg["transport"] == "tcp",
                             sealer=seal)
        self.calls = {}  # tid -> function(kind, response)
        self.ready = False  # cold boot: after the RESET's RES
        self.started = False

    def request(self, tx, on_result=None, **req):
        """Send a CON REQ with the board's credentials and MAX RESPONSE SIZE; its TID, or None
        when no TID may be used now (nothing sent, `on_result` never called: try later)."""
        cfg = self.cfg
        req.setdefault("prefixes", cfg["prefixes"])
        if not self.client.sealer:  # sealed: the envelope names the KP, no password (13.5)
            req["credentials"] = (cfg["kp_id"], cfg["kp_password"])
        try:
            tid = self.client.send(self.board.ticks_ms(), tx, max_size=cfg["max_size"], **req)
        except NoTid as e:
            print("ksp: not sent: %s" % e)
            return None
        if on_result is not None:
            self.calls[tid] = on_result
        return tid

    def _event(self, kind, tid, r):
        if kind == "retry":  # sent again with the SIB's ECHO: its outcome comes under TID r
            if tid in self.calls:
                self.calls[r] = self.calls.pop(tid)
            return
        call = self.calls.get(tid)
        if kind != "ind" and not (kind == "res" and tid in self.client.persistent):
            self.calls.pop(tid, None)
        if r is not None and r.status and kind != "end":
            print("ksp: transaction %d answered status %d" % (tid, r.status))
        if call is not None:
            call(kind, r)

    def start(self):
        """After the first connection: resume from the saved state, or RESET and begin."""
        state = self.board.load_state()
        if state:
            self.client.restore(state["client"])
            self.resume(state)
            self.ready = True
            return
        self.request(codec.RESET, self._reset_done, prefixes=())

    def _reset_done(self, kind, r):
        if kind == "res" and not r.status:
            self.ready = True
            self.begin()
        else:  # try again on the next round of the loop
            self.start()

    def save(self, extra):
        extra["client"] = self.client.state()
        self.board.save_state(extra)

    # Subclasses: begin() on a cold start, resume(state) after deep sleep, tick(now) -> ms until
    # the agent wants to run again.
    def begin(self):
        pass

    def resume(self, state):
        pass

    def tick(self, now):
        return _IDLE


def run(agent, link_factory, stop=None):
    """Keep the network and the link up and drive the agent, forever or until `stop()` is true
    (tests). A lost link or Wi-Fi is rebuilt with back-off; the agent's state is kept."""
    board, client = agent.board, agent.client
    link, backoff = client.link, 1000
    while stop is None or not stop():
        try:
            if link is None:
                board.network(agent.cfg)
                link = client.link = link_factory(agent.cfg)
                backoff = 1000
                if not agent.started:
                    agent.started = True
                    agent.start()
            elif not board.connected():
                raise OSError(113, "Wi-Fi lost")
            now = board.ticks_ms()
            client.poll(now)
            wait = agent.tick(now) if agent.ready else _IDLE
            due = client.next_due(now)
            if due is not None:
                wait = min(wait, due)
            if link.wait(min(wait, 1000) if stop else wait):
                while True:
                    msg = link.recv()
                    if msg is None:
                        break
                    client.feed(msg, board.ticks_ms())
        except OSError as e:
            print("ksp: link down (%s), reconnecting in %d ms" % (e, backoff))
            if link is not None:
                link.close()
            link = client.link = None
            board.sleep_ms(backoff)
            backoff = min(backoff * 2, 60000)


def due_in(now, when):
    return max(0, ticks_diff(when, now))


def later(now, ms):
    return ticks_add(now, ms)
