"""The record frame of a Spark step before ExtractNewRecordState (spark_jobs/transform/spark_stage.py).

A ``Sql`` predicate or a ``Python`` step before the chain's ExtractNewRecordState sees the record as
Kafka Connect has it before the unwrap: ``value`` is Debezium's change event, typed (``before``,
``after``, ``source``, ``op``, ``ts_ms``, ``transaction`` … as the event has them; null for a
tombstone). The read task decodes each value once more for it, with the record model's decoder
(connectors/debezium/envelope.Decoder ``rows``, structs kept whole: a Decimal or a MicroTimestamp
inside ``before`` is typed as at the top of a row), only for such a chain (:func:`attach`); every other
chain keeps its single decode. An upsert's ``after`` and a delete event's ``before`` are the row the
first decode read (its types: the sinks' declared columns read a schemaless value as without the
stage), so an envelope no step changes gives the rows a chain without the stage gives.

After the stage the unwrap reads the row from the envelope the Spark steps left (:func:`from_frame`):
an upsert's row is ``after``, a delete event's ``before`` (the row the decode read where it has
none), so a field a ``Python`` function changed there reaches the sinks. What ExtractNewRecordState
takes from elsewhere in the envelope (the op, ``source``, ``ts_ms``: its ``add_fields``, the version,
the table) is the connector's, read by the decode: a change to those is not read back. A value made
null is a tombstone, as in Kafka Connect: ExtractNewRecordState drops it (``drop_tombstones``) or
deletes the record's row by the row the decode read. An upsert whose ``after`` a step made null fails
(stage transform).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connectors import images
from connectors.debezium.envelope import Decoder
from connectors.registry.decode import JSON_COLUMNS, json_bytes
from spark_jobs.transform import record_frame
from spark_jobs.transform.record_frame import ENVELOPE

UNWRAP = "ExtractNewRecordState"
_LIVE = pa.array(["upsert", "delete"])


def before_unwrap(chain: Any, first: int) -> bool:
    """The chain's ExtractNewRecordState comes at or after step ``first``: a Spark step from there
    sees the envelope."""
    return any(cfg.type == UNWRAP for cfg in list(chain)[first:])


# -- the envelopes, read in the read task ------------------------------------------------------------
def attach(decoded: pa.Table, value_converter: str) -> pa.Table:
    """``decoded`` with the column ``envelope``: each live change's value as Kafka Connect's record
    model reads it (a struct; null for a tombstone). A value that model cannot read fails its change
    (stage converter), with the reason."""
    op = pc.fill_null(decoded.column("change_op"), "")
    live = pc.and_(pc.is_null(decoded.column("error_stage")), pc.is_in(op, value_set=_LIVE))
    values = json_bytes(decoded, "value")
    at = np.flatnonzero(pc.fill_null(pc.and_(live, pc.is_valid(values)), False).to_numpy(zero_copy_only=False))
    taken = pa.array(at, pa.int64())
    read, errors = envelopes(values.take(taken), json_bytes(decoded, "key").take(taken),
                             decoded.column("topic").combine_chunks().take(taken),
                             decoded.column("offset").combine_chunks().take(taken), value_converter)
    image = decoded.column("image").combine_chunks().take(taken)
    read = _overlaid(read, images.as_struct(image), op.combine_chunks().take(taken))
    place = np.full(decoded.num_rows, -1, np.int64)
    place[at] = np.arange(len(at))
    index = pa.array(place, mask=place < 0)
    return _failed(decoded, errors.take(index)).append_column(ENVELOPE, read.take(index))


def _failed(decoded: pa.Table, errors: pa.Array) -> pa.Table:
    """The changes with an error (not null) failed with it, stage converter."""
    if errors.null_count == len(errors):
        return decoded
    for name, text in (("error_stage", pc.if_else(pc.is_valid(errors), "converter", None)), ("error_message", errors)):
        column = decoded.column(name).combine_chunks()
        decoded = decoded.set_column(decoded.schema.get_field_index(name), name,
                                     pc.coalesce(pc.cast(column, pa.string()), text))
    return decoded


def _overlaid(envelope: pa.StructArray, rows: pa.StructArray, op: pa.Array) -> pa.StructArray:
    """The envelopes with an upsert's ``after`` and a delete event's ``before`` the row the decode
    read (typed by the sinks' declared columns as without the stage): unchanged, the unwrap gives the
    rows it gives without a Spark step. A value unwrapped upstream (not an envelope) shows its row as
    ``after`` too, which the unwrap passes on as it is."""
    if not pa.types.is_struct(envelope.type) or not len(envelope):
        return envelope
    null = pa.scalar(None, rows.type)
    after = pc.if_else(pc.fill_null(pc.equal(op, "upsert"), False), rows, null)
    old = _part(envelope, "before")
    kind = record_frame.merged_type([rows.type, old.type])
    before = pc.if_else(pc.fill_null(pc.equal(op, "delete"), False), record_frame.conformed(rows, kind),
                        record_frame.conformed(old, kind))
    names = [f.name for f in envelope.type]
    fields = {"before": before, "after": after} | {n: envelope.field(n) for n in names if n not in ("before", "after")}
    order = list(dict.fromkeys(["before", "after", *names]))
    return pa.StructArray.from_arrays([fields[n] for n in order], names=order,
                                      mask=envelope.is_null() if envelope.null_count else None)


def envelopes(values: pa.Array, keys: pa.Array, topics: pa.Array, offsets: pa.Array,
              converter: str) -> tuple[pa.StructArray, pa.Array]:
    """The values (none null) as the record model reads them, typed by their Connect schema (the
    {schema, payload} wrapper; under value_converter json a value without one is read by its JSON),
    and per value the reason it cannot be read (null: read)."""
    image, ops, errors = _decoded(values, keys, topics, offsets, "json_schema")
    if converter == "json":  # the JsonConverter without schemas: the values that have no wrapper
        plain = np.flatnonzero(pc.is_valid(errors).to_numpy(zero_copy_only=False))
        if len(plain):
            taken = pa.array(plain, pa.int64())
            again = _decoded(values.take(taken), keys.take(taken), topics.take(taken), offsets.take(taken), "json")
            kept = np.flatnonzero(pc.is_null(errors).to_numpy(zero_copy_only=False))
            order = np.argsort(np.concatenate([kept, plain]), kind="stable")
            image = images.concat([image.take(pa.array(kept, pa.int64())), again[0]]).take(pa.array(order))
            ops = pa.concat_arrays([ops.take(pa.array(kept, pa.int64())), again[1]]).take(pa.array(order))
            errors = pa.concat_arrays([errors.take(pa.array(kept, pa.int64())), again[2]]).take(pa.array(order))
    struct = one_struct(image)
    # a {schema, payload} of a null payload is the converter's null: a tombstone, as read
    tombstone = pc.fill_null(pc.equal(ops, "delete"), False)
    if pc.any(tombstone).as_py():
        struct = pc.if_else(tombstone, pa.scalar(None, struct.type), struct)
    return struct, errors


def _decoded(values: pa.Array, keys: pa.Array, topics: pa.Array, offsets: pa.Array,
             rows: str) -> tuple[pa.Array, pa.Array, pa.Array]:
    decoder = Decoder("kafka_offset", None, False, rows=rows, nested=True)
    decoder.column_wise_min = 1
    batch = pa.RecordBatch.from_arrays([pc.cast(topics, pa.string()), offsets, pc.cast(keys, pa.binary()),
                                        pc.cast(values, pa.binary())], names=["topic", "offset", "key", "value"])
    out = decoder.decode_batch(batch)
    return out.column("image"), out.column("change_op"), out.column("error_message")


def one_struct(image: pa.Array) -> pa.StructArray:
    """Row images as one struct, the structs inside merged field by field (the envelopes of several
    tables or schemas: record_frame.merged_type), not made texts as :func:`images.as_struct` makes
    fields of differing types."""
    image = images.compact(image)
    if not pa.types.is_union(image.type):
        return images.as_struct(image)
    children = [image.field(i) for i in range(image.type.num_fields)]
    kind = record_frame.merged_type([c.type for c in children])
    if not pa.types.is_struct(kind):
        return images.as_struct(image)
    parts = [record_frame.conformed(c, kind) for c in children]
    starts = np.cumsum([0] + [len(p) for p in parts[:-1]])
    codes = np.frombuffer(image.buffers()[1], np.int8)[image.offset:image.offset + len(image)]
    offsets = np.frombuffer(image.buffers()[2], np.int32)[image.offset:image.offset + len(image)]
    return pa.concat_arrays(parts).take(pa.array(starts[codes] + offsets, pa.int64()))


# -- the rows, after the stage -----------------------------------------------------------------------
def from_frame(frame: pa.Table, keep: bool = False) -> pa.Table:
    """The frame back as changes, each row read from its envelope (the module's docstring); with
    ``keep`` (the next stage too comes before the unwrap) the envelopes go along (``envelope``)."""
    return record_frame.from_frame(frame, unwrap=lambda changes, value, rows: _unwrapped(changes, value, rows, keep))


def _unwrapped(changes: dict[str, pa.Array], envelope: pa.Array, rows: pa.Array, keep: bool) -> None:
    """Sets each change's ``image`` from its envelope, a value made null a tombstone."""
    n = len(envelope)
    op = pc.fill_null(changes["change_op"], "")
    gone = pc.is_null(envelope)
    made_null = pc.and_(gone, pc.is_valid(changes["value"]))
    if pc.any(made_null).as_py():
        for name in ("value", JSON_COLUMNS["value"]):
            if name in changes:
                changes[name] = pc.if_else(made_null, pa.scalar(None, changes[name].type), changes[name])
        changes["change_op"] = pc.if_else(pc.and_(made_null, pc.equal(op, "upsert")), "delete", changes["change_op"])
    after, before = _part(envelope, "after"), _part(envelope, "before")
    upsert = pc.and_(pc.invert(gone), pc.equal(op, "upsert"))
    codes = np.full(n, 2, np.int8)
    codes[_mask(pc.and_(upsert, pc.is_valid(after)))] = 0
    codes[_mask(pc.and_(pc.and_(pc.invert(gone), pc.equal(op, "delete")), pc.is_valid(before)))] = 1
    offsets = np.zeros(n, np.int32)
    children = []
    for code, part in enumerate((after, before, rows)):
        at = np.flatnonzero(codes == code)
        offsets[at] = np.arange(len(at), dtype=np.int32)
        children.append(part.take(pa.array(at, pa.int64())))
    changes["image"] = images.union(codes, offsets, children)
    no_after = pc.and_(upsert, pc.is_null(after))
    if pc.any(no_after).as_py():
        changes["error_message"] = pc.if_else(no_after, (
            f"{UNWRAP}: the envelope's 'after' is null or not a struct (a Spark step before the unwrap made it so), "
            "and the record is not a delete"), pc.cast(changes["error_message"], pa.string()))
        changes["error_stage"] = pc.if_else(no_after, "transform", pc.cast(changes["error_stage"], pa.string()))
    if keep:
        changes[ENVELOPE] = envelope


def _part(envelope: pa.Array, name: str) -> pa.Array:
    """The envelope's field ``name`` where it is a struct (null where the envelope is), else nulls."""
    if not pa.types.is_struct(envelope.type) or envelope.type.get_field_index(name) < 0:
        return pa.nulls(len(envelope), pa.struct([]))
    part = pc.struct_field(envelope, name)
    return part if pa.types.is_struct(part.type) else pa.nulls(len(envelope), pa.struct([]))


def _mask(values: pa.Array) -> np.ndarray:
    return np.asarray(pc.fill_null(values, False).to_numpy(zero_copy_only=False), bool)
