"""One message never stops the ingest: the messages that once failed every batch
(and every restart) are dead letters with their reason; whatever bytes or JSON come, parsing,
the source's rows and the SIB push do not raise; dead letters keep the payload's exact bytes.
The end-to-end case (the real job, a real mosquitto) is in tests/test_ingest.py."""
from __future__ import annotations

import asyncio
import json
from datetime import datetime, timezone

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from spark_ingest.telemetry import ERROR, LATE, REASONS, parse, reading, topic_of
from tools.telemetry import poison

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

WHEN = "2026-11-25T16:00:00.125Z"


#: (what, topic, payload, reason): each made a batch raise before, and so every batch after.
POISON = [(what, topic_of("s1"), body, reason) for what, body, reason in poison("s1", WHEN)]
POISON.append(("a device ending in a newline, in the topic too", "ksp/s1\n/telemetry",
               POISON[1][2], "bad_device"))


@pytest.mark.parametrize("what, topic, body, reason", POISON, ids=[p[0] for p in POISON])
def test_each_poison_message_is_a_dead_letter_with_its_reason(what, topic, body, reason):
    assert parse(topic, body)[-1] == reason
    row = _rows([(1, topic, body, 1.0)])[0]
    assert row["reason"] == reason and row["error"] is None
    assert _exact(row) == body


def test_a_payload_that_is_not_utf8_is_kept_byte_for_byte():
    """The text is readable (U+FFFD for each invalid sequence); `payload_bytes` holds the
    bytes, null when the text is them."""
    broken = b'{"device":"s1","property":"t","value":1,\xff\xfe"time":"x"}\xc3'
    good = reading("s1", "t", 1.0, time=datetime(2026, 1, 1, tzinfo=timezone.utc))
    bad_row, good_row = _rows([(1, topic_of("s1"), broken, 2e9),
                               (2, topic_of("s1"), good, 2e9)])
    assert bad_row["reason"] == "not_json" and bad_row["payload_bytes"] == broken
    assert "\ufffd" in bad_row["payload"]
    assert good_row["reason"] is None and good_row["payload_bytes"] is None
    assert good_row["payload"].encode() == good


@pytest.mark.parametrize("what, payload", [
    ("UTF-16 with a byte order mark", ("\ufeff" + reading("s1", "t", 1.0).decode()).encode(
        "utf-16-le")),
    ("UTF-16 big-endian, no mark", reading("s1", "t", 1.0).decode().encode("utf-16-be")),
    ("an encoded lone surrogate in an extra field",
     reading("s1", "t", 1.0)[:-1] + b',"note":"\xed\xa0\x80"}'),
    ("UTF-32", reading("s1", "t", 1.0).decode().encode("utf-32")),
], ids=lambda v: v if isinstance(v, str) else "")
def test_a_reading_in_another_encoding_than_utf8_is_a_dead_letter_with_its_bytes(what, payload):
    """JSON text is UTF-8 (RFC 8259 §8.1): a reading json.loads would read from other bytes
    (it guesses UTF-16 and UTF-32, and lets encoded surrogates through) is `not_json`, its
    exact bytes kept."""
    assert parse(topic_of("s1"), payload)[-1] == "not_json"
    row = _rows([(1, topic_of("s1"), payload, 2e9)])[0]
    assert row["reason"] == "not_json" and _exact(row) == payload


def test_a_row_arrow_refuses_is_a_dead_letter_error_and_the_others_stay():
    """Whatever `parse` lets through that no column takes (here a unit with a lone surrogate,
    given to the batch as though parse had passed it) costs that row, not the batch."""
    from spark_ingest import source

    schema = source._arrow_schema()
    ok = (1, topic_of("s1"), "{}", None, 0, "s1", "t", 1.0, None, 0, None, None)
    bad = (2, topic_of("s1"), "{}", None, 0, "s1", "t", 1.0, "\ud800", 0, None, None)
    rows = source._batch([ok, bad, ok], schema).to_pylist()
    assert [r["reason"] for r in rows] == [None, ERROR, None]
    assert rows[1]["error"] == "UnicodeEncodeError" and rows[1]["device"] is None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12)
fields = st.fixed_dictionaries({}, optional={
    "device": st.one_of(json_values, st.just("s1"), st.just("s1\n")),
    "property": st.one_of(json_values, st.just("t"), st.just("t\n")),
    "value": st.one_of(json_values, st.integers(min_value=10**308, max_value=10**400)),
    "unit": json_values,
    "time": st.one_of(json_values, st.just(WHEN), st.just("0001-01-01T00:00:00+01:00"),
                      st.just("9999-12-31T23:59:59-01:00"), st.just(WHEN + "\n")),
})


@settings(max_examples=300, deadline=None)
@given(st.text(), st.binary())
def test_any_bytes_are_a_reading_or_a_dead_letter(topic, body):
    _check(topic, body)


@settings(max_examples=300, deadline=None)
@given(fields, st.sampled_from([topic_of("s1"), "ksp/s1\n/telemetry", "x"]))
def test_any_json_is_a_reading_or_a_dead_letter(body, topic):
    _check(topic, json.dumps(body).encode())


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.text(), st.binary() | fields.map(
    lambda b: json.dumps(b).encode())), max_size=8))
def test_the_source_makes_one_row_of_each_message_whatever_it_is(messages):
    rows = _rows([(seq, topic, body, 1.0) for seq, (topic, body) in enumerate(messages, 1)])
    assert len(rows) == len(messages)
    for row, (topic, body) in zip(rows, messages):
        assert _exact(row) == body
        assert (row["reason"] is None) == (parse(topic, body, 1.0)[-1] is None)


def _check(topic: str, body: bytes) -> None:
    device, prop, value, unit, when, reason = parse(topic, body)
    if reason is not None:
        assert reason in REASONS and device is None
        return
    from spark_ingest.telemetry import NAME

    assert NAME.fullmatch(device) and NAME.fullmatch(prop) and "\n" not in device + prop
    assert isinstance(value, float) and value == value and abs(value) != float("inf")
    assert when.tzinfo is not None and (unit is None or len(unit) <= 32)


def _rows(messages: list[tuple]) -> list[dict]:
    """The source's rows for (seq, topic, payload, received) as Spark would get them."""
    from spark_ingest import source

    reader = source._Reader({"buffer": "unused"})
    return [row for b in reader.read(source._Range(messages)) for row in b.to_pylist()]


def _exact(row: dict) -> bytes:
    """A dead letter's payload as it came: `payload_bytes`, or the text's UTF-8."""
    return row["payload_bytes"] if row["payload_bytes"] is not None else (
        row["payload"].encode())


# -- the SIB push ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sib_url():
    from sib.testing import SibProcess

    with SibProcess("--memory", "--udp-port", "0", "--tcp-port", "-1",
                    "--coap-port", "-1") as sib:
        yield f"udp://127.0.0.1:{sib.ports['udp']}"


BASE = "http://example.org/greenhouse#"
good_names = st.from_regex(r"\A[A-Za-z0-9._-]{1,16}\Z")
any_names = st.one_of(good_names, st.text(min_size=1, max_size=16),
                      st.sampled_from(["t\n", "a>b", 'x"', "} DROP ALL #", "a b"]))


@pytest.mark.slow  # a ksp-sib process
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(any_names, any_names, st.floats(allow_nan=False,
                                                          allow_infinity=False)),
                min_size=1, max_size=12, unique_by=lambda r: r[:2]))
def test_the_push_stores_every_good_reading_and_refuses_only_bad_ones(sib_url, pairs):
    """Readings with any names: each one whose names are telemetry names is in the SIB after
    the push; the others are refused, each with its exception's type; nothing raises."""
    from spark_ingest.job import Reading, push
    from spark_ingest.telemetry import NAME
    from transports import connect

    readings = [Reading(d, p, v, 1) for d, p, v in pairs]
    updates, refused = push(sib_url, BASE, readings)
    good = [r for r in readings if NAME.fullmatch(r.device) and NAME.fullmatch(r.property)]
    assert {r for r, _ in refused} == set(readings) - set(good)
    assert all(isinstance(error, str) and error for _, error in refused)
    assert updates == (1 if good else 0)

    async def stored() -> dict:
        async with connect(sib_url) as kp:
            rows = await kp.query("SELECT ?s ?p ?v WHERE { ?s ?p ?v }")
            return {(str(r[0]), str(r[1])): float(r[2]) for r in rows.rows}

    state = asyncio.run(asyncio.wait_for(stored(), 60))
    for r in good:
        assert state[BASE + r.device, BASE + r.property] == r.value


@pytest.mark.slow  # a ksp-sib process
def test_updates_refused_whole_are_halved_down_to_each_reading_and_nothing_raises(sib_url):
    """A base no SPARQL takes: each update is refused, halved down to single readings, each
    refused with its exception's type; the next push, with a good base, is one update."""
    from spark_ingest.job import Reading, push

    readings = [Reading(f"d{k}", "t", float(k), 1) for k in range(10)]
    updates, refused = push(sib_url, "not an IRI base <", readings)
    assert [r for r, _ in refused] == readings and updates == 0
    assert {error for _, error in refused} == {"SparqlSyntaxError"}
    updates, refused = push(sib_url, BASE, readings)
    assert (updates, refused) == (1, [])


def test_late_and_error_are_reasons_of_their_own():
    from spark_ingest.telemetry import SIB_REFUSED

    assert not {LATE, ERROR, SIB_REFUSED} & set(REASONS)


@pytest.mark.spark
@pytest.mark.slow  # a local Spark session
def test_a_reading_the_sib_refused_becomes_a_dead_letter_with_its_message(tmp_path):
    """The rows of the readings the push returned as refused, found by (device, property,
    time) in the batch, in the dead letters' columns: reason `sib_refused`, the exception's
    type, the message as it came. (No ksp-sib setting refuses an update of good names, so the
    refusal is given.)"""
    from spark_ingest import source
    from spark_ingest.cli import spark_session
    from spark_ingest.job import Ingest, IngestOptions, Reading
    from spark_ingest.telemetry import SIB_REFUSED

    when = datetime(2026, 1, 1, tzinfo=timezone.utc)
    messages = [(k, topic_of("s1"), reading("s1", p, 1.0, time=when), 2e9)
                for k, p in enumerate(["t", "h"], 1)]
    spark = spark_session("local[1]", "refused")
    try:
        batch = spark.createDataFrame([tuple(r.values()) for r in _rows(messages)],
                                      source.SCHEMA)  # as the source's rows come
        ingest = Ingest(spark, IngestOptions(out=str(tmp_path)))
        refused = ingest._refused(batch, [(Reading("s1", "h", 1.0, round(
            when.timestamp() * 1000)), "KspStatusError")]).collect()
    finally:
        spark.stop()
    assert [(r["seq"], r["reason"], r["error"], r["payload"].encode()) for r in refused] == [
        (2, SIB_REFUSED, "KspStatusError", messages[1][2])]
