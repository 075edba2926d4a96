"""Measurements taken inside MicroPython (and, for the baseline, CPython) by
tools/bench/firmware.py. MicroPython-compatible on purpose: no typing, no dataclasses.

    firmware_probe.py BUNDLE_DIR INPUT_JSON ROUNDS TARGET_MS
    node run_mpy.mjs --step step ... firmware_probe.py BUNDLE_DIR INPUT_JSON ROUNDS TARGET_MS

BUNDLE_DIR holds the firmware (the compiled .mpy bundle on MicroPython); INPUT_JSON the
messages to decode (hex, encoded by the reference codec). Prints one JSON object: heap figures
(MicroPython only) and, per message, the µs per call of each of ROUNDS interleaved rounds
(none with ROUNDS 0). The WebAssembly port's ticks_us() advances in whole milliseconds, so a
round must last tens of milliseconds (TARGET_MS) for the per-call figure to be exact to a few
percent.

Heap: this build's gc.collect() only asks for a collection, which runs once control is back
in JavaScript. Run straight, gc.mem_alloc() therefore counts every byte allocated since the
start, garbage included ("allocated": the loader's buffers, temporaries of decoding). Run by
run_mpy.mjs --step, the import, the subscription, the same subscription made through the ECHO
retry (in place of the first) and the timing are four calls of `step()` from JavaScript, each
reading gc.mem_alloc() first: the live heap, as a board has it after gc.collect().
"""
import gc
import json
import sys
import time

sys.path.insert(0, sys.argv[1])
MICRO = sys.implementation.name == "micropython"


def clock_us():
    if MICRO:
        return time.ticks_us()  # type: ignore[attr-defined]
    return time.perf_counter() * 1e6


def alloc():
    gc.collect()
    return gc.mem_alloc() if MICRO else 0  # type: ignore[attr-defined]


BASE = alloc()
M = {}


def load():
    from kspfw import client as client_mod
    from kspfw import codec

    M["client"], M["codec"] = client_mod, codec
    return alloc() - BASE

GH = "http://example.org/greenhouse#"
CREDS = (bytes(range(16)), "pw")


class Link:
    def __init__(self):
        self.sent = 0

    def send(self, msg):
        self.sent += 1


def subscription_heap(ind, res, echo=None):
    """Heap of client + codec while subscribed: a receive buffer, a persistent SELECT, the RES
    and the newest IND's result held by the application. `echo`: the SELECT is answered ECHO
    REQUIRED first (a SIB that has not validated the address), so it runs under the retry's
    TID, the first one watched (`ind` and `res` carry the retry's TID)."""
    held = []
    link = Link()
    buf = bytearray(1024)
    c = M["client"].Client(link, lambda kind, tid, r: held.append(r), rand=lambda bits: 0)
    c.send(0, 0x0D, vc=2, graphs=([(0, GH + "temperature", 1)],), prefixes=(GH,),
           max_size=1024, credentials=CREDS)
    for raw in ((echo,) if echo else ()) + (res, ind):
        buf[:len(raw)] = raw
        c.feed(memoryview(buf)[:len(raw)], 0)
    del held[:-1]
    M["subscribed"] = (c, buf, held)
    return alloc() - BASE, held


def operations(inputs):
    codec = M["codec"]
    readings = [(GH + "sensor42", GH + "temperature", codec.Lit("21.5", codec.XSD_FLOAT)),
                (GH + "sensor42", GH + "humidity", codec.Lit("48.25", codec.XSD_FLOAT))]
    old = [(GH + "sensor42", GH + "temperature", codec.Lit("21.25", codec.XSD_FLOAT)),
           (GH + "sensor42", GH + "humidity", codec.Lit("48.0", codec.XSD_FLOAT))]
    where = [(0, GH + "temperature", 1)]
    ind = bytes.fromhex(inputs["ind_select"])
    ask = bytes.fromhex(inputs["res_ask"])
    ok = bytes.fromhex(inputs["res_ok"])
    return [
        ("encode UPDATE DATA (2 float readings)", lambda: codec.request(
            3, 7, graphs=(old, readings), prefixes=(GH,), max_size=1024, credentials=CREDS)),
        ("encode SELECT_PERSISTENT", lambda: codec.request(
            0x0D, 8, vc=2, graphs=(where,), prefixes=(GH,), max_size=1024, credentials=CREDS)),
        ("encode ACK", lambda: codec.ack(8, 65535)),
        ("decode IND SELECT (3 rows: IRI, float)", lambda: codec.decode(ind, 0x0D)),
        ("decode RES ASK", lambda: codec.decode(ask, 8)),
        ("decode RES OK (update)", lambda: codec.decode(ok, 3)),
    ]


def per_call_us(fn, loops):
    t0 = clock_us()
    for _ in range(loops):
        fn()
    t1 = clock_us()
    return (time.ticks_diff(int(t1), int(t0)) if MICRO else t1 - t0) / loops  # type: ignore


def subscribe(echo=False):
    with open(sys.argv[2]) as f:
        inputs = json.load(f)
    if not echo:
        return subscription_heap(bytes.fromhex(inputs["ind_select"]),
                                 bytes.fromhex(inputs["res_select"]))
    return subscription_heap(bytes.fromhex(inputs["ind_select_2"]),
                             bytes.fromhex(inputs["res_select_2"]),
                             bytes.fromhex(inputs["res_echo_required"]))


def timings():
    with open(sys.argv[2]) as f:
        inputs = json.load(f)
    rounds, target = int(sys.argv[3]), int(sys.argv[4])
    if not rounds:
        return []
    ops = operations(inputs)
    loops = []
    for name, fn in ops:  # warm up (lazy imports), then auto-range: about TARGET_MS per round
        for _ in range(3):
            fn()
        n = 1
        while per_call_us(fn, n) * n < target * 1000 and n < 1 << 20:
            n *= 2
        loops.append(n)
    times = [[] for _ in ops]
    for r in range(rounds):  # interleaved, rotating start
        for k in range(len(ops)):
            i = (r + k) % len(ops)
            times[i].append(per_call_us(ops[i][1], loops[i]))
    return [[name, times[i]] for i, (name, _) in enumerate(ops)]


def report(after_import, during, held, live, echoed=None):
    print(json.dumps({"implementation": sys.implementation.name,
                      "heap_after_import": after_import if MICRO else None,
                      "heap_subscribed": during if MICRO else None,
                      "heap_subscribed_echo": echoed if MICRO else None,
                      "heap": "live" if live else "allocated",
                      "held_rows": len(held[0].result.rows) if held else 0,
                      "ops": timings()}))


HEAP = []


def step():
    """One stage per call from JavaScript (run_mpy.mjs --step): the heap is collected
    between calls, so each starts by reading the live heap."""
    HEAP.append(gc.mem_alloc())
    if len(HEAP) == 1:
        load()
    elif len(HEAP) == 2:
        subscribe()
    elif len(HEAP) == 3:  # the same subscription in its place, through the ECHO retry
        del M["subscribed"]
        subscribe(echo=True)
    else:
        base, imported, subscribed, echoed = HEAP
        report(imported - base, subscribed - base, M["subscribed"][2], True, echoed - base)
        return False
    gc.collect()
    return True


if not MICRO or "--straight" in sys.argv:
    after_import = load()
    during, held = subscribe()
    report(after_import, during, held, False)
