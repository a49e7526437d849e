"""Pipeline config validation: every error at once, with file, line, field path, value, expectation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cdcflow.config import json_schema, load_all, load_pipeline, parse_duration
from cdcflow.errors import ConfigError
from tests.helpers import write_pipeline

ROOT = Path(__file__).resolve().parents[3]

BAD = """\
name: bad pipeline
source:
  topics: []
  consumer_config: {sasl.password: secret, enable.auto.commit: true}
window:
  max_records: -5
  max_duration: 10 minutes
sinks:
  - type: mysql
    table: t
    primary_key: [id]
    columns:
      - {name: id, type: BIGINTEGER}
    tabel: oops
errors:
  tolerance: all
"""


def test_every_error_is_reported_with_file_line_path_and_value(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    with pytest.raises(ConfigError) as exc:
        load_pipeline(path)
    msg = str(exc.value)
    assert msg.startswith(f"{path}: 8 errors")
    for expected in [
        "line 1, name: expected string should match pattern",
        "'bad pipeline'",
        "line 3, source.topics: expected at least 1 topic (or topics_regex instead of topics)",
        "line 4, source.consumer_config: ['sasl.password']: credentials are not allowed in YAML",
        "line 6, window.max_records: expected input should be greater than or equal to 1; got -5",
        "line 7, window.max_duration: expected a duration such as 30, '30s', '5m' or '1h', got '10 minutes'",
        "line 13, sinks.0.columns.0.type: expected a MySQL type",
        "got 'BIGINTEGER'",
        "line 14, sinks.0.tabel: expected no such field (unknown keys are rejected",
        "line 15, errors: dlq_topic is required when tolerance is 'all'",
    ]:
        assert expected in msg, f"{expected!r} not in:\n{msg}"


def test_reserved_kafka_settings_are_rejected(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(BAD.replace("sasl.password: secret, ", ""))
    with pytest.raises(ConfigError, match=r"\['enable.auto.commit'\]: managed by cdcflow"):
        load_pipeline(path)


def test_cross_field_checks(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("""
name: p
source: {topics: [a]}
sinks:
  - type: mysql
    table: t
    primary_key: [idd]
    columns: [{name: id, type: BIGINT}, {name: id, type: INT}]
errors: {tolerance: all, dlq_topic: a}
""")
    with pytest.raises(ConfigError) as exc:
        load_pipeline(path)
    msg = str(exc.value)
    assert "column names must be unique, repeated: ['id']" in msg
    assert "errors.dlq_topic must differ from the source topics" not in msg or "line" in msg


DEFINITIONS = """\
name: p
source: {topics: [a]}
sinks:
  - type: mysql
    table: t
    primary_key: [id]
    columns:
      - {name: id, type: "bigint(20) unsigned NOT NULL AUTO_INCREMENT"}
      - {name: code, type: "varchar(8) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'n/a' COMMENT 'the code'"}
      - {name: synced_at, type: "TIMESTAMP(3) NULL%s"}
      - {name: qty, type: INT, default: 0, comment: "units"}
errors: {tolerance: all, dlq_topic: a.dlq}
"""


def test_columns_take_their_definitions_as_show_create_table_writes_them(tmp_path: Path) -> None:
    """Issue 42, part 5: what follows the type is read into the column's nullable, default, on_update
    and comment (each rebuilt from its parsed pieces); the type alone stays the column's type, so
    the values are read by it."""
    path = tmp_path / "p.yaml"
    path.write_text(DEFINITIONS % " DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3)")
    columns = load_pipeline(path).sinks[0].columns  # type: ignore[union-attr]
    got = [(c.type, c.nullable, c.default, c.on_update, c.comment) for c in columns]
    assert got == [("BIGINT(20) UNSIGNED", False, None, None, None),
                   ("VARCHAR(8) CHARACTER SET ascii COLLATE ascii_bin", False, "'n/a'", None, "the code"),
                   ("TIMESTAMP(3)", True, "CURRENT_TIMESTAMP(3)", "CURRENT_TIMESTAMP(3)", None),
                   ("INT", True, "0", None, "units")]
    again = load_pipeline(path).sinks[0].model_dump()  # type: ignore[union-attr]
    assert [c for c in type(load_pipeline(path).sinks[0]).model_validate(again).columns] == columns


def test_a_definition_the_config_cannot_read_names_the_part_with_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(DEFINITIONS.replace("TIMESTAMP(3) NULL%s", "TIMESTAMP(3) NULLL"))
    with pytest.raises(ConfigError) as exc:
        load_pipeline(path)
    msg = str(exc.value)
    assert msg.startswith(f"{path}: 1 error")
    assert ("line 10, sinks.0.columns.2.type: could not read 'NULLL' after the type TIMESTAMP(3) (expected NULL, "
            "NOT NULL, DEFAULT") in msg
    assert "got 'TIMESTAMP(3) NULLL'" in msg


@pytest.mark.parametrize(("tail", "said"), [
    (" DEFAULT CURRENT_TIMESTAMP", "DEFAULT CURRENT_TIMESTAMP does not match TIMESTAMP(3)"),
    ("\", nullable: false", "says nullable True, the column's nullable says False"),
    ("\", default: \"'x'\"", "DEFAULT 'x' is not a TIMESTAMP value"),
])
def test_a_definition_that_does_not_fit_is_refused(tmp_path: Path, tail: str, said: str) -> None:
    path = tmp_path / "p.yaml"
    text = DEFINITIONS % tail if not tail.startswith('"') else DEFINITIONS.replace('NULL%s"', "NULL" + tail)
    path.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_pipeline(path)
    assert "line 10, sinks.0.columns.2" in str(exc.value) and said in str(exc.value), str(exc.value)


def test_invalid_file_does_not_stop_the_others(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text(BAD)
    (tmp_path / "a_good.yaml").write_text((ROOT / "config/pipelines/demo_orders.yaml").read_text())
    (tmp_path / "z_dupe.yml").write_text((ROOT / "config/pipelines/demo_orders.yaml").read_text())
    loaded, errors = load_all(tmp_path)
    assert [i.config.name for i in loaded] == ["demo_orders"]
    assert set(errors) == {tmp_path / "bad.yaml", tmp_path / "z_dupe.yml"}
    assert "expected a unique pipeline name" in errors[tmp_path / "z_dupe.yml"]


def test_not_yaml_and_not_a_mapping(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("name: [unclosed")
    (tmp_path / "b.yaml").write_text("- just a list")
    _loaded, errors = load_all(tmp_path)
    assert "not valid YAML" in errors[tmp_path / "a.yaml"]
    assert "expected a mapping of pipeline settings, got list" in errors[tmp_path / "b.yaml"]


@pytest.mark.parametrize(("raw", "seconds"), [(30, 30), ("30s", 30), ("5m", 300), ("1h", 3600), ("250ms", 0.25)])
def test_durations(raw: object, seconds: float) -> None:
    assert parse_duration(raw) == seconds


def test_shipped_configs_are_valid_and_schema_is_current() -> None:
    loaded, errors = load_all(ROOT / "config/pipelines")
    assert errors == {}
    assert loaded
    on_disk = json.loads((ROOT / "config/pipeline.schema.json").read_text())
    assert on_disk == json_schema(), "config/pipeline.schema.json is stale: run `cdcflow schema`"
    assert on_disk["additionalProperties"] is False


def test_spark_connect_sessions_are_stable_per_pipeline() -> None:
    from spark_jobs.session import session_url

    a = session_url("sc://127.0.0.1:15002", "cdcflow-orders")
    assert a.startswith("sc://127.0.0.1:15002/;session_id=") and a == session_url("sc://127.0.0.1:15002", "cdcflow-orders")
    assert a != session_url("sc://127.0.0.1:15002", "cdcflow-other")
    assert session_url("sc://h:1/;token=x", "p").startswith("sc://h:1/;token=x;session_id=")
    assert session_url("sc://h:1/;session_id=fixed", "p") == "sc://h:1/;session_id=fixed"


@pytest.mark.parametrize(("store_sink", "extra_sink", "expected"), [
    ("nope", "", "offset_store.sink: expected the name of one of this pipeline's sinks ['rows', 'docs'], got 'nope'"),
    ("docs", "", "offset_store.sink: sink 'docs' is elasticsearch; the offsets can only be committed in a MySQL"),
    ("rows", "{topic}", "offset_store.sink: sink 'rows' routes to one table per topic ('t_{topic}')"),
])
def test_exactly_once_names_a_mysql_sink_with_one_table(tmp_path: Path, store_sink: str, extra_sink: str,
                                                         expected: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(f"""
name: p
source: {{topics: [a]}}
sinks:
  - {{type: mysql, name: rows, table: "t_{extra_sink}", primary_key: [id], columns: [{{name: id, type: BIGINT}}]}}
  - {{type: elasticsearch, name: docs, index: d, id_fields: [id]}}
offset_store: {{sink: {store_sink}}}
""")
    with pytest.raises(ConfigError) as exc:
        load_pipeline(path)
    assert str(path) in str(exc.value) and expected in str(exc.value)
    path.write_text(path.read_text().replace(f"sink: {store_sink}", "sink: rows").replace("{topic}", ""))
    assert load_pipeline(path).offset_store.sink == "rows"


def test_a_table_wider_than_innodb_allows_is_refused_with_the_file_and_the_limit(tmp_path: Path) -> None:
    """Issue 22: a 2,000-column table fails at load, naming the file, the field and the limit (not in
    a window, where its plan would have cost the shared Spark server)."""
    columns = ", ".join(f"{{name: c{i}, type: BIGINT}}" for i in range(2000))
    path = tmp_path / "wide.yaml"
    path.write_text(f"name: wide\nsource: {{topics: [a]}}\nsinks:\n  - type: mysql\n    table: t\n"
                    f"    primary_key: [c0]\n    columns: [{columns}]\n")
    with pytest.raises(ConfigError) as exc:
        load_pipeline(path)
    msg = str(exc.value)
    assert str(path) in msg and "sinks.0" in msg
    assert "2000 columns: an InnoDB table has at most 1017" in msg


def test_the_dead_letter_breaker_takes_a_count_a_ratio_or_both(tmp_path: Path) -> None:
    def limit(value: object, tolerance: str = "all") -> Any:
        path = write_pipeline(tmp_path, "b", "t.b", "b", errors={"tolerance": tolerance, "max_dead_letters": value})
        return load_pipeline(path).errors.max_dead_letters

    assert (limit(100).count, limit(100).ratio) == (100, None)
    assert (limit("5%").count, limit("5%").ratio) == (None, 0.05)
    both = limit({"count": 10, "ratio": 0.5})
    assert both.describe() == "10 per window or 50% of a window"
    assert both.exceeded(11, 1000) and both.exceeded(6, 10) and not both.exceeded(5, 10)
    for bad, says in ((0, "greater than or equal to 1"), ("x%", "expected a percentage such as '5%'"),
                      ({}, "expected a count (100), a ratio ('5%'), or both"),
                      ("5%", "max_dead_letters needs tolerance: all")):
        with pytest.raises(ConfigError) as err:
            limit(bad, "none" if says.startswith("max_dead_letters needs") else "all")
        assert "b.yaml" in str(err.value) and "errors" in str(err.value) and says in str(err.value), str(err.value)


SOFT_AND_PARTIAL = """\
name: p
source: {topics: [a]%s}
versioning: %s
sinks:
  - type: mysql
    table: t
    primary_key: [id]
    columns: [{name: id, type: BIGINT}, {name: body, type: TEXT}, {name: qty, type: INT}]
    delete: %s
    deleted_column: %s
    unavailable_value: %s
    ignore_null_updates: %s
  - type: elasticsearch
    index: d
    id_fields: [id]
    delete: soft
    deleted_field: %s
    ignore_null_updates: [qty]
errors: {tolerance: all, dlq_topic: a.dlq}
"""


def _soft(tmp_path: Path, source: str = "", versioning: str = "source_ts_ms", delete: str = "soft",
          column: str = "__deleted_at", placeholder: str = "__debezium_unavailable_value",
          listed: str = "[qty]", field: str = "__deleted_at") -> Path:
    path = tmp_path / "soft.yaml"
    path.write_text(SOFT_AND_PARTIAL % (source, versioning, delete, column, placeholder, listed, field))
    return path


def test_soft_deletes_and_partial_updates_are_read_with_their_defaults(tmp_path: Path) -> None:
    cfg = load_pipeline(_soft(tmp_path))
    mysql, es = cfg.sinks
    assert (mysql.delete, mysql.deleted_column, mysql.unavailable_value, mysql.ignore_null_updates) == (
        "soft", "__deleted_at", "__debezium_unavailable_value", ["qty"])
    assert (es.delete, es.deleted_field, es.unavailable_value) == ("soft", "__deleted_at", "__debezium_unavailable_value")
    # the placeholder is Debezium's: another format's sinks do not look for it unless told to
    canal = load_pipeline(_soft(tmp_path, source=", format: canal", placeholder="null"))
    assert [s.unavailable_value for s in canal.sinks] == [None, None]
    told = load_pipeline(_soft(tmp_path, source=", format: canal", placeholder="'hex:5f5f'"))
    assert [s.unavailable_value for s in told.sinks] == ["hex:5f5f", None]


@pytest.mark.parametrize(("change", "where", "said"), [
    ({"delete": "softly"}, "line 9, sinks.0.delete", "expected input should be 'hard' or 'soft'; got 'softly'"),
    ({"versioning": "kafka_offset"}, "line 9, sinks.0.delete",
     "delete: soft needs versioning: source_ts_ms (the deleted time is the delete's source time"),
    ({"column": "body"}, "line 10, sinks.0.deleted_column",
     "expected a column the table does not have otherwise (it holds the delete time)"),
    ({"column": "__cdc_version"}, "line 10, sinks.0.deleted_column", "got '__cdc_version'"),
    ({"placeholder": "'hex:zz'"}, "line 11, sinks.0.unavailable_value",
     "expected a placeholder text, or hex: followed by hexadecimal octets"),
    ({"placeholder": "''"}, "line 11, sinks.0.unavailable_value", "at least 1 character"),
    ({"listed": "[id]"}, "line 12, sinks.0.ignore_null_updates", "['id'] are primary key columns"),
    ({"listed": "[qty, nope]"}, "line 12, sinks.0.ignore_null_updates",
     "expected columns of this sink ['id', 'body', 'qty']; ['nope'] are not; got ['qty', 'nope']"),
    ({"listed": "qty"}, "line 12, sinks.0.ignore_null_updates", "expected input should be a valid list"),
    ({"field": "a.b"}, "line 17, sinks.1.deleted_field", "expected a top-level document field name"),
    ({"field": "id"}, "line 17, sinks.1.deleted_field", "expected a field that is not part of the document id"),
])
def test_bad_soft_delete_and_partial_update_settings_name_the_file_line_field_and_what_was_expected(
        tmp_path: Path, change: dict[str, str], where: str, said: str) -> None:
    path = _soft(tmp_path, **change)
    with pytest.raises(ConfigError) as exc:
        load_pipeline(path)
    msg = str(exc.value)
    assert msg.startswith(f"{path}: ") and f"{where}: " in msg and said in msg, msg


HISTORY = """\
name: p
source: {topics: [a]}
versioning: %s
sinks:
  - type: mysql
    table: %s
    primary_key: [id]
    columns: [{name: id, type: BIGINT}, {name: status, type: TEXT}, {name: qty, type: INT}]
    mode: %s
    track_history: %s
errors: {tolerance: all, dlq_topic: a.dlq}
"""


def test_a_history_sink_is_read_with_its_tracked_columns(tmp_path: Path) -> None:
    path = tmp_path / "history.yaml"
    path.write_text(HISTORY % ("source_ts_ms", "orders_history", "history", "[status]"))
    sink = load_pipeline(path).sinks[0]
    assert (sink.mode, sink.track_history) == ("history", ["status"])


@pytest.mark.parametrize(("values", "where", "said"), [
    (("kafka_offset", "h", "history", "[]"), "line 9, sinks.0.mode", "mode: history needs versioning: source_ts_ms"),
    (("source_ts_ms", "h", "state", "[status]"), "line 10, sinks.0.track_history", "expected only with mode: history"),
    (("source_ts_ms", "h", "history", "[id, nope]"), "line 10, sinks.0.track_history",
     "expected columns of this sink outside the primary key ['status', 'qty']; ['id', 'nope'] are not"),
    (("source_ts_ms", "h", "scd2", "[]"), "line 9, sinks.0.mode", "expected input should be 'state' or 'history'"),
])
def test_bad_history_settings_name_the_file_line_field_and_what_was_expected(
        tmp_path: Path, values: tuple[str, ...], where: str, said: str) -> None:
    path = tmp_path / "history.yaml"
    path.write_text(HISTORY % values)
    with pytest.raises(ConfigError) as exc:
        load_pipeline(path)
    msg = str(exc.value)
    assert msg.startswith(f"{path}: ") and f"{where}: " in msg and said in msg, msg


def test_pk_mode_kafka_with_declared_columns_names_the_coordinate_columns_it_needs(tmp_path: Path) -> None:
    path = write_pipeline(tmp_path, "kafka_pk", "t.kafka_pk", "log", sinks=[
        {"type": "mysql", "name": "m", "table": "log", "pk_mode": "kafka", "primary_key": ["id"],
         "columns": [{"name": "id", "type": "BIGINT"}, {"name": "__connect_topic", "type": "VARCHAR(249)"}]}])
    with pytest.raises(ConfigError) as exc:
        load_pipeline(path)
    assert "sinks.0" in str(exc.value) and (
        "pk_mode kafka keys each row by its record's coordinates: declare the columns ['__connect_topic', "
        "'__connect_partition', '__connect_offset']") in str(exc.value), str(exc.value)
