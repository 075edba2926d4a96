"""A simulated board behind the firmware's hal seam (device_firmware/kspfw/hal.py), for CPython
and for the WebAssembly MicroPython: sensor readings come from `values` (property IRI ->
number, or an exception to raise), outputs are recorded, the state lives in memory, deep sleep
ends the run (raises DeepSleep), and the clock is virtual unless `clock` is given."""


class DeepSleep(Exception):
    pass


class SimBoard:
    def __init__(self, values=None, clock=None, free=96 * 1024):
        self.values = dict(values or {})
        self.outputs = {}   # pin -> list of values driven, in order
        self.state = None
        self.slept = []
        self.free = free
        self.now = 0
        self.clock = clock
        self.network_up = True
        self.connects = 0
        self.attempts = 0
        self.sleeps = []
        self.counter = 0
        self.counter_writes = []
        self.utc_time = None  # a time.gmtime() tuple once "NTP" has set the clock

    def sensor(self, spec):
        prop = spec["property"]

        def read():
            value = self.values[prop]
            if isinstance(value, Exception):
                raise value
            return value

        return read

    def output(self, spec):
        history = self.outputs.setdefault(spec["pin"], [])
        invert = bool(spec.get("invert"))
        return lambda on: history.append(bool(on) != invert)

    def free_ram(self):
        return self.free

    def ticks_ms(self):
        return self.clock() if self.clock else self.now

    def sleep_ms(self, ms):
        self.sleeps.append(ms)
        self.now += ms

    def deep_sleep(self, ms):
        self.slept.append(ms)
        raise DeepSleep(ms)

    def load_state(self):
        return self.state

    def save_state(self, obj):
        self.state = obj

    def load_counter(self):
        return self.counter  # "flash": survives power cuts, unlike `state`

    def save_counter(self, n):
        self.counter_writes.append(n)
        self.counter = n

    def connected(self):
        return self.network_up

    def network(self, cfg):
        self.attempts += 1
        if not self.network_up:
            raise OSError(118, "Wi-Fi down (simulated)")
        self.connects += 1

    def set_clock(self):
        pass

    def utc(self):
        return self.utc_time

    def tls(self, ca):
        return ("tls", ca)  # what the agent hands to umqtt.simple as its `ssl`
