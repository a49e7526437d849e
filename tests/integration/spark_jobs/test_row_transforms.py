"""SMT chains (spark_jobs/transform/row_transforms.py) into MySQL: the tables read back and compared with the
values the source database held.

The records are Debezium's MySQL connector's own (tests/fixtures/debezium/orders.py: the JsonConverter
with schemas, per the pages that module names).
"""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

import pytest

from cdcflow import cdcgen, runner
from cdcflow.config import load_pipeline
from cdcflow.state import StateStore
from tests.fixtures import orders as o
from tests.fixtures.debezium import orders as fx
from tests.helpers import (
    bootstrap,
    es_docs,
    mysql_engine,
    read_topic,
    unique,
    without_versions,
    write_pipeline,
)

pytestmark = [pytest.mark.integration, pytest.mark.services("kafka", "mysql", "spark")]

CHAIN = [
    {"type": "ExtractNewRecordState", "delete_handling": "none", "drop_tombstones": False},
    {"type": "Cast", "spec": {"paid": "boolean", "id": "int64"}},
    {"type": "ReplaceField", "exclude": ["note"], "renames": {"customer": "buyer"}},
    {"type": "TimestampConverter", "field": "created", "target_type": "unix", "unix_precision": "microseconds"},
    {"type": "MaskField", "fields": ["buyer"], "replacement": "***",
     "predicate": {"type": "TopicNameMatches", "pattern": r".*\.orders"}, "negate": True},
    {"type": "InsertField", "static_field": "src", "static_value": "shop", "offset_field": "off"},
]
COLUMNS = [{"name": "id", "type": "INT"}, {"name": "buyer", "type": "VARCHAR(64)"},
           {"name": "paid", "type": "TINYINT(1)"}, {"name": "created_us", "type": "BIGINT", "field": "created"},
           {"name": "src", "type": "VARCHAR(8)"}, {"name": "off", "type": "BIGINT"}]


def _rows(table: str) -> list[tuple[Any, ...]]:
    with mysql_engine().connect() as conn:
        return [tuple(r) for r in conn.exec_driver_sql(
            f"SELECT id, buyer, paid, created_us, src FROM `{table}` ORDER BY id")]


def _micros(at: dt.datetime) -> int:
    return (at.replace(tzinfo=dt.UTC) - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)


def _pipeline(config_dir: Path, tag: str, topic: str, table: str, chain: list[dict[str, Any]],
              columns: list[dict[str, Any]], converter: str = "json", pk_mode: str = "record_value") -> Any:
    return load_pipeline(write_pipeline(
        config_dir, tag, topic, table, transforms=chain,
        source={"key_converter": converter, "value_converter": converter},
        sinks=[{"type": "mysql", "name": "m", "conn_id": "cdcflow_mysql", "table": table, "create_table": True,
                "primary_key": ["id"], "columns": columns, "pk_mode": pk_mode}]))



# every row's last image, the deletes left out (ExtractNewRecordState's delete_handling drop)
UPSERTED = {after["id"]: after for s in o.STATEMENTS for _before, after in s.rows if after is not None}


def _events(at_ms: int) -> list[cdcgen.Event]:
    """fx.events() at one Kafka timestamp, the insert that moves row 3 to id 4 with a header "purge"."""
    out = []
    for key, value in fx.events():
        after = json.loads(value)["payload"]["after"] if value is not None else None
        purge = (("purge", b""),) if after is not None and after["id"] == 4 else ()
        out.append(cdcgen.Event(key, value, purge, timestamp=at_ms))
    return out


def _case(name: str, prefix: str, at_ms: int) -> tuple[list[dict[str, Any]], str, str, str, dict[int, o.Row]]:
    """A chain: its steps, the sink's table and pk_mode, the table its rows land in, and the rows
    the source database held there (by id)."""
    if name == "fields":
        return CHAIN, prefix, "record_value", prefix, o.FINAL
    if name == "drop":  # the insert of id 4 becomes its delete
        steps = [*CHAIN, {"type": "SetSchemaMetadata", "name": "shop.Order", "version": 2},
                 {"type": "Drop", "predicate": {"type": "HasHeaderKey", "name": "purge"}}]
        return steps, prefix, "record_value", prefix, {i: r for i, r in o.FINAL.items() if i != 4}
    # routed by a field and the Kafka timestamp; the deletes and tombstones dropped (ExtractNewRecordState's
    # default delete_handling and drop_tombstones)
    day = dt.datetime.fromtimestamp(at_ms / 1000, dt.UTC).strftime("%Y%m%d")
    steps = [{"type": "ExtractNewRecordState"}, *CHAIN[1:], {"type": "ValueToKey", "fields": ["id"]},
             {"type": "InsertField", "static_field": "dest", "static_value": prefix},
             {"type": "ExtractTopic", "field": "dest"},
             {"type": "TimestampRouter", "topic_format": "${topic}_${timestamp}", "timestamp_format": "yyyyMMdd"}]
    return steps, "{topic}", "record_key", f"{prefix}_{day}", UPSERTED


@pytest.mark.parametrize("case", ["fields", "drop", "routes"])
def test_a_chain_gives_the_rows_of_the_source(
        config_dir: Path, store: StateStore, spark: Any, case: str) -> None:
    """fields: the steps that rewrite fields; drop: a Drop by a predicate and a SetSchemaMetadata;
    routes: ValueToKey, ExtractTopic and TimestampRouter into tables named by the records."""
    tag = unique("rowsmt")
    topic = f"{tag}.inventory.orders"
    at_ms = int(time.time() * 1000)
    cdcgen.produce(bootstrap(), topic, _events(at_ms), partitions=2)

    steps, table, pk_mode, landed, want = _case(case, tag, at_ms)
    cfg = _pipeline(config_dir, tag, topic, table, steps, COLUMNS, "json_schema", pk_mode)
    stats = runner.run_window(cfg, "w", store=store, spark=spark)

    assert _rows(landed) == [(i, r["customer"], r["paid"], _micros(r["created"]), "shop")
                             for i, r in sorted(want.items())]
    assert (stats["records"], stats["dead_lettered"]) == (len(fx.events()), 0)


def _select(table: str, columns: str) -> list[tuple[Any, ...]]:
    with mysql_engine().connect() as conn:
        return [tuple(r) for r in conn.exec_driver_sql(f"SELECT {columns} FROM `{table}` ORDER BY id")]


def test_rewritten_deletes_and_added_ops_keep_every_row_as_it_was_last(
        config_dir: Path, store: StateStore, spark: Any) -> None:
    """delete_handling rewrite (Debezium's: a delete becomes its before image with __deleted "true",
    an upsert) and add_fields op and table: every row the source ever held stays, as it was last."""
    tag = unique("rowrw")
    topic = f"{tag}.inventory.orders"
    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(k, v) for k, v in fx.events()], partitions=2)
    steps = [{"type": "ExtractNewRecordState", "delete_handling": "rewrite", "add_fields": ["op", "table"]}, *CHAIN[1:]]
    columns = [*COLUMNS, {"name": "deleted", "type": "VARCHAR(5)", "field": "__deleted"},
               {"name": "op", "type": "VARCHAR(1)", "field": "__op"},
               {"name": "source_table", "type": "VARCHAR(64)", "field": "__table"}]

    cfg = _pipeline(config_dir, tag, topic, tag, steps, columns, "json_schema")
    stats = runner.run_window(cfg, "w", store=store, spark=spark)

    last = {1: (o.ROW_1B, "true", "d"), 2: (o.ROW_2B, "true", "d"), 3: (o.FINAL[3], "false", "c"),
            4: (o.FINAL[4], "false", "c")}
    assert _select(tag, "id, buyer, paid, created_us, deleted, op, source_table") == [
        (i, r["customer"], r["paid"], _micros(r["created"]), deleted, op, o.TABLE)
        for i, (r, deleted, op) in sorted(last.items())]
    assert (stats["records"], stats["dead_lettered"]) == (len(fx.events()), 0)


@pytest.mark.parametrize("case", ["patterns", "regex"])
def test_java_patterns_and_replacements_give_the_rows_java_would(
        config_dir: Path, store: StateStore, spark: Any, case: str) -> None:
    """patterns: Java datetime patterns beyond the digits (names, a 12-hour clock, quoted text,
    zones, fractions) written, read and routed by; regex: a RegexRouter in Java's syntax RE2 does not
    read (a named group (?<t>…), a lookahead) and a replacement with groups past $9 (${t} group 11,
    $12 group 1 and a 2 in a regex of eleven groups)."""
    tag = unique("rowjava")
    topic = f"{tag}.inventory.orders"
    at_ms = int(time.time() * 1000)
    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(k, v, timestamp=at_ms) for k, v in fx.events()], partitions=2)
    sent = dt.datetime.fromtimestamp(at_ms // 1000, dt.UTC)  # the Kafka timestamp, whole seconds
    columns = [*COLUMNS, {"name": "kafka_ts", "type": "VARCHAR(64)"}, {"name": "at", "type": "BIGINT"}]
    tail = [{"type": "InsertField", "timestamp_field": "kafka_ts", "static_field": "at",
             "static_value": "29 Feb 24 01:14:15.5 PM +0100"},
            {"type": "TimestampConverter", "field": "kafka_ts", "target_type": "string",
             "format": "EEE, dd MMM yyyy hh:mm:ss.SSS a XXX"},
            {"type": "TimestampConverter", "field": "at", "target_type": "unix", "unix_precision": "microseconds",
             "format": "dd MMM yy hh:mm:ss.S a Z"}]

    def steps(prefix: str) -> tuple[list[dict[str, Any]], str]:
        if case == "regex":
            return [{"type": "ExtractNewRecordState"}, *CHAIN[1:], *tail, {
                "type": "RegexRouter", "regex": r"(\w+)\.(i)(n)(v)(e)(n)(t)(o)(r)(y)\.(?<t>orders)(?!\.)",
                "replacement": f"{prefix}_${{t}}_$10$12"}], f"{prefix}_orders_y{tag}2"
        return [{"type": "ExtractNewRecordState"}, *CHAIN[1:], *tail,
                {"type": "InsertField", "static_field": "dest", "static_value": prefix},
                {"type": "ExtractTopic", "field": "dest"},
                {"type": "TimestampRouter", "topic_format": "${topic}_${timestamp}", "timestamp_format": "yyMMdd'T'HH"},
                ], f"{prefix}_{sent:%y%m%dT%H}"

    chain, landed = steps(tag)
    cfg = _pipeline(config_dir, tag, topic, "{topic}", chain, columns, "json_schema")
    stats = runner.run_window(cfg, "w", store=store, spark=spark)

    shown = f"{sent:%a, %d %b %Y %I:%M:%S}.{at_ms % 1000:03d} {sent:%p} Z"
    at = _micros(dt.datetime(2024, 2, 29, 12, 14, 15, 500000))
    assert _select(landed, "id, buyer, paid, created_us, src, kafka_ts, at") == [
        (i, r["customer"], r["paid"], _micros(r["created"]), "shop", shown, at) for i, r in sorted(UPSERTED.items())]
    assert stats["dead_lettered"] == 0


@pytest.mark.parametrize("case", ["extract_topic", "drop"])
def test_drop_and_extract_topic_on_the_key_give_the_sources_rows(
        config_dir: Path, store: StateStore, spark: Any, case: str) -> None:
    """extract_topic: each change routed to a table by its Kafka key's id (a delete too: it deletes
    its row there); drop: a Drop of the key changes no upsert, and each delete (three delete events,
    three tombstones) has no key left to delete by: a dead letter."""
    tag = unique("rowkey")
    topic = f"{tag}.inventory.orders"
    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(k, v) for k, v in fx.events()], partitions=2)
    unwrap = {"type": "ExtractNewRecordState", "delete_handling": "none", "drop_tombstones": False}
    last = {"type": "ExtractTopic", "target": "key", "field": "id"} if case == "extract_topic" else {
        "type": "Drop", "target": "key"}
    table = f"{tag}_{{topic}}" if case == "extract_topic" else tag
    cfg = _pipeline(config_dir, tag, topic, table, [unwrap, *CHAIN[1:], last], COLUMNS, "json_schema")
    stats = runner.run_window(cfg, "key", store=store, spark=spark)

    if case == "extract_topic":
        assert {i: _rows(f"{tag}_{i}") for i in range(1, 5)} == {
            i: [(i, r["customer"], r["paid"], _micros(r["created"]), "shop")] if r else []
            for i, r in ((i, o.FINAL.get(i)) for i in range(1, 5))}
    else:
        assert _rows(tag) == [(i, r["customer"], r["paid"], _micros(r["created"]), "shop")
                              for i, r in sorted(UPSERTED.items())]
    assert (stats["records"], stats["dead_lettered"]) == (len(fx.events()), 0 if case == "extract_topic" else 6)


KEY_STEPS = [{"type": "ReplaceField", "target": "key", "renames": {"id": "order_key"}},
             {"type": "Cast", "target": "key", "spec": {"order_key": "string"}},
             {"type": "InsertField", "target": "key", "static_field": "shop", "static_value": "s1"}]


@pytest.mark.services("kafka", "mysql", "elasticsearch", "spark")
def test_the_key_the_key_steps_leave_keys_the_rows_and_documents_and_deletes_find_them_by_it(
        config_dir: Path, store: StateStore, spark: Any) -> None:
    """Kafka Connect's $Key steps (ReplaceField, Cast, InsertField) make the key {order_key: "<id>",
    shop: "s1"}: a pk_mode record_key table of declared columns, and one from the record schema, take
    their key columns from it (the latter the key's columns beside the value's, as Kafka Connect's JDBC
    sink makes them), an index its document ids (id_fields); every delete (three delete events, three
    tombstones) finds its row and document by that key."""
    tag = unique("rowkeys")
    topic = f"{tag}.inventory.orders"
    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(k, v) for k, v in fx.events()], partitions=2)
    unwrap = {"type": "ExtractNewRecordState", "delete_handling": "none", "drop_tombstones": False}
    declared = [{"name": "order_key", "type": "VARCHAR(16)"}, {"name": "shop", "type": "VARCHAR(8)"},
                *[c for c in COLUMNS if c["name"] not in ("id", "off")]]
    cfg = load_pipeline(write_pipeline(
        config_dir, tag, topic, f"{tag}_declared", transforms=[unwrap, *CHAIN[1:], *KEY_STEPS],
        source={"key_converter": "json_schema", "value_converter": "json_schema"},
        sinks=[{"type": "mysql", "name": "m", "conn_id": "cdcflow_mysql", "table": f"{tag}_declared",
                "create_table": True, "pk_mode": "record_key", "primary_key": ["order_key", "shop"],
                "columns": declared},
               {"type": "mysql", "name": "made", "conn_id": "cdcflow_mysql", "table": f"{tag}_made",
                "create_table": True, "pk_mode": "record_key"},
               {"type": "elasticsearch", "name": "e", "conn_id": "cdcflow_elasticsearch", "index": tag,
                "id_fields": ["order_key"]}]))
    stats = runner.run_window(cfg, "keys", store=store, spark=spark)

    want = [(str(i), "s1", r["customer"], r["paid"], _micros(r["created"])) for i, r in sorted(o.FINAL.items())]
    with mysql_engine().connect() as conn:
        declared_rows = [tuple(r) for r in conn.exec_driver_sql(
            f"SELECT order_key, shop, buyer, paid, created_us FROM `{tag}_declared` ORDER BY order_key")]
        made_rows = [tuple(r) for r in conn.exec_driver_sql(
            f"SELECT order_key, shop, buyer, paid, created, id FROM `{tag}_made` ORDER BY order_key")]
        key_columns = [tuple(r) for r in conn.exec_driver_sql(
            "SELECT column_name, column_type FROM information_schema.columns WHERE table_schema = DATABASE() AND "
            f"table_name = '{tag}_made' AND column_key = 'PRI' ORDER BY ordinal_position")]
    assert declared_rows == want
    # the value's id stays a column of its own (the value's Cast made it a BIGINT); the key's are VARCHARs
    assert made_rows == [(k, s, b, p, _micros(r["created"]), i) for (k, s, b, p, _c), (i, r) in zip(
        want, sorted(o.FINAL.items()), strict=True)]
    assert key_columns == [("order_key", "varchar(255)"), ("shop", "varchar(255)")]
    docs = without_versions(es_docs(tag))
    assert {k: (d["buyer"], d["id"]) for k, d in docs.items()} == {
        str(i): (r["customer"], i) for i, r in o.FINAL.items()}
    assert (stats["records"], stats["dead_lettered"]) == (len(fx.events()), 0)


def test_envelopes_under_a_string_key_delete_by_the_before_image_or_the_key(
        config_dir: Path, store: StateStore, spark: Any) -> None:
    """key_converter string (the key a text: here the row's id, as a Debezium connector with a
    string key converter writes it) with ExtractNewRecordState: a delete event deletes by its before
    image, a tombstone by its key as the table's one-column primary key (renamed by the value's
    ReplaceField as the row is)."""
    tag = unique("rowtext")
    topic = f"{tag}.inventory.orders"
    events = [cdcgen.Event(str(json.loads(k)["payload"]["id"]).encode(), v) for k, v in fx.events()]
    cdcgen.produce(bootstrap(), topic, events, partitions=2)
    steps = [{"type": "ExtractNewRecordState", "delete_handling": "none", "drop_tombstones": False},
             {"type": "ReplaceField", "renames": {"id": "order_id", "customer": "buyer"}}]
    cfg = load_pipeline(write_pipeline(
        config_dir, tag, topic, tag, transforms=steps,
        source={"key_converter": "string", "value_converter": "json_schema"},
        sinks=[{"type": "mysql", "name": "m", "conn_id": "cdcflow_mysql", "table": tag, "create_table": True,
                "primary_key": ["order_id"], "columns": [{"name": "order_id", "type": "INT"},
                                                         {"name": "buyer", "type": "VARCHAR(64)"}]}]))
    stats = runner.run_window(cfg, "text", store=store, spark=spark)

    with mysql_engine().connect() as conn:
        got = [tuple(r) for r in conn.exec_driver_sql(f"SELECT order_id, buyer FROM `{tag}` ORDER BY order_id")]
    assert got == [(i, r["customer"]) for i, r in sorted(o.FINAL.items())]
    assert (stats["records"], stats["dead_lettered"]) == (len(fx.events()), 0)


def test_deletes_routed_by_a_field_after_a_value_to_key_delete_their_rows(
        config_dir: Path, store: StateStore, spark: Any) -> None:
    """A delete keeps its row image through the chain (docs/transforms.md), so ExtractTopic routes it to
    the table its row was written to and ValueToKey leaves it its key: it deletes its row."""
    tag = unique("rowdel")
    topic = f"{tag}.inventory.orders"
    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(k, v) for k, v in fx.events()], partitions=2)
    steps = [*CHAIN, {"type": "ValueToKey", "fields": ["id"]},
             {"type": "InsertField", "static_field": "dest", "static_value": f"{tag}_routed"},
             {"type": "ExtractTopic", "field": "dest"}]
    cfg = _pipeline(config_dir, tag, topic, "{topic}", steps, COLUMNS, "json_schema", "record_key")
    stats = runner.run_window(cfg, "new", store=store, spark=spark)

    assert _rows(f"{tag}_routed") == [(i, r["customer"], r["paid"], _micros(r["created"]), "shop")
                                      for i, r in sorted(o.FINAL.items())]
    assert (stats["records"], stats["dead_lettered"]) == (len(fx.events()), 0)


def test_what_a_transform_cannot_process_goes_to_the_dlq_with_the_transforms_words(
        config_dir: Path, store: StateStore, spark: Any) -> None:
    """Each transform's message, on schemaless envelopes."""
    tag = unique("rowdlq")
    chain = [{"type": "ExtractNewRecordState"}, {"type": "Cast", "spec": {"qty": "int32"}},
             {"type": "TimestampConverter", "field": "at", "target_type": "Timestamp"}]
    columns = [{"name": "id", "type": "BIGINT"}, {"name": "qty", "type": "INT"}, {"name": "at", "type": "DATETIME(6)"}]
    cfg = _pipeline(config_dir, tag, f"t.{tag}", tag, chain, columns)

    def change(i: int, qty: Any, at: Any) -> cdcgen.Event:
        value = {"op": "c", "before": None, "after": {"id": i, "qty": qty, "at": at}, "source": {"ts_ms": 1000 + i}}
        return cdcgen.Event(json.dumps({"id": i}).encode(), json.dumps(value).encode(), (("h", b"1"),))

    events = [change(1, "5", "2024-02-29 13:14:15.5"), change(2, "many", "2024-01-01"), change(3, 7, "soon"),
              change(4, 2**40, 1_700_000_000_000)]
    cdcgen.produce(bootstrap(), cfg.source.topics[0], events, partitions=1)
    stats = runner.run_window(cfg, "dlq", store=store, spark=spark)

    assert stats["dead_lettered"] == 3
    with mysql_engine().connect() as conn:
        assert [tuple(r) for r in conn.exec_driver_sql(f"SELECT id, qty, at FROM `{tag}`")] == [
            (1, 5, dt.datetime(2024, 2, 29, 13, 14, 15, 500000))]
    dead = {json.loads(m.key())["id"]: m for m in read_topic(cfg.errors.dlq_topic)}
    assert sorted(dead) == [2, 3, 4]
    said = {i: dict(m.headers())["__connect.errors.exception.message"].decode() for i, m in dead.items()}
    assert said == {2: "Cast: value.qty = 'many' is not a valid int32",
                    3: "TimestampConverter: value.at = 'soon' is not a timestamp",
                    4: "Cast: value.qty = '1099511627776' is not a valid int32"}
    assert dead[2].value() == events[1].value and dict(dead[2].headers())["h"] == b"1"
    assert dict(dead[2].headers())["__connect.errors.stage"] == b"transform"


def test_dropped_records_move_the_offsets_past_them(
        config_dir: Path, store: StateStore, spark: Any) -> None:
    """A Filter, a dropped delete and a dropped tombstone change nothing, but the window read them:
    the next window starts after them."""
    tag = unique("rowdrop")
    chain = [{"type": "ExtractNewRecordState", "delete_handling": "drop", "drop_tombstones": True},
             {"type": "Filter", "predicate": {"type": "HasHeaderKey", "name": "skip"}}]
    cfg = _pipeline(config_dir, tag, f"t.{tag}", tag, chain, [{"name": "id", "type": "BIGINT"},
                                                               {"name": "v", "type": "VARCHAR(8)"}])

    def env(op: str, i: int, v: str | None, headers: tuple[tuple[str, bytes], ...] = ()) -> cdcgen.Event:
        row = {"id": i, "v": v}
        value = {"op": op, "before": row if op != "c" else None, "after": row if op != "d" else None,
                 "source": {"ts_ms": 1000 + i}}
        return cdcgen.Event(json.dumps({"id": i}).encode(), json.dumps(value).encode(), headers)

    events = [env("c", 1, "a"), env("c", 2, "b"), env("d", 1, "a"), cdcgen.Event(b'{"id": 1}', None),
              env("u", 2, "skipped", (("skip", b""),))]
    cdcgen.produce(bootstrap(), cfg.source.topics[0], events, partitions=1)
    first = runner.run_window(cfg, "w1", store=store, spark=spark)
    again = runner.run_window(cfg, "w2", store=store, spark=spark)

    with mysql_engine().connect() as conn:
        assert [tuple(r) for r in conn.exec_driver_sql(f"SELECT id, v FROM `{tag}` ORDER BY id")] == [(1, "a"), (2, "b")]
    assert (first["records"], first["dead_lettered"], again["records"]) == (5, 0, 0)


def test_tables_from_the_record_schema_get_the_chains_columns(
        config_dir: Path, store: StateStore, spark: Any) -> None:
    """A sink without columns (tables created from the Connect schema, routed by the renamed topic):
    the source's values, in columns of the chain's types, and Debezium's Decimal bytes as a DECIMAL."""
    tag = unique("rowtables")
    topic = f"{tag}.inventory.orders"
    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(k, v) for k, v in fx.events()], partitions=2)
    chain = [*CHAIN[:3], {"type": "TimestampConverter", "field": "created", "target_type": "unix",
                          "unix_precision": "microseconds"}]

    steps = [*chain, {"type": "RegexRouter", "regex": rf"{tag}\.inventory\.(.*)", "replacement": f"{tag}_new_$1"}]
    cfg = load_pipeline(write_pipeline(
        config_dir, tag, topic, "{topic}", transforms=steps,
        source={"key_converter": "json_schema", "value_converter": "json_schema"},
        sinks=[{"type": "mysql", "name": "m", "conn_id": "cdcflow_mysql", "table": "{topic}",
                "create_table": True, "pk_mode": "record_key"}]))
    stats = runner.run_window(cfg, "w", store=store, spark=spark)

    assert _select(f"{tag}_new_orders", "id, buyer, paid, created") == [
        (i, r["customer"], r["paid"], _micros(r["created"])) for i, r in sorted(o.FINAL.items())]
    assert stats["dead_lettered"] == 0
    with mysql_engine().connect() as conn:
        types = dict(conn.exec_driver_sql(
            "SELECT column_name, column_type FROM information_schema.columns WHERE table_schema = DATABASE() "
            "AND table_name = %s", (f"{tag}_new_orders",)).fetchall())
        amounts = [r[0] for r in conn.exec_driver_sql(f"SELECT amount FROM `{tag}_new_orders` ORDER BY id")]
    assert (types["id"], types["paid"], types["created"], types["amount"]) == (
        "bigint(20)", "tinyint(1)", "bigint(20)", "decimal(10,2)")
    assert "note" not in types and "customer" not in types
    assert amounts == [r["amount"] for _i, r in sorted(o.FINAL.items())]
