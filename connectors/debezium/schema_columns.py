"""The MySQL columns and Elasticsearch fields a Connect schema describes.

For a sink without declared columns (``create_table`` from the record schema) and an index without
a declared mapping: each Connect field, by its physical type and logical name, becomes the MySQL
column and the Elasticsearch field of Debezium's MySQL connector's data type tables (``docs/types.md``).
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
    TIME,
    TIMESTAMP,
    VARIABLE_SCALE_DECIMAL,
    YEAR,
    ZONED_TIME,
    ZONED_TIMESTAMP,
    FieldSchema,
)

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


def mysql_columns(row: FieldSchema, key: FieldSchema | None) -> dict[str, Any]:
    """The table a row schema (the envelope's after/before struct) and key schema describe:
    {"columns": [{name, type, nullable}], "key": [field names], "properties": the Elasticsearch
    mapping's properties}."""
    keys = [n for n, _s in key.fields] if key is not None and key.type == "struct" else []
    return {"columns": [{"name": n, "type": mysql_type(s, n in keys), "nullable": s.optional and n not in keys}
                        for n, s in row.fields],
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
