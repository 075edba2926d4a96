"""CPython stand-in for MicroPython's `micropython` module, so the firmware imports on CPython
(tests, benchmarks' baseline, the simulated board). Only what the firmware uses."""


def const(value):
    return value
