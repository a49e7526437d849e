"""Kafka Connect's REST shapes for cdcflow: offsets bodies, flat configs, validation, statuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdcflow.config import PipelineConfig, load_pipeline
from cdcflow.control import Status
from cdcflow.errors import BadRequest
from cdcflow.web import connect

ROOT = Path(__file__).resolve().parents[4]


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
    # every converter the config accepts, the Schema Registry's too
    assert by_type["converter"] == {f"cdcflow.converter.{n}" for n in (
        "json", "json_schema", "string", "bytes", "avro", "protobuf", "json_schema_registry")}
    assert connect.plugins(connectors_only=True) == [everything[0]]


# -- PUT /connectors/{name}/config: Connect's flat map back to the nested config ---------------------

def _round_trip(cfg: PipelineConfig) -> PipelineConfig:
    return PipelineConfig.model_validate(connect.connector_config(cfg.name, connect.flat_config(cfg)))


def test_a_flat_config_put_back_is_the_same_config() -> None:
    cfg = load_pipeline(ROOT / "config" / "pipelines" / "demo_orders.yaml")
    assert _round_trip(cfg) == cfg


def test_the_round_trip_keeps_strings_dotted_map_keys_regexes_and_unions() -> None:
    """The inverse is read from the models: a string field stays a string even when it looks like JSON
    (a table '2024', a description 'true'), a map of plain values keeps its dotted keys whole
    (spark.conf, consumer_config, renames), sinks/transforms/predicates pick their member by their
    'type', and Connect's topics.regex is source.topics_regex."""
    data = load_pipeline(ROOT / "config" / "pipelines" / "demo_orders.yaml").model_dump(mode="json", exclude_none=True)
    data.update({
        "description": "true", "schedule": "@hourly",
        "source": {"topics_regex": r"demo\.inventory\.[a-z]+$", "consumer_config": {"fetch.min.bytes": 1}},
        "spark": {"conf": {"spark.sql.shuffle.partitions": "4"}},
        "transforms": [{"type": "ExtractNewRecordState", "add_fields": ["op", "source.ts_ms"]},
                       {"type": "ReplaceField", "renames": {"a.b": "c"}},
                       {"type": "SetSchemaMetadata", "name": "123",
                        "predicate": {"type": "TopicNameMatches", "pattern": "demo.*"}}],
        "errors": {"tolerance": "all", "dlq_topic": "dlq.orders", "max_dead_letters": "5%"},
    })
    data["sinks"][0]["table"] = "2024"
    cfg = PipelineConfig.model_validate(data)
    flat = connect.flat_config(cfg)
    assert flat["spark.conf.spark.sql.shuffle.partitions"] == "4" and flat["sinks.0.table"] == "2024"
    assert _round_trip(cfg) == cfg
    assert connect.validate("cdcflow.Pipeline", flat)["error_count"] == 0


def test_a_connect_style_body_with_only_some_keys_is_nested() -> None:
    body = {"connector.class": "cdcflow.Pipeline", "tasks.max": "1", "topics": "a.orders, b.orders",
            "window.max_records": "500", "window": '{"stop_on_empty": false}', "source.consumer_config": "{}",
            "source.consumer_config.fetch.min.bytes": "1024",
            "sinks.0.type": "mysql", "sinks.0.name": "m", "sinks.0.table": "orders", "sinks.0.create_table": "true"}
    assert connect.connector_config("p", body) == {
        "name": "p", "window": {"max_records": 500, "stop_on_empty": False},
        "source": {"consumer_config": {"fetch.min.bytes": 1024}, "topics": ["a.orders", "b.orders"]},
        "sinks": [{"type": "mysql", "name": "m", "table": "orders", "create_table": True}]}


@pytest.mark.parametrize(("body", "message"), [
    ({"name": "other", "topics": "t"}, "Connector name configuration (other) doesn't match connector name in the URL (p)"),
    ({"connector.class": "io.confluent.connect.jdbc.JdbcSinkConnector"}, "connector.class: expected cdcflow.Pipeline"),
    ({"topics": "a", "source.topics": '["b"]'}, "topics ('a') and source.topics"),
    ({"sinks.0.name": "a", "sinks.2.name": "c"}, "sinks.1: missing"),
    ({"window": '{"max_records": 5}', "window.max_records": "6"}, "window.max_records: given twice"),
    ({"window.max_records": "5", "window.max_records.x": "6"}, "window.max_records is given a value (5) and keys"),
    ({}, "expected a JSON object of config keys"),
    ([["topics", "a"]], "expected a JSON object of config keys"),
])
def test_a_put_body_that_cannot_be_a_config_says_why(body: object, message: str) -> None:
    with pytest.raises(BadRequest) as err:
        connect.connector_config("p", body)
    assert message in str(err.value)
