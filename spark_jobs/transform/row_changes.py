"""The decoded changes an SMT step of the per-partition path rewrites (spark_jobs/transform/row_transforms.py,
spark_jobs/transform/row_steps.py): :class:`Rows`, the helpers that take a row image's child apart and put it
back, and whether a transform's predicate holds per change (:func:`applies`).

Apart from the steps so that every module of steps reads them without importing the others.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connectors import images
from connectors.errors import ConfigError
from spark_jobs.transform import java_regex
from spark_jobs.transform import transform_config as cfgs


@dataclass
class Rows:
    """The decoded changes a step rewrites; ``live`` marks the changes a step may touch: read, with a
    row image, not failed, not dropped. The key as the chain leaves it (spark_jobs/transform/row_steps.py):
    ``key_from``, the row images and fields a ValueToKey made it of (None: the Kafka key), and
    ``keyless``, the changes whose key a Drop set to null (None: none), and ``keys``, the key image a
    step on the key's fields left (None: not read yet; spark_jobs/transform/row_keys.py), read from the Kafka key
    by ``key_converter``. The value: ``enveloped``
    while the steps before an ExtractNewRecordState run (the value is still Debezium's envelope,
    though the decode already holds its row image), and ``nulled``, the changes whose value a Drop
    set to null (None: none)."""

    table: pa.Table
    key_from: tuple[pa.Array, tuple[str, ...]] | None = None
    keyless: pa.Array | None = None
    keys: pa.Array | None = None
    key_converter: str = "json"
    when: pa.Array | None = None  # the first step's Sql predicate, as Spark evaluated it (spark_stage.py)
    enveloped: bool = False
    nulled: pa.Array | None = None
    key_stepped: bool = False  # a step on the key's fields before a Spark stage made the key (row_keys.resumed)

    def column(self, name: str) -> Any:
        """A column as one array; combined once (the decoded batches come as chunks), then kept so."""
        values = self.table.column(name)
        if values.num_chunks == 1:
            return values.chunk(0)
        combined = values.combine_chunks()
        self.set(name, combined)
        return combined

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

    def value_null(self) -> pa.Array:
        """The changes whose value is null: a Kafka tombstone, or a value a Drop set to null."""
        null = self.table.column("value").is_null().combine_chunks()  # the values as read: not copied
        return null if self.nulled is None else pc.or_(null, self.nulled)

    def tombstone(self) -> pa.Array:
        """The changes whose value is null (RecordIsTombstone, TombstoneHandler): before an
        ExtractNewRecordState the Kafka tombstones (a delete event's value is its envelope, as in
        Kafka Connect); after it, and in the record model, every delete (a Kafka tombstone, or a delete
        event unwrapped with delete_handling none)."""
        if self.enveloped:
            return self.value_null()
        return pc.or_(self.value_null(), pc.equal(pc.fill_null(self.column("change_op"), ""), "delete"))

    def insert(self, added: dict[str, pa.Array], where: pa.Array) -> None:
        """Set fields (per change, aligned with the rows) on the images of the changes where ``where``."""
        where = pc.fill_null(where, False)

        def step(child: pa.StructArray, at: np.ndarray) -> tuple[pa.StructArray, None]:
            fields = fields_of(child)
            index = pa.array(at)
            for name, values in added.items():
                new = values.take(index)
                old = fields.get(name)
                fields[name] = pc.if_else(where.take(index), new, old if old is not None and old.type == new.type
                                          else pa.nulls(len(new), new.type))
            return struct_like(fields, child), None
        self.map_images(step)

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
        if all(e.null_count == len(e) for e in errors):  # no field of any row failed
            return
        message = pa.concat_arrays(errors).take(pa.array(np.argsort(np.concatenate(order), kind="stable")))
        # a delete's image goes through the chain (its key fields renamed, cast) but never fails it: it
        # deletes by its key whatever the row held
        self.fail(pc.and_(pc.is_valid(message), pc.equal(pc.fill_null(self.column("change_op"), ""), "upsert")),
                  message)


def fields_of(child: pa.StructArray) -> dict[str, pa.Array]:
    """A child's fields by name, in order (a step edits the dict, :func:`struct_like` puts it back)."""
    return dict(zip(child.type.names, [child.field(i) for i in range(child.type.num_fields)], strict=True))


def struct_like(fields: dict[str, pa.Array], like: pa.StructArray) -> pa.StructArray:
    """``fields`` as a child with the rows of ``like`` that have no image still without one."""
    mask = like.is_null() if like.null_count else None
    if not fields:
        return pa.array([None if mask is not None and mask[i].as_py() else {} for i in range(len(like))],
                        pa.struct([]))
    return pa.StructArray.from_arrays(list(fields.values()), names=list(fields), mask=mask)


def joined(pieces: list[Any], n: int) -> pa.Array:
    """Per change, its texts and the constant texts among ``pieces`` joined (one text for all where
    no piece is per change): a topic made of parts (TimestampRouter, RegexRouter)."""
    if not any(isinstance(p, pa.Array) for p in pieces):
        return pa.array(np.full(n, "".join(pieces), dtype=object), pa.string())
    return pc.binary_join_element_wise(*pieces, "")


def first_error(*errors: pa.Array | None) -> pa.Array | None:
    """Per row, the first of the fields' error texts (None: no field could fail)."""
    found = [e for e in errors if e is not None]
    if not found:
        return None
    message = found[0]
    for error in found[1:]:
        message = pc.coalesce(message, error)  # the first failing field names the record's error
    return message


def applies(rows: Rows, cfg: Any) -> pa.Array:
    """Per change, whether the transform applies (its predicate, negated or not)."""
    n = rows.table.num_rows
    pred = cfg.predicate
    if pred is None:
        return pa.array(np.ones(n, bool))
    if isinstance(pred, cfgs.TopicNameMatches):
        hit = per_topic(rows.column("route"), lambda topic: java_regex.matches(pred.pattern, topic), pa.bool_())
    elif isinstance(pred, cfgs.RecordIsTombstone):
        hit = rows.tombstone()
    elif isinstance(pred, cfgs.SqlCondition):  # evaluated by the Spark stage before the step
        if rows.when is None:
            raise ConfigError("a Sql predicate is evaluated by Spark, before the step (spark_jobs/transform/spark_stage.py)")
        hit = pc.fill_null(rows.when, False)
    else:  # HasHeaderKey
        headers = rows.column("headers")
        keys = pc.list_flatten(headers).field("key")
        owners = pc.list_parent_indices(headers)
        found = np.zeros(n, bool)
        found[owners.filter(pc.fill_null(pc.equal(keys, pred.name), False)).to_numpy()] = True
        hit = pa.array(found)
    hit = pc.fill_null(hit, False)
    return pc.invert(hit) if cfg.negate else hit


def per_topic(topics: pa.Array, value: Callable[[str], Any], kind: pa.DataType) -> pa.Array:
    """``value`` of each topic, computed once per distinct topic (a window has few): a Java regex
    read with Python's re (spark_jobs/transform/java_regex.py). Null where the topic is null."""
    encoded = pc.dictionary_encode(topics.combine_chunks() if isinstance(topics, pa.ChunkedArray) else topics)
    values = pa.array([value(t) for t in encoded.dictionary.to_pylist()], kind)
    return values.take(encoded.indices)
