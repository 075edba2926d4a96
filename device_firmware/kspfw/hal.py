"""The hardware-abstraction seam: everything the agents need from a board, so pins and sensors
are configuration (config.json), not code.

A board object provides:
- `sensor(spec)` -> a function returning the current reading (float) of the sensor that `spec`
  (one entry of config "sensors") describes; it raises OSError when the sensor fails;
- `output(spec)` -> a function taking a bool that drives the output of one "outputs" entry;
- `free_ram()`, `sleep_ms(ms)`, `deep_sleep(ms)` (does not return on a board), `ticks_ms()`;
- `load_state()` / `save_state(obj)`: a small JSON-able object kept across deep sleep (RTC
  memory on ESP32, a file elsewhere); `load_state()` is None after a cold boot.
- `network(cfg)`: bring the network up (Wi-Fi), reconnecting after a loss; raises OSError.

`board.MCUBoard` is the real one (machine, network, esp32/rp2); tests/firmware/simboard.py is
a simulated one for CPython and the WebAssembly MicroPython.
"""
import json


def term(x):
    """A term from config JSON: "?n" is variable n, a string an IRI, true/false/ints/floats
    literals, {"value", "datatype"[, "lang"]} any literal."""
    from .terms import Lit, boolean, flt, integer

    if isinstance(x, bool):
        return boolean(x)
    if isinstance(x, int):
        return integer(x)
    if isinstance(x, float):
        return flt(x)
    if isinstance(x, dict):
        return Lit(str(x["value"]), x.get("datatype", "http://www.w3.org/2001/XMLSchema#string"),
                   x.get("lang"))
    if x[:1] == "?" and x[1:].isdigit():
        return int(x[1:])
    return x


def pattern(triples):
    return [tuple(term(x) for x in t) for t in triples]


class FileState:
    """load_state/save_state over a JSON file (boards without RTC memory, and the simulation)."""

    def __init__(self, path="ksp_state.json"):
        self.path = path

    def load_state(self):
        try:
            with open(self.path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def save_state(self, obj):
        with open(self.path, "w") as f:
            json.dump(obj, f)
