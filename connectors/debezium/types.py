"""Kafka Connect schemas and Debezium's logical types: how to read each value of a change event.

A Connect schema (the JsonConverter's ``schema``) says, per field, a physical type (int32, int64,
bytes, string, struct …) and maybe a logical name (``org.apache.kafka.connect.data.Decimal``,
``io.debezium.time.MicroTimestamp`` …) with parameters (``scale``). :func:`compile_row` turns a
struct schema into one converter per field, once per distinct schema; each converter takes the
JSON value and returns

* the **text** MySQL is given (exact: a Decimal's digits and scale, a DATETIME's microseconds, a
  TIMESTAMP's instant in UTC, binary data as base64), and
* the **document value** Elasticsearch is given (decimals as exact JSON numbers, dates and times as
  ISO-8601 strings, binary as base64).

The mappings follow the data type tables of Debezium's MySQL connector documentation (``docs/types.md``
lists each one with the MySQL column and Elasticsearch field it becomes). Streams without schemas
carry no types: there the declared sink column (:class:`ColumnHint`) decides how a value is read.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from connectors.debezium.logical import (
    JSON_ENCODER,
    BadValue,
    as_int,
    bits_value,
    date_from_days,
    datetime_from_micros,
    datetime_text,
    decimal_from_bytes,
    decimal_text,
    plain_text,
    time_text,
    zoned_time_to_utc,
    zoned_to_utc,
)
from connectors.debezium.typed import Logical

# logical names (Kafka Connect's and Debezium's)
DECIMAL = "org.apache.kafka.connect.data.Decimal"
CONNECT_DATE = "org.apache.kafka.connect.data.Date"
CONNECT_TIME = "org.apache.kafka.connect.data.Time"
CONNECT_TIMESTAMP = "org.apache.kafka.connect.data.Timestamp"
VARIABLE_SCALE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
DATE = "io.debezium.time.Date"
TIME, MICRO_TIME, NANO_TIME = "io.debezium.time.Time", "io.debezium.time.MicroTime", "io.debezium.time.NanoTime"
TIMESTAMP = "io.debezium.time.Timestamp"
MICRO_TIMESTAMP, NANO_TIMESTAMP = "io.debezium.time.MicroTimestamp", "io.debezium.time.NanoTimestamp"
ZONED_TIMESTAMP, ZONED_TIME = "io.debezium.time.ZonedTimestamp", "io.debezium.time.ZonedTime"
YEAR = "io.debezium.time.Year"
JSON, ENUM, ENUM_SET = "io.debezium.data.Json", "io.debezium.data.Enum", "io.debezium.data.EnumSet"
BITS = "io.debezium.data.Bits"
GEOMETRY, POINT = "io.debezium.data.geometry.Geometry", "io.debezium.data.geometry.Point"
# the schema parameters column.propagate.source.type / datatype.propagate.source.type add to a field:
# the source column's type name (upper case, with UNSIGNED / ZEROFILL), its length and scale where it
# has them (Debezium's PropagateSourceTypeToSchemaParameter; connectors/debezium/schema_columns.source_type)
SOURCE_TYPE = "__debezium.source.column.type"
SOURCE_LENGTH = "__debezium.source.column.length"
SOURCE_SCALE = "__debezium.source.column.scale"



@dataclass(frozen=True)
class FieldSchema:
    """One node of a Connect schema (JsonConverter form)."""

    type: str
    name: str | None = None
    parameters: Mapping[str, str] = field(default_factory=dict)
    optional: bool = True
    fields: tuple[tuple[str, FieldSchema], ...] = ()  # struct
    items: FieldSchema | None = None  # array; map values

    @staticmethod
    def parse(schema: Mapping[str, Any]) -> FieldSchema:
        kind = schema.get("type")
        if not isinstance(kind, str):
            raise BadValue(f"a Connect schema without a type: {str(dict(schema))[:120]}")
        fields = tuple((f["field"], FieldSchema.parse(f)) for f in schema.get("fields") or ()
                       if isinstance(f, Mapping) and isinstance(f.get("field"), str))
        items = schema.get("items") or schema.get("values")
        return FieldSchema(kind, schema.get("name"), {k: str(v) for k, v in (schema.get("parameters") or {}).items()},
                           bool(schema.get("optional", True)), fields,
                           FieldSchema.parse(items) if isinstance(items, Mapping) else None)

    def field(self, name: str) -> FieldSchema | None:
        return next((s for n, s in self.fields if n == name), None)


@dataclass(frozen=True)
class ColumnHint:
    """What a declared sink column says about a schemaless value: its MySQL type and encoding."""

    type: str  # upper-case MySQL type, e.g. DECIMAL(10,2)
    encoding: str | None = None  # base64/hex/text (binary, DECIMAL), days/text (DATE), ms/us/ns/text (time)

    @property
    def base(self) -> str:
        return re.split(r"[\s(]", self.type, maxsplit=1)[0]

    @property
    def scale(self) -> int:
        m = re.match(r"^\w+\s*\(\s*\d+\s*,\s*(\d+)\s*\)", self.type)
        return int(m.group(1)) if m else 0


Converter = Callable[[Any], tuple[str | None, Any]]  # JSON value -> (text for MySQL, value for documents)
# the converters whose values a column-wise decode reads at once, in Arrow (connectors/debezium/typed.py)
LOGICAL: dict[Converter, Logical] = {}
_UNITS = {"ms": 1000, "us": 1, "ns": -1000}


def _logical(convert: Converter, logical: Logical) -> Converter:
    LOGICAL[convert] = logical
    return convert


def _plain(value: Any) -> tuple[str | None, Any]:
    kind = type(value)
    if kind is str:  # the common cases first, in one call (this runs for most values of every row)
        return value, value
    if kind is int or kind is Decimal:
        return str(value), value
    return plain_text(value), value


def _with(read: Callable[[Any], tuple[str, Any]]) -> Converter:
    def convert(value: Any) -> tuple[str | None, Any]:
        return (None, None) if value is None else read(value)
    convert.read = read  # type: ignore[attr-defined]  # a column-wise reading of it: binary_columns.py
    return convert


def _scaled_micros(unit: int) -> Callable[[Any], int]:
    """ms (1000), µs (1) or ns (-1000) since an origin -> µs (ns truncated toward the past)."""
    if unit > 0:
        return lambda v: as_int(v) * unit
    return lambda v: as_int(v) // -unit


@functools.cache
def _datetime_converter(unit: int) -> Converter:
    to_micros = _scaled_micros(unit)

    def read(v: Any) -> tuple[str, Any]:
        dt = datetime_from_micros(to_micros(v))
        return datetime_text(dt), dt.isoformat(timespec="microseconds")
    return _logical(_with(read), Logical("datetime", unit))


@functools.cache
def _time_converter(unit: int) -> Converter:
    to_micros = _scaled_micros(unit)

    def read(v: Any) -> tuple[str, Any]:
        text = time_text(to_micros(v))
        return text, text
    return _logical(_with(read), Logical("time", unit))


def _date_read(v: Any) -> tuple[str, Any]:
    text = date_from_days(as_int(v)).isoformat()
    return text, text


@functools.cache
def _decimal_converter(scale: int) -> Converter:
    def read(v: Any) -> tuple[str, Any]:
        if isinstance(v, str):
            d = decimal_from_bytes(v, scale)
        elif isinstance(v, int | Decimal) and not isinstance(v, bool):  # a Decimal written as a number
            d = Decimal(v)
        else:
            raise BadValue(f"{v!r} is not a Connect Decimal")
        return decimal_text(d), d
    return _logical(_with(read), Logical("decimal", scale=scale))


def _variable_scale_read(v: Any) -> tuple[str, Any]:
    if not isinstance(v, Mapping) or "value" not in v:
        raise BadValue(f"{str(v)[:80]!r} is not an io.debezium.data.VariableScaleDecimal {{scale, value}}")
    d = decimal_from_bytes(v["value"], as_int(v.get("scale", 0)))
    return decimal_text(d), d


def _zoned_read(v: Any) -> tuple[str, Any]:
    if not isinstance(v, str):
        raise BadValue(f"{v!r} is not an io.debezium.time.ZonedTimestamp string")
    dt = zoned_to_utc(v)
    return datetime_text(dt), dt.isoformat(timespec="microseconds") + "Z"


def _zoned_time_read(v: Any) -> tuple[str, Any]:
    if not isinstance(v, str):
        raise BadValue(f"{v!r} is not an io.debezium.time.ZonedTime string")
    text = time_text(zoned_time_to_utc(v))
    return text, text + "Z"


def bits_read(v: Any) -> tuple[str, Any]:
    n = bits_value(v) if isinstance(v, str) else int(bool(v)) if isinstance(v, bool) else as_int(v)
    return str(n), n


def geometry_read(v: Any) -> tuple[str, Any]:
    """Geometry and Point: {wkb (base64), srid}. MySQL gets its internal form, the SRID (4 bytes,
    little-endian) before the WKB, as base64; Elasticsearch gets the struct as it came."""
    if not isinstance(v, Mapping) or not isinstance(v.get("wkb"), str):
        raise BadValue(f"{str(v)[:80]!r} is not an io.debezium.data.geometry value {{wkb, srid}}")
    try:
        wkb = base64.b64decode(v["wkb"], validate=True)
    except (binascii.Error, ValueError) as exc:
        raise BadValue(f"{v['wkb'][:80]!r} is not base64 WKB") from exc
    srid = as_int(v.get("srid") or 0)
    return base64.b64encode(srid.to_bytes(4, "little") + wkb).decode("ascii"), dict(v)


def _struct_read(v: Any) -> tuple[str, Any]:
    return JSON_ENCODER.encode(v).decode("utf-8"), v


STRUCT = _with(_struct_read)  # a struct, array or map of no logical type: its JSON text (documents: as it came)


def _struct_converter(schema: FieldSchema) -> Converter:
    """A struct's converter: its JSON text, as :data:`STRUCT`; a column-wise decode that keeps structs
    whole (a chain that takes them apart: connectors/debezium/group_decode._values) reads each of its
    fields by its own converter, :func:`fields_of` (a Decimal inside ``after`` a decimal, a Date a date)."""
    if schema.type != "struct" or not schema.fields:
        return STRUCT
    read = _with(_struct_read)
    read.schema = schema  # type: ignore[attr-defined]
    return read


def fields_of(convert: Converter, hints: Mapping[str, ColumnHint]) -> dict[str, Converter] | None:
    """The converters of a struct's fields (:func:`_struct_converter`), a declared column of a field's
    name read as at the top of a row (a BIGINT UNSIGNED column reads Debezium's long back as unsigned:
    the struct is ``after``, which an ExtractField makes the row); None: not a struct's, or one whose
    fields its schema does not say."""
    schema = getattr(convert, "schema", None)
    return None if schema is None else {name: converter(s, hints.get(name)) for name, s in schema.fields}
_DATE_CONVERTER = _logical(_with(_date_read), Logical("date"))
BY_NAME: dict[str, Converter] = {
    DATE: _DATE_CONVERTER, CONNECT_DATE: _DATE_CONVERTER,
    TIME: _time_converter(1000), CONNECT_TIME: _time_converter(1000),
    MICRO_TIME: _time_converter(1), NANO_TIME: _time_converter(-1000),
    TIMESTAMP: _datetime_converter(1000), CONNECT_TIMESTAMP: _datetime_converter(1000),
    MICRO_TIMESTAMP: _datetime_converter(1), NANO_TIMESTAMP: _datetime_converter(-1000),
    ZONED_TIMESTAMP: _logical(_with(_zoned_read), Logical("zoned")), ZONED_TIME: _with(_zoned_time_read),
    VARIABLE_SCALE_DECIMAL: _with(_variable_scale_read),
    BITS: _with(bits_read), GEOMETRY: _with(geometry_read), POINT: _with(geometry_read),
}


def converter(schema: FieldSchema, hint: ColumnHint | None = None) -> Converter:
    """How to read one field's values, from its Connect schema (and its declared column, for the
    encodings a schema cannot say: binary.handling.mode hex or base64 arrive as plain strings)."""
    if schema.name == DECIMAL:
        return _decimal_converter(int(schema.parameters.get("scale", "0")))
    if schema.name in BY_NAME:
        return BY_NAME[schema.name]
    if schema.type in ("struct", "array", "map"):
        return _struct_converter(schema)
    if schema.type in ("bytes", "boolean"):  # bytes: base64 in JSON, the form binary columns are given
        return _plain
    if hint is not None:
        return hinted(hint)
    if schema.type == "int64" and unsigned_bigint(schema):  # the schema says what a declared column would
        return UNSIGNED_BIGINT
    return _plain


def unsigned_bigint(schema: FieldSchema) -> bool:
    """A field whose propagated source type is BIGINT UNSIGNED (column.propagate.source.type)."""
    words = schema.parameters.get(SOURCE_TYPE, "").upper().split()
    return bool(words) and words[0] in ("BIGINT", "INT8") and ("UNSIGNED" in words or "ZEROFILL" in words)


# -- schemaless values, read by their declared column --------------------------------------------------
def hinted(hint: ColumnHint) -> Converter:
    """A schemaless value read by its declared column type and ``encoding``."""
    base, enc = hint.base, hint.encoding
    if base in ("DECIMAL", "DEC", "NUMERIC", "FIXED"):
        return _decimal_converter(hint.scale) if enc == "base64" else DECIMAL_TEXT
    if base == "DATE" and enc != "text":
        return _HINTED_DATE
    if base in ("DATETIME", "TIMESTAMP"):
        if enc in ("ms", "us", "ns"):
            return _numbers_only(_datetime_converter(_UNITS[enc]))
        return _with(_temporal_text_read)
    if base == "TIME" and enc in ("ms", "us", "ns"):
        return _numbers_only(_time_converter(_UNITS[enc]))
    if base in BINARY_TYPES:
        return _binary(enc or "base64")
    if base == "BIT":
        return _with(bits_read)
    if base in SPATIAL_TYPES:
        return _with(geometry_read)
    if base == "BIGINT" and "UNSIGNED" in hint.type:
        return UNSIGNED_BIGINT
    return _plain


def _unsigned_read(v: Any) -> tuple[str, Any]:
    """BIGINT UNSIGNED under bigint.unsigned.handling.mode=long: values above 2^63-1 arrive as the
    negative long of the same 64 bits; the column gets the unsigned value back."""
    n = as_int(v)
    if n < 0:
        n += 1 << 64
    return str(n), n


UNSIGNED_BIGINT = _with(_unsigned_read)

SPATIAL_TYPES = frozenset({"GEOMETRY", "POINT", "LINESTRING", "POLYGON", "MULTIPOINT", "MULTILINESTRING",
                           "MULTIPOLYGON", "GEOMETRYCOLLECTION"})


def _temporal_text_read(v: Any) -> tuple[str | None, Any]:
    """An ISO-8601 datetime written as text: MySQL gets, with an offset (a ZonedTimestamp), the
    instant in UTC, without one the wall-clock value. Anything else is left for the column's check."""
    if not isinstance(v, str):
        return _plain(v)
    try:
        datetime.fromisoformat(v.strip())
    except ValueError:
        return _plain(v)
    return datetime_text(zoned_to_utc(v.strip())), v  # a string stays as sent in documents


def _decimal_text_read(v: Any) -> tuple[str | None, Any]:
    """A DECIMAL written as text (decimal.handling.mode=string) or as a JSON number: its digits for
    MySQL (a number in plain notation, never 1E+5); documents keep the value as sent."""
    if isinstance(v, Decimal | int) and not isinstance(v, bool):
        return decimal_text(Decimal(v)), v
    return _plain(v)  # text: MySQL's DECIMAL (and the projection's check) read the digits as they are


DECIMAL_TEXT = _with(_decimal_text_read)
# converters whose text is the value's own (text as it came, a number's digits): a column-wise decode
# (connectors/debezium/columns.py) casts such a column instead of calling them per value
AS_TEXT: frozenset[Converter] = frozenset({_plain, DECIMAL_TEXT})


@functools.cache
def _numbers_only(numbers: Converter) -> Converter:
    """Integers read by ``numbers``, anything else as it is (a column-wise decode reads a column of
    integers by the same logical type)."""
    def read(v: Any) -> tuple[str | None, Any]:
        return numbers(v) if isinstance(v, int) and not isinstance(v, bool) else _plain(v)
    return _logical(read, LOGICAL[numbers])


_HINTED_DATE = _numbers_only(_DATE_CONVERTER)


BINARY_TYPES = frozenset({"BINARY", "VARBINARY", "TINYBLOB", "BLOB", "MEDIUMBLOB", "LONGBLOB"})


def _binary(encoding: str) -> Converter:
    """Binary values as base64 text (the form MySQL's binary columns are given)."""
    def read(v: Any) -> tuple[str | None, Any]:
        if not isinstance(v, str):
            return _plain(v)
        if encoding == "hex":
            try:
                text = base64.b64encode(bytes.fromhex(v)).decode("ascii")
            except ValueError as exc:
                raise BadValue(f"{v[:80]!r} is not hex (encoding: hex)") from exc
        elif encoding == "text":
            text = base64.b64encode(v.encode("utf-8")).decode("ascii")
        else:
            text = v
        return text, text
    return _with(read)


@dataclass
class RowReader:
    """The converters of one row schema (a struct), compiled once per distinct schema."""

    converters: dict[str, Converter]
    fallback: Converter = _plain
    schema: FieldSchema | None = None  # the row's struct schema (None: schemaless)
    schema_id: str | None = None

    def read(self, row: Mapping[str, Any],
             fields: frozenset[str] | None = None) -> tuple[dict[str, str | None], dict[str, Any]]:
        """The row's values as exact texts and as document values; with ``fields``, only those (the
        ones the sinks use: the others are never converted)."""
        texts: dict[str, str | None] = {}
        docs: dict[str, Any] = {}
        items = row.items() if fields is None else ((n, row[n]) for n in fields if n in row)
        for name, value in items:
            text, doc = self.converters.get(name, self.fallback)(value)
            texts[name] = text
            docs[name] = doc
        return texts, docs


def compile_row(schema: FieldSchema | None, hints: Mapping[str, ColumnHint]) -> RowReader:
    if schema is None:  # schemaless: the declared columns decide
        return RowReader({name: hinted(h) for name, h in hints.items()})
    return RowReader({name: converter(s, hints.get(name)) for name, s in schema.fields})
