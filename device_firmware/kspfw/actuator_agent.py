"""The actuator agent: each configured output (relay, LED, fan on a GPIO) follows a persistent
ASK (on while the pattern has a solution) or SELECT (on while the first row's first value is
true or a non-zero number) in the SIB. The RES sets the initial state, every IND the new one."""
from .agent import Agent
from .codec import ECHO_REQUIRED
from .hal import pattern

SELECT_PERSISTENT = 0x0D
ASK_PERSISTENT = 0x0E


def truthy(result):
    if isinstance(result, bool):
        return result
    rows = getattr(result, "rows", None)  # a results.Select
    if not rows or rows[0][0] is None:
        return False
    value = getattr(rows[0][0], "value", "")
    if value == "true":
        return True
    try:
        return float(value) != 0
    except ValueError:
        return False


class ActuatorAgent(Agent):
    def __init__(self, cfg, board):
        Agent.__init__(self, cfg, board)
        self.outputs = [(spec, board.output(spec)) for spec in cfg["outputs"]]
        self.state = [False] * len(self.outputs)
        for _, drive in self.outputs:
            drive(False)

    def begin(self):
        for i, (spec, _) in enumerate(self.outputs):
            self.subscribe(i, spec)

    def subscribe(self, i, spec):
        def on_result(kind, r):
            if kind in ("res", "ind") and r is not None and not r.status:
                self.set(i, truthy(r.result))
            elif kind == "res" and r is not None and r.status != ECHO_REQUIRED:
                self.set(i, False)  # refused (the console shows the status): stays off
            else:  # timed out, ended by the SIB, or its retry refused too (an echo value from
                # before a SIB restart): off (fail safe), and subscribe again
                self.set(i, False)
                self.subscribe(i, spec)

        if "ask" in spec:
            self.request(ASK_PERSISTENT, on_result, graphs=(pattern(spec["ask"]),))
        else:
            self.request(SELECT_PERSISTENT, on_result, vc=1, graphs=(pattern(spec["select"]),))

    def set(self, i, on):
        if self.state[i] != on:
            print("actuator: output %d (pin %d) %s" % (i, self.outputs[i][0]["pin"],
                                                      "on" if on else "off"))
        self.state[i] = on
        self.outputs[i][1](on)
