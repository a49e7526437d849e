"""SMT chains on the per-partition path: the transforms as Arrow over the decoded changes (issue 25).

The older path infers each topic's schema in the JVM and applies a chain as Spark expressions
(spark_jobs/transforms.py): 150 of an SMT window's 160 CPU-seconds went to that JSON inference and
parse. Here the read task decodes the Debezium envelopes into typed row images (connectors/images.py),
as the default path does, and the chain rewrites those images in the worker, before the projection.

:func:`unserved` says why a pipeline's chain cannot run here (None: it can); spark_jobs/prepare.py
sends the others to the older path. Served: a Debezium chain that starts with ExtractNewRecordState
(``delete_handling`` drop or none; ``add_fields`` table, db, and source.ts_ms with source_ts_ms
versioning), followed by Cast, ReplaceField, TimestampConverter, MaskField, InsertField, RegexRouter,
Filter and TombstoneHandler on the value, with the predicates TopicNameMatches, RecordIsTombstone and
HasHeaderKey (regexes RE2 reads as Java does; Java patterns of yyyy MM dd HH mm ss SSS), into MySQL
tables of declared columns, or created from the record schema (the json_schema converter: the row
schema rewritten as the images are, :func:`described`). The transforms act as those of the older path do (tests/integration/
spark_jobs/test_row_transforms.py runs both on the same records and compares the rows read back),
with these differences, which docs/transforms.md lists:

* a delete's row image (its ``before`` image, or a tombstone's key) goes through the chain too, so a
  renamed key field still finds its row (the older path deletes by the Kafka key's field names); a
  value a step cannot convert never fails a delete;
* a value cast to ``string`` gets the value's MySQL text (a double 1e10 is ``1e+10``, Spark's
  ``1.0E10``); a Cast of a date or time to a number is a dead letter naming TimestampConverter;
* TimestampConverter reads a text by ``format``, else as an ISO date or time, else a whole number's
  text as that number (the texts of the per-record decode; Spark's try_cast refuses the last two);
* a field the records lack is left alone (the older path: a config error when no record of the
  window has it);
* a record a transform drops (Filter, a dropped delete or tombstone) is read and counted but changes
  nothing, as a Maxwell bootstrap-start does: the window's ends stay those of what was read;
* what the Debezium decode reads its own way stays so: a TRUNCATE (op t) follows ``truncate``, a
  row unwrapped upstream (``__deleted``, ``__op``) is read as such.

The chain sees typed images (spark_jobs/decode.py decodes every batch column-wise when there is a
chain): a record the column-wise decode cannot read is decoded alone with a few neighbours, whose
fields are then texts, as the older path's schema inference makes a field of mixed JSON types.

A record a transform cannot process gets stage ``transform`` and goes to the DLQ with the transform's
message; later transforms leave it as it is.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connectors import images
from connectors.changes import VERSION_SHIFT
from connectors.errors import ConfigError
from spark_jobs import transform_config as cfgs
from spark_jobs.row_casts import CAST_TYPES, cast_values  # noqa: F401
# unserved, names_before, TIME_COLUMNS, CAST_TYPES and cast_values are read through this module too
from spark_jobs.row_chains import (  # noqa: F401
    SERVED_STEPS,
    TIME_COLUMNS,
    described,
    java_replacement,
    names_before,
    unserved,
)
from spark_jobs.row_timestamps import as_micros, timestamp_out

log = logging.getLogger(__name__)

_ADDED = {"table": "source_table", "db": "source_db"}


# -- the changes, child by child -----------------------------------------------------------------------
@dataclass
class Rows:
    """The decoded changes a step rewrites; ``live`` marks the changes a step may touch: read, with a
    row image, not failed, not dropped."""

    table: pa.Table

    def column(self, name: str) -> Any:
        return self.table.column(name).combine_chunks()

    def set(self, name: str, values: Any) -> None:
        i = self.table.schema.get_field_index(name)
        self.table = self.table.set_column(i, name, values)

    @property
    def live(self) -> pa.Array:
        op = pc.fill_null(self.column("change_op"), "")
        return pc.and_(pc.is_null(self.column("error_stage")), pc.and_(pc.not_equal(op, ""), pc.not_equal(op, "truncate")))

    def fail(self, where: pa.Array, message: Any) -> None:
        """Mark the live changes where ``where`` holds (stage transform, ``message``)."""
        hit = pc.fill_null(pc.and_(self.live, where), False)
        if not pc.any(hit).as_py():
            return
        self.set("error_message", pc.if_else(hit, message, self.column("error_message")))
        self.set("error_stage", pc.if_else(hit, "transform", self.column("error_stage")))

    def drop(self, where: pa.Array) -> None:
        """The live changes where ``where`` holds change nothing (read and counted, like a Maxwell
        bootstrap-start: the window's ends stay those of what was read)."""
        hit = pc.fill_null(pc.and_(self.live, where), False)
        if pc.any(hit).as_py():
            self.set("change_op", pc.if_else(hit, "", self.column("change_op")))

    def tombstone(self) -> pa.Array:
        """The changes whose value is null after ExtractNewRecordState: the deletes (a Kafka tombstone,
        or a delete event unwrapped with delete_handling none, as on the older path)."""
        return pc.or_(pc.is_null(self.column("value")), pc.equal(pc.fill_null(self.column("change_op"), ""), "delete"))

    def map_images(self, step: Callable[[pa.StructArray, np.ndarray], tuple[pa.StructArray, pa.Array | None]],
                   ) -> None:
        """``step(child, rows)`` per child of the image union (``rows``: the changes it holds, in order)
        gives the child rewritten and, per row of it, an error text (null: none) for the live ones."""
        image = images.compact(self.column("image"))
        if not pa.types.is_union(image.type) or not len(image):
            return
        codes = np.frombuffer(image.buffers()[1], np.int8)[image.offset:image.offset + len(image)]
        children, errors, order = [], [], []
        for code in range(image.type.num_fields):
            rows = np.flatnonzero(codes == code)
            child, error = step(image.field(code), rows)
            children.append(child)
            errors.append(error if error is not None else pa.nulls(len(rows), pa.string()))
            order.append(rows)
        offsets = np.zeros(len(image), np.int32)
        for rows in order:
            offsets[rows] = np.arange(len(rows), dtype=np.int32)
        self.set("image", images.union(codes, offsets, children))
        message = pa.concat_arrays(errors).take(pa.array(np.argsort(np.concatenate(order), kind="stable")))
        # a delete's image goes through the chain (its key fields renamed, cast) but never fails it: the
        # older path deletes by key whatever the row held
        self.fail(pc.and_(pc.is_valid(message), pc.equal(pc.fill_null(self.column("change_op"), ""), "upsert")),
                  message)


def _fields(child: pa.StructArray) -> dict[str, pa.Array]:
    return dict(zip(child.type.names, [child.field(i) for i in range(child.type.num_fields)], strict=True))


def _struct(fields: dict[str, pa.Array], like: pa.StructArray) -> pa.StructArray:
    mask = like.is_null() if like.null_count else None
    if not fields:
        return pa.array([None if mask is not None and mask[i].as_py() else {} for i in range(len(like))],
                        pa.struct([]))
    return pa.StructArray.from_arrays(list(fields.values()), names=list(fields), mask=mask)


def _joined(*errors: pa.Array | None) -> pa.Array | None:
    found = [e for e in errors if e is not None]
    if not found:
        return None
    message = found[0]
    for error in found[1:]:
        message = pc.coalesce(message, error)  # the first failing field names the record's error
    return message


# -- the steps -------------------------------------------------------------------------------------
def extract_new_record_state(rows: Rows, cfg: cfgs.ExtractNewRecordState, versioning: str) -> None:
    """The decode already unwrapped the envelope (connectors/debezium/envelope.py): a delete event
    is a delete of its ``before`` image, a tombstone a delete of its key. Here its options."""
    tombstone, op = pc.is_null(rows.column("value")), pc.fill_null(rows.column("change_op"), "")
    delete_event = pc.and_(pc.equal(op, "delete"), pc.invert(tombstone))
    if cfg.drop_tombstones:
        rows.drop(tombstone)
    if cfg.delete_handling == "drop":
        rows.drop(delete_event)
    added: dict[str, pa.Array] = {}
    for name in cfg.add_fields:
        if name == "source.ts_ms":
            version = rows.column("version")
            added["__source_ts_ms"] = (pc.shift_right(version, int(np.log2(VERSION_SHIFT)))
                                       if versioning == "source_ts_ms" else pa.nulls(len(version), pa.int64()))
        else:
            added["__" + name] = rows.column(_ADDED[name])
    if added:
        _insert(rows, added, pc.invert(tombstone))


def _insert(rows: Rows, added: dict[str, pa.Array], where: pa.Array) -> None:
    """Set fields (per change, aligned with the rows) on the images of the changes where ``where``."""
    where = pc.fill_null(where, False)

    def step(child: pa.StructArray, at: np.ndarray) -> tuple[pa.StructArray, None]:
        fields = _fields(child)
        index = pa.array(at)
        for name, values in added.items():
            new = values.take(index)
            old = fields.get(name)
            fields[name] = pc.if_else(where.take(index), new, old if old is not None and old.type == new.type
                                      else pa.nulls(len(new), new.type))
        return _struct(fields, child), None
    rows.map_images(step)


def cast(rows: Rows, cfg: cfgs.Cast) -> None:
    def step(child: pa.StructArray, at: np.ndarray) -> tuple[pa.StructArray, pa.Array | None]:
        fields, errors = _fields(child), []
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
        return _struct(fields, child), _joined(*errors)
    rows.map_images(step)


def _original(child: pa.StructArray, name: str) -> pa.Array:
    return child.field(child.type.get_field_index(name))


def replace_field(rows: Rows, cfg: cfgs.ReplaceField) -> None:
    def step(child: pa.StructArray, _at: np.ndarray) -> tuple[pa.StructArray, None]:
        fields = _fields(child)
        kept = {cfg.renames.get(n, n): v for n, v in fields.items()
                if (not cfg.include or n in cfg.include) and n not in cfg.exclude}
        return _struct(kept, child), None
    rows.map_images(step)


def timestamp_converter(rows: Rows, cfg: cfgs.TimestampConverter) -> None:
    def step(child: pa.StructArray, _at: np.ndarray) -> tuple[pa.StructArray, pa.Array | None]:
        fields = _fields(child)
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
        return _struct(fields, child), error
    rows.map_images(step)


def mask_field(rows: Rows, cfg: cfgs.MaskField) -> None:
    applies = _applies(rows, cfg)

    def step(child: pa.StructArray, at: np.ndarray) -> tuple[pa.StructArray, None]:
        fields = _fields(child)
        where = applies.take(pa.array(at))
        for name in cfg.fields:
            if name in fields:
                values = fields[name]
                masked = _mask_value(values.type, cfg.replacement)
                fields[name] = pc.if_else(pc.and_(where, pc.is_valid(values)), masked, values)
        return _struct(fields, child), None
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
    _insert(rows, added, pa.array(np.ones(n, bool)))


def regex_router(rows: Rows, cfg: cfgs.RegexRouter) -> None:
    pattern = f"^(?:{cfg.regex})$"
    route = rows.column("route")
    hit = pc.and_(_applies(rows, cfg), pc.fill_null(pc.match_substring_regex(route, pattern), False))
    rewrite = java_replacement(cfg.replacement, re.compile(cfg.regex).groups)
    assert rewrite is not None  # unserved() refused the others
    rows.set("route", pc.if_else(hit, pc.replace_substring_regex(route, pattern, rewrite), route))


def filter_records(rows: Rows, cfg: cfgs.Filter) -> None:
    rows.drop(_applies(rows, cfg))


def tombstone_handler(rows: Rows, cfg: cfgs.TombstoneHandler) -> None:
    tombstone = pc.and_(_applies(rows, cfg), rows.tombstone())
    if cfg.behavior == "fail":
        rows.fail(tombstone, "TombstoneHandler: tombstone record (behavior fail)")
        return
    if cfg.behavior == "warn" and pc.any(pc.and_(rows.live, tombstone)).as_py():
        log.warning("TombstoneHandler: dropping tombstones (behavior warn)")
    rows.drop(tombstone)


def _applies(rows: Rows, cfg: Any) -> pa.Array:
    """Per change, whether the transform applies (its predicate, negated or not)."""
    n = rows.table.num_rows
    pred = cfg.predicate
    if pred is None:
        return pa.array(np.ones(n, bool))
    if isinstance(pred, cfgs.TopicNameMatches):
        hit = pc.match_substring_regex(rows.column("route"), f"^(?:{pred.pattern})$")
    elif isinstance(pred, cfgs.RecordIsTombstone):
        hit = rows.tombstone()
    else:  # HasHeaderKey
        headers = rows.column("headers")
        keys = pc.list_flatten(headers).field("key")
        owners = pc.list_parent_indices(headers)
        found = np.zeros(n, bool)
        found[owners.filter(pc.fill_null(pc.equal(keys, pred.name), False)).to_numpy()] = True
        hit = pa.array(found)
    hit = pc.fill_null(hit, False)
    return pc.invert(hit) if cfg.negate else hit


STEPS: dict[str, Callable[[Rows, Any], None]] = {
    "Cast": cast, "ReplaceField": replace_field, "TimestampConverter": timestamp_converter, "MaskField": mask_field,
    "InsertField": insert_field, "RegexRouter": regex_router, "Filter": filter_records,
    "TombstoneHandler": tombstone_handler,
}
assert set(STEPS) == SERVED_STEPS, "row_chains.SERVED_STEPS names the steps this module applies"


def apply(decoded: pa.Table, chain: Any, versioning: str) -> pa.Table:
    """A read task's decoded changes through the chain (:func:`unserved` said it is served); the row
    schemas (the tables created from them) rewritten to match (:func:`described`)."""
    rows = Rows(decoded)
    if not decoded.num_rows:
        return decoded
    schemas = rows.column("row_schema")
    if schemas.null_count < len(schemas):
        texts = {t: described(chain, t) for t in pc.unique(schemas).drop_null().to_pylist()}
        rows.set("row_schema", pa.array([None if t is None else texts[t] for t in schemas.to_pylist()], pa.string()))
    for i, cfg in enumerate(chain):
        try:
            if cfg.type == "ExtractNewRecordState":
                extract_new_record_state(rows, cfg, versioning)
            else:
                STEPS[cfg.type](rows, cfg)
        except ConfigError as exc:
            raise ConfigError(f"transforms.{i} ({cfg.type}): {exc}") from None
    return rows.table
