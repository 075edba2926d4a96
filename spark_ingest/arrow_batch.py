"""A micro-batch's outputs computed from its rows as one Arrow table in the driver: what
`Ingest._batch` computes with Spark on a cluster — the observations' rows, the partial
aggregates, the dead letters and their reasons — here with pyarrow's kernels.

Why: on a local master the executors share the driver's process and the two cores with the
MQTT receiver. There, the batch taken to the driver once (`DataFrame.toArrow`) and worked on
in C++ cost the JVM a third less than the same work as Spark jobs did (a cached batch, an
aggregation, a count, two writes: 4.8 s of CPU against 7.3 s for a 200,000-reading burst
on the 2-core host), and the batches then keep pace with the receiver. Each function gives
what its Spark counterpart in `spark_ingest.job` gives for the same rows;
`tests/test_ingest_arrow_batch.py` runs both on the same batches and compares.
"""
from __future__ import annotations

from .telemetry import SIB_REFUSED

__all__ = ["letters", "observations", "partials", "reasons", "refused", "split"]

#: The dead letters' columns, in the order Spark's `select` gives them.
LETTER_COLUMNS = ["seq", "topic", "payload", "payload_bytes", "received", "reason", "error"]


def split(table):
    """(readings, dead letters) of a batch: the rows without a reason, the rows with one."""
    import pyarrow.compute as pc

    reading = pc.is_null(table["reason"])
    return table.filter(reading), table.filter(pc.invert(reading))


def _floor_div(values, divisor: int):
    """Integer division rounding down, as Spark's `unix_millis` and `floor(ms / n)` do (C's
    truncation differs before 1970)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    q = pc.divide(values, divisor)
    behind = pc.and_(pc.less(values, 0), pc.not_equal(pc.multiply(q, divisor), values))
    return pc.subtract(q, pc.cast(behind, pa.int64()))


def _millis(times):
    """Unix milliseconds of timestamps (µs), as Spark's `unix_millis`."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return _floor_div(pc.cast(times, pa.int64()), 1000)


def _day(times):
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.cast(times, pa.date32())  # the session's time zone, UTC, as to_date's


def observations(readings, base: str):
    """The observations' rows (SOSA's terms as columns) with the `date` and `device` they are
    partitioned by: `Ingest._batch`'s `observations`."""
    import pyarrow as pa
    import pyarrow.compute as pc

    device, prop = readings["device"], readings["property"]
    ms = pc.cast(_millis(readings["time"]), pa.string())
    return pa.table({
        "observation": pc.binary_join_element_wise(base + "observation/", device, "/", prop,
                                                   "/", ms, ""),
        "madeBySensor": pc.binary_join_element_wise(base, device, ""),
        "observedProperty": pc.binary_join_element_wise(base, prop, ""),
        "hasSimpleResult": readings["value"], "unit": readings["unit"],
        "resultTime": readings["time"], "date": _day(readings["time"]), "device": device})


def partials(readings) -> list[tuple]:
    """The partial aggregates, as `Ingest._minutes` gives them: (minute ms, device, property,
    min, max, sum, count, newest ms, the newest reading's value) per minute, device and
    property."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if readings.num_rows == 0:
        return []
    ms = _millis(readings["time"])
    # Sorted by time, the last value of each group is the newest reading's (Spark's max_by);
    # the de-duplication leaves one reading per (device, property, time).
    rows = pa.table({"minute": pc.multiply(_floor_div(ms, 60_000), 60_000),
                     "device": readings["device"], "property": readings["property"],
                     "value": readings["value"], "ms": ms}).sort_by("ms")
    agg = rows.group_by(["minute", "device", "property"], use_threads=False).aggregate([
        ("value", "min"), ("value", "max"), ("value", "sum"), ([], "count_all"),
        ("ms", "max"), ("value", "last")])
    return list(zip(*(agg[name].to_pylist() for name in [
        "minute", "device", "property", "value_min", "value_max", "value_sum", "count_all",
        "ms_max", "value_last"])))


def letters(dead):
    """The dead letters' rows and the `date` they are partitioned by (when they came)."""
    return dead.select(LETTER_COLUMNS).append_column("date", _day(dead["received"]))


def reasons(dead) -> dict[str, int]:
    """Dead letters per reason."""
    import pyarrow.compute as pc

    if dead.num_rows == 0:
        return {}
    counts = pc.value_counts(dead["reason"])
    return dict(zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist()))


def refused(readings, keys: list[tuple[str, str, int, str]]):
    """The rows of the readings the SIB refused — `keys`: (device, property, ms, the
    exception's type) — as dead letters `sib_refused` naming that type (`Ingest._refused`)."""
    import pyarrow as pa

    why = {(d, p, ms): error for d, p, ms, error in keys}
    found = [why.get(key) for key in zip(readings["device"].to_pylist(),
                                          readings["property"].to_pylist(),
                                          _millis(readings["time"]).to_pylist())]
    rows = readings.filter(pa.array([error is not None for error in found]))
    errors = pa.array([error for error in found if error is not None], pa.string())
    names = rows.column_names
    return (rows.set_column(names.index("reason"), "reason",
                            pa.array([SIB_REFUSED] * rows.num_rows, pa.string()))
            .set_column(names.index("error"), "error", errors))
