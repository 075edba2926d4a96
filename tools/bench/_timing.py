"""Timing helper for the benchmarks: interleaved, auto-ranged, median of repeats.

Project rule: speed is reported as ratios against a baseline measured in the same run, because
the machine is noisy (2 cores shared with other work). So every contender of a comparison is
timed by one `compare()` call, which

- auto-ranges each contender to `target` seconds per repeat (as `timeit.Timer.autorange`, but
  aiming at a duration rather than the next power of ten), which also warms it up;
- runs the repeats round-robin: repeat r times every contender once, starting from a rotating
  position, so a slow phase of the machine (another job, thermal drift) hits all of them alike
  and none always runs right after the same neighbour;
- leaves `gc` enabled (unlike `timeit`): allocation-heavy parsers pay for their garbage
  collections, as they would in a server;
- keeps every repeat's per-call time; `Timing.median` is what the tables report, `Timing.best`
  (the `timeit` convention) is kept for reference.
"""
from __future__ import annotations

import itertools
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

_clock = time.perf_counter


@dataclass
class Timing:
    """Seconds per call of one contender, one value per repeat."""

    name: str
    loops: int
    per_call: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.per_call)

    @property
    def best(self) -> float:
        return min(self.per_call)

    @property
    def median_us(self) -> float:
        return self.median * 1e6


def time_loops(fn: Callable[[], object], loops: int) -> float:
    """Seconds taken by `loops` calls of `fn` (the loop itself costs ~20 ns a call)."""
    it = itertools.repeat(None, loops)
    t0 = _clock()
    for _ in it:
        fn()
    return _clock() - t0


def autorange(fn: Callable[[], object], target: float, max_loops: int | None = None) -> int:
    """The number of calls of `fn` that takes about `target` seconds (at least 1).

    One uncounted call first, so a cold first call (lazy imports, caches) does not skew it.
    """
    fn()
    loops = 1
    while True:
        elapsed = time_loops(fn, loops)
        if max_loops is not None and loops >= max_loops:
            return max_loops
        if elapsed >= target / 10 or elapsed >= 0.2:
            break
        loops *= 10
    if elapsed <= 0:
        return max(1, min(loops, max_loops or loops))
    loops = max(1, round(loops * target / elapsed))
    return min(loops, max_loops) if max_loops is not None else loops


def compare(contenders: Mapping[str, Callable[[], object]], *, target: float = 0.05,
            repeats: int = 7, max_loops: int | None = None) -> dict[str, Timing]:
    """Time every contender `repeats` times, interleaved round-robin; see the module docstring.

    `target` is the duration of one repeat of one contender; `max_loops` caps the calls per
    repeat (the smoke test uses 1 to run each contender once per repeat).
    """
    if repeats < 1:
        raise ValueError("repeats must be at least 1")
    names = list(contenders)
    timings = {name: Timing(name, autorange(contenders[name], target, max_loops))
               for name in names}
    for r in range(repeats):
        start = r % len(names) if names else 0
        for name in names[start:] + names[:start]:
            t = timings[name]
            t.per_call.append(time_loops(contenders[name], t.loops) / t.loops)
    return timings
