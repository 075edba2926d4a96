"""Parts of the ingest that need no Spark: the per-minute aggregates
(`spark_ingest.aggregates`: the minutes a batch closes, late readings, a batch run again after
a crash, the bound on open minutes), the placing of a batch's files (`job.place_batch`: a
re-run's files replacing the earlier attempt's without walking the table) and the bounded
memory of what was sent to the SIB (`job.SentReadings`). The job with real Spark:
tests/test_ingest.py."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from spark_ingest.aggregates import Minutes, interval_ms

M = 60_000  # a minute in ms


def partial(minute: int, device: str, values: list[float], newest: int | None = None) -> tuple:
    """One batch's partial aggregate of `values` in `minute` (its index)."""
    return (minute * M, device, "temperature", min(values), max(values), sum(values),
            len(values), newest if newest is not None else minute * M + 59_000)


def test_a_minute_closes_once_the_watermark_passes_its_end(tmp_path):
    minutes = Minutes(tmp_path, delay_ms=30_000)
    assert minutes.add(0, [partial(0, "a", [1.0, 3.0])]) == []  # newest 0:59, mark 0:29
    minutes.save(0)
    assert minutes.add(1, [partial(1, "a", [5.0], newest=M + 20_000)]) == []  # mark 0:50
    minutes.save(1)
    closed = minutes.add(2, [partial(0, "a", [2.0]), partial(1, "a", [7.0], newest=M + 30_000)])
    assert closed == [(0, "a", "temperature", 1.0, 3.0, 2.0, 3)]  # mark 1:00: minute 0 done
    minutes.save(2)
    assert minutes.open_count() == 1  # minute 1 waits
    assert minutes.add(3, [partial(0, "a", [100.0])]) == []  # late: minute 0 was written
    assert minutes.late == 1


def test_a_batch_run_again_closes_the_same_minutes_into_the_same_rows(tmp_path):
    """Spark runs the last uncommitted batch again after a crash: a new process starts from
    the state saved by the batch before it, whatever the crashed attempt saved."""
    batches = [[partial(k, d, [float(k), float(k) + 0.5]) for d in "ab"] for k in range(6)]
    batches[4] = []  # nothing came: no state saved for batch 4
    first = Minutes(tmp_path, delay_ms=90_000)
    outputs = []
    for n, rows in enumerate(batches):
        outputs.append(first.add(n, rows))
        if rows:
            first.save(n)
    assert [len(o) for o in outputs] == [0, 0, 2, 2, 0, 4]  # two minutes behind, per device
    again = Minutes(tmp_path, delay_ms=90_000)  # batch 5 crashed after saving its state
    assert again.add(5, batches[5]) == outputs[5]  # from batch 3's state
    again.save(5)
    assert sorted(p.name for p in tmp_path.iterdir()) == [  # what the state before batch 5
        "batch-000000000002.json", "batch-000000000005.json",  # is made of, and batch 5's:
        "delta-000000000003.json"]  # batch 2's whole state and batch 3's changes; no more
    fresh = Minutes(tmp_path, delay_ms=90_000)  # and the next batch in a new process
    assert fresh.add(6, [partial(7, "a", [1.0])]) == [
        (5 * M, d, "temperature", 5.0, 5.5, 5.25, 2) for d in "ab"]


def test_a_batch_added_again_in_the_same_process_starts_from_the_state_before_it(tmp_path):
    minutes = Minutes(tmp_path, delay_ms=30_000)
    minutes.add(0, [partial(0, "a", [1.0]), partial(1, "a", [2.0], newest=M + 10_000)])
    minutes.save(0)
    batch = [partial(0, "a", [5.0]), partial(2, "a", [3.0], newest=2 * M + 40_000)]
    first = minutes.add(1, batch)
    assert first == [(0, "a", "temperature", 1.0, 5.0, 3.0, 2),
                     (M, "a", "temperature", 2.0, 2.0, 2.0, 1)]  # the mark: 2:10
    assert minutes.add(1, batch) == first  # not saved: from batch 0's state again
    minutes.save(1)
    assert minutes.add(1, batch) == first and minutes.open_count() == 1  # saved: the same


def test_open_minutes_are_bounded_the_oldest_close_early(tmp_path):
    minutes = Minutes(tmp_path, delay_ms=3_600_000, max_open=10)
    rows = [partial(k, f"d{d}", [1.0]) for k in range(3) for d in range(5)]  # 15 open
    closed = minutes.add(0, rows)
    assert sorted({c[0] for c in closed}) == [0]  # minute 0 of all five devices
    assert minutes.open_count() == 10 == len(rows) - len(closed)
    minutes.save(0)
    assert minutes.add(1, [partial(0, "d9", [2.0])]) == [] and minutes.late == 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.sampled_from("abc"),
                          st.floats(-50, 50, allow_nan=False)), min_size=1, max_size=200),
       st.integers(1, 8), st.integers(0, 5), st.randoms(use_true_random=False))
def test_the_closed_minutes_are_those_of_the_readings_not_late(readings, batches, delay, rng):
    """Readings (minute, device, value) in random batches, then one far later that closes
    every minute: each minute is written once, with the count, min and max of its readings
    that were not late — those whose minute had not ended by the newest reading of an
    earlier batch minus the delay (an oracle computed here, apart)."""
    import tempfile

    cut = sorted(rng.sample(range(len(readings) + 1), min(batches, len(readings) + 1)))
    groups = [readings[i:j] for i, j in zip([0, *cut], [*cut, len(readings)])]
    groups.append([(10_000, "z", 0.0)])
    want: dict = {}
    newest, late = None, 0
    for group in groups:
        closed = None if newest is None else newest - delay * M
        for minute, device, value in group:
            if closed is not None and (minute + 1) * M <= closed:
                late += 1
            else:
                want.setdefault((minute * M, device), []).append(value)
        newest = max([newest or 0] + [m * M + 59_000 for m, _, _ in group])
    del want[(10_000 * M, "z")]  # still open
    with tempfile.TemporaryDirectory() as d:
        minutes = Minutes(d, delay_ms=delay * M)
        out = []
        for n, group in enumerate(groups):
            merged: dict = {}
            for minute, device, value in group:
                merged.setdefault((minute, device), []).append(value)
            out += minutes.add(n, [partial(m, dev, vs) for (m, dev), vs in merged.items()])
            minutes.save(n)
    got = {(c[0], c[1]): (c[6], c[3], c[4]) for c in out}
    assert len(got) == len(out)  # each minute once
    assert got == {k: (len(v), min(v), max(v)) for k, v in want.items()}
    assert minutes.late == late and minutes.open_count() == 1


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 12), st.sampled_from("abcd"),
                                   st.integers(-20, 20)), max_size=12), min_size=1, max_size=25),
       st.sets(st.integers(0, 24)), st.booleans(), st.integers(0, 3), st.integers(3, 40))
def test_a_crash_before_or_after_saving_changes_nothing(batches, crashes, after_save, delay,
                                                        max_open):
    """Batches of partials, run once straight and once with crashes (a new process that
    runs the batch again, its state lost before or after `save`): every batch closes the
    same minutes with the same figures, whatever the state files were (whole or changes)."""
    import tempfile

    def partials(group, batch):
        merged: dict = {}
        for minute, device, value in group:
            merged.setdefault((minute + batch // 3, device), []).append(float(value))
        return [partial(m, d, vs) for (m, d), vs in sorted(merged.items())]

    def run(directory, crash_at):
        minutes = Minutes(directory, delay_ms=delay * M, max_open=max_open)
        outputs = []
        for n, group in enumerate(batches):
            rows = partials(group, n)
            closed = minutes.add(n, rows)
            if n in crash_at:
                if after_save and (rows or closed):
                    minutes.save(n)
                minutes = Minutes(directory, delay_ms=delay * M, max_open=max_open)
                closed = minutes.add(n, rows)
            if rows or closed:
                minutes.save(n)
            outputs.append(closed)
        return outputs

    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        assert run(a, set()) == run(b, crashes)


def test_saving_writes_the_changes_not_every_open_minute(tmp_path, monkeypatch):
    """A fleet's open minutes are many; each batch changes a few: what a batch writes follows
    those, and the state files do not pile up."""
    from spark_ingest import aggregates

    written: list[tuple[str, int]] = []
    real = aggregates._write

    def write(path, data):
        real(path, data)
        written.append((path.name.split("-")[0], path.stat().st_size))

    monkeypatch.setattr(aggregates, "_write", write)
    monkeypatch.setattr(aggregates, "MAX_DELTAS", 10)
    minutes = Minutes(tmp_path, delay_ms=10 * M)
    devices = [f"d{k}" for k in range(200)]
    for n in range(600):  # a batch a second, a quarter of the devices' current minute updated
        minutes.add(n, [partial(n // 60, d, [float(n)], newest=n * 1000) for d in devices[
            n % 4::4]])
        minutes.save(n)
        assert len(list(tmp_path.iterdir())) <= 2 * 10 + 2  # two chains at most
    assert minutes.open_count() >= 200 * 9  # ten minutes of 200 devices, about
    wholes = [size for kind, size in written if kind == "batch"]
    deltas = [size for kind, size in written if kind == "delta"]
    assert len(wholes) <= 70 and len(deltas) >= 500  # a whole state every 11th batch
    assert sum(deltas) / len(deltas) < max(wholes) / 20  # the changes, not every minute
    again = Minutes(tmp_path, delay_ms=10 * M)  # and a new process reads the same state
    assert again.add(600, []) == [] and again.open_count() == minutes.open_count()


@pytest.mark.parametrize("text, ms", [("10 minutes", 600_000), ("30 seconds", 30_000),
                                      ("1 hour 30 minutes", 5_400_000),
                                      ("interval 500 milliseconds", 500), ("2 min", 120_000)])
def test_watermark_intervals(text, ms):
    assert interval_ms(text) == ms


@pytest.mark.parametrize("text", ["", "ten minutes", "10", "10 parsecs", "minutes 10"])
def test_a_bad_watermark_is_refused_before_spark_starts(text, capsys):
    from spark_ingest.cli import main

    with pytest.raises(ValueError, match="not an interval"):
        interval_ms(text)
    assert main(["--watermark", text]) == 2
    assert "--watermark: not an interval" in capsys.readouterr().err


def staged(tmp_path, batch: int, partitions: list[str], text: str) -> list:
    files = []
    for part in partitions:
        path = tmp_path / "stage" / str(batch) / part / "x.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        files.append((path, path.parent.relative_to(tmp_path / "stage" / str(batch))))
    return files


def test_a_batch_placed_again_replaces_its_files_and_removes_what_it_no_longer_writes(
        tmp_path, monkeypatch):
    from pathlib import Path

    from spark_ingest.job import place_batch

    out = tmp_path / "data"
    place_batch(out, "t", 7, staged(tmp_path, 7, ["date=1/device=a", "date=1/device=b"], "one"))
    place_batch(out, "t", 8, staged(tmp_path, 8, ["date=1/device=a", "date=1/device=b"],
                                    "other"))
    # Batch 8 run again (after a crash): it writes device=a and device=c this time, so its
    # first attempt's device=b file goes (batch 7's stays). The
    # table is not walked to find the first attempt's files: its manifest says where they are.
    monkeypatch.setattr(Path, "rglob", lambda *a: pytest.fail("the table was walked"))
    place_batch(out, "t", 8, staged(tmp_path, 8, ["date=1/device=a", "date=1/device=c"],
                                    "again"))
    root = tmp_path / "data" / "t"
    files = {str(p.relative_to(root)): p.read_text() for p in root.glob("*/*/*")}
    assert files == {"date=1/device=a/batch-000000000007.parquet": "one",
                     "date=1/device=b/batch-000000000007.parquet": "one",
                     "date=1/device=a/batch-000000000008.parquet": "again",
                     "date=1/device=c/batch-000000000008.parquet": "again"}
    manifests = sorted(p.name for p in (tmp_path / "data" / "_staging" / "t").iterdir())
    assert manifests == ["batch-000000000008.files"]  # batch 7's went with batch 8


def test_an_output_whose_checkpoint_is_gone_is_refused_before_spark_starts(tmp_path, capsys):
    """A new checkpoint numbers its batches from 0 again: over the output of a checkpoint that
    was deleted, its files would replace theirs, batch for batch."""
    from spark_ingest.cli import main
    from spark_ingest.job import lost_checkpoint, place_batch

    out = tmp_path / "data"
    for batch in range(3):
        place_batch(out, "observations", batch, staged(tmp_path, batch, ["date=1/device=a"], "x"))
    assert lost_checkpoint(out) == 2  # no checkpoint at all
    assert main(["--out", str(out)]) == 2
    assert "holds the output of batches up to 2 of a checkpoint that is gone" in \
        capsys.readouterr().err
    commits = out / "_checkpoint" / "commits"
    commits.mkdir(parents=True)
    assert lost_checkpoint(out) == 2  # a new checkpoint, nothing committed yet
    (commits / "2").write_text("v1")
    assert lost_checkpoint(out) is None  # the checkpoint that wrote them
    first = tmp_path / "first"  # killed before it committed its first batch: run it again
    place_batch(first, "observations", 0, staged(tmp_path, 0, ["date=1/device=a"], "x"))
    assert lost_checkpoint(first) is None
    (first / "_aggregates_state").mkdir()
    (first / "_aggregates_state" / "batch-000000000004.json").write_text("{}")
    assert lost_checkpoint(first) == 4  # the aggregates' state says so too
    (first / "_aggregates_state" / "delta-000000000005.json").write_text("{}")
    assert lost_checkpoint(first) == 5


def test_the_readings_sent_to_the_sib_are_remembered_within_a_bound():
    """A late reading never replaces a newer value in the SIB; the pairs remembered are
    bounded, the least recently sent forgotten first."""
    from spark_ingest.job import Reading, SentReadings

    sent = SentReadings(limit=3)
    first = [Reading(f"d{k}", "temperature", 20.0, 1000) for k in range(3)]
    assert sent.fresh(first) == first
    sent.record(first)
    late = Reading("d1", "temperature", 19.0, 900)
    newer = Reading("d0", "temperature", 21.0, 2000)
    assert sent.fresh([late, newer]) == [newer]
    sent.record([newer])  # d0 sent last now
    sent.record([Reading("d9", "temperature", 5.0, 1000)])  # a fourth pair: d1 goes
    assert len(sent) == 3
    assert sent.fresh([late, newer]) == [late]  # d1 forgotten; d0 kept
