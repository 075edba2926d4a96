"""Millisecond ticks: MicroPython's wrapping `time.ticks_*`, or CPython's monotonic clock."""
import time

try:
    ticks_ms = time.ticks_ms
    ticks_diff = time.ticks_diff
    ticks_add = time.ticks_add
except AttributeError:  # CPython (tests, simulated board)
    _mono = getattr(time, "monotonic")

    def ticks_ms():
        return int(_mono() * 1000)

    def ticks_diff(a, b):
        return a - b

    def ticks_add(a, b):
        return a + b
