"""The record's key on the per-partition path: the SMTs with ``target: key`` (Kafka Connect's ``$Key``
variants: the value's operation on the key, by the key's own schema), and the key the sinks see after
the chain (spark_jobs/transform/row_transforms.py applies the steps in the chain's order).

The key is a row image of its own (connectors/images.py), decoded from the Kafka key the first time a
step reads it (:func:`current`): a JSON object, or the payload of the JsonConverter's {schema, payload}
wrapper, is its fields (typed as the value's are: a schemaless JSON number an int64, a Connect int32
an int32 …); a key that is not an object (the ``string`` converter's text, the ``bytes`` converter's
bytes as base64, a JSON number) is an image of one field named ``""`` (row_nested.WHOLE), which a
HoistField makes a struct. After a ValueToKey the key is the value's fields; after a Drop of the key,
null. Every field step of the value runs on it as it runs on the value (:func:`on_key`): Cast,
ReplaceField, MaskField, InsertField, TimestampConverter, Flatten, ExtractField (a null or missing
field makes the key null; no tombstone: the value is untouched), HoistField. As on the value, a
step that cannot convert a key's field fails the upsert (stage transform, the step's words naming
``key.<field>``), never a delete.

What the sinks see (:func:`finished`): a chain with a step on the key's fields sets each change's
``key_image`` to the key as the chain left it, and a sink that keys its rows by the record key reads
its key fields there: MySQL ``pk_mode: record_key`` (its primary-key columns, upserts and deletes
alike: spark_jobs/tables.project_rows) and Elasticsearch ``id_fields`` (spark_jobs/project/targets.py), a
field the key lacks from the row image as before. ``pk_mode: record_value`` keys rows by the value's
fields, and ``pk_mode: kafka`` by the record's coordinates, as Kafka Connect's JDBC sink does: a key
step changes neither. A table from the record schema takes the key's fields as the chain leaves
them as its primary key (chains.key_after: renamed, cast, added).
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connectors import images
from connectors.changes import JSON_DECODE, RecordError
from connectors.debezium.envelope import Decoder
from connectors.debezium.logical import BadValue, plain_text
from connectors.registry.decode import json_bytes
from spark_jobs import chains
from spark_jobs.transform import transform_config as cfgs
from spark_jobs.transform.row_changes import Rows, fields_of, struct_like
from spark_jobs.chains import KEY_FIELD_STEPS

WHOLE = ""  # row_nested.WHOLE: the one field of an image whose value is not a struct
FIELD_STEPS = frozenset(KEY_FIELD_STEPS)  # on the key they run on the key's image (:func:`on_key`)
_PLAIN = frozenset({"int8", "int16", "int32", "int64", "float32", "float64", "boolean"})


class _Wrapped(msgspec.Struct):
    schema: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    payload: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)


_WRAPPED = msgspec.json.Decoder(_Wrapped)
_BAD = (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeDecodeError)


def decoded(keys: pa.Array, converter: str) -> pa.Array:
    """The Kafka keys as row images (the module's docstring); a null key has none."""
    decoder = Decoder("kafka_offset")
    return images.from_texts([_key(decoder, k, converter) for k in keys.to_pylist()])


def _key(decoder: Decoder, key: bytes | None, converter: str) -> dict[str, Any] | None:
    if key is None:
        return None
    if converter == "bytes":
        return {WHOLE: base64.b64encode(key).decode("ascii")}
    if converter == "string":
        return {WHOLE: key.decode("utf-8", "replace")}
    try:
        wrapped = _WRAPPED.decode(key)
        schema, payload = (wrapped.schema, wrapped.payload) if len(wrapped.payload) and len(wrapped.schema) else (
            None, key)
    except _BAD:
        schema, payload = None, key
    try:
        row = JSON_DECODE.decode(payload)
    except _BAD:  # not JSON: its text
        return {WHOLE: key.decode("utf-8", "replace")}
    if row is None:
        return None
    if not isinstance(row, dict):
        return {WHOLE: row if type(row) in (int, bool, Decimal) else plain_text(row)}
    reader = decoder.reader(schema, "")
    try:
        texts, docs = reader.read(row)
    except (RecordError, BadValue):  # a key its schema does not read: its fields' texts
        return {n: plain_text(v) for n, v in row.items()}
    plain = ({n for n, s in reader.schema.fields if s.name is None and s.type in _PLAIN} if reader.schema is not None
             else {n for n in docs if n not in reader.converters})
    return {n: docs[n] if n in plain and type(docs[n]) in (int, bool, Decimal) else t for n, t in texts.items()}


def current(rows: Rows) -> pa.Array:
    """The key image as the chain has left it so far (decoded from the Kafka key the first time)."""
    if rows.keys is None:
        if rows.key_from is not None:  # a ValueToKey's: the value's fields
            image, names = rows.key_from
            rows.keys = _projected(image, names)
        else:
            rows.keys = decoded(json_bytes(rows.table, "key"), rows.key_converter)  # a registry's: transcoded
    if rows.keyless is not None and pc.any(rows.keyless).as_py():  # a Drop of the key: no key
        rows.keys = _nulled(rows.keys, rows.keyless)
    return rows.keys


def on_key(rows: Rows, cfg: Any, step: Callable[[Rows, Any], None]) -> None:
    """A value's field ``step`` run on the key: over the rows with the key image in place of the row
    image; the key image it leaves, and what it failed, kept."""
    image = rows.column("image")
    rows.set("image", current(rows))
    try:
        step(rows, cfg)
    finally:
        rows.keys = rows.column("image")
        rows.set("image", image)


def extract_field(rows: Rows, cfg: cfgs.ExtractField) -> None:
    """ExtractField on the key (over the key image, :func:`on_key`): the key becomes its field's value
    (a struct's fields, else a value of its own); a missing or null field makes the key null."""
    def step(child: pa.StructArray, _at: np.ndarray) -> tuple[pa.StructArray, None]:
        fields = fields_of(child)
        if cfg.field not in fields:
            return pa.array([None] * len(child), pa.struct([])), None
        values = fields[cfg.field]
        null = pc.or_(child.is_null(), values.is_null())
        if pa.types.is_struct(values.type):
            return pa.StructArray.from_arrays(values.flatten(), names=values.type.names, mask=null), None
        return pa.StructArray.from_arrays([values], names=[WHOLE], mask=null), None
    rows.map_images(step)


def finished(rows: Rows, chain: Any) -> None:
    """After the chain: where it has a step on the key's fields, each change's ``key_image`` is the key
    it left, as exact texts (the sinks that key rows by the record key read it: the module's docstring)."""
    if chains.keyed(chain) or rows.key_stepped:
        rows.set("key_image", images.as_map(current(rows)))


# Across a Spark stage (spark_jobs/transform/spark_stage.py): the key the steps before it left rides in
# ``key_image`` (typed, as a decoded key), flagged in this column: 1 carried, +2 dropped (a Drop of the
# key), +4 a step on the key's fields made it (the sinks then key rows by it: :func:`finished`).
CARRIED = "key_carried"


def hand_on(rows: Rows, chain: Any) -> None:
    """Before a Spark step (the chain's part ends unfinished): the key as the steps so far left it (a
    ValueToKey's fields, a Drop, a step on its fields), for the part after the stage (:func:`resumed`)."""
    if rows.key_from is None and rows.keyless is None and rows.keys is None and not rows.key_stepped:
        return
    n = rows.table.num_rows
    dropped = pc.fill_null(rows.keyless, False) if rows.keyless is not None else pa.array(np.zeros(n, bool))
    stepped = 4 if chains.keyed(chain) or rows.key_stepped else 0
    flags = pc.cast(pc.add(pc.if_else(dropped, 3, 1), stepped), pa.int8())
    rows.set("key_image", current(rows))
    if CARRIED in rows.table.column_names:
        rows.set(CARRIED, flags)
    else:
        rows.table = rows.table.append_column(CARRIED, flags)


def resumed(rows: Rows) -> None:
    """After a Spark stage: the key the part before it handed on (:func:`hand_on`), as the key so far."""
    if CARRIED not in rows.table.column_names:
        return
    flags = pc.fill_null(rows.column(CARRIED), 1)
    rows.table = rows.table.drop_columns([CARRIED])
    if not rows.table.num_rows:
        return
    rows.keys = rows.column("key_image")
    dropped = pc.not_equal(pc.bit_wise_and(flags, 2), 0)
    rows.keyless = dropped if pc.any(dropped).as_py() else None
    rows.key_stepped = pc.any(pc.not_equal(pc.bit_wise_and(flags, 4), 0)).as_py()


def _projected(image: pa.Array, names: tuple[str, ...]) -> pa.Array:
    """The images' fields ``names`` (a field a row lacks: null), as images of their own."""
    def step(child: pa.StructArray, _at: np.ndarray) -> pa.StructArray:
        fields = fields_of(child)
        return struct_like({n: fields[n] if n in fields else pa.nulls(len(child), pa.string()) for n in names}, child)
    return _mapped(image, step)


def _nulled(keys: pa.Array, where: pa.Array) -> pa.Array:
    """The key images, null where ``where`` holds."""
    null = pc.fill_null(where, False).to_numpy(zero_copy_only=False)

    def step(child: pa.StructArray, at: np.ndarray) -> pa.StructArray:
        mask = pc.or_(child.is_null(), pa.array(null[at])).to_numpy(zero_copy_only=False)
        if not child.type.num_fields:
            return pa.array([None if m else {} for m in mask], pa.struct([]))
        return pa.StructArray.from_arrays(child.flatten(), names=child.type.names, mask=pa.array(mask))
    return _mapped(keys, step)


def _mapped(image: pa.Array, step: Callable[[pa.StructArray, np.ndarray], pa.StructArray]) -> pa.Array:
    """``step(child, rows)`` over each child of an image (Rows.map_images, outside a chain)."""
    n = len(image)
    holder = Rows(pa.table({"image": image, **{c: pa.nulls(n, pa.string()) for c in (
        "change_op", "error_stage", "error_message")}}))
    holder.map_images(lambda child, at: (step(child, at), None))
    return holder.column("image")
