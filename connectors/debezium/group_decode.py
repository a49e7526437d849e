"""The change columns of one group of records read column-wise (connectors/debezium/columns.py
groups a batch's records by shape and calls :func:`decode_group` on each group).

A group's lines are read by Arrow's JSON reader under the group's read schema; its ops become
upserts, deletes and truncates, its versions come from ``source.ts_ms`` (or the envelope's ``ts_ms``)
or the offsets, and each used field of its row images becomes its image values (typed:
connectors/images.py) and, where a sink needs documents, its JSON in the documents, by the field's
converter (connectors/debezium/types.py). Kafka Connect's record model (a chain that does not start
with ExtractNewRecordState) reads each value as the row itself. Whatever this read cannot take
raises :class:`Unsupported`, and the group's records take the per-record decode.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connectors import images
from connectors.changes import JSON_ENCODE, TRUNCATE, VERSION_SHIFT
from connectors.debezium import binary_columns, typed
from connectors.debezium.arrow_read import Unsupported, read_lines
from connectors.debezium.types import (
    AS_TEXT,
    LOGICAL,
    STRUCT,
    UNSIGNED_BIGINT,
    ColumnHint,
    Converter,
    RowReader,
    fields_of,
)


class Decoder(Protocol):
    """What this decode needs of its decoder (connectors/debezium/envelope.Decoder, which calls it)."""

    versioning: str
    need_json: bool
    rows: str | None
    nested: bool
    fields: frozenset[str] | None
    hints: dict[str, ColumnHint]
    schemaless: RowReader

    def reader(self, schema: msgspec.Raw | None, field: str) -> RowReader: ...

    def describe(self, reader: RowReader, key: bytes | None) -> str | None: ...


_OPS = pa.array(["c", "r", "u", "d", "t"])
_CHANGE_OPS = pa.array(["upsert", "upsert", "upsert", "delete", TRUNCATE])


def _values(values: pa.Array, convert: Converter, documents: bool,
            nested: Mapping[str, ColumnHint] | None = None) -> tuple[pa.Array, pa.Array | None]:
    """A field's values as read -> its image values (typed: connectors/images.py) and (``documents``)
    its JSON in documents. With ``nested`` (a chain that takes structs apart: Flatten, ExtractField;
    the declared columns), a struct stays one, its fields read by their schema (:func:`_struct_values`),
    and a list stays one, as read."""
    structured = pa.types.is_struct(values.type) or pa.types.is_list(values.type)
    if nested is not None and structured and (convert is STRUCT or convert in AS_TEXT
                                              or fields_of(convert, nested) is not None):
        values = _struct_values(values, convert, nested)  # not a geometry's {wkb, srid}: its converter reads it
        return values, typed.json_of(values) if documents else None
    if convert in AS_TEXT and not pa.types.is_struct(values.type) and not pa.types.is_list(values.type):
        if not documents:
            return values, None
        if pa.types.is_string(values.type):
            return values, typed.json_strings(values)
        return values, images.text_of(values)  # numbers and booleans: their JSON is their text
    logical = LOGICAL.get(convert)
    if logical is not None:
        try:
            values_ = typed.typed(values, logical)
        except typed.OutOfRange as exc:
            raise Unsupported(str(exc)) from None
        if values_ is not None:
            return values_, typed.json_values(values_, logical) if documents else None
    column = None if documents else binary_columns.texts(values, convert)  # a geometry, a BIT: column-wise
    if column is not None:
        return column, None
    try:
        converted = [convert(v) for v in values.to_pylist()]
        texts = pa.array([t for t, _d in converted], pa.string())
    except Exception as exc:  # a value its converter refuses: the per-record decode says which record  # noqa: BLE001
        raise Unsupported(str(exc)) from None
    if not documents:
        return texts, None
    return texts, pa.array([None if d is None else JSON_ENCODE.encode(d).decode("utf-8") for _t, d in converted],
                           pa.string())


def _struct_values(values: pa.Array, convert: Converter, hints: Mapping[str, ColumnHint]) -> pa.Array:
    """A struct kept whole, each of its fields read as its Connect schema says (:func:`_values`, so a
    Decimal, a Date or a timestamp inside it is typed as at the top of a row); a struct without a
    schema, and a list, stay as read."""
    fields = fields_of(convert, hints)
    if not fields or not pa.types.is_struct(values.type):
        return values
    names = [f.name for f in values.type]
    children = [_child(values.field(i), fields.get(name), hints) for i, name in enumerate(names)]
    return pa.StructArray.from_arrays(children, names, mask=values.is_null() if values.null_count else None)


def _child(values: pa.Array, convert: Converter | None, hints: Mapping[str, ColumnHint]) -> pa.Array:
    if convert is None:
        return values
    if convert is UNSIGNED_BIGINT and pa.types.is_int64(values.type):  # Debezium's long of a BIGINT UNSIGNED
        return values.view(pa.uint64())  # a number in documents too, as the per-value converter gives it
    return _values(values, convert, False, hints)[0]


class Group:
    """The records of one shape, and how to read their rows (``infer``: fields beyond the read
    schema's are read too, each with the fallback converter)."""

    def __init__(self, rows: np.ndarray, lines: pa.Array, row_type: pa.StructType, converters: dict[str, Converter],
                 reader: RowReader | None, wrapped: bool, infer: bool = False, fallback: Converter | None = None,
                 loose: frozenset[str] = frozenset()) -> None:
        self.rows, self.lines, self.row_type, self.converters = rows, lines, row_type, converters
        self.reader, self.wrapped, self.infer, self.fallback = reader, wrapped, infer, fallback
        self.loose = loose  # fields of ``converters`` Arrow types over the group (not in ``row_type``)


def _structured(kind: pa.DataType) -> bool:
    return pa.types.is_struct(kind) or pa.types.is_list(kind)


def _fields(before: pa.DataType, after: pa.DataType, group: Group) -> dict[str, Converter]:
    """The row fields to read: the read schema's, and with ``infer`` those the records added (the
    before and after images must agree on them)."""
    if not group.infer:
        return group.converters
    # a field only one image has is null in the other (a delete whose before image holds the key alone,
    # first in its batch, must not send the whole batch to the per-record decode)
    extra = list(dict.fromkeys([f.name for f in after if f.name not in group.converters]
                               + [f.name for f in before if f.name not in group.converters]))
    if any(_structured(f.type) for image in (before, after) for f in image if f.name in extra or f.name in group.loose):
        raise Unsupported("fields beyond the first record's that are structured")
    assert group.fallback is not None
    return {**group.converters, **{name: group.fallback for name in extra}}


def _image_field(image: pa.StructArray, name: str, other: pa.StructArray) -> pa.Array:
    """Field ``name`` of a row image, or nulls of the other image's type where this one lacks it."""
    i = image.type.get_field_index(name)
    if i >= 0:
        return image.field(i)
    return pa.nulls(len(image), other.type.field(other.type.get_field_index(name)).type)


def decode_group(decoder: Decoder, batch: pa.RecordBatch, group: Group) -> list[pa.Array]:
    """The change columns (DECODED_FIELDS) of one group's records."""
    if decoder.rows:
        return _decode_rows(decoder, batch, group)
    table = read_lines(group.lines, group.row_type, not group.wrapped, group.infer)
    n = table.num_rows
    op = table.column("op").combine_chunks()
    which = pc.index_in(op, _OPS)
    if which.null_count:
        raise Unsupported("an unknown or missing op")
    change_op = _CHANGE_OPS.take(which)
    is_delete = pc.equal(op, "d")
    is_truncate = pc.equal(op, "t")
    before, after = table.column("before").combine_chunks(), table.column("after").combine_chunks()
    if pc.any(pc.and_(is_delete, pc.is_null(before))).as_py():
        raise Unsupported("a delete without its before image")
    if pc.any(pc.and_(pc.invert(pc.or_(is_delete, is_truncate)), pc.is_null(after))).as_py():
        raise Unsupported("an upsert without its after image")
    source = table.column("source").combine_chunks()
    source_db, source_table = source.field("db"), source.field("table")
    if pc.any(pc.and_(is_delete, pc.is_null(source_table))).as_py():
        raise Unsupported("a delete without source.table")  # the per-record decode names it by the topic
    offsets = batch.column("offset").take(pa.array(group.rows))
    if decoder.versioning == "kafka_offset":
        version = offsets
    else:
        ts = pc.coalesce(source.field("ts_ms"), table.column("ts_ms").combine_chunks())
        if ts.null_count:
            raise Unsupported("a change without its time")
        try:
            version = pc.add_checked(pc.multiply_checked(ts, VERSION_SHIFT), pc.bit_wise_and(offsets, VERSION_SHIFT - 1))
        except pa.ArrowInvalid as exc:
            raise Unsupported(str(exc)) from None
    names, fields, fragments = [], [], []
    row_fields = _fields(before.type, after.type, group)
    for name, convert in row_fields.items():
        try:
            values = pc.if_else(is_delete, _image_field(before, name, after), _image_field(after, name, before))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, KeyError) as exc:
            raise Unsupported(f"field {name!r} of two types: {exc}") from None
        value, fragment = _values(values, convert, decoder.need_json, decoder.hints if decoder.nested else None)
        names.append(name)
        fields.append(value)
        fragments.append(fragment)
    image = images.from_columns(names, fields, is_truncate)
    documents = typed.documents(names, fragments, is_truncate) if decoder.need_json else pa.nulls(n, pa.string())
    schema_id, row_schema = _schema_columns(decoder, batch, group, is_truncate)
    return [change_op, image, documents, version, pa.nulls(n, pa.string()),
            pa.nulls(n, pa.string()), batch.column("topic").take(pa.array(group.rows)), pa.nulls(n),
            source_db, source_table, schema_id, row_schema,
            pa.array(np.zeros(n, np.int32)), op]


def _schema_columns(decoder: Decoder, batch: pa.RecordBatch, group: Group,
                    no_row: pa.Array) -> tuple[pa.Array, pa.Array]:
    """The group's schema_id, and its row_schema on its first change (``no_row``: the changes without
    a row, a TRUNCATE), once per schema and task, as the per-record decode does."""
    n = len(no_row)
    schema_id = row_schema = pa.nulls(n, pa.string())
    reader = group.reader
    if reader is not None and reader.schema_id is not None:
        schema_id = pc.if_else(no_row, None, pa.array([reader.schema_id] * n, pa.string()))
        first = pc.index(pc.invert(no_row), True).as_py()
        key = batch.column("key")[int(group.rows[first])].as_py() if first >= 0 else None
        described = decoder.describe(reader, key) if first >= 0 else None
        if described is not None:
            row_schema = pa.array([described, None], pa.string()).take(pa.array((np.arange(n) != first).astype(np.int8)))
    return schema_id, row_schema


def _decode_rows(decoder: Decoder, batch: pa.RecordBatch, group: Group) -> list[pa.Array]:
    """The change columns of one group of Kafka Connect's record model (``decoder.rows``): each value
    (or payload) a row, an upsert versioned by its offset."""
    if decoder.versioning != "kafka_offset":
        raise Unsupported("a row without a time")  # the per-record decode says so, per record
    table = read_lines(group.lines, group.row_type, False, group.infer, rows=True)
    n = table.num_rows
    converters = dict(group.converters)
    if group.infer:
        extra = [f for f in table.schema if f.name not in converters]
        if not decoder.nested and any(_structured(f.type) for f in table.schema if f in extra or f.name in group.loose):
            raise Unsupported("fields beyond the first record's that are structured")
        converters.update({f.name: group.fallback for f in extra})  # type: ignore[misc]
    names, fields, fragments = [], [], []
    for name, convert in converters.items():
        value, fragment = _values(table.column(name).combine_chunks(), convert, decoder.need_json,
                                   decoder.hints if decoder.nested else None)
        names.append(name)
        fields.append(value)
        fragments.append(fragment)
    none = pa.array(np.zeros(n, bool))
    documents = typed.documents(names, fragments, none) if decoder.need_json else pa.nulls(n, pa.string())
    schema_id, row_schema = _schema_columns(decoder, batch, group, none)
    return [pa.array(["upsert"] * n, pa.string()), images.from_columns(names, fields, none), documents,
            batch.column("offset").take(pa.array(group.rows)), pa.nulls(n, pa.string()), pa.nulls(n, pa.string()),
            batch.column("topic").take(pa.array(group.rows)), pa.nulls(n), pa.nulls(n, pa.string()),
            pa.nulls(n, pa.string()), schema_id, row_schema, pa.array(np.zeros(n, np.int32)), pa.nulls(n, pa.string())]
