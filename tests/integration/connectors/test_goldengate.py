"""GoldenGate's JSON formatter in both of its models through real windows (Kafka, the running Spark,
MariaDB): the row-modelled messages of tests/fixtures/goldengate/orders_row.py (``format=json_row``)
with a primary-key update under each ``pkUpdateHandling`` — ``delete-insert`` (a delete of the old
key, then an insert of the new) and ``update`` (the new key only: the old row stays, as Oracle says)
— and the operation-modelled ones of tests/fixtures/goldengate/orders.py, whose key update carries
the old key in its before image; a delete in each. Every value is read back from MariaDB and compared
with the rows the changes leave. The fixtures name Oracle's pages ("Using the Pluggable Formatters":
"Row Formatters", "Using the JSON Formatter", "Sample Row Modeled JSON Messages", pkUpdateHandling)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cdcflow import cdcgen, runner
from cdcflow.state import StateStore
from tests.fixtures import orders as o
from tests.fixtures.goldengate import orders as op_fx
from tests.fixtures.goldengate import orders_row as row_fx
from tests.helpers import bootstrap, make_pipeline, mysql_engine, unique

pytestmark = [pytest.mark.integration, pytest.mark.services]

COLUMNS = [{**c, "field": c["name"].upper()} for c in o.SINK_COLUMNS]


def run(config_dir: Path, store: StateStore, spark: Any, events: list[tuple[Any, Any]]) -> dict[str, Any]:
    table = unique("orders_gg")
    sink = {"type": "mysql", "name": "rows", "conn_id": "cdcflow_mysql", "table": table, "create_table": True,
            "primary_key": ["id"], "columns": COLUMNS}
    cfg = make_pipeline(config_dir, source={"format": "goldengate"}, sinks=[sink])
    cdcgen.produce(bootstrap(), cfg.source.topics[0], [cdcgen.Event(k, v) for k, v in events], partitions=1)
    return {**runner.run_window(cfg, unique("run"), store=store, spark=spark), "table": table}


def read_mysql(table: str) -> list[tuple[Any, ...]]:
    with mysql_engine().connect() as conn:
        return [tuple(r) for r in conn.exec_driver_sql(f"SELECT {', '.join(o.COLUMNS)} FROM `{table}` ORDER BY id")]


def rows(final: dict[int, o.Row]) -> list[tuple[Any, ...]]:
    return [tuple(final[k][c] for c in o.COLUMNS) for k in sorted(final)]


def test_both_models_and_both_key_update_handlings_give_the_rows_they_document(
        config_dir: Path, store: StateStore, spark: Any) -> None:
    truncate = (None, row_fx.message(row_fx.operation("T", o.T0 + 300, 9000)))  # the metadata alone: ignored
    runs = {
        "json_row, delete-insert": (run(config_dir, store, spark, [*row_fx.events("delete-insert"), truncate]),
                                    row_fx.final("delete-insert")),
        "json_row, update": (run(config_dir, store, spark, row_fx.events("update")), row_fx.final("update")),
        "json": (run(config_dir, store, spark, op_fx.events()), o.FINAL),
    }
    for name, (stats, final) in runs.items():
        assert read_mysql(stats["table"]) == rows(final), name  # Decimal, datetime(6), date, int, text, NULL
        assert stats["dead_lettered"] == 0, name
    assert {n: s["records"] for n, (s, _f) in runs.items()} == {
        "json_row, delete-insert": 11, "json_row, update": 8, "json": 8}
    assert runs["json_row, delete-insert"][0].get("truncates_ignored") == 1
    # the old key of the move 2 -> 3 under update: its row as it was before the move
    assert read_mysql(runs["json_row, update"][0]["table"])[0] == rows({2: o.ROW_2B})[0]
