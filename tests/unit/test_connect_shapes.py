"""Kafka Connect's REST shapes for cdcflow: offsets bodies, flat configs, validation, statuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdcflow.config import load_pipeline
from cdcflow.control import Status
from cdcflow.errors import BadRequest
from cdcflow.web import connect

ROOT = Path(__file__).resolve().parents[2]


def test_offsets_body_accepts_connects_example_with_strings_and_null_resets() -> None:
    body = {"offsets": [
        {"offset": {"kafka_offset": "0"}, "partition": {"kafka_partition": "0", "kafka_topic": "t.a"}},
        {"offset": {"kafka_offset": 42}, "partition": {"kafka_partition": 3, "kafka_topic": "t.a"}},
        {"offset": None, "partition": {"kafka_partition": 1, "kafka_topic": "t.b"}},
    ]}
    assert connect.parse_offsets(body) == {("t.a", 0): 0, ("t.a", 3): 42, ("t.b", 1): None}


@pytest.mark.parametrize(("body", "message"), [
    ({}, 'expected {"offsets"'),
    ({"offsets": []}, 'expected {"offsets"'),
    ({"offsets": [{"partition": {"kafka_topic": "t"}, "offset": {"kafka_offset": 1}}]}, "offsets[0].partition"),
    ({"offsets": [{"partition": {"kafka_topic": "t", "kafka_partition": "x"}, "offset": {"kafka_offset": 1}}]},
     "offsets[0].partition.kafka_partition: expected an integer, got 'x'"),
    ({"offsets": [{"partition": {"kafka_topic": "t", "kafka_partition": 0}, "offset": {"kafka_offset": -1}}]},
     "offsets[0].offset.kafka_offset: expected >= 0, got -1"),
    ({"offsets": [{"partition": {"kafka_topic": "t", "kafka_partition": 0}, "offset": {"kafka_offset": True}}]},
     "expected an integer, got True"),
])
def test_bad_offsets_bodies_say_what_is_wrong(body: object, message: str) -> None:
    with pytest.raises(BadRequest, match=None) as err:
        connect.parse_offsets(body)
    assert message in str(err.value)


def test_flat_config_round_trips_through_validation() -> None:
    cfg = load_pipeline(ROOT / "config" / "pipelines" / "demo_orders.yaml")
    flat = connect.flat_config(cfg)
    assert flat["connector.class"] == "cdcflow.Pipeline" and flat["topics"] == "demo.inventory.orders"
    assert flat["sinks.1.type"] == "elasticsearch" and flat["sinks.0.columns.3.type"] == "DECIMAL(10,2)"
    assert all(isinstance(v, str) for v in flat.values())
    result = connect.validate("cdcflow.Pipeline", flat)
    assert result["error_count"] == 0, [c["value"] for c in result["configs"] if c["value"]["errors"]]


def test_validation_reports_each_bad_field_in_connects_shape() -> None:
    result = connect.validate("cdcflow.Pipeline", {"name": "x", "topics": "a", "window.max_records": "0",
                                                   "errors.tolerance": "some"})
    errors = {c["value"]["name"]: c["value"]["errors"] for c in result["configs"] if c["value"]["errors"]}
    assert result["error_count"] == sum(len(v) for v in errors.values()) >= 3
    assert errors["window.max_records"] == ["expected input should be greater than or equal to 1"]
    assert errors["errors.tolerance"] == ["expected input should be 'none' or 'all'"]
    assert errors["sinks"] == ["expected a value (this field is required)"]
    with pytest.raises(BadRequest, match="unknown connector plugin"):
        connect.validate("io.confluent.Other", {})


def _status(state: str, trace: str | None = None) -> Status:
    return Status("p", state, trace, state in ("PAUSED", "STOPPED"), state == "STOPPED", [], None, None, None, [])  # type: ignore[arg-type]


def test_status_shapes_follow_connect() -> None:
    assert connect.status(_status("RUNNING")) == {
        "name": "p", "connector": {"state": "RUNNING", "worker_id": "airflow"},
        "tasks": [{"id": 0, "state": "RUNNING", "worker_id": "airflow"}], "type": "sink"}
    failed = connect.status(_status("FAILED", "boom"))
    assert failed["connector"]["trace"] == "boom" and failed["tasks"][0]["trace"] == "boom"
    assert connect.status(_status("STOPPED"))["tasks"] == []


def test_plugins_list_every_sink_transform_predicate_and_converter() -> None:
    everything = connect.plugins(connectors_only=False)
    by_type: dict[str, set[str]] = {}
    for p in everything:
        by_type.setdefault(p["type"], set()).add(p["class"])
    assert by_type["sink"] == {"cdcflow.Pipeline", "cdcflow.sink.mysql", "cdcflow.sink.elasticsearch"}
    assert len(by_type["transformation"]) >= 17 and "RegexRouter" in by_type["transformation"]
    assert by_type["predicate"] == {"TopicNameMatches", "HasHeaderKey", "RecordIsTombstone", "Sql"}
    assert connect.plugins(connectors_only=True) == [everything[0]]
