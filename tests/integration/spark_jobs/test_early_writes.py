"""The read tasks that write their targets themselves (spark_jobs/write/early.py::early_targets, issue 25)
against the staged path (every write after the read, ``CDCFLOW_WINDOW_PATH=staged``): the same
records, two tables and two indices read back, both against the values the source database held.

The records are Debezium's MySQL connector's own (tests/fixtures/debezium/orders.py: the JsonConverter
with schemas, per the pages that module names), on three partitions, each read by its own task,
with a record no decoder reads among them.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from cdcflow import cdcgen, runner
from cdcflow.config import load_pipeline
from cdcflow.state import StateStore
from spark_jobs import job as window_job
from tests.fixtures import orders as o
from tests.fixtures.debezium import orders as fx
from tests.helpers import bootstrap, es_client, mysql_engine, read_topic, unique, write_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.services("kafka", "mysql", "elasticsearch", "spark")]

COLUMNS = [{"name": "id", "type": "INT"}, {"name": "customer", "type": "VARCHAR(64)"},
           {"name": "amount", "type": "DECIMAL(10,2)"}, {"name": "paid", "type": "TINYINT(1)"}]
MAPPING = {"properties": {"id": {"type": "long"}, "customer": {"type": "keyword"}, "amount": {"type": "keyword"}}}
BROKEN = b'{"schema": {"type": "struct"}, "payload": {"op": "c", "after": '  # cut short: no decoder reads it


def _pipeline(config_dir: Path, name: str, topic: str, table: str, index: str) -> Any:
    return load_pipeline(write_pipeline(
        config_dir, name, topic, table,
        errors={"tolerance": "all", "dlq_topic": f"{name}.dlq"},
        sinks=[{"type": "mysql", "name": "m", "conn_id": "cdcflow_mysql", "table": table, "create_table": True,
                "primary_key": ["id"], "columns": COLUMNS},
               {"type": "elasticsearch", "name": "e", "conn_id": "cdcflow_elasticsearch", "index": index,
                "id_fields": ["id"], "mapping": MAPPING}]))


def _documents(index: str) -> list[tuple[Any, ...]]:
    es = es_client()
    es.indices.refresh(index=index)
    hits = es.search(index=index, size=100, sort=[{"id": "asc"}])["hits"]["hits"]
    return [(h["_source"]["id"], h["_source"]["customer"], h["_source"]["amount"]) for h in hits]


@pytest.mark.parametrize("split", [False, True], ids=["a-task-per-partition", "one-partition-in-two-pieces"])
def test_read_tasks_that_write_give_the_rows_of_the_staged_path_and_of_the_source(
        config_dir: Path, store: StateStore, spark: Any, monkeypatch: pytest.MonkeyPatch, split: bool) -> None:
    """``one-partition-in-two-pieces``: the topic has one partition, which two read tasks read in two
    pieces (job.read_pieces, as in a big window on two cores; MIN_PIECE lowered to this fixture's
    size): a key's create in one and its update, delete and tombstone in the other."""
    from spark_jobs import window

    tag = unique("early")
    topic = f"{tag}.inventory.orders"
    events = [cdcgen.Event(k, v) for k, v in fx.events()]
    events.insert(4, cdcgen.Event(b'{"schema": null, "payload": {"id": 9}}', BROKEN))
    cdcgen.produce(bootstrap(), topic, events, partitions=1 if split else 3)
    monkeypatch.setattr(window_job, "RECORDS_PER_READ_TASK", 1)  # a task per partition, as in a big window
    monkeypatch.setattr(window_job, "MIN_PIECE", 1 if split else 10**9)
    planned: list[Any] = []
    monkeypatch.setattr(window, "read_pieces", lambda ranges, slots: planned.append(
        window_job.read_pieces(ranges, slots)) or planned[-1])

    stats = {}
    for path in ("early", "staged"):
        if path == "staged":
            monkeypatch.setenv("CDCFLOW_WINDOW_PATH", "staged")
        cfg = _pipeline(config_dir, f"{tag}_{path}", topic, f"{tag}_{path}", f"{tag}-{path}")
        stats[path] = runner.run_window(cfg, path, store=store, spark=spark)

    want = [(i, r["customer"], r["amount"], r["paid"]) for i, r in sorted(o.FINAL.items())]
    for path in ("early", "staged"):
        with mysql_engine().connect() as conn:
            got = [tuple(r) for r in conn.exec_driver_sql(
                f"SELECT id, customer, amount, paid FROM `{tag}_{path}` ORDER BY id")]
        assert got == want, path
        assert [(i, c, Decimal(str(a))) for i, c, a in _documents(f"{tag}-{path}")] == [
            (i, c, a) for i, c, a, _p in want], path
        dead = read_topic(f"{tag}_{path}.dlq")
        assert [m.value() for m in dead] == [BROKEN], path  # sent once, with its context
        assert dict(dead[0].headers())["__connect.errors.topic"] == topic.encode()
        assert stats[path]["records"] == len(events) and stats[path]["dead_lettered"] == 1, path
    early, staged = stats["early"], stats["staged"]
    # nothing handed on to write tasks; the table's deletes written by the driver (project.mysql_deletes)
    assert "sinks" not in early["stages"] and "deletes" in early["stages"] and "sinks" in staged["stages"]
    counts = {p: {n: (s["upserted"], s["deleted"]) for n, s in stats[p]["sinks"].items()} for p in stats}
    if split:  # a key created before the cut and deleted after it: each task wrote its change, the row came
        # and went (the staged path reduces the window first); the table ends with the same rows
        assert {n: u - d for n, (u, d) in counts["early"].items()} == {n: u - d for n, (u, d) in counts["staged"].items()}
        assert counts["early"]["m"][1] > 0 and counts["staged"]["m"][1] == 0
    else:
        assert counts["early"] == counts["staged"]
    assert early["dead_letters"] == staged["dead_letters"]

    again = runner.run_window(_pipeline(config_dir, f"{tag}_early", topic, f"{tag}_early", f"{tag}-early"),
                              "again", store=store, spark=spark)
    assert again["records"] == 0  # the offsets moved past the window, the dead letter included
    if split:  # the partition in two pieces, each read by its own task, the first ending where the second starts
        first, second = [task for task, in planned[0]]
        assert (first.piece, first.start, second.start, first.stop, second.piece) == (
            True, 0, first.max_records, first.max_records, False)
        assert first.max_records + second.max_records == len(events)
    else:
        assert [len(task) for task in planned[0]] == [1, 1, 1]


@pytest.mark.parametrize("wrapped", [True, False], ids=["with-schemas", "schemas.enable=false"])
def test_an_index_mapped_from_the_records_gets_the_mapping_of_the_staged_path(
        config_dir: Path, store: StateStore, spark: Any, monkeypatch: pytest.MonkeyPatch, wrapped: bool) -> None:
    """An index without a declared mapping: mapped before the read from the schemas of each range's
    first records (early.schema_tables, issue 41), and written by the read tasks, as the staged
    path maps and writes it; records that carry no schema (the JsonConverter with
    schemas.enable=false: the payload alone) are written as they are, dynamically mapped."""
    tag = unique("earlyes")
    topic = f"{tag}.inventory.orders"
    events = [cdcgen.Event(k, v if wrapped or v is None else json.dumps(json.loads(v)["payload"]).encode())
              for k, v in fx.events()]
    cdcgen.produce(bootstrap(), topic, events, partitions=3)
    monkeypatch.setattr(window_job, "RECORDS_PER_READ_TASK", 1)

    stats = {}
    for path in ("early", "staged"):
        if path == "staged":
            monkeypatch.setenv("CDCFLOW_WINDOW_PATH", "staged")
        cfg = load_pipeline(write_pipeline(
            config_dir, f"{tag}_{path}", topic, "unused", sinks=[
                {"type": "elasticsearch", "name": "e", "conn_id": "cdcflow_elasticsearch", "index": f"{tag}-{path}",
                 "id_fields": ["id"]}]))
        stats[path] = runner.run_window(cfg, path, store=store, spark=spark)

    es = es_client()
    mappings = [es.indices.get_mapping(index=f"{tag}-{p}")[f"{tag}-{p}"]["mappings"] for p in ("early", "staged")]
    assert mappings[0] == mappings[1]
    docs = _documents(f"{tag}-early")
    assert docs == _documents(f"{tag}-staged")
    assert [(i, c) for i, c, _a in docs] == [(i, r["customer"]) for i, r in sorted(o.FINAL.items())]
    if wrapped:  # Decimal bytes read by their schema; without one they stay Connect's base64 text
        assert [Decimal(str(a)) for _i, _c, a in docs] == [r["amount"] for _i, r in sorted(o.FINAL.items())]
    assert "sinks" not in stats["early"]["stages"] and "sinks" in stats["staged"]["stages"]  # nothing handed on
    assert stats["early"]["sinks"]["e"]["upserted"] == stats["staged"]["sinks"]["e"]["upserted"]


def test_a_table_not_keyed_by_the_record_key_gets_the_sources_values(
        config_dir: Path, store: StateStore, spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Record keys with a field the table's key lacks (here a region): the same table key may sit in
    two partitions, so two read tasks may write it at once. Their upserts keep the newer, and the
    deletes, written by the driver after every read task, remove the older ones."""
    tag = unique("earlykey")
    topic = f"{tag}.inventory.orders"

    def wider(key: bytes) -> bytes:
        doc = json.loads(key)
        doc["payload"]["region"] = "eu"
        doc["schema"]["fields"].append({"field": "region", "type": "string", "optional": False})
        return json.dumps(doc).encode()

    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(wider(k), v) for k, v in fx.events()], partitions=3)
    monkeypatch.setattr(window_job, "RECORDS_PER_READ_TASK", 1)
    cfg = load_pipeline(write_pipeline(
        config_dir, tag, topic, tag, sinks=[{"type": "mysql", "name": "m", "conn_id": "cdcflow_mysql", "table": tag,
                                             "create_table": True, "primary_key": ["id"], "columns": COLUMNS}]))
    stats = runner.run_window(cfg, "wider", store=store, spark=spark)

    with mysql_engine().connect() as conn:
        got = [tuple(r) for r in conn.exec_driver_sql(f"SELECT id, customer, amount, paid FROM `{tag}` ORDER BY id")]
    assert got == [(i, r["customer"], r["amount"], r["paid"]) for i, r in sorted(o.FINAL.items())]
    assert "sinks" not in stats["stages"] and "deletes" in stats["stages"] and stats["dead_lettered"] == 0



def _moved(payload_id: int, record: bytes) -> bytes:
    """Order 4's create record (Debezium's own, fixtures) for another order id: filler."""
    doc = json.loads(record)
    doc["payload"]["after"]["id"] = payload_id
    return json.dumps(doc).encode()


def test_a_key_whose_bytes_changed_stays_deleted_when_its_changes_sit_in_two_partitions(
        config_dir: Path, store: StateStore, spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Order 1's key converter turned ``schemas.enable`` off before its delete: the key's bytes
    changed, so its partition did. Its create and update sit in partition 0 behind 2,000 other
    orders, written a row per transaction (``apply: rows``, ``batch_size: 1``); its delete and
    tombstone in partition 1 behind 10,000 records of one order, read by another task at the same
    time. That task's delete must not be undone by the older upsert the first task writes after it
    (its sink read the tombstones when it opened): the read tasks hand a table's deletes to the
    driver, which writes them last (spark_jobs/project/targets.py::mysql_deletes). The index keeps it deleted by Elasticsearch's versions."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    tag = unique("earlymoved")
    topic = f"{tag}.inventory.orders"
    admin = AdminClient({"bootstrap.servers": bootstrap()})  # kept: the future needs its client
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])[topic].result(15)
    by_id: dict[int, list[tuple[bytes, bytes | None]]] = {}
    for k, v in fx.events():
        by_id.setdefault(json.loads(k)["payload"]["id"], []).append((k, v))
    create4 = by_id[4][0]
    filler = [(create4[0].replace(b'{"id":4}', b'{"id":%d}' % i), _moved(i, create4[1])) for i in range(1000, 3000)]
    assert len({k for k, _v in filler}) == len(filler)
    plain = json.dumps({"id": 1}).encode()  # the key with schemas.enable=false
    partitions = {0: filler + by_id[1][:2],  # create, update
                  1: [create4] * 10_000 + [(plain, v) for _k, v in by_id[1][2:]],  # delete, tombstone
                  2: [e for i in (2, 3, 4) for e in by_id[i]]}
    producer = Producer({"bootstrap.servers": bootstrap(), "acks": "all"})
    for partition, records in partitions.items():
        for k, v in records:
            producer.produce(topic, value=v, key=k, partition=partition)
    assert producer.flush(30) == 0
    monkeypatch.setattr(window_job, "RECORDS_PER_READ_TASK", 1)
    cfg = load_pipeline(write_pipeline(
        config_dir, tag, topic, tag, errors={"tolerance": "all", "dlq_topic": f"{tag}.dlq"},
        sinks=[{"type": "mysql", "name": "m", "conn_id": "cdcflow_mysql", "table": tag, "create_table": True,
                "primary_key": ["id"], "columns": COLUMNS, "apply": "rows", "batch_size": 1},
               {"type": "elasticsearch", "name": "e", "conn_id": "cdcflow_elasticsearch", "index": tag,
                "id_fields": ["id"], "mapping": MAPPING}]))

    stats = runner.run_window(cfg, "moved", store=store, spark=spark)

    filled = [(i, "plain", Decimal("-12345.67"), 1) for i in range(1000, 3000)]
    want = [(i, r["customer"], r["amount"], r["paid"]) for i, r in sorted(o.FINAL.items())] + filled
    with mysql_engine().connect() as conn:
        got = [tuple(r) for r in conn.exec_driver_sql(f"SELECT id, customer, amount, paid FROM `{tag}` ORDER BY id")]
    assert got == want  # order 1 deleted, as in the source
    es = es_client()
    es.indices.refresh(index=tag)
    assert not es.exists(index=tag, id="1") and es.count(index=tag)["count"] == len(want)
    assert stats["records"] == sum(len(r) for r in partitions.values()) and stats["dead_lettered"] == 0


@pytest.mark.parametrize("changed", [False, True], ids=["one-schema", "altered-within-the-window"])
def test_a_table_from_the_record_schema_is_written_by_the_read_tasks_as_the_staged_path_writes_it(
        config_dir: Path, store: StateStore, spark: Any, monkeypatch: pytest.MonkeyPatch, changed: bool) -> None:
    """A table created from the record schema (``create_table`` without columns) is made ready before
    the read, from the schemas of each range's first records (early.schema_tables, issue 41), and
    the read tasks write it. Debezium's events of the 33-column table (tests/fixtures/debezium/
    mysql_all_types.py); ``altered-within-the-window``: the source table is altered after them
    (a column added, others widened, renamed, dropped: test_schema_changes.py's change) and row 1
    updated, in the same window. That change's schema is not the one the table was made for: the
    window hands it on, evolves the table after the read and writes it. The table and its columns
    are the staged path's (which creates it from both schemas, then evolves it to the later one)."""
    from tests.fixtures.debezium import mysql_all_types as all_types
    from tests.integration.spark_jobs.test_schema_changes import _changed_at_the_source, _changed_rows, columns, later

    from connectors.mysql.sql import VERSION_COLUMN
    from spark_jobs.write import early

    monkeypatch.setattr(early, "PEEK_RECORDS", 3)  # the three creates: the later schema is found by the read
    tag = unique("earlyschema")
    topic = f"{tag}.inventory.all_types"
    events = [cdcgen.Event(k, v) for k, v in all_types.events()]
    events += [later(_changed_at_the_source, _changed_rows)] if changed else []
    cdcgen.produce(bootstrap(), topic, events, partitions=1)

    stats, rows, shapes, mappings, docs = {}, {}, {}, {}, {}
    for path in ("early", "staged"):
        if path == "staged":
            monkeypatch.setenv("CDCFLOW_WINDOW_PATH", "staged")
        table = f"{tag}_{path}"
        cfg = load_pipeline(write_pipeline(config_dir, table, topic, table, sinks=[
            {"type": "mysql", "name": "m", "conn_id": "cdcflow_mysql", "table": table, "create_table": True},
            {"type": "elasticsearch", "name": "e", "conn_id": "cdcflow_elasticsearch", "index": table.lower(),
             "id_fields": ["id"]}]))
        stats[path] = runner.run_window(cfg, path, store=store, spark=spark)
        shapes[path] = columns(table)
        es = es_client()
        es.indices.refresh(index=table.lower())
        mappings[path] = es.indices.get_mapping(index=table.lower())[table.lower()]["mappings"]
        docs[path] = [h["_source"] for h in es.search(index=table.lower(), size=100, sort=[{"id": "asc"}])["hits"]["hits"]]
        names = [c for c in sorted(shapes[path]) if c != VERSION_COLUMN]
        with mysql_engine().connect() as conn:
            rows[path] = [dict(zip(names, r, strict=True)) for r in conn.exec_driver_sql(
                f"SELECT {', '.join(f'`{c}`' for c in names)} FROM `{table}` ORDER BY id")]

    assert shapes["early"] == shapes["staged"]
    # the index: mapped from the first schemas before the read (and given the later one's new fields
    # after it), as the staged path maps it from both
    assert mappings["early"] == mappings["staged"]
    assert ("c_note" in mappings["early"]["properties"]) is changed
    # its documents: each key's last change; but row 1's change of the later schema, whose
    # c_mediumint (widened to BIGINT at the source) the index's integer field cannot hold, goes to the
    # DLQ on both paths, where the early path has written row 1's earlier change, as two windows would
    assert docs["early"] == ([docs["early"][0]] if changed else []) + docs["staged"]
    assert [d["id"] for d in docs["early"]] == [r["id"] for r in rows["early"]]
    assert {p: stats[p]["sinks"]["e"]["failed"] for p in stats} == {"early": changed, "staged": changed}
    # The columns the source dropped (c_varchar) or renamed (c_text) keep what the table held. Row 1's
    # earlier values of them were written by the early path, which makes the table from the first
    # schema and writes its changes, as two windows would (test_schema_changes.py's lenient test);
    # the staged path keeps only a key's last change in the window, which lacks them.
    gone = {"c_varchar", "c_text"} if changed else set()
    assert [{c: v for c, v in e.items() if s[c] != v} for e, s in zip(rows["early"], rows["staged"], strict=True)] == [
        {c: e[c] for c in gone if e["id"] == 1} for e in rows["early"]]
    assert stats["early"]["dead_lettered"] == stats["staged"]["dead_lettered"] == changed, stats
    assert [r["id"] for r in rows["early"]] == sorted(
        r["id"] for r in all_types.ROWS if r["id"] != 3)  # id 3 deleted
    if not changed:
        assert "schema_changes" not in stats["early"] and "schema_changes" not in stats["staged"]
    counts = {p: (stats[p]["sinks"]["m"]["upserted"], stats[p]["sinks"]["m"]["deleted"]) for p in stats}
    assert counts == {"early": (2 + changed, 0), "staged": (2, 0)}  # rows 1 and 2 (3 is deleted in the window);
    # the early path writes row 1 under each schema: its change of the first, then that of the later one
    assert {p: stats[p]["sinks"]["e"]["upserted"] for p in stats} == {"early": 2, "staged": 2 - changed}
    # handed on to a write task only for the later schema's change; the deletes written by the driver
    assert ("sinks" in stats["early"]["stages"]) is changed and "deletes" in stats["early"]["stages"]
    if changed:
        assert {(c["column"], c["change"]) for c in stats["early"]["schema_changes"] if c["applied"]} == {
            ("c_note", "add"), ("c_body", "add"), ("c_mediumint", "widen"), ("c_decimal", "widen"),
            ("c_datetime3", "widen"), ("c_enum", "extend"), ("c_timestamp", "relax")}  # test_schema_changes.py's
        with mysql_engine().connect() as conn:
            note = conn.exec_driver_sql(f"SELECT c_note FROM `{tag}_early` WHERE id = 1").scalar()
        assert note == "added at the source"
