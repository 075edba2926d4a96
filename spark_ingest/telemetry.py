"""The telemetry format: one reading per MQTT message, as JSON, on `ksp/<device>/telemetry`.

    {"device": "sensor42", "property": "temperature", "value": 21.5, "unit": "Cel",
     "time": "2026-11-25T16:00:00.125Z"}

- `device`, `property`: 1 to 64 characters of ``A-Z a-z 0-9 . _ -`` (each becomes the last
  segment of an IRI: the sensor ``<base><device>``, the property ``<base><property>``); the
  topic's device and the payload's must be the same.
- `value`: a JSON number, finite (not a string, not a boolean).
- `unit`: optional, a UCUM code (``Cel``, ``%``, ``lx``), at most 32 characters.
- `time`: when it was read, RFC 3339 with a time zone (``Z`` or ``+01:00``), milliseconds at
  most, and not more than `MAX_AHEAD` (5 minutes) after the message reached the ingest; it is
  the observation's `sosa:resultTime` and, with device and property, what makes a reading a
  duplicate of another. (One reading from a clock a year ahead would move the watermark a year
  on: every reading after it would be late, for the de-duplication and the aggregates.)

The ingest (`spark_ingest.job`) checks every message against this; a message
that fails goes to the dead-letter table with the first rule it broke (`REASONS`). `parse`
never raises, whatever the bytes: names and times are matched whole (`fullmatch`), a number
past a double's range is `bad_value`, JSON nested too deep to read is `not_json`. The ingest
reads messages with `parse` (in its MQTT source, on the executors), and what publishes (`ksp
telemetry`, the simulated board) writes them with `reading`: one definition of the format.
"""
from __future__ import annotations

import json
import math
import re
from datetime import datetime, timezone

__all__ = ["ERROR", "LATE", "MAX_AHEAD", "REASONS", "SIB_REFUSED", "TOPIC", "check", "is_utf8",
           "parse", "reading", "topic_of"]

#: The topic a device publishes on; `+` in its place subscribes to every device.
TOPIC = "ksp/{device}/telemetry"
# Whole strings only (`fullmatch`): `$` would also match before a final newline, and `\d` any
# Unicode digit.
NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,3})?"
                  r"(Z|[+-][0-9]{2}:[0-9]{2})")

#: Why a message is a dead letter, in the order the rules are checked.
REASONS = {
    "not_json": "the payload is not a JSON object",
    "bad_device": "device missing or not 1-64 of A-Z a-z 0-9 . _ -",
    "topic_mismatch": "the payload's device is not the topic's",
    "bad_property": "property missing or not 1-64 of A-Z a-z 0-9 . _ -",
    "bad_value": "value missing or not a finite number",
    "bad_unit": "unit not a string of at most 32 characters (UTF-8)",
    "bad_time": "time missing or not RFC 3339 with a time zone (milliseconds at most)",
    "future_time": "time more than MAX_AHEAD after the message came",
}
#: A reason not `parse`'s: a valid reading whose time was at or before the watermark when
#: it came, which Spark's de-duplication would drop (set by the ingest's source).
LATE = "late"
#: Not `parse`'s either: reading the message raised an exception (a case no rule foresaw), or
#: the SIB refused the update with the reading (which is an observation all the same); the
#: dead letter's `error` names the exception's type. One message never stops the ingest.
ERROR = "error"
SIB_REFUSED = "sib_refused"
#: Seconds a reading's time may be after the message's arrival (clocks differ a little).
MAX_AHEAD = 300.0


def topic_of(device: str) -> str:
    return TOPIC.format(device=device)


def reading(device: str, prop: str, value: float, unit: str | None = None,
            time: datetime | None = None) -> bytes:
    """A message's payload (UTF-8 JSON), `time` now if not given."""
    when = (time or datetime.now(timezone.utc)).astimezone(timezone.utc)
    body = {"device": device, "property": prop, "value": value,
            "time": when.isoformat(timespec="milliseconds").replace("+00:00", "Z")}
    if unit is not None:
        body["unit"] = unit
    return json.dumps(body, separators=(",", ":")).encode()


def check(topic: str, payload: bytes, received: float | None = None) -> str | None:
    """None for a valid message, else its reason (a key of `REASONS`)."""
    return parse(topic, payload, received)[-1]


def parse(topic: str, payload: bytes, received: float | None = None) -> tuple:
    """(device, property, value, unit, time, reason): the reading's fields (`time` an aware
    datetime in UTC) and None, or Nones and the reason it is a dead letter. `received`: when
    the message came (seconds since the epoch; None: not checked against it)."""
    failed = (None, None, None, None, None)
    try:  # JSON text is UTF-8 (RFC 8259 §8.1): json.loads would guess UTF-16 from bytes, and
        # let encoded surrogates through; UnicodeDecodeError is a ValueError
        body = json.loads(payload if isinstance(payload, str) else
                          bytes(payload).decode("utf-8"))
    except (ValueError, RecursionError):  # RecursionError: arrays nested thousands deep
        return (*failed, "not_json")
    if not isinstance(body, dict):
        return (*failed, "not_json")
    device = body.get("device")
    if not isinstance(device, str) or not NAME.fullmatch(device):
        return (*failed, "bad_device")
    parts = topic.split("/")
    if len(parts) != 3 or parts[1] != device:
        return (*failed, "topic_mismatch")
    prop = body.get("property")
    if not isinstance(prop, str) or not NAME.fullmatch(prop):
        return (*failed, "bad_property")
    value = body.get("value")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return (*failed, "bad_value")
    try:  # an integer past a double's range (1 and 400 zeros) overflows
        value = float(value)
    except OverflowError:
        return (*failed, "bad_value")
    if not math.isfinite(value):
        return (*failed, "bad_value")
    unit = body.get("unit")
    if unit is not None and (not isinstance(unit, str) or len(unit) > 32 or not is_utf8(unit)):
        return (*failed, "bad_unit")
    text = body.get("time")
    if not isinstance(text, str) or not TIME.fullmatch(text):
        return (*failed, "bad_time")
    try:  # OverflowError: a time zone that moves year 1 or 9999 out of range
        time = datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(timezone.utc)
    except (ValueError, OverflowError):
        return (*failed, "bad_time")
    if received is not None and time.timestamp() > received + MAX_AHEAD:
        return (*failed, "future_time")
    return device, prop, value, unit, time, None


def is_utf8(text: str) -> bool:
    """Whether `text` is UTF-8 (JSON's `\\ud800` escapes make lone surrogates, which are not,
    and which no Parquet string column takes)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
