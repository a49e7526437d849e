"""The steps on the whole record of the per-partition path (spark_jobs/transform/row_steps.py: Drop,
SetSchemaMetadata, TimestampRouter, ExtractTopic, ValueToKey), without Spark: Debezium's own records
(tests/fixtures/debezium/orders.py) decoded as the read task decodes them, then the chain. The older
path's rows for the same chains: tests/integration/spark_jobs/test_row_transforms.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from cdcflow.config import MySqlSinkConfig
from spark_jobs.transform import row_transforms as rt
from tests.fixtures import orders as o
from tests.fixtures.debezium import orders as fx
from tests.unit.spark_jobs.test_row_transforms import CHAIN, MYSQL, _env, chain, decoded, job, rows

# fx.events(): 0-2 inserts of ids 1-3, 3-4 updates of 1 and 2, then 3 -> 4 (5 delete of 3, 6 its
# tombstone, 7 insert of 4), 2 -> 3 (8 delete of 2, 9 its tombstone, 10 insert of 3), 11 delete of 1, 12 its tombstone
DELETES, TOMBSTONES = [5, 8, 11], [6, 9, 12]


def _run(*steps: dict[str, Any], headers: list[list[tuple[str, bytes]]] | None = None,
         records: list[tuple[bytes, bytes | None]] | None = None) -> list[dict[str, Any]]:
    return rows(rt.apply(decoded(records or fx.events(), headers=headers), chain(*steps), "source_ts_ms"))


def test_the_fixtures_order_is_the_one_these_tests_name() -> None:
    ops = [r["change_op"] for r in _run()]
    assert [i for i, op in enumerate(ops) if op == "delete"] == sorted(DELETES + TOMBSTONES)
    assert [v is None for _k, v in fx.events()] == [i in TOMBSTONES for i in range(len(ops))]


def test_a_value_drop_makes_an_upsert_a_delete_that_keeps_its_row_image() -> None:
    headers = [[("purge", b"")] if i in (0, 5) else [] for i in range(len(fx.events()))]
    out = _run({"type": "Drop", "predicate": {"type": "HasHeaderKey", "name": "purge"}},
               {"type": "TombstoneHandler", "behavior": "fail",
                "predicate": {"type": "TopicNameMatches", "pattern": "never"}, "negate": True},
               headers=headers)
    plain = _run()
    assert out[0]["change_op"] == "delete" and out[0]["image"] == plain[0]["image"]  # found by its id
    assert [r["change_op"] for r in out[1:]] == [r["change_op"] for r in plain[1:]]
    # after the Drop it is a tombstone, as on the older path, where its value is null
    failed = [i for i, r in enumerate(out) if r["error_message"]]
    assert failed == sorted([0, *DELETES, *TOMBSTONES])
    everything = _run({"type": "Drop"})
    assert {r["change_op"] for r in everything} == {"delete"}


def test_set_schema_metadata_changes_no_row_on_the_key_or_the_value() -> None:
    for target in ("value", "key"):
        step = {"type": "SetSchemaMetadata", "target": target, "name": "shop.Order", "version": 3}
        assert _run(step) == _run()
        assert rt.unserved(job(MYSQL, transforms=chain(step))) is None


def test_timestamp_router_names_the_topic_by_the_kafka_timestamp_in_utc() -> None:
    # the records' Kafka timestamps: 1_700_000_000_000 + offset ms (2023-11-14 22:13:20.000 UTC …)
    out = _run({"type": "TimestampRouter"},
               {"type": "TimestampRouter", "topic_format": "ts_${topic}_${timestamp}topic",
                "timestamp_format": "HH:mm:ss.SSS", "predicate": {"type": "RecordIsTombstone"}})
    assert out[0]["route"] == f"{fx.TOPIC}-20231114"
    assert out[TOMBSTONES[0]]["route"] == f"ts_{fx.TOPIC}-20231114_22:13:20.{TOMBSTONES[0]:03d}topic"
    assert out[DELETES[0] - 1]["route"] == f"{fx.TOPIC}-20231114"  # an upsert: not a tombstone
    fixed = _run({"type": "TimestampRouter", "topic_format": "archive"})
    assert {r["route"] for r in fixed} == {"archive"}


def test_a_timestamp_format_is_written_as_simple_date_format_writes_it_and_a_week_field_refused() -> None:
    with pytest.raises(ValidationError, match="'w' \\(the week of the year\\) is a week field: SimpleDateFormat "
                                              "counts weeks by the JVM's default locale"):
        chain({"type": "TimestampRouter", "timestamp_format": "yyyy-'w'ww"})
    # F (the 14th: (14 - 1) / 7 + 1), GGGG and brackets as SimpleDateFormat writes them
    out = _run({"type": "TimestampRouter", "timestamp_format": "F_GGGG_[yy]"})
    assert out[0]["route"] == f"{fx.TOPIC}-2_AD_[23]"  # 2023-11-14 22:13:20 UTC
    # Java's patterns beyond the digits: quoted text, names, a 12-hour clock, zones (UTC), the era, the day of
    # the year and its number in the week
    out = _run({"type": "TimestampRouter", "timestamp_format": "yy_MMM_dd'T'hha_EEEE_X_G_DDD_u_z"})
    assert rt.unserved(job(MYSQL, transforms=chain({"type": "TimestampRouter",
                                                    "timestamp_format": "yy_MMM_dd'T'hha_EEEE_X_G_DDD_u_z"}))) is None
    assert out[0]["route"] == f"{fx.TOPIC}-23_Nov_14T10PM_Tuesday_Z_AD_318_2_UTC"  # 2023-11-14 22:13:20 UTC


def test_extract_topic_routes_upserts_and_deletes_by_their_row_image() -> None:
    out = _run({"type": "ReplaceField", "renames": {"id": "table_no"}}, {"type": "ExtractTopic", "field": "table_no"})
    assert [r["error_message"] for r in out] == [None] * len(out)
    assert [r["route"] for r in out] == [r["image"]["table_no"] for r in out]
    # a delete's before image holds the field: it reaches the table its row was written to; a
    # tombstone's image is its key, renamed too: it holds the field here
    assert [out[i]["route"] for i in DELETES] == [out[i]["route"] for i in TOMBSTONES] == ["3", "2", "1"]


def test_extract_topic_fails_a_change_without_the_field_or_keeps_its_topic_when_told() -> None:
    records = [_env(1, dest="shop_a"), _env(2, dest=None), _env(3), _env(4, "d", dest="shop_b"),
               (json.dumps({"id": 5}).encode(), None), _env(6, dest=7)]
    out = _run({"type": "ExtractTopic", "field": "dest"}, records=records)
    said = "ExtractTopic: value.dest is missing or null (set skip_missing_or_null to keep the topic)"
    assert [(r["route"], r["error_message"]) for r in out] == [
        ("shop_a", None), (fx.TOPIC, said), (fx.TOPIC, said), ("shop_b", None), (fx.TOPIC, said), ("7", None)]
    kept = _run({"type": "ExtractTopic", "field": "dest", "skip_missing_or_null": True,
                 "predicate": {"type": "TopicNameMatches", "pattern": ".*orders"}}, records=records)
    assert [(r["route"], r["error_message"]) for r in kept] == [
        ("shop_a", None), (fx.TOPIC, None), (fx.TOPIC, None), ("shop_b", None), (fx.TOPIC, None), ("7", None)]


def test_value_to_key_fails_an_upsert_whose_field_is_null_and_leaves_deletes() -> None:
    records = [_env(1, a=1, b="x"), _env(2, a=None, b=None), _env(3, b="y"), _env(4, "d", a=None),
               (json.dumps({"id": 5}).encode(), None)]
    out = _run({"type": "ValueToKey", "fields": ["a", "b"]}, records=records)
    assert [(r["change_op"], r["error_message"]) for r in out] == [
        ("upsert", None), ("upsert", "ValueToKey: value.a is null"), ("upsert", "ValueToKey: value.a is null"),
        ("delete", None), ("delete", None)]
    assert [r["image"] for r in out] == [r["image"] for r in _run(records=records)]
    first = rows(rt.apply(decoded(fx.events()), chain({"type": "ValueToKey", "fields": ["id", "note"]}),
                          "source_ts_ms"))
    notes = [o.ROW_1["note"], o.ROW_2["note"]]
    assert [r["error_message"] is not None for r in first[:2]] == [n is None for n in notes]


@pytest.mark.parametrize("step", [
    {"type": "Cast", "target": "key", "spec": {"id": "string"}},
    {"type": "MaskField", "target": "key", "fields": ["id"]},
    {"type": "Flatten", "target": "key"}])
def test_the_steps_on_the_keys_fields_are_served(step: dict[str, Any]) -> None:
    """They run on the key (spark_jobs/transform/row_keys.py, tests/unit/spark_jobs/test_row_key_steps.py)."""
    assert rt.unserved(job(MYSQL, transforms=chain(step))) is None
    assert [r["image"] for r in _run(step)] == [r["image"] for r in _run()]  # the value is left as it was


def test_value_to_key_into_a_table_from_the_record_schema_keys_it_by_those_fields() -> None:
    steps = chain({"type": "ValueToKey", "fields": ["id"]})
    assert rt.unserved(job(MYSQL, transforms=steps)) is None
    keyed = MySqlSinkConfig(type="mysql", name="t", table="{topic}", create_table=True, pk_mode="record_key")
    assert rt.unserved(job(keyed, transforms=steps, value_converter="json_schema")) is None
    # the table's key: the ValueToKey's fields, not the Kafka key schema's (chains.key_after)
    schema = json.dumps({"columns": [{"name": "id", "type": "BIGINT", "nullable": False},
                                     {"name": "customer", "type": "LONGTEXT", "nullable": True}],
                         "key": ["id"], "properties": {}})
    moved = json.loads(rt.described(chain({"type": "ValueToKey", "fields": ["customer"]}), schema))
    assert moved["key"] == ["customer"]
    assert moved["columns"][1] == {"name": "customer", "type": "VARCHAR(255)", "nullable": False}
    assert rt.unserved(job(MYSQL, transforms=CHAIN.validate_python([
        {"type": "ExtractNewRecordState"}, {"type": "Drop"}, {"type": "SetSchemaMetadata", "name": "n"},
        {"type": "TimestampRouter"}, {"type": "ExtractTopic", "field": "customer"}]))) is None


def test_an_insert_field_whose_fields_the_next_replace_field_drops_is_skipped_and_changes_nothing() -> None:
    insert = {"type": "InsertField", "static_field": "src", "static_value": "shop", "offset_field": "off"}
    steps = chain(insert, {"type": "ReplaceField", "exclude": ["src", "off", "note"]})
    assert rt.undone(steps, 1) and not rt.undone(steps, 0) and not rt.undone(steps, 2)
    for kept in ({"type": "ReplaceField", "exclude": ["src"]},  # off stays
                 {"type": "ReplaceField", "exclude": ["src", "off"], "renames": {"off": "o"}},
                 {"type": "Cast", "spec": {"id": "int64"}}):
        assert not rt.undone(chain(insert, kept), 1), kept
    assert rt.undone(chain(insert, {"type": "ReplaceField", "include": ["id", "customer"]}), 1)
    # the rows are those of the chain without both steps' fields: the offsets and the text never appear
    assert _run(insert, {"type": "ReplaceField", "exclude": ["src", "off", "note"]}) == _run(
        {"type": "ReplaceField", "exclude": ["note"]})
    added = _run(insert)
    assert {r["image"]["src"] for r in added if r["change_op"] == "upsert"} == {"shop"}
    assert [r["image"]["off"] for r in added if r["change_op"] == "upsert"] == [
        str(r["offset"]) for r in added if r["change_op"] == "upsert"]
