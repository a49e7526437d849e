"""The SMTs of the per-partition path that act on a whole record, not on its fields: Drop,
SetSchemaMetadata, TimestampRouter, ExtractTopic and ValueToKey, Drop and ExtractTopic on the key as
well as the value (spark_jobs/transform/row_transforms.py applies them in the chain's order, with the steps
that rewrite fields). docs/transforms.md ("One semantics") says how:

* a Drop keeps the record's row image: the delete it makes finds its row as a delete event does;
* ExtractTopic routes a delete by its row image (its ``before`` image, a tombstone's key), so a
  delete reaches the table its row was written to, and takes a field's MySQL text, as Cast to
  ``string`` does;
* ValueToKey leaves a delete its row image, so it still deletes its row; a field the records lack
  fails each upsert;
* TimestampRouter reads ``topic_format`` as text and the two placeholders.

The key: ExtractTopic on the key reads the key's field as the chain left it (spark_jobs/transform/row_keys.py:
the Kafka key's, its {schema, payload} unwrapped; after a ValueToKey the value's). A Drop of the key
changes no upsert (the rows are keyed by their images), but a delete left without a key fails at the end of
the chain (:func:`keyless_deletes`).
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connectors import images
from spark_jobs.transform import row_keys, row_patterns
from spark_jobs.transform import transform_config as cfgs
from spark_jobs.transform.row_changes import Rows, applies, fields_of, first_error, joined

_PLACEHOLDERS = re.compile(r"(\$\{topic\}|\$\{timestamp\})")


def drop(rows: Rows, cfg: cfgs.Drop) -> None:
    """A value Drop makes the record a tombstone, which the sinks read as a delete of its key. The
    change keeps its row image, the image a delete finds its row by (as after an
    ExtractNewRecordState with delete_handling none); before an ExtractNewRecordState, a delete event
    becomes a tombstone too (``Rows.nulled``), which the unwrap drops with ``drop_tombstones``. A key
    Drop marks the changes keyless."""
    if cfg.target == "key":
        hit = pc.fill_null(applies(rows, cfg), False)
        rows.keyless = hit if rows.keyless is None else pc.or_(rows.keyless, hit)
        return
    dropped = pc.fill_null(pc.and_(rows.live, applies(rows, cfg)), False)
    rows.nulled = dropped if rows.nulled is None else pc.or_(rows.nulled, dropped)
    upsert = pc.equal(pc.fill_null(rows.column("change_op"), ""), "upsert")
    hit = pc.and_(dropped, upsert)
    if pc.any(hit).as_py():
        rows.set("change_op", pc.if_else(hit, "delete", rows.column("change_op")))


def set_schema_metadata(_rows: Rows, _cfg: cfgs.SetSchemaMetadata) -> None:
    """The schema's name and version change, not the rows. No sink reads them: nothing to do here."""


def timestamp_router(rows: Rows, cfg: cfgs.TimestampRouter) -> None:
    """The topic from ``topic_format``: ``${topic}`` the topic so far, ``${timestamp}`` the Kafka
    record's timestamp in ``timestamp_format`` (UTC, the Spark session's time zone and Kafka
    Connect's); a record without a timestamp gets no topic and fails (records.bad_route_reason)."""
    route = rows.column("route")
    millis = rows.column("timestamp")
    stamp = row_patterns.write(pc.cast(pc.multiply(millis, 1000), pa.timestamp("us")),
                               row_patterns.tokens(cfg.timestamp_format))
    pieces = [stamp if part == "${timestamp}" else route if part == "${topic}" else part
              for part in _PLACEHOLDERS.split(cfg.topic_format) if part]
    topic = joined(pieces, len(route))
    rows.set("route", pc.if_else(applies(rows, cfg), topic, route))


def extract_topic(rows: Rows, cfg: cfgs.ExtractTopic) -> None:
    """The topic becomes the field's value (its MySQL text); a change without it fails, or keeps its
    topic with ``skip_missing_or_null``. A delete is routed by its row image, as its upsert was (on
    the key: by its key as the chain left it, row_keys.current)."""
    image = row_keys.current(rows) if cfg.target == "key" else rows.column("image")
    value = images.Fields(image).texts(cfg.field)
    applied = applies(rows, cfg)
    moved = pc.and_(pc.and_(applied, rows.live), pc.is_valid(value))
    if not cfg.skip_missing_or_null:
        rows.fail(pc.and_(applied, pc.is_null(value)), f"ExtractTopic: {cfg.target}.{cfg.field} is missing or null "
                                                       "(set skip_missing_or_null to keep the topic)")
    rows.set("route", pc.if_else(moved, value, rows.column("route")))


def value_to_key(rows: Rows, cfg: cfgs.ValueToKey) -> None:
    """The key becomes the value's ``fields``. This path keys a table's rows by its key columns,
    read from the row image (pk_mode record_key too), and a table from the record schema takes these fields as
    its primary key (chains.key_after): so the key changes no row here, but a later step on the
    key reads these fields (a delete's from its row image). The check: an upsert whose field is null or missing
    fails, the first such field named."""
    rows.key_from, rows.keyless, rows.keys = (rows.column("image"), tuple(cfg.fields)), None, None

    def step(child: pa.StructArray, _at: np.ndarray) -> tuple[pa.StructArray, pa.Array | None]:
        fields = fields_of(child)
        errors = [pc.if_else(pc.is_null(fields[name]) if name in fields else pa.array(np.ones(len(child), bool)),
                             f"ValueToKey: value.{name} is null", pa.scalar(None, pa.string()))
                  for name in cfg.fields]
        return child, first_error(*errors)
    rows.map_images(step)


def keyless_deletes(rows: Rows) -> None:
    """After the chain: a delete whose key a Drop set to null fails (it has nothing to delete by); an
    upsert is written by its image."""
    if rows.keyless is None:
        return
    deletes = pc.equal(pc.fill_null(rows.column("change_op"), ""), "delete")
    rows.fail(pc.and_(rows.keyless, deletes), "Drop: the key is null (dropped), so this delete has no key to "
                                              "find its row by")
