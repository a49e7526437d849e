"""Typed row images (connectors/images.py): rows of several shapes in one column, read field by
field as exact texts, combined across batches and read tasks, and handed to Spark as maps."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from connectors import images
from connectors.debezium import typed

TEXTS = [{"id": "1", "name": "a"}, None, {"id": "2", "note": None}, {"id": "3", "name": "c"}]


def _typed() -> pa.Array:
    """Two rows of a schema read column-wise: a decimal, a date, a datetime, a TIME, a double, a boolean."""
    price = typed.typed(pa.array(["B88=", "/w=="]), typed.Logical("decimal", scale=2))  # 19.99, -0.01
    day = typed.typed(pa.array([-3653, None]), typed.Logical("date"))
    at = typed.typed(pa.array([1_500_000, -1]), typed.Logical("datetime"))
    took = typed.typed(pa.array([3_020_399_000_000, -1]), typed.Logical("time"))
    assert price is not None and day is not None and at is not None and took is not None
    return images.from_columns(["id", "price", "day", "at", "took", "ratio", "ok"],
                               [pa.array([7, 8]), price, day, at, took, pa.array([0.5, 1e20]),
                                pa.array([True, False])], pa.array([False, False]))


def test_a_typed_image_reads_as_the_exact_texts_mysql_is_given() -> None:
    image = _typed()
    assert pa.types.is_union(image.type)
    assert image.type.field(0).type.field("price").type == pa.decimal128(38, 2)
    assert images.as_map(image).to_pylist() == [
        [("id", "7"), ("price", "19.99"), ("day", "1960-01-01"), ("at", "1970-01-01 00:00:01.500000"),
         ("took", "838:59:59.000000"), ("ratio", "0.5"), ("ok", "true")],
        [("id", "8"), ("price", "-0.01"), ("day", None), ("at", "1969-12-31 23:59:59.999999"),
         ("took", "-00:00:00.000001"), ("ratio", "1e+20"), ("ok", "false")]]
    assert image.to_pylist()[0]["price"] == Decimal("19.99")  # the value itself, not a text


def test_texts_of_several_shapes_keep_each_row_in_place() -> None:
    per_record = images.from_texts(TEXTS)
    assert per_record.type.num_fields == 3  # {id, name}, no image, {id, note}
    assert images.texts(per_record, "id").to_pylist() == ["1", None, "2", "3"]
    assert images.texts(per_record, "name").to_pylist() == ["a", None, None, "c"]
    assert images.texts(per_record, "missing").to_pylist() == [None] * 4
    assert images.as_map(per_record).to_pylist()[1] is None
    masked = images.from_columns(["a"], [pa.array([1, 2])], pa.array([False, True]))  # a TRUNCATE's row: no image
    assert images.texts(masked, "a").to_pylist() == ["1", None]
    assert pc.is_null(images.as_map(per_record)).to_pylist() == [False, True, False, False]


def test_concat_merges_equal_shapes_and_keeps_order_through_slices() -> None:
    a, b = images.from_texts(TEXTS), _typed()
    combined = images.concat([a.slice(1, 3), b, a])
    assert combined.type.num_fields == 4  # the three text shapes and the typed one; a's twice is once
    assert images.texts(combined, "id").to_pylist() == [None, "2", "3", "7", "8", "1", None, "2", "3"]
    assert images.texts(combined.slice(3, 2), "price").to_pylist() == ["19.99", "-0.01"]
    taken = combined.take(pa.array([4, 0, 5]))
    assert images.texts(taken, "id").to_pylist() == ["8", None, "1"]
    narrow = images.compact(combined.slice(2, 3))  # rows of two shapes, each child cut to its rows
    assert narrow.type.num_fields == 2 and [len(narrow.field(i)) for i in range(2)] == [1, 2]
    assert images.as_map(narrow).to_pylist() == images.as_map(combined.slice(2, 3)).to_pylist()


def test_tables_of_different_image_types_concatenate() -> None:
    t1 = pa.table({"image": images.from_texts(TEXTS), "n": [1, 2, 3, 4]})
    t2 = pa.table({"image": _typed(), "n": [5, 6]})
    both = images.concat_tables([t1, t2.filter(pa.array([False, False])), t2])
    assert both.column("n").to_pylist() == [1, 2, 3, 4, 5, 6]
    assert images.texts(both.column("image"), "id").to_pylist() == ["1", None, "2", "3", "7", "8"]
    empty = t2.filter(pa.array([False, False])).column("image")
    assert images.texts(empty, "id").to_pylist() == []


def test_more_shapes_than_a_union_holds_fall_back_to_one_child_of_texts() -> None:
    many = [{f"f{i}": str(i), "id": str(i)} for i in range(images.MAX_CHILDREN + 10)]
    one = images.from_texts(many)
    assert one.type.num_fields == 1
    assert images.texts(one, "f5").to_pylist()[4:7] == [None, "5", None]
    parts = [images.from_texts(many[i:i + 10]) for i in range(0, len(many), 10)]
    merged = images.concat([*parts, _typed()])
    assert merged.type.num_fields == 1
    assert images.texts(merged, "id").to_pylist() == [str(i) for i in range(len(many))] + ["7", "8"]
    assert images.texts(merged, "price").to_pylist()[-2:] == ["19.99", "-0.01"]


@pytest.mark.parametrize("kind", ["null", "map"])
def test_the_spark_paths_maps_and_null_key_images_read_too(kind: str) -> None:
    column = pa.nulls(2) if kind == "null" else images.as_map(images.from_texts([{"id": "1"}, None]))
    assert images.texts(column, "id").to_pylist() == ([None, None] if kind == "null" else ["1", None])
