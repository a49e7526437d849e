"""A window's connections are resolved once (cdcflow/window/clients.py::Clients), whatever its
steps ask for: the Kafka consumer and producer settings, each sink's target, the exactly-once sink's
offsets."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdcflow.config import load_pipeline
from cdcflow.window import clients

ROOT = Path(__file__).resolve().parents[4]


def test_each_connection_is_looked_up_once(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = load_pipeline(ROOT / "config/pipelines/demo_orders.yaml")
    monkeypatch.setenv("AIRFLOW_CONN_CDCFLOW_KAFKA", '{"conn_type": "kafka", "extra": {"bootstrap.servers": "k:9092"}}')
    monkeypatch.setenv("AIRFLOW_CONN_CDCFLOW_MYSQL", "mysql://u:p@db:3306/cdc")
    monkeypatch.setenv("AIRFLOW_CONN_CDCFLOW_ELASTICSEARCH", "elasticsearch://es:9200")
    looked_up: list[str] = []
    resolve = clients.get_connection
    monkeypatch.setattr(clients, "get_connection", lambda conn_id: looked_up.append(conn_id) or resolve(conn_id))

    resolved = clients.Clients(cfg)
    for _ in range(3):  # plan, the DLQ read-back, the job, the commit's group mirror ...
        assert resolved.consumer["bootstrap.servers"] == "k:9092"
        assert resolved.producer["bootstrap.servers"] == "k:9092"
        assert resolved.kafka["bootstrap.servers"] == "k:9092"
        assert [t.config.name for t in resolved.targets] == [s.name for s in cfg.sinks]
    assert sorted(looked_up) == sorted({s.conn_id for s in cfg.sinks} | {cfg.source.kafka_conn_id})
    assert resolved.consumer["group.id"] == cfg.group_id
