"""SMT chains on the per-partition path: the transforms as Arrow over the decoded changes (issue 25).

The older path infers each topic's schema in the JVM and applies a chain as Spark expressions
(spark_jobs/transforms.py): 150 of an SMT window's 160 CPU-seconds went to that JSON inference and
parse. Here the read task decodes the Debezium envelopes into typed row images (connectors/images.py),
as the default path does, and the chain rewrites those images in the worker, before the projection.

:func:`unserved` says why a pipeline's chain cannot run here (None: it can); spark_jobs/prepare.py
sends the others to the older path. Served: a Debezium chain with an ExtractNewRecordState
(spark_jobs/row_unwrap.py: every ``delete_handling``, rewrite making a delete event its ``before``
image with ``__deleted`` "true", an upsert of that row; every ``add_fields``: op, table, db, ts_ms,
lsn, connector, source.ts_ms), anywhere in the chain: before it the steps on the record (RegexRouter,
TimestampRouter, Filter, TombstoneHandler, SetSchemaMetadata, Drop, ExtractTopic on the key), which
see the record with its envelope (a RecordIsTombstone there is a Kafka tombstone, not a delete
event; cdcflow/config.py refuses a step on the value's fields there: it would act on the envelope,
transform_config.envelope_problem), and after it Cast, ReplaceField, TimestampConverter, MaskField,
InsertField, RegexRouter (any Java replacement: ``$10``, ``${name}``), Filter and TombstoneHandler on
the value, and the steps on the whole record of spark_jobs/row_steps.py (Drop and ExtractTopic on the
value or the key, SetSchemaMetadata, TimestampRouter, and ValueToKey into tables of declared
columns), with the predicates TopicNameMatches, RecordIsTombstone and HasHeaderKey (regexes RE2 reads
as Java does; Java datetime patterns as spark_jobs/row_patterns.py lists them), into MySQL tables of
declared columns, or created from the record schema (the json_schema and registry converters: the row schema
rewritten as the images are, :func:`described`; the exactly-once sink's too), and Elasticsearch
indices. A chain without ExtractNewRecordState reads Kafka Connect's record model
(:func:`record_model`): the decode reads each value, json or json_schema, as the row
(connectors/debezium/envelope.Decoder ``rows``; a registry converter's transcoded: json_schema), typed by
its Connect schema, or the string
converter's text, or the bytes converter's bytes (as base64, the text a row image holds binary data
in). Flatten, HoistField and ExtractField (spark_jobs/row_nested.py) work on nested values, which the
decode keeps whole for a chain that has one of them (elsewhere it reads a struct into its JSON text).
Tables from the record schema of records without one, and behind Flatten, ExtractField or
HoistField, get the schema inferred from the images after the chain (spark_jobs/row_schemas.py).
SqlExpression, Python and Sql predicates run in Spark between these steps (spark_jobs/spark_stage.py).
Still on the older path: the other steps on the key, and the Java patterns row_patterns.REFUSED
names. The transforms act as those of the
older path do (tests/integration/spark_jobs/test_row_transforms.py runs both on the same records and
compares the rows read back), with these differences, which docs/transforms.md lists:

* a delete's row image (its ``before`` image, or a tombstone's key) goes through the chain too, so a
  renamed key field still finds its row (the older path deletes by the Kafka key's field names); a
  value a step cannot convert never fails a delete; a Drop keeps the image of the delete it makes,
  ExtractTopic routes a delete by its image (the older path fails it: its value is null), and after
  a ValueToKey a delete still deletes its row (the older path's key of a null value is null: a dead
  letter);
* a value cast to ``string``, or made a topic by ExtractTopic, gets the value's MySQL text (a double
  1e10 is ``1e+10``, Spark's ``1.0E10``); a Cast of a date or time to a number is a dead letter
  naming TimestampConverter;
* TimestampConverter reads a text by ``format``, else as an ISO date or time, else a whole number's
  text as that number (the texts of the per-record decode; Spark's try_cast refuses the last two);
* a field the records lack is left alone, but fails each upsert of a ValueToKey (the older path: a
  config error when no record of the window has it);
* TimestampRouter reads ``topic_format`` as text and ``${topic}``, ``${timestamp}`` (the older path
  also reads a text between them that is exactly ``ts`` or ``topic`` as a placeholder); a day name
  (``E``) or number (``u``) in a pattern a text is read by is read, five ``E`` or ``M`` are the full
  name, and a year BC is read, as Kafka Connect's SimpleDateFormat does (Spark refuses them: the older
  path's window fails); a zone name (``z``) other than UTC's and GMT's fails its record (Spark reads
  PST, CET by the JVM's zone data);
* a delete whose key a Drop set to null fails with the Drop's words (the older path's: its primary
  key field is missing);
* a record a transform drops (Filter, a dropped delete or tombstone) is read and counted but changes
  nothing, as a Maxwell bootstrap-start does: the window's ends stay those of what was read;
* what the Debezium decode reads its own way stays so: a TRUNCATE (op t) follows ``truncate``, a
  row unwrapped upstream (``__deleted``, ``__op``) is read as such (its own ``__ts_ms``, ``__lsn``,
  ``__connector``, ``__source_ts_ms`` are what add_fields gives it);
* ``add_fields`` ts_ms and lsn are numbers (Debezium's int64; the older path makes lsn a text);
* a record-model row is read by its Connect schema (a Timestamp is a datetime, not its number), and
  a Connect string makes a LONGTEXT column (the older path's: TEXT);
* a table from records without a schema gets the types of their values after the chain
  (spark_jobs/row_schemas.py: integers and doubles a DOUBLE, where Spark's inference gave a decimal
  text; a field null throughout no column);
* an Elasticsearch document holds the decode's JSON of each field the chain left as it was, and the
  JSON of the new value of each it changed (spark_jobs/row_documents.py); the older path indexes the
  transformed Connect value (Decimal bytes as base64).

The chain sees typed images (spark_jobs/decode.py decodes every batch column-wise when there is a
chain): a record the column-wise decode cannot read is decoded alone with a few neighbours, whose
fields are then texts, as the older path's schema inference makes a field of mixed JSON types.

A record a transform cannot process gets stage ``transform`` and goes to the DLQ with the transform's
message; later transforms leave it as it is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connectors import images
from connectors.errors import ConfigError
from spark_jobs import row_documents, row_nested, row_steps, row_unwrap
from spark_jobs import transform_config as cfgs
from spark_jobs.row_changes import Rows, applies, fields_of, first_error, joined, struct_like
from spark_jobs.row_casts import CAST_TYPES, cast_values  # noqa: F401
# unserved, names_before, TIME_COLUMNS, CAST_TYPES and cast_values are read through this module too
from spark_jobs.row_chains import (  # noqa: F401
    SERVED_STEPS,
    TIME_COLUMNS,
    described,
    java_replacement,
    names_before,
    nested,
    numbered_groups,
    record_model,
    unserved,
)
from spark_jobs.row_timestamps import as_micros, timestamp_out

log = logging.getLogger(__name__)


# -- the steps -------------------------------------------------------------------------------------
def cast(rows: Rows, cfg: cfgs.Cast) -> None:
    def step(child: pa.StructArray, at: np.ndarray) -> tuple[pa.StructArray, pa.Array | None]:
        fields, errors = fields_of(child), []
        for name, kind in cfg.spec.items():
            if name not in fields:  # a field these records lack is left out, as a null one is
                continue
            source = fields[name].type
            fields[name], bad = cast_values(fields[name], kind)
            if bad is not None:
                temporal = pa.types.is_temporal(source) or pa.types.is_duration(source)
                why = (" is a date or time: TimestampConverter with target_type unix makes it a number"
                       if temporal else f" is not a valid {kind}")
                errors.append(pc.if_else(bad, pc.binary_join_element_wise(
                    f"Cast: value.{name} = '", images.text_of(_original(child, name)), f"'{why}", ""), None))
        return struct_like(fields, child), first_error(*errors)
    rows.map_images(step)


def _original(child: pa.StructArray, name: str) -> pa.Array:
    return child.field(child.type.get_field_index(name))


def replace_field(rows: Rows, cfg: cfgs.ReplaceField) -> None:
    def step(child: pa.StructArray, _at: np.ndarray) -> tuple[pa.StructArray, None]:
        fields = fields_of(child)
        kept = {cfg.renames.get(n, n): v for n, v in fields.items()
                if (not cfg.include or n in cfg.include) and n not in cfg.exclude}
        return struct_like(kept, child), None
    rows.map_images(step)


def timestamp_converter(rows: Rows, cfg: cfgs.TimestampConverter) -> None:
    def step(child: pa.StructArray, _at: np.ndarray) -> tuple[pa.StructArray, pa.Array | None]:
        fields = fields_of(child)
        if cfg.field not in fields:
            return child, None
        raw = fields[cfg.field]
        micros = as_micros(raw, cfg)
        fields[cfg.field] = timestamp_out(micros, cfg)
        bad = pc.and_(pc.is_valid(raw), pc.is_null(micros))
        shown = images.text_of(raw)
        error = pc.if_else(bad, pc.binary_join_element_wise(
            f"TimestampConverter: value.{cfg.field} = '", shown,
            f"' is not a timestamp{' in format ' + cfg.format if cfg.format else ''}", ""), None)
        return struct_like(fields, child), error
    rows.map_images(step)


def mask_field(rows: Rows, cfg: cfgs.MaskField) -> None:
    masked_where = applies(rows, cfg)

    def step(child: pa.StructArray, at: np.ndarray) -> tuple[pa.StructArray, None]:
        fields = fields_of(child)
        where = masked_where.take(pa.array(at))
        for name in cfg.fields:
            if name in fields:
                values = fields[name]
                masked = _mask_value(values.type, cfg.replacement)
                fields[name] = pc.if_else(pc.and_(where, pc.is_valid(values)), masked, values)
        return struct_like(fields, child), None
    rows.map_images(step)


def _mask_value(kind: pa.DataType, replacement: str | None) -> pa.Scalar:
    if replacement is not None:
        try:
            return pc.cast(pa.scalar(replacement), kind)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise ConfigError(f"MaskField: the replacement {replacement!r} is not a {kind} value") from None
    if pa.types.is_string(kind):
        return pa.scalar("", kind)
    if pa.types.is_boolean(kind):
        return pa.scalar(False)
    if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind):
        return pc.cast(pa.scalar(0), kind)
    return pa.scalar(None, kind)


def insert_field(rows: Rows, cfg: cfgs.InsertField) -> None:
    n = rows.table.num_rows
    added: dict[str, pa.Array] = {}
    if cfg.topic_field:
        added[cfg.topic_field] = rows.column("route")
    if cfg.partition_field:
        added[cfg.partition_field] = rows.column("partition")
    if cfg.offset_field:
        added[cfg.offset_field] = rows.column("offset")
    if cfg.timestamp_field:
        added[cfg.timestamp_field] = pc.cast(pc.multiply(rows.column("timestamp"), 1000), pa.timestamp("us"))
    if cfg.static_field:
        added[cfg.static_field] = pa.array([cfg.static_value] * n)
    rows.insert(added, pa.array(np.ones(n, bool)))


def regex_router(rows: Rows, cfg: cfgs.RegexRouter) -> None:
    """A topic the regex matches whole becomes the replacement, its groups (any number, by number or
    name) taken from the match as Java's Matcher takes them (a group that matched nothing: "")."""
    regex, names = numbered_groups(cfg.regex)
    pattern = f"^(?:{regex})$"
    route = rows.column("route")
    hit = pc.and_(applies(rows, cfg), pc.fill_null(pc.match_substring_regex(route, pattern), False))
    pieces = java_replacement(cfg.replacement, names)
    assert pieces is not None  # unserved() refused the others
    groups = pc.extract_regex(route, pattern) if names else None
    parts = [p if isinstance(p, str) else route if p == 0 else groups.field(f"_g{p}") for p in pieces]
    renamed = joined(parts, len(route))
    rows.set("route", pc.if_else(hit, renamed, route))


def filter_records(rows: Rows, cfg: cfgs.Filter) -> None:
    rows.drop(applies(rows, cfg))


def tombstone_handler(rows: Rows, cfg: cfgs.TombstoneHandler) -> None:
    tombstone = pc.and_(applies(rows, cfg), rows.tombstone())
    if cfg.behavior == "fail":
        rows.fail(tombstone, "TombstoneHandler: tombstone record (behavior fail)")
        return
    if cfg.behavior == "warn" and pc.any(pc.and_(rows.live, tombstone)).as_py():
        log.warning("TombstoneHandler: dropping tombstones (behavior warn)")
    rows.drop(tombstone)


STEPS: dict[str, Callable[[Rows, Any], None]] = {
    "Cast": cast, "ReplaceField": replace_field, "TimestampConverter": timestamp_converter, "MaskField": mask_field,
    "InsertField": insert_field, "RegexRouter": regex_router, "Filter": filter_records,
    "TombstoneHandler": tombstone_handler,
    # the steps on the whole record (spark_jobs/row_steps.py)
    "Drop": row_steps.drop, "SetSchemaMetadata": row_steps.set_schema_metadata,
    "TimestampRouter": row_steps.timestamp_router, "ExtractTopic": row_steps.extract_topic,
    "ValueToKey": row_steps.value_to_key,
    # the steps that take values apart or wrap them (spark_jobs/row_nested.py)
    "Flatten": row_nested.flatten, "ExtractField": row_nested.extract_field, "HoistField": row_nested.hoist_field,
}
assert set(STEPS) == SERVED_STEPS, "row_chains.SERVED_STEPS names the steps this module applies"


def apply(decoded: pa.Table, chain: Any, versioning: str, finish: bool = True, first: int = 0,
          when: pa.Array | None = None, documents: str = "kept") -> pa.Table:
    """A read task's decoded changes through the chain (:func:`unserved` said it is served); the row
    schemas (the tables created from them) rewritten to match (:func:`described`).

    Around a Spark stage (spark_jobs/spark_stage.py) the chain comes in parts: ``first`` is the
    chain index of the part's first step, ``when`` the Spark-evaluated Sql predicate of that step,
    and only the last part ``finish``es the changes (the key a Drop nulled, values that are not
    rows, the documents: ``documents`` "all" writes each from its typed values, as nothing of the
    decode's JSON is known to hold after a Spark step)."""
    rows = Rows(decoded, when=when, enveloped=any(cfg.type == "ExtractNewRecordState" for cfg in chain))
    if not decoded.num_rows:
        return decoded
    schemas = rows.column("row_schema")
    if schemas.null_count < len(schemas):
        texts = {t: described(chain, t) for t in pc.unique(schemas).drop_null().to_pylist()}
        rows.set("row_schema", pa.array([None if t is None else texts[t] for t in schemas.to_pylist()], pa.string()))
    for i, cfg in enumerate(chain, start=first):
        try:
            if cfg.type == "ExtractNewRecordState":
                row_unwrap.extract_new_record_state(rows, cfg, versioning)
            else:
                STEPS[cfg.type](rows, cfg)
        except ConfigError as exc:
            raise ConfigError(f"transforms.{i} ({cfg.type}): {exc}") from None
        rows.when = None  # the Sql predicate was the first step's
    if not finish:
        return rows.table
    row_steps.keyless_deletes(rows)
    row_nested.not_rows(rows)
    if documents == "all":
        return row_documents.rewritten(decoded, rows.table, None)
    return row_documents.rewritten(decoded, rows.table, chain)  # an index's documents, from the rewritten images
