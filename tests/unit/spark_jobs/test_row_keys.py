"""Drop and ExtractTopic on the key (``target: key``) on the per-partition path (spark_jobs/transform/row_steps.py),
without Spark: Debezium's own records (tests/fixtures/debezium/orders.py, keys with their {schema,
payload} wrapper) decoded as the read task decodes them, then the chain, as Kafka Connect's
``$Key`` steps act (docs/transforms.md)."""

from __future__ import annotations

import json
from typing import Any

from spark_jobs.transform import row_transforms as rt
from tests.fixtures import orders as o
from tests.fixtures.debezium import orders as fx
from tests.unit.spark_jobs.test_row_transforms import MYSQL, _env, chain, decoded, job, rows

# fx.events(): 0-2 inserts of ids 1-3, 3-4 updates of 1 and 2, then 3 -> 4 (5 delete of 3, 6 its
# tombstone, 7 insert of 4), 2 -> 3 (8 delete of 2, 9 its tombstone, 10 insert of 3), 11 delete of 1, 12 its tombstone
DELETES, TOMBSTONES = [5, 8, 11], [6, 9, 12]
KEYLESS = "Drop: the key is null (dropped), so this delete has no key to find its row by"


def _run(*steps: dict[str, Any], records: list[tuple[bytes, bytes | None]] | None = None,
         headers: list[list[tuple[str, bytes]]] | None = None) -> list[dict[str, Any]]:
    assert rt.unserved(job(MYSQL, transforms=chain(*steps))) is None
    return rows(rt.apply(decoded(records or fx.events(), headers=headers), chain(*steps), "source_ts_ms"))


def test_extract_topic_on_the_key_routes_every_change_by_its_kafka_key() -> None:
    out = _run({"type": "ReplaceField", "renames": {"id": "no"}},
               {"type": "ExtractTopic", "target": "key", "field": "id"})
    # the older path's topics for these records: the key's id, a tombstone's and a delete's too
    assert [r["route"] for r in out] == ["1", "2", "3", "1", "2", "3", "3", "4", "2", "2", "3", "1", "1"]
    assert [r["error_message"] for r in out] == [None] * len(out)
    plain = _run({"type": "ExtractTopic", "target": "key", "field": "id"},
                 records=[_env(1), _env(2, "d"), (b'{"id": 3}', None), (b'"text"', _env(4)[1])])
    said = "ExtractTopic: key.id is missing or null (set skip_missing_or_null to keep the topic)"
    assert [(r["route"], r["error_message"]) for r in plain] == [("1", None), ("2", None), ("3", None),
                                                                 (fx.TOPIC, said)]


def test_after_a_value_to_key_the_key_is_the_values_fields() -> None:
    out = _run({"type": "ValueToKey", "fields": ["customer"]},
               {"type": "ExtractTopic", "target": "key", "field": "customer", "skip_missing_or_null": True})
    upserts = [i for i in range(len(out)) if i not in DELETES + TOMBSTONES]
    assert [out[i]["route"] for i in upserts] == [o.ROW_1["customer"], o.ROW_2["customer"], o.ROW_3["customer"],
                                                  o.ROW_1["customer"], o.ROW_2["customer"], o.ROW_3["customer"],
                                                  o.ROW_2["customer"]]
    # a delete keeps its row image through a ValueToKey (docs/transforms.md), so it has the key too; a
    # tombstone's image is its Kafka key, which has no customer: it keeps its topic
    assert [out[i]["route"] for i in DELETES] == [o.ROW_3["customer"], o.ROW_2["customer"], o.ROW_1["customer"]]
    assert [out[i]["route"] for i in TOMBSTONES] == [fx.TOPIC] * 3


def test_a_dropped_key_changes_no_upsert_and_fails_the_deletes_it_leaves_without_one() -> None:
    plain = _run()
    out = _run({"type": "Drop", "target": "key"})
    assert [(r["change_op"], r["image"]) for r in out] == [(r["change_op"], r["image"]) for r in plain]
    # the older path: "primary key field 'id' is missing or null" for each delete, its key being null
    assert [i for i, r in enumerate(out) if r["error_message"] == KEYLESS] == sorted(DELETES + TOMBSTONES)
    assert [r["error_message"] for i, r in enumerate(out) if i not in DELETES + TOMBSTONES] == [None] * 7
    # an ExtractTopic on the dropped key finds no field: it keeps the topic when told to
    kept = _run({"type": "Drop", "target": "key"},
                {"type": "ExtractTopic", "target": "key", "field": "id", "skip_missing_or_null": True})
    assert {r["route"] for r in kept} == {fx.TOPIC}


def test_a_dropped_key_fails_only_the_deletes_the_chain_still_has_at_its_end() -> None:
    headers = [[("purge", b"")] if i == 0 else [] for i in range(len(fx.events()))]
    steps = ({"type": "Drop", "target": "key", "predicate": {"type": "TopicNameMatches", "pattern": ".*orders"}},
             {"type": "TombstoneHandler", "behavior": "ignore"},
             {"type": "Drop", "predicate": {"type": "HasHeaderKey", "name": "purge"}})
    out = _run(*steps, headers=headers)
    # the TombstoneHandler dropped the deletes before the end (the older path drops their null values
    # too); the Drop of the value made a delete after it, which has no key
    assert [(i, r["change_op"], r["error_message"]) for i, r in enumerate(out) if r["change_op"] != "upsert"] == [
        (0, "delete", KEYLESS), *[(i, "", None) for i in sorted(DELETES + TOMBSTONES)]]
    # a ValueToKey gives the changes a key again; a Drop whose predicate does not hold leaves it
    for step in ({"type": "ValueToKey", "fields": ["id"]}, None):
        again = _run({"type": "Drop", "target": "key", "negate": True,
                      "predicate": {"type": "TopicNameMatches", "pattern": ".*orders"}} if step is None else steps[0],
                     *([step] if step else []))
        assert [r["error_message"] for r in again] == [None] * len(again)


def test_the_key_of_a_wrapped_and_of_a_plain_json_key_is_read_as_the_decode_reads_a_tombstones() -> None:
    wrapped = json.dumps({"schema": {"type": "struct", "fields": [{"field": "id", "type": "int64"},
                                                                  {"field": "region", "type": "string"}]},
                          "payload": {"id": 10, "region": "eu-1"}}).encode()
    records = [(wrapped, _env(10)[1]), (b'{"id": 11, "region": "us-2"}', None)]
    out = _run({"type": "ExtractTopic", "target": "key", "field": "region"}, records=records)
    assert [(r["route"], r["change_op"]) for r in out] == [("eu-1", "upsert"), ("us-2", "delete")]
