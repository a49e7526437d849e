"""Transform chains end to end: Kafka -> converters -> SMTs on Spark -> auto-created MySQL tables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cdcflow import cdcgen, runner
from cdcflow.config import load_pipeline
from cdcflow.state import StateStore
from tests.helpers import bootstrap, mysql_engine, read_topic, unique, write_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.services]


def _sink(**over: Any) -> dict[str, Any]:
    return {"type": "mysql", "name": "tables", "conn_id": "cdcflow_mysql", "table": "{topic}", "create_table": True,
            "auto_evolve": True, "pk_mode": "record_key", **over}


def _rows(table: str, columns: str) -> list[tuple[Any, ...]]:
    with mysql_engine().connect() as conn:
        return [tuple(r) for r in conn.exec_driver_sql(f"SELECT {columns} FROM `{table.replace('`', '``')}` ORDER BY 1")]


def _columns(table: str) -> dict[str, str]:
    with mysql_engine().connect() as conn:
        return {r[0]: r[1] for r in conn.exec_driver_sql(
            "SELECT column_name, column_type FROM information_schema.columns WHERE table_schema = DATABASE() "
            "AND table_name = %s", (table,))}


def test_golden_chain_routes_two_topics_to_two_tables(config_dir: Path, store: StateStore, spark: Any) -> None:
    tag = unique("g").replace("_", "")
    orders_topic, customers_topic = f"{tag}.shop.orders", f"{tag}.shop.customers"
    orders = cdcgen.orders_stream(150, 25, seed=31, broken=False, wrapped=0)
    customers = [
        cdcgen.Event(b'{"id": 1}', json.dumps({"op": "c", "before": None, "after": {"id": 1, "name": "Ada", "email": "ada@x.org"},
                                               "source": {"ts_ms": 10, "table": "customers"}}).encode()),
        cdcgen.Event(b'{"id": 2}', json.dumps({"op": "c", "before": None, "after": {"id": 2, "name": "Bob", "email": "bob@x.org"},
                                               "source": {"ts_ms": 11, "table": "customers"}}).encode()),
        cdcgen.Event(b'{"id": 1}', json.dumps({"op": "u", "before": {"id": 1}, "after": {"id": 1, "name": "Ada L.", "email": "ada@y.org"},
                                               "source": {"ts_ms": 12, "table": "customers"}}).encode()),
        cdcgen.Event(b'{"id": 2}', json.dumps({"op": "d", "before": {"id": 2, "name": "Bob"}, "after": None,
                                               "source": {"ts_ms": 13, "table": "customers"}}).encode()),
        cdcgen.Event(b'{"id": 2}', None),
        cdcgen.Event(b'{"id": 3}', json.dumps({"op": "c", "after": {"id": 3, "name": "Cy", "email": "cy@x.org"},
                                               "source": {"ts_ms": 14, "table": "customers"}}).encode()),
    ]
    transforms = [
        {"type": "ExtractNewRecordState", "delete_handling": "none", "drop_tombstones": False,
         "add_fields": ["op", "source.ts_ms"]},
        {"type": "MaskField", "fields": ["email"], "replacement": "***",
         "predicate": {"type": "TopicNameMatches", "pattern": r".*\.customers"}},
        {"type": "RegexRouter", "regex": rf"{tag}\.shop\.(.*)", "replacement": f"{tag}_$1"},
        {"type": "InsertField", "static_field": "source_system", "static_value": "shop"},
        {"type": "ReplaceField", "exclude": ["__source_ts_ms"], "renames": {"updated_ms": "updated_at"}},
    ]
    cfg = load_pipeline(write_pipeline(config_dir, tag, orders_topic, tag, sinks=[_sink()], transforms=transforms,
                                       source={"topics": [orders_topic, customers_topic]}))
    cdcgen.produce(bootstrap(), orders_topic, orders.events)
    cdcgen.produce(bootstrap(), customers_topic, customers, partitions=1)

    stats = runner.run_window(cfg, "golden", store=store, spark=spark)

    assert stats["dead_lettered"] == 0
    assert _rows(f"{tag}_customers", "id, name, email, source_system, __op") == [
        (1, "Ada L.", "***", "shop", "u"), (3, "Cy", "***", "shop", "c")]
    want = [(i, r["customer"], r["status"], r["amount"], r["updated_ms"], "shop") for i, r in sorted(orders.state.items())]
    assert _rows(f"{tag}_orders", "id, customer, status, amount, updated_at, source_system") == want
    assert set(_columns(f"{tag}_orders")) == {"id", "amount", "customer", "status", "updated_at", "__op",
                                              "source_system", "__cdc_version"}
    assert _columns(f"{tag}_orders")["id"] == "bigint(20)"


def test_schema_change_mid_stream_adds_and_fills_a_column(config_dir: Path, store: StateStore, spark: Any) -> None:
    tag = unique("evolve")
    cfg = load_pipeline(write_pipeline(
        config_dir, tag, f"t.{tag}", tag, versioning="kafka_offset",
        transforms=[{"type": "InsertField", "offset_field": "kafka_offset"}],
        sinks=[_sink(table=tag, pk_mode="record_value", primary_key=["id"])]))
    v1 = [cdcgen.Event(json.dumps({"id": i}).encode(), json.dumps({"id": i, "name": f"n{i}"}).encode()) for i in (1, 2)]
    cdcgen.produce(bootstrap(), cfg.source.topics[0], v1, partitions=1)
    runner.run_window(cfg, "v1", store=store, spark=spark)
    assert set(_columns(tag)) == {"id", "name", "kafka_offset", "__cdc_version"}

    v2 = [cdcgen.Event(b'{"id": 3}', json.dumps({"id": 3, "name": "n3", "email": "c@x", "score": 2.5}).encode()),
          cdcgen.Event(b'{"id": 1}', json.dumps({"id": 1, "name": "n1b", "email": "a@x", "score": 1.0}).encode())]
    cdcgen.produce(bootstrap(), cfg.source.topics[0], v2, create=False)
    runner.run_window(cfg, "v2", store=store, spark=spark)
    cols = _columns(tag)
    # a text is a LONGTEXT, as in every table made from a record schema (spark_jobs/transform/row_schemas.py; the older
    # Spark path made it a TEXT: docs/types.md)
    assert cols["email"] == "longtext" and cols["score"] == "double"
    assert _rows(tag, "id, name, email, score") == [(1, "n1b", "a@x", 1.0), (2, "n2", None, None), (3, "n3", "c@x", 2.5)]


def test_hostile_table_and_field_names_cannot_inject_sql(config_dir: Path, store: StateStore, spark: Any) -> None:
    tag = unique("hostile")
    victim = f"victim_{tag}"
    with mysql_engine().begin() as conn:
        conn.exec_driver_sql(f"CREATE TABLE `{victim}` (id INT PRIMARY KEY)")
        conn.exec_driver_sql(f"INSERT INTO `{victim}` VALUES (1)")
    evil_table = f"e`; DROP TABLE {victim}; --"
    fields = {"id": 1, "we\"ird": "q", "a`b": "tick", f"x'); DROP TABLE {victim}; --": "semi"}
    cfg = load_pipeline(write_pipeline(
        config_dir, tag, f"t.{tag}", tag, versioning="kafka_offset",
        transforms=[{"type": "Cast", "spec": {"id": "int64"}}],
        sinks=[_sink(table=evil_table, pk_mode="record_value", primary_key=["id"])]))
    cdcgen.produce(bootstrap(), cfg.source.topics[0], [cdcgen.Event(b'{"id": 1}', json.dumps(fields).encode())],
                   partitions=1)
    runner.run_window(cfg, "hostile", store=store, spark=spark)
    assert _rows(victim, "id") == [(1,)]  # still there
    assert set(_columns(evil_table)) == {*fields, "__cdc_version"}
    assert _rows(evil_table, "id, `a``b`, `we\"ird`") == [(1, "tick", "q")]


def test_routes_from_record_data_cannot_reach_cdcflow_tables_or_odd_names(config_dir: Path, store: StateStore,
                                                                         spark: Any) -> None:
    """ExtractTopic takes the topic from a field: a record must not route its row into cdcflow's own
    tables, or name a table a topic could not name; such records go to the DLQ with the reason."""
    tag = unique("route")
    cfg = load_pipeline(write_pipeline(
        config_dir, tag, f"t.{tag}", tag, versioning="kafka_offset",
        transforms=[{"type": "ExtractTopic", "field": "dest"}],
        sinks=[_sink(table="{topic}", pk_mode="record_value", primary_key=["id"])]))
    dests = [f"good_{tag}", "cdcflow_tombstones", "CDCFLOW-tombstones", ".kibana", "a b", "x`y", "", "../etc"]
    events = [cdcgen.Event(json.dumps({"id": i}).encode(), json.dumps({"id": i, "dest": d}).encode())
              for i, d in enumerate(dests)]
    cdcgen.produce(bootstrap(), cfg.source.topics[0], events, partitions=1)
    stats = runner.run_window(cfg, "routes", store=store, spark=spark)
    assert stats["dead_lettered"] == len(dests) - 1
    assert _rows(f"good_{tag}", "id, dest") == [(0, f"good_{tag}")]
    reasons = {json.loads(m.value())["dest"]: dict(m.headers())["__connect.errors.exception.message"].decode()
               for m in read_topic(cfg.errors.dlq_topic)}
    assert reasons["cdcflow_tombstones"] == ("the routed topic 'cdcflow_tombstones' is reserved: names starting "
                                             "with cdcflow_ or cdcflow- are cdcflow's own tables and indices")
    assert "is reserved" in reasons["CDCFLOW-tombstones"]
    for bad in (".kibana", "a b", "x`y", "", "../etc"):
        assert reasons[bad].startswith(f"the routed topic '{bad}' cannot name a table or an index"), reasons[bad]
    assert "dest" not in _columns("cdcflow_tombstones")


def test_a_record_a_transform_fails_on_goes_to_the_dlq_and_the_window_continues(
        config_dir: Path, store: StateStore, spark: Any) -> None:
    tag = unique("castfail")
    cfg = load_pipeline(write_pipeline(
        config_dir, tag, f"t.{tag}", tag, versioning="kafka_offset",
        transforms=[{"type": "Cast", "spec": {"qty": "int32"}}],
        sinks=[_sink(table=tag, pk_mode="record_value", primary_key=["id"])]))
    events = [cdcgen.Event(json.dumps({"id": i}).encode(), json.dumps({"id": i, "qty": q}).encode(), (("h", b"1"),))
              for i, q in ((1, "5"), (2, "many"), (3, "7"))]
    cdcgen.produce(bootstrap(), cfg.source.topics[0], events, partitions=1)
    stats = runner.run_window(cfg, "cast", store=store, spark=spark)
    assert stats["dead_lettered"] == 1
    assert _rows(tag, "id, qty") == [(1, 5), (3, 7)]
    [dead] = read_topic(cfg.errors.dlq_topic)
    h = dict(dead.headers())
    assert dead.value() == events[1].value and h["h"] == b"1"
    assert h["__connect.errors.stage"] == b"transform"
    assert h["__connect.errors.exception.message"] == b"Cast: value.qty = 'many' is not a valid int32"


def test_json_schema_converter_creates_typed_columns(config_dir: Path, store: StateStore, spark: Any) -> None:
    tag = unique("jsonschema")
    schema = {"type": "struct", "name": "shop.Item", "fields": [
        {"field": "id", "type": "int32"}, {"field": "title", "type": "string"},
        {"field": "price", "type": "float64"}, {"field": "active", "type": "boolean"}]}
    cfg = load_pipeline(write_pipeline(
        config_dir, tag, f"t.{tag}", tag, versioning="kafka_offset",
        source={"value_converter": "json_schema", "key_converter": "json"},
        transforms=[{"type": "SetSchemaMetadata", "name": "shop.Item", "version": 2}],
        sinks=[_sink(table=tag, pk_mode="record_value", primary_key=["id"])]))
    events = [cdcgen.Event(b'{"id": 1}', json.dumps({"schema": schema, "payload": {"id": 1, "title": "pen", "price": 1.25, "active": True}}).encode()),
              cdcgen.Event(b'{"id": 2}', b"not an envelope")]
    cdcgen.produce(bootstrap(), cfg.source.topics[0], events, partitions=1)
    stats = runner.run_window(cfg, "typed", store=store, spark=spark)
    assert stats["dead_lettered"] == 1
    cols = _columns(tag)
    # a Connect string is a LONGTEXT, as in every table made from a record schema (schema_columns.mysql_columns;
    # the older Spark path made it a TEXT: docs/transforms.md)
    assert (cols["id"], cols["title"], cols["price"], cols["active"]) == ("int(11)", "longtext", "double", "tinyint(1)")
    assert _rows(tag, "id, title, price, active") == [(1, "pen", 1.25, 1)]


def test_string_values_hoisted_into_a_table_with_kafka_coordinates(config_dir: Path, store: StateStore, spark: Any) -> None:
    tag = unique("lines")
    cfg = load_pipeline(write_pipeline(
        config_dir, tag, f"t.{tag}", tag, versioning="kafka_offset",
        source={"value_converter": "string", "key_converter": "string"},
        transforms=[{"type": "HoistField", "field": "line"}],
        sinks=[_sink(table=tag, pk_mode="kafka")]))
    cdcgen.produce(bootstrap(), cfg.source.topics[0], [cdcgen.Event(None, t.encode()) for t in ("one", "two")], partitions=1)
    runner.run_window(cfg, "lines", store=store, spark=spark)
    # pk_mode kafka: every record is its own row, keyed by its coordinates
    assert _rows(tag, "__connect_offset, line, __connect_partition") == [(0, "one", 0), (1, "two", 0)]
