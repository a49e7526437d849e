"""An SMT chain on GoldenGate's, Canal's and Maxwell's topics (issue 43): each format's decoder reads its
messages into rows (connectors/formats.py), and the chain's steps apply to those rows as to Debezium's
rows after an ExtractNewRecordState; real windows on the running Spark into MariaDB, the table read
back and compared with the source values of tests/fixtures/orders.py.

The messages are the fixtures' (tests/fixtures/goldengate, canal, maxwell/orders.py), written the way
each producer documents them (the pages those modules name). Two windows: the first two statements,
then the key moves and the delete, whose deletes find the rows the first window wrote under the
renamed key column (a delete's value is null to the steps, as after Debezium's unwrap)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cdcflow import cdcgen, runner
from cdcflow.state import StateStore
from tests.fixtures import orders as o
from tests.fixtures.canal import orders as canal
from tests.fixtures.goldengate import orders as goldengate
from tests.fixtures.maxwell import orders as maxwell
from tests.helpers import bootstrap, make_pipeline, mysql_engine, unique

pytestmark = [pytest.mark.integration, pytest.mark.services("kafka", "mysql", "spark")]

Events = Callable[[], list[tuple[bytes | None, bytes]]]
# per format: its records, how many of them hold the first two statements (Canal: a message per statement;
# GoldenGate and Maxwell: one per row), and how it names the columns (GoldenGate's Oracle source: upper case)
FORMATS: dict[str, tuple[Events, int, Callable[[str], str]]] = {
    "goldengate": (goldengate.events, 5, str.upper),
    "canal": (canal.events, 2, str),
    "maxwell": (maxwell.events, 5, str),
}
SELECTED = ["order_id", "buyer", "amount", "qty", "created", "ship_date", "paid", "note", "src"]


def chain(name: Callable[[str], str]) -> list[dict[str, Any]]:
    """Rename the key and a column, cast the key and the flag, add a static field, and filter out the
    changes of a negative amount (a Spark SQL predicate: the Spark stage between the steps)."""
    return [
        {"type": "ReplaceField", "renames": {name("id"): "order_id", name("customer"): "buyer"}},
        {"type": "Cast", "spec": {"order_id": "int64", name("paid"): "boolean"}},
        {"type": "InsertField", "static_field": "src", "static_value": "shop"},
        {"type": "Filter", "predicate": {"type": "Sql",
                                         "condition": f"CAST(value.{name('amount')} AS DOUBLE) < 0"}},
    ]


def columns(name: Callable[[str], str]) -> list[dict[str, Any]]:
    """The table's columns: each ``field`` names the row's field after the chain."""
    renamed = {"id": "order_id", "customer": "buyer"}
    out = [{"name": renamed.get(c["name"], c["name"]), "type": c["type"],
            "field": renamed.get(c["name"], name(c["name"]))} for c in o.SINK_COLUMNS]
    return [*out, {"name": "src", "type": "VARCHAR(8)"}]


def expected(rows: dict[int, o.Row]) -> list[tuple[Any, ...]]:
    return [(key, r["customer"], r["amount"], r["qty"], r["created"], r["ship_date"], r["paid"], r["note"], "shop")
            for key, r in sorted(rows.items())]


def read(table: str) -> list[tuple[Any, ...]]:
    with mysql_engine().connect() as conn:
        return [tuple(r) for r in conn.exec_driver_sql(f"SELECT {', '.join(SELECTED)} FROM `{table}` ORDER BY order_id")]


@pytest.mark.parametrize("source_format", list(FORMATS))
def test_a_chain_applies_to_the_rows_of_each_format(config_dir: Path, store: StateStore, spark: Any,
                                                     source_format: str) -> None:
    events, first, name = FORMATS[source_format]
    table = unique(f"orders_{source_format}")
    cfg = make_pipeline(config_dir, source={"format": source_format}, transforms=chain(name),
                        sinks=[{"type": "mysql", "name": "rows", "conn_id": "cdcflow_mysql", "table": table,
                                "create_table": True, "primary_key": ["order_id"], "columns": columns(name)}])
    assert cfg.versioning == "source_ts_ms"  # each format's own time versions its rows, with a chain too
    records = [cdcgen.Event(k, v) for k, v in events()]
    topic = cfg.source.topics[0]

    cdcgen.produce(bootstrap(), topic, records[:first], partitions=1)
    stats = runner.run_window(cfg, unique("run"), store=store, spark=spark)
    # rows 1 and 2 as inserted; row 3 (amount -12345.67) and row 1's update to -0.01 filtered out; row 2's update
    assert read(table) == expected({1: o.ROW_1, 2: o.ROW_2B}), stats
    assert stats["dead_lettered"] == 0

    cdcgen.produce(bootstrap(), topic, records[first:], partitions=1)
    stats = runner.run_window(cfg, unique("run"), store=store, spark=spark)
    # the key moves 3 -> 4 (the upsert of 4: filtered) and 2 -> 3, and the delete of row 1: the deletes of order_id
    # 2 and 1 find the first window's rows. A delete's value is null, as after Debezium's unwrap (a tombstone), so
    # the predicate on value.amount does not hold for it and the Filter keeps it
    assert read(table) == expected({3: {**o.ROW_2B, "id": 3}}), stats
    assert stats["dead_lettered"] == 0


def test_a_canal_table_made_from_mysql_type_gets_the_columns_the_chain_leaves(config_dir: Path, store: StateStore,
                                                                               spark: Any) -> None:
    table = unique("orders_canal_made")
    """Without a Spark step: behind one the values are described as Spark left them (as Debezium's are), and
    a table keyed by Canal's pkNames then declares its primary_key."""
    cfg = make_pipeline(config_dir, source={"format": "canal"}, transforms=chain(str)[:3],
                        sinks=[{"type": "mysql", "name": "rows", "conn_id": "cdcflow_mysql", "table": table,
                                "create_table": True, "primary_key": [], "columns": []}])
    cdcgen.produce(bootstrap(), cfg.source.topics[0], [cdcgen.Event(k, v) for k, v in canal.events()], partitions=1)
    stats = runner.run_window(cfg, unique("run"), store=store, spark=spark)
    assert read(table) == expected(o.FINAL), stats
    with mysql_engine().connect() as conn:
        types = dict(conn.exec_driver_sql(
            "SELECT column_name, column_type FROM information_schema.columns WHERE table_schema = DATABASE() "
            f"AND table_name = '{table}'").fetchall())
        key = [r[0] for r in conn.exec_driver_sql(
            "SELECT column_name FROM information_schema.key_column_usage WHERE table_schema = DATABASE() AND "
            f"table_name = '{table}' AND constraint_name = 'PRIMARY'")]
    assert {c: t.lower() for c, t in types.items() if c != "__cdc_version"} == {  # Canal's mysqlType, renamed, cast
        # and added by the chain
        "order_id": "bigint(20)", "buyer": "varchar(64)", "amount": "decimal(10,2)", "qty": "bigint(20) unsigned",
        "created": "datetime(6)", "ship_date": "date", "paid": "tinyint(1)", "note": "text", "src": "longtext"}
    assert key == ["order_id"]


def test_a_chain_reads_maxwells_values_typed(config_dir: Path, store: StateStore, spark: Any) -> None:
    """Maxwell's rows reach the chain typed (connectors/row_types.py: by the declared columns here): the
    MaskField masks the BIGINT UNSIGNED qty to 0 and the flag, cast to a boolean, to false; the Sql
    predicate compares the DECIMAL amount as a number, without a CAST (as the texts the rows were before,
    Spark's ANSI mode casts the string to a BIGINT and fails the window on '1234567.89')."""
    table = unique("orders_maxwell_typed")
    steps = [*chain(str)[:3],
             {"type": "MaskField", "fields": ["qty", "paid"]},
             {"type": "Filter", "predicate": {"type": "Sql", "condition": "value.amount < 0"}}]
    cfg = make_pipeline(config_dir, source={"format": "maxwell"}, transforms=steps,
                        sinks=[{"type": "mysql", "name": "rows", "conn_id": "cdcflow_mysql", "table": table,
                                "create_table": True, "primary_key": ["order_id"], "columns": columns(str)}])
    records = [cdcgen.Event(k, v) for k, v in maxwell.events()]

    def masked(rows: dict[int, o.Row]) -> list[tuple[Any, ...]]:
        return expected({k: {**r, "qty": 0, "paid": 0} for k, r in rows.items()})

    cdcgen.produce(bootstrap(), cfg.source.topics[0], records[:5], partitions=1)
    stats = runner.run_window(cfg, unique("run"), store=store, spark=spark)
    assert read(table) == masked({1: o.ROW_1, 2: o.ROW_2B}), stats  # rows 3 and 1's update (-0.01) filtered
    cdcgen.produce(bootstrap(), cfg.source.topics[0], records[5:], partitions=1)
    stats = runner.run_window(cfg, unique("run"), store=store, spark=spark)
    assert read(table) == masked({3: {**o.ROW_2B, "id": 3}}), stats
    assert stats["dead_lettered"] == 0
