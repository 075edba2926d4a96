"""`sib.guesses`: the wait a guesser earns, doubling to its cap, and the bounded tables (the
sockets' side is in tests/test_sib_security.py and tests/test_sepa_secure.py)."""
from __future__ import annotations

from sib.guesses import GuessLimit


def test_the_wait_doubles_past_the_free_failures_up_to_the_cap_then_is_forgotten():
    now = [0.0]
    limit = GuessLimit(free=3, base=1, cap=10, forget_after=100, clock=lambda: now[0])
    waits = [limit.failed("kp", ("10.0.0.1", 1)) for _ in range(8)]
    assert waits == [0, 0, 1, 2, 4, 8, 10, 10]
    assert limit.wait(("10.0.0.1", 9)) == 10 and limit.refused == 1  # any port of the host
    assert limit.wait(("10.0.0.2", 1)) == 0  # another host never failed
    now[0] = 10.0
    assert limit.wait(("10.0.0.1", 1)) == 0
    now[0] = 110.0  # quiet for forget_after: counted from zero again
    assert limit.failures(source="10.0.0.1") == 0 and limit.failures(identity="kp") == 0
    assert limit.failed("kp", ("10.0.0.1", 1)) == 0


def test_ipv6_hosts_count_by_their_64():
    limit = GuessLimit(free=1, clock=lambda: 0.0)
    limit.failed("kp", ("2001:db8::1", 1, 0, 0))
    assert limit.wait("2001:db8::ffff") > 0 and limit.wait("2001:db9::1") == 0


def test_the_tables_are_bounded():
    limit = GuessLimit(free=1, max_keys=3, clock=lambda: 0.0)
    for i in range(10):
        limit.failed(f"kp{i}", (f"10.0.0.{i}", 1))
    assert len(limit.by_source) == 3 and len(limit.by_identity) == 3
    assert limit.wait("10.0.0.9") > 0 and limit.failures(identity="kp0") == 0
