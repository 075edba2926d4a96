"""Smoke test of the firmware benchmark (tools/bench/firmware.py); no timing assertions (speed
is measured by the benchmark, never by tests). It guards that the benchmark measures what its
table says: both implementations ran every message, MicroPython reported its heap, the bundle
sizes are those `ksp flash` builds, each role's agent ran from only its `ksp flash --config`
bundle, and the vector agreement covers the firmware's scope."""
from __future__ import annotations

import json

import pytest

from tools import flash
from tools.bench import firmware

# slow: the firmware benchmark under MicroPython (WebAssembly, in Node)
pytestmark = pytest.mark.slow


def test_benchmark_runs_and_renders(tmp_path):
    report = firmware.run(quick=True)
    mpy, cpy = report["mpy"], report["cpy"]
    assert mpy["implementation"] == "micropython" and cpy["implementation"] == "cpython"
    assert [n for n, _ in mpy["ops"]] == [n for n, _ in cpy["ops"]]
    assert all(len(t) == report["rounds"] and min(t) > 0 for _, t in mpy["ops"] + cpy["ops"])
    assert 0 < mpy["heap_after_import"] < mpy["heap_subscribed"]
    built = flash.build(tmp_path / "b", "esp32")
    assert report["sizes"]["esp32"] == sum(f.stat().st_size for f in built)
    assert mpy["heap"] == "live" and mpy["heap_subscribed"] < mpy["allocated_subscribed"]
    assert mpy["heap_subscribed"] < firmware.SUBSCRIBED_TARGET  # < 20 KiB, live
    # the same subscription through the ECHO retry (its IND delivered: held_rows)
    assert mpy["heap_subscribed"] <= mpy["heap_subscribed_echo"] < firmware.SUBSCRIBED_TARGET
    # each role ran its agent from only the modules `ksp flash --config` builds for it
    assert set(report["roles"]) == set(firmware.role_configs())
    for role in report["roles"].values():
        assert 0 < role["heap_after_import"] < role["heap_running"]
        assert role["modules"] < len(built) and role["bundle"] < report["sizes"]["esp32"]
    assert mpy["held_rows"] == cpy["held_rows"] == 3
    assert report["agree"] == report["total"] > 100
    table = firmware.render(report, "ksp bench firmware --quick", markdown=True)
    assert table.count("\n| ") >= 12 and "heap after import" in table


def test_probe_inputs_are_what_a_board_receives():
    from ksp import Transport, Tx, decode_sib_message

    msgs = firmware.inputs()
    ind = decode_sib_message(bytes.fromhex(msgs["ind_select"]), Transport.UDP,
                             Tx.SELECT_PERSISTENT)
    assert ind.indication and len(ind.result.rows) == 3
    assert json.dumps(msgs)  # plain strings, as the probe reads them
