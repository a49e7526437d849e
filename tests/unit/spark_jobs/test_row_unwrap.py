"""ExtractNewRecordState anywhere in a chain, and its add_fields, on the per-partition path
(spark_jobs/transform/row_unwrap.py), without Spark: Debezium's own records decoded as the read task decodes
them, then the chain.

The records: tests/fixtures/debezium/orders.py (the MySQL connector's page, mysql.adoc "Change event
values", "Tombstone events") and tests/fixtures/debezium/postgres_toast.py (the PostgreSQL
connector's page, https://debezium.io/documentation/reference/stable/connectors/postgresql.html,
"create events": the source block with ``connector`` "postgresql" and the WAL position ``lsn``, the
envelope's ``ts_ms`` when the connector processed the event). What add_fields gives is Debezium's
New Record State Extraction page (https://debezium.io/documentation/reference/stable/transformations/
event-flattening.html, "Adding Debezium metadata to the Kafka record": ``add.fields=op,table,lsn,
source.ts_ms`` gives ``__op``, ``__table``, ``__lsn``, ``__source_ts_ms``; a field of a struct is
prefixed by the struct's name, ``__source_ts_ms``, and the envelope's own ``ts_ms`` is ``__ts_ms``).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pytest

from cdcflow.config import parse_pipeline
from connectors import images
from connectors.errors import ConfigError
from spark_jobs.transform import row_transforms as rt
from tests.fixtures import orders as o
from tests.fixtures.debezium import orders as fx
from tests.fixtures.debezium import postgres_toast as pg
from tests.unit.spark_jobs.test_row_transforms import CHAIN, MYSQL, decoded, job, rows

# fx.events(): 0-2 inserts of ids 1-3, 3-4 updates of 1 and 2, then 3 -> 4 (5 delete of 3, 6 its
# tombstone, 7 insert of 4), 2 -> 3 (8 delete of 2, 9 its tombstone, 10 insert of 3), 11 delete of 1, 12 its tombstone
DELETES, TOMBSTONES = [5, 8, 11], [6, 9, 12]
UNWRAP = {"type": "ExtractNewRecordState", "delete_handling": "none", "drop_tombstones": False}


def _through(*steps: dict[str, Any], headers: list[list[tuple[str, bytes]]] | None = None) -> list[dict[str, Any]]:
    chain = CHAIN.validate_python(list(steps))
    assert rt.unserved(job(MYSQL, transforms=chain)) is None
    out = rows(rt.apply(decoded(fx.events(), headers=headers), chain, "source_ts_ms"))
    assert [r["error_message"] for r in out] == [None] * len(out)
    return out


def test_steps_before_the_unwrap_act_on_the_record_with_its_envelope() -> None:
    """Before the unwrap a record's value is its envelope: a TombstoneHandler or a RecordIsTombstone
    there sees the three Kafka tombstones, not the three delete events (whose value is an envelope),
    as in Kafka Connect; after an unwrap with delete_handling none, a delete event is one too."""
    route = {"type": "RegexRouter", "regex": r"mysql-server-1\.inventory\.(.*)", "replacement": "shop_$1"}
    before = _through(route, {"type": "TombstoneHandler", "behavior": "ignore"}, UNWRAP)
    assert {r["route"] for r in before} == {"shop_orders"}
    assert [i for i, r in enumerate(before) if r["change_op"] == ""] == TOMBSTONES
    assert [i for i, r in enumerate(before) if r["change_op"] == "delete"] == DELETES
    assert [before[i]["image"]["id"] for i in DELETES] == ["3", "2", "1"]
    assert before[11]["image"]["customer"] == o.ROW_1B["customer"]  # the delete's before image, whole
    after = _through(UNWRAP, {"type": "TombstoneHandler", "behavior": "ignore"})
    assert [i for i, r in enumerate(after) if r["change_op"] == ""] == sorted(DELETES + TOMBSTONES)
    filtered = _through({"type": "Filter", "predicate": {"type": "RecordIsTombstone"}}, UNWRAP)
    assert [i for i, r in enumerate(filtered) if r["change_op"] == ""] == TOMBSTONES
    kept = _through({"type": "Filter", "predicate": {"type": "TopicNameMatches", "pattern": r".*\.customers"}},
                    {"type": "ExtractNewRecordState"})
    assert [r["image"]["id"] for r in kept if r["change_op"] == "upsert"] == ["1", "2", "3", "1", "2", "4", "3"]


def test_a_value_drop_before_the_unwrap_makes_a_tombstone_which_the_unwrap_drops_or_keeps() -> None:
    """Kafka Connect's Drop makes the value null: a tombstone, which ExtractNewRecordState drops
    (drop_tombstones) or passes on, a delete of its key. So the insert of id 4 (header purge) changes
    nothing, or deletes its row, and the delete of id 1 (header purge too) stays a delete."""
    headers = [[("purge", b"")] if i in (7, 11) else [] for i in range(len(fx.events()))]
    drop = {"type": "Drop", "predicate": {"type": "HasHeaderKey", "name": "purge"}}
    dropped = _through(drop, {"type": "ExtractNewRecordState"}, headers=headers)
    assert [(i, r["change_op"]) for i, r in enumerate(dropped) if i in (7, 11)] == [(7, ""), (11, "")]
    kept = _through(drop, {**UNWRAP, "delete_handling": "drop"}, headers=headers)
    assert [(i, r["change_op"], r["image"]["id"]) for i, r in enumerate(kept) if i in (5, 7, 11)] == [
        (5, "", "3"), (7, "delete", "4"), (11, "delete", "1")]  # a delete event dropped, the tombstones kept


def test_steps_on_the_key_before_the_unwrap_see_the_kafka_key() -> None:
    out = _through({"type": "ExtractTopic", "target": "key", "field": "id"}, {"type": "SetSchemaMetadata",
                                                                             "name": "shop.Order"}, UNWRAP)
    assert [r["route"] for r in out] == [str(json.loads(k)["payload"]["id"]) for k, _v in fx.events()]


@pytest.mark.parametrize(("step", "said"), [
    ({"type": "InsertField", "static_field": "src", "static_value": "shop"}, ("InsertField would act on the field "
     "'src' of the envelope")),
    ({"type": "Cast", "spec": {"qty": "int32", "id": "int64"}}, "Cast would act on the fields 'qty', 'id'"),
    ({"type": "ValueToKey", "fields": ["id"]}, "ValueToKey would act on the field 'id'"),
    ({"type": "ExtractField", "field": "after"}, "ExtractField would act on the field 'after'"),
    ({"type": "Flatten"}, "Flatten would act on every field of the envelope"),
])
def test_a_step_on_the_values_fields_before_the_unwrap_is_refused_naming_the_field(step: dict[str, Any],
                                                                                   said: str) -> None:
    text = json.dumps({"name": "p", "source": {"topics": ["a.b.c"]}, "transforms": [
        step, {"type": "ExtractNewRecordState"}, {"type": "ExtractNewRecordState"}],
        "sinks": [{"type": "mysql", "table": "t", "create_table": True}]})
    with pytest.raises(ConfigError) as exc:
        parse_pipeline(text, "p.yaml")
    message = str(exc.value)
    assert "transforms.0.type: before ExtractNewRecordState the value is Debezium's envelope (op, before, after, " \
           "source, ts_ms), so " + said in message, message
    assert ("keeps only the envelope's 'after': put it after the ExtractNewRecordState; got "
            f"'{step['type']}'") in message
    assert ("transforms.2.type: a second ExtractNewRecordState: the first one already unwrapped the envelope"
            in message)
    # on the key (left as Kafka Connect's record has it), or a record's step, it is not refused
    keyed = json.loads(text)
    keyed["transforms"] = [{"type": "Drop", "target": "key"}, {"type": "TimestampRouter"},
                           {"type": "ExtractNewRecordState"}]
    assert len(parse_pipeline(json.dumps(keyed), "p.yaml").transforms) == 3


def _typed(table: pa.Table, name: str) -> set[pa.DataType]:
    image = images.compact(table.column("image").combine_chunks())
    return {image.field(i).type.field(name).type for i in range(image.type.num_fields)
            if image.field(i).type.get_field_index(name) >= 0}


@pytest.mark.parametrize("versioning", ["source_ts_ms", "kafka_offset"])
def test_added_fields_are_the_envelopes_ts_ms_lsn_connector_and_source_ts_ms(versioning: str) -> None:
    """PostgreSQL's create, update and delete (then its tombstone) through an unwrap with every
    add_field; the numbers typed as Debezium's schema has them (int64); the tombstone (a delete of its
    key) gets them null."""
    at = 1559033904863  # the page's create event: source.ts_ms, and the lsn
    events = [pg.event("c", at, 24023128, None, pg.row(1, "Anne", "Kretchmar", "annek@noanswer.org", None)),
              pg.update(at + 1000, 24023160, pg.row(1, "Anne Marie", "Kretchmar", "annek@noanswer.org", None)),
              *pg.delete(at + 2000, 24023200, 1)]
    steps = CHAIN.validate_python([{**UNWRAP, "delete_handling": "rewrite", "add_fields": [
        "op", "table", "ts_ms", "lsn", "connector", "source.ts_ms"]}])
    assert rt.unserved(replace(job(MYSQL, transforms=steps), versioning=versioning)) is None
    for column_wise in (True, False):
        changed = rt.apply(decoded(events, column_wise, topic=pg.TOPIC, versioning=versioning), steps, versioning)
        added = [{k: v for k, v in (r["image"] or {}).items() if k.startswith("__")} for r in rows(changed)]
        assert added == [
            {"__deleted": d, "__op": op, "__table": "customers", "__ts_ms": str(t + 150), "__lsn": str(lsn),
             "__connector": "postgresql", "__source_ts_ms": str(t)}
            for d, op, t, lsn in (("false", "c", at, 24023128), ("false", "u", at + 1000, 24023160),
                                  ("true", "d", at + 2000, 24023200))] + [dict.fromkeys(added[0])]
        if column_wise:
            assert {n: _typed(changed, n) for n in ("__ts_ms", "__lsn", "__source_ts_ms", "__connector")} == {
                "__ts_ms": {pa.int64()}, "__lsn": {pa.int64()}, "__source_ts_ms": {pa.int64()},
                "__connector": {pa.string()}}


def test_a_connector_without_an_lsn_adds_a_null_one_and_the_table_gets_bigints() -> None:
    """MySQL's source block has no lsn (mysql.adoc "Change event values"): ``__lsn`` is null."""
    steps = CHAIN.validate_python([{"type": "ExtractNewRecordState", "add_fields": ["ts_ms", "lsn", "connector"]}])
    out = rows(rt.apply(decoded(fx.events()[:1]), steps, "source_ts_ms"))
    assert {k: v for k, v in out[0]["image"].items() if k.startswith("__")} == {
        "__ts_ms": str(o.T0 * 1000 + 150), "__lsn": None, "__connector": "mysql"}
    # an envelope without the wrapper, written over lines, beside the wrapped one: read value by value
    plain = json.loads(fx.events()[0][1])["payload"]
    records = [fx.events()[0], (fx.events()[0][0], json.dumps({**plain, "ts_ms": 7}, indent=1).encode())]
    out = rows(rt.apply(decoded(records), steps, "source_ts_ms"))
    assert [r["image"]["__ts_ms"] for r in out] == [str(o.T0 * 1000 + 150), "7"]
    described = json.loads(rt.described(steps, json.dumps({"columns": [{"name": "id", "type": "INT",
                                                                        "nullable": False}], "key": ["id"]})))
    assert [(c["name"], c["type"]) for c in described["columns"]] == [
        ("id", "INT"), ("__ts_ms", "BIGINT"), ("__lsn", "BIGINT"), ("__connector", "LONGTEXT")]
