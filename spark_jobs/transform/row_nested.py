"""The SMTs of the per-partition path that take values apart or wrap them: Flatten, ExtractField and
HoistField, on the value (spark_jobs/transform/row_transforms.py applies them in the chain's order), to every
record: they take no predicate (cdcflow/config.py refuses one, as they change the record's shape).

They need the nested values whole: with one of them in the chain, the decode keeps a struct or an
array of a record as one (connectors/debezium/columns.py ``nested``), where otherwise it reads it into
its JSON text. A value that is not a struct (the ``string`` converter's text, or what an ExtractField
took out of a struct) is an image of one field named :data:`WHOLE`; a HoistField makes it a struct
again, and a change whose value is still not a struct at the end of the chain fails
(:func:`not_rows`): a sink needs a struct.

As Kafka Connect's:

* Flatten names each field of a nested struct by its path, joined by ``delimiter``; an array stays
  one value; a null struct's fields are null;
* ExtractField makes the value its field's value (a struct: its fields; else a value of its own);
* HoistField makes the value a struct of one field holding it.

An ExtractField of a null field makes the record a tombstone, a delete of its key (Debezium's
``after`` of a delete event), as in Kafka Connect; so does a field a schemaless record lacks (Kafka
Connect reads a map's missing key as null), whatever its neighbours hold. A field the record's
schema lacks fails the record. A delete's row image goes through these steps too, and is left as it is where it
lacks the field. A record whose structs could not be read whole fails in the decode, naming why
(connectors/debezium/envelope.Decoder ``_whole``), rather than reach these steps as JSON texts.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connectors import images
from connectors.debezium.envelope import Decoder
from connectors.registry.decode import json_bytes
from spark_jobs.transform import transform_config as cfgs
from spark_jobs.transform.row_changes import Rows, fields_of, struct_like

WHOLE = ""  # the one field of an image whose value is not a struct


def flatten(rows: Rows, cfg: cfgs.Flatten) -> None:
    def step(child: pa.StructArray, at: np.ndarray) -> tuple[pa.StructArray, None]:
        if not any(pa.types.is_struct(f.type) for f in child.type):
            return child, None
        flat: dict[str, pa.Array] = {}
        for name, values in fields_of(child).items():
            _expand(name, values, cfg.delimiter, flat)
        return struct_like(flat, child), None
    rows.map_images(step)


def _expand(name: str, values: pa.Array, delimiter: str, out: dict[str, pa.Array]) -> None:
    if not pa.types.is_struct(values.type):
        out[name] = values
        return
    for field, inner in zip(values.type.names, values.flatten(), strict=True):  # the struct's nulls applied
        _expand(f"{name}{delimiter}{field}", inner, delimiter, out)


def extract_field(rows: Rows, cfg: cfgs.ExtractField) -> None:
    """An upsert whose field is null becomes a tombstone, as in Kafka Connect (an ExtractField of
    Debezium's ``after``: a delete event): a delete of the record's key (:func:`_tombstones`)."""
    missing = f"ExtractField: value has no field {cfg.field!r}"  # on the key: row_keys.extract_field
    nulled: list[np.ndarray] = []

    schemaless = pc.is_null(rows.column("schema_id")).to_numpy(zero_copy_only=False)

    def step(child: pa.StructArray, at: np.ndarray) -> tuple[pa.StructArray, pa.Array | None]:
        fields = fields_of(child)
        if cfg.field not in fields:
            # schemaless, a field the record lacks is null (Kafka Connect reads a map): a tombstone; a field its
            # schema lacks fails the record (a delete keeps its image: Rows.map_images fails upserts only)
            nulled.append(at[schemaless[at] & pc.invert(child.is_null()).to_numpy(zero_copy_only=False)])
            return child, pc.if_else(pa.array(~schemaless[at]), missing, pa.scalar(None, pa.string()))
        values = fields[cfg.field]
        null = pc.and_(pc.invert(child.is_null()), values.is_null()).to_numpy(zero_copy_only=False)
        nulled.append(at[null])
        taken = values if pa.types.is_struct(values.type) else struct_like({WHOLE: values}, child)
        if pa.types.is_struct(values.type) and child.null_count:  # a row without an image keeps none
            taken = pa.StructArray.from_arrays(values.flatten(), names=values.type.names,
                                               mask=pc.or_(child.is_null(), values.is_null()))
        return taken, None
    rows.map_images(step)
    _tombstones(rows, np.concatenate(nulled) if nulled else np.zeros(0, np.int64))


def _tombstones(rows: Rows, at: np.ndarray) -> None:
    """The upserts ``at`` (their value now null) as deletes of their Kafka key, read as the decode
    reads a tombstone's key (its {schema, payload} wrapper unwrapped)."""
    op = pc.fill_null(rows.column("change_op"), "")
    at = at[pc.equal(op, "upsert").to_numpy(zero_copy_only=False)[at]] if len(at) else at
    if not len(at):
        return
    decoder = Decoder("kafka_offset")
    keys = [decoder.key_image(k) for k in json_bytes(rows.table, "key").take(pa.array(at)).to_pylist()]
    n = rows.table.num_rows
    order = np.arange(n)
    order[at] = n + np.arange(len(at))
    rows.set("image", images.concat([rows.column("image"), images.from_texts(keys)]).take(pa.array(order)))
    deletes = np.zeros(n, bool)
    deletes[at] = True
    rows.set("change_op", pc.if_else(pa.array(deletes), "delete", rows.column("change_op")))
    rows.fail(pa.array(deletes & np.array([k is None for k in _spread(keys, at, n)])),
              "ExtractField: the value's field is null (a tombstone), and the key is not a JSON object to delete by")


def _spread(values: list[Any], at: np.ndarray, n: int) -> list[Any]:
    out: list[Any] = [0] * n
    for i, v in zip(at.tolist(), values, strict=True):
        out[i] = v
    return out


def hoist_field(rows: Rows, cfg: cfgs.HoistField) -> None:
    def step(child: pa.StructArray, at: np.ndarray) -> tuple[pa.StructArray, None]:
        fields = fields_of(child)
        if not fields:  # the rows of no image (a record that failed, a TRUNCATE)
            return child, None
        if WHOLE in fields and len(fields) > 1:  # a field step ran on a value that is not a struct
            return child, pa.array([f"HoistField: the value is {fields[WHOLE].type}, not a struct, and a step before "
                                    "this one set fields of it (Kafka Connect refuses that): put HoistField first"]
                                   * len(child), pa.string())
        whole = list(fields) == [WHOLE]
        held = fields[WHOLE] if whole else pa.StructArray.from_arrays(list(fields.values()), names=list(fields))
        return struct_like({cfg.field: held}, child), None
    rows.map_images(step)


def not_rows(rows: Rows) -> None:
    """After the chain: an upsert whose value is still not a struct fails, as the sinks refuse it."""
    def step(child: pa.StructArray, _at: np.ndarray) -> tuple[pa.StructArray, pa.Array | None]:
        if WHOLE not in child.type.names:
            return child, None
        kind = child.type.field(WHOLE).type
        return child, pa.array([f"after the transforms the value is {kind}, not a struct: sinks need a struct (a "
                                "JSON object); add a HoistField"] * len(child), pa.string())
    rows.map_images(step)
