"""Tables created from records that carry no schema (the ``json`` converter, ``schemas.enable=false``)
(spark_jobs/transform/row_schemas.py): the tables read back, their values and the column types made for them.

The records are written as the producers document them: Debezium's change events with the
JsonConverter's ``schemas.enable=false`` (Debezium's MySQL connector documentation, "Change event
values": an envelope of ``before``, ``after``, ``source``, ``op``, ``ts_ms``; a delete event is
followed by a tombstone of its key), and Kafka Connect's record model, each value a JSON object (or a
line of text for the string converter).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cdcflow import cdcgen, runner
from cdcflow.config import load_pipeline
from cdcflow.state import StateStore
from tests.helpers import bootstrap, es_client, mysql_engine, unique, write_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.services("kafka", "mysql", "elasticsearch", "spark")]

EXTRACT = {"type": "ExtractNewRecordState", "delete_handling": "none", "drop_tombstones": False}



def _rows(table: str, columns: str, order: str = "1") -> list[tuple[Any, ...]]:
    with mysql_engine().connect() as conn:
        return [tuple(r) for r in conn.exec_driver_sql(f"SELECT {columns} FROM `{table}` ORDER BY {order}")]


def _columns(table: str) -> dict[str, tuple[str, str, str]]:
    """Each column's type, nullability and key (information_schema's COLUMN_TYPE, IS_NULLABLE, COLUMN_KEY)."""
    with mysql_engine().connect() as conn:
        return {r[0]: (r[1], r[2], r[3]) for r in conn.exec_driver_sql(
            "SELECT column_name, column_type, is_nullable, column_key FROM information_schema.columns "
            "WHERE table_schema = DATABASE() AND table_name = %s", (table,))}


def _change(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None, ts: int) -> cdcgen.Event:
    row = after or before
    assert row is not None
    return cdcgen.Event(json.dumps({"id": row["id"]}).encode(), json.dumps({
        "before": before, "after": after, "op": op, "ts_ms": ts + 5,
        "source": {"version": "2.7.0.Final", "connector": "mysql", "name": "shop", "ts_ms": ts, "db": "shop",
                   "table": "items", "server_id": 1, "file": "mysql-bin.000003", "pos": 154, "row": 0}}).encode())


def _tombstone(key: int) -> cdcgen.Event:
    return cdcgen.Event(json.dumps({"id": key}).encode(), None)


PEN = {"id": 1, "name": "pen", "price": 10, "code": 7, "note": None, "paid": True}
INK = {"id": 2, "name": "ink", "price": 10.5, "code": "x7", "note": None, "paid": False}
CAP = {"id": 3, "name": "cap", "price": 11, "code": 8, "note": None, "paid": True}
NIB = {"id": 4, "name": "nib", "price": 3.25, "code": 12, "note": None, "paid": False}
FIRST = [_change("c", None, PEN, 1000), _change("c", None, INK, 1001), _change("c", None, CAP, 1002),
         _change("c", None, NIB, 1003), _change("u", PEN, {**PEN, "name": "pen2", "price": 12}, 1004),
         _change("d", INK, None, 1005), _tombstone(2), _tombstone(3)]  # a delete and its tombstone; a tombstone alone


def test_debezium_records_without_schemas_make_a_typed_table_and_evolve_it(
        config_dir: Path, store: StateStore, spark: Any) -> None:
    """A field an integer in one record and a double in another is a DOUBLE, an integer and a text a
    LONGTEXT, a field null in every record no column until a record has a value; the key is the
    Kafka key's field. A later window's new field is added as a column; a DOUBLE column takes the
    integers of a later window as they are."""
    tag = unique("schemaless")
    topic = f"{tag}.shop.items"
    cdcgen.produce(bootstrap(), topic, FIRST, partitions=2)
    chain = [EXTRACT, {"type": "InsertField", "static_field": "src", "static_value": "shop"}]

    def pipeline(path: str) -> Any:
        return load_pipeline(write_pipeline(
            config_dir, f"{tag}_{path}", topic, f"{tag}_{path}", transforms=chain,
            sinks=[{"type": "mysql", "name": "m", "conn_id": "cdcflow_mysql", "table": f"{tag}_{path}",
                    "create_table": True, "pk_mode": "record_key"},
                   {"type": "elasticsearch", "name": "e", "conn_id": "cdcflow_elasticsearch",
                    "index": f"{tag}-{path}", "id_fields": ["id"]}]))

    new = runner.run_window(pipeline("new"), "new", store=store, spark=spark)

    assert new["dead_lettered"] == 0
    read = "id, name, price, code, paid, src"
    assert _rows(f"{tag}_new", read) == [(1, "pen2", 12.0, "7", 1, "shop"), (4, "nib", 3.25, "12", 0, "shop")]
    assert _columns(f"{tag}_new") == {
        "id": ("bigint(20)", "NO", "PRI"), "name": ("longtext", "YES", ""), "price": ("double", "YES", ""),
        "code": ("longtext", "YES", ""), "paid": ("tinyint(1)", "YES", ""), "src": ("longtext", "YES", ""),
        "__cdc_version": ("bigint(20)", "NO", "")}
    # without a chain: the same table, from the decoded rows (small batches decoded record by record)
    plain = load_pipeline(write_pipeline(config_dir, f"{tag}_plain", topic, f"{tag}_plain", sinks=[
        {"type": "mysql", "name": "m", "conn_id": "cdcflow_mysql", "table": f"{tag}_plain", "create_table": True}]))
    assert runner.run_window(plain, "plain", store=store, spark=spark)["dead_lettered"] == 0
    assert _rows(f"{tag}_plain", "id, name, price, code, paid") == [r[:5] for r in _rows(f"{tag}_new", read)]
    assert _columns(f"{tag}_plain") == {n: c for n, c in _columns(f"{tag}_new").items() if n != "src"}
    es = es_client()
    es.indices.refresh(index=f"{tag}-new")
    documents = {h["_id"]: h["_source"] for h in es.search(index=f"{tag}-new", size=10)["hits"]["hits"]}
    assert documents == {"1": {**PEN, "name": "pen2", "price": 12, "src": "shop"}, "4": {**NIB, "src": "shop"}}

    later = [_change("c", None, {"id": 5, "name": "cup", "price": 7, "code": 1, "email": "a@x.org"}, 2000),
             _change("u", NIB, {**NIB, "price": 4, "note": "blue"}, 2001)]
    cdcgen.produce(bootstrap(), topic, later, create=False)
    second = runner.run_window(pipeline("new"), "later", store=store, spark=spark)

    assert second["dead_lettered"] == 0
    assert [(c["column"], c["change"], c["new"], c["applied"]) for c in second["schema_changes"]] == [
        ("email", "add", "LONGTEXT", True), ("note", "add", "LONGTEXT", True)]
    assert _columns(f"{tag}_new")["price"] == ("double", "YES", "")  # integers now: the DOUBLE holds them
    assert _rows(f"{tag}_new", "id, name, price, code, note, email") == [
        (1, "pen2", 12.0, "7", None, None), (4, "nib", 4.0, "12", "blue", None), (5, "cup", 7.0, "1", None, "a@x.org")]


def test_nested_records_flattened_and_keyed_by_a_value_field_into_tables_from_their_values(
        config_dir: Path, store: StateStore, spark: Any) -> None:
    """Kafka Connect's record model (no ExtractNewRecordState): Flatten, then ValueToKey. The table is
    described from the images after the chain (a struct's fields its columns, an array a JSON column,
    the key the ValueToKey's field); a pk_mode kafka table from the same records keys every record by
    its coordinates, and a tombstone deletes nothing there."""
    tag = unique("nestedkeys")
    topic = f"{tag}.orders"
    values = [{"order": {"ref": "A-1", "total": 10, "lines": [{"sku": "x", "qty": 1}]},
               "customer": {"name": "Ada", "vip": True}},
              {"order": {"ref": "A-2", "total": 12.5, "lines": []}, "customer": {"name": "Bob", "vip": False}},
              {"order": {"ref": "A-1", "total": 11, "lines": [{"sku": "y", "qty": 2}]},
               "customer": {"name": "Ada", "vip": True, "since": 2020}}]
    events = [cdcgen.Event(json.dumps({"n": i}).encode(), json.dumps(v).encode()) for i, v in enumerate(values)]
    cdcgen.produce(bootstrap(), topic, [*events, cdcgen.Event(b'{"n": 1}', None)], partitions=1)
    chain = [{"type": "Flatten", "delimiter": "_"}, {"type": "ValueToKey", "fields": ["order_ref"]}]

    def run(path: str) -> dict[str, Any]:
        sink = {"type": "mysql", "conn_id": "cdcflow_mysql", "create_table": True}
        return runner.run_window(load_pipeline(write_pipeline(
            config_dir, f"{tag}_{path}", topic, "unused", transforms=chain, versioning="kafka_offset",
            sinks=[{**sink, "name": "keyed", "table": f"{tag}_{path}", "pk_mode": "record_key"},
                   {**sink, "name": "log", "table": f"{tag}_{path}_log", "pk_mode": "kafka"}])),
            path, store=store, spark=spark)

    new = run("new")

    assert new["records"] == 4
    read = "order_ref, order_total, customer_name, customer_vip, customer_since"
    assert _rows(f"{tag}_new", read) == [("A-1", 11.0, "Ada", 1, 2020), ("A-2", 12.5, "Bob", 0, None)]
    assert [json.loads(r[0]) for r in _rows(f"{tag}_new", "order_lines", "order_ref")] == [[{"sku": "y", "qty": 2}], []]
    assert {n: t for n, (t, _null, _key) in _columns(f"{tag}_new").items()} == {
        "order_ref": "varchar(255)", "order_total": "double", "order_lines": "longtext",  # MariaDB's JSON
        "customer_name": "longtext", "customer_vip": "tinyint(1)", "customer_since": "bigint(20)",
        "__cdc_version": "bigint(20)"}
    assert _columns(f"{tag}_new")["order_ref"][2] == "PRI"
    log = "__connect_topic, __connect_partition, __connect_offset, order_ref, order_total"
    assert _rows(f"{tag}_new_log", log, "__connect_offset") == [
        (topic, 0, 0, "A-1", 10.0), (topic, 0, 1, "A-2", 12.5), (topic, 0, 2, "A-1", 11.0)]
    assert [c for c, (_t, _n, key) in _columns(f"{tag}_new_log").items() if key == "PRI"] == [
        "__connect_topic", "__connect_partition", "__connect_offset"]

