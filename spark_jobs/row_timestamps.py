"""TimestampConverter's conversions on the per-partition path (spark_jobs/row_transforms.py): a field's
values read as microseconds since the epoch (by a Java pattern, as an ISO text, or as a number of
``unix_precision`` units), and written back as the ``target_type`` asks. Java patterns of yyyy MM dd
HH mm ss SSS are read (:func:`java_strftime`); row_chains.unserved sends the others to the older path.
TimestampRouter (spark_jobs/row_steps.py) writes the Kafka timestamp by the same patterns (:func:`formatted`).
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs import transform_config as cfgs

_ISO = r"^\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?)?$"
_ZONED = r"^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})$"  # ZonedTimestamp's
_JAVA_TOKENS = {"yyyy": "Y", "MM": "m", "dd": "d", "HH": "H", "mm": "M", "ss": "S", "SSS": "L"}
_PATTERN = re.compile(r"([A-Za-z])\1*|[-:/ ._,]")  # a run of one letter, or a separator


def as_micros(raw: pa.Array, cfg: cfgs.TimestampConverter) -> pa.Array:
    """The field's values as microseconds since the epoch (UTC, the session's time zone), null where
    a value is not a timestamp."""
    kind = raw.type
    per_unit = {"seconds": 1_000_000, "milliseconds": 1_000, "microseconds": 1}[cfg.unix_precision]
    if pa.types.is_string(kind):  # by the format, else as the ISO text a decoded date or time has
        read = [_iso_micros(raw)]
        if cfg.format:
            fmt = java_strftime(cfg.format)
            assert fmt is not None  # unserved() refused the others
            read.insert(0, pc.cast(_strptime(raw, fmt), pa.int64()))
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



def _strptime(raw: pa.Array, fmt: str) -> pa.Array:
    """Texts by a %-format of fixed-width fields (%Y four digits, %L three, the others two), as
    Spark's parser reads them (Arrow's strptime also takes 2024-1-2); %L, the milliseconds, Arrow's
    strptime has not: their digits are cut out first."""
    tokens = re.findall(r"%[YmdHMSL]|[^%]+", fmt)
    widths = [4 if t == "%Y" else 3 if t == "%L" else 2 if t.startswith("%") else len(t) for t in tokens]
    pattern = "^" + "".join(rf"\d{{{w}}}" if t.startswith("%") else re.escape(t)
                            for t, w in zip(tokens, widths, strict=True)) + "$"
    text = pc.if_else(pc.fill_null(pc.match_substring_regex(raw, pattern), False), raw, None)
    if "%L" not in tokens:
        return pc.strptime(text, fmt, "us", error_is_null=True)
    start = sum(widths[:tokens.index("%L")])
    millis = pc.cast(pc.utf8_slice_codeunits(text, start, start + 3), pa.int64())
    rest = pc.binary_join_element_wise(pc.utf8_slice_codeunits(text, 0, start),
                                       pc.utf8_slice_codeunits(text, start + 3), "")
    base = pc.strptime(rest, fmt.replace("%L", ""), "us", error_is_null=True)
    return pc.cast(pc.add(pc.cast(base, pa.int64()), pc.multiply(millis, 1000)), pa.timestamp("us"))



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
    if cfg.target_type == "Time":
        return formatted(stamp, "%H:%M:%S.%L")
    fmt = java_strftime(cfg.format or "yyyy-MM-dd HH:mm:ss")
    assert fmt is not None
    return formatted(stamp, fmt)



def java_strftime(java: str) -> str | None:
    """A Java datetime pattern of yyyy MM dd HH mm ss SSS and separators as %-codes (%L: millis), or None."""
    out, at = [], 0
    for match in _PATTERN.finditer(java):
        token = match.group()
        if match.start() != at or (token.isalpha() and token not in _JAVA_TOKENS):
            return None  # MMMM, SSSSSS, quoted text … : the older path's
        out.append("%" + _JAVA_TOKENS[token] if token in _JAVA_TOKENS else token)
        at = match.end()
    return "".join(out) if at == len(java) and out else None



def formatted(stamp: pa.Array, fmt: str) -> pa.Array:
    """Timestamps as text by a %-format (with %L, the milliseconds): Arrow's strftime prints a µs
    timestamp's %S with its fraction, so the fields are joined here."""
    parts = {"Y": (pc.year(stamp), 4), "m": (pc.month(stamp), 2), "d": (pc.day(stamp), 2),
             "H": (pc.hour(stamp), 2), "M": (pc.minute(stamp), 2), "S": (pc.second(stamp), 2),
             "L": (pc.millisecond(stamp), 3)}
    pieces: list[Any] = []
    for token in re.findall(r"%[YmdHMSL]|[^%]+", fmt):
        if token.startswith("%"):
            value, width = parts[token[1]]
            pieces.append(pc.utf8_lpad(pc.cast(value, pa.string()), width, "0"))
        else:
            pieces.append(token)
    return pc.binary_join_element_wise(*pieces, "")
