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
