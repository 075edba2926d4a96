"""`transports.pacing.Pacer`, the CoAP notification budget's arithmetic, on a simulated clock:
never more than the budget in any window, every state offered goes in the end, oldest first."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from transports.pacing import SLICES, Pacer


def test_over_the_budget_items_wait_in_order_and_an_item_offered_again_keeps_its_place():
    pacer = Pacer(3, 1.0, cost=lambda item: 1)
    assert [pacer.offer(x, 0.0) for x in "abc"] == [True] * 3
    assert not pacer.offer("d", 0.1) and not pacer.offer("e", 0.2) and not pacer.offer("d", 0.3)
    assert len(pacer) == 2 and "d" in pacer
    assert not pacer.offer("a", 0.3)  # something waits: a newcomer waits behind it
    assert list(pacer.release(0.5)) == [] and pacer.next_release(0.5) == 1.0 + 1 / SLICES
    assert list(pacer.release(1.0 + 1 / SLICES)) == ["d", "e", "a"]
    assert pacer.next_release(2.0) is None and not pacer
    pacer.discard("x")  # not waiting: nothing happens
    assert all(pacer.offer(x, 3.0) for x in "fgh")
    assert not pacer.offer("i", 3.0) and not pacer.offer("j", 3.0)
    for item in pacer.release(4.1):  # sending one discards the next: it does not go
        assert item == "i"
        pacer.discard("j")
    assert not pacer


def test_more_than_the_budget_at_once_goes_alone_and_forced_sends_count():
    costs = {"big": 10, "small": 1}
    pacer = Pacer(4, 2.0, cost=costs.__getitem__)
    assert pacer.offer("big", 0.0)  # counted as the whole budget, not refused for ever
    assert not pacer.offer("small", 0.0)
    assert list(pacer.release(2.0 + 2 / SLICES)) == ["small"]
    assert pacer.spend(3, 2.1, force=True)  # a 4.04 that ends observations goes regardless
    assert not pacer.spend(1, 2.2)  # ... but counts
    pacer.discard("small")
    with pytest.raises(ValueError):
        Pacer(0, 1.0, cost=len)


def test_a_send_late_in_a_slice_counts_for_a_whole_window_after_it():
    pacer = Pacer(2, 1.0, cost=lambda item: 1)
    half = 1.0 / (2 * SLICES)
    assert pacer.spend(1, 0.0) and pacer.spend(1, half)  # one slice of the window
    assert not pacer.spend(1, 1.0)  # 1 s after the first, not after the second
    assert not pacer.spend(1, 1.0 + half / 2)
    assert pacer.spend(2, 1.0 + 2 * half)  # the slice's end a window ago: both left


@settings(max_examples=300, deadline=None)
@given(count=st.integers(1, 6), window=st.sampled_from([0.5, 1.0, 10.0]),
       costs=st.lists(st.integers(0, 8), min_size=5, max_size=5),
       events=st.lists(st.tuples(st.integers(0, 1100), st.integers(0, 4)), max_size=60))
def test_never_over_the_budget_in_any_window_and_every_offer_goes(count, window, costs, events):
    pacer = Pacer(count, window, cost=lambda item: costs[item])
    sent: list[tuple[float, int]] = []  # (time, item)
    offers: list[tuple[float, int]] = []
    now = 0.0

    def run_timer_until(until: float) -> float:
        t = now
        while (at := pacer.next_release(t)) is not None and at <= until:
            t = at
            sent.extend((t, item) for item in pacer.release(t))
        return until

    for ticks, item in events:  # in half-slices of the window: its edges get hit
        now = run_timer_until(now + ticks * window / (2 * SLICES))
        offers.append((now, item))
        if pacer.offer(item, now):
            sent.append((now, item))
    # the end: the timer runs until nothing waits
    while (at := pacer.next_release(now)) is not None:
        now = at
        sent.extend((now, item) for item in pacer.release(now))

    assert not pacer
    for start, _ in sent:  # any window: the heaviest begins with a send
        load = sum(min(costs[i], count) for t, i in sent if start <= t < start + window)
        assert load <= count
    for t, item in offers:  # each state offered goes, then or later (a newer one with it)
        assert any(s >= t and i == item for s, i in sent)
