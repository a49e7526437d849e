"""A whole Debezium deployment in one pipeline: one topic per table, found by a topics regex, each
routed to its own table by ``{source.table}`` and created from its Connect schema; and primary-key
changes, as the connector writes them (a delete of the old key with its tombstone, then a create of
the new key, with the __debezium.oldkey / __debezium.newkey headers).

The events are those of tests/fixtures/debezium/mysql_all_types.py (Debezium's documented shapes),
with the table renamed where a test needs many tables or another key: the shape stays the
connector's."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from cdcflow import cdcgen, runner
from cdcflow.config import load_pipeline
from cdcflow.connections import get_connection
from cdcflow.state import StateStore
from tests.fixtures.debezium import mysql_all_types as fx
from tests.helpers import bootstrap, make_pipeline, mysql_engine, read_topic, unique, write_pipeline
from tests.integration.connectors.debezium.test_types import (
    DERIVED_ES,
    doc_value,
    final_rows,
    mysql_value,
    read_es,
    read_mysql,
)

pytestmark = [pytest.mark.integration, pytest.mark.services]

TABLES = 50
# what the record schema gives each column (docs/types.md, "Tables from the record schema")
DERIVED = {"id": "int(11)", "c_tinyint1": "tinyint(4)", "c_boolean": "tinyint(1)", "c_bigint": "bigint(20)",
           "c_decimal": "decimal(10,2)", "c_varchar": "longtext", "c_blob": "longblob", "c_date": "date",
           "c_time6": "time(6)", "c_datetime3": "datetime(3)", "c_datetime6": "datetime(6)",
           "c_timestamp3": "timestamp(6)", "c_year": "year(4)", "c_enum": "enum('small','medium','large')",
           "c_set": "set('red','green','blue')", "c_bit10": "bit(10)", "c_json": "longtext", "c_point": "point"}


def renamed(event: tuple[bytes, bytes | None], table: str) -> tuple[bytes, bytes | None]:
    """The same change of another table of the same shape: source.table and the schema names."""
    key, value = event
    if value is None:
        return key, value
    return (key.replace(b".all_types.", f".{table}.".encode()),
            value.replace(b'"table":"all_types"', f'"table":"{table}"'.encode())
            .replace(b".all_types.", f".{table}.".encode()))


def edited(event: tuple[bytes, bytes | None], seconds_later: int, **after: Any) -> tuple[bytes, bytes | None]:
    """An update event changed as a later UPDATE of the same row would be (after image and times)."""
    key, value = event
    assert value is not None
    doc = json.loads(value)
    doc["payload"]["after"].update(after)
    doc["payload"]["source"]["ts_ms"] += seconds_later * 1000
    doc["payload"]["ts_ms"] += seconds_later * 1000
    return key, json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def column_types(table: str) -> dict[str, str]:
    with mysql_engine().connect() as conn:
        return {r[0]: r[1] for r in conn.exec_driver_sql(
            "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
            "AND TABLE_NAME = %s", (table,))}


def test_fifty_tables_by_topics_regex_routed_by_source_table_and_created_from_the_schema(
        config_dir: Path, store: StateStore, spark: Any) -> None:
    prefix = unique("inv")
    path = write_pipeline(config_dir, prefix, f"{prefix}.unused", "unused", sinks=[
        {"type": "mysql", "name": "rows", "conn_id": "cdcflow_mysql", "table": f"{prefix}_{{source.table}}",
         "create_table": True, "auto_evolve": True},
        {"type": "elasticsearch", "name": "docs", "conn_id": "cdcflow_elasticsearch", "index": "{topic}",
         "id_fields": ["id"], "behavior_on_null_values": "delete"}])
    data = yaml.safe_load(path.read_text())
    data["source"] = {**{k: v for k, v in data["source"].items() if k != "topics"},
                      "topics_regex": rf"{prefix}\.inventory\..*"}
    path.write_text(yaml.safe_dump(data))
    cfg = load_pipeline(path)
    tables = [f"t{i:02d}" for i in range(TABLES)]
    for table in tables:
        cdcgen.produce(bootstrap(), f"{prefix}.inventory.{table}",
                       [cdcgen.Event(*renamed(e, table)) for e in fx.events()], partitions=1)

    first = runner.run_window(cfg, "run-1", store=store, spark=spark)

    assert first["records"] == 6 * TABLES and first["dead_lettered"] == 0, first
    expected = final_rows("adaptive_time_microseconds")
    for table in tables:
        got = read_mysql(f"{prefix}_{table}")
        assert sorted(got) == sorted(expected), table
        for key, row in expected.items():
            for name, value in row.items():
                if name != "c_bigint_unsigned":  # long mode: the connector's own wrap-around (see DOCS)
                    assert got[key][name] == mysql_value(name, value), f"{table} row {key} column {name}"
    url = get_connection("cdcflow_elasticsearch").http_url()
    for table in tables:  # each topic's index, with the mapping of its own schema
        index = f"{prefix}.inventory.{table}"
        docs = read_es(index)
        assert sorted(docs) == sorted(expected), index
        for key, row in expected.items():
            for name, value in row.items():
                if name != "c_bigint_unsigned":  # long mode: the connector's own wrap-around, as above
                    assert docs[key].get(name) == doc_value(name, value, {}), f"{index} doc {key} field {name}"
        properties = requests.get(f"{url}/{index}/_mapping", timeout=30).json()[index]["mappings"]["properties"]
        # long mode: an int64 schema, nothing says unsigned (test_debezium_types declares the column)
        assert {k: properties[k] for k in DERIVED_ES} == {**DERIVED_ES, "c_bigint_unsigned": {"type": "long"}}, index
    types = column_types(f"{prefix}_t07")
    assert {k: types[k] for k in DERIVED} == DERIVED
    with mysql_engine().connect() as conn:
        key = conn.exec_driver_sql(
            "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = DATABASE() AND "
            "TABLE_NAME = %s AND CONSTRAINT_NAME = 'PRIMARY'", (f"{prefix}_t07",)).all()
    assert [r[0] for r in key] == ["id"]  # from the record key's schema

    # a second window: a later update of row 1 in ten of the tables, and a table that appears later
    update = fx.events()[3]
    changed = tables[::5]
    for table in changed:
        cdcgen.produce(bootstrap(), f"{prefix}.inventory.{table}",
                       [cdcgen.Event(*renamed(edited(update, 600, c_varchar="second window"), table))],
                       partitions=1, create=False)
    cdcgen.produce(bootstrap(), f"{prefix}.inventory.late", [cdcgen.Event(*renamed(e, "late")) for e in fx.events()],
                   partitions=1)

    second = runner.run_window(cfg, "run-2", store=store, spark=spark)

    assert second["records"] == len(changed) + 6 and second["dead_lettered"] == 0, second
    for table in tables:
        got = read_mysql(f"{prefix}_{table}")
        assert got[1]["c_varchar"] == ("second window" if table in changed else fx.UPDATE_1["c_varchar"]), table
        assert got[2]["c_timestamp"] == mysql_value("c_timestamp", expected[2]["c_timestamp"])
    assert sorted(read_mysql(f"{prefix}_late")) == sorted(expected)


def same_schema(event: tuple[bytes, bytes | None], table: str) -> tuple[bytes, bytes | None]:
    """The same change of another table whose records carry the very same schemas, names included
    (the value's ``…Envelope``/``…Value`` and the key's ``…Key``): only ``source.table`` differs. So
    do shards of one logical table routed to several topics, producers that name every schema alike,
    and ``schema.name.adjustment``-ed names that collide (issue 42, part 4)."""
    key, value = event
    return key, None if value is None else value.replace(b'"table":"all_types"', f'"table":"{table}"'.encode())


def test_topics_whose_records_share_one_schema_name_each_get_their_own_table_and_index(
        config_dir: Path, store: StateStore, spark: Any) -> None:
    """50 topics under one topics_regex, every record with one schema name (and one content), each
    topic's table created from the schema by ``{source.table}`` and each index mapped from it by
    ``{topic}``: a table is its route's, a schema is shared by content (issue 42, part 4)."""
    topics = TABLES
    prefix = unique("same")
    path = write_pipeline(config_dir, prefix, f"{prefix}.unused", "unused", sinks=[
        {"type": "mysql", "name": "rows", "conn_id": "cdcflow_mysql", "table": f"{prefix}_{{source.table}}_x",
         "create_table": True},
        {"type": "elasticsearch", "name": "docs", "conn_id": "cdcflow_elasticsearch", "index": "{topic}",
         "id_fields": ["id"], "behavior_on_null_values": "delete"}])
    data = yaml.safe_load(path.read_text())
    data["source"] = {**{k: v for k, v in data["source"].items() if k != "topics"},
                      "topics_regex": rf"{prefix}\.inventory\..*"}
    path.write_text(yaml.safe_dump(data))
    cfg = load_pipeline(path)
    tables = [f"t{i:03d}" for i in range(topics)]
    for table in tables:
        cdcgen.produce(bootstrap(), f"{prefix}.inventory.{table}",
                       [cdcgen.Event(*same_schema(e, table)) for e in fx.events()], partitions=1)
    names = {json.loads(v)["schema"]["name"] for _k, v in
             (same_schema(e, t) for t in tables for e in fx.events()) if v is not None}
    assert names == {f"{fx.TOPIC}.Envelope"}  # one envelope name on every topic

    stats = runner.run_window(cfg, "run-1", store=store, spark=spark)

    assert stats["records"] == 6 * topics and stats["dead_lettered"] == 0, stats
    expected = final_rows("adaptive_time_microseconds")
    for table in tables:
        got = read_mysql(f"{prefix}_{table}_x")
        assert sorted(got) == sorted(expected), table
        for key, row in expected.items():
            for name, value in row.items():
                if name != "c_bigint_unsigned":  # long mode: the connector's own wrap-around (see DOCS)
                    assert got[key][name] == mysql_value(name, value), f"{table} row {key} column {name}"
        index = f"{prefix}.inventory.{table}"
        docs = read_es(index)
        assert sorted(docs) == sorted(expected), index
        for key, row in expected.items():
            for name, value in row.items():
                if name != "c_bigint_unsigned":
                    assert docs[key].get(name) == doc_value(name, value, {}), f"{index} doc {key} field {name}"
    types = column_types(f"{prefix}_{tables[-1]}_x")
    assert {k: types[k] for k in DERIVED} == DERIVED


# what a table from the schema gets with column.propagate.source.type=.* (issue 42, part 6): the source
# table's own types (tests/fixtures/debezium/mysql_all_types.DDL), as MariaDB shows them
SOURCE_DERIVED = {
    "id": "int(11)", "c_tinyint": "tinyint(4)", "c_tinyint1": "tinyint(1)", "c_boolean": "tinyint(1)",
    "c_smallint": "smallint(6)", "c_mediumint": "mediumint(9)", "c_bigint": "bigint(20)",
    "c_bigint_unsigned": "bigint(20) unsigned", "c_float": "float", "c_double": "double", "c_decimal": "decimal(10,2)",
    "c_char": "char(3)", "c_varchar": "varchar(255)", "c_text": "text", "c_binary": "binary(4)",
    "c_varbinary": "varbinary(16)", "c_blob": "blob", "c_date": "date", "c_time": "time", "c_time3": "time(3)",
    "c_time6": "time(6)", "c_datetime": "datetime", "c_datetime3": "datetime(3)", "c_datetime6": "datetime(6)",
    "c_timestamp": "timestamp", "c_timestamp3": "timestamp(3)", "c_year": "year(4)",
    "c_enum": "enum('small','medium','large')", "c_set": "set('red','green','blue')", "c_bit1": "bit(1)",
    "c_bit10": "bit(10)", "c_json": "longtext", "c_point": "point"}


@pytest.mark.parametrize("column_wise", [True, False], ids=["column-wise", "record-by-record"])
@pytest.mark.parametrize(("time_mode", "decimal_mode", "bigint_unsigned_mode"), [
    ("adaptive_time_microseconds", "precise", "long"), ("connect", "string", "precise")])
def test_a_table_from_a_schema_with_the_source_types_gets_them(
        config_dir: Path, store: StateStore, spark: Any, monkeypatch: pytest.MonkeyPatch, column_wise: bool,
        time_mode: str, decimal_mode: str, bigint_unsigned_mode: str) -> None:
    """column.propagate.source.type=.* (the fixture's SOURCE_TYPES, as Debezium's MySQL connector adds
    them): the table created from the schema has the source's exact types, TIME(3), TIMESTAMP(3),
    VARCHAR(255), CHAR(3), TINYINT(1), MEDIUMINT, BINARY(4), BIGINT UNSIGNED …, and every value reads
    back equal, the BIGINT UNSIGNED above 2^63 too (long mode: restored, as a declared column does);
    the index mapped from the schema maps it as unsigned_long (issue 42, part 6)."""
    if column_wise:
        monkeypatch.setenv("CDCFLOW_COLUMN_WISE_MIN", "1")
    table, index = unique("source_types"), unique("source-types").replace("_", "-")
    cfg = make_pipeline(config_dir, sinks=[
        {"type": "mysql", "name": "rows", "conn_id": "cdcflow_mysql", "table": table, "create_table": True},
        {"type": "elasticsearch", "name": "docs", "conn_id": "cdcflow_elasticsearch", "index": index,
         "id_fields": ["id"], "behavior_on_null_values": "delete"}])
    modes = {"time_precision_mode": time_mode, "decimal_mode": decimal_mode,
             "bigint_unsigned_mode": bigint_unsigned_mode}
    cdcgen.produce(bootstrap(), cfg.source.topics[0],
                   [cdcgen.Event(k, v) for k, v in fx.events(**modes, propagate_source_type=True)], partitions=1)

    stats = runner.run_window(cfg, "run-1", store=store, spark=spark)

    assert stats["dead_lettered"] == 0, stats
    types = column_types(table)
    assert {k: v for k, v in types.items() if k != "__cdc_version"} == SOURCE_DERIVED
    expected = final_rows(time_mode)
    got = read_mysql(table)
    assert sorted(got) == sorted(expected)
    for key, row in expected.items():
        for name, value in row.items():
            assert got[key][name] == mysql_value(name, value), f"row {key} column {name} ({fx.DOCS[name]})"
    docs = read_es(index)
    assert sorted(docs) == sorted(expected)
    for key, row in expected.items():
        for name, value in row.items():
            assert docs[key].get(name) == doc_value(name, value, {"decimal_mode": decimal_mode}), \
                f"doc {key} field {name} ({fx.DOCS[name]})"
    url = get_connection("cdcflow_elasticsearch").http_url()
    properties = requests.get(f"{url}/{index}/_mapping", timeout=30).json()[index]["mappings"]["properties"]
    assert properties["c_bigint_unsigned"] == {"type": "unsigned_long"}


def test_a_table_from_a_schema_without_the_source_types_keeps_todays_types(config_dir: Path, store: StateStore,
                                                                         spark: Any) -> None:
    """The same records without the propagated parameters: the types of the data type tables, as before."""
    table = unique("no_source_types")
    cfg = make_pipeline(config_dir, sinks=[
        {"type": "mysql", "name": "rows", "conn_id": "cdcflow_mysql", "table": table, "create_table": True}])
    cdcgen.produce(bootstrap(), cfg.source.topics[0], [cdcgen.Event(k, v) for k, v in fx.events()], partitions=1)
    stats = runner.run_window(cfg, "run-1", store=store, spark=spark)
    assert stats["dead_lettered"] == 0, stats
    types = column_types(table)
    assert {k: types[k] for k in DERIVED} == DERIVED
    assert (types["c_tinyint1"], types["c_mediumint"], types["c_char"], types["c_time3"], types["c_bigint_unsigned"]) \
        == ("tinyint(4)", "int(11)", "longtext", "time(6)", "bigint(20)")

    # the connector propagates the source types from now on: the exact types are narrower than the
    # table's, which was made from the same fields and holds their values; no DDL, the window writes
    later = edited(fx.events(propagate_source_type=True)[1], 600, c_varchar="propagated", c_time3=45_296_789_000)
    cdcgen.produce(bootstrap(), cfg.source.topics[0], [cdcgen.Event(*later)], partitions=1, create=False)
    second = runner.run_window(cfg, "run-2", store=store, spark=spark)
    assert second["dead_lettered"] == 0 and not second.get("schema_changes"), second
    assert column_types(table) == types
    rows = read_mysql(table)
    assert (rows[2]["c_varchar"], rows[2]["c_time3"]) == ("propagated", dt.timedelta(hours=12, minutes=34,
                                                                                      seconds=56, milliseconds=789))


def _key_change(old: int, new: int) -> list[cdcgen.Event]:
    """UPDATE all_types SET id = new WHERE id = old, as the connector writes it: a delete of the old
    key carrying __debezium.newkey, its tombstone, and a create of the new key carrying
    __debezium.oldkey (mysql.adoc, "Primary key updates")."""
    update = fx.events()[3]
    doc = json.loads(update[1])  # the update of row 1, as the connector would split it
    old_key, new_key = (update[0].replace(b'"payload":{"id":1}', f'"payload":{{"id":{k}}}'.encode())
                        for k in (old, new))
    before = {**doc["payload"]["before"], "id": old}
    after = {**doc["payload"]["after"], "id": new}
    deleted = {**doc["payload"], "before": before, "after": None, "op": "d"}
    created = {**doc["payload"], "before": None, "after": after, "op": "c"}
    as_bytes = lambda p: json.dumps({"schema": doc["schema"], "payload": p}, separators=(",", ":"),  # noqa: E731
                                    ensure_ascii=False).encode()
    return [cdcgen.Event(old_key, as_bytes(deleted), (("__debezium.newkey", json.dumps({"id": new}).encode()),)),
            cdcgen.Event(old_key, None),
            cdcgen.Event(new_key, as_bytes(created), (("__debezium.oldkey", json.dumps({"id": old}).encode()),))]


@pytest.mark.parametrize("split", [None, 1, 2], ids=["one-window", "after-the-delete", "after-the-tombstone"])
def test_a_primary_key_change_leaves_the_row_under_its_new_key_only(config_dir: Path, store: StateStore,
                                                                    spark: Any, split: int | None) -> None:
    cfg = make_pipeline(config_dir, sinks=[
        {"type": "mysql", "name": "rows", "conn_id": "cdcflow_mysql", "table": unique("keys"), "create_table": True}])
    topic = cfg.source.topics[0]
    first = [cdcgen.Event(k, v) for k, v in fx.events()[:3]]  # rows 1, 2, 3 created
    change = _key_change(1, 10)
    head, tail = (change, []) if split is None else (change[:split], change[split:])
    cdcgen.produce(bootstrap(), topic, first + head, partitions=1)
    runner.run_window(cfg, "run-1", store=store, spark=spark)
    if tail:
        cdcgen.produce(bootstrap(), topic, tail, partitions=1, create=False)
        runner.run_window(cfg, "run-2", store=store, spark=spark)

    rows = read_mysql(cfg.sinks[0].table)
    assert sorted(rows) == [2, 3, 10]
    assert rows[10]["c_varchar"] == fx.UPDATE_1["c_varchar"] and rows[10]["c_decimal"] == fx.UPDATE_1["c_decimal"]


def test_auto_evolve_adds_the_columns_of_a_later_schema(config_dir: Path, store: StateStore, spark: Any) -> None:
    """ALTER TABLE all_types ADD COLUMN c_note VARCHAR(64) at the source: the connector's later events
    carry the column in both row schemas; the table created from the first schema gains it."""
    cfg = make_pipeline(config_dir, sinks=[
        {"type": "mysql", "name": "rows", "conn_id": "cdcflow_mysql", "table": unique("evolve"),
         "create_table": True, "auto_evolve": True}])
    topic, table = cfg.source.topics[0], cfg.sinks[0].table
    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(k, v) for k, v in fx.events()[:3]], partitions=1)
    runner.run_window(cfg, "run-1", store=store, spark=spark)
    assert "c_note" not in column_types(table)

    key, value = edited(fx.events()[3], 600)
    doc = json.loads(value)
    for part in doc["schema"]["fields"][:2]:  # before and after
        part["fields"].append({"type": "string", "optional": True, "field": "c_note"})
    doc["payload"]["before"]["c_note"] = None
    doc["payload"]["after"]["c_note"] = "added at the source"
    later = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(key, later)], partitions=1, create=False)
    stats = runner.run_window(cfg, "run-2", store=store, spark=spark)

    assert stats["dead_lettered"] == 0 and column_types(table)["c_note"] == "longtext"
    with mysql_engine().connect() as conn:
        assert conn.exec_driver_sql(f"SELECT id, c_note FROM `{table}` ORDER BY id").all() == [
            (1, "added at the source"), (2, None), (3, None)]


def test_a_value_that_does_not_fit_a_table_from_the_schema_goes_to_the_dlq(config_dir: Path, store: StateStore,
                                                                          spark: Any) -> None:
    """The source column changed type within a window (MEDIUMINT to a string), under ``schema_changes:
    ignore``: the table is created from the first schema and keeps its INT column (the change is
    recorded, not applied), and the later change, whose value MySQL refuses, goes to the DLQ, named.
    (Under ``lenient`` the window stops, as it does when the change comes in a later window: the
    table is created from the first schema, then changed to the latest: test_schema_changes.py.)"""
    cfg = make_pipeline(config_dir, schema_changes="ignore", sinks=[
        {"type": "mysql", "name": "rows", "conn_id": "cdcflow_mysql", "table": unique("unfit"), "create_table": True}])
    topic, table = cfg.source.topics[0], cfg.sinks[0].table
    key, value = edited(fx.events()[3], 600)
    doc = json.loads(value)
    for part in doc["schema"]["fields"][:2]:
        for f in part["fields"]:
            if f["field"] == "c_mediumint":
                f["type"] = "string"
    doc["payload"]["before"]["c_mediumint"] = None
    doc["payload"]["after"]["c_mediumint"] = "not a number"
    later = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(k, v) for k, v in fx.events()[:3]] + [cdcgen.Event(key, later)],
                   partitions=1)

    stats = runner.run_window(cfg, "run-1", store=store, spark=spark)

    assert stats["dead_lettered"] == 1, stats
    assert [(c["column"], c["change"], c["applied"]) for c in stats["schema_changes"]] == [
        ("c_mediumint", "convert", False)]
    assert column_types(table)["c_mediumint"] == "int(11)"
    assert sorted(read_mysql(table)) == [2, 3]  # row 1's change of the window is its last, the one refused
    dead = read_topic(cfg.errors.dlq_topic)
    assert len(dead) == 1
    headers = dict(dead[0].headers())
    assert (headers["__connect.errors.offset"], headers["__connect.errors.stage"]) == (b"3", b"sink")
    assert "c_mediumint" in headers["__connect.errors.exception.message"].decode()


def test_a_row_mysql_refuses_among_several_tables_goes_to_the_dlq_and_the_rest_commits(
        config_dir: Path, store: StateStore, spark: Any) -> None:
    """The few changes of several tables are written in one transaction, a savepoint per table
    (spark_jobs/write/tasks.py::tables_writer): an ENUM member the table does not have passes the projection (MySQL
    checks ENUMs), MySQL refuses it in strict mode, and that one row goes to the DLQ while every other
    row of both tables commits."""
    prefix = unique("mix")
    path = write_pipeline(config_dir, prefix, f"{prefix}.unused", "unused", sinks=[
        {"type": "mysql", "name": "rows", "conn_id": "cdcflow_mysql", "table": f"{prefix}_{{source.table}}",
         "create_table": True}])
    data = yaml.safe_load(path.read_text())
    data["source"] = {**{k: v for k, v in data["source"].items() if k != "topics"},
                      "topics_regex": rf"{prefix}\.inventory\..*"}
    path.write_text(yaml.safe_dump(data))
    cfg = load_pipeline(path)
    for table in ("ta", "tb"):
        cdcgen.produce(bootstrap(), f"{prefix}.inventory.{table}",
                       [cdcgen.Event(*renamed(e, table)) for e in fx.events()[:3]], partitions=1)
    first = runner.run_window(cfg, "run-1", store=store, spark=spark)
    assert first["dead_lettered"] == 0, first
    key, value = edited(renamed(fx.events()[3], "ta"), 600, c_enum="huge", c_varchar="refused")
    cdcgen.produce(bootstrap(), f"{prefix}.inventory.ta", [cdcgen.Event(key, value)], partitions=1, create=False)
    later = edited(renamed(fx.events()[3], "tb"), 600, c_varchar="later 600")
    cdcgen.produce(bootstrap(), f"{prefix}.inventory.tb", [cdcgen.Event(*later)], partitions=1, create=False)

    second = runner.run_window(cfg, "run-2", store=store, spark=spark)

    assert second["dead_lettered"] == 1, second
    ta, tb = read_mysql(f"{prefix}_ta"), read_mysql(f"{prefix}_tb")
    assert sorted(ta) == sorted(tb) == [1, 2, 3]
    assert ta[1]["c_varchar"] != "refused" and ta[1]["c_enum"] == fx.ROWS[0]["c_enum"]  # the row as it was
    assert tb[1]["c_varchar"] == "later 600"
    dead = read_topic(cfg.errors.dlq_topic)
    assert len(dead) == 1
    headers = dict(dead[0].headers())
    assert headers["__connect.errors.stage"] == b"sink"
    assert headers["__connect.errors.topic"].decode() == f"{prefix}.inventory.ta"
    assert "c_enum" in headers["__connect.errors.exception.message"].decode()
