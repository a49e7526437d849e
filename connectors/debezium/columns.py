"""Debezium envelopes decoded column-wise: each distinct row schema once, every record of it at once,
in Arrow (issue 21; the per-record decode, connectors/debezium/envelope.py, stays for the rest).

A batch's records are grouped by shape: the envelopes without the JsonConverter's wrapper (their
types come from the sinks' declared columns), and, per distinct ``schema``, the wrapped ones (their
payload is cut out of the value by the wrapper's byte prefix, so the schema is parsed once, not once
per record). Each group is parsed by Arrow's JSON reader into typed columns (int64, string, decimal,
struct …) under a read schema made from the Connect schema or the declared columns, and each used
field becomes its exact MySQL text: a cast where the text is the value's own (strings, integers,
booleans, decimals), the field's converter (connectors/debezium/types.py) per value for the logical
types (Decimal bytes, dates, times …).

Where a sink needs documents (Elasticsearch), each row's JSON document is made column-wise too:
strings escaped, numbers and booleans as they read, each logical type's document value by its
converter. Without a field list (no declared columns name every field a sink uses), a schemaless
group reads the first record's fields, and any other field the records have by its JSON type.

The reader is strict: a value of another JSON type than its column's, a duplicate field, a line that
is not one object, or a value a converter refuses fails the group, and its records take the
per-record decode, which says per record what is wrong (a dead letter) or reads the odd shape.
Tombstones, the unwrapped rows of ExtractNewRecordState, deletes without a ``before`` image and
records that are not a JSON object take it too. So the result is the per-record decode's, record for
record, except that a number's text is Arrow's (a DOUBLE's 19.90 is 19.9, a DECIMAL read from a JSON
number has its column's scale: the same value), and that a field a record lacks is null in its image
and document (the per-record decode leaves it out: the same row in MySQL and the same document in
Elasticsearch searches).
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any, Protocol

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connectors import images
from connectors.changes import DECODED_NAMES, JSON_DECODE, JSON_ENCODE, TRUNCATE, VERSION_SHIFT
from connectors.debezium import typed
from connectors.debezium.arrow_read import Unsupported, connect_type, declared_type, read_lines
from connectors.debezium.types import AS_TEXT, LOGICAL, STRUCT, ColumnHint, Converter, RowReader


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

WRAPPED = b'{"schema":'
MAX_GROUPS = 16  # schemas per batch read column-wise; a batch of more takes the per-record decode for the rest
_OPS = pa.array(["c", "r", "u", "d", "t"])
_CHANGE_OPS = pa.array(["upsert", "upsert", "upsert", "delete", TRUNCATE])


class _Wrapper(msgspec.Struct):
    schema: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    payload: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)


_WRAPPER = msgspec.json.Decoder(_Wrapper)



def _values(values: pa.Array, convert: Converter, documents: bool,
            nested: bool = False) -> tuple[pa.Array, pa.Array | None]:
    """A field's values as read -> its image values (typed: connectors/images.py) and (``documents``)
    its JSON in documents. With ``nested`` (a chain that takes structs apart: Flatten, ExtractField),
    a struct or a list stays one, its fields as read."""
    structured = pa.types.is_struct(values.type) or pa.types.is_list(values.type)
    if nested and structured and (convert is STRUCT or convert in AS_TEXT):  # not a geometry's {wkb, srid}
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
    try:
        converted = [convert(v) for v in values.to_pylist()]
        texts = pa.array([t for t, _d in converted], pa.string())
    except Exception as exc:  # a value its converter refuses: the per-record decode says which record  # noqa: BLE001
        raise Unsupported(str(exc)) from None
    if not documents:
        return texts, None
    return texts, pa.array([None if d is None else JSON_ENCODE.encode(d).decode("utf-8") for _t, d in converted],
                           pa.string())


class _Group:
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


def _fields(before: pa.DataType, after: pa.DataType, group: _Group) -> dict[str, Converter]:
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


def _decode_group(decoder: Decoder, batch: pa.RecordBatch, group: _Group) -> list[pa.Array]:
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
        value, fragment = _values(values, convert, decoder.need_json, decoder.nested)
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


def _schema_columns(decoder: Decoder, batch: pa.RecordBatch, group: _Group,
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


def _decode_rows(decoder: Decoder, batch: pa.RecordBatch, group: _Group) -> list[pa.Array]:
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
        value, fragment = _values(table.column(name).combine_chunks(), convert, decoder.need_json, decoder.nested)
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


# -- grouping ------------------------------------------------------------------------------------------
def _plain_group(decoder: Decoder, rows: np.ndarray, lines: pa.Array) -> _Group:
    """The envelopes without the wrapper: their fields are the sinks' (decoder.fields), read by the
    declared columns."""
    try:
        env = JSON_DECODE.decode(lines[0].as_py())
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        raise Unsupported("the first record is not an envelope") from None
    sample = env if decoder.rows else env.get("before" if env.get("op") == "d" else "after") if isinstance(
        env, dict) else None
    sample = sample if isinstance(sample, dict) else {}
    infer = decoder.fields is None  # every field: the first record's, and any other the records have
    names = list(sample) if infer else sorted(decoder.fields)  # type: ignore[arg-type]
    if decoder.rows and decoder.nested:  # objects, arrays (and nulls, which may be either): by their JSON types
        names = [n for n in names if not isinstance(sample.get(n), dict | list)
                 and (sample.get(n) is not None or n in decoder.hints)]  # a declared column keeps its type
    # with ``infer``, a field no column declares whose first value is a number or null is typed by Arrow
    # over the whole group: integers int64, with a fraction among them float64 (not the first value's type,
    # which would send a later 2.5 to the per-record decode)
    pinned = [n for n in names if not (infer and n not in decoder.hints and _open(sample.get(n)))]
    row_type = pa.struct([(n, declared_type(decoder.hints.get(n), sample.get(n))) for n in pinned])
    reader = decoder.schemaless
    return _Group(rows, lines, row_type, {n: reader.converters.get(n, reader.fallback) for n in names}, None, False,
                  infer, reader.fallback, frozenset(names) - set(pinned))


def _open(sample: Any) -> bool:
    """A first value whose type the group's other values may widen: a JSON number, or null."""
    return sample is None or isinstance(sample, int | Decimal | float) and not isinstance(sample, bool)


def _wrapper_prefix(first: bytes) -> tuple[bytes, msgspec.Raw] | None:
    """The bytes before the payload in a JsonConverter value ({"schema":…,"payload":), and its schema;
    None for a value of another layout."""
    try:
        top = _WRAPPER.decode(first)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeDecodeError):
        return None
    prefix = WRAPPED + bytes(top.schema) + b',"payload":'
    return (prefix, top.schema) if first.startswith(prefix) else None


def _wrapped_group(decoder: Decoder, rows: np.ndarray, payloads: pa.Array, closed: np.ndarray,
                   schema: msgspec.Raw) -> _Group:
    """The records of one schema, whose values start with its wrapper's prefix: ``payloads``, the
    batch's values with that prefix and the last byte cut off (``closed``: that byte is the
    wrapper's ``}``). The payloads are cut from the whole batch and then taken: a take of the
    values themselves would copy each schema again (~7 KB a record for a 33-column table)."""
    after = decoder.reader(schema, "" if decoder.rows else "after")  # compiled once per schema
    before = after if decoder.rows else decoder.reader(schema, "before")
    if after.schema is None or before.schema != after.schema:
        raise Unsupported("a schema without one row struct")
    if not closed[rows].all():
        raise Unsupported("a wrapper of another layout")
    used = [(n, s) for n, s in after.schema.fields if decoder.fields is None or n in decoder.fields]
    row_type = pa.struct([(n, connect_type(s)) for n, s in used])
    return _Group(rows, payloads.take(pa.array(rows)), row_type, {n: after.converters[n] for n, _s in used}, after,
                  True)


def _starts_with(values: pa.Array, prefix: bytes) -> np.ndarray:
    head = pc.binary_slice(values, 0, len(prefix))
    return pc.fill_null(pc.equal(head, pa.scalar(prefix, pa.binary())), False).to_numpy(zero_copy_only=False)


def _ends_with(values: pa.Array, suffix: bytes) -> np.ndarray:
    tail = pc.binary_slice(values, -len(suffix))
    return pc.fill_null(pc.equal(tail, pa.scalar(suffix, pa.binary())), False).to_numpy(zero_copy_only=False)


def _members(values: pa.Array, rows: np.ndarray, prefix: bytes) -> np.ndarray:
    """Those of ``rows`` whose value starts with ``prefix``. Compared in place when the rows are
    most of the batch (a take would copy each value first), else on the rows taken."""
    if 2 * len(rows) >= len(values):
        return rows[_starts_with(values, prefix)[rows]]
    return rows[_starts_with(values.take(pa.array(rows)), prefix)]


def payloads(values: pa.Array) -> pa.Array:
    """``values`` with the JsonConverter's wrapper cut off each (its ``{"schema":…,"payload":`` and
    last ``}``), schema by schema as :func:`decode_columns` cuts them; the others as they are. For a
    reader of a few envelope fields (spark_jobs/row_unwrap.py): a wrapped value is mostly its schema."""
    pending = _starts_with(values, WRAPPED) & _ends_with(values, b"}")
    out = values
    for _ in range(MAX_GROUPS):
        if not pending.any():
            break
        first = int(np.flatnonzero(pending)[0])
        found = _wrapper_prefix(values[first].as_py())
        if found is None:
            pending[first] = False
            continue
        members = pending & _starts_with(values, found[0])
        out = pc.if_else(pa.array(members), pc.binary_slice(values, len(found[0]), -1), out)
        pending &= ~members
    return out


HALVE_DOWN_TO = 64  # records: a group that fails is decoded in halves down to this, the rest record by record


def _halving(decoder: Decoder, batch: pa.RecordBatch, rows: np.ndarray,
             group: Callable[[np.ndarray], _Group]) -> list[tuple[np.ndarray, list[pa.Array]]]:
    """``rows`` decoded column-wise as one group, or, where that fails (one odd or bad record fails
    its group), in halves: so an odd record leaves the per-record decode its own few neighbours, not
    the whole group (whose images would then be texts, not typed)."""
    try:
        return [(rows, _decode_group(decoder, batch, group(rows)))]
    except Unsupported:
        # a chain that takes structs apart (``nested``) reads an odd record alone, to keep its structs
        if len(rows) <= (1 if decoder.nested else HALVE_DOWN_TO):
            return []
        half = len(rows) // 2
        return _halving(decoder, batch, rows[:half], group) + _halving(decoder, batch, rows[half:], group)


def decode_columns(decoder: Decoder, batch: pa.RecordBatch,
                   per_record: Callable[[pa.RecordBatch], pa.RecordBatch]) -> pa.RecordBatch:
    """``batch`` decoded: its groups column-wise, the rest by ``per_record``, in the batch's order."""
    if decoder.rows in ("string", "bytes"):  # a text or bytes, whatever they look like (not a row)
        return per_record(batch)
    values = batch.column("value")
    n = batch.num_rows
    wrapped = _starts_with(values, WRAPPED)
    plain = _starts_with(values, b"{") & ~wrapped
    if decoder.rows == "json":  # every object is a row (a {schema, payload} one too: two fields)
        plain, wrapped = plain | wrapped, np.zeros(n, dtype=bool)
    elif decoder.rows == "json_schema":  # a value without the wrapper: the per-record decode refuses it
        plain = np.zeros(n, dtype=bool)
    parts: list[tuple[np.ndarray, list[pa.Array]]] = []
    slow = np.ones(n, dtype=bool)
    if plain.any():
        rows = np.flatnonzero(plain)
        for done, columns in _halving(decoder, batch, rows,
                                      lambda r: _plain_group(decoder, r, values.take(pa.array(r)))):
            parts.append((done, columns))
            slow[done] = False
    pending = wrapped.copy()
    closed = _ends_with(values, b"}") if wrapped.any() else np.zeros(n, dtype=bool)
    for _ in range(MAX_GROUPS):  # one schema at a time: the first pending record's, byte for byte
        if not pending.any():
            break
        rows = np.flatnonzero(pending)
        found = _wrapper_prefix(values[int(rows[0])].as_py())
        if found is None:
            pending[rows[0]] = False
            continue
        prefix, schema = found
        members = _members(values, rows, prefix)
        pending[members] = False
        payloads = pc.binary_slice(values, len(prefix), -1)
        for done, columns in _halving(decoder, batch, members, lambda r, p=payloads, sc=schema: _wrapped_group(
                decoder, r, p, closed, sc)):
            parts.append((done, columns))
            slow[done] = False
    if not parts:
        return per_record(batch)
    if slow.any():
        rows = np.flatnonzero(slow)
        decoded = per_record(batch.take(pa.array(rows)))
        if decoded.num_rows != len(rows):  # a record of several changes: keep the batch whole
            return per_record(batch)
        parts.append((rows, [decoded.column(f) for f in DECODED_NAMES]))
    order = np.argsort(np.concatenate([rows for rows, _c in parts]), kind="stable")
    back = None if np.array_equal(order, np.arange(n)) else pa.array(order)  # one group of every record: in order
    columns = []
    for i, name in enumerate(DECODED_NAMES):
        pieces = [cols[i] for _r, cols in parts]
        whole = images.concat(pieces) if name == "image" else pa.concat_arrays(pieces)
        columns.append(whole if back is None else whole.take(back))
    return pa.RecordBatch.from_arrays([*batch.columns, *columns], names=[*batch.schema.names, *DECODED_NAMES])
