"""Wide tables: a window's plan must not grow faster than the table's width (16 BIGINT columns once
drove the long-lived Spark out of heap). A 200-column Debezium table, in the JsonConverter's
{schema, payload} form, through a real window; every value read back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.wide import events
from cdcflow import cdcgen, runner
from cdcflow.state import StateStore
from tests.helpers import bootstrap, make_pipeline, mysql_engine, unique

pytestmark = [pytest.mark.integration, pytest.mark.services]

COLUMNS = 200


def test_a_200_column_table_is_applied_value_by_value(config_dir: Path, store: StateStore, spark: Any) -> None:
    cfg = make_pipeline(config_dir, sinks=[{
        "type": "mysql", "name": "wide", "conn_id": "cdcflow_mysql", "table": unique("wide"), "create_table": True, "primary_key": ["c0"],
        "columns": [{"name": f"c{i}", "type": "BIGINT"} for i in range(COLUMNS)]}])
    evs, state = events(COLUMNS, 40)
    cdcgen.produce(bootstrap(), cfg.source.topics[0], evs, partitions=2)

    stats = runner.run_window(cfg, "run-wide", store=store, spark=spark)

    assert stats["records"] == 40 and stats["dead_lettered"] == 0
    with mysql_engine().connect() as conn:
        rows = [list(r)[:COLUMNS] for r in conn.exec_driver_sql(f"SELECT * FROM `{cfg.sinks[0].table}` ORDER BY c0")]
    assert rows == [state[k] for k in sorted(state)]
