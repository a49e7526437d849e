"""Chains over Kafka Connect's record model: a chain without ExtractNewRecordState reads each
record's value as the row (connectors/debezium/envelope.Decoder ``rows``), as Kafka Connect's sink
connectors do; the tables and indices are read back and compared with the records' values.

The records are Kafka's JsonConverter's, with and without schemas, laid out as the example of
KIP-301 ("Schema Inferencing for JsonConverter", cwiki.apache.org/confluence/display/KAFKA/KIP-301)
shows them: a struct named ``foobar`` of an optional int32 ``c1``, an optional string ``c2`` and two
``org.apache.kafka.connect.data.Timestamp`` fields (int64 milliseconds), keyed by ``{"c1": …}``.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from cdcflow import cdcgen, runner
from cdcflow.config import load_pipeline
from cdcflow.state import StateStore
from tests.helpers import bootstrap, es_client, mysql_engine, read_topic, unique, write_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.services("kafka", "mysql", "elasticsearch", "spark")]

SCHEMA = {"type": "struct", "fields": [
    {"type": "int32", "optional": True, "field": "c1"},
    {"type": "string", "optional": True, "field": "c2"},
    {"type": "int64", "optional": False, "name": "org.apache.kafka.connect.data.Timestamp", "version": 1,
     "field": "create_ts"},
    {"type": "int64", "optional": False, "name": "org.apache.kafka.connect.data.Timestamp", "version": 1,
     "field": "update_ts"}], "optional": False, "name": "foobar"}
# KIP-301's payload first, then three more rows, an update of the second and a tombstone of the third
ROWS = [(10000, "bar", 1501834166000), (10001, "baz", 1501834167000), (10002, "qux", 1501834168000),
        (10001, "baz2", 1501834169500)]
CHAIN = [{"type": "ReplaceField", "renames": {"c2": "name"}, "exclude": ["update_ts"]},
         {"type": "InsertField", "static_field": "src", "static_value": "kip301"},
         {"type": "MaskField", "fields": ["name"], "replacement": "***",
          "predicate": {"type": "HasHeaderKey", "name": "secret"}}]


def _events(with_schema: bool) -> list[cdcgen.Event]:
    events = []
    for c1, c2, at in ROWS:
        payload = {"c1": c1, "c2": c2, "create_ts": at, "update_ts": at}
        value = {"schema": SCHEMA, "payload": payload} if with_schema else payload
        headers = (("secret", b"1"),) if c2 == "bar" else ()
        # compact, as the JsonConverter writes its records
        events.append(cdcgen.Event(json.dumps({"c1": c1}).encode(), json.dumps(value, separators=(",", ":")).encode(),
                                   headers))
    events.append(cdcgen.Event(json.dumps({"c1": 10002}).encode(), None))
    events.append(cdcgen.Event(json.dumps({"c1": 10003}).encode(), b"[1, 2]"))  # not a row: a dead letter
    return events



def _rows(table: str, columns: str) -> list[tuple[Any, ...]]:
    with mysql_engine().connect() as conn:
        return [tuple(r) for r in conn.exec_driver_sql(f"SELECT {columns} FROM `{table}` ORDER BY c1")]


@pytest.mark.parametrize("with_schema", [True, False], ids=["json_schema", "json"])
def test_a_chain_over_connect_records_gives_the_rows_of_the_source(
        config_dir: Path, store: StateStore, spark: Any, with_schema: bool) -> None:
    tag = unique("records")
    topic = f"t.{tag}"
    cdcgen.produce(bootstrap(), topic, _events(with_schema), partitions=2)
    converter = "json_schema" if with_schema else "json"
    columns = [{"name": "c1", "type": "BIGINT"}, {"name": "name", "type": "VARCHAR(16)"},
               {"name": "src", "type": "VARCHAR(8)"}]
    # a Timestamp, read by its Connect schema or as declared (ms)
    timestamp = {"name": "create_ts", "type": "DATETIME(3)", "encoding": "ms"}

    cfg = load_pipeline(write_pipeline(
        config_dir, f"{tag}_new", topic, f"{tag}_new", versioning="kafka_offset", transforms=CHAIN,
        source={"key_converter": "json", "value_converter": converter},
        errors={"tolerance": "all", "dlq_topic": f"{tag}_new.dlq"},
        sinks=[{"type": "mysql", "name": "m", "conn_id": "cdcflow_mysql", "table": f"{tag}_new",
                "create_table": True, "primary_key": ["c1"], "columns": [*columns, timestamp]},
               {"type": "elasticsearch", "name": "e", "conn_id": "cdcflow_elasticsearch", "index": f"{tag}-new",
                "id_fields": ["c1"]}]))
    new = runner.run_window(cfg, "new", store=store, spark=spark)

    def at(ms: int) -> dt.datetime:
        return dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=ms)

    want = [(10000, "***", "kip301"), (10001, "baz2", "kip301")]
    assert _rows(f"{tag}_new", "c1, name, src, create_ts") == [
        (*row, at(ms)) for row, ms in zip(want, (1501834166000, 1501834169500), strict=True)]
    assert (new["records"], new["dead_lettered"]) == (6, 1)
    [dead] = read_topic(f"{tag}_new.dlq")
    assert dict(dead.headers())["__connect.errors.exception.message"] == (
        f"value is JSON but not an object (value.converter {converter})".encode() if not with_schema else
        b"value is not a {schema, payload} JSON envelope (value.converter json_schema)")
    es = es_client()
    es.indices.refresh(index=f"{tag}-new")
    documents = {"new": {h["_id"]: h["_source"] for h in es.search(index=f"{tag}-new", size=10)["hits"]["hits"]}}
    assert sorted(documents["new"]) == ["10000", "10001"]
    # the document's Timestamp as ISO-8601: by its Connect schema, or by the column a sink declares for it
    assert documents["new"]["10001"] == {"c1": 10001, "name": "baz2", "src": "kip301",
                                         "create_ts": "2017-08-04T08:09:29.500000"}
