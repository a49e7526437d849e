"""Converters: Kafka bytes -> the record frame's ``key`` / ``value`` columns, as Spark expressions.

* ``json``         schemaless JSON objects. The window's schema is inferred in the JVM
                   (``schema_of_variant_agg``), fields merged over all records of the topic.
* ``json_schema``  the JsonConverter's ``{schema, payload}`` envelope (``schemas.enable=true``); the
                   Spark type comes from every distinct Connect schema of the window, merged in the order
                   of their first records; a schema that cannot be merged (a field whose type conflicts
                   with the earlier records') sends its records to the DLQ, naming the field and types.
* ``string``       UTF-8 text.
* ``bytes``        pass-through.

Bytes a converter cannot decode mark the record with stage ``converter`` (it goes to the DLQ).
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from connectors.errors import ConfigError

EMPTY_STRUCT = T.StructType([])


def connect_to_spark(schema: dict[str, Any] | None) -> T.DataType:
    """A Kafka Connect schema (JsonConverter form) -> a Spark type."""
    if not schema:
        return T.StringType()
    kind = _KINDS.get(schema.get("type"), schema.get("type"))  # type: ignore[arg-type]
    if kind in _SIMPLE:
        return _SIMPLE[kind]
    if kind == "array":
        return T.ArrayType(connect_to_spark(schema.get("items")))
    if kind == "map":
        return T.MapType(connect_to_spark(schema.get("keys")), connect_to_spark(schema.get("values")))
    if kind == "struct":
        return T.StructType([T.StructField(f["field"], connect_to_spark(f), True) for f in schema.get("fields", [])])
    raise ConfigError(f"unsupported Connect schema type {kind!r} in a json_schema record")


_SIMPLE: dict[str, T.DataType] = {
    "int8": T.ByteType(), "int16": T.ShortType(), "int32": T.IntegerType(), "int64": T.LongType(),
    "float32": T.FloatType(), "float64": T.DoubleType(), "boolean": T.BooleanType(), "string": T.StringType(),
    "bytes": T.StringType()}  # bytes arrive base64-encoded in JSON
_KINDS = {"float": "float32", "double": "float64"}  # older spellings
_INTEGERS = ["int8", "int16", "int32", "int64"]


class SchemaConflict(ValueError):
    """Two Connect schemas of one window give a field types no one Spark type reads both of."""

    def __init__(self, path: str, ours: str, theirs: str) -> None:
        super().__init__(f"{path}: {ours} vs {theirs}")
        self.path, self.ours, self.theirs = path, ours, theirs


def _shown(schema: dict[str, Any]) -> str:
    """A Connect type as a conflict names it: ``int32``, ``int32 (io.debezium.time.Date)``, ``struct``."""
    kind = _KINDS.get(schema.get("type"), schema.get("type"))  # type: ignore[arg-type]
    name = schema.get("name")
    return f"{kind} ({name})" if name and kind not in ("struct", "array", "map") else str(kind)


def _meaning(schema: dict[str, Any]) -> tuple[Any, Any]:
    """What a primitive's value means beyond its JSON type: its logical type, and a Decimal's scale
    (the older path reads the raw JSON value, so days and microseconds would share one column)."""
    return schema.get("name"), (schema.get("parameters") or {}).get("scale")


def merge_connect(a: dict[str, Any], b: dict[str, Any], path: str) -> dict[str, Any]:
    """Two Connect schemas of a window as one, whose Spark type reads the payloads of both: structs
    get the union of their fields (``a``'s order first), integers the wider, integer and float
    float64. Anything else raises :class:`SchemaConflict` naming the field (``path``) and both types."""
    if not a or not b:  # a schemaless ({}) part is read as text, as connect_to_spark does
        if a == b:
            return a
        raise SchemaConflict(path, _shown(a) if a else "schemaless", _shown(b) if b else "schemaless")
    ka = _KINDS.get(a.get("type"), a.get("type"))  # type: ignore[arg-type]
    kb = _KINDS.get(b.get("type"), b.get("type"))  # type: ignore[arg-type]
    if ka == kb == "struct":
        fields = {f["field"]: f for f in a.get("fields", [])}
        for f in b.get("fields", []):
            name = f["field"]
            fields[name] = ({**merge_connect(fields[name], f, f"{path}.{name}"), "field": name}
                            if name in fields else f)
        return {**a, "fields": list(fields.values())}
    if ka == kb == "array":
        return {**a, "items": merge_connect(a.get("items") or {}, b.get("items") or {}, f"{path}[]")}
    if ka == kb == "map":
        return {**a, "keys": merge_connect(a.get("keys") or {}, b.get("keys") or {}, f"{path}{{key}}"),
                "values": merge_connect(a.get("values") or {}, b.get("values") or {}, f"{path}{{value}}")}
    numbers = [*_INTEGERS, "float32", "float64"]
    if ka in _SIMPLE and kb in _SIMPLE and (ka == kb == "string" or (
            _meaning(a) == _meaning(b) and (ka == kb or (ka in numbers and kb in numbers)))):
        if ka == kb:
            return a
        if ka in _INTEGERS and kb in _INTEGERS:
            return a if _INTEGERS.index(ka) >= _INTEGERS.index(kb) else b
        return {**a, "type": "float64"}
    raise SchemaConflict(path, _shown(a), _shown(b))


def _json(df: DataFrame, column: str) -> tuple[Column, Column]:
    text = F.col(column).cast("string")
    parsed = F.try_parse_json(text)
    is_object = F.schema_of_variant(parsed).startswith("OBJECT")
    row = df.where(is_object).select(F.schema_of_variant_agg(parsed).alias("s")).first()
    ddl = row.s if row and row.s else None
    dtype = T._parse_datatype_string(ddl.replace("OBJECT<", "STRUCT<")) if ddl and ddl.startswith("OBJECT<") else EMPTY_STRUCT
    value = F.when(is_object, F.from_json(text, dtype)).otherwise(F.lit(None).cast(dtype))
    error = (F.when(F.col(column).isNotNull() & parsed.isNull(), F.lit(f"{column} is not valid JSON ({column}.converter json)"))
             .when(F.col(column).isNotNull() & ~is_object,
                   F.lit(f"{column} is JSON but not an object ({column}.converter json)")))
    return value, error


def _json_schema(df: DataFrame, column: str) -> tuple[Column, Column]:
    """Every distinct Connect schema of the window (of this topic) is read and merged, in the order
    of their first records, so that a retry of the window decides alike. A record whose schema is not
    a Connect schema, or gives a field a type the schemas before it cannot share, is marked (it goes
    to the DLQ with the field and both types) rather than read with fields missing."""
    text = F.col(column).cast("string")
    env = F.from_json(text, "struct<schema:string,payload:string>", {"mode": "PERMISSIVE"})
    digest = F.sha2(env["schema"], 256)
    # one row per distinct schema (partial aggregation: each task sends each of its schemas once);
    # a window rarely has more than a few, and each costs a json.loads and a merge on the driver
    seen = (df.select(env["schema"].alias("s"), digest.alias("h"),
                      F.struct("timestamp", "partition", "offset").alias("at"))
            .where("s IS NOT NULL").groupBy("s", "h").agg(F.min("at").alias("first")).orderBy("first", "h").collect())
    merged, refused = merge_schemas([(r.s, r.h) for r in seen], column)
    dtype = EMPTY_STRUCT if merged is None else connect_to_spark(merged)
    value = F.from_json(env["payload"], dtype) if isinstance(dtype, T.StructType) else env["payload"].cast(dtype)
    error = F.when(F.col(column).isNotNull() & (F.try_parse_json(text).isNull() | env["schema"].isNull()),
                   F.lit(f"{column} is not a {{schema, payload}} JSON envelope ({column}.converter json_schema)"))
    if refused:
        reasons = F.create_map(*[F.lit(x) for pair in sorted(refused.items()) for x in pair])
        error = F.coalesce(error, F.try_element_at(reasons, digest))
    return value, error


def merge_schemas(schemas: list[tuple[str, str]], column: str) -> tuple[dict[str, Any] | None, dict[str, str]]:
    """The window's Connect schemas (text and digest, in the order of their first records) as one
    (None: none was usable), and per digest of a schema left out why its records cannot be read."""
    merged: dict[str, Any] | None = None
    refused: dict[str, str] = {}
    for text, digest in schemas:
        try:
            parsed = json.loads(text)
            if not isinstance(parsed, dict):
                raise TypeError(f"a JSON {type(parsed).__name__}, not an object")
            connect_to_spark(parsed)  # every part of it has a Spark type
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError, ConfigError) as exc:
            why = str(exc) if isinstance(exc, (ConfigError, TypeError)) else f"{type(exc).__name__}: {exc}"
            refused[digest] = (f"{column}.schema is not a Kafka Connect schema ({why[:200]}) "
                               f"({column}.converter json_schema)")
            continue
        try:
            merged = parsed if merged is None else merge_connect(merged, parsed, column)
        except SchemaConflict as conflict:
            refused[digest] = (f"{conflict.path} is {conflict.theirs} in this record's schema but {conflict.ours} "
                               "in the schemas of the window's earlier records: a window reads a field as one type "
                               f"({column}.converter json_schema)")
    return merged, refused


def _string(_df: DataFrame, column: str) -> tuple[Column, Column]:
    text = F.col(column).cast("string")
    error = F.when(F.col(column).isNotNull() & ~F.is_valid_utf8(text),
                   F.lit(f"{column} is not valid UTF-8 ({column}.converter string)"))
    return text, error


def _bytes(_df: DataFrame, column: str) -> tuple[Column, Column]:
    return F.col(column), F.lit(None).cast("string")


CONVERTERS = {"json": _json, "json_schema": _json_schema, "string": _string, "bytes": _bytes}


def to_records(raw: DataFrame, key_converter: str, value_converter: str) -> DataFrame:
    """Raw Kafka records (one topic) -> the record frame the transforms work on."""
    key, key_error = CONVERTERS[key_converter](raw, "key")
    value, value_error = CONVERTERS[value_converter](raw, "value")
    schema_name = (F.get_json_object(F.col("value").cast("string"), "$.schema.name")
                   if value_converter == "json_schema" else F.lit(None).cast("string"))
    error = F.coalesce(value_error, key_error)
    return raw.select(
        F.col("topic").alias("_raw_topic"), F.col("key").alias("_raw_key"), F.col("value").alias("_raw_value"),
        F.col("headers").alias("_raw_headers"), F.col("timestamp").alias("_raw_timestamp"),
        "topic", "partition", "offset", "timestamp", "headers",
        F.when(key_error.isNull(), key).alias("key"), F.when(error.isNull(), value).alias("value"),
        F.when(error.isNotNull(), F.lit("converter")).alias("_error_stage"), error.alias("_error_message"),
        F.lit(None).cast("bigint").alias("_source_ts_ms"),
        schema_name.alias("_value_schema_name"), F.lit(None).cast("int").alias("_value_schema_version"),
    )
