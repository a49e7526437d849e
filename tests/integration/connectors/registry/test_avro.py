"""Debezium's change events as Confluent's AvroConverter writes them (magic byte, schema id, Avro
binary; keys too), read through a Schema Registry into MariaDB and Elasticsearch, value by value,
as tests/integration/connectors/debezium/test_types.py reads the JsonConverter's.

The records are produced by confluent-kafka's own AvroSerializer (tests/fixtures/debezium/avro.py:
the fixture's Connect schemas turned into Avro as Confluent's AvroData does, with Debezium's
``schema.name.adjustment.mode=avro``; Debezium's "Avro serialization" page,
debezium.io/documentation/reference/stable/configuration/avro.html, and Confluent's AvroData,
schema-registry ``avro-data/.../AvroData.java``). The registry is the tests' stand-in
(tests/registry_standin.py): no Schema Registry server can be installed here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import requests

from cdcflow import cdcgen, runner
from cdcflow.connections import get_connection
from cdcflow.errors import RegistryUnavailable
from cdcflow.state import StateStore
from connectors.kafka.dlq import DeadLetter
from connectors.registry import wire
from tests.fixtures.debezium import avro as fa
from tests.fixtures.debezium import mysql_all_types as fx
from tests.helpers import bootstrap, make_pipeline, mysql_engine, read_topic, unique
from tests.integration.connectors.debezium.test_tables import DERIVED, column_types, edited
from tests.integration.connectors.debezium.test_types import COLUMNS, DERIVED_ES, check
from tests.integration.connectors.registry.common import LOGIN, PASSWORD, sinks, source
from tests.registry_standin import RegistryStandIn

pytestmark = [pytest.mark.integration, pytest.mark.services]

AVRO_SOURCE = source("avro")


def produce(registry: RegistryStandIn, topic: str, **modes: Any) -> list[tuple[bytes, bytes | None]]:
    """The fixture's events, Avro-serialized against the stand-in (with its Basic auth), onto ``topic``."""
    events = fa.events(registry.url, topic, auth=(LOGIN, PASSWORD), **modes)  # subjects <topic>-key, <topic>-value
    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(k, v) for k, v in events], partitions=1)
    return events


@pytest.mark.parametrize("time_mode", ["adaptive_time_microseconds", "connect"])
def test_every_type_through_avro_in_the_connectors_default_modes(config_dir: Path, store: StateStore, spark: Any,
                                                                 registry: RegistryStandIn, time_mode: str) -> None:
    table, index = unique("avro_types"), unique("avro-types").replace("_", "-")
    cfg = make_pipeline(config_dir, source=AVRO_SOURCE, sinks=sinks(table, index))
    produce(registry, cfg.source.topics[0], time_precision_mode=time_mode)
    stats = runner.run_window(cfg, unique("run"), store=store, spark=spark)
    check(table, index, stats, time_mode)


@pytest.mark.parametrize(("decimal_mode", "binary_mode", "bigint_unsigned_mode"), [
    ("string", "hex", "precise"), ("double", "base64", "long")])
def test_every_type_through_avro_in_the_other_decimal_binary_and_unsigned_modes(
        config_dir: Path, store: StateStore, spark: Any, registry: RegistryStandIn, decimal_mode: str,
        binary_mode: str, bigint_unsigned_mode: str) -> None:
    table, index = unique("avro_modes"), unique("avro-modes").replace("_", "-")
    encodings = {"c_binary": binary_mode, "c_varbinary": binary_mode, "c_blob": binary_mode}
    mysql, es = sinks(table, index)
    mysql["columns"] = [{**c, **({"encoding": encodings[c["name"]]} if c["name"] in encodings else {})} for c in COLUMNS]
    cfg = make_pipeline(config_dir, source=AVRO_SOURCE, sinks=[mysql, es])
    produce(registry, cfg.source.topics[0], decimal_mode=decimal_mode, binary_mode=binary_mode,
            bigint_unsigned_mode=bigint_unsigned_mode)
    stats = runner.run_window(cfg, unique("run"), store=store, spark=spark)
    check(table, index, stats, "adaptive_time_microseconds", decimal_mode=decimal_mode)


def test_a_table_and_an_index_mapping_are_created_from_the_avro_schema(config_dir: Path, store: StateStore,
                                                                       spark: Any, registry: RegistryStandIn) -> None:
    """No declared columns, no declared mapping: the table's types (information_schema) and the index's
    mapping are those the JsonConverter's schema gives, and every value reads back equal
    (``bigint.unsigned.handling.mode=precise``: under ``long`` a table from the schema cannot restore a
    wrapped BIGINT UNSIGNED, with JSON as with Avro; docs/types.md)."""
    table, index = unique("avro_schema"), unique("avro-schema").replace("_", "-")
    cfg = make_pipeline(config_dir, source=AVRO_SOURCE, sinks=sinks(table, index, columns=False, mapping=None))
    produce(registry, cfg.source.topics[0], bigint_unsigned_mode="precise")
    stats = runner.run_window(cfg, unique("run"), store=store, spark=spark)
    check(table, index, stats, "adaptive_time_microseconds")
    types = column_types(table)
    assert {k: types[k] for k in DERIVED} == DERIVED
    url = get_connection("cdcflow_elasticsearch").http_url()
    properties = requests.get(f"{url}/{index}/_mapping", timeout=30).json()[index]["mappings"]["properties"]
    assert {k: properties[k] for k in DERIVED_ES} == DERIVED_ES
    assert types["c_bigint_unsigned"] == "decimal(20,0)"


def test_an_unknown_schema_id_and_bytes_without_the_magic_byte_go_to_the_dlq(
        config_dir: Path, store: StateStore, spark: Any, registry: RegistryStandIn) -> None:
    """Among good Avro records: one whose schema id the registry does not know (404, error code
    40403) and one JsonConverter record (no magic byte); each goes to the DLQ with its reason and its
    original bytes, the rest is applied, and every id is fetched once (the stand-in counts)."""
    table, index = unique("avro_bad"), unique("avro-bad").replace("_", "-")
    cfg = make_pipeline(config_dir, source=AVRO_SOURCE, sinks=sinks(table, index))
    topic = cfg.source.topics[0]
    good = fa.events(registry.url, topic, auth=(LOGIN, PASSWORD))
    unknown = (good[0][0], wire.header(4242) + good[0][1][5:])  # type: ignore[index]
    _json_key, json_value = fx.events()[1]
    events = [good[0], unknown, (good[1][0], json_value), *good[1:]]
    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(k, v) for k, v in events], partitions=1)

    stats = runner.run_window(cfg, unique("run"), store=store, spark=spark)

    assert stats["dead_lettered"] == 2, stats
    assert cfg.errors.dlq_topic is not None
    dead = [DeadLetter(m.partition(), m.offset(), None, m.key(), m.value(), tuple(m.headers() or ()))
            for m in read_topic(cfg.errors.dlq_topic)]
    reasons = {d.original_offset: (d.context("stage"), d.context("exception.message"), d.value) for d in dead}
    assert sorted(reasons) == [1, 2]
    assert reasons[1][0] == "converter" and reasons[1][2] == unknown[1]
    assert reasons[1][1] == (f"value.converter avro: the Schema Registry at {registry.url} (connection 'cdcflow_registry') "
                             "does not know schema id 4242 (HTTP 404, error_code 40403: Schema not found)")
    assert reasons[2][0] == "converter" and reasons[2][2] == json_value
    assert reasons[2][1].startswith("value.converter avro: value does not start with the Schema Registry magic byte 0 "
                                    "(found 0x7b: not written by a registry serializer or converter")
    check(table, index, {"dead_lettered": 0}, "adaptive_time_microseconds")  # the good records: all applied
    assert dict(registry.gets_of_ids()) == {"1": 1, "2": 1, "4242": 1}  # key schema, value schema, the unknown id


def test_the_registry_down_fails_the_window_naming_it_and_no_offset_moves(
        config_dir: Path, store: StateStore, spark: Any, registry: RegistryStandIn) -> None:
    """Connection refused, then a 503: the window fails with RegistryUnavailable naming the
    registry's URL, nothing goes to the DLQ, no offset moves; with the registry back, the retry
    applies every record."""
    table, index = unique("avro_down"), unique("avro-down").replace("_", "-")
    cfg = make_pipeline(config_dir, source=AVRO_SOURCE, sinks=sinks(table, index))
    produce(registry, cfg.source.topics[0])
    url = registry.url

    registry.fail_with(503)
    with pytest.raises(RegistryUnavailable, match=rf"the Schema Registry at {url} \(connection 'cdcflow_registry'\) "
                                                  r"failed fetching schema id \d: HTTP 503"):
        runner.run_window(cfg, "run-down", store=store, spark=spark)
    assert store.offsets.load(cfg.name) == {}
    registry.stop()
    with pytest.raises(RegistryUnavailable, match=rf"the Schema Registry at {url} .*cannot be reached .*Connection "
                                                  "refused"):
        runner.run_window(cfg, "run-down", store=store, spark=spark)
    assert store.offsets.load(cfg.name) == {}
    assert cfg.errors.dlq_topic is not None and read_topic(cfg.errors.dlq_topic) == []

    registry.fail_with(None)
    registry.start(int(url.rsplit(":", 1)[1]))  # the same registry, back on its port
    stats = runner.run_window(cfg, "run-down", store=store, spark=spark)  # Airflow's retry: the same run id
    check(table, index, stats, "adaptive_time_microseconds")
    assert sum(store.offsets.load(cfg.name).values()) == 6


def test_a_new_registry_version_is_a_schema_change_the_table_follows(config_dir: Path, store: StateStore, spark: Any,
                                                                     registry: RegistryStandIn) -> None:
    """ALTER TABLE all_types ADD COLUMN c_note VARCHAR(64) at the source: AvroConverter registers a
    second version of the value subject (a new schema id); the table created from the first version
    gains the column (schema_changes: lenient, the default), as it does from the JsonConverter's."""
    table = unique("avro_evolve")
    cfg = make_pipeline(config_dir, source=AVRO_SOURCE, sinks=[
        {"type": "mysql", "name": "rows", "conn_id": "cdcflow_mysql", "table": table, "create_table": True}])
    topic = cfg.source.topics[0]
    first = fa.events(registry.url, topic, auth=(LOGIN, PASSWORD))[:3]
    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(k, v) for k, v in first], partitions=1)
    runner.run_window(cfg, "run-1", store=store, spark=spark)
    assert "c_note" not in column_types(table)

    key, value = edited(fx.events()[3], 600)
    doc = json.loads(value)
    for part in doc["schema"]["fields"][:2]:  # before and after
        part["fields"].append({"type": "string", "optional": True, "field": "c_note"})
    doc["payload"]["before"]["c_note"] = None
    doc["payload"]["after"]["c_note"] = "added at the source"
    later = fa.to_avro([(key, json.dumps(doc).encode())], registry.url, topic, auth=(LOGIN, PASSWORD))
    assert registry.subjects[f"{topic}-value"] == [2, 3]  # the value subject's second version
    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(k, v) for k, v in later], partitions=1, create=False)
    stats = runner.run_window(cfg, "run-2", store=store, spark=spark)

    assert stats["dead_lettered"] == 0 and column_types(table)["c_note"] == "longtext"
    with mysql_engine().connect() as conn:
        assert conn.exec_driver_sql(f"SELECT id, c_note FROM `{table}` ORDER BY id").all() == [
            (1, "added at the source"), (2, None), (3, None)]
