"""`ksp bench stall` in its shortest form against a real `ksp-sib`: the sensor's INDs all come,
quiet and beside the hostile clients, and every hostile request ends with its status (a KSP
status, an HTTP status): none hangs or ends in an error of the client's."""
from __future__ import annotations

import pytest

from tools.bench.stall import measure, table_rows

# slow: the stall benchmark: hostile clients in a process
pytestmark = pytest.mark.slow


def test_every_hostile_request_ends_with_its_status_and_the_sensor_is_served():
    quiet, hostile, statuses = measure(rounds=1, per_round=20)
    assert len(quiet.latencies) + quiet.lost == 20 and len(quiet.latencies) >= 15
    assert len(hostile.latencies) + hostile.lost == 20 and len(hostile.latencies) >= 15
    assert statuses, "no hostile request was answered"
    endings = {name.split(": ", 1)[1] for name in statuses}
    assert endings <= {"LIMIT_EXCEEDED", "KspStatusError LIMIT_EXCEEDED (0x0a)", "200",
                       "503 timeout", "403 service_refused", "429", "subscribed"}, statuses
    assert any(name.startswith("SEPA SERVICE: 403") for name in statuses)
    assert len(table_rows(quiet, hostile)) == 2
