"""The ingest's pieces that need no Spark: the telemetry format (`spark_ingest.telemetry`:
`reading` writes what `parse` reads back exactly; every broken kind of message has its
reason) and the MQTT source's durable buffer (`spark_ingest.buffer`)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import given, strategies as st
import pytest

from spark_ingest.buffer import Buffer
from spark_ingest.telemetry import MAX_AHEAD, REASONS, check, parse, reading, topic_of
from tools.telemetry import BAD, messages

names = st.from_regex(r"\A[A-Za-z0-9._-]{1,64}\Z")
times = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1),
                     timezones=st.just(timezone.utc)).map(
    lambda t: t.replace(microsecond=t.microsecond // 1000 * 1000))


@pytest.mark.slow
@given(names, names, st.floats(allow_nan=False, allow_infinity=False),
       st.one_of(st.none(), st.text(max_size=32)), times)
def test_what_reading_writes_parse_reads_back(device, prop, value, unit, when):
    payload = reading(device, prop, value, unit, when)
    assert parse(topic_of(device), payload) == (device, prop, value, unit, when, None)


def test_each_broken_kind_has_its_reason_in_order():
    now = datetime.now(timezone.utc).timestamp()
    reasons = [check(topic_of(d), junk, now) for d, junk in (bad("sensor1") for bad in BAD)]
    assert reasons == list(REASONS)
    assert check("ksp/sensor1/telemetry", b"[1, 2]") == "not_json"
    assert check("ksp/sensor1/telemetry", reading("sensor1", "t", 1.0).replace(
        b'"value":1.0', b'"value":true')) == "bad_value"
    assert check("ksp/sensor1/telemetry", b'{"device":"sensor1","property":"t","value":NaN,'
                                          b'"time":"2026-01-01T00:00:00Z"}') == "bad_value"
    assert check("ksp/sensor1/telemetry", b'{"device":"sensor1","property":"t","value":1,'
                                          b'"time":"2026-02-30T00:00:00Z"}') == "bad_time"


def test_a_reading_from_a_clock_ahead_is_a_dead_letter():
    """More than `MAX_AHEAD` after the message came: refused (it would move the watermark on
    and make every later reading late); within it, or in the past, a reading."""
    came = datetime(2026, 11, 26, 12, 0, tzinfo=timezone.utc)
    topic = topic_of("sensor1")

    def at(seconds: float) -> str | None:
        payload = reading("sensor1", "t", 1.0, time=came + timedelta(seconds=seconds))
        return check(topic, payload, came.timestamp())

    assert at(MAX_AHEAD - 1) is None and at(-86_400 * 365) is None
    assert at(MAX_AHEAD + 1) == "future_time"
    assert check(topic, reading("sensor1", "t", 1.0, time=came + timedelta(days=365))) is None


def test_the_generator_says_what_it_sent():
    sent = list(messages(100, 4, duplicates=0.2, bad=0.1, seed=5,
                         start=datetime(2026, 1, 1, tzinfo=timezone.utc)))
    kinds = [k for _, _, k in sent]
    assert kinds.count("ok") == 100 and kinds.count("duplicate") > 0 and kinds.count("bad") > 0
    oks = [parse(t, p) for t, p, k in sent if k == "ok"]
    assert all(r[-1] is None for r in oks)
    assert len({(d, p, t) for d, p, _, _, t, _ in oks}) == 100  # each reading its own key
    now = datetime.now(timezone.utc).timestamp()
    assert all(check(t, p, now) is not None for t, p, k in sent if k == "bad")
    assert oks[4][4] - oks[0][4] == timedelta(milliseconds=10)


def test_the_buffer_keeps_what_is_not_committed_across_a_reopen(tmp_path):
    buffer = Buffer(tmp_path, max_messages=5)
    assert (buffer.last(), buffer.committed(), len(buffer)) == (0, 0, 0)
    assert buffer.append([("t/a", b"1"), ("t/b", b"2"), ("t/c", b"3")], now=10.0) == 3
    assert [r[:3] for r in buffer.read(1, 3)] == [(2, "t/b", b"2"), (3, "t/c", b"3")]
    buffer.commit(2)
    assert (buffer.last(), buffer.committed(), len(buffer)) == (3, 2, 1)
    buffer.append([("t/d", b"4")] * 4)
    assert buffer.full and len(buffer) == 5
    buffer.close()
    again = Buffer(tmp_path, max_messages=5)  # as after kill -9: the file is the state
    assert (again.last(), again.committed(), len(again)) == (7, 2, 5)
    reader = Buffer(tmp_path, readonly=True)  # an executor's view
    assert [r[0] for r in reader.read(2, 7)] == [3, 4, 5, 6, 7]
    assert again.backlog(now=13.0) == (5, 3.0)  # the oldest kept came at 10.0
    again.commit(7)
    assert (again.last(), again.committed(), len(again)) == (7, 7, 0)
    assert again.backlog() == (0, 0.0)
    assert again.append([("t/e", b"5")]) == 8  # numbers are never reused
    reader.close()
    again.close()


def test_the_buffers_count_is_the_files_so_another_process_commit_makes_room(tmp_path):
    """The receiver's process appends, the job's commits (`spark_ingest.receiving`): the
    receiver's view of how full the buffer is follows the job's commits."""
    receiver = Buffer(tmp_path, max_messages=5)
    job = Buffer(tmp_path)  # the job's own connection: another process, as far as SQLite knows
    receiver.append([("t/a", b"1")] * 5)
    assert receiver.full and len(job) == 5
    job.commit(3)
    assert not receiver.full and len(receiver) == 2 and len(job) == 2
    receiver.append([("t/b", b"2")] * 3)
    assert receiver.full and job.last() == 8
    job.commit(8)
    assert len(receiver) == 0 and receiver.last() == 8
    receiver.close()
    job.close()


def test_bad_receivers_and_share_groups_are_refused_before_spark_starts(capsys):
    from spark_ingest.cli import main

    assert main(["--receivers", "0"]) == 2
    assert "--receivers 0: 1 to 64" in capsys.readouterr().err
    assert main(["--receivers", "2", "--share-group", "a/b"]) == 2
    assert "--share-group 'a/b': a name without / + #" in capsys.readouterr().err


def test_a_checkpoint_of_another_number_of_receivers_is_refused_by_name():
    """Offsets name one buffer shard per receiver: a job restarted with another --receivers
    would read the wrong shards, so the source says so instead."""
    import pytest

    from spark_ingest.source import _Reader

    reader = _Reader({"buffer": "unused", "receivers": "2"})
    assert reader._seqs({"seq": [3, 4]}) == [3, 4]
    with pytest.raises(ValueError, match="the checkpoint has 1 receiver shard"):
        reader._seqs({"seq": 7})


def test_the_source_yields_arrow_batches_of_spark_s_schema(monkeypatch):
    """`read` hands Spark Arrow batches, which it takes only if their schema is the one it
    derives from `SCHEMA` (pyspark's own conversion, checked here); the rows are `parse`'s,
    dead letters included, in batches of `ARROW_ROWS`."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import (
        BinaryType, DoubleType, LongType, StringType, StructField, StructType, TimestampType,
    )

    from spark_ingest import source

    kinds = {"long": LongType(), "string": StringType(), "timestamp": TimestampType(),
             "double": DoubleType(), "binary": BinaryType()}
    spark_schema = StructType([StructField(name, kinds[kind]) for name, kind in
                               (column.split() for column in source.SCHEMA.split(", "))])
    sent = [(topic, payload) for topic, payload, _ in messages(5, devices=2, bad=0.5, seed=4)]
    received = datetime.now(timezone.utc).timestamp()
    rows = [(seq, topic, payload, received + seq) for seq, (topic, payload) in
            enumerate(sent, 1)]
    monkeypatch.setattr(source, "ARROW_ROWS", 3)
    reader = source._Reader({"buffer": "unused", "receivers": "2"})
    batches = list(reader.read(source._Range(rows, shard=1, shards=2)))
    assert [b.num_rows for b in batches] == [3] * (len(rows) // 3) + (
        [len(rows) % 3] if len(rows) % 3 else [])
    expected = to_arrow_schema(spark_schema, timezone="UTC")
    assert all(b.schema.equals(expected) for b in batches)
    got = [row for b in batches for row in b.to_pylist()]
    assert len(got) == len(rows) and any(row["reason"] for row in got)
    for row, (seq, topic, payload, at) in zip(got, rows):
        assert row["seq"] == seq * 2 + 1 and row["topic"] == topic
        assert row["payload"] == payload.decode()
        assert row["received"] == datetime.fromtimestamp(at, timezone.utc)
        device, prop, value, unit, time, reason = parse(topic, payload, at)
        assert (row["device"], row["property"], row["value"], row["unit"], row["time"],
                row["reason"]) == (device, prop, value, unit, time, reason)


def test_with_local_buffer_the_executors_read_their_span_from_the_buffer_file(tmp_path):
    """`localBuffer`: a partition is a span of sequence numbers and the buffer's directory,
    not the messages; the executor reads the same rows from the file that the driver would
    have shipped, each shard's from its own file, every number in exactly one partition."""
    import pickle

    from spark_ingest import source

    sent = [(topic, payload) for topic, payload, _ in messages(50, devices=3, bad=0.2, seed=7)]
    for k in range(2):
        buffer = Buffer(tmp_path / f"shard-{k}")
        buffer.append(sent[k::2][:10], now=1_700_000_000.0)
        buffer.append(sent[k::2][10:], now=1_700_000_001.0)
        buffer.commit(3)
        buffer.close()
    options = {"buffer": str(tmp_path), "receivers": "2", "partitions": "3"}
    local = source._Reader({**options, "localBuffer": "true"})
    parts = local.partitions({"seq": [3, 3]}, {"seq": [24, 20]})
    assert all(p.rows == [] and p.path for p in parts) and len(parts) == 6
    assert len(pickle.dumps(parts)) < 2_000  # the tasks carry no messages
    got = [row for p in parts for b in local.read(p) for row in b.to_pylist()]
    shipped = []
    for k, (first, last) in enumerate(((3, 24), (3, 20))):
        buffer = Buffer(tmp_path / f"shard-{k}", readonly=True)
        rows = list(buffer.read(first, last))
        buffer.close()
        shipped += [row for b in source._Reader(options).read(source._Range(rows, k, 2))
                    for row in b.to_pylist()]
    assert len(got) == 21 + 17 and sorted(r["seq"] for r in got) == sorted(
        r["seq"] for r in shipped)
    assert sorted(got, key=lambda r: r["seq"]) == sorted(shipped, key=lambda r: r["seq"])
    assert source._Reader({**options, "localBuffer": "false"}).local is False


def _offsets(checkpoint, watermarks: dict[int, int]) -> None:
    """An offset log as Spark writes it: per batch, "v1", the metadata, the source's offset."""
    import json

    directory = checkpoint / "offsets"
    directory.mkdir(parents=True, exist_ok=True)
    for batch, ms in watermarks.items():
        (directory / str(batch)).write_text("v1\n" + json.dumps(
            {"batchWatermarkMs": ms, "batchTimestampMs": 1, "conf": {}}) + '\n{"seq":5}\n')
        (directory / f".{batch}.crc").write_text("not an entry")


def test_late_readings_are_judged_by_the_previous_batch_s_watermark(tmp_path):
    """Spark drops a row as late by the watermark of the batch before the one running
    (`PropagateWatermarkSimulator.getInputWatermarkForLateEvents`): the offset log's second
    newest entry, since Spark writes the running batch's entry before planning it."""
    from spark_ingest.source import late_watermark

    checkpoint = tmp_path / "_checkpoint"
    assert late_watermark(None) is None  # no checkpoint: no watermark known, nothing tagged
    assert late_watermark(str(checkpoint)) == 0  # the epoch: where Spark's watermark starts
    _offsets(checkpoint, {0: 0})
    assert late_watermark(str(checkpoint)) == 0  # the first batch: the epoch too
    _offsets(checkpoint, {1: 5_000})
    assert late_watermark(str(checkpoint)) == 0  # batch 1 runs: batch 0's watermark
    _offsets(checkpoint, {2: 9_000})
    assert late_watermark(str(checkpoint)) == 5_000
    (checkpoint / "offsets" / "0").unlink()  # Spark purges old entries
    _offsets(checkpoint, {3: 12_000})
    assert late_watermark(str(checkpoint)) == 9_000


def test_from_the_first_batch_a_reading_at_or_before_the_epoch_is_a_late_dead_letter():
    """Spark's watermark starts at the epoch and drops rows at or before it from the first
    batch on: a reading dated 0001-01-01, 1970-01-01T00:00:00Z or a millisecond before is a
    dead letter `late` with its message kept (a board whose clock was never set sends such),
    one a millisecond after the epoch is a reading; with no watermark known (no checkpoint)
    nothing is tagged."""
    from spark_ingest import source
    from spark_ingest.telemetry import LATE

    epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
    cases = [(datetime(1, 1, 1, tzinfo=timezone.utc), LATE), (epoch, LATE),
             (epoch - timedelta(milliseconds=1), LATE),
             (epoch + timedelta(milliseconds=1), None),
             (datetime.now(timezone.utc).replace(microsecond=0), None)]
    received = datetime.now(timezone.utc).timestamp()
    rows = [(k, topic_of("s1"), reading("s1", "t", float(k), "C", when), received)
            for k, (when, _) in enumerate(cases, 1)]
    reader = source._Reader({"buffer": "unused"})
    first = [row for b in reader.read(source._Range(rows, late_ms=0)) for row in b.to_pylist()]
    assert [row["reason"] for row in first] == [reason for _, reason in cases]
    assert [row["payload"].encode() for row in first] == [payload for _, _, payload, _ in rows]
    unknown = [row for b in reader.read(source._Range(rows)) for row in b.to_pylist()]
    assert [row["reason"] for row in unknown] == [None] * len(cases)


def test_a_reading_at_or_before_the_watermark_comes_as_a_late_dead_letter():
    """The partition carries the watermark; a valid reading at or before it (to the
    millisecond, as Spark compares) is a dead letter `late` with the message kept; a broken one
    keeps its own reason; one a millisecond after is a reading."""
    from spark_ingest import source
    from spark_ingest.telemetry import LATE

    wm = datetime(2026, 11, 26, 12, 0, 0, tzinfo=timezone.utc)
    received = wm.timestamp() + 3600
    cases = [(wm - timedelta(minutes=5), LATE), (wm, LATE),
             (wm + timedelta(milliseconds=1), None), (wm + timedelta(minutes=1), None)]
    rows = [(k, topic_of("s1"), reading("s1", "t", float(k), "C", when), received)
            for k, (when, _) in enumerate(cases, 1)]
    rows.append((9, topic_of("s1"), b"{broken", received))
    reader = source._Reader({"buffer": "unused"})
    late_ms = round(wm.timestamp() * 1000)
    got = [row for b in reader.read(source._Range(rows, late_ms=late_ms)) for row in b.to_pylist()]
    assert [row["reason"] for row in got] == [reason for _, reason in cases] + ["not_json"]
    for row, (seq, topic, payload, _) in zip(got, rows):
        assert row["payload"] == payload.decode() and row["seq"] == seq
        if row["reason"] == LATE:
            assert row["time"] is None and row["device"] is None  # no event time: never dropped
        elif row["reason"] is None:
            assert row["time"] > wm
    plain = [row for b in reader.read(source._Range(rows)) for row in b.to_pylist()]
    assert [row["reason"] for row in plain] == [None] * 4 + ["not_json"]  # no watermark yet


def test_a_password_over_plain_mqtt_is_refused_before_anything_starts(tmp_path, capsys,
                                                                      monkeypatch):
    from spark_ingest.cli import main

    (tmp_path / "pw").write_text("secret\n")
    assert main(["--mqtt", "mqtt://127.0.0.1:1883", "--mqtt-user", "u",
                 "--mqtt-password-file", str(tmp_path / "pw")]) == 2
    assert "a password would cross the network in clear: use mqtts://" in (
        capsys.readouterr().err)
    monkeypatch.setenv("KSP_MQTT_PASSWORD", "secret")
    assert main(["--mqtt", "mqtt://127.0.0.1:1883", "--mqtt-user", "u"]) == 2
    assert "in clear" in capsys.readouterr().err
    assert main(["--mqtt", "mqtts://127.0.0.1", "--mqtt-ca", str(tmp_path / "none.pem")]) == 2
    err = capsys.readouterr().err
    assert "--mqtt-ca" in err and "no such file" in err


@pytest.mark.slow  # a process
def test_without_the_spark_extra_ksp_ingest_says_how_to_install_it_in_one_line(tmp_path):
    """The interpreter the virtualenv was made from has the project's code (PYTHONPATH) and
    none of the extras: one line naming what is missing and the command that installs it."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    base = Path(sys.base_prefix) / "bin" / "python3"
    probe = subprocess.run([base, "-c", "import pyspark"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip(f"{base} has pyspark")
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([base, "-m", "spark_ingest.cli", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("ksp-ingest: pyspark, pyarrow")
    assert f"-m pip install -e '{root}[spark]' -c '{root}/constraints.txt'" in done.stderr
