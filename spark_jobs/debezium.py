"""Pure DataFrame functions: Debezium envelopes in, typed changes out.

``decode_changes`` turns raw Kafka records into change rows (op, row image, version) and marks the
records it cannot understand with an error stage and message. ``project_for_sink`` maps a row image
to a sink's columns and types; ``latest_per_key`` keeps the last change per key. All are Spark
column expressions: no Python runs per row.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from cdcflow.config import KAFKA_PK_COLUMNS, ElasticsearchSinkConfig, MySqlSinkConfig

# With need_json, before/after stay JSON text (the Elasticsearch sink sends the text as the document,
# keeping JSON types) and are parsed again into a string map; without, they are parsed once, as maps.
ENVELOPE_TEXT = "op:string,before:string,after:string,source:map<string,string>,ts_ms:bigint"
ENVELOPE_MAP = "op:string,before:map<string,string>,after:map<string,string>,source:map<string,string>,ts_ms:bigint"


def _value_schema(envelope: str) -> str:
    return f"struct<schema:string,payload:struct<{envelope}>,{envelope},_corrupt:string>"


KEY_SCHEMA = "struct<schema:string,payload:map<string,string>,_corrupt:string>"
JSON_OPTIONS = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt"}
VERSION_SHIFT = 1 << 20  # source_ts_ms versions: ts_ms * 2^20 + (offset mod 2^20), see docs/semantics.md

RAW_COLUMNS = ["topic", "partition", "offset", "timestamp", "key", "value", "headers"]


def _envelope_field(parsed: Column, name: str) -> Column:
    """A field of the envelope, from the JsonConverter's {schema, payload} wrapper or unwrapped."""
    return F.when(parsed["payload"].isNotNull(), parsed["payload"][name]).otherwise(parsed[name])


def decode_changes(raw: DataFrame, versioning: str, need_json: bool = True) -> DataFrame:
    """Raw records -> RAW_COLUMNS + change_op, image (string map), image_json (the row image as JSON
    text; null for tombstones), version, error_stage, error_message.

    Written as a few flat selects, each naming what the next one uses, rather than a chain of
    withColumn over nested expressions: the plan is analysed on every window, and the flat form
    analyses in less time (see docs/benchmarks.md)."""
    schema = _value_schema(ENVELOPE_TEXT if need_json else ENVELOPE_MAP)
    key_text = F.col("key").cast("string")
    # one parse per key: the {schema, payload} form only when the text mentions a payload
    key_wrapped = F.from_json(key_text, KEY_SCHEMA, JSON_OPTIONS)["payload"]
    parsed = raw.select(
        *RAW_COLUMNS,
        F.from_json(F.col("value").cast("string"), schema, JSON_OPTIONS).alias("_v"),
        F.when(key_text.contains('"payload"'), F.coalesce(key_wrapped, F.from_json(key_text, "map<string,string>")))
        .otherwise(F.from_json(key_text, "map<string,string>")).alias("_key"))
    v = F.col("_v")
    fields = parsed.select(
        *RAW_COLUMNS, "_key",
        _envelope_field(v, "op").alias("_op"), _envelope_field(v, "before").alias("_before"),
        _envelope_field(v, "after").alias("_after"), v["_corrupt"].isNotNull().alias("_corrupt"),
        _envelope_field(v, "source")["ts_ms"].try_cast("bigint").alias("_source_ts"),
        _envelope_field(v, "ts_ms").alias("_ts_ms"))
    op, before, after, key = F.col("_op"), F.col("_before"), F.col("_after"), F.col("_key")
    tombstone = F.col("value").isNull()
    unversioned = (F.col("_source_ts").isNull() & F.col("_ts_ms").isNull()
                   if versioning != "kafka_offset" else F.lit(False))

    def fail(stage: str, message: Column | str) -> Column:
        return F.struct(F.lit(stage).alias("stage"),
                        (F.lit(message) if isinstance(message, str) else message).alias("message"))

    error = (
        F.when(tombstone & F.col("key").isNull(), fail("converter", "tombstone without a key: nothing to delete"))
        .when(tombstone & key.isNull(), fail("converter", "tombstone key is not a JSON object (key.converter json)"))
        .when(tombstone, F.lit(None))
        .when(F.col("_corrupt"), fail("converter", "value is not a JSON object (value.converter json)"))
        .when(op.isNull(), fail("transform", "not a Debezium change event: no 'op' field (expected an envelope "
                                             "with op, before, after, source)"))
        .when(~op.isin("c", "r", "u", "d"), fail("transform", F.concat(
            F.lit("unknown Debezium op '"), op, F.lit("' (expected c, r, u or d)"))))
        .when(unversioned, fail("transform", "no source.ts_ms nor ts_ms to version the change by "
                                             "(versioning: source_ts_ms)"))
        .when(op.isin("c", "r", "u") & after.isNull(), fail("transform", F.concat(
            F.lit("op '"), op, F.lit("' without an 'after' row image"))))
        .when((op == "d") & before.isNull() & key.isNull(), fail("transform", "delete without a 'before' row "
                                                                             "image nor a JSON key"))
    )
    if versioning == "kafka_offset":
        version = F.col("offset")
    else:
        # A tombstone has no source position of its own: it gets the version of the change before
        # it (its delete) in latest_per_key. The Kafka timestamp is another clock and must not mix.
        ts = F.coalesce(F.col("_source_ts"), F.col("_ts_ms"))
        version = F.when(~tombstone, ts * F.lit(VERSION_SHIFT) + F.pmod(F.col("offset"), F.lit(VERSION_SHIFT)))
    deleting = tombstone | (op == "d")
    if need_json:
        image_json = F.when(tombstone, F.lit(None)).when(op == "d", F.coalesce(before, F.to_json(key))).otherwise(after)
    else:
        image_json = F.lit(None).cast("string")
    changes = fields.select(
        *RAW_COLUMNS, "_key", error.alias("_err"),
        F.when(deleting, F.lit("delete")).otherwise(F.lit("upsert")).alias("change_op"),
        image_json.alias("image_json"),
        (F.when(tombstone, key) if need_json else F.when(tombstone, key).when(op == "d", F.coalesce(before, key))
         .otherwise(after)).alias("_image"),
        version.cast("bigint").alias("version"))
    image = (F.coalesce(F.col("_image"), F.from_json(F.col("image_json"), "map<string,string>")) if need_json
             else F.col("_image"))
    return changes.select(
        *RAW_COLUMNS, "change_op", image.alias("image"), "image_json", "version",
        F.col("_err")["stage"].alias("error_stage"), F.col("_err")["message"].alias("error_message"),
        F.col("topic").alias("route"), F.lit(None).cast("map<string,string>").alias("key_image"))


def _spark_type(sql_type: str) -> str | None:
    """The Spark type a MySQL column's value is checked against; None: MySQL checks it."""
    t = sql_type.upper()
    if t.startswith(("TINYINT", "SMALLINT", "MEDIUMINT", "INT", "BIGINT", "BOOL")):
        return "bigint"
    if t.startswith(("FLOAT", "DOUBLE")):
        return "double"
    if t.startswith("DECIMAL"):
        return "decimal" + t[len("DECIMAL"):].replace(" ", "")
    return None


def _typed(raw: Column, sql_type: str) -> Column:
    if sql_type.upper().startswith(("DATETIME", "TIMESTAMP")):  # ISO strings (to_json) -> MySQL's format
        ts = raw.try_cast("timestamp")
        return F.when(ts.isNotNull(), F.date_format(ts, "yyyy-MM-dd HH:mm:ss.SSSSSS")).otherwise(raw)
    spark_type = _spark_type(sql_type)
    if spark_type is None:
        return raw
    typed = raw.try_cast(spark_type)
    if spark_type == "bigint":  # JSON booleans arrive as 'true'/'false'
        typed = F.coalesce(typed, F.when(F.lower(raw) == "true", F.lit(1)).when(
            F.lower(raw) == "false", F.lit(0)).cast("bigint"))
    return typed


def project_for_sink(changes: DataFrame, sink: MySqlSinkConfig) -> DataFrame:
    """Valid changes -> RAW_COLUMNS + change_op, version, one typed column per sink column (c_<i>),
    and error_message for the rows whose values do not fit the column types.

    Three flat selects, each column's lookup and cast written once and referred to by name after:
    the plan grows linearly with the column count (a 200-column table analyses in about the time of
    a 5-column one, see docs/benchmarks.md). One select of nested expressions that repeat the
    lookup per use grew the analysis exponentially past a dozen columns."""
    raws: list[Column] = []
    for i, col in enumerate(sink.columns):
        raw = F.col("image")[col.source_field]
        if sink.pk_mode == "kafka" and col.name in KAFKA_PK_COLUMNS:
            raw = {"__connect_topic": F.col("route"), "__connect_partition": F.col("partition").cast("string"),
                   "__connect_offset": F.col("offset").cast("string")}[col.name]
        elif sink.pk_mode == "record_key" and col.name in sink.primary_key:
            raw = F.coalesce(F.col("key_image")[col.source_field], raw)
        raws.append(raw.alias(f"r_{i}"))
    if sink.pk_mode == "kafka":  # every record is its own row: there is nothing to delete
        changes = changes.where(F.col("change_op") == "upsert")
    base = [*RAW_COLUMNS, "route", "change_op", "version"]
    looked_up = changes.select(*base, *raws)
    typed = looked_up.select(*base, *[F.col(f"r_{i}") for i in range(len(sink.columns))],
                             *[_typed(F.col(f"r_{i}"), c.type).alias(f"c_{i}") for i, c in enumerate(sink.columns)])
    errors: list[Column] = []
    for i, col in enumerate(sink.columns):
        raw, value = F.col(f"r_{i}"), F.col(f"c_{i}")
        is_key = col.name in sink.primary_key
        bad_value = raw.isNotNull() & value.isNull()
        if is_key:
            errors.append(F.when(raw.isNull(), F.lit(f"primary key field '{col.source_field}' is missing or null")))
        check = bad_value if is_key else (bad_value & (F.col("change_op") == "upsert"))
        errors.append(F.when(check, F.concat(F.lit(f"field '{col.source_field}' = '"), raw,
                                             F.lit(f"' is not a valid {col.type}"))))
    message = F.concat_ws("; ", *errors)
    cs = [f"c_{i}" for i in range(len(sink.columns))]
    checked = typed.select(*base, *cs, message.alias("_message"))
    return checked.select(*base, *cs, F.when(F.col("_message") != "", F.col("_message")).alias("error_message"))


def latest_per_key(projected: DataFrame, key_columns: list[str]) -> DataFrame:
    """The last change per key, by version and then offset (the log order).

    The window functions see the key, the log position and the version only; every other column
    rides along in one struct, so the plan's size does not grow with the table's width."""
    keys = [F.col(c) for c in key_columns]
    order = ["partition", "offset", "version"]
    rest = [c for c in projected.columns if c not in key_columns and c not in order]
    packed = projected.select(*key_columns, *order, F.struct(*rest).alias("_row"))
    # One shuffle and one sort, by key then log order; both window functions below use that order
    # (a second ordering by version would sort the window's rows again).
    log = Window.partitionBy(*keys).orderBy("partition", "offset")
    # Tombstones (version null) delete at the version of the previous change of their key in the
    # window; one whose delete was in an earlier window has nothing left to do and is dropped.
    filled = packed.withColumn("version", F.coalesce(F.col("version"), F.last("version", ignorenulls=True).over(
        log.rowsBetween(Window.unboundedPreceding, -1))))
    # the winner: highest version, then highest offset, then partition (a null version sorts lowest)
    rank = F.struct("version", "offset", "partition")
    best = F.max(rank).over(log.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing))
    winners = filled.withColumn("_best", best).where((F.col("version").isNotNull()) & (rank == F.col("_best")))
    return winners.select(*[F.col(c) if c in key_columns or c in order else F.col("_row")[c].alias(c)
                            for c in projected.columns])


def mysql_key_columns(sink: MySqlSinkConfig) -> list[str]:
    index = {c.name: i for i, c in enumerate(sink.columns)}
    return [f"c_{index[k]}" for k in sink.primary_key]


def project_for_elasticsearch(changes: DataFrame, sink: ElasticsearchSinkConfig) -> DataFrame:
    """Valid changes -> RAW_COLUMNS + change_op, version, c_0 (index), c_1 (document id), c_2 (the
    document as JSON text) and error_message. Tombstones follow behavior_on_null_values."""
    tombstone = F.col("value").isNull()
    if sink.behavior_on_null_values == "ignore" or sink.key_ignore:
        changes = changes.where(~tombstone)
    if sink.key_ignore:  # no stable id: every change is its own document, deletes have no target
        changes = changes.where(F.col("change_op") == "upsert")
        doc_id = F.concat_ws("+", "topic", "partition", "offset")
        missing = F.lit(None).cast("string")
    else:
        parts = [F.col("image")[f] for f in sink.id_fields]
        doc_id = F.concat_ws("+", *parts)
        missing = F.concat_ws("; ", *[F.when(p.isNull(), F.lit(f"document id field '{f}' is missing or null"))
                                      for p, f in zip(parts, sink.id_fields, strict=True)])
    pieces = sink.index.split("{topic}")
    index: Column = F.lit(pieces[0])
    for piece in pieces[1:]:
        index = F.concat(index, F.lower(F.col("route")), F.lit(piece))
    errors = [F.when(missing != "", missing)]
    if sink.behavior_on_null_values == "fail":
        errors.append(F.when(tombstone, F.lit("null value (tombstone) with behavior_on_null_values: fail")))
    message = F.concat_ws("; ", *errors)
    return changes.select(*RAW_COLUMNS, "change_op", "version", index.alias("c_0"), doc_id.alias("c_1"),
                          F.col("image_json").alias("c_2"), F.when(message != "", message).alias("error_message"))
