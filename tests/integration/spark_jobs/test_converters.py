"""The json_schema converter end to end (issue 40): Kafka -> every Connect schema of the window ->
MySQL, and what cannot be read -> the DLQ with why, read back from the broker.

The records are Debezium's MySQL connector's, with the JsonConverter's ``{schema, payload}``
(``schemas.enable=true``), built with tests/fixtures/debezium/mysql_all_types.py's encoders (its
docstring names the pages: mysql.adoc "Change event keys", "Change event values", "create events",
"Data type mappings"; the envelope and source schemas from ``io.debezium.data.Envelope`` and
``BinlogSourceInfoStructMaker``). A table whose columns change between events: Debezium reads each
ALTER TABLE from the binlog and the next events carry the new ``.Value`` schema (mysql.adoc "Schema
history topic"), so a window holds as many distinct schemas as the table had shapes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cdcflow import cdcgen, runner
from cdcflow.config import load_pipeline
from cdcflow.state import StateStore
from connectors.mysql.evolution import SchemaChangeRefused
from tests.fixtures.debezium import mysql_all_types as base
from tests.helpers import bootstrap, mysql_engine, unique, write_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.services("kafka", "mysql", "spark")]

SERVER, DATABASE, TABLE = "mysql-server-1", "inventory", "gadgets"
# the extra column of each shape of the table, by its place: (MySQL type as Debezium maps it, value of row i)
EXTRA_KINDS: list[tuple[str, Any]] = [("int", lambda i: i * 7 - 500), ("string", lambda i: f"gadget №{i}"),
                                      ("bigint", lambda i: 2**40 + i), ("double", lambda i: i + 0.25)]


def _event(topic: str, i: int, columns: list[tuple[str, str]], row: dict[str, Any], at: int) -> cdcgen.Event:
    """A create event (op c) of ``row`` in a table of ``columns`` [(name, kind)], keyed by ``id``."""
    modes = {"time": "adaptive_time_microseconds", "decimal": "precise", "binary": "bytes", "bigint": "long"}
    row_schema = base._schema("struct", True, name=f"{topic}.Value", fields=[
        base._field(name, base._column_schema(kind, name != "id", None, modes)) for name, kind in columns])
    envelope = base._schema("struct", False, name=f"{topic}.Envelope", version=2, fields=[
        base._field("before", row_schema), base._field("after", row_schema),
        base._field("source", base._SOURCE_SCHEMA), base._field("transaction", base._TRANSACTION_SCHEMA),
        base._field("op", base._schema("string", False)), base._field("ts_ms", base._schema("int64", True)),
        base._field("ts_us", base._schema("int64", True)), base._field("ts_ns", base._schema("int64", True))])
    key_schema = base._schema("struct", False, name=f"{topic}.Key",
                              fields=[base._field("id", base._schema("int32", False))])
    source = {"version": base.DEBEZIUM_VERSION, "connector": "mysql", "name": SERVER, "ts_ms": at * 1000,
              "snapshot": "false", "db": DATABASE, "sequence": None, "ts_us": at * 1_000_000,
              "ts_ns": at * 1_000_000_000, "table": TABLE, "server_id": base.SERVER_ID, "gtid": None,
              "file": base.BINLOG_FILE, "pos": 4_096 + 700 * i, "row": 0, "thread": base.THREAD_ID, "query": None}
    payload = {"before": None, "after": {n: base._column_value(k, None, row[n], modes) for n, k in columns},
               "source": source, "transaction": None, "op": "c",
               "ts_ms": at * 1000 + 150, "ts_us": at * 1_000_000 + 150_000, "ts_ns": at * 1_000_000_000 + 150_000_000}
    return cdcgen.Event(base._wrap(key_schema, {"id": row["id"]}, True), base._wrap(envelope, payload, True))


def _pipeline(config_dir: Path, tag: str, topic: str) -> Any:
    return load_pipeline(write_pipeline(
        config_dir, tag, topic, tag, source={"key_converter": "json_schema", "value_converter": "json_schema"},
        transforms=[{"type": "ExtractNewRecordState"}],
        sinks=[{"type": "mysql", "name": "m", "conn_id": "cdcflow_mysql", "table": tag, "create_table": True,
                "pk_mode": "record_key"}]))


def _table(table: str) -> list[dict[str, Any]]:
    with mysql_engine().connect() as conn:
        result = conn.exec_driver_sql(f"SELECT * FROM `{table}` ORDER BY id")
        return [dict(r._mapping) for r in result]


def test_every_field_of_a_window_of_150_schemas_reaches_the_table(
        config_dir: Path, store: StateStore, spark: Any) -> None:
    """150 events, each after an ALTER TABLE that dropped the column before and added one of its own
    (``ALTER TABLE gadgets DROP COLUMN f<i-1>, ADD COLUMN f<i> …``): 150 distinct Connect schemas in one
    window. The json_schema converter merged at most 100, not chosen deterministically, and the other
    records lost their column without a dead letter. Every value read back."""
    tag = unique("schemas")
    topic = f"{tag}.{DATABASE}.{TABLE}"
    events, want = [], []
    for i in range(150):
        kind, value = EXTRA_KINDS[i % len(EXTRA_KINDS)]
        row = {"id": i + 1, "name": f"g{i}", f"f{i}": value(i)}
        events.append(_event(topic, i, [("id", "int"), ("name", "string"), (f"f{i}", kind)], row, 1_767_225_600 + i))
        want.append(row)
    cdcgen.produce(bootstrap(), topic, events, partitions=3)
    stats = runner.run_window(_pipeline(config_dir, tag, topic), "w", store=store, spark=spark)

    assert (stats["records"], stats["dead_lettered"]) == (150, 0)
    rows = _table(tag)
    assert set(rows[0]) >= {"id", "name", *(f"f{i}" for i in range(150))}
    got = [{k: v for k, v in r.items() if v is not None and not k.startswith("__")} for r in rows]
    assert got == want


def test_a_column_whose_type_changed_within_the_window_follows_schema_changes(
        config_dir: Path, store: StateStore, spark: Any) -> None:
    """``ALTER TABLE gadgets MODIFY qty VARCHAR(16)`` between events: their schemas give qty int32,
    then string. The table made from the record schema follows ``schema_changes``: ``lenient`` (the
    default) never converts a column, so the window stops before any write, naming the column and
    both types, and no offset moves; with ``evolve`` the column becomes a text that holds every old
    value, and every record of the window is written."""
    tag = unique("schemaclash")
    topic = f"{tag}.{DATABASE}.{TABLE}"
    before = [("id", "int"), ("name", "string"), ("qty", "int")]
    added = [*before, ("note", "string")]
    after = [("id", "int"), ("name", "string"), ("qty", "string")]
    events = [_event(topic, 0, before, {"id": 1, "name": "a", "qty": 5}, 1_767_225_600),
              _event(topic, 1, added, {"id": 2, "name": "b", "qty": 6, "note": "n"}, 1_767_225_601),
              _event(topic, 2, after, {"id": 3, "name": "c", "qty": "many"}, 1_767_225_602),
              _event(topic, 3, after, {"id": 1, "name": "a2", "qty": "7"}, 1_767_225_603)]
    cdcgen.produce(bootstrap(), topic, events, partitions=1)
    cfg = _pipeline(config_dir, tag, topic)

    with pytest.raises(SchemaChangeRefused, match=rf"table '{tag}' column 'qty': int\(11\) -> LONGTEXT"):
        runner.run_window(cfg, "w", store=store, spark=spark)
    assert store.offsets.load(cfg.name) == {}
    stats = runner.run_window(cfg.model_copy(update={"schema_changes": "evolve"}), "w2", store=store, spark=spark)

    assert (stats["records"], stats["dead_lettered"]) == (4, 0)
    got = [{k: v for k, v in r.items() if not k.startswith("__")} for r in _table(tag)]
    assert got == [{"id": 1, "name": "a2", "qty": "7", "note": None}, {"id": 2, "name": "b", "qty": "6", "note": "n"},
                   {"id": 3, "name": "c", "qty": "many", "note": None}]
