"""A Sql predicate and a Python step before ExtractNewRecordState (spark_jobs/transform/envelope_frame.py): Spark
sees each record as Kafka Connect has it before the unwrap, its value Debezium's change event, and the
unwrap then reads the row from the envelope the steps left. Rows read back from MariaDB.

The records are Debezium's MySQL connector's own change events (tests/fixtures/debezium/orders.py:
https://debezium.io/documentation/reference/stable/connectors/mysql.html, "Change event values", the
create, update and delete events and their tombstones, JsonConverter with schemas).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cdcflow import cdcgen, runner
from cdcflow.config import load_pipeline
from cdcflow.state import StateStore
from tests.fixtures import orders as o
from tests.fixtures.debezium import orders as fx
from tests.helpers import bootstrap, mysql_engine, unique, write_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.services("kafka", "mysql", "spark")]

COLUMNS = [{"name": "id", "type": "INT"}, {"name": "customer", "type": "VARCHAR(64)"},
           {"name": "amount", "type": "DECIMAL(10,2)"}, {"name": "__op", "type": "VARCHAR(4)"},
           {"name": "__table", "type": "VARCHAR(16)"}]


def _run(config_dir: Path, store: StateStore, spark: Any, tag: str, chain: list[dict[str, Any]]) -> tuple[
        list[tuple[Any, ...]], dict[str, Any]]:
    topic = f"{tag}.inventory.orders"
    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(k, v) for k, v in fx.events()], partitions=2)
    cfg = load_pipeline(write_pipeline(
        config_dir, tag, topic, tag, transforms=chain,
        source={"key_converter": "json_schema", "value_converter": "json_schema"},
        sinks=[{"type": "mysql", "name": "m", "conn_id": "cdcflow_mysql", "table": tag, "create_table": True,
                "primary_key": ["id"], "columns": COLUMNS}]))
    stats = runner.run_window(cfg, "w1", store=store, spark=spark)
    with mysql_engine().connect() as conn:
        got = [tuple(r) for r in conn.exec_driver_sql(
            f"SELECT id, customer, amount, __op, __table FROM `{tag}` ORDER BY id")]
    return got, stats


def test_a_filter_by_a_sql_predicate_on_the_envelopes_op_skips_the_updates(
        config_dir: Path, store: StateStore, spark: Any) -> None:
    """``value.op = 'u'`` before the unwrap drops the two update events; the unwrap (Debezium's default:
    deletes and tombstones dropped) then writes each row's last create."""
    chain = [{"type": "Filter", "predicate": {"type": "Sql", "condition": (
                 "value.op = 'u' AND value.source.table = 'orders' AND value.after.amount IS NOT NULL")}},
             {"type": "ExtractNewRecordState", "add_fields": ["op", "table"]}]
    got, stats = _run(config_dir, store, spark, unique("envfilter"), chain)
    created = {1: o.ROW_1, 2: o.ROW_2, 3: o.ROW_2B, 4: o.ROW_3}  # ids 3 and 4: the creates of the key changes
    assert got == [(i, r["customer"], r["amount"], "c", "orders") for i, r in sorted(created.items())]
    assert (stats["records"], stats["dead_lettered"]) == (len(fx.events()), 0)


def test_a_python_step_before_the_unwrap_drops_a_record_and_changes_an_after_field(
        config_dir: Path, store: StateStore, spark: Any) -> None:
    """The function drops the create of id 4 (the key change 3 -> 4) and upper-cases ``after.customer``;
    its ``op`` and ``source.table`` are not read back (``__op``, ``__table`` are the connector's). The
    deletes and tombstones pass (delete_handling none): id 3's row, moved to 4, is gone, and id 3 is
    row 2's after its key change."""
    chain = [{"type": "Python", "function": "tests.unit.custom_transforms.before_the_unwrap",
              "options": {"drop_id": 4, "field": "customer"}},
             {"type": "ExtractNewRecordState", "delete_handling": "none", "drop_tombstones": False,
              "add_fields": ["op", "table"]}]
    got, stats = _run(config_dir, store, spark, unique("envpython"), chain)
    final = {i: r for i, r in o.FINAL.items() if i != 4}
    assert got == [(i, r["customer"].upper(), r["amount"], "c", "orders") for i, r in sorted(final.items())]
    assert (stats["records"], stats["dead_lettered"]) == (len(fx.events()), 0)


def test_two_spark_stages_before_the_unwrap_hand_the_envelopes_on(
        config_dir: Path, store: StateStore, spark: Any) -> None:
    """A Filter by Sql (id 1's update dropped), then the Python step (id 4's create dropped, customers
    upper-cased): two stages, both before the unwrap (Debezium's default: deletes dropped), so the
    second sees the envelopes the first left."""
    chain = [{"type": "Filter", "predicate": {"type": "Sql", "condition": "value.op = 'u' AND value.after.id = 1"}},
             {"type": "Python", "function": "tests.unit.custom_transforms.before_the_unwrap",
              "options": {"drop_id": 4, "field": "customer"}},
             {"type": "ExtractNewRecordState", "add_fields": ["op", "table"]}]
    got, stats = _run(config_dir, store, spark, unique("envtwo"), chain)
    last = {1: o.ROW_1, 2: o.ROW_2B, 3: o.ROW_2B}  # id 3: row 2 after its update, moved by the key change
    ops = {1: "c", 2: "u", 3: "c"}
    assert got == [(i, r["customer"].upper(), r["amount"], ops[i], "orders") for i, r in sorted(last.items())]
    assert (stats["records"], stats["dead_lettered"]) == (len(fx.events()), 0)
