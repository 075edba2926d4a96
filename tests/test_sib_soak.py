"""A shortened soak (tools/bench/soak.py): one sensor replacing its reading thousands of times
under a subscription and a rule. With the store maintenance (sib.store) the cost per update
stays flat; without it, the same run grows — the control that shows this test can fail."""
from __future__ import annotations

import asyncio

import pytest

from sib import QuadStore
from tools.bench.soak import growth, soak

# slow: soak runs of thousands of updates
pytestmark = pytest.mark.slow

#: (cycles, window) per store. In memory a removed quad costs less, so the run without
#: maintenance needs more cycles to grow clearly past the control's 2.0: at 8,000 it grew
#: 2.2-2.3x alone and once only 1.85x in a loaded CI run; at 16,000, 2.9-3.2x (kept: 0.95-1.1).
SIZES = {False: (16_000, 4_000), True: (8_000, 2_000)}


def run(store: QuadStore, cycles: int, window: int) -> list[dict]:
    try:
        return asyncio.run(soak(store, cycles, window, sensors=1))
    finally:
        store.close()


@pytest.mark.parametrize("temporary", [False, True], ids=["memory", "disk"])
def test_cost_per_update_stays_flat_with_maintenance_and_grows_without(temporary):
    cycles, window = SIZES[temporary]
    grown = run(QuadStore(temporary=temporary, maintain_after=None), cycles, window)
    # Ratios within each run (the machine is shared and noisy): generous bounds either way. A
    # run that another process slowed down in its last window is measured once more: a cost
    # that really grows grows again (seen: 1.09-1.13 alone, 1.76 once inside the full suite).
    for _ in range(2):
        kept = run(QuadStore(temporary=temporary, maintain_after=window), cycles, window)
        if growth(kept, "p50") < 1.6:
            break
    assert kept[-1]["maintenance"] >= 2 and grown[-1]["maintenance"] == 0
    assert growth(grown, "p50") > 2.0, grown
    assert growth(kept, "p50") < 1.6, kept
