"""Pure DataFrame functions on the decoded change frame (connectors/debezium/envelope.py decodes
the envelopes in the read task): ``project_for_sink`` maps a row image to a sink's columns and
types; ``latest_per_key`` keeps the last change per key. All are Spark column expressions: no
Python runs per row.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from connectors.elasticsearch.config import ElasticsearchSinkConfig
from connectors.mysql.config import KAFKA_PK_COLUMNS, MySqlSinkConfig
from connectors.mysql.types import parse_type
from spark_jobs.tables import (
    BASE64_TEXT,
    DECLARE_BINARY_ENCODING,
    DECLARE_DECIMAL_ENCODING,
    DECLARE_TIME_ENCODING,
    EPOCH_NUMBER,
    RAW_COLUMNS,
)


def _typed(raw: Column, sql_type: str) -> Column:
    """A row image's text (connectors/debezium/types.py: exact, canonical) as the value a MySQL column
    of ``sql_type`` is given; null where it does not fit (the record goes to the DLQ). Types Spark
    cannot check (TIME, YEAR, ENUM, SET, JSON, text, DECIMAL wider than 38 digits) go as text and
    MySQL checks them, in strict mode."""
    t = parse_type(sql_type)
    if t.base in ("DATETIME", "TIMESTAMP"):  # ISO strings (to_json) -> MySQL's format
        ts = raw.try_cast("timestamp")
        # a bare number that is not one of MySQL's own numeric forms (YYMMDD, YYYYMMDD, YYMMDDhhmmss,
        # YYYYMMDDhhmmss) is epoch time without its declared encoding: refused here, with what to declare
        epoch = raw.rlike("^-?[0-9]+$") & ~F.length(raw).isin(6, 8, 12, 14)
        return F.when(epoch, F.lit(None).cast("string")).when(
            ts.isNotNull(), F.date_format(ts, "yyyy-MM-dd HH:mm:ss.SSSSSS")).otherwise(raw)
    if t.base == "TIME":  # MySQL reads up to 7 digits as [H]HHMMSS; more is time since midnight in ms/µs/ns
        return F.when(raw.rlike("^-?[0-9]{8,}$"), F.lit(None).cast("string")).otherwise(raw)
    if t.is_binary or t.is_spatial:  # base64 in the image; spatial: MySQL's internal form (SRID + WKB)
        return F.try_to_binary(raw, F.lit("base64"))
    if t.base == "BIT":  # the bits as big-endian bytes: a quoted number would be stored as its characters
        bits = t.args[0] if t.args else 1
        digits = -(-bits // 8) * 2
        unsigned = F.coalesce(raw.try_cast("decimal(20,0)"), F.when(F.lower(raw) == "true", F.lit(1)).when(
            F.lower(raw) == "false", F.lit(0)).cast("decimal(20,0)"))  # BIT(1) from a Connect boolean
        return F.when(unsigned.between(0, (1 << bits) - 1),
                      F.unhex(F.lpad(F.conv(unsigned.cast("string"), 10, 16), digits, "0")))
    if t.is_integer:
        spark_type = "decimal(20,0)" if t.unsigned and t.base == "BIGINT" else "bigint"
        boolean = F.when(F.lower(raw) == "true", F.lit(1)).when(F.lower(raw) == "false", F.lit(0))  # JSON booleans
        return F.coalesce(raw.try_cast(spark_type), boolean.cast(spark_type))
    if t.base in ("FLOAT", "DOUBLE"):
        return raw.try_cast("double")
    if t.base == "DECIMAL" and t.precision <= 38:
        return raw.try_cast(f"decimal({t.precision},{t.scale})")
    return raw


def _what_to_declare(raw: Column, sql_type: str) -> Column:
    """For the columns whose values a stream without schemas can write in several forms: what the
    column's ``encoding`` must say, when the value that did not fit looks like one of those forms
    (the texts are spark_jobs/tables.py's, which checks the same in Arrow)."""
    t = parse_type(sql_type)
    if t.base in ("DATETIME", "TIMESTAMP", "TIME"):
        return F.when(raw.rlike(EPOCH_NUMBER), F.lit(DECLARE_TIME_ENCODING)).otherwise(F.lit(""))
    if t.base == "DECIMAL":
        return F.when(raw.rlike(BASE64_TEXT) & (F.length(raw) % 4 == 0),
                      F.lit(DECLARE_DECIMAL_ENCODING)).otherwise(F.lit(""))
    if t.is_binary:
        return F.lit(DECLARE_BINARY_ENCODING)
    return F.lit("")


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
    base = [*RAW_COLUMNS, "route", "change_op", "version", "row_index"]
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
                                             F.lit(f"' is not a valid {col.type}"), _what_to_declare(raw, col.type))))
    message = F.concat_ws("; ", *errors)
    cs = [f"c_{i}" for i in range(len(sink.columns))]
    checked = typed.select(*base, *cs, message.alias("_message"))
    return checked.select(*base, *cs, F.when(F.col("_message") != "", F.col("_message")).alias("error_message"))


def latest_per_key(projected: DataFrame, key_columns: list[str], keep_unfit: bool = False) -> DataFrame:
    """The last change per key, by version and then offset (the log order), then ``row_index`` (the
    order of the changes of one record, connectors/changes.py).

    The window functions see the key, the log position and the version only; every other column
    rides along in one struct, so the plan's size does not grow with the table's width. With
    ``keep_unfit``, rows whose values do not fit (error_message set) never win their key but are all
    kept, for the writer to send to the DLQ (``spark_jobs.write.reports_own_errors``)."""
    keys = [F.col(c) for c in key_columns]
    if "row_index" not in projected.columns:
        projected = projected.withColumn("row_index", F.lit(0))
    order = ["partition", "offset", "row_index", "version"]
    rest = [c for c in projected.columns if c not in key_columns and c not in order]
    fit = F.col("error_message").isNull() if keep_unfit else F.lit(True)
    packed = projected.select(*key_columns, *order, fit.alias("_fit"), (F.col("change_op") == "delete").alias("_delete"),
                              F.struct(*rest).alias("_row"))
    # One shuffle and one sort, by key then log order; both window functions below use that order
    # (a second ordering by version would sort the window's rows again).
    log = Window.partitionBy(*keys).orderBy("partition", "offset", "row_index")
    # Tombstones (version null) delete at the version of the previous change of their key in the
    # window; one whose delete was in an earlier window has nothing left to do and is dropped.
    before = log.rowsBetween(Window.unboundedPreceding, -1)
    # a delete beats its own tombstone (their one version): it has the before image (tables.latest_rows)
    after_delete = F.col("version").isNull() & F.coalesce(F.last(F.when(
        F.col("version").isNotNull(), F.col("_delete")), ignorenulls=True).over(before), F.lit(False))
    filled = packed.withColumn("_kept", ~after_delete).withColumn(
        "version", F.coalesce(F.col("version"), F.last("version", ignorenulls=True).over(before)))
    # the winner: a fitting change first, then highest version, a delete over its tombstone, offset,
    # partition, row_index (a null version sorts lowest)
    rank = F.struct("_fit", "version", "_kept", "offset", "partition", "row_index")
    best = F.max(rank).over(log.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing))
    winners = filled.withColumn("_best", best).where(
        (F.col("version").isNotNull() & (rank == F.col("_best")) & F.col("_fit")) | ~F.col("_fit"))
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
    return changes.select(*RAW_COLUMNS, "change_op", "version", "row_index", index.alias("c_0"), doc_id.alias("c_1"),
                          F.col("image_json").alias("c_2"), F.when(message != "", message).alias("error_message"))
