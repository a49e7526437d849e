"""SMT chains as Arrow over the decoded changes, in the read task (issue 25; the one path, issue 43).

The read task decodes the records into typed row images (connectors/images.py) and the chain
rewrites those images in the Python worker, before the projection: no record reaches the JVM unless
the chain has a Spark step (transform/spark_stage.py runs SqlExpression, Python and Sql predicates
between these steps).

:func:`apply` runs the chain's steps in order. With an ExtractNewRecordState, anywhere in the chain
(transform/row_unwrap.py: every ``delete_handling`` and ``add_fields``), the steps before it act on
the record with its envelope (RegexRouter, TimestampRouter, Filter, TombstoneHandler,
SetSchemaMetadata, Drop, ExtractTopic on the key; a Sql predicate and Python in Spark, over the
envelope: transform/envelope_frame.py; a step on the value's fields there, SqlExpression too, is a
config error, transform_config.envelope_problem), and after it on the row: Cast, ReplaceField,
TimestampConverter, MaskField, InsertField (here), RegexRouter (Java's regexes and replacements,
transform/java_regex.py), Filter and TombstoneHandler, the steps on the whole record
(transform/row_steps.py: Drop, ExtractTopic, SetSchemaMetadata, TimestampRouter, ValueToKey),
Flatten, ExtractField and HoistField (transform/row_nested.py, on values the decode keeps whole),
and every step with ``target: key`` on the key (transform/row_keys.py). A chain without
ExtractNewRecordState on Debezium's topics reads Kafka Connect's record model (chains.record_model):
each value, json or json_schema, is the row, or the string converter's text, or the bytes converter's
bytes. On GoldenGate's, Canal's and Maxwell's topics the format's decoder reads the rows
(chains.format_rows), which the steps see as after an ExtractNewRecordState (``Rows.enveloped``
is false from the start).
What a chain makes of a table from the record schema: chains.described (transform/row_schemas.py
for records without a schema); of an Elasticsearch document: transform/row_documents.py. The one
semantics where an earlier second path differed is in docs/transforms.md ("One semantics").

The chain sees typed images (read/decode.py decodes every batch column-wise when there is a chain):
a record the column-wise decode cannot read is decoded alone with a few neighbours, whose fields
are then texts. GoldenGate's, Canal's and Maxwell's rows are typed as their producer says
(connectors/row_types.py).

A record a transform cannot process gets stage ``transform`` and goes to the DLQ with the transform's
message; later transforms leave it as it is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connectors import images
from connectors.errors import ConfigError
from connectors.registry.decode import JSON_COLUMNS
from spark_jobs.transform import java_regex, row_documents, row_keys, row_nested, row_steps, row_unwrap
from spark_jobs.transform import transform_config as cfgs
from spark_jobs.transform.row_changes import Rows, applies, fields_of, first_error, per_topic, struct_like
from spark_jobs.transform.row_casts import CAST_TYPES, cast_values  # noqa: F401
# unserved, names_before, TIME_COLUMNS, CAST_TYPES and cast_values are read through this module too
from spark_jobs.chains import (  # noqa: F401
    SERVED_STEPS,
    TIME_COLUMNS,
    described,
    keyed,
    names_before,
    nested,
    record_model,
    unserved,
)
from spark_jobs.transform.row_timestamps import as_micros, timestamp_out

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
                    f"Cast: {cfg.target}.{name} = '", images.text_of(_original(child, name)), f"'{why}", ""), None))
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
            f"TimestampConverter: {cfg.target}.{cfg.field} = '", shown,
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
    if pa.types.is_decimal(kind):  # a cast of int64's 0 needs 19 digits of precision
        return pa.scalar(Decimal(0), kind)
    if pa.types.is_integer(kind) or pa.types.is_floating(kind):
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
        added[cfg.static_field] = pa.repeat(pa.array([cfg.static_value])[0], n)
    rows.insert(added, pa.array(np.ones(n, bool)))


def undone(chain: list[Any], i: int) -> bool:
    """Step ``i`` is an InsertField whose every field the next step, a ReplaceField, drops (both on
    every record's value): it changes nothing, and is not made to (an insert fails no record)."""
    if i + 1 >= len(chain) or chain[i].type != "InsertField" or chain[i + 1].type != "ReplaceField":
        return False
    insert, replace = chain[i], chain[i + 1]
    if insert.target != "value" or replace.target != "value" or insert.predicate or replace.predicate:
        return False
    names = [insert.topic_field, insert.partition_field, insert.offset_field, insert.timestamp_field,
             insert.static_field]
    return all(n in replace.exclude or (replace.include and n not in replace.include)
               for n in names if n is not None) and not set(names) & set(replace.renames)


def regex_router(rows: Rows, cfg: cfgs.RegexRouter) -> None:
    """A topic the regex matches whole gets Java's ``replaceFirst`` of the replacement, its groups
    (any number, by number or name) taken as Java's Matcher takes them (a group that matched
    nothing: ""), once per distinct topic (spark_jobs/java_regex.routed)."""
    route = rows.column("route")
    renamed = per_topic(route, lambda topic: java_regex.routed(cfg.regex, cfg.replacement, topic), pa.string())
    hit = pc.and_(applies(rows, cfg), pc.is_valid(renamed))
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
    # the steps on the whole record (spark_jobs/transform/row_steps.py)
    "Drop": row_steps.drop, "SetSchemaMetadata": row_steps.set_schema_metadata,
    "TimestampRouter": row_steps.timestamp_router, "ExtractTopic": row_steps.extract_topic,
    "ValueToKey": row_steps.value_to_key,
    # the steps that take values apart or wrap them (spark_jobs/transform/row_nested.py)
    "Flatten": row_nested.flatten, "ExtractField": row_nested.extract_field, "HoistField": row_nested.hoist_field,
}
assert set(STEPS) == SERVED_STEPS, "chains.SERVED_STEPS names the steps this module applies"


def apply(decoded: pa.Table, chain: Any, versioning: str, finish: bool = True, first: int = 0,
          when: pa.Array | None = None, documents: str = "kept", key_converter: str = "json",
          enveloped: bool | None = None) -> pa.Table:
    """A read task's decoded changes through the chain (:func:`unserved` said it is served); the row
    schemas (the tables created from them) rewritten to match (:func:`described`).

    Around a Spark stage (spark_jobs/transform/spark_stage.py) the chain comes in parts: ``first`` is the
    chain index of the part's first step, ``when`` the Spark-evaluated Sql predicate of that step,
    and only the last part ``finish``es the changes (the key a Drop nulled, values that are not
    rows, the documents: ``documents`` "all" writes each from its typed values, as nothing of the
    decode's JSON is known to hold after a Spark step). ``key_converter`` reads the Kafka key for the
    steps on the key (spark_jobs/transform/row_keys.py). ``enveloped``: the part comes before the chain's
    ExtractNewRecordState (None: it has one), so its steps see the envelope; a value a Drop there set to
    null is handed on to the Spark stage as null (a tombstone, as the unwrap after it reads one)."""
    if enveloped is None:
        enveloped = any(cfg.type == "ExtractNewRecordState" for cfg in chain)
    rows = Rows(decoded, when=when, enveloped=enveloped, key_converter=key_converter)
    row_keys.resumed(rows)  # the key a part before a Spark stage left
    decoded = rows.table
    if not decoded.num_rows:
        return decoded if not (finish and (keyed(chain) or rows.key_stepped)) else decoded.set_column(
            decoded.schema.get_field_index("key_image"), "key_image", pa.nulls(0, images.STRING_MAP))
    schemas = rows.column("row_schema")
    if schemas.null_count < len(schemas):
        texts = {t: described(chain, t) for t in pc.unique(schemas).drop_null().to_pylist()}
        rows.set("row_schema", pa.array([None if t is None else texts[t] for t in schemas.to_pylist()], pa.string()))
    chain = list(chain)
    for i, cfg in enumerate(chain, start=first):
        try:
            if undone(chain, i - first):
                continue
            if cfg.type == "ExtractNewRecordState":
                row_unwrap.extract_new_record_state(rows, cfg, versioning)
            elif cfg.type in row_keys.FIELD_STEPS and cfg.target == "key":
                step = row_keys.extract_field if cfg.type == "ExtractField" else STEPS[cfg.type]
                row_keys.on_key(rows, cfg, step)
            else:
                STEPS[cfg.type](rows, cfg)
        except ConfigError as exc:
            raise ConfigError(f"transforms.{i} ({cfg.type}): {exc}") from None
        rows.when = None  # the Sql predicate was the first step's
    if not finish:
        row_keys.hand_on(rows, chain)  # the key across the Spark stage that follows
        if rows.enveloped and rows.nulled is not None:
            _nulled_values(rows)
        return rows.table
    row_steps.keyless_deletes(rows)
    row_keys.finished(rows, chain)
    row_nested.not_rows(rows)
    if documents == "all":
        return row_documents.rewritten(decoded, rows.table, None)
    return row_documents.rewritten(decoded, rows.table, chain)  # an index's documents, from the rewritten images


def _nulled_values(rows: Rows) -> None:
    """The values a Drop before the unwrap set to null (``Rows.nulled``), null in the changes: the
    Spark stage and the unwrap after it see a tombstone (spark_jobs/transform/envelope_frame.py)."""
    nulled = pc.fill_null(rows.nulled, False)
    for name in ("value", JSON_COLUMNS["value"]):
        if name in rows.table.column_names:
            values = rows.column(name)
            rows.set(name, pc.if_else(nulled, pa.scalar(None, values.type), values))
