"""ExtractNewRecordState on the per-partition path (spark_jobs/transform/row_transforms.py applies it in the
chain's order, anywhere in the chain).

The Debezium decode (connectors/debezium/envelope.py) already unwrapped each envelope into its row
image: a delete event is a delete of its ``before`` image, a tombstone a delete of its key. So the
step applies the options:

* ``delete_handling`` and ``drop_tombstones`` as Debezium's: ``rewrite`` makes a delete event with
  a ``before`` image an upsert of that image with ``__deleted`` "true" (the other changes' images get
  "false"); one without (its image is its key's) stays a delete;
* ``add_fields`` as Debezium's ``add.fields``, each as ``__<field>`` (``source.ts_ms`` as
  ``__source_ts_ms``) with the type of the envelope's field: ``op``, ``table``, ``db`` and
  ``connector`` texts, ``ts_ms``, ``source.ts_ms`` and ``lsn`` (PostgreSQL's source.lsn, an int64)
  numbers. ``op``, ``table`` and ``db`` come with every decoded change, and ``source.ts_ms`` in the
  version with ``versioning: source_ts_ms``; the others are read from the record's own value here,
  and only for a chain that asks for them, so the decode of every other window is unchanged. A row
  unwrapped upstream (by Debezium's ExtractNewRecordState in the source connector) gives its own
  ``__ts_ms``, ``__lsn``, ``__connector``, ``__source_ts_ms``.

The steps before it see the record with its envelope (``Rows.enveloped``): a RecordIsTombstone
predicate or a TombstoneHandler there sees the Kafka tombstones only, as in Kafka Connect, where a
delete event's value is its envelope; a value Drop there makes a tombstone, which this step drops
with ``drop_tombstones``. A Sql predicate or a Python step there runs in Spark over the envelope,
typed, and this step then reads the row from the ``after`` (``before``) it left
(spark_jobs/transform/envelope_frame.py).
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connectors.changes import VERSION_SHIFT, bigint, text
from connectors.debezium.arrow_read import Unsupported, parsed
from connectors.debezium.columns import payloads
from connectors.registry.decode import JSON_COLUMNS
from spark_jobs.transform import transform_config as cfgs
from spark_jobs.transform.row_changes import Rows

_DECODED = {"table": "source_table", "db": "source_db", "op": "source_op"}  # columns of every decoded change
_NUMBERS = ("ts_ms", "lsn", "source.ts_ms")  # the added fields of int64 type (the others are texts)


class _Source(msgspec.Struct):
    ts_ms: Any = None
    lsn: Any = None
    connector: Any = None


class _Event(msgspec.Struct):
    """What this step reads of a change event's value (or of its {schema, payload} wrapper's payload):
    whether it has a before image, and the fields add_fields takes that the decode does not keep."""

    before: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    payload: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    source: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    ts_ms: Any = None
    # a row unwrapped upstream carries them as fields of its own (Debezium's add.fields)
    up_ts_ms: Any = msgspec.field(default=None, name="__ts_ms")
    up_lsn: Any = msgspec.field(default=None, name="__lsn")
    up_connector: Any = msgspec.field(default=None, name="__connector")
    up_source_ts_ms: Any = msgspec.field(default=None, name="__source_ts_ms")


_EVENT = msgspec.json.Decoder(_Event)
_SOURCE = msgspec.json.Decoder(_Source)
_BAD = (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeDecodeError)


def _present(raw: msgspec.Raw) -> bool:
    return len(raw) > 0 and bytes(raw).strip() != b"null"


def _event(value: bytes | None) -> _Event:
    """A change event's value as this step reads it (empty where it is not a JSON object)."""
    if value is None:
        return _Event()
    try:
        event = _EVENT.decode(value)
        return _EVENT.decode(event.payload) if _present(event.payload) else event
    except _BAD:
        return _Event()


def _added(event: _Event) -> dict[str, Any]:
    """The add_fields the decode does not keep, of one change event."""
    try:
        source = _SOURCE.decode(event.source) if _present(event.source) else _Source()
    except _BAD:
        source = _Source()

    def first(value: Any, upstream: Any) -> Any:
        return value if value is not None else upstream
    return {"ts_ms": bigint(first(event.ts_ms, event.up_ts_ms)), "lsn": bigint(first(source.lsn, event.up_lsn)),
            "connector": text(first(source.connector, event.up_connector)),
            "source.ts_ms": bigint(first(source.ts_ms, event.up_source_ts_ms))}


_SOURCE_READ = pa.struct([("ts_ms", pa.int64()), ("lsn", pa.int64()), ("connector", pa.string())])
_READ = pa.schema([("ts_ms", pa.int64()), ("source", _SOURCE_READ),
                   ("payload", pa.struct([("ts_ms", pa.int64()), ("source", _SOURCE_READ)])),
                   ("__ts_ms", pa.int64()), ("__lsn", pa.int64()), ("__connector", pa.string()),
                   ("__source_ts_ms", pa.int64())])


def _metadata(values: pa.Array) -> dict[str, pa.Array]:
    """The add_fields the decode does not keep, of each change event's value: column-wise, by Arrow's
    JSON reader over the envelopes (the JsonConverter's wrappers cut off: a wrapped value is mostly
    its schema; ~7 µs a change of tests/fixtures/debezium/orders.py, against ~40 µs value by value),
    else value by value where the reader refuses the values (a line break in one, a field of another
    JSON type)."""
    try:
        lines = payloads(values).to_pylist()
        buffer = b"\n".join(lines)
        if any(not v for v in lines) or buffer.count(b"\n") != len(lines) - 1:
            raise Unsupported("an empty value or a line break")
        table = parsed(buffer, _READ, "ignore")
        if table.num_rows != len(lines):
            raise Unsupported("a value of several JSON objects")
    except Unsupported:
        read = [_added(_event(v)) for v in values.to_pylist()]
        return {name: pa.array([r[name] for r in read], pa.int64() if name in _NUMBERS else pa.string())
                for name in ("ts_ms", "lsn", "connector", "source.ts_ms")}
    payload, source = table.column("payload").combine_chunks(), table.column("source").combine_chunks()

    def first(part: str, upstream: str) -> pa.Array:
        inner, outer = (payload.field("source"), source) if part != "ts_ms" else (payload, table)
        field = part.removeprefix("source.")
        top = outer.field(field) if part != "ts_ms" else outer.column("ts_ms").combine_chunks()
        return pc.coalesce(inner.field(field), top, table.column(upstream).combine_chunks())
    return {"ts_ms": first("ts_ms", "__ts_ms"), "lsn": first("lsn", "__lsn"),
            "connector": first("connector", "__connector"), "source.ts_ms": first("source.ts_ms", "__source_ts_ms")}


def extract_new_record_state(rows: Rows, cfg: cfgs.ExtractNewRecordState, versioning: str) -> None:
    """The options of the unwrap the decode already made (see the module's docstring)."""
    tombstone, op = rows.value_null(), pc.fill_null(rows.column("change_op"), "")
    delete_event = pc.and_(pc.equal(op, "delete"), pc.invert(tombstone))
    if cfg.drop_tombstones:
        rows.drop(tombstone)
    if cfg.delete_handling == "drop":
        rows.drop(delete_event)
    read = _read_fields(cfg, versioning)
    # the values read again: every change's for the fields the decode does not keep, else the delete events'
    wanted = pc.and_(rows.live, pc.invert(tombstone) if read else delete_event)
    at = np.flatnonzero(pc.fill_null(wanted, False).to_numpy(zero_copy_only=False))
    values = _values_at(rows.table, at)
    added: dict[str, pa.Array] = {}
    if cfg.delete_handling == "rewrite":
        added["__deleted"] = _rewrite(rows, delete_event, at, values)
    metadata = _metadata(values) if read else {}
    place = np.full(rows.table.num_rows, -1)
    place[at] = np.arange(len(at))  # each change's place among the values read (none: null)
    for name in cfg.add_fields:
        field = "__" + name.replace(".", "_")
        if name in read:
            added[field] = metadata[name].take(pa.array(place, pa.int64(), mask=place < 0))
        elif name == "source.ts_ms":  # the version holds it (versioning source_ts_ms)
            added[field] = pc.shift_right(rows.column("version"), int(np.log2(VERSION_SHIFT)))
        else:
            added[field] = rows.column(_DECODED[name])
    if added:
        rows.insert(added, pc.invert(tombstone))
    rows.enveloped = False


def _values_at(table: pa.Table, at: np.ndarray) -> pa.Array:
    """The values as read (a registry's: transcoded, ``json_bytes``) of the changes ``at``, taken from
    the chunks: the other values are not copied."""
    name = JSON_COLUMNS["value"] if JSON_COLUMNS["value"] in table.column_names else "value"
    return table.column(name).take(pa.array(at, pa.int64())).combine_chunks()


def _rewrite(rows: Rows, delete_event: pa.Array, at: np.ndarray, values: pa.Array) -> pa.Array:
    """delete_handling rewrite: the delete events with a before image (of ``values``, the changes
    ``at``) made upserts of it; their ``__deleted`` "true", the other changes' "false", null for a
    delete kept (its image is its key's)."""
    rewritten = np.zeros(rows.table.num_rows, bool)
    deletes = pc.fill_null(delete_event, False).to_numpy(zero_copy_only=False)
    looked = at[deletes[at]]  # the delete events' values only: a few
    rewritten[looked] = [_present(_event(v).before) for v in values.filter(pa.array(deletes[at])).to_pylist()]
    rows.set("change_op", pc.if_else(pa.array(rewritten), "upsert", rows.column("change_op")))
    kept_delete = pc.and_(delete_event, pa.array(~rewritten))
    return pc.if_else(pa.array(rewritten), "true", pc.if_else(kept_delete, pa.scalar(None, pa.string()), "false"))


def _read_fields(cfg: cfgs.ExtractNewRecordState, versioning: str) -> set[str]:
    """The add_fields read from the record's value: those no decoded column holds."""
    kept = {*_DECODED, "source.ts_ms"} if versioning == "source_ts_ms" else set(_DECODED)
    return {f for f in cfg.add_fields if f not in kept}
