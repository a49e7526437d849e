"""Converters and every transform, on real records through Spark (local)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from cdcflow.errors import ConfigError
from spark_jobs.converters import to_records
from spark_jobs.records import records_to_changes
from spark_jobs.transform_config import TransformConfig
from spark_jobs.transforms import apply_chain

RAW = ("topic string, partition int, offset bigint, timestamp bigint, key binary, value binary, "
       "headers array<struct<key:string,value:binary>>")
T = TypeAdapter(TransformConfig)
TS = 1_767_225_600_000  # 2026-01-01T00:00:00Z

pytestmark = pytest.mark.spark


def frame(spark: Any, values: list[Any], keys: list[Any] | None = None, topic: str = "db.shop.orders",
          headers: list[Any] | None = None) -> Any:
    def enc(x: Any) -> bytes | None:
        return None if x is None else x if isinstance(x, bytes) else json.dumps(x).encode()

    keys = keys or [None] * len(values)
    headers = headers or [[] for _ in values]
    rows = [(topic, 0, i, TS + i * 1000, enc(k), enc(v), h) for i, (k, v, h) in enumerate(zip(keys, values, headers, strict=True))]
    return spark.createDataFrame(rows, RAW)


def run(spark: Any, values: list[Any], chain: list[dict[str, Any]], keys: list[Any] | None = None,
        converter: str = "json", key_converter: str = "json", **kw: Any) -> list[Any]:
    records = to_records(frame(spark, values, keys, **kw), key_converter, converter)
    return apply_chain(records, [T.validate_python(c) for c in chain]).orderBy("offset").collect()


def val(row: Any) -> dict[str, Any] | None:
    return None if row.value is None else row.value.asDict(recursive=True)


# -- converters ------------------------------------------------------------------------------------
def test_json_converter_infers_one_schema_and_flags_undecodable_values(spark: Any) -> None:
    rows = run(spark, [{"id": 1, "n": "a"}, {"id": 2, "extra": True}, b"{nope", b"[1]", None], [])
    assert val(rows[0]) == {"extra": None, "id": 1, "n": "a"} and val(rows[1]) == {"extra": True, "id": 2, "n": None}
    assert [(r._error_stage, r._error_message) for r in rows[2:4]] == [
        ("converter", "value is not valid JSON (value.converter json)"),
        ("converter", "value is JSON but not an object (value.converter json)")]
    assert rows[4].value is None and rows[4]._error_stage is None  # a tombstone


def test_json_schema_converter_types_come_from_the_connect_schema(spark: Any) -> None:
    schema = {"type": "struct", "name": "shop.orders.Value", "fields": [
        {"field": "id", "type": "int32"}, {"field": "price", "type": "float64"}, {"field": "tags", "type": "array",
                                                                                  "items": {"type": "string"}}]}
    rows = run(spark, [{"schema": schema, "payload": {"id": 7, "price": 2.5, "tags": ["x"]}}, {"id": 1}], [],
               converter="json_schema")
    assert val(rows[0]) == {"id": 7, "price": 2.5, "tags": ["x"]}
    assert rows[0]._value_schema_name == "shop.orders.Value"
    assert rows[1]._error_message == "value is not a {schema, payload} JSON envelope (value.converter json_schema)"
    records = to_records(frame(spark, [{"schema": schema, "payload": {"id": 7, "price": 2.5, "tags": []}}]), "json", "json_schema")
    assert records.schema["value"].dataType.simpleString() == "struct<id:int,price:double,tags:array<string>>"


def test_string_and_bytes_converters(spark: Any) -> None:
    rows = run(spark, [b"hello", b"\xff\xfe"], [], converter="string")
    assert rows[0].value == "hello" and rows[1]._error_stage == "converter"
    assert "not valid UTF-8" in rows[1]._error_message
    rows = run(spark, [b"\x00\x01"], [], converter="bytes")
    assert bytes(rows[0].value) == b"\x00\x01"
    hoisted = run(spark, [b"hello"], [{"type": "HoistField", "field": "line"}], converter="string")
    assert val(hoisted[0]) == {"line": "hello"}


# -- transforms ------------------------------------------------------------------------------------
def envelope(op: str, before: Any, after: Any, ts: int = 100) -> dict[str, Any]:
    return {"op": op, "before": before, "after": after, "source": {"ts_ms": ts, "table": "orders", "db": "shop"}}


def test_extract_new_record_state_delete_modes_and_added_fields(spark: Any) -> None:
    values = [envelope("c", None, {"id": 1, "n": "a"}), envelope("d", {"id": 1, "n": "a"}, None, 200), None,
              {"no": "envelope"}]
    keys = [{"id": 1}] * 4
    drop = run(spark, values, [{"type": "ExtractNewRecordState"}], keys)
    assert [val(r) for r in drop if r._error_stage is None] == [{"id": 1, "n": "a"}]
    assert drop[-1]._error_message == "not a Debezium change event: the value has no 'op'"
    rewrite = run(spark, values, [{"type": "ExtractNewRecordState", "delete_handling": "rewrite",
                                   "add_fields": ["op", "source.ts_ms", "table"]}], keys)
    assert val(rewrite[0]) == {"id": 1, "n": "a", "__deleted": "false", "__op": "c", "__source_ts_ms": 100, "__table": "orders"}
    assert val(rewrite[1])["__deleted"] == "true" and rewrite[1]._source_ts_ms == 200
    none = run(spark, values, [{"type": "ExtractNewRecordState", "delete_handling": "none", "drop_tombstones": False}], keys)
    assert [r.value is None for r in none[:3]] == [False, True, True]


def test_cast_marks_records_it_cannot_cast(spark: Any) -> None:
    rows = run(spark, [{"id": "5", "p": "1.5"}, {"id": "x", "p": "2"}], [{"type": "Cast", "spec": {"id": "int64", "p": "float64"}}])
    assert val(rows[0]) == {"id": 5, "p": 1.5} and rows[0]._error_stage is None
    assert (rows[1]._error_stage, rows[1]._error_message) == ("transform", "Cast: value.id = 'x' is not a valid int64")


def test_drop_extract_field_hoist_field(spark: Any) -> None:
    rows = run(spark, [{"a": {"b": 1}}], [{"type": "ExtractField", "field": "a"}, {"type": "HoistField", "field": "wrapped"}])
    assert val(rows[0]) == {"wrapped": {"b": 1}}
    rows = run(spark, [{"a": 1}, {"a": 2}], [{"type": "Drop", "target": "value",
                                              "predicate": {"type": "Sql", "condition": "value.a = 2"}}])
    assert [val(r) for r in rows] == [{"a": 1}, None]


def test_extract_topic_and_routers(spark: Any) -> None:
    rows = run(spark, [{"dest": "Orders"}, {"other": 1}], [{"type": "ExtractTopic", "field": "dest"}])
    assert rows[0].topic == "Orders" and rows[1]._error_stage == "transform"
    rows = run(spark, [{"a": 1}], [{"type": "RegexRouter", "regex": r"db\.(\w+)\.(\w+)", "replacement": "$1_$2"}])
    assert rows[0].topic == "shop_orders"
    rows = run(spark, [{"a": 1}], [{"type": "TimestampRouter", "topic_format": "${topic}-${timestamp}",
                                    "timestamp_format": "yyyyMM"}])
    assert rows[0].topic == "db.shop.orders-202601"


def test_filter_with_every_predicate_and_negation(spark: Any) -> None:
    values = [{"a": 1}, {"a": 200}, None]
    headers = [[{"key": "skip", "value": b"1"}], [], []]
    cases = [
        ({"type": "Sql", "condition": "value.a > 100"}, False, [0, 2]),
        ({"type": "Sql", "condition": "value.a > 100"}, True, [1]),
        ({"type": "RecordIsTombstone"}, False, [0, 1]),
        ({"type": "HasHeaderKey", "name": "skip"}, False, [1, 2]),
        ({"type": "TopicNameMatches", "pattern": r"db\..*"}, False, []),
        ({"type": "TopicNameMatches", "pattern": r"other"}, False, [0, 1, 2]),
    ]
    for predicate, negate, kept in cases:
        rows = run(spark, values, [{"type": "Filter", "predicate": predicate, "negate": negate}], headers=headers)
        assert [r.offset for r in rows] == kept, (predicate, negate)
    # records that already failed are never filtered away: they must reach the DLQ
    rows = run(spark, [{"id": "x"}], [{"type": "Cast", "spec": {"id": "int32"}}, {"type": "Filter"}])
    assert len(rows) == 1 and rows[0]._error_stage == "transform"


def test_flatten_insert_mask_replace(spark: Any) -> None:
    rows = run(spark, [{"id": 1, "addr": {"city": "Oslo", "geo": {"lat": 1.5}}, "email": "a@b", "n": 3}], [
        {"type": "Flatten", "delimiter": "_"},
        {"type": "InsertField", "topic_field": "t", "partition_field": "p", "offset_field": "o",
         "timestamp_field": "ts", "static_field": "src", "static_value": "cdcflow"},
        {"type": "MaskField", "fields": ["email", "n"]},
        {"type": "ReplaceField", "exclude": ["p"], "renames": {"addr_city": "city"}},
    ])
    v = val(rows[0])
    assert v["city"] == "Oslo" and v["addr_geo_lat"] == 1.5 and v["email"] == "" and v["n"] == 0
    assert (v["t"], v["o"], v["src"]) == ("db.shop.orders", 0, "cdcflow") and "p" not in v
    assert str(v["ts"]).startswith("2026-01-01")
    rows = run(spark, [{"id": 1, "email": "a@b"}], [{"type": "MaskField", "fields": ["email"], "replacement": "***"},
                                                     {"type": "ReplaceField", "include": ["email"]}])
    assert val(rows[0]) == {"email": "***"}


def test_timestamp_converter_and_set_schema_metadata(spark: Any) -> None:
    rows = run(spark, [{"at": TS}], [{"type": "TimestampConverter", "field": "at",
                                                      "target_type": "string", "format": "yyyy-MM-dd"}])
    assert val(rows[0]) == {"at": "2026-01-01"}
    rows = run(spark, [{"at": "2026-01-02 03:04:05"}, {"at": "nope"}], [
        {"type": "TimestampConverter", "field": "at", "target_type": "unix", "format": "yyyy-MM-dd HH:mm:ss"},
        {"type": "SetSchemaMetadata", "name": "shop.Order", "version": 3}])
    assert val(rows[0]) == {"at": TS + 86_400_000 + 3 * 3600_000 + 4 * 60_000 + 5_000}
    assert rows[1]._error_message == "TimestampConverter: value.at = 'nope' is not a timestamp in format yyyy-MM-dd HH:mm:ss"
    assert (rows[0]._value_schema_name, rows[0]._value_schema_version) == ("shop.Order", 3)


def test_tombstone_handler_and_value_to_key(spark: Any) -> None:
    rows = run(spark, [{"id": 1}, None], [{"type": "TombstoneHandler", "behavior": "ignore"}])
    assert [r.offset for r in rows] == [0]
    rows = run(spark, [{"id": 1}, None], [{"type": "TombstoneHandler", "behavior": "fail"}])
    assert rows[1]._error_stage == "transform"
    rows = run(spark, [{"id": 4, "n": "x"}], [{"type": "ValueToKey", "fields": ["id"]}])
    assert rows[0].key.asDict() == {"id": 4}


def test_custom_sql_and_python_transforms(spark: Any) -> None:
    rows = run(spark, [{"price": 2, "qty": 3}], [
        {"type": "SqlExpression", "fields": {"total": "value.price * value.qty", "topic": "upper(topic)"}},
        {"type": "Python", "function": "tests.unit.custom_transforms.add_ten", "options": {"field": "total"}}])
    assert val(rows[0]) == {"price": 2, "qty": 3, "total": 16, "topic": "DB.SHOP.ORDERS"}


def test_config_errors_name_the_step_and_field(spark: Any) -> None:
    with pytest.raises(ValidationError, match="Flatten changes the record's shape, so it cannot take a predicate"):
        T.validate_python({"type": "Flatten", "predicate": {"type": "RecordIsTombstone"}})
    with pytest.raises(ValidationError, match="target_type string needs a format"):
        T.validate_python({"type": "TimestampConverter", "field": "x", "target_type": "string"})
    with pytest.raises(ConfigError, match=r"transforms.1 \(ExtractField\): ExtractField: value has no field 'nope'"):
        run(spark, [{"a": 1}], [{"type": "Cast", "spec": {"a": "int8"}}, {"type": "ExtractField", "field": "nope"}])


def test_records_become_changes_with_versions(spark: Any) -> None:
    records = to_records(frame(spark, [envelope("c", None, {"id": 1}, 50), None], [{"id": 1}, {"id": 1}]), "json", "json")
    chain = [T.validate_python({"type": "ExtractNewRecordState", "drop_tombstones": False})]
    changes = records_to_changes(apply_chain(records, chain), "source_ts_ms").orderBy("offset").collect()
    assert [(c.change_op, c.image) for c in changes] == [("upsert", {"id": "1"}), ("delete", {"id": "1"})]
    assert changes[0].version == 50 * (1 << 20) and changes[1].version is None
