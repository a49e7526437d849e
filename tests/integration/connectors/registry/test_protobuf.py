"""Debezium's change events as Confluent's ProtobufConverter writes them (magic byte, schema id,
message indexes, Protobuf; keys too), produced by confluent-kafka's own ProtobufSerializer
(tests/fixtures/debezium/protobuf.py: the Connect schemas made proto3 files as Confluent's
ProtobufData does, ``optional.for.nullables=true``) against the tests' registry stand-in, read into
MariaDB and Elasticsearch value by value.

ProtobufConverter keeps Connect's own logical types (Decimal, Date, Time, Timestamp) but has no place
for Debezium's names (``io.debezium.time.*``, ``Enum``, ``Bits``, geometry): those fields arrive as
their physical values. Declared columns read the temporal ones, the enums, sets, years and JSON as
they read values without a schema (their ``encoding``, docs/types.md). Two cannot be read back into
their MySQL type without the name: a BIT(n)'s Bits bytes and a POINT's struct. This test declares
them as what arrives (VARBINARY, JSON) and checks those values as the converter left them.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from cdcflow import cdcgen, runner
from cdcflow.state import StateStore
from tests.fixtures.debezium import mysql_all_types as fx
from tests.fixtures.debezium import protobuf as fp
from tests.helpers import bootstrap, make_pipeline, mysql_engine, read_topic, unique
from tests.integration.connectors.debezium.test_types import (
    COLUMNS,
    SCHEMALESS_ENCODINGS,
    doc_value,
    final_rows,
    mysql_value,
    read_es,
)
from tests.integration.connectors.registry.common import LOGIN, PASSWORD, sinks, source
from tests.registry_standin import RegistryStandIn

pytestmark = [pytest.mark.integration, pytest.mark.services]

UNNAMED = {"c_bit10": "VARBINARY(2)", "c_point": "JSON"}  # what arrives without Debezium's Bits / Point names


def _columns() -> list[dict[str, Any]]:
    out = []
    for c in COLUMNS:
        column = {**c, "type": UNNAMED.get(c["name"], c["type"])}
        if c["name"] in SCHEMALESS_ENCODINGS and c["name"] != "c_decimal":  # a Decimal keeps its type
            column["encoding"] = SCHEMALESS_ENCODINGS[c["name"]]
        out.append(column)
    return out


def _read_mysql(table: str) -> dict[int, dict[str, Any]]:
    names = [c["name"] for c in COLUMNS]
    with mysql_engine().connect() as conn:
        conn.exec_driver_sql("SET time_zone = '+00:00'")
        rows = [dict(zip(names, r, strict=True)) for r in conn.exec_driver_sql(
            f"SELECT {', '.join(f'`{n}`' for n in names)} FROM `{table}` ORDER BY id")]
    for row in rows:
        row["c_bit1"] = int.from_bytes(row["c_bit1"], "big") if isinstance(row["c_bit1"], bytes) else row["c_bit1"]
        row["c_json"] = json.loads(row["c_json"]) if row["c_json"] is not None else None
        row["c_point"] = json.loads(row["c_point"]) if row["c_point"] is not None else None
        if isinstance(row["c_set"], set):
            row["c_set"] = ",".join(m for m in ("red", "green", "blue") if m in row["c_set"])
    return {r["id"]: r for r in rows}


def _as_sent(name: str, value: Any) -> Any:
    """A BIT(n) or POINT value as the connector sends it (Bits: little-endian bytes; Point: its struct)."""
    if value is None or name not in UNNAMED:
        return None
    if name == "c_bit10":
        return fx._bits_little_endian(value, 10)
    return {"x": value["x"], "y": value["y"], "wkb": fx._point_value(value)["wkb"], "srid": value["srid"] or None}


def test_every_type_through_protobuf_into_mysql_and_elasticsearch(config_dir: Path, store: StateStore, spark: Any,
                                                                  registry: RegistryStandIn) -> None:
    table, index = unique("pb_types"), unique("pb-types").replace("_", "-")
    mysql, es = sinks(table, index)
    mysql["columns"] = _columns()
    cfg = make_pipeline(config_dir, source=source("protobuf"), sinks=[mysql, es])
    events = fp.events(registry.url, cfg.source.topics[0], auth=(LOGIN, PASSWORD))
    cdcgen.produce(bootstrap(), cfg.source.topics[0], [cdcgen.Event(k, v) for k, v in events], partitions=1)

    stats = runner.run_window(cfg, unique("run"), store=store, spark=spark)

    assert cfg.errors.dlq_topic is not None
    assert stats["dead_lettered"] == 0, [dict(m.headers() or ()).get("__connect.errors.exception.message")
                                         for m in read_topic(cfg.errors.dlq_topic)]
    expected = final_rows("adaptive_time_microseconds")
    got, docs = _read_mysql(table), read_es(index)
    assert sorted(got) == sorted(docs) == sorted(expected)
    for key, row in expected.items():
        for name, value in row.items():
            sent = _as_sent(name, value)
            if name in UNNAMED:
                assert got[key][name] == sent, f"MySQL row {key} column {name}: the value as the converter sent it"
            else:
                assert got[key][name] == mysql_value(name, value), f"MySQL row {key} column {name} ({fx.DOCS[name]})"
            doc = base64.b64encode(sent).decode() if name == "c_bit10" and sent is not None else doc_value(
                name, value, {"schemas": False})  # a document keeps the Bits bytes as base64, the Point as its struct
            assert docs[key].get(name) == doc, f"ES doc {key} field {name} ({fx.DOCS[name]})"
