"""Issue 44 through whole windows: a state table and a history table (``mode: history``) fed from one
Debezium topic by two sinks of one pipeline, on real Kafka, Spark and MariaDB; the history read back
row by row and compared with the one written out by hand from the events.

The events are Debezium's MySQL connector's (JsonConverter, schemas.enable=true; mysql.adoc "create
events", "update events" with ``binlog_row_image=FULL``, "delete events" and "Tombstone events"),
built by tests/fixtures/debezium/minimal_image.py's ``event`` with whole row images.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from cdcflow import cdcgen, runner
from cdcflow.config import load_pipeline
from cdcflow.state import StateStore
from tests.fixtures.debezium import minimal_image as mi
from tests.fixtures.debezium import mysql_all_types as fx
from tests.helpers import bootstrap, make_pipeline, mysql_engine, unique, write_pipeline
from tests.integration.spark_jobs.test_schema_changes import later

pytestmark = [pytest.mark.integration, pytest.mark.services("kafka", "mysql", "spark")]

T0 = 1_764_000_000  # s: 2025-11-24T16:00:00Z
LAMP = {"id": 1, "name": "lamp", "price": Decimal("19.90"), "stock": 3, "note": "blue"}


def _at(s: int | None) -> dt.datetime | None:
    return None if s is None else dt.datetime(1970, 1, 1) + dt.timedelta(seconds=s)


def _pipeline(config_dir: Path, tag: str, topic: str, exactly_once: bool) -> Any:
    common = {"type": "mysql", "conn_id": "cdcflow_mysql", "create_table": True, "primary_key": ["id"],
              "columns": mi.SINK_COLUMNS}
    sinks = [{**common, "name": "state", "table": f"{tag}_state"},
             {**common, "name": "history", "table": f"{tag}_hist", "mode": "history", "track_history": ["name", "price"]}]
    extra = {"offset_store": {"sink": "history"}} if exactly_once else {}
    return load_pipeline(write_pipeline(config_dir, tag, topic, tag, sinks=sinks,
                                        errors={"tolerance": "all", "dlq_topic": f"{tag}.dlq"}, **extra))


def _history(table: str) -> list[tuple[Any, ...]]:
    with mysql_engine().connect() as conn:
        return [tuple(r) for r in conn.exec_driver_sql(
            f"SELECT id, name, price, stock, __valid_from, __valid_to, __current, __op FROM `{table}` "
            "ORDER BY id, __version")]


def _state(table: str) -> list[tuple[Any, ...]]:
    with mysql_engine().connect() as conn:
        return [tuple(r) for r in conn.exec_driver_sql(f"SELECT id, name, price, stock FROM `{table}` ORDER BY id")]


def _window(cfg: Any, run: str, store: StateStore, spark: Any, params: dict[str, Any] | None = None) -> dict[str, Any]:
    stats = runner.run_window(cfg, run, params, store=store, spark=spark)
    assert stats["dead_lettered"] == 0, stats
    return stats


def _produce(topic: str, events: list[tuple[bytes, bytes | None]], create: bool = False) -> None:
    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(k, v) for k, v in events], partitions=1, create=create)


def _update(at: int, pos: int, before: dict[str, Any], **changed: Any) -> tuple[bytes, bytes]:
    return mi.event("u", at, pos, before, {**before, **changed})


@pytest.mark.parametrize("exactly_once", [False, True], ids=["at-least-once", "exactly-once"])
def test_a_state_and_a_history_table_from_one_topic_and_a_replay_of_every_window(
        config_dir: Path, store: StateStore, spark: Any, exactly_once: bool) -> None:
    tag = unique("hist_w")
    topic = f"{tag}.{mi.TOPIC}"
    cfg = _pipeline(config_dir, tag, topic, exactly_once)
    stock_2 = {**LAMP, "stock": 2}
    dear = {**stock_2, "price": Decimal("24.50")}
    # window 1: an insert and an update of an untracked column (stock), and a desk
    _produce(topic, [mi.insert(T0, 1, LAMP), _update(T0 + 10, 2, LAMP, stock=2), mi.insert(T0 + 15, 3, mi.ROW_2)],
             create=True)
    _window(cfg, "w1", store, spark)
    # window 2: a tracked change (price), then the lamp deleted (its event and its tombstone)
    key, deleted = mi.event("d", T0 + 30, 5, dear, None)
    _produce(topic, [_update(T0 + 20, 4, stock_2, price=Decimal("24.50")), (key, deleted), (key, None)])
    _window(cfg, "w2", store, spark)
    # window 3: the lamp inserted again
    again = {**LAMP, "stock": 9}
    _produce(topic, [mi.insert(T0 + 40, 6, again)])
    _window(cfg, "w3", store, spark)
    lamp = [(1, "lamp", Decimal("19.90"), 2, _at(T0), _at(T0 + 20), 0, "c"),  # stock 2 in place
            (1, "lamp", Decimal("24.50"), 2, _at(T0 + 20), _at(T0 + 30), 0, "u"),
            (1, "lamp", Decimal("24.50"), 2, _at(T0 + 30), _at(T0 + 40), 0, "d"),  # the before image
            (1, "lamp", Decimal("19.90"), 9, _at(T0 + 40), None, 1, "c")]
    desk = [(2, "desk", Decimal("120.00"), 1, _at(T0 + 15), None, 1, "c")]
    assert _history(f"{tag}_hist") == lamp + desk
    assert _state(f"{tag}_state") == [(1, "lamp", Decimal("19.90"), 9), (2, "desk", Decimal("120.00"), 1)]
    # every window again, from offset 0, in one: nothing changes in either table
    stats = _window(cfg, "replay", store, spark, {"start_offsets": {topic: {"0": 0}}, "max_records": 7})
    assert stats["records"] == 7 and stats["sinks"]["history"]["unchanged"] == 6, stats
    assert _history(f"{tag}_hist") == lamp + desk
    assert _state(f"{tag}_state") == [(1, "lamp", Decimal("19.90"), 9), (2, "desk", Decimal("120.00"), 1)]


def test_a_history_table_from_the_record_schema_gains_the_column_a_later_schema_adds(
        config_dir: Path, store: StateStore, spark: Any) -> None:
    """Debezium's all-types table (tests/fixtures/debezium/mysql_all_types.py) into a history table made
    from its Connect schema; an ALTER TABLE … ADD c_note at the source adds the column (schema_changes
    lenient), and the versions before it hold NULL there."""
    table = unique("hist_schema")
    cfg = make_pipeline(config_dir, sinks=[{"type": "mysql", "name": "hist", "conn_id": "cdcflow_mysql",
                                            "table": table, "create_table": True, "mode": "history"}])
    topic = cfg.source.topics[0]
    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(k, v) for k, v in fx.events()[:4]], partitions=1)
    _window(cfg, "w1", store, spark)  # three inserts and an update of row 1

    def add_note(fields: dict[str, Any]) -> None:
        fields["c_note"] = {"type": "string", "optional": True, "field": "c_note"}

    def noted(before: dict[str, Any], after: dict[str, Any]) -> None:
        before["c_note"], after["c_note"] = None, "added at the source"

    cdcgen.produce(bootstrap(), topic, [later(add_note, noted)], partitions=1, create=False)
    _window(cfg, "w2", store, spark)
    with mysql_engine().connect() as conn:
        key = [r[0] for r in conn.exec_driver_sql(
            "SELECT column_name FROM information_schema.statistics WHERE table_schema = DATABASE() "
            "AND table_name = %s AND index_name = 'PRIMARY' ORDER BY seq_in_index", (table,))]
        rows = [tuple(r) for r in conn.exec_driver_sql(
            f"SELECT id, __op, __current, c_note, __valid_from FROM `{table}` ORDER BY id, __version")]
    assert key == ["id", "__version"]
    start = dt.datetime(2024, 6, 1, 10, 0, 0)
    assert rows == [(1, "c", 0, None, start), (1, "u", 0, None, start + dt.timedelta(seconds=60)),
                    (1, "u", 1, "added at the source", start + dt.timedelta(seconds=660)),
                    (2, "c", 1, None, start + dt.timedelta(seconds=1)), (3, "c", 1, None, start + dt.timedelta(seconds=2))]
