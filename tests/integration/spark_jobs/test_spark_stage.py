"""The Spark stage of the one window path (spark_jobs/transform/spark_stage.py): SqlExpression, Sql predicates
and Python run in Spark over the typed record frame, between the per-partition steps, and the rows
and documents are read back against the values the source database held.

The records are Debezium's MySQL connector's own (tests/fixtures/debezium/orders.py: the JsonConverter
with schemas, per the pages that module names).
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from cdcflow import cdcgen, runner
from cdcflow.config import load_pipeline
from cdcflow.state import StateStore
from connectors.errors import ConfigError
from connectors.kafka.dlq import DeadLetter
from tests.fixtures import orders as o
from tests.fixtures.debezium import orders as fx
from tests.helpers import bootstrap, es_docs, mysql_engine, read_topic, unique, write_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.services("kafka", "mysql", "elasticsearch", "spark")]

UNWRAP = {"type": "ExtractNewRecordState", "delete_handling": "none", "drop_tombstones": False}
# two Spark stages: SqlExpression, then MaskField under a Sql predicate (evaluated by the first
# stage), then a Python function
CHAIN = [
    UNWRAP,
    {"type": "SqlExpression", "fields": {"doubled": "value.amount * 2", "buyer": "upper(value.customer)",
                                         "day": "date_format(value.created, 'yyyy-MM-dd')"}},
    {"type": "MaskField", "fields": ["note"], "replacement": "***",
     "predicate": {"type": "Sql", "condition": "value.paid = 0"}},
    {"type": "Python", "function": "tests.unit.custom_transforms.add_ten", "options": {"field": "doubled"}},
]
COLUMNS = [{"name": "id", "type": "INT"}, {"name": "buyer", "type": "VARCHAR(64)"},
           {"name": "doubled", "type": "DECIMAL(14,2)"}, {"name": "note", "type": "TEXT"},
           {"name": "day", "type": "VARCHAR(10)"}]



def _pipeline(config_dir: Path, tag: str, topic: str, chain: list[dict[str, Any]]) -> Any:
    return load_pipeline(write_pipeline(
        config_dir, tag, topic, tag, transforms=chain,
        source={"key_converter": "json_schema", "value_converter": "json_schema"},
        sinks=[{"type": "mysql", "name": "m", "conn_id": "cdcflow_mysql", "table": tag, "create_table": True,
                "primary_key": ["id"], "columns": COLUMNS},
               {"type": "elasticsearch", "name": "es", "conn_id": "cdcflow_elasticsearch", "index": tag,
                "id_fields": ["id"]}]))


def _want(row: o.Row) -> dict[str, Any]:
    return {"id": row["id"], "buyer": row["customer"].upper(), "doubled": row["amount"] * 2 + 10,
            "note": "***" if row["paid"] == 0 else row["note"], "day": row["created"].strftime("%Y-%m-%d")}


def test_sql_expressions_a_sql_predicate_and_a_python_function_give_the_sources_rows_and_documents(
        config_dir: Path, store: StateStore, spark: Any) -> None:
    tag = unique("sstage")
    topic = f"{tag}.inventory.orders"
    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(k, v) for k, v in fx.events()], partitions=2)
    stats = runner.run_window(_pipeline(config_dir, tag, topic, CHAIN), "w1", store=store, spark=spark)

    want = [_want(row) for _id, row in sorted(o.FINAL.items())]
    with mysql_engine().connect() as conn:
        got = [dict(r._mapping) for r in conn.exec_driver_sql(
            f"SELECT id, buyer, doubled, note, day FROM `{tag}` ORDER BY id")]
    assert got == want
    docs = es_docs(tag)
    assert sorted(docs) == [str(w["id"]) for w in want]  # id 1 deleted, 2 moved to 3
    for w in want:
        doc = docs[str(w["id"])]
        assert (doc["buyer"], Decimal(str(doc["doubled"])), doc["note"], doc["day"]) == (
            w["buyer"], w["doubled"], w["note"], w["day"])
        assert doc["customer"] == o.FINAL[w["id"]]["customer"]  # a field no step touched
    assert stats["records"] == len(fx.events()) and stats["dead_lettered"] == 0


def test_a_python_function_that_drops_records_and_a_filter_by_sql_change_only_the_others(
        config_dir: Path, store: StateStore, spark: Any) -> None:
    """A Filter under a Sql predicate drops the paid rows' changes (their deletes too: a delete's value is
    null, so the predicate is not true for it and the delete stays)."""
    tag = unique("sfilter")
    topic = f"{tag}.inventory.orders"
    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(k, v) for k, v in fx.events()])
    chain = [UNWRAP, {"type": "Filter", "predicate": {"type": "Sql", "condition": "value.paid = 1"}},
             {"type": "SqlExpression", "fields": {"doubled": "value.amount * 2", "buyer": "value.customer",
                                                  "day": "'-'"}}]
    stats = runner.run_window(_pipeline(config_dir, tag, topic, chain), "w1", store=store, spark=spark)
    with mysql_engine().connect() as conn:
        got = [tuple(r) for r in conn.exec_driver_sql(f"SELECT id, buyer, doubled FROM `{tag}` ORDER BY id")]
    # of the final rows only id 3 (row 2, paid 0) passes the filter; the unpaid rows' changes are all kept
    assert got == [(3, o.ROW_2B["customer"], o.ROW_2B["amount"] * 2)]
    assert stats["records"] == len(fx.events()) and stats["dead_lettered"] == 0


@pytest.mark.parametrize(("step", "words"), [
    ({"type": "SqlExpression", "fields": {"x": "value.nope + 1"}}, r"transforms\.1 \(SqlExpression\): Spark refused"),
    ({"type": "Python", "function": "tests.unit.custom_transforms.drops_a_column"},
     r"transforms\.1 \(Python\): 'tests\.unit\.custom_transforms\.drops_a_column' returned a frame without the "
     r"columns \['_version'\]"),
    ({"type": "Filter", "predicate": {"type": "Sql", "condition": "value.paid ="}},
     r"transforms\.1 \(Filter\): its Sql predicate 'value.paid =': Spark refused"),
])
def test_a_step_spark_refuses_fails_the_window_naming_it_and_moves_no_offset(
        config_dir: Path, store: StateStore, spark: Any, step: dict[str, Any], words: str) -> None:
    tag = unique("sbad")
    topic = f"{tag}.inventory.orders"
    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(k, v) for k, v in fx.events()])
    cfg = _pipeline(config_dir, tag, topic, [UNWRAP, step])
    with pytest.raises(ConfigError, match=words):
        runner.run_window(cfg, "w1", store=store, spark=spark)
    assert store.offsets.load(cfg.name) == {}


def test_a_table_from_the_record_schema_behind_a_spark_step_gets_the_columns_spark_left(
        config_dir: Path, store: StateStore, spark: Any) -> None:
    """Behind a Spark step the Connect schema no longer describes the value: the table is described
    from the typed values after the chain (spark_jobs/transform/row_schemas.py), the fields Spark added included."""
    tag = unique("sschema")
    topic = f"{tag}.inventory.orders"
    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(k, v) for k, v in fx.events()])
    cfg = load_pipeline(write_pipeline(
        config_dir, tag, topic, tag, transforms=CHAIN[:2],
        source={"key_converter": "json_schema", "value_converter": "json_schema"},
        sinks=[{"type": "mysql", "name": "m", "conn_id": "cdcflow_mysql", "table": tag, "create_table": True}]))
    stats = runner.run_window(cfg, "w1", store=store, spark=spark)
    with mysql_engine().connect() as conn:
        got = [dict(r._mapping) for r in conn.exec_driver_sql(
            f"SELECT id, customer, amount, doubled, buyer, day FROM `{tag}` ORDER BY id")]
        kinds = dict(conn.exec_driver_sql(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = DATABASE() "
            f"AND table_name = '{tag}'").fetchall())
    assert got == [{"id": r["id"], "customer": r["customer"], "amount": r["amount"], "doubled": r["amount"] * 2,
                    "buyer": r["customer"].upper(), "day": r["created"].strftime("%Y-%m-%d")}
                   for _id, r in sorted(o.FINAL.items())]
    assert (kinds["doubled"], kinds["buyer"], kinds["created"]) == ("decimal", "longtext", "datetime")
    assert stats["records"] == len(fx.events()) and stats["dead_lettered"] == 0


def test_dead_letters_behind_a_spark_step_carry_the_records_as_read(
        config_dir: Path, store: StateStore, spark: Any) -> None:
    """The record frame leaves each value as read out (spark_jobs/raw_values.py): a record that fails after
    the Spark stage (a value that does not fit its column) or that MySQL refuses in a write task (Data too
    long) reaches the DLQ with its key and value as read from Kafka, byte for byte."""
    tag = unique("sdlq")
    topic = f"{tag}.inventory.orders"
    events = fx.events()
    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(k, v) for k, v in events])
    chain = [UNWRAP, {"type": "SqlExpression", "fields": {
        "buyer": "concat(upper(value.customer), '!')",
        "doubled": "CASE WHEN value.id = 2 THEN 'n/a' ELSE CAST(value.amount * 2 AS STRING) END"}}]
    cfg = load_pipeline(write_pipeline(
        config_dir, tag, topic, tag, transforms=chain,
        source={"key_converter": "json_schema", "value_converter": "json_schema"},
        sinks=[{"type": "mysql", "name": "m", "conn_id": "cdcflow_mysql", "table": tag, "create_table": True,
                "primary_key": ["id"], "columns": [{"name": "id", "type": "INT"},
                                                   {"name": "buyer", "type": "VARCHAR(5)"},
                                                   {"name": "doubled", "type": "DECIMAL(14,2)"}]}]))
    stats = runner.run_window(cfg, "w1", store=store, spark=spark)

    with mysql_engine().connect() as conn:
        got = [tuple(r) for r in conn.exec_driver_sql(f"SELECT id, buyer, doubled FROM `{tag}` ORDER BY id")]
    assert got == [(3, "X Y!", o.ROW_2B["amount"] * 2)]  # id 1 deleted, id 4's buyer too long
    assert cfg.errors.dlq_topic is not None
    dead = [DeadLetter(m.partition(), m.offset(), None, m.key(), m.value(), tuple(m.headers() or ()))
            for m in read_topic(cfg.errors.dlq_topic)]
    source = {(m.partition(), m.offset()): (m.key(), m.value()) for m in read_topic(topic)}
    # the bytes as read, each from the record its headers name (the topic's 3 partitions)
    assert [(d.key, d.value) for d in dead] == [source[(d.original_partition, d.original_offset)] for d in dead]
    which = sorted((json.loads(d.value or b"")["payload"]["after"]["id"], json.loads(d.value or b"")["payload"]["op"],
                    d.stage, d.message) for d in dead)
    too_long = f"MySQL rejected the row for table '{tag}' (key ['4']): Data too long for column 'buyer' at row 1"
    assert which == [(2, "c", "transform", "field 'doubled' = 'n/a' is not a valid DECIMAL(14,2)"),
                     (2, "u", "transform", "field 'doubled' = 'n/a' is not a valid DECIMAL(14,2)"),
                     (4, "c", "sink", too_long)]  # id 2's insert and update; id 4's insert, its key's last change
    assert stats["dead_lettered"] == 3


def test_the_key_steps_before_a_spark_step_make_leaves_keys_the_rows_and_documents(
        config_dir: Path, store: StateStore, spark: Any) -> None:
    """Kafka Connect's $Key steps (ReplaceField, Cast, InsertField) before a SqlExpression: the key they
    make, {order_key: "<id>", shop: "s1"}, crosses the Spark stage (row_keys.hand_on), so a pk_mode
    record_key table keys its rows by it and an index its document ids; every delete (three delete
    events, three tombstones) finds its row and document by it."""
    tag = unique("stagekeys")
    topic = f"{tag}.inventory.orders"
    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(k, v) for k, v in fx.events()], partitions=2)
    steps = [UNWRAP, {"type": "ReplaceField", "target": "key", "renames": {"id": "order_key"}},
             {"type": "Cast", "target": "key", "spec": {"order_key": "string"}},
             {"type": "InsertField", "target": "key", "static_field": "shop", "static_value": "s1"},
             {"type": "SqlExpression", "fields": {"buyer": "upper(value.customer)"}}]
    cfg = load_pipeline(write_pipeline(
        config_dir, tag, topic, tag, transforms=steps,
        source={"key_converter": "json_schema", "value_converter": "json_schema"},
        sinks=[{"type": "mysql", "name": "m", "conn_id": "cdcflow_mysql", "table": tag, "create_table": True,
                "pk_mode": "record_key", "primary_key": ["order_key", "shop"],
                "columns": [{"name": "order_key", "type": "VARCHAR(16)"}, {"name": "shop", "type": "VARCHAR(8)"},
                            {"name": "buyer", "type": "VARCHAR(64)"}]},
               {"type": "elasticsearch", "name": "es", "conn_id": "cdcflow_elasticsearch", "index": tag,
                "id_fields": ["order_key"]}]))
    stats = runner.run_window(cfg, "w", store=store, spark=spark)

    with mysql_engine().connect() as conn:
        got = [tuple(r) for r in conn.exec_driver_sql(f"SELECT order_key, shop, buyer FROM `{tag}` ORDER BY order_key")]
    assert got == [(str(i), "s1", r["customer"].upper()) for i, r in sorted(o.FINAL.items())]
    docs = es_docs(tag)
    assert {k: d["buyer"] for k, d in docs.items()} == {str(i): r["customer"].upper() for i, r in o.FINAL.items()}
    assert (stats["records"], stats["dead_lettered"]) == (len(fx.events()), 0)
