"""Tables from records without a schema (spark_jobs/transform/row_schemas.py): the row schema a read task infers
from the typed images after the chain, and how descriptions join (connectors/mysql/evolution.joined,
settled). The records are Kafka Connect's JsonConverter output with ``schemas.enable=false``: the
value's JSON object alone ("JSON converter" in Kafka Connect's docs, connect/json/JsonConverter.java)."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest
from pydantic import TypeAdapter

from cdcflow.config import MySqlSinkConfig
from connectors.memory import MemorySource, Record
from connectors.errors import SchemaChangeRefused
from connectors.mysql.evolution import Column, changes, decide, joined, settled
from spark_jobs.transform import row_schemas
from spark_jobs.transform import row_transforms as rt
from spark_jobs.transform import transform_config as cfgs
from spark_jobs.read.decode import change_decoder
from spark_jobs.job import WindowJob
from spark_jobs.sink_targets import SinkTarget
from spark_jobs.write.sinks import derive_from_connect

CHAIN = TypeAdapter(list[cfgs.TransformConfig])
TABLE = MySqlSinkConfig(type="mysql", name="t", table="{topic}", create_table=True)


def _job(steps: list[dict[str, Any]], sink: MySqlSinkConfig = TABLE) -> WindowJob:
    return WindowJob(pipeline="p", run_id="r", consumer_conf={}, producer_conf={}, ranges=(),
                     sinks=(SinkTarget(sink, "url"),), versioning="kafka_offset", tolerance="all", dlq_topic="dlq",
                     context_headers=True, transforms=tuple(CHAIN.validate_python(steps)))


def _described(values: list[Any], steps: list[dict[str, Any]], keys: list[Any] | None = None,
               column_wise: bool = True) -> dict[str, Any]:
    """The records' table as the read task describes it (one description, the union of its tables')."""
    job = _job(steps)
    decoder = change_decoder(job)
    decoder.column_wise_min = 1 if column_wise else 10**9
    raw = [(json.dumps(k).encode() if k is not None else None, None if v is None else json.dumps(v).encode())
           for k, v in zip(keys or [{"id": i} for i in range(len(values))], values, strict=True)]
    batch = MemorySource([Record("t", 0, i, k, v, 1_700_000_000_000 + i, []) for i, (k, v) in enumerate(raw)]).batch()
    table = rt.apply(pa.Table.from_batches([decoder.decode_batch(batch)]), job.transforms, job.versioning)
    found = row_schemas.with_inferred([], table, table.column("route"), job.transforms)
    [(_t, text, _v)] = found
    return json.loads(text)


def _types(description: dict[str, Any]) -> dict[str, str]:
    return {c["name"]: c["type"] for c in description["columns"]}


@pytest.mark.parametrize("column_wise", [True, False])
def test_a_table_of_schemaless_records_is_typed_by_their_values_either_decode(column_wise: bool) -> None:
    records = [{"id": 1, "price": 10, "name": "pen", "paid": True, "note": None},
               {"id": 2, "price": 10.5, "name": "ink", "paid": False, "note": None, "code": 7},
               {"id": 3, "price": 11, "name": "cap", "paid": True, "note": None, "code": "x7"}]
    described = _described(records, [{"type": "Cast", "spec": {"id": "int32"}}], column_wise=column_wise)
    # an int and a double: DOUBLE; an int and a text: LONGTEXT; a field null everywhere: no column (yet)
    assert _types(described) == {"id": "INT", "price": "DOUBLE", "name": "LONGTEXT", "paid": "TINYINT(1)",
                                 "code": "LONGTEXT"}
    assert described["key"] == ["id"]  # the Kafka key's fields
    assert {c["name"]: c["nullable"] for c in described["columns"]}["id"] is False


def test_the_chain_decides_the_columns_and_the_key() -> None:
    steps = [{"type": "Flatten", "delimiter": "_"},
             {"type": "ReplaceField", "renames": {"ref": "order_ref"}},
             {"type": "ValueToKey", "fields": ["order_ref"]},
             {"type": "InsertField", "timestamp_field": "seen_at", "offset_field": "off"},
             {"type": "TimestampConverter", "field": "at", "target_type": "Timestamp"}]
    records = [{"ref": "A-1", "at": 1_700_000_000_000, "customer": {"name": "Ada", "tags": ["x"]}}]
    described = _described(records, steps)
    assert _types(described) == {"order_ref": "VARCHAR(255)", "at": "DATETIME(6)", "customer_name": "LONGTEXT",
                                 "customer_tags": "JSON", "seen_at": "DATETIME(6)", "off": "BIGINT"}
    assert described["key"] == ["order_ref"]  # ValueToKey's field, not the Kafka key's id


def test_deletes_and_tombstones_add_no_column() -> None:
    steps = [{"type": "ReplaceField", "exclude": ["secret"]}]
    described = _described([{"id": 1, "n": 1, "secret": "s"}, None], steps, keys=[{"id": 1}, {"id": "1"}])
    assert _types(described) == {"id": "BIGINT", "n": "BIGINT"}  # the tombstone's key text is no evidence


def test_descriptions_of_the_window_join_and_a_connect_schema_decides_its_fields() -> None:
    def text(columns: dict[str, str], key: list[str], inferred: bool = True) -> str:
        return json.dumps({"columns": [{"name": n, "type": t, "nullable": n not in key, "inferred": inferred}
                                       for n, t in columns.items()], "key": key, "properties": {}})

    sink = SinkTarget(TABLE, "url")
    first = text({"id": "BIGINT", "n": "BIGINT", "s": "LONGTEXT"}, ["id"])
    later = text({"id": "VARCHAR(255)", "n": "DOUBLE", "s": "BIGINT", "new": "TINYINT(1)"}, [])
    connect = text({"n": "DECIMAL(10,2)"}, [], inferred=False)
    for latest in (False, True):
        cfg = derive_from_connect(sink, "t", [first, later, connect], latest=latest)
        assert [(c.name, c.type) for c in cfg.columns] == [
            ("id", "VARCHAR(255)"), ("n", "DECIMAL(10,2)"), ("s", "LONGTEXT"), ("new", "TINYINT(1)")]
        assert cfg.primary_key == ["id"]
    kafka = derive_from_connect(SinkTarget(TABLE.model_copy(update={"pk_mode": "kafka"}), "url"), "t", [first])
    assert [c.name for c in kafka.columns] == ["__connect_topic", "__connect_partition", "__connect_offset", "id", "n",
                                                "s"]
    assert kafka.primary_key == ["__connect_topic", "__connect_partition", "__connect_offset"]
    assert row_schemas.inferred_columns([first, connect]) == {"id", "s"}


def test_how_two_inferred_types_join_and_what_a_table_that_has_the_column_keeps() -> None:
    pairs = {("BIGINT", "DOUBLE"): "DOUBLE", ("INT", "BIGINT"): "BIGINT", ("BIGINT", "LONGTEXT"): "LONGTEXT",
             ("TINYINT(1)", "BIGINT"): "LONGTEXT", ("JSON", "LONGTEXT"): "LONGTEXT", ("JSON", "JSON"): "JSON",
             ("VARCHAR(255)", "BIGINT"): "VARCHAR(255)", ("DECIMAL(10,2)", "BIGINT"): "DECIMAL(21,2)",
             ("DATE", "DATETIME(6)"): "DATETIME(6)", ("DATETIME(3)", "DATETIME(6)"): "DATETIME(6)",
             ("DOUBLE", "DATE"): "LONGTEXT"}
    for (a, b), want in pairs.items():
        assert joined(a, b) == want and joined(b, a) == want, (a, b)
    assert settled("double", "BIGINT") == "DOUBLE"  # the table keeps what holds the values
    assert settled("longtext", "TINYINT(1)") == "LONGTEXT"
    assert settled("bigint(20)", "BIGINT") == "BIGINT(20)"
    assert settled("bigint(20)", "DOUBLE") == "DOUBLE"  # a schema change, which schema_changes decides:
    found = changes("t", [Column("n", settled("bigint(20)", "DOUBLE"), True)], [], [Column("n", "bigint(20)", True)], [])
    assert [c.kind for c in found] == ["narrow"]  # a DOUBLE does not hold every BIGINT: never applied by itself
    with pytest.raises(SchemaChangeRefused, match="narrower"):
        decide(found, "lenient")
