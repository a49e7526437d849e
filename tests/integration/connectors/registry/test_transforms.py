"""Transform chains over the registry converters' records (issue 43): Debezium's MySQL change events
(tests/fixtures/debezium/orders.py, the JsonConverter's records, mysql.adoc "Change event values",
"Tombstone events") written as Confluent's AvroConverter, ProtobufConverter and JsonSchemaConverter
write them (magic byte, schema id, keys too: tests/fixtures/debezium/{avro,protobuf,json_schema}.py,
produced by confluent-kafka's own serializers against the tests' registry stand-in).

The read task transcodes each key and value into the JsonConverter's bytes (connectors/registry/decode.py),
so a chain reads them as it reads the json_schema converter's: an unwrap with Debezium's add_fields
(https://debezium.io/documentation/reference/stable/transformations/event-flattening.html, "Adding
Debezium metadata to the Kafka record"), then Kafka's ReplaceField, Cast and InsertField, into a table
of declared columns and one created from the record schema; and chains over Kafka Connect's record
model (no unwrap: ExtractField of ``after``). The rows read back are the source's (tests/fixtures/orders.py);
a record without the magic byte reaches the DLQ with its original bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cdcflow import cdcgen, runner
from cdcflow.state import StateStore
from connectors.kafka.dlq import DeadLetter
from tests.fixtures import orders as o
from tests.fixtures.debezium import avro as fa
from tests.fixtures.debezium import json_schema as fj
from tests.fixtures.debezium import orders as fx
from tests.fixtures.debezium import protobuf as fp
from tests.helpers import bootstrap, es_client, make_pipeline, mysql_engine, read_topic, unique
from tests.integration.connectors.debezium.test_tables import column_types
from tests.integration.connectors.registry.common import LOGIN, PASSWORD, source
from tests.registry_standin import RegistryStandIn

pytestmark = [pytest.mark.integration, pytest.mark.services("kafka", "mysql", "spark")]

WRITERS: dict[str, Callable[..., list[tuple[bytes, bytes | None]]]] = {
    "avro": fa.to_avro, "protobuf": fp.to_protobuf, "json_schema_registry": fj.to_json_schema}
CHAIN = [{"type": "ExtractNewRecordState", "delete_handling": "none", "add_fields": ["op", "ts_ms"]},
         {"type": "ReplaceField", "renames": {"customer": "buyer"}, "exclude": ["created", "ship_date"]},
         {"type": "Cast", "spec": {"paid": "boolean", "id": "int64"}},
         {"type": "InsertField", "static_field": "src", "static_value": "shop"}]
COLUMNS = [{"name": "id", "type": "INT"}, {"name": "buyer", "type": "VARCHAR(64)"},
           {"name": "amount", "type": "DECIMAL(10,2)"}, {"name": "qty", "type": "BIGINT"},
           {"name": "paid", "type": "TINYINT(1)"}, {"name": "note", "type": "TEXT"},
           {"name": "src", "type": "VARCHAR(8)"}, {"name": "op", "type": "VARCHAR(1)", "field": "__op"},
           {"name": "ts", "type": "BIGINT", "field": "__ts_ms"}]


def _long(qty: int) -> int:
    """bigint.unsigned.handling.mode=long (mysql.adoc): above 2^63-1 a BIGINT UNSIGNED wraps."""
    return qty - 2**64 if qty >= 2**63 else qty


def _select(table: str, columns: str) -> list[tuple[Any, ...]]:
    with mysql_engine().connect() as conn:
        return [tuple(r) for r in conn.exec_driver_sql(f"SELECT {columns} FROM `{table}` ORDER BY id")]


def _produce(registry: RegistryStandIn, converter: str, topic: str) -> list[tuple[bytes, bytes | None]]:
    """The orders' events through ``converter``, with one JsonConverter value (no magic byte) after the first."""
    events = WRITERS[converter](fx.events(), registry.url, topic, auth=(LOGIN, PASSWORD))
    bad = (events[0][0], fx.events()[0][1])
    records = [events[0], bad, *events[1:]]
    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(k, v) for k, v in records], partitions=1)
    return records


def _check_dead_letter(topic: str, bad: tuple[bytes, bytes | None], converter: str) -> None:
    """The record without the magic byte, with the bytes it was read with (not the transcoded key)."""
    dead = [DeadLetter(m.partition(), m.offset(), None, m.key(), m.value(), tuple(m.headers() or ()))
            for m in read_topic(topic)]
    assert [(d.original_offset, d.key, d.value, d.context("stage")) for d in dead] == [(1, *bad, "converter")]
    assert dead[0].context("exception.message").startswith(
        f"value.converter {converter}: value does not start with the Schema Registry magic byte 0")


def _index(name: str) -> tuple[dict[str, Any], dict[int, dict[str, Any]]]:
    """An index's mapped properties and its documents by id."""
    es = es_client()
    es.indices.refresh(index=name)
    properties = es.indices.get_mapping(index=name)[name]["mappings"]["properties"]
    return properties, {h["_source"]["id"]: h["_source"] for h in es.search(index=name, size=100)["hits"]["hits"]}


def _unwrapped(config_dir: Path, converter: str, sinks: list[dict[str, Any]]) -> Any:
    index = unique("reg-docs").replace("_", "-")
    return make_pipeline(config_dir, source=source(converter) if converter in WRITERS else {
        "key_converter": converter, "value_converter": converter}, transforms=CHAIN, sinks=[
        *sinks, {"type": "elasticsearch", "name": "docs", "conn_id": "cdcflow_elasticsearch", "index": index,
                 "id_fields": ["id"], "behavior_on_null_values": "delete"}])


@pytest.mark.services("kafka", "mysql", "elasticsearch", "spark")
@pytest.mark.parametrize("converter", list(WRITERS))
def test_an_unwrap_chain_over_registry_records_gives_the_rows_of_the_source(
        config_dir: Path, store: StateStore, spark: Any, registry: RegistryStandIn, converter: str) -> None:
    """Each row as the source held it last, renamed, cast and stamped, with the op and ts_ms of its
    last change (ts_ms read from the transcoded envelope), in a table of declared columns, in one
    created from the record schema as the chain rewrites it, and in an index mapped from it: the
    mapping and documents of the same chain over the JsonConverter's records (json_schema)."""
    declared, made = unique("reg_chain"), unique("reg_made")
    cfg = _unwrapped(config_dir, converter, [
        {"type": "mysql", "name": "rows", "conn_id": "cdcflow_mysql", "table": declared, "create_table": True,
         "primary_key": ["id"], "columns": COLUMNS},
        {"type": "mysql", "name": "made", "conn_id": "cdcflow_mysql", "table": made, "create_table": True}])
    topic = cfg.source.topics[0]
    records = _produce(registry, converter, topic)
    twin = _unwrapped(config_dir, "json_schema", [])
    cdcgen.produce(bootstrap(), twin.source.topics[0], [cdcgen.Event(k, v) for k, v in fx.events()], partitions=1)

    stats = runner.run_window(cfg, unique("run"), store=store, spark=spark)
    runner.run_window(twin, unique("run"), store=store, spark=spark)

    assert (stats["records"], stats["dead_lettered"]) == (len(records), 1)
    last = {3: (o.STATEMENTS[2].at, 1), 4: (o.STATEMENTS[2].at, 0)}  # 2 -> 3 the second row, 3 -> 4 the first
    want = [(i, r["customer"], r["amount"], _long(r["qty"]), r["paid"], r["note"], "shop", "c",
             last[i][0] * 1000 + 150 + last[i][1]) for i, r in sorted(o.FINAL.items())]
    assert _select(declared, "id, buyer, amount, qty, paid, note, src, op, ts") == want
    assert _select(made, "id, buyer, amount, qty, paid, note, src, __op, __ts_ms") == want
    types = column_types(made)
    assert {k: types[k] for k in ("id", "buyer", "amount", "src")} == {
        "id": "bigint(20)", "buyer": "longtext", "amount": "decimal(10,2)", "src": "longtext"}
    assert "customer" not in types and "created" not in types  # renamed, excluded
    properties, documents = _index(cfg.sinks[2].index)  # type: ignore[union-attr]
    assert (properties, documents) == _index(twin.sinks[0].index)  # type: ignore[union-attr]
    assert {i: (d["buyer"], d["paid"], d["src"], d["__op"]) for i, d in documents.items()} == {
        i: (r["customer"], bool(r["paid"]), "shop", "c") for i, r in o.FINAL.items()}
    assert cfg.errors.dlq_topic is not None
    _check_dead_letter(cfg.errors.dlq_topic, records[1], converter)


@pytest.mark.parametrize("converter", ["avro", "protobuf"])
def test_a_record_model_chain_over_registry_records_gives_the_rows_of_the_source(
        config_dir: Path, store: StateStore, spark: Any, registry: RegistryStandIn, converter: str) -> None:
    """No unwrap: the value is Debezium's envelope, as Kafka Connect's sinks see it; ExtractField of
    ``after`` makes a delete event a tombstone, which deletes the row of its (transcoded) key. (A
    struct kept whole for ExtractField holds a Decimal as its base64 text, with json_schema too: no
    amount here.)"""
    declared, made = unique("reg_model"), unique("reg_model_made")
    chain = [{"type": "ExtractField", "field": "after"},
             {"type": "ReplaceField", "include": ["id", "customer", "paid", "note"]}]
    columns = [{"name": "id", "type": "INT"}, {"name": "customer", "type": "VARCHAR(64)"},
               {"name": "paid", "type": "TINYINT(1)"}, {"name": "note", "type": "TEXT"}]
    cfg = make_pipeline(config_dir, source=source(converter), transforms=chain, versioning="kafka_offset", sinks=[
        {"type": "mysql", "name": "rows", "conn_id": "cdcflow_mysql", "table": declared, "create_table": True,
         "primary_key": ["id"], "columns": columns},
        {"type": "mysql", "name": "made", "conn_id": "cdcflow_mysql", "table": made, "create_table": True}])
    records = _produce(registry, converter, cfg.source.topics[0])

    stats = runner.run_window(cfg, unique("run"), store=store, spark=spark)

    assert (stats["records"], stats["dead_lettered"]) == (len(records), 1)
    want = [(i, r["customer"], r["paid"], r["note"]) for i, r in sorted(o.FINAL.items())]
    assert _select(declared, "id, customer, paid, note") == want
    assert _select(made, "id, customer, paid, note") == want
    with mysql_engine().connect() as conn:  # keyed by the transcoded key's field (spark_jobs/transform/row_schemas.py)
        assert conn.exec_driver_sql(
            "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s "
            "AND COLUMN_KEY = 'PRI'", (made,)).all() == [("id",)]
    assert cfg.errors.dlq_topic is not None
    _check_dead_letter(cfg.errors.dlq_topic, records[1], converter)


def test_a_spark_step_reads_the_transcoded_key(config_dir: Path, store: StateStore, spark: Any,
                                               registry: RegistryStandIn) -> None:
    """A SqlExpression over the record frame's ``key`` (the Avro key's fields, as the JsonConverter's
    key's payload): each row gets its key's id."""
    table = unique("reg_spark")
    chain = [*CHAIN[:2], {"type": "SqlExpression", "fields": {"key_id": "key.id * 10"}}]
    columns = [{"name": "id", "type": "INT"}, {"name": "buyer", "type": "VARCHAR(64)"},
               {"name": "key_id", "type": "BIGINT"}]
    cfg = make_pipeline(config_dir, source=source("avro"), transforms=chain, sinks=[
        {"type": "mysql", "name": "rows", "conn_id": "cdcflow_mysql", "table": table, "create_table": True,
         "primary_key": ["id"], "columns": columns}])
    records = _produce(registry, "avro", cfg.source.topics[0])

    stats = runner.run_window(cfg, unique("run"), store=store, spark=spark)

    assert (stats["records"], stats["dead_lettered"]) == (len(records), 1)
    assert _select(table, "id, buyer, key_id") == [(i, r["customer"], i * 10) for i, r in sorted(o.FINAL.items())]
    assert cfg.errors.dlq_topic is not None
    _check_dead_letter(cfg.errors.dlq_topic, records[1], "avro")
