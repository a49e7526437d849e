"""Values read by their MySQL column type: what Canal (``mysqlType``), Maxwell and Oracle GoldenGate
(the sink's declared columns) write, read into the text MySQL is given and the value an
Elasticsearch document is given.

The formats write MySQL's own text forms (Canal writes every value as a string; Maxwell and
GoldenGate write numbers as JSON numbers and temporal values as strings), so one reader per column
type serves them all, with the rules of the Debezium reader (connectors/debezium/types.py): a
DECIMAL keeps its digits and its column's scale, a DATETIME its microseconds, binary values become
base64 (the form binary columns are given), a BIT its number. What a format spells its own way is
an argument: how binary values are written (Canal: the bytes as ISO-8859-1 characters; Maxwell:
base64) and whether ENUM and SET come as their index and bit mask (Canal) or as names.

A value its type cannot read raises :class:`BadValue` saying what was expected; the record goes to
the DLQ.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Mapping
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Literal

from connectors.debezium.logical import BadValue, datetime_text, decimal_text, plain_text, time_text
from connectors.debezium.types import ColumnHint, Converter
from connectors.mysql.types import BINARIES, INTEGERS, SPATIAL, ColumnType, parse_type

Binary = Literal["base64", "latin1", "hex", "text"]

_INTEGER = re.compile(r"^\s*[+-]?\d+\s*$")
_DIGITS = re.compile(r"^[0-9]+$")
_NUMBER = re.compile(r"^\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*$")
# MySQL's DATETIME text, with an ISO 'T' or GoldenGate's trail form ':' between date and time
_DATETIME = re.compile(r"^(\d{4})-(\d{2})-(\d{2})(?:[ T:](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?)?$")
_TIME = re.compile(r"^(-)?(\d{1,3}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?$")


def _expected(value: Any, column: ColumnType, what: str) -> BadValue:
    return BadValue(f"{plain_text(value)!r} is not a valid {column.sql} ({what})")


def _integer(column: ColumnType) -> Converter:
    def read(v: Any) -> tuple[str, Any]:
        whole = isinstance(v, int) or (isinstance(v, str) and _INTEGER.match(v)) or (
            isinstance(v, Decimal) and v == v.to_integral_value())
        if not whole:
            raise _expected(v, column, "an integer")
        n = int(v)  # a JSON boolean (true/false) is 1/0
        return str(n), n
    return read


def _decimal(column: ColumnType) -> Converter:
    """Digits kept; a value with fewer fractional digits than the column's scale is given the
    column's scale (what MySQL holds, and what Debezium's Decimal carries): 19.9 -> 19.90."""
    quantum = Decimal(1).scaleb(-column.scale)

    def read(v: Any) -> tuple[str, Any]:
        if isinstance(v, bool) or not isinstance(v, int | Decimal | str):
            raise _expected(v, column, "a decimal number")
        if isinstance(v, str) and not _NUMBER.match(v):
            raise _expected(v, column, "a decimal number")
        d = Decimal(v.strip()) if isinstance(v, str) else Decimal(v)
        exponent = d.as_tuple().exponent
        if isinstance(exponent, int) and exponent > -column.scale:
            d = d.quantize(quantum)
        return decimal_text(d), d
    return read


def _floating(column: ColumnType) -> Converter:
    def read(v: Any) -> tuple[str, Any]:
        text = plain_text(v)
        if isinstance(v, bool) or text is None or not _NUMBER.match(text):
            raise _expected(v, column, "a number")
        return text.strip(), Decimal(text.strip())
    return read


def _bit(column: ColumnType) -> Converter:
    """BIT(n) as its number (Canal: the bits as an unsigned number in text; Maxwell: a JSON number)."""
    read_int = _integer(column)

    def read(v: Any) -> tuple[str, Any]:
        text, n = read_int(v)
        if not 0 <= n < (1 << (column.args[0] if column.args else 1)):
            raise _expected(v, column, f"a number of {column.args[0] if column.args else 1} bits")
        return text, n
    return read


def _date(column: ColumnType) -> Converter:
    """YYYY-MM-DD; also a datetime at midnight (an Oracle DATE, which has a time of day, as
    GoldenGate writes it)."""
    def read(v: Any) -> tuple[str, Any]:
        day: date | None = None
        if isinstance(v, str) and len(v) == 10:
            try:
                day = date.fromisoformat(v)
            except ValueError:
                day = None
        elif (dt := parse_datetime(v)) is not None and dt == datetime.combine(dt.date(), datetime.min.time()):
            day = dt.date()
        if day is None:
            raise _expected(v, column, "a date YYYY-MM-DD")
        return day.isoformat(), day.isoformat()
    return read


def parse_datetime(v: Any) -> datetime | None:
    """MySQL's DATETIME text (also with 'T', or GoldenGate's 'YYYY-MM-DD:HH:MI:SS.FFFFFF'); digits past
    the microsecond (a nanosecond source) are cut, as MySQL holds microseconds. None: not one."""
    m = _DATETIME.match(v) if isinstance(v, str) else None
    if m is None:
        return None
    year, month, day, hour, minute, second, frac = m.groups()
    try:
        return datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0), int(second or 0),
                        int(((frac or "") + "000000")[:6]))
    except ValueError:
        return None


def _datetime(column: ColumnType) -> Converter:
    def read(v: Any) -> tuple[str, Any]:
        dt = parse_datetime(v)
        if dt is None:
            raise _expected(v, column, "a datetime YYYY-MM-DD hh:mm:ss[.ffffff]")
        return datetime_text(dt), dt.isoformat(timespec="microseconds")
    return read


def _time(column: ColumnType) -> Converter:
    def read(v: Any) -> tuple[str, Any]:
        m = _TIME.match(v) if isinstance(v, str) else None
        if m is None or int(m.group(3)) > 59 or int(m.group(4)) > 59:
            raise _expected(v, column, "a time [-]hh:mm:ss[.ffffff]")
        sign, hours, minutes, seconds, frac = m.groups()
        micros = ((int(hours) * 60 + int(minutes)) * 60 + int(seconds)) * 1_000_000 + int(((frac or "") + "000000")[:6])
        text = time_text(-micros if sign else micros)
        return text, text
    return read


def _enum(column: ColumnType, indexed: bool) -> Converter:
    """An ENUM's member; ``indexed``: a number is the member's 1-based index (Canal writes the index
    the binlog holds; 0 is MySQL's '' for an invalid value)."""
    def read(v: Any) -> tuple[str, Any]:
        if indexed and (isinstance(v, int) and not isinstance(v, bool) or isinstance(v, str) and _DIGITS.match(v)):
            i = int(v)
            if not 0 <= i <= len(column.values):
                raise _expected(v, column, f"a member's index 1-{len(column.values)}")
            member = column.values[i - 1] if i else ""
            return member, member
        if not isinstance(v, str):
            raise _expected(v, column, "one of its members")
        return v, v
    return read


def _set(column: ColumnType, indexed: bool) -> Converter:
    """A SET's members as MySQL writes them, comma-separated in definition order; from a JSON array
    (Maxwell), a bit mask (``indexed``: Canal writes the binlog's mask) or the text itself."""
    def read(v: Any) -> tuple[str, Any]:
        if isinstance(v, list) and all(isinstance(m, str) for m in v):
            text = ",".join(m for m in column.values if m in v) if set(v) <= set(column.values) else ",".join(v)
        elif indexed and (isinstance(v, int) and not isinstance(v, bool) or isinstance(v, str) and _DIGITS.match(v)):
            mask = int(v)
            if mask >= 1 << len(column.values):
                raise _expected(v, column, f"a bit mask of its {len(column.values)} members")
            text = ",".join(m for i, m in enumerate(column.values) if mask >> i & 1)
        elif isinstance(v, str):
            text = v
        else:
            raise _expected(v, column, "its members, comma-separated")
        return text, text
    return read


def _binary(column: ColumnType, binary: Binary) -> Converter:
    """Bytes as base64, the form binary columns are given; BINARY(n) padded with 0x00 to n bytes, as
    MySQL holds it (the binlog, and so Canal, leaves the padding out)."""
    width = column.args[0] if column.base == "BINARY" and column.args else 0

    def read(v: Any) -> tuple[str, Any]:
        if not isinstance(v, str):
            raise _expected(v, column, f"bytes as {binary} text")
        try:
            if binary == "latin1":
                raw = v.encode("latin-1")
            elif binary == "hex":
                raw = bytes.fromhex(v)
            elif binary == "text":
                raw = v.encode("utf-8")
            else:
                raw = base64.b64decode(v, validate=True)
        except (UnicodeEncodeError, ValueError, binascii.Error):
            raise _expected(v[:80], column, f"bytes as {binary} text") from None
        text = base64.b64encode(raw.ljust(width, b"\x00")).decode("ascii")
        return text, text
    return read


def _json(v: Any) -> tuple[str | None, Any]:
    """A JSON column: text as it came (Canal), or the embedded document (Maxwell) as compact text."""
    text = plain_text(v)
    return text, text


def _text(v: Any) -> tuple[str | None, Any]:
    return plain_text(v), v


# a reader per MySQL base type: (column, how binary values are written, indexed ENUM/SET) -> Converter
_READERS: dict[str, Callable[[ColumnType, Binary, bool], Converter]] = {
    "DECIMAL": lambda c, _b, _i: _decimal(c), "FLOAT": lambda c, _b, _i: _floating(c),
    "DOUBLE": lambda c, _b, _i: _floating(c), "BIT": lambda c, _b, _i: _bit(c), "DATE": lambda c, _b, _i: _date(c),
    "DATETIME": lambda c, _b, _i: _datetime(c), "TIMESTAMP": lambda c, _b, _i: _datetime(c),
    "TIME": lambda c, _b, _i: _time(c), "ENUM": lambda c, _b, i: _enum(c, i), "SET": lambda c, _b, i: _set(c, i),
    "JSON": lambda _c, _b, _i: _json,
    **dict.fromkeys((*INTEGERS, "BOOLEAN", "YEAR"), lambda c, _b, _i: _integer(c)),
    **dict.fromkeys(BINARIES, lambda c, b, _i: _binary(c, b)),
    # spatial: Canal writes MySQL's internal form (SRID + WKB) as bytes; the others, text as written
    **dict.fromkeys(SPATIAL, lambda c, b, _i: _binary(c, b) if b == "latin1" else _text),
}


def column_reader(column: ColumnType, binary: Binary = "base64", indexed: bool = False) -> Converter:
    """How to read one column's values (a JSON value; null stays null) by its MySQL type."""
    read = _READERS.get(column.base, lambda _c, _b, _i: _text)(column, binary, indexed)
    return lambda v: (None, None) if v is None else read(v)


def hinted_readers(hints: Mapping[str, ColumnHint], binary: Binary) -> dict[str, Converter]:
    """Readers by the sinks' declared columns, for the formats that write no column types (a binary
    column's declared ``encoding`` says how its values are written, else ``binary``)."""
    readers = {}
    for field, hint in hints.items():
        column = parse_type(hint.type)
        written = hint.encoding if column.is_binary and hint.encoding in ("base64", "hex", "text") else binary
        readers[field] = column_reader(column, binary=written)  # type: ignore[arg-type]
    return readers


def read_row(readers: Mapping[str, Converter], row: Mapping[str, Any]) -> tuple[dict[str, str | None], dict[str, Any]]:
    """A row image read field by field (a field without a reader: its text as written); a value its
    type cannot read raises BadValue naming the field."""
    texts: dict[str, str | None] = {}
    docs: dict[str, Any] = {}
    for name, value in row.items():
        try:
            texts[name], docs[name] = readers.get(name, _text)(value) if value is not None else (None, None)
        except BadValue as exc:
            raise BadValue(f"field '{name}' = {exc}") from None
    return texts, docs


# -- the table a row of MySQL column types describes (tables and index mappings from the record) ----
def es_property(column: ColumnType, is_key: bool = False) -> dict[str, Any] | None:
    """The Elasticsearch field for a MySQL column: the choices of connectors/debezium/schema_columns.es_property
    for the Connect type Debezium gives that column (docs/types.md)."""
    base = column.base
    if base in INTEGERS or base == "YEAR":
        if base == "BIGINT" and column.unsigned:
            return {"type": "unsigned_long"}
        return {"type": {"TINYINT": "byte", "SMALLINT": "short", "YEAR": "short"}.get(base, "long" if base == "BIGINT"
                                                                                         else "integer")}
    if base == "BOOLEAN":
        return {"type": "byte"}
    if base == "DECIMAL":
        return ({"type": "scaled_float", "scaling_factor": 10 ** column.scale} if column.precision <= 15
                else {"type": "keyword"})
    if base in ("FLOAT", "DOUBLE"):
        return {"type": base.lower()}
    if base == "BIT":
        return {"type": "unsigned_long" if (column.args[0] if column.args else 1) > 63 else "long"}
    if base in ("DATE", "DATETIME", "TIMESTAMP"):
        return {"type": "date", "format": "strict_date_optional_time||epoch_millis"}
    if base in ("TIME", "ENUM", "SET"):
        return {"type": "keyword"}
    if base in BINARIES:
        return {"type": "binary"}
    if base == "JSON":
        return {"type": "text"}
    if base in SPATIAL:
        return None
    return {"type": "keyword"} if is_key else {"type": "text", "fields": {"keyword": {"type": "keyword",
                                                                                       "ignore_above": 256}}}


def describe_table(columns: list[tuple[str, ColumnType]], key: list[str]) -> dict[str, Any]:
    """The table a row's MySQL column types describe, in the form of connectors/debezium/schema_columns.mysql_columns
    (what spark_jobs/sinks.derive_from_connect creates tables from): nullable unless a key column."""
    return {"columns": [{"name": n, "type": t.sql, "nullable": n not in key} for n, t in columns],
            "key": key,
            "properties": {n: p for n, t in columns if (p := es_property(t, n in key)) is not None}}

