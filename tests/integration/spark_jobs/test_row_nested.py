"""Flatten, ExtractField and HoistField (spark_jobs/transform/row_nested.py): the tables and indices read back
and compared with the values the source database held.

The records are Debezium's MySQL connector's own change events (tests/fixtures/debezium/orders.py:
the JsonConverter with schemas), read without ExtractNewRecordState, as Kafka Connect's record model
(an ExtractField of ``after`` is the unwrap a chain of the stock SMTs can do), and lines of text
read by the string converter.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from cdcflow import cdcgen, runner
from cdcflow.config import load_pipeline
from cdcflow.state import StateStore
from tests.fixtures import orders as o
from tests.fixtures.debezium import orders as fx
from tests.helpers import bootstrap, es_client, mysql_engine, unique, write_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.services("kafka", "mysql", "elasticsearch", "spark")]


def _rows(table: str, columns: str, order: str) -> list[tuple[Any, ...]]:
    with mysql_engine().connect() as conn:
        return [tuple(r) for r in conn.exec_driver_sql(f"SELECT {columns} FROM `{table}` ORDER BY {order}")]


def test_extract_field_after_gives_the_rows_and_documents_of_the_source(
        config_dir: Path, store: StateStore, spark: Any) -> None:
    """A delete event's ``after`` is null: the record becomes a tombstone, a delete of its key. The
    logical types inside ``after`` (Decimal bytes, Date days, MicroTimestamp) are read by their Connect
    schema, as the unwrap reads them."""
    tag = unique("nested")
    topic = f"{tag}.inventory.orders"
    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(k, v) for k, v in fx.events()], partitions=2)
    chain = [{"type": "ExtractField", "field": "after"}]
    columns = o.SINK_COLUMNS

    def run(path: str) -> dict[str, Any]:
        cfg = load_pipeline(write_pipeline(
            config_dir, f"{tag}_{path}", topic, f"{tag}_{path}", versioning="kafka_offset", transforms=chain,
            source={"key_converter": "json_schema", "value_converter": "json_schema"},
            sinks=[{"type": "mysql", "name": "m", "conn_id": "cdcflow_mysql", "table": f"{tag}_{path}",
                    "create_table": True, "primary_key": ["id"], "columns": columns},
                   {"type": "elasticsearch", "name": "e", "conn_id": "cdcflow_elasticsearch",
                    "index": f"{tag}-{path}", "id_fields": ["id"],
                    # 2^63 and 2^64-1 past a dynamic mapping's long
                    "mapping": {"dynamic": True, "properties": {"qty": {"type": "unsigned_long"}}}}]))
        return runner.run_window(cfg, path, store=store, spark=spark)

    new = run("new")
    names = [c["name"] for c in columns]
    want = [tuple(r[c] if c != "id" else i for c in names) for i, r in sorted(o.FINAL.items())]
    assert _rows(f"{tag}_new", ", ".join(names), "id") == want
    assert (new["records"], new["dead_lettered"]) == (len(fx.events()), 0)
    es = es_client()
    es.indices.refresh(index=f"{tag}-new")
    documents = {h["_id"]: h["_source"] for h in es.search(index=f"{tag}-new", size=10)["hits"]["hits"]}
    assert documents == {str(i): {"id": i, "customer": r["customer"], "paid": r["paid"], "note": r["note"],
                                  "amount": float(r["amount"]), "qty": r["qty"], "ship_date": r["ship_date"].isoformat(),
                                  "created": r["created"].isoformat(timespec="microseconds")}
                         for i, r in sorted(o.FINAL.items())}


def test_flatten_and_lines_hoisted_give_the_rows_of_the_source(
        config_dir: Path, store: StateStore, spark: Any) -> None:
    """Flatten of Debezium's envelope (its source block's fields by their path), and text lines
    (the string converter) hoisted into a field."""
    tag = unique("flat")
    topic, lines = f"{tag}.inventory.orders", f"{tag}.lines"
    upserts = [(k, v) for k, v in fx.events() if v is not None and b'"op":"d"' not in v]
    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(k, v) for k, v in upserts], partitions=1)
    cdcgen.produce(bootstrap(), lines, [cdcgen.Event(None, t.encode()) for t in ("one", "two", "drei")], partitions=1)
    flat = [{"name": "after_id", "type": "INT"}, {"name": "after_customer", "type": "VARCHAR(64)"},
            {"name": "source_file", "type": "VARCHAR(64)"}, {"name": "source_pos", "type": "BIGINT"},
            {"name": "op", "type": "VARCHAR(1)"}]

    def run(path: str) -> dict[str, Any]:
        stats = {}
        for name, source, chain, columns, key in (
                ("flat", topic, [{"type": "Flatten", "delimiter": "_"}], flat, "after_id"),
                ("lines", lines, [{"type": "HoistField", "field": "line"}], [{"name": "line", "type": "VARCHAR(8)"}],
                 "line")):
            cfg = load_pipeline(write_pipeline(
                config_dir, f"{tag}_{name}_{path}", source, f"{tag}_{name}_{path}", versioning="kafka_offset",
                transforms=chain, source={"key_converter": "json_schema" if name == "flat" else "string",
                                          "value_converter": "json_schema" if name == "flat" else "string"},
                sinks=[{"type": "mysql", "name": "m", "conn_id": "cdcflow_mysql", "table": f"{tag}_{name}_{path}",
                        "create_table": True, "primary_key": [key], "columns": columns}]))
            stats[name] = runner.run_window(cfg, f"{name}_{path}", store=store, spark=spark)
        return stats

    new = run("new")
    got = _rows(f"{tag}_flat_new", "after_id, after_customer, source_file, source_pos, op", "after_id")
    last = {after["id"]: after for s in o.STATEMENTS for _before, after in s.rows if after is not None}
    assert [r[:2] for r in got] == [(i, r["customer"]) for i, r in sorted(last.items())]
    assert {r[2] for r in got} == {"mysql-bin.000003"} and all(r[3] > 0 for r in got)
    assert _rows(f"{tag}_lines_new", "line", "line") == [("drei",), ("one",), ("two",)]
    assert new["flat"]["dead_lettered"] == 0


def test_lines_with_pk_mode_kafka_append_a_row_per_record(
        config_dir: Path, store: StateStore, spark: Any) -> None:
    """pk_mode kafka, declared columns: every record is a row keyed by its coordinates; a tombstone
    deletes nothing."""
    tag = unique("kafkapk")
    topic = f"{tag}.lines"
    events = [cdcgen.Event(None, t.encode()) for t in ("one", "two", "one")] + [cdcgen.Event(b"k", None)]
    cdcgen.produce(bootstrap(), topic, events, partitions=1)
    columns = [{"name": "__connect_topic", "type": "VARCHAR(249)"}, {"name": "__connect_partition", "type": "INT"},
               {"name": "__connect_offset", "type": "BIGINT"}, {"name": "line", "type": "VARCHAR(8)"}]

    def run(path: str) -> dict[str, Any]:
        cfg = load_pipeline(write_pipeline(
            config_dir, f"{tag}_{path}", topic, f"{tag}_{path}", versioning="kafka_offset",
            transforms=[{"type": "HoistField", "field": "line"}],
            source={"key_converter": "string", "value_converter": "string"},
            sinks=[{"type": "mysql", "name": "m", "conn_id": "cdcflow_mysql", "table": f"{tag}_{path}",
                    "create_table": True, "pk_mode": "kafka", "columns": columns,
                    "primary_key": ["__connect_topic", "__connect_partition", "__connect_offset"]}]))
        return runner.run_window(cfg, path, store=store, spark=spark)

    new = run("new")
    columns_read = "__connect_topic, __connect_partition, __connect_offset, line"
    assert _rows(f"{tag}_new", columns_read, "__connect_offset") == [
        (topic, 0, 0, "one"), (topic, 0, 1, "two"), (topic, 0, 2, "one")]
    assert new["records"] == 4


def test_bytes_hoisted_give_the_bytes_back(
        config_dir: Path, store: StateStore, spark: Any) -> None:
    """The bytes converter (Kafka Connect's ByteArrayConverter: the value's bytes as they are), hoisted
    into a field, pk_mode kafka: a BLOB column gets the bytes back, a text column their base64 (the
    form a row image and a document hold binary data in)."""
    tag = unique("bytes")
    topic = f"{tag}.blobs"
    raw = [b"\x00\x01\xfe\xff", b"", "Grüße".encode(), bytes(range(256))]
    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(b"\x80k", v) for v in raw], partitions=1)
    columns = [{"name": "__connect_topic", "type": "VARCHAR(249)"}, {"name": "__connect_partition", "type": "INT"},
               {"name": "__connect_offset", "type": "BIGINT"}, {"name": "payload", "type": "BLOB"},
               {"name": "shown", "type": "TEXT", "field": "payload"}]

    def run(path: str) -> dict[str, Any]:
        cfg = load_pipeline(write_pipeline(
            config_dir, f"{tag}_{path}", topic, f"{tag}_{path}", versioning="kafka_offset",
            transforms=[{"type": "HoistField", "field": "payload"}],
            source={"key_converter": "bytes", "value_converter": "bytes"},
            sinks=[{"type": "mysql", "name": "m", "conn_id": "cdcflow_mysql", "table": f"{tag}_{path}",
                    "create_table": True, "pk_mode": "kafka", "columns": columns,
                    "primary_key": ["__connect_topic", "__connect_partition", "__connect_offset"]}]))
        return runner.run_window(cfg, path, store=store, spark=spark)

    new = run("new")
    assert _rows(f"{tag}_new", "__connect_offset, payload, shown", "__connect_offset") == [
        (i, value, base64.b64encode(value).decode("ascii")) for i, value in enumerate(raw)]
    assert (new["records"], new["dead_lettered"]) == (4, 0)
