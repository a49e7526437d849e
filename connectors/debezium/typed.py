"""Debezium's logical types read a whole column at once, into typed Arrow (issue 21).

A column of one logical type (``org.apache.kafka.connect.data.Decimal``, ``io.debezium.time.Date``,
``MicroTimestamp`` …), as Arrow's JSON reader gives it (the base64 strings of Decimal bytes, the
int64 of days or of time since the epoch), becomes one typed array: ``decimal128``/``decimal256``
with the field's scale, ``date32``, ``timestamp[us]`` (a ZonedTimestamp: ``timestamp[us, UTC]``) or
``duration[us]`` (a TIME: MySQL's TIME runs past 24 hours and below zero, Arrow's time64 does not).
From the typed array come the MySQL texts and the documents' JSON values, column-wise too.

The texts and values are those of the per-value converters (connectors/debezium/types.py), which
the per-record decode uses; ``tests/unit/connectors/debezium/test_columns.py`` compares the two on every type.
A value a converter would refuse (a date outside the years 1-9999, bytes that are not base64) raises
:class:`OutOfRange`: the column-wise decode then leaves the group to the per-record decode, which
names the record.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# the years 1-9999 that Python's date and datetime (and MySQL) hold
MIN_DAYS, MAX_DAYS = -719_162, 2_932_896
MIN_MICROS, MAX_MICROS = -62_135_596_800_000_000, 253_402_300_799_999_999


_ENCODE = msgspec.json.Encoder(decimal_format="number")  # connectors/changes.JSON_ENCODE (which imports this)


class OutOfRange(ValueError):
    """A column with a value its logical type cannot read."""


@dataclass(frozen=True)
class Logical:
    """How a column of a logical type is read: ``kind`` is decimal, date, datetime, zoned or time;
    ``unit`` is what one integer counts in µs (ms 1000, µs 1; ns -1000: a thousandth, toward the
    past); ``scale`` is a Decimal's."""

    kind: str
    unit: int = 1
    scale: int = 0


def _micros(values: pa.Array, unit: int) -> np.ndarray:
    ints = values.cast(pa.int64()).fill_null(0).to_numpy()
    if unit == 1:
        return ints
    if unit > 0:
        if ints.size and (ints.min() < MIN_MICROS // unit or ints.max() > MAX_MICROS // unit):
            raise OutOfRange("a time outside the years 1-9999")
        return ints * unit
    return np.floor_divide(ints, -unit)


def _mask(values: pa.Array) -> np.ndarray | None:
    return values.is_null().to_numpy(zero_copy_only=False) if values.null_count else None


def _decimals(values: pa.Array, scale: int) -> pa.Array:
    """Connect Decimal bytes (big-endian two's complement, base64) -> decimal128(38, scale), or
    decimal256(76, scale) where a value needs more than 38 digits."""
    unscaled = []
    try:
        for text in values.to_pylist():
            unscaled.append(0 if text is None else int.from_bytes(base64.b64decode(text, validate=True), "big",
                                                                    signed=True))
    except (binascii.Error, ValueError) as exc:
        raise OutOfRange(f"bytes that are not base64: {exc}") from None
    if scale > 38 or any(abs(u) >= 10 ** 38 for u in unscaled):
        if scale > 76 or any(abs(u) >= 10 ** 76 for u in unscaled):
            raise OutOfRange("a Decimal of more than 76 digits")
        kind, width = pa.decimal256(76, scale), 32
    else:
        kind, width = pa.decimal128(38, scale), 16
    data = b"".join(u.to_bytes(width, "little", signed=True) for u in unscaled)
    validity = values.is_valid().buffers()[1] if values.null_count else None  # a new array: offset 0
    return pa.Array.from_buffers(kind, len(values), [validity, pa.py_buffer(data)], null_count=values.null_count)


def typed(values: pa.Array, logical: Logical) -> pa.Array | None:
    """The column as typed Arrow; None where the reader gave another physical type (a schemaless
    value that was text, not a number: it stays text)."""
    physical = values.type
    if logical.kind == "decimal":
        return _decimals(values, logical.scale) if pa.types.is_string(physical) else None
    if logical.kind == "zoned":
        if not pa.types.is_string(physical):
            return None
        try:
            return pc.cast(values, pa.timestamp("us", "UTC"))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None  # a form Arrow does not parse: the converter reads it, per value
    if not pa.types.is_integer(physical):
        return None
    mask = _mask(values)
    if logical.kind == "date":
        days = values.cast(pa.int64()).fill_null(0).to_numpy()
        if days.size and (days.min() < MIN_DAYS or days.max() > MAX_DAYS):
            raise OutOfRange("a date outside the years 1-9999")
        return pa.array(days.astype(np.int32), pa.int32(), mask=mask).cast(pa.date32())
    micros = _micros(values, logical.unit)
    if logical.kind == "datetime":
        if micros.size and (micros.min() < MIN_MICROS or micros.max() > MAX_MICROS):
            raise OutOfRange("a time outside the years 1-9999")
        return pa.array(micros, pa.timestamp("us"), mask=mask)
    if logical.kind == "time":
        return pa.array(micros, pa.duration("us"), mask=mask)
    raise ValueError(f"unknown logical kind {logical.kind!r}")


def _padded(numbers: np.ndarray, width: int) -> pa.Array:
    return pc.utf8_lpad(pa.array(numbers).cast(pa.string()), width, "0")


def _time_texts(values: pa.Array) -> pa.Array:
    """µs since midnight -> [-]hh:mm:ss.ffffff, hours of two digits or more (types.time_text)."""
    micros = values.cast(pa.int64()).fill_null(0).to_numpy()
    sign = np.where(micros < 0, "-", "")
    seconds, frac = np.divmod(np.abs(micros), 1_000_000)
    minutes, sec = np.divmod(seconds, 60)
    hours, minute = np.divmod(minutes, 60)
    text = pc.binary_join_element_wise(pa.array(sign, pa.string()), _padded(hours, 2), ":", _padded(minute, 2), ":",
                                       _padded(sec, 2), ".", _padded(frac, 6), "")
    return pc.if_else(values.is_null(), pa.nulls(len(values), pa.string()), text)


def _naive(values: pa.Array) -> pa.Array:
    return values.cast(pa.int64()).cast(pa.timestamp(values.type.unit)) if values.type.tz else values


def _decimal_texts(values: pa.Array) -> pa.Array:
    """Digits and scale, in plain notation: Arrow writes a small value of a large scale (5 at scale
    30) as 5E-30, which MySQL's DECIMAL check here does not read (types.decimal_text)."""
    texts = pc.cast(values, pa.string())
    if values.type.scale <= 6 or not pc.any(pc.match_substring(texts, "E")).as_py():
        return texts
    return pa.array([None if d is None else format(d, "f") for d in values.to_pylist()], pa.string())


def mysql_texts(values: pa.Array) -> pa.Array:
    """A typed column's texts for MySQL: a decimal's digits and scale, YYYY-MM-DD, a datetime with
    its microseconds (a zoned one: the instant in UTC), a TIME as hh:mm:ss.ffffff."""
    if pa.types.is_duration(values.type):
        return _time_texts(values)
    if pa.types.is_timestamp(values.type):
        return pc.cast(_naive(values), pa.string())
    if pa.types.is_decimal(values.type):
        return _decimal_texts(values)
    return pc.cast(values, pa.string())


def json_values(values: pa.Array, logical: Logical) -> pa.Array:
    """A typed column's JSON in documents: a decimal as an exact number, dates and times as ISO-8601
    strings (a zoned datetime or time with its Z)."""
    text = mysql_texts(values)
    if pa.types.is_decimal(values.type):
        return text
    if pa.types.is_timestamp(values.type):
        text = pc.replace_substring(text, " ", "T", max_replacements=1)
    return pc.binary_join_element_wise('"', text, 'Z"' if logical.kind == "zoned" else '"', "")


def json_strings(values: pa.Array) -> pa.Array:
    """Strings as JSON string literals (null stays null): quotes and backslashes escaped here, a
    string with a control character by the JSON encoder."""
    if pc.any(pc.match_substring_regex(values, "[\x00-\x1f]")).as_py():
        return pa.array([None if v is None else _ENCODE.encode(v).decode("utf-8") for v in values.to_pylist()],
                        pa.string())
    escaped = pc.replace_substring(pc.replace_substring(values, "\\", "\\\\"), '"', '\\"')
    return pc.binary_join_element_wise('"', escaped, '"', "")


def json_of(values: pa.Array) -> pa.Array:
    """Any image field's values as JSON (null stays null): a typed column as :func:`json_values`
    writes it, a string as a JSON string, numbers and booleans as themselves (a float that JSON
    cannot hold, NaN or infinite, as null)."""
    kind = values.type
    if pa.types.is_null(kind):
        return pa.nulls(len(values), pa.string())
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return json_strings(values.cast(pa.string()))
    if pa.types.is_boolean(kind):
        return pc.if_else(values, "true", "false")
    if pa.types.is_struct(kind) or pa.types.is_list(kind):
        return nested_json(values)
    if pa.types.is_floating(kind):
        finite = pc.is_finite(values)
        return pc.if_else(finite, pc.cast(values, pa.string()), pa.nulls(len(values), pa.string()))
    if pa.types.is_integer(kind):
        return pc.cast(values, pa.string())
    if pa.types.is_timestamp(kind):
        return json_values(values, Logical("zoned" if kind.tz else "datetime"))
    if pa.types.is_decimal(kind) or pa.types.is_date(kind) or pa.types.is_duration(kind):
        return json_values(values, Logical("decimal" if pa.types.is_decimal(kind) else "date"))
    return json_strings(pc.cast(values, pa.string()))


def documents(names: list[str], fragments: list[pa.Array], mask: pa.Array) -> pa.Array:
    """Per row, the JSON object of its fields (each fragment already JSON; null is null), null where
    ``mask`` holds."""
    parts: list[Any] = []
    for i, (name, fragment) in enumerate(zip(names, fragments, strict=True)):
        parts += [("{" if i == 0 else ",") + _ENCODE.encode(name).decode("utf-8") + ":",
                  pc.fill_null(fragment.cast(pa.string()), "null")]
    if not parts:
        return pc.if_else(mask, None, pa.array(["{}"] * len(mask), pa.string()))
    return pc.if_else(mask, None, pc.binary_join_element_wise(*parts, "}", ""))


def nested_json(values: pa.Array) -> pa.Array:
    """A struct's or a list's values as JSON texts (null stays null): objects and arrays of their
    values, as the record had them (a struct field the value lacked is null); a struct's typed fields
    (a Decimal, a date) as :func:`json_of` writes them at the top of a row."""
    if pa.types.is_struct(values.type) and values.type.num_fields:
        names = [f.name for f in values.type]
        return documents(names, [json_of(values.field(i)) for i in range(len(names))], values.is_null())
    return pa.array([None if v is None else _ENCODE.encode(v).decode("utf-8") for v in values.to_pylist()],
                    pa.string())
