"""TimestampConverter's conversions on the per-partition path (spark_jobs/transform/row_transforms.py): a field's
values read as microseconds since the epoch (by a Java pattern, as an ISO text, or as a number of
``unix_precision`` units), and written back as the ``target_type`` asks. The Java patterns are read
and written by spark_jobs/transform/row_patterns.py (the config refuses those Kafka Connect refuses:
spark_jobs/transform/java_dates.py), which TimestampRouter (spark_jobs/transform/row_steps.py) writes the Kafka timestamp
by too.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.transform import row_patterns
from spark_jobs.transform import transform_config as cfgs

_ISO = r"^\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?)?$"
_ZONED = r"^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})$"  # ZonedTimestamp's


def as_micros(raw: pa.Array, cfg: cfgs.TimestampConverter) -> pa.Array:
    """The field's values as microseconds since the epoch (UTC, the session's time zone), null where
    a value is not a timestamp."""
    kind = raw.type
    per_unit = {"seconds": 1_000_000, "milliseconds": 1_000, "microseconds": 1}[cfg.unix_precision]
    if pa.types.is_string(kind):  # by the format, else as the ISO text a decoded date or time has
        read = [_iso_micros(raw)]
        if cfg.format:
            read.insert(0, row_patterns.parse(raw, row_patterns.tokens(cfg.format)))
        # a whole number's text: the number (the per-record decode gives a JSON number as its text)
        number = pc.if_else(pc.fill_null(pc.match_substring_regex(raw, r"^-?\d{1,18}$"), False), raw, None)
        read.append(as_micros(pc.cast(number, pa.int64()), cfg))
        return pc.coalesce(*read)
    if pa.types.is_integer(kind):
        wide = pc.cast(raw, pa.int64())
        limit = (2 ** 63 - 1) // per_unit
        fits = pc.and_(pc.greater_equal(wide, -limit), pc.less_equal(wide, limit))
        return pc.multiply(pc.if_else(fits, wide, None), per_unit)
    if pa.types.is_floating(kind) or pa.types.is_decimal(kind):
        scaled = pc.multiply(pc.cast(raw, pa.float64()), float(per_unit))
        ok = pc.and_(pc.is_finite(scaled), pc.less(pc.abs(scaled), 9.2e18))
        return pc.cast(pc.trunc(pc.if_else(ok, scaled, None)), pa.int64())
    if pa.types.is_date(kind):
        return pc.multiply(pc.cast(pc.cast(raw, pa.int32()), pa.int64()), 86_400_000_000)
    if pa.types.is_timestamp(kind):
        return pc.cast(pc.cast(raw, pa.timestamp("us", kind.tz)), pa.int64())
    return pa.nulls(len(raw), pa.int64())  # a TIME (duration), a struct …: each value's record fails


def _iso_micros(raw: pa.Array) -> pa.Array:
    """Texts of the ISO forms (2024-02-29, 2024-02-29 13:14:15.123456, …T…) as µs, null for others:
    the texts of dates and times the per-record decode gives, and Spark's cast of text to a timestamp."""
    out = []
    for pattern, kind in ((_ISO, pa.timestamp("us")), (_ZONED, pa.timestamp("us", "UTC"))):
        text = pc.if_else(pc.fill_null(pc.match_substring_regex(raw, pattern), False), raw, None)
        try:
            parsed = pc.cast(text, kind)
        except pa.ArrowInvalid:  # a date like 2024-13-01: value by value
            parsed = pa.array([_iso(v) for v in text.to_pylist()], kind)
        out.append(pc.cast(parsed, pa.int64()))
    return pc.coalesce(*out)


def _iso(text: str | None) -> Any:
    if text is None:
        return None
    try:
        at = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return at.astimezone(dt.UTC) if at.tzinfo is not None else at


def timestamp_out(micros: pa.Array, cfg: cfgs.TimestampConverter) -> pa.Array:
    per_unit = {"seconds": 1_000_000, "milliseconds": 1_000, "microseconds": 1}[cfg.unix_precision]
    stamp = pc.cast(micros, pa.timestamp("us"))
    if cfg.target_type == "unix":  # toward zero, as Spark's (unix_micros / unit).cast(bigint)
        values = micros.fill_null(0).to_numpy()
        whole = np.sign(values) * (np.abs(values) // per_unit)
        return pa.array(whole, pa.int64(), mask=micros.is_null().to_numpy(zero_copy_only=False))
    if cfg.target_type == "Timestamp":
        return stamp
    if cfg.target_type == "Date":
        return pc.cast(pc.floor_temporal(stamp, unit="day"), pa.date32())
    return row_patterns.write(stamp, row_patterns.tokens(
        "HH:mm:ss.SSS" if cfg.target_type == "Time" else cfg.format or "yyyy-MM-dd HH:mm:ss"))
