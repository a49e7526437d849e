"""The MySQL columns and Elasticsearch fields a Connect schema describes.

For a sink without declared columns (``create_table`` from the record schema) and an index without
a declared mapping: each Connect field, by its physical type and logical name, becomes the MySQL
column and the Elasticsearch field of Debezium's MySQL connector's data type tables (``docs/types.md``).

A Connect schema does not say a VARCHAR's length or a TIME's fractional digits. Where the connector
propagates the source column's type (``column.propagate.source.type`` /
``datatype.propagate.source.type``: the schema parameters ``__debezium.source.column.type``,
``.length`` and ``.scale``), the column gets that exact type when it is a MySQL type that holds
every value of the field (:func:`source_type`); otherwise, and without the parameters, the mapping
above.
"""

from __future__ import annotations

from typing import Any

from connectors.debezium.types import (
    BITS,
    CONNECT_DATE,
    CONNECT_TIME,
    CONNECT_TIMESTAMP,
    DATE,
    DECIMAL,
    ENUM,
    ENUM_SET,
    GEOMETRY,
    JSON,
    MICRO_TIME,
    MICRO_TIMESTAMP,
    NANO_TIME,
    NANO_TIMESTAMP,
    POINT,
    SOURCE_LENGTH,
    SOURCE_SCALE,
    SOURCE_TYPE,
    TIME,
    TIMESTAMP,
    VARIABLE_SCALE_DECIMAL,
    YEAR,
    ZONED_TIME,
    ZONED_TIMESTAMP,
    FieldSchema,
    unsigned_bigint,
)
from connectors.mysql.types import SPATIAL, TypeSyntaxError, parse_type

_SIMPLE_MYSQL = {"int8": "TINYINT", "int16": "SMALLINT", "int32": "INT", "int64": "BIGINT", "float": "FLOAT",
                 "float32": "FLOAT", "double": "DOUBLE", "float64": "DOUBLE", "boolean": "TINYINT(1)"}
_NAMED_MYSQL = {DATE: "DATE", CONNECT_DATE: "DATE", TIME: "TIME(3)", CONNECT_TIME: "TIME(3)", MICRO_TIME: "TIME(6)",
                NANO_TIME: "TIME(6)", TIMESTAMP: "DATETIME(3)", CONNECT_TIMESTAMP: "DATETIME(3)",
                MICRO_TIMESTAMP: "DATETIME(6)", NANO_TIMESTAMP: "DATETIME(6)", ZONED_TIMESTAMP: "TIMESTAMP(6)",
                ZONED_TIME: "TIME(6)", YEAR: "YEAR", JSON: "JSON", GEOMETRY: "GEOMETRY", POINT: "POINT",
                VARIABLE_SCALE_DECIMAL: "DECIMAL(65,30)"}


def _quoted_members(allowed: str) -> str:
    return ",".join("'" + m.replace("\\", "\\\\").replace("'", "''") + "'" for m in allowed.split(",")) if allowed \
        else "''"


def mysql_type(schema: FieldSchema, is_key: bool = False) -> str:
    """The MySQL column type for a field of this Connect schema (docs/types.md, "Tables from the
    record schema"): the logical type decides where there is one (DECIMAL(p,s) from
    connect.decimal.precision and scale, DATETIME(6) for MicroTimestamp, ENUM/SET with their values,
    BIT(n) …); a key's text and bytes get bounded types (a primary key cannot be TEXT or BLOB)."""
    exact = source_type(schema, is_key)
    return exact if exact is not None else generic_type(schema, is_key)


def generic_type(schema: FieldSchema, is_key: bool = False) -> str:
    """The column type of Debezium's data type tables for a field, whatever source type it propagates."""
    p = schema.parameters
    if schema.name == DECIMAL:
        scale = int(p.get("scale", "0"))
        precision = int(p.get("connect.decimal.precision", "65"))
        return f"DECIMAL({min(max(precision, scale, 1), 65)},{min(scale, 30)})"
    if schema.name in _NAMED_MYSQL:
        return _NAMED_MYSQL[schema.name]
    if schema.name == ENUM:
        return f"ENUM({_quoted_members(p.get('allowed', ''))})"
    if schema.name == ENUM_SET:
        return f"SET({_quoted_members(p.get('allowed', ''))})"
    if schema.name == BITS:
        return f"BIT({min(max(int(p.get('length', '64')), 1), 64)})"
    if schema.type in _SIMPLE_MYSQL:
        return _SIMPLE_MYSQL[schema.type]
    if schema.type == "string":
        return "VARCHAR(255)" if is_key else "LONGTEXT"
    if schema.type == "bytes":
        return "VARBINARY(255)" if is_key else "LONGBLOB"
    return "JSON"  # struct, array, map


# the source type names Debezium's MySQL DDL parser gives (upper case; ColumnDefinitionParserListener,
# MySqlAntlrDdlParser's DataTypeResolver), by the MySQL type they are
_INTEGERS = {"TINYINT": "TINYINT", "INT1": "TINYINT", "SMALLINT": "SMALLINT", "INT2": "SMALLINT",
             "MEDIUMINT": "MEDIUMINT", "INT3": "MEDIUMINT", "MIDDLEINT": "MEDIUMINT", "INT": "INT", "INTEGER": "INT",
             "INT4": "INT", "BIGINT": "BIGINT", "INT8": "BIGINT"}
_DECIMALS = frozenset({"DECIMAL", "DEC", "NUMERIC", "FIXED"})
_CHARS = {"CHAR": "CHAR", "CHARACTER": "CHAR", "NCHAR": "CHAR", "NATIONAL CHAR": "CHAR", "NATIONAL CHARACTER": "CHAR",
          "VARCHAR": "VARCHAR", "CHARACTER VARYING": "VARCHAR", "CHAR VARYING": "VARCHAR", "NVARCHAR": "VARCHAR",
          "NATIONAL VARCHAR": "VARCHAR", "NATIONAL CHAR VARYING": "VARCHAR", "NATIONAL CHARACTER VARYING": "VARCHAR"}
_TEXTS = frozenset({"TINYTEXT", "TEXT", "MEDIUMTEXT", "LONGTEXT"})
_BLOBS = frozenset({"TINYBLOB", "BLOB", "MEDIUMBLOB", "LONGBLOB"})
_TIMES = frozenset({TIME, CONNECT_TIME, MICRO_TIME, NANO_TIME})
_DATETIMES = frozenset({TIMESTAMP, CONNECT_TIMESTAMP, MICRO_TIMESTAMP, NANO_TIMESTAMP})
_KEY_CHARS = 768  # a key column of utf8mb4 text: 4 bytes a character, InnoDB's 3072-byte key limit
_KEY_BYTES = 3072


def _number(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def source_type(schema: FieldSchema, is_key: bool = False) -> str | None:
    """The source column's own MySQL type, from the schema parameters column.propagate.source.type
    adds (:data:`SOURCE_TYPE`, its length and scale), where it is a valid MySQL type that holds every
    value of this field as the connector sends it: TIME(3), DATETIME(6), TIMESTAMP(3), VARCHAR(200),
    CHAR(3), DECIMAL(10,2), TINYINT(1), BIGINT UNSIGNED, BINARY(4), TEXT, POINT … None: no such
    parameter, or a type that does not fit the field (a DECIMAL sent as a double, binary data sent as
    base64 or hex text, a TEXT or BLOB in a key): the mapping of Debezium's data type tables decides."""
    p = schema.parameters
    raw = p.get(SOURCE_TYPE)
    if not raw:
        return None
    words = raw.upper().split()
    modifiers = " ".join(w for w in words if w in ("UNSIGNED", "ZEROFILL"))
    name = " ".join(w for w in words if w not in ("UNSIGNED", "ZEROFILL", "SIGNED"))
    length, scale = _number(p.get(SOURCE_LENGTH)), _number(p.get(SOURCE_SCALE))
    fsp = f"({length})" if length is not None and length > 0 else ""
    kind, logical = schema.type, schema.name
    text: str | None = None
    if logical is None and kind in ("int8", "int16", "int32", "int64") and name in _INTEGERS:
        text = f"{_INTEGERS[name]}{fsp} {modifiers}"  # INT UNSIGNED arrives as int64: the values fit
    elif logical is None and kind == "boolean":
        if name in ("BOOL", "BOOLEAN") or (_INTEGERS.get(name) == "TINYINT" and length == 1):
            text = "TINYINT(1)"  # BOOLEAN is TINYINT(1); so is TinyIntOneToBooleanConverter's TINYINT(1)
        elif name == "BIT" and (length or 1) == 1:
            text = "BIT(1)"
    elif logical == DECIMAL:
        if name in _DECIMALS and length and scale == _number(p.get("scale", "0")):
            text = f"DECIMAL({length},{scale}) {modifiers}"
        elif _INTEGERS.get(name) == "BIGINT" and modifiers:  # bigint.unsigned.handling.mode=precise
            text = f"BIGINT {modifiers}"
    elif logical is None and kind == "string":
        if name in _CHARS and (length or _CHARS[name] == "CHAR"):
            text = None if is_key and (length or 1) > _KEY_CHARS else f"{_CHARS[name]}{fsp}"
        elif name in _TEXTS and not is_key:
            text = name
        elif name in _DECIMALS and length and scale is not None:  # decimal.handling.mode=string: the digits
            text = f"DECIMAL({length},{scale}) {modifiers}"
    elif logical is None and kind == "bytes":  # binary.handling.mode=bytes (base64 in JSON: the bytes)
        if name in ("BINARY", "VARBINARY") and (length or name == "BINARY"):
            text = None if is_key and (length or 1) > _KEY_BYTES else f"{name}{fsp}"
        elif name in _BLOBS and not is_key:
            text = name
    elif logical in (DATE, CONNECT_DATE) and name == "DATE":
        text = "DATE"
    elif logical in _TIMES and name == "TIME":
        text = f"TIME{fsp}"
    elif logical in _DATETIMES and name == "DATETIME":
        text = f"DATETIME{fsp}"
    elif logical == ZONED_TIMESTAMP and name == "TIMESTAMP":
        text = f"TIMESTAMP{fsp}"
    elif logical == YEAR and name == "YEAR":
        text = "YEAR"
    elif logical == GEOMETRY and name in SPATIAL or logical == POINT and name == "POINT":
        text = name
    if text is None:
        return None
    try:
        return parse_type(text.strip()).sql
    except TypeSyntaxError:  # out of MySQL's ranges (a VARCHAR(70000), a TIME(9)): not a column type
        return None


def _column(name: str, schema: FieldSchema, is_key: bool) -> dict[str, Any]:
    """{name, type, nullable}, and ``generic``: the type without the propagated source type, where
    that differs (a table made from the schema before the connector propagated it has that type,
    which holds the values: connectors/mysql/evolution.changes)."""
    kind, generic = mysql_type(schema, is_key), generic_type(schema, is_key)
    return {"name": name, "type": kind, "nullable": schema.optional and not is_key,
            **({"generic": generic} if generic != kind else {})}


def mysql_columns(row: FieldSchema, key: FieldSchema | None) -> dict[str, Any]:
    """The table a row schema (the envelope's after/before struct) and key schema describe:
    {"columns": [{name, type, nullable[, generic]}], "key": [field names], "properties": the
    Elasticsearch mapping's properties}."""
    keys = [n for n, _s in key.fields] if key is not None and key.type == "struct" else []
    return {"columns": [_column(n, s, n in keys) for n, s in row.fields],
            "key": keys,
            "properties": {n: p for n, s in row.fields if (p := es_property(s, n in keys)) is not None}}


# -- Elasticsearch fields from a Connect schema (an index without a declared mapping) -----------------
_SIMPLE_ES = {"int8": "byte", "int16": "short", "int32": "integer", "int64": "long", "float": "float",
              "float32": "float", "double": "double", "float64": "double", "boolean": "boolean", "bytes": "binary"}
_DATE = {"type": "date", "format": "strict_date_optional_time||epoch_millis"}
_NAMED_ES: dict[str, dict[str, Any]] = {
    **{n: _DATE for n in (DATE, CONNECT_DATE, TIMESTAMP, CONNECT_TIMESTAMP, MICRO_TIMESTAMP, NANO_TIMESTAMP,
                          ZONED_TIMESTAMP)},
    **{n: {"type": "keyword"} for n in (TIME, CONNECT_TIME, MICRO_TIME, NANO_TIME, ZONED_TIME, ENUM, ENUM_SET,
                                        VARIABLE_SCALE_DECIMAL)},
    YEAR: {"type": "short"}, JSON: {"type": "text"},
    GEOMETRY: {"properties": {"wkb": {"type": "binary"}, "srid": {"type": "integer"}}},
    POINT: {"properties": {"x": {"type": "double"}, "y": {"type": "double"}, "wkb": {"type": "binary"},
                           "srid": {"type": "integer"}}},
}


def es_property(schema: FieldSchema, is_key: bool = False) -> dict[str, Any] | None:
    """The Elasticsearch field for a Connect field (docs/types.md). Decimals stay exact: a
    scaled_float up to 15 digits, unsigned_long for BIGINT UNSIGNED, else keyword (the document keeps
    the exact number either way). Datetimes are ``date`` (searches see milliseconds; ``_source``
    keeps the microseconds; ``date_nanos`` cannot hold dates before 1970). None: left to dynamic
    mapping (structs, arrays, maps)."""
    p = schema.parameters
    if schema.type == "int64" and unsigned_bigint(schema):  # long mode, the value restored (types.converter)
        return {"type": "unsigned_long"}
    if schema.name == DECIMAL:
        scale, precision = int(p.get("scale", "0")), int(p.get("connect.decimal.precision", "65"))
        if scale == 0 and precision == 20:  # BIGINT UNSIGNED, bigint.unsigned.handling.mode=precise
            return {"type": "unsigned_long"}
        return {"type": "scaled_float", "scaling_factor": 10 ** scale} if precision <= 15 else {"type": "keyword"}
    if schema.name in _NAMED_ES:
        return _NAMED_ES[schema.name]
    if schema.name == BITS:
        return {"type": "unsigned_long" if int(p.get("length", "64")) > 63 else "long"}
    if schema.type in _SIMPLE_ES:
        return {"type": _SIMPLE_ES[schema.type]}
    if schema.type == "string":
        return {"type": "keyword"} if is_key else {"type": "text", "fields": {"keyword": {"type": "keyword",
                                                                                           "ignore_above": 256}}}
    return None
