"""The hardware-abstraction seam: everything the agents need from a board, so pins and sensors
are configuration (config.json), not code.

A board object provides:
- `sensor(spec)` -> a function returning the current reading (float) of the sensor that `spec`
  (one entry of config "sensors") describes; it raises OSError when the sensor fails;
- `output(spec)` -> a function taking a bool that drives the output of one "outputs" entry;
- `free_ram()`, `sleep_ms(ms)`, `deep_sleep(ms)` (does not return on a board), `ticks_ms()`;
- `load_state()` / `save_state(obj)`: a small JSON-able object kept across deep sleep (RTC
  memory on ESP32, a file elsewhere); `load_state()` is None after a cold boot.
- `load_counter()` / `save_counter(n)`: the sealed mode's counter block end (wire format 13.5),
  kept where a power cut cannot take it (flash); `load_counter()` is 0 when none was saved.
- `network(cfg)`: bring the network up (Wi-Fi), reconnecting after a loss; raises OSError;
  `connected()`: whether it is still up (checked every turn of the agent loop).

`state.FileState` keeps the state and the counter in files. `board.MCUBoard` is the real one
(machine, network, esp32/rp2); tests/firmware/simboard.py is a simulated one for CPython and
the WebAssembly MicroPython.
"""
from .codec import XSD_BOOLEAN, XSD_FLOAT, XSD_INTEGER, Lit


def flt(x):
    """An xsd:float literal of a number, in the canonical form that travels as 4 bytes."""
    from .floats import float32

    return Lit(float32(x), XSD_FLOAT)


def term(x):
    """A term from config JSON: "?n" is variable n, a string an IRI, true/false/ints/floats
    literals, {"value", "datatype"[, "lang"]} any literal."""
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


def integer(n):
    return Lit(str(int(n)), XSD_INTEGER)


def boolean(b):
    return Lit("true" if b else "false", XSD_BOOLEAN)


def pattern(triples):
    return [tuple(term(x) for x in t) for t in triples]
