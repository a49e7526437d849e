"""Converters: Kafka bytes -> the record frame's ``key`` / ``value`` columns, as Spark expressions.

* ``json``         schemaless JSON objects. The window's schema is inferred in the JVM
                   (``schema_of_variant_agg``), fields merged over all records of the topic.
* ``json_schema``  the JsonConverter's ``{schema, payload}`` envelope (``schemas.enable=true``); the
                   Spark type comes from the Connect schema(s) of the window.
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
    kind = schema.get("type")
    simple = {"int8": T.ByteType(), "int16": T.ShortType(), "int32": T.IntegerType(), "int64": T.LongType(),
              "float": T.FloatType(), "float32": T.FloatType(), "double": T.DoubleType(),
              "float64": T.DoubleType(), "boolean": T.BooleanType(), "string": T.StringType(),
              "bytes": T.StringType()}  # bytes arrive base64-encoded in JSON
    if kind in simple:
        return simple[kind]
    if kind == "array":
        return T.ArrayType(connect_to_spark(schema.get("items")))
    if kind == "map":
        return T.MapType(connect_to_spark(schema.get("keys")), connect_to_spark(schema.get("values")))
    if kind == "struct":
        return T.StructType([T.StructField(f["field"], connect_to_spark(f), True) for f in schema.get("fields", [])])
    raise ConfigError(f"unsupported Connect schema type {kind!r} in a json_schema record")


def merge_types(a: T.DataType, b: T.DataType) -> T.DataType:
    """Union of two struct types (schema evolution within a window); other conflicts widen to string."""
    if a == b:
        return a
    if isinstance(a, T.NullType):
        return b
    if isinstance(b, T.NullType):
        return a
    if isinstance(a, T.StructType) and isinstance(b, T.StructType):
        fields = {f.name: f.dataType for f in a.fields}
        for f in b.fields:
            fields[f.name] = merge_types(fields[f.name], f.dataType) if f.name in fields else f.dataType
        return T.StructType([T.StructField(n, t, True) for n, t in fields.items()])
    if isinstance(a, T.NumericType) and isinstance(b, T.NumericType):
        return T.DoubleType() if T.DoubleType() in (a, b) or T.FloatType() in (a, b) else T.LongType()
    return T.StringType()


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
    text = F.col(column).cast("string")
    env = F.from_json(text, "struct<schema:string,payload:string>", {"mode": "PERMISSIVE"})
    schemas = [r.s for r in df.select(env["schema"].alias("s")).where("s IS NOT NULL").distinct().limit(100).collect()]
    dtype: T.DataType = T.NullType()
    for s in schemas:
        try:
            dtype = merge_types(dtype, connect_to_spark(json.loads(s)))
        except json.JSONDecodeError:
            continue
    if isinstance(dtype, T.NullType):
        dtype = EMPTY_STRUCT
    value = F.from_json(env["payload"], dtype) if isinstance(dtype, T.StructType) else env["payload"].cast(dtype)
    error = F.when(F.col(column).isNotNull() & (F.try_parse_json(text).isNull() | env["schema"].isNull()),
                   F.lit(f"{column} is not a {{schema, payload}} JSON envelope ({column}.converter json_schema)"))
    return value, error


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
