"""The record frame of the Spark stage (spark_jobs/transform/spark_stage.py), in Arrow: a task's changes as the
frame and back, and the frames of several tasks in one schema.

The record frame is what a Kafka Connect SMT sees: ``topic`` (the
route so far), ``partition``, ``offset``, ``timestamp``, ``headers``, ``key`` (the JSON key's
payload as a struct, or its text where no Spark step reads it) and ``value`` (the row, typed: a
Decimal is a decimal, a DATETIME a timestamp; null for a delete; before the chain's
ExtractNewRecordState, Debezium's envelope: spark_jobs/transform/envelope_frame.py). The columns
whose names start with ``_`` carry what the window needs afterwards (the record's coordinates and
key as read, its version, the delete's row): a ``Python`` function must keep them, and may add,
change or drop value fields and drop records. A change to ``key`` is not read back (use ValueToKey
before the stage); a ``value`` made null deletes the record's key (before the unwrap: is a tombstone). The value as read is not carried (``_value`` holds
``raw_values.OMITTED``, or null for a tombstone): it is most of a record, and only a dead letter
needs it, which reads it again (spark_jobs/raw_values.py).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connectors import images
from connectors.registry.config import REGISTRY_CONVERTERS
from connectors.registry.decode import JSON_COLUMNS, json_bytes
from spark_jobs.transform import transform_config as cfgs
from spark_jobs.raw_values import omitted

_FROM = {"topic": "route", "partition": "partition", "offset": "offset", "timestamp": "timestamp",
         "headers": "headers"}  # frame column <- change column
_KEY_DECODER = msgspec.json.Decoder()
# change columns the frame leaves out: the image is ``value``/``_deleted``, and the Connect schema no
# longer describes the value after a Spark step (from_frame)
_LEFT = ("image", "row_schema", "schema_id")
# a change column while the chain is before its ExtractNewRecordState: each value as Debezium's
# envelope (spark_jobs/transform/envelope_frame.py), the frame's ``value`` then
ENVELOPE = "envelope"


def _only(image: pa.Array, where: pa.Array) -> pa.Array:
    """The rows' images where ``where`` holds as one struct (:func:`images.as_struct`), null elsewhere."""
    where = pc.fill_null(where, False)
    if not pc.any(where).as_py():
        return pa.nulls(len(where), pa.struct([]))
    picked = images.as_struct(images.compact(image).filter(where))
    index = np.full(len(where), -1, np.int64)
    mask = np.asarray(where.to_numpy(zero_copy_only=False), bool)
    index[mask] = np.arange(int(mask.sum()))
    return picked.take(pa.array(index, mask=~mask))


class _Wrapped(msgspec.Struct):
    """A key of the JsonConverter with schemas: its payload (the schema is skipped, not built)."""

    payload: Any = msgspec.UNSET


_WRAPPED_DECODER = msgspec.json.Decoder(_Wrapped)


def key_values(raw: pa.Array, converter: str) -> pa.Array:
    """The Kafka keys as the frame's ``key``: a JSON key's payload (a struct where the keys agree),
    else its text. A registry converter's keys come transcoded (the JsonConverter's, with a schema)."""
    if converter not in ("json", "json_schema", *REGISTRY_CONVERTERS):
        return key_texts(raw)
    values = []
    for key in raw.to_pylist():
        try:
            value = None if key is None else _payload(key) if converter != "json" else _KEY_DECODER.decode(key)
        except msgspec.DecodeError:
            return key_texts(raw)
        values.append(value)
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return key_texts(raw)


def _payload(key: bytes) -> Any:
    """A json_schema key's payload (the key itself when it has none)."""
    try:
        wrapped = _WRAPPED_DECODER.decode(key)
    except msgspec.ValidationError:  # not an object
        return _KEY_DECODER.decode(key)
    return _KEY_DECODER.decode(key) if wrapped.payload is msgspec.UNSET else wrapped.payload


def key_texts(raw: pa.Array) -> pa.Array:
    """The Kafka keys' texts (bytes that are not UTF-8 with U+FFFD in place)."""
    try:
        return pc.cast(raw, pa.string())
    except pa.ArrowInvalid:
        return pa.array([None if b is None else b.decode("utf-8", "replace") for b in raw.to_pylist()], pa.string())


_KEY_WORD = re.compile(r"\bkey\b", re.IGNORECASE)


def reads_key(chain: Any) -> bool:
    """A Spark step of the chain may read the frame's ``key`` (a Python function may read anything):
    else the key goes as its text, not parsed."""
    for cfg in chain:
        texts = list(cfg.fields.values()) if isinstance(cfg, cfgs.SqlExpression) else []
        predicate = getattr(cfg, "predicate", None)
        texts += [predicate.condition] if isinstance(predicate, cfgs.SqlCondition) else []
        if cfg.type == "Python" or any(_KEY_WORD.search(t) for t in texts):
            return True
    return False


def to_frame(changes: pa.Table, key_converter: str, raw: bool = False, key: bool = True) -> pa.Table:
    """A task's changes as the record frame (the module's docstring). The values as read go along
    with ``raw`` (a later row step reads them: ``spark_stage.reads_values``), else ``OMITTED``
    stands for each (a dead letter reads it again); the key is parsed with ``key`` (:func:`reads_key`),
    else it goes as its text."""
    op = pc.fill_null(changes.column("change_op"), "")
    image = changes.column("image").combine_chunks()
    shown = {name: changes.column(source) for name, source in _FROM.items()}
    keys = json_bytes(changes, "key")  # a registry converter's: transcoded
    shown["key"] = key_values(keys, key_converter) if key else key_texts(keys)
    shown["value"] = _only(image, pc.equal(op, "upsert"))
    carried = {"_deleted": _only(image, pc.equal(op, "delete"))}
    if ENVELOPE in changes.column_names:  # the envelope, and every change's row as the decode read it
        shown["value"] = changes.column(ENVELOPE).combine_chunks()
        carried["_deleted"] = images.as_struct(image)
    for name in changes.column_names:
        if name in _LEFT or name in _FROM.values() or name == ENVELOPE:
            continue
        if name == JSON_COLUMNS["value"] and not raw:  # a registry converter's transcoded values: not needed
            continue
        if name == "value" and not raw:  # not combined first: the values as read are most of the changes
            carried["_value"] = omitted(changes.column(name)).combine_chunks()
            continue
        values = changes.column(name).combine_chunks()
        if pa.types.is_union(values.type):
            values = images.as_struct(values)
        elif pa.types.is_null(values.type):
            values = pa.nulls(len(values), pa.string())
        carried[f"_{name}"] = values
    return pa.table({**shown, **carried})


def from_frame(frame: pa.Table, unwrap: Callable[[dict[str, pa.Array], pa.Array, pa.Array], None] | None = None,
               ) -> pa.Table:
    """The record frame back as changes: ``image`` from ``value`` (an upsert) or ``_deleted`` (a
    delete); an upsert whose value a Spark step made null deletes its key's row. The record's Connect
    schema is dropped (a Spark step may have changed any field): an index mapped from the records
    maps the documents as they are. A frame of envelopes is read by ``unwrap(changes, value,
    _deleted)`` instead (spark_jobs/transform/envelope_frame.py)."""
    names = [n for n in frame.column_names if n.startswith("_") and n not in ("_when", "_deleted")]
    changes = {n[1:]: frame.column(n).combine_chunks() for n in names}
    for name, source in _FROM.items():
        changes[source] = frame.column(name).combine_chunks()
    value = frame.column("value").combine_chunks()
    if unwrap is not None:
        unwrap(changes, value, frame.column("_deleted").combine_chunks())
    else:
        _rows(changes, value, frame)
    if "key_image" in changes and pa.types.is_struct(changes["key_image"].type):
        changes["key_image"] = images.from_struct(changes["key_image"])
    for name in ("row_schema", "schema_id"):  # the Connect schema no longer describes the value
        changes[name] = pa.nulls(frame.num_rows, pa.string())
    return pa.table(changes)


def _rows(changes: dict[str, pa.Array], value: pa.Array, frame: pa.Table) -> None:
    """Each change's ``image``: its value, a delete's row; an upsert made null a delete of its key."""
    op = pc.fill_null(changes["change_op"], "")
    nulled = pc.and_(pc.equal(op, "upsert"), pc.is_null(value))
    if pc.any(nulled).as_py():
        changes["change_op"] = pc.if_else(nulled, "delete", changes["change_op"])
    deleting = pc.fill_null(pc.equal(changes["change_op"], "delete"), False)
    changes["image"] = _image(value, frame.column("_deleted").combine_chunks(), deleting,
                              frame.column("key").combine_chunks(), nulled)


def _image(value: pa.Array, deleted: pa.Array, deleting: pa.Array, key: pa.Array, nulled: pa.Array) -> pa.Array:
    """Each change's row image: its value, a delete's row, or (an upsert made null) its key's fields."""
    parts = [value, deleted]
    if pc.any(nulled).as_py() and pa.types.is_struct(key.type):
        parts.append(key)
    codes = np.where(np.asarray(deleting.to_numpy(zero_copy_only=False), bool), 1, 0).astype(np.int8)
    if len(parts) == 3:
        codes[np.asarray(pc.fill_null(nulled, False).to_numpy(zero_copy_only=False), bool)] = 2
    offsets = np.zeros(len(codes), np.int32)
    children = []
    for code, part in enumerate(parts):
        rows = np.flatnonzero(codes == code)
        offsets[rows] = np.arange(len(rows), dtype=np.int32)
        children.append(part.take(pa.array(rows)))
    return images.union(codes, offsets, children)


def schema_text(schema: pa.Schema) -> str:
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def merged(texts: list[str]) -> pa.Schema:
    """The frame's schema over every task's: a field's type where they agree, a number's widest, else
    text (:func:`images.as_struct`'s rule, applied again between tasks)."""
    schemas = [pa.ipc.read_schema(pa.py_buffer(base64.b64decode(t))) for t in texts]
    return pa.schema([pa.field(f.name, merged_type([s.field(f.name).type for s in schemas if f.name in s.names]))
                      for f in schemas[0]])


def merged_type(kinds: list[pa.DataType]) -> pa.DataType:
    """The type of values of ``kinds`` in one column: structs merged field by field, else
    :func:`images.common_type`."""
    structs = [k for k in kinds if pa.types.is_struct(k)]
    if structs and len(structs) == len([k for k in kinds if not pa.types.is_null(k)]):
        names = list(dict.fromkeys(f.name for k in structs for f in k))
        return pa.struct([pa.field(n, merged_type([k.field(n).type for k in structs if k.get_field_index(n) >= 0]))
                          for n in names])
    return images.common_type(kinds)


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """A task's frame in the merged schema: fields it lacks null, types widened or made texts."""
    return pa.table([conformed(table.column(f.name).combine_chunks(), f.type) if f.name in table.column_names
                     else pa.nulls(table.num_rows, f.type) for f in schema], schema=schema)


def conformed(values: pa.Array, kind: pa.DataType) -> pa.Array:
    """``values`` as ``kind`` (:func:`merged_type`'s): a struct's missing fields null, types widened or texts."""
    if values.type == kind:
        return values
    if pa.types.is_struct(kind) and pa.types.is_struct(values.type):
        fields = [conformed(values.field(f.name), f.type) if values.type.get_field_index(f.name) >= 0
                  else pa.nulls(len(values), f.type) for f in kind]
        mask = values.is_null() if values.null_count else None
        if not fields:
            return pa.array([None if mask is not None and mask[i].as_py() else {} for i in range(len(values))], kind)
        return pa.StructArray.from_arrays(fields, fields=list(kind), mask=mask)
    return images.as_type(values, kind)


# -- the carried columns kept out of the JVM -----------------------------------------------------------------
CARRIED = "_carried"  # an Arrow IPC stream of a blob's carried columns, on its first row (null on the others)
_AT = ("_carried_partition", "_carried_offset")  # each carried row's own, to check the rows met theirs
_STAR = re.compile(r"(^|[(,.])\s*\*")
_KEPT = ("value", "partition", "offset", "_when")  # in the JVM always: what the steps set, and each row's own


def apart(schema: pa.Schema, spark_steps: Any, condition: str | None) -> list[str]:
    """The columns a segment of ``SqlExpression`` steps (and its row step's ``Sql`` predicate,
    ``condition``) leaves as they are, and no expression names: all but ``value`` mostly. They skip
    the JVM (:func:`set_apart`, :func:`put_back`), which would turn each into its rows and back for
    nothing. A ``Python`` step may read, drop or reorder anything: its segment has every column in Spark."""
    if any(cfg.type != "SqlExpression" for cfg in spark_steps):
        return []
    texts = [t for cfg in spark_steps for t in cfg.fields.values()] + ([condition] if condition else [])
    if any(_STAR.search(t) for t in texts):  # struct(*), hash(*): every column, named or not
        return []
    return [n for n in schema.names if n not in _KEPT
            and not any(re.search(rf"(?<!\w){re.escape(n)}(?!\w)", t) for t in texts)]


def inside(schema: pa.Schema, outside: list[str]) -> pa.Schema:
    """The frame's schema in the JVM: without the columns set apart, with :data:`CARRIED` for them."""
    if not outside:
        return schema
    return pa.schema([f for f in schema if f.name not in outside] + [pa.field(CARRIED, pa.binary())])


def set_apart(table: pa.Table, outside: list[str]) -> pa.Table:
    """A blob's frame for the JVM: its ``outside`` columns (and each row's partition and offset) as
    one Arrow IPC stream on its first row."""
    if not outside:
        return table
    blob = np.full(table.num_rows, None, object)
    if table.num_rows:
        carried = table.select(outside).append_column(_AT[0], table.column("partition")).append_column(
            _AT[1], table.column("offset"))
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, carried.schema) as writer:
            writer.write_table(carried)
        blob[0] = sink.getvalue().to_pybytes()
    return table.drop_columns(outside).append_column(CARRIED, pa.array(blob, pa.binary()))


def put_back(frame: pa.Table, names: list[str]) -> pa.Table:
    """A task's frame after the Spark steps with the columns :func:`set_apart` kept out, by position
    (a segment of SqlExpression steps keeps every row, in its order), in the frame's order ``names``."""
    if CARRIED not in frame.column_names:
        return frame
    blobs = frame.column(CARRIED).drop_null().to_pylist()
    carried = pa.concat_tables([pa.ipc.open_stream(b).read_all() for b in blobs]) if blobs else None
    if carried is None or carried.num_rows != frame.num_rows or not all(
            pc.all(pc.equal(carried.column(a), frame.column(c))).as_py() for a, c in zip(_AT, ("partition", "offset"))):
        raise RuntimeError("the Spark stage's rows came back in another order than their carried columns")
    columns = {n: frame.column(n) for n in frame.column_names if n != CARRIED}
    columns.update((n, carried.column(n)) for n in carried.column_names if n not in _AT)
    return pa.table({n: columns[n] for n in [*names, *(n for n in columns if n not in names)] if n in columns})
