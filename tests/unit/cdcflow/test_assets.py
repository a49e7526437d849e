"""The asset events of a window (cdcflow/assets.py): one per sink target that changed, with the
window's facts; none for an empty window or one whose changes were all stale."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cdcflow import assets
from cdcflow.config import load_pipeline
from cdcflow.state import PartitionWindow, WindowPlan

ROOT = Path(__file__).resolve().parents[3]
CFG = load_pipeline(ROOT / "config/pipelines/demo_orders.yaml")


@pytest.fixture(autouse=True)
def connections(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_CDCFLOW_KAFKA", json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": "k1:9092,k2:9092"}}))
    monkeypatch.setenv("AIRFLOW_CONN_CDCFLOW_MYSQL", json.dumps(
        {"conn_type": "mysql", "host": "db", "port": 3307, "login": "u", "password": "p", "schema": "shop"}))
    monkeypatch.setenv("AIRFLOW_CONN_CDCFLOW_ELASTICSEARCH", json.dumps({"conn_type": "elasticsearch", "host": "es"}))


def _window(sinks: dict[str, dict[str, list[int]]], records: int = 5) -> WindowPlan:
    return WindowPlan(CFG.name, "run-1", "stored", "committed",
                      (PartitionWindow("demo.inventory.orders", 0, 10, 100, 10 + records, records),
                       PartitionWindow("demo.inventory.orders", 1, 7, 100, 7, 0)),
                      stats={"record_time": [1_700_000_000_000, 1_700_000_001_500],
                             "sinks": {name: {"upserted": 1, "changed": changed} for name, changed in sinks.items()}})


def test_the_uris_follow_the_providers_conventions() -> None:
    topics, targets = assets.declared(CFG)
    assert topics == ["kafka://k1:9092/demo.inventory.orders"]
    assert targets == ["mysql://db:3307/shop/demo_orders"]  # the routed index "demo-{topic}" is named at run time
    assert assets.target_uri(CFG, "orders_es", "demo-x") == "elasticsearch://es:9200/demo-x"


def test_one_event_per_changed_target_with_the_windows_facts() -> None:
    events = assets.window_events(CFG, _window({"orders_mysql": {"demo_orders": [3, 1]},
                                                 "orders_es": {"demo-a": [2, 0], "demo-b": [0, 0]}}))
    assert [e.uri for e in events] == ["elasticsearch://es:9200/demo-a", "mysql://db:3307/shop/demo_orders"]
    assert events[1].extra == {
        "pipeline": "demo_orders", "run_id": "run-1", "sink": "orders_mysql", "target": "demo_orders",
        "offsets": {"demo.inventory.orders[0]": [10, 15]},  # the partition that read nothing is left out
        "upserted": 3, "deleted": 1,
        "record_time": {"from": "2023-11-14T22:13:20Z", "to": "2023-11-14T22:13:21.500000Z"}}


def test_no_event_for_an_empty_window_or_stale_changes() -> None:
    assert assets.window_events(CFG, _window({}, records=0)) == []
    assert assets.window_events(CFG, _window({"orders_mysql": {"demo_orders": [0, 0]}})) == []
    assert assets.window_events(CFG, WindowPlan(CFG.name, "r", "stored", "committed", ())) == []


def test_a_connection_missing_at_parse_declares_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_CDCFLOW_MYSQL")
    monkeypatch.setattr("cdcflow.connections._from_airflow", lambda _conn_id: None)
    assert assets.declared(CFG) == ([], [])


SHOP = """\
name: shop
source: {topics: [shop.shop.orders]}
sinks:
  - {type: mysql, name: tables, table: "{source.table}", create_table: true}
  - type: elasticsearch
    name: orders
    index: orders
    document:
      root: {table: orders, key: [id]}
      lookups: {customer: {table: customers, on: {id: customer_id}}}
errors: {tolerance: all, dlq_topic: dlq}
"""


def test_a_composed_index_is_an_outlet_whose_inlets_are_its_tables(tmp_path: Path) -> None:
    path = tmp_path / "shop.yaml"
    path.write_text(SHOP)
    cfg = load_pipeline(path)
    inlets, outlets = assets.declared(cfg)
    assert inlets == ["kafka://k1:9092/shop.shop.orders", "mysql://db:3307/shop/orders", "mysql://db:3307/shop/customers"]
    assert outlets == ["elasticsearch://es:9200/orders"]
    window = WindowPlan(cfg.name, "run-1", "stored", "committed", (PartitionWindow("shop.shop.orders", 0, 0, 10, 2, 2),),
                        stats={"record_time": [None, None], "sinks": {},
                               "documents": {"orders": {"version": 7, "upserted": 3, "deleted": 1, "backlog": 0}}})
    [event] = assets.window_events(cfg, window)
    assert event.uri == "elasticsearch://es:9200/orders"
    assert event.extra["inlets"] == inlets[1:] and (event.extra["upserted"], event.extra["deleted"]) == (3, 1)
    rebuilt_nothing = WindowPlan(cfg.name, "run-2", "stored", "committed", (), stats={
        "documents": {"orders": {"version": 8, "upserted": 0, "deleted": 0, "backlog": 0}}})
    assert assets.window_events(cfg, rebuilt_nothing) == []
