"""Debezium's logical values, one at a time: exact texts and Python values from their JSON form.

Decimals from base64 bytes and a scale, dates from days, datetimes from epoch units, times,
zoned times to UTC, bits; a value that is not what its schema says raises :class:`BadValue`, which
names the value and the type it should have had. The column-wise forms are in typed.py.
"""

from __future__ import annotations

import base64
import binascii
import re
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import msgspec

EPOCH_DATE = date(1970, 1, 1)
EPOCH = datetime(1970, 1, 1)
JSON_ENCODER = msgspec.json.Encoder(decimal_format="number")


class BadValue(ValueError):
    """A value its schema (or its declared column) cannot read; the record goes to the DLQ."""


def decimal_from_bytes(b64: str, scale: int) -> Decimal:
    """Kafka Connect's Decimal: the unscaled value as big-endian two's-complement bytes (base64 in
    JSON), with the ``scale`` parameter."""
    try:
        raw = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError, TypeError) as exc:
        raise BadValue(f"{b64!r} is not the base64 bytes of a Connect Decimal") from exc
    return scaled(int.from_bytes(raw, "big", signed=True), scale)


def scaled(unscaled: int, scale: int) -> Decimal:
    """unscaled × 10^-scale, exactly (Decimal arithmetic would round to the context's 28 digits, and
    DECIMAL(65,30) has 65)."""
    return Decimal((int(unscaled < 0), tuple(int(d) for d in str(abs(unscaled))), -scale))


def decimal_text(value: Decimal) -> str:
    """Digits and scale kept: 19.90 stays 19.90, never 1.99E+1."""
    return format(value, "f")


def date_from_days(days: int) -> date:
    try:
        return EPOCH_DATE + timedelta(days=int(days))
    except OverflowError as exc:
        raise BadValue(f"{days} days since 1970-01-01 is outside the years 1-9999") from exc


def datetime_from_micros(micros: int) -> datetime:
    try:
        return EPOCH + timedelta(microseconds=int(micros))
    except OverflowError as exc:
        raise BadValue(f"{micros} µs since 1970-01-01 is outside the years 1-9999") from exc


def datetime_text(value: datetime) -> str:
    return value.isoformat(sep=" ", timespec="microseconds")


def time_text(micros: int) -> str:
    """A duration since midnight as MySQL TIME text; MySQL's TIME runs from -838:59:59 to 838:59:59."""
    sign = "-" if micros < 0 else ""
    micros = abs(micros)
    seconds, frac = divmod(micros, 1_000_000)
    minutes, sec = divmod(seconds, 60)
    hours, minute = divmod(minutes, 60)
    return f"{sign}{hours:02d}:{minute:02d}:{sec:02d}.{frac:06d}"


def zoned_to_utc(text: str) -> datetime:
    """io.debezium.time.ZonedTimestamp: ISO-8601 with an offset -> the instant in UTC (naive)."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError as exc:
        raise BadValue(f"{text!r} is not an ISO-8601 timestamp") from exc
    if value.tzinfo is None:
        return value
    return value.astimezone(UTC).replace(tzinfo=None)


def zoned_time_to_utc(text: str) -> int:
    """io.debezium.time.ZonedTime (e.g. 13:37:03.125Z) -> µs since midnight in UTC."""
    m = re.match(r"^(\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|[+-]\d{2}:\d{2})?$", text)
    if not m:
        raise BadValue(f"{text!r} is not an ISO-8601 time")
    hours, minutes, seconds = int(m.group(1)), int(m.group(2)), int(m.group(3))
    micros = int(((m.group(4) or ".0")[1:] + "000000")[:6])
    offset = 0
    if m.group(5) and m.group(5) != "Z":
        sign = -1 if m.group(5)[0] == "-" else 1
        offset = sign * (int(m.group(5)[1:3]) * 60 + int(m.group(5)[4:6])) * 60_000_000
    return ((hours * 3600 + minutes * 60 + seconds) * 1_000_000 + micros - offset) % 86_400_000_000


def bits_value(b64: str) -> int:
    """io.debezium.data.Bits: BIT(n) as bytes, least significant byte first (Debezium's
    ``BitSet.toByteArray()``)."""
    try:
        return int.from_bytes(base64.b64decode(b64, validate=True), "little")
    except (binascii.Error, ValueError, TypeError) as exc:
        raise BadValue(f"{b64!r} is not the base64 bytes of io.debezium.data.Bits") from exc


def as_int(value: Any) -> int:
    """An integer from a JSON number or digits; anything else is a BadValue."""
    if isinstance(value, bool) or not isinstance(value, int | str | Decimal):
        raise BadValue(f"{value!r} is not an integer")
    try:
        return int(value)
    except (ValueError, ArithmeticError) as exc:
        raise BadValue(f"{value!r} is not an integer") from exc


def plain_text(value: Any) -> str | None:
    """A schemaless JSON value as text: numbers as written, booleans true/false, objects and
    arrays as compact JSON."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | Decimal):
        return str(value)
    return JSON_ENCODER.encode(value).decode("utf-8")
