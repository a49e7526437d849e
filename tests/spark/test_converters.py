"""The json_schema converter on a window of many Connect schemas (issue 40): every schema is read, and
a record whose schema cannot be merged with the window's earlier ones is marked, with the field and
both types, never read with fields missing.

Records as Kafka Connect's JsonConverter writes them with ``schemas.enable=true``
(``org.apache.kafka.connect.json.JsonConverter``: ``{"schema": <asJsonSchema>, "payload": ...}``;
struct members carry their name in ``field``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from spark_jobs.converters import to_records

pytestmark = pytest.mark.spark

RAW = ("topic string, partition int, offset bigint, timestamp bigint, key binary, value binary, "
       "headers array<struct<key:string,value:binary>>")
TS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
KINDS = {0: ("int32", lambda i: i * 7), 1: ("string", lambda i: f"text {i}"), 2: ("int64", lambda i: 2**40 + i),
         3: ("float64", lambda i: i + 0.25), 4: ("boolean", lambda i: i % 2 == 0)}


def _field(name: str, kind: str, optional: bool = True) -> dict[str, Any]:
    return {"type": kind, "optional": optional, "field": name}


def _schema(*fields: dict[str, Any]) -> dict[str, Any]:
    return {"type": "struct", "fields": [_field("id", "int32", False), *fields], "optional": False,
            "name": "shop.Item"}


def _frame(spark: Any, values: list[bytes], partitions: list[int] | None = None) -> Any:
    parts = partitions or [0] * len(values)
    rows = [("shop.items", p, i, TS + i, None, v, []) for i, (p, v) in enumerate(zip(parts, values, strict=True))]
    return spark.createDataFrame(rows, RAW)


def _record(schema: dict[str, Any], payload: dict[str, Any]) -> bytes:
    return json.dumps({"schema": schema, "payload": payload}, separators=(",", ":")).encode()


def test_a_window_of_150_schemas_reads_every_field_of_every_record(spark: Any) -> None:
    """Each record has an optional field of its own (the converter read 100 distinct schemas, not
    chosen deterministically: the others' fields were lost)."""
    values, want = [], []
    for i in range(150):
        kind, make = KINDS[i % 5]
        values.append(_record(_schema(_field(f"f{i}", kind)), {"id": i, f"f{i}": make(i)}))
        want.append({"id": i, f"f{i}": make(i)})
    rows = to_records(_frame(spark, values, [i % 3 for i in range(150)]), "bytes", "json_schema").collect()

    by_id = {r.value.id: r.value.asDict() for r in rows}
    assert all(r._error_stage is None for r in rows)
    assert len(rows[0].value) == 151  # id and the 150 fields
    for expected in want:
        got = by_id[expected["id"]]
        assert {k: v for k, v in got.items() if v is not None} == expected


def test_a_field_whose_type_conflicts_marks_the_later_records_with_the_field_and_both_types(spark: Any) -> None:
    first = _schema(_field("qty", "int32"), _field("tags", "array"))
    first["fields"][2]["items"] = {"type": "string", "optional": False}
    wider = _schema(_field("qty", "int64"), _field("note", "string"))
    clash = _schema(_field("qty", "string"), _field("extra", "string"))
    values = [_record(first, {"id": 1, "qty": 5, "tags": ["a"]}),
              _record(wider, {"id": 2, "qty": 2**40, "note": "n"}),
              _record(clash, {"id": 3, "qty": "many", "extra": "x"}),
              _record(first, {"id": 4, "qty": 6, "tags": []}),
              b'{"schema": "not a schema", "payload": {"id": 5}}',
              _record({"type": "uuid"}, {"id": 6})]
    frame = _frame(spark, values)
    records = to_records(frame, "bytes", "json_schema")
    rows = records.orderBy("offset").collect()

    # the clash's own fields are left out: its records are not read
    assert records.schema["value"].dataType.simpleString() == \
        "struct<id:int,qty:bigint,tags:array<string>,note:string>"
    assert [r.value.asDict() if r.value else None for r in rows[:2]] == [
        {"id": 1, "qty": 5, "tags": ["a"], "note": None}, {"id": 2, "qty": 2**40, "tags": None, "note": "n"}]
    assert rows[3].value.asDict() == {"id": 4, "qty": 6, "tags": [], "note": None}
    assert [(r._error_stage, r._error_message) for r in rows if r._error_stage] == [
        ("converter", "value.qty is string in this record's schema but int64 in the schemas of the window's earlier "
                      "records: a window reads a field as one type (value.converter json_schema)"),
        ("converter", "value.schema is not a Kafka Connect schema (JSONDecodeError: Expecting value: line 1 column 1 "
                      "(char 0)) (value.converter json_schema)"),
        ("converter", "value.schema is not a Kafka Connect schema (unsupported Connect schema type 'uuid' in a "
                      "json_schema record) (value.converter json_schema)")]
    assert rows[2].value is None and rows[2].offset == 2


def test_the_first_records_decide_whatever_the_order_the_tasks_read_them_in(spark: Any) -> None:
    """The schema of the window's first record (by timestamp) keeps its type; the order of the
    distinct schemas in Spark's aggregation does not matter."""
    values = [_record(_schema(_field("code", "string")), {"id": 1, "code": "A"}),
              _record(_schema(_field("code", "int32")), {"id": 2, "code": 2})]
    for partitions in ([0, 1], [1, 0], [0, 0]):
        rows = to_records(_frame(spark, values, partitions), "bytes", "json_schema").orderBy("offset").collect()
        assert rows[0].value.asDict() == {"id": 1, "code": "A"}
        assert rows[1]._error_message.startswith("value.code is int32 in this record's schema but string")
