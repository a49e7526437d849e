"""Single-message transforms as Spark column expressions, registered by type in ``TRANSFORMS``.

Each transform is a pure function ``(records, config) -> records`` on the record frame:

    topic, partition, offset, timestamp, headers, key, value      the record as Kafka Connect sees it
    _error_stage, _error_message                                  set when a record failed
    _source_ts_ms                                                 set by ExtractNewRecordState (versioning)
    _value_schema_name, _value_schema_version                     SetSchemaMetadata
    _raw_*                                                        the original record (for the DLQ)

A transform that fails on a record marks it (stage ``transform``) instead of raising; marked
records are never dropped by later transforms, and go to the DLQ at the end of the chain.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from connectors.errors import ConfigError
from spark_jobs import transform_config as cfgs

log = logging.getLogger(__name__)



def ok() -> Column:
    """True for records that have not failed (a function: Columns need an active SparkContext)."""
    return F.col("_error_stage").isNull()

SPARK_TYPES = {"int8": "tinyint", "int16": "smallint", "int32": "int", "int64": "bigint", "float32": "float",
               "float64": "double", "boolean": "boolean", "string": "string"}


def _fail(df: DataFrame, condition: Column, message: Column) -> DataFrame:
    """Mark the records (not yet failed) where ``condition`` holds."""
    hit = ok() & condition
    return (df.withColumn("_error_message", F.when(hit, message).otherwise(F.col("_error_message")))
              .withColumn("_error_stage", F.when(hit, F.lit("transform")).otherwise(F.col("_error_stage"))))


def _struct(df: DataFrame, target: str, who: str) -> T.StructType:
    dtype = df.schema[target].dataType
    if not isinstance(dtype, T.StructType):
        raise ConfigError(f"transform {who} needs the {target} to be a struct (a JSON object), but the {target} "
                          f"is {dtype.simpleString()}: check the converter or add a HoistField first")
    return dtype


def _has(struct: T.StructType, name: str) -> bool:
    return name in struct.fieldNames()


def predicate_column(pred: Any) -> Column:
    if isinstance(pred, cfgs.TopicNameMatches):
        return F.col("topic").rlike(f"^(?:{pred.pattern})$")
    if isinstance(pred, cfgs.HasHeaderKey):
        return F.exists(F.coalesce(F.col("headers"), F.array()), lambda h: h["key"] == F.lit(pred.name))
    if isinstance(pred, cfgs.RecordIsTombstone):
        return F.col("value").isNull()
    return F.expr(pred.condition)


def _applies(cfg: Any) -> Column:
    if cfg.predicate is None:
        return F.lit(True)
    cond = F.coalesce(predicate_column(cfg.predicate), F.lit(False))
    return ~cond if cfg.negate else cond


def _only_where(df: DataFrame, cfg: Any, column: str, new: Column) -> DataFrame:
    """Replace ``column`` by ``new`` on the records the transform applies to (and that did not fail)."""
    return df.withColumn(column, F.when(_applies(cfg) & ok(), new).otherwise(F.col(column)))


# -- the catalogue ---------------------------------------------------------------------------------
def extract_new_record_state(df: DataFrame, cfg: cfgs.ExtractNewRecordState) -> DataFrame:
    envelope = _struct(df, "value", "ExtractNewRecordState")
    for name in ("op", "after"):
        if not _has(envelope, name):
            raise ConfigError(f"ExtractNewRecordState: the value has no {name!r} field; is this a Debezium topic? "
                              f"(value fields: {envelope.fieldNames()})")
    row_type = _merge_types(envelope["after"].dataType, envelope["before"].dataType if _has(envelope, "before") else None)
    v = F.col("value")
    after = _conform(v["after"], envelope["after"].dataType, row_type)
    before = _conform(v["before"], envelope["before"].dataType, row_type) if _has(envelope, "before") else F.lit(None).cast(row_type)
    op = v["op"]
    source = v["source"] if _has(envelope, "source") else F.lit(None)
    src_fields = envelope["source"].dataType.fieldNames() if _has(envelope, "source") and isinstance(
        envelope["source"].dataType, T.StructType) else []
    tombstone = v.isNull()

    df = _fail(df, ~tombstone & op.isNull(), F.lit("not a Debezium change event: the value has no 'op'"))
    df = _fail(df, ~tombstone & ~op.isin("c", "r", "u", "d"),
               F.concat(F.lit("unknown Debezium op '"), op, F.lit("' (expected c, r, u or d)")))
    df = _fail(df, op.isin("c", "r", "u") & v["after"].isNull(),
               F.concat(F.lit("op '"), op, F.lit("' without an 'after' row image")))
    ts = source["ts_ms"].cast("bigint") if "ts_ms" in src_fields else F.lit(None).cast("bigint")
    df = df.withColumn("_source_ts_ms", F.when(ok(), F.coalesce(ts, v["ts_ms"].cast("bigint") if _has(envelope, "ts_ms") else F.lit(None))))

    new = after
    if cfg.delete_handling == "rewrite":
        new = F.when(op == "d", before.withField("__deleted", F.lit("true"))).otherwise(
            after.withField("__deleted", F.lit("false")))
    elif cfg.delete_handling == "none":
        new = F.when(op == "d", F.lit(None).cast(row_type)).otherwise(after)
    for name in cfg.add_fields:
        if name.startswith("source.") or name in ("table", "db", "lsn", "connector"):
            field = name.removeprefix("source.")
            value = source[field] if field in src_fields else F.lit(None)
        else:
            value = v[name] if _has(envelope, name) else F.lit(None)
        new = new.withField("__" + name.replace(".", "_"), value.cast("string") if name != "source.ts_ms" and name != "ts_ms" else value.cast("bigint"))
    keep = F.lit(True)
    if cfg.delete_handling == "drop":
        keep = keep & (op.isNull() | (op != "d"))
    if cfg.drop_tombstones:
        keep = keep & ~tombstone
    df = df.where(keep | ~ok())
    return df.withColumn("value", F.when(ok() & ~tombstone, new).otherwise(F.lit(None).cast(new_type(df, new))))


def new_type(df: DataFrame, column: Column) -> T.DataType:
    return df.select(column.alias("x")).schema["x"].dataType


def _merge_types(a: T.DataType, b: T.DataType | None) -> T.DataType:
    """A type both row images (before, after) can be cast to."""
    if b is None or isinstance(b, T.NullType):
        return a
    if isinstance(a, T.NullType):
        return b
    if isinstance(a, T.StructType) and isinstance(b, T.StructType):
        names = list(dict.fromkeys(a.fieldNames() + b.fieldNames()))
        return T.StructType([T.StructField(n, _merge_types(a[n].dataType if n in a.fieldNames() else T.NullType(),
                                                           b[n].dataType if n in b.fieldNames() else None))
                             for n in names])
    return a if a == b else T.StringType()


def _conform(col: Column, src: T.DataType, dst: T.DataType) -> Column:
    if src == dst:
        return col
    if isinstance(src, T.StructType) and isinstance(dst, T.StructType):
        return F.when(col.isNull(), F.lit(None).cast(dst)).otherwise(F.struct(*[
            (_conform(col[f.name], src[f.name].dataType, f.dataType) if f.name in src.fieldNames()
             else F.lit(None).cast(f.dataType)).alias(f.name) for f in dst.fields]))
    if isinstance(dst, T.StringType) and isinstance(src, T.StructType | T.ArrayType | T.MapType):
        return F.to_json(col)
    return col.cast(dst)


def cast(df: DataFrame, cfg: cfgs.Cast) -> DataFrame:
    struct = _struct(df, cfg.target, "Cast")
    target = F.col(cfg.target)
    for field, kind in cfg.spec.items():
        if not _has(struct, field):
            raise ConfigError(f"Cast: {cfg.target} has no field {field!r} (fields: {struct.fieldNames()})")
        casted = target[field].try_cast(SPARK_TYPES[kind])
        df = _fail(df, target[field].isNotNull() & casted.isNull(), F.concat(
            F.lit(f"Cast: {cfg.target}.{field} = '"), target[field].cast("string"), F.lit(f"' is not a valid {kind}")))
        target = target.withField(field, casted)
    # F.lit(None), not the column: a cast that changes a field's type changes the struct's type
    return df.withColumn(cfg.target, F.when(F.col(cfg.target).isNull(), F.lit(None)).otherwise(target))


def drop(df: DataFrame, cfg: cfgs.Drop) -> DataFrame:
    return _only_where(df, cfg, cfg.target, F.lit(None).cast(df.schema[cfg.target].dataType))


def extract_field(df: DataFrame, cfg: cfgs.ExtractField) -> DataFrame:
    struct = _struct(df, cfg.target, "ExtractField")
    if not _has(struct, cfg.field):
        raise ConfigError(f"ExtractField: {cfg.target} has no field {cfg.field!r} (fields: {struct.fieldNames()})")
    return df.withColumn(cfg.target, F.col(cfg.target)[cfg.field])


def extract_topic(df: DataFrame, cfg: cfgs.ExtractTopic) -> DataFrame:
    struct = _struct(df, cfg.target, "ExtractTopic")
    field = F.col(cfg.target)[cfg.field].cast("string") if _has(struct, cfg.field) else F.lit(None).cast("string")
    if not cfg.skip_missing_or_null:
        df = _fail(df, _applies(cfg) & field.isNull(), F.lit(
            f"ExtractTopic: {cfg.target}.{cfg.field} is missing or null (set skip_missing_or_null to keep the topic)"))
    return _only_where(df, cfg, "topic", F.coalesce(field, F.col("topic")))


def filter_records(df: DataFrame, cfg: cfgs.Filter) -> DataFrame:
    return df.where(~(_applies(cfg) & ok()))


def _flatten(col: Column, dtype: T.DataType, prefix: str, delimiter: str) -> list[Column]:
    if isinstance(dtype, T.StructType):
        out: list[Column] = []
        for f in dtype.fields:
            out += _flatten(col[f.name], f.dataType, f"{prefix}{delimiter}{f.name}" if prefix else f.name, delimiter)
        return out
    return [col.alias(prefix)]


def flatten(df: DataFrame, cfg: cfgs.Flatten) -> DataFrame:
    struct = _struct(df, cfg.target, "Flatten")
    flat = F.struct(*_flatten(F.col(cfg.target), struct, "", cfg.delimiter))
    return df.withColumn(cfg.target, F.when(F.col(cfg.target).isNull(), F.lit(None)).otherwise(flat))


def hoist_field(df: DataFrame, cfg: cfgs.HoistField) -> DataFrame:
    col = F.col(cfg.target)
    return df.withColumn(cfg.target, F.when(col.isNull(), F.lit(None)).otherwise(F.struct(col.alias(cfg.field))))


def insert_field(df: DataFrame, cfg: cfgs.InsertField) -> DataFrame:
    _struct(df, cfg.target, "InsertField")
    col = F.col(cfg.target)
    for name, value in ((cfg.topic_field, F.col("topic")), (cfg.partition_field, F.col("partition")),
                        (cfg.offset_field, F.col("offset")),
                        (cfg.timestamp_field, F.timestamp_millis(F.col("timestamp"))),
                        (cfg.static_field, F.lit(cfg.static_value))):
        if name:
            col = col.withField(name, value)
    return df.withColumn(cfg.target, F.when(F.col(cfg.target).isNull(), F.lit(None)).otherwise(col))


def mask_field(df: DataFrame, cfg: cfgs.MaskField) -> DataFrame:
    struct = _struct(df, cfg.target, "MaskField")
    col = F.col(cfg.target)
    for name in cfg.fields:
        if not _has(struct, name):  # per-topic frames: a field of another topic's records
            continue
        dtype = struct[name].dataType
        if cfg.replacement is not None:
            masked = F.lit(cfg.replacement).cast(dtype)
        elif isinstance(dtype, T.StringType):
            masked = F.lit("")
        elif isinstance(dtype, T.BooleanType):
            masked = F.lit(False)
        elif isinstance(dtype, T.NumericType):
            masked = F.lit(0).cast(dtype)
        else:
            masked = F.lit(None).cast(dtype)
        col = col.withField(name, F.when(col[name].isNull(), col[name]).otherwise(masked))
    return _only_where(df, cfg, cfg.target, F.when(F.col(cfg.target).isNull(), F.lit(None)).otherwise(col))


def regex_router(df: DataFrame, cfg: cfgs.RegexRouter) -> DataFrame:
    pattern = f"^(?:{cfg.regex})$"
    return _only_where(df, cfg, "topic", F.when(F.col("topic").rlike(pattern), F.regexp_replace(
        "topic", pattern, cfg.replacement)).otherwise(F.col("topic")))


def replace_field(df: DataFrame, cfg: cfgs.ReplaceField) -> DataFrame:
    struct = _struct(df, cfg.target, "ReplaceField")
    names = struct.fieldNames()
    unknown = [n for n in [*cfg.include, *cfg.exclude, *cfg.renames] if n not in names]
    if unknown:
        log.warning("ReplaceField: %s has no fields %s (ignored)", cfg.target, unknown)
    keep = [n for n in names if (not cfg.include or n in cfg.include) and n not in cfg.exclude]
    col = F.col(cfg.target)
    new = F.struct(*[col[n].alias(cfg.renames.get(n, n)) for n in keep])
    return df.withColumn(cfg.target, F.when(col.isNull(), F.lit(None)).otherwise(new))


def set_schema_metadata(df: DataFrame, cfg: cfgs.SetSchemaMetadata) -> DataFrame:
    if cfg.name is not None:
        df = _only_where(df, cfg, f"_{cfg.target}_schema_name", F.lit(cfg.name))
    if cfg.version is not None:
        df = _only_where(df, cfg, f"_{cfg.target}_schema_version", F.lit(cfg.version))
    return df


def timestamp_converter(df: DataFrame, cfg: cfgs.TimestampConverter) -> DataFrame:
    struct = _struct(df, cfg.target, "TimestampConverter")
    if not _has(struct, cfg.field):
        raise ConfigError(f"TimestampConverter: {cfg.target} has no field {cfg.field!r} (fields: {struct.fieldNames()})")
    raw = F.col(cfg.target)[cfg.field]
    dtype = struct[cfg.field].dataType
    scale = {"seconds": 1, "milliseconds": 1000, "microseconds": 1_000_000}[cfg.unix_precision]
    if isinstance(dtype, T.StringType):
        ts = F.try_to_timestamp(raw, F.lit(cfg.format)) if cfg.format else raw.try_cast("timestamp")
    elif isinstance(dtype, T.NumericType):
        ts = F.timestamp_micros((raw.cast("double") * (1_000_000 / scale)).cast("bigint"))
    elif isinstance(dtype, T.DateType | T.TimestampType | T.TimestampNTZType):
        ts = raw.cast("timestamp")
    else:
        raise ConfigError(f"TimestampConverter: {cfg.target}.{cfg.field} is {dtype.simpleString()}, not a timestamp")
    df = _fail(df, raw.isNotNull() & ts.isNull(), F.concat(
        F.lit(f"TimestampConverter: {cfg.target}.{cfg.field} = '"), raw.cast("string"),
        F.lit(f"' is not a timestamp{' in format ' + cfg.format if cfg.format else ''}")))
    out = {"string": F.date_format(ts, cfg.format or "yyyy-MM-dd HH:mm:ss"),
           "unix": (F.unix_micros(ts) / (1_000_000 / scale)).cast("bigint"),
           "Date": ts.cast("date"), "Time": F.date_format(ts, "HH:mm:ss.SSS"), "Timestamp": ts}[cfg.target_type]
    col = F.col(cfg.target)
    return df.withColumn(cfg.target, F.when(col.isNull(), F.lit(None)).otherwise(col.withField(cfg.field, out)))


def timestamp_router(df: DataFrame, cfg: cfgs.TimestampRouter) -> DataFrame:
    stamp = F.date_format(F.timestamp_millis(F.col("timestamp")), cfg.timestamp_format)
    parts = cfg.topic_format.replace("${timestamp}", "\x00ts\x00").replace("${topic}", "\x00topic\x00").split("\x00")
    pieces = [stamp if p == "ts" else F.col("topic") if p == "topic" else F.lit(p) for p in parts if p != ""]
    return _only_where(df, cfg, "topic", F.concat(*pieces))


def tombstone_handler(df: DataFrame, cfg: cfgs.TombstoneHandler) -> DataFrame:
    tombstone = _applies(cfg) & F.col("value").isNull()
    if cfg.behavior == "fail":
        return _fail(df, tombstone, F.lit("TombstoneHandler: tombstone record (behavior fail)"))
    if cfg.behavior == "warn":
        log.warning("TombstoneHandler: dropping tombstones (behavior warn)")
    return df.where(~(tombstone & ok()))


def value_to_key(df: DataFrame, cfg: cfgs.ValueToKey) -> DataFrame:
    struct = _struct(df, "value", "ValueToKey")
    missing = [f for f in cfg.fields if not _has(struct, f)]
    if missing:
        raise ConfigError(f"ValueToKey: value has no fields {missing} (fields: {struct.fieldNames()})")
    v = F.col("value")
    for f in cfg.fields:
        df = _fail(df, v.isNotNull() & v[f].isNull(), F.lit(f"ValueToKey: value.{f} is null"))
    # a tombstone has no value to take the key from: its key becomes null (the new key type differs)
    return df.withColumn("key", F.when(v.isNull(), F.lit(None)).otherwise(F.struct(*[v[f].alias(f) for f in cfg.fields])))


def sql_expression(df: DataFrame, cfg: cfgs.SqlExpression) -> DataFrame:
    _struct(df, "value", "SqlExpression")
    col = F.col("value")
    for name, expression in cfg.fields.items():
        col = col.withField(name, F.expr(expression))
    return df.withColumn("value", F.when(F.col("value").isNull(), F.lit(None)).otherwise(col))


def python_transform(df: DataFrame, cfg: cfgs.PythonTransform) -> DataFrame:
    module_name, _, attr = cfg.function.rpartition(".")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"Python transform: cannot import {cfg.function!r}: {exc}") from exc
    result = fn(df, **cfg.options)
    if not isinstance(result, DataFrame):
        raise ConfigError(f"Python transform {cfg.function!r} returned {type(result).__name__}, expected a DataFrame")
    return result


TRANSFORMS: dict[str, Callable[[DataFrame, Any], DataFrame]] = {
    "ExtractNewRecordState": extract_new_record_state,
    "Cast": cast,
    "Drop": drop,
    "ExtractField": extract_field,
    "ExtractTopic": extract_topic,
    "Filter": filter_records,
    "Flatten": flatten,
    "HoistField": hoist_field,
    "InsertField": insert_field,
    "MaskField": mask_field,
    "RegexRouter": regex_router,
    "ReplaceField": replace_field,
    "SetSchemaMetadata": set_schema_metadata,
    "TimestampConverter": timestamp_converter,
    "TimestampRouter": timestamp_router,
    "TombstoneHandler": tombstone_handler,
    "ValueToKey": value_to_key,
    "SqlExpression": sql_expression,
    "Python": python_transform,
}


def apply_chain(df: DataFrame, chain: list[Any]) -> DataFrame:
    for i, cfg in enumerate(chain):
        try:
            df = TRANSFORMS[cfg.type](df, cfg)
        except ConfigError as exc:
            raise ConfigError(f"transforms.{i} ({cfg.type}): {exc}") from None
    return df
