"""The steps on the key of the per-partition path (spark_jobs/transform/row_keys.py: Kafka Connect's ``$Key``
SMTs), without Spark: Debezium's own records (tests/fixtures/debezium/orders.py: the key is the
JsonConverter's ``{schema, payload}`` of ``{"id": int32}``) decoded as the read task decodes them, then
the chain. Read back from MySQL and Elasticsearch: tests/integration/spark_jobs/test_row_transforms.py."""

from __future__ import annotations

import base64
import json
from typing import Any

import pyarrow as pa
import pytest

from cdcflow.config import MySqlSinkConfig, parse_pipeline
from connectors.errors import ConfigError
from spark_jobs import chains
from spark_jobs.transform import row_transforms as rt
from spark_jobs.read.decode import change_decoder
from spark_jobs.project.tables import project_rows
from tests.fixtures.debezium import orders as fx
from tests.unit.connectors.debezium.test_envelope import raw_batch
from tests.unit.spark_jobs.test_row_steps import DELETES, TOMBSTONES
from tests.unit.spark_jobs.test_row_transforms import CHAIN, MYSQL, _env, chain, decoded, job, rows


def _keys(*steps: dict[str, Any], records: list[tuple[bytes | None, bytes | None]] | None = None,
          key_converter: str = "json") -> tuple[list[dict[str, Any]], list[dict[str, str] | None]]:
    """The changes after the chain, and each one's key as the sinks see it (its ``key_image``)."""
    out = rt.apply(decoded(records or fx.events()), chain(*steps), "source_ts_ms", key_converter=key_converter)
    keys = [None if k is None else dict(k) for k in out.column("key_image").to_pylist()]
    return rows(out), keys


def test_every_field_step_on_the_key_is_served_and_leaves_the_value() -> None:
    for step in ({"type": "Cast", "target": "key", "spec": {"id": "string"}},
                 {"type": "MaskField", "target": "key", "fields": ["id"]},
                 {"type": "ReplaceField", "target": "key", "renames": {"id": "order_id"}},
                 {"type": "InsertField", "target": "key", "static_field": "shop", "static_value": "a"},
                 {"type": "TimestampConverter", "target": "key", "field": "at", "target_type": "unix"},
                 {"type": "Flatten", "target": "key"}, {"type": "ExtractField", "target": "key", "field": "id"},
                 {"type": "HoistField", "target": "key", "field": "k"}):
        assert rt.unserved(job(MYSQL, transforms=chain(step))) is None, step
        out, _keys_ = _keys(step)
        assert [(r["change_op"], r["image"], r["error_message"]) for r in out] == [
            (r["change_op"], r["image"], r["error_message"]) for r in rows(rt.apply(
                decoded(fx.events()), chain(), "source_ts_ms"))], step


def test_the_key_steps_give_the_key_kafka_connect_gives() -> None:
    out, keys = _keys({"type": "Cast", "target": "key", "spec": {"id": "string"}},
                      {"type": "ReplaceField", "target": "key", "renames": {"id": "order_id"}},
                      {"type": "InsertField", "target": "key", "static_field": "shop", "static_value": "a"})
    ids = [json.loads(k)["payload"]["id"] for k, _v in fx.events()]
    assert keys == [{"order_id": str(i), "shop": "a"} for i in ids]
    assert [r["error_message"] for r in out] == [None] * len(out)
    # a tombstone's and a delete event's key too: the key the sink deletes by
    assert [keys[i]["order_id"] for i in DELETES] == [keys[i]["order_id"] for i in TOMBSTONES] == ["3", "2", "1"]
    _out, masked = _keys({"type": "MaskField", "target": "key", "fields": ["id"]})
    assert {k["id"] for k in masked} == {"0"}  # an int32's mask is 0
    _out, hoisted = _keys({"type": "ExtractField", "target": "key", "field": "id"},
                          {"type": "HoistField", "target": "key", "field": "k"})
    assert hoisted == [{"k": str(i)} for i in ids]


def test_a_key_field_a_step_cannot_convert_fails_the_upsert_naming_the_key() -> None:
    records = [(json.dumps({"id": "x1"}).encode(), _env(1)[1]), (json.dumps({"id": "7"}).encode(), _env(2)[1]),
               (json.dumps({"id": "x3"}).encode(), _env(3, "d")[1])]
    out, keys = _keys({"type": "Cast", "target": "key", "spec": {"id": "int32"}}, records=records)
    assert [r["error_message"] for r in out] == ["Cast: key.id = 'x1' is not a valid int32", None, None]
    assert keys[1] == {"id": "7"}


def test_a_string_key_hoisted_is_a_struct_key() -> None:
    records = [(b"order-1", _env(1)[1]), (b"order-2", None)]
    _out, keys = _keys({"type": "HoistField", "target": "key", "field": "ref"}, records=records,
                       key_converter="string")
    assert keys == [{"ref": "order-1"}, {"ref": "order-2"}]
    _out, raw = _keys({"type": "HoistField", "target": "key", "field": "ref"}, records=records[:1],
                      key_converter="bytes")
    assert raw == [{"ref": base64.b64encode(b"order-1").decode()}]


def test_a_record_key_table_takes_its_key_columns_from_the_key_the_chain_left() -> None:
    sink = MySqlSinkConfig(type="mysql", name="m", table="orders", pk_mode="record_key", primary_key=["order_id"],
                           columns=[{"name": "order_id", "type": "VARCHAR(16)"}, {"name": "customer", "type": "TEXT"}])
    steps = chain({"type": "ReplaceField", "target": "key", "renames": {"id": "order_id"}},
                  {"type": "Cast", "target": "key", "spec": {"order_id": "string"}})
    out = rt.apply(decoded(fx.events()), steps, "source_ts_ms")
    projected = project_rows(out.filter(pa.compute.is_null(out.column("error_stage"))), sink)
    ids = [json.loads(k)["payload"]["id"] for k, _v in fx.events()]
    assert projected.column("c_0").to_pylist() == [str(i) for i in ids]  # the tombstones' and deletes' too
    assert projected.column("error_message").to_pylist() == [None] * len(ids)


def test_a_table_from_the_record_schema_takes_the_keys_columns() -> None:
    schema = json.dumps({"columns": [{"name": "id", "type": "INT", "nullable": False},
                                     {"name": "customer", "type": "LONGTEXT", "nullable": True}],
                         "key": ["id"], "properties": {}})
    steps = chain({"type": "ReplaceField", "target": "key", "renames": {"id": "order_id"}},
                  {"type": "Cast", "target": "key", "spec": {"order_id": "string"}},
                  {"type": "Cast", "spec": {"id": "int64"}})
    table = json.loads(rt.described(steps, schema))
    assert table["key"] == ["order_id"]
    assert table["columns"] == [{"name": "id", "type": "BIGINT", "nullable": False},
                                {"name": "customer", "type": "LONGTEXT", "nullable": True},
                                {"name": "order_id", "type": "VARCHAR(255)", "nullable": False}]
    assert chains.key_after(steps, ["id"]) == ["order_id"]
    # without a step on the key's fields, the value's renames name the key (it is read from the row)
    assert chains.key_after(chain({"type": "ReplaceField", "renames": {"id": "order_id"}}), ["id"]) == ["order_id"]


def test_the_key_a_step_before_a_spark_step_makes_crosses_it() -> None:
    """The part of the chain before the Spark stage hands its key on (row_keys.hand_on); the part after
    it (here, across the record frame as the stage carries it, without Spark) reads it back, so the
    sinks key the rows by it and a ValueToKey's key reaches a later step on the key."""
    from spark_jobs.transform import record_frame  # noqa: PLC0415

    for head, want in (([{"type": "ReplaceField", "target": "key", "renames": {"id": "order_id"}}], "order_id"),
                       ([{"type": "ValueToKey", "fields": ["id", "customer"]}], "customer")):
        steps = chain(*head, {"type": "Filter", "predicate": {"type": "Sql", "condition": "false"}},
                      {"type": "InsertField", "target": "key", "static_field": "shop", "static_value": "s1"})
        assert rt.unserved(job(MYSQL, transforms=steps)) is None
        before = rt.apply(decoded(fx.events()), steps[:2], "source_ts_ms", finish=False)
        live = pa.compute.is_null(before.column("error_stage"))
        frame = record_frame.from_frame(record_frame.to_frame(before.filter(live), "json_schema"))
        after = rt.apply(frame, steps[2:], "source_ts_ms", first=2, when=pa.array([False] * frame.num_rows))
        keys = [dict(k) for k in after.column("key_image").to_pylist()]
        assert {k["shop"] for k in keys} == {"s1"} and all(want in k for k in keys), keys
        ids = [r["image"]["id"] for r in rows(after)]
        assert [k.get("order_id", k.get("id")) for k in keys] == [str(i) for i in ids]
    assert CHAIN  # the chains of these tests: test_row_transforms.CHAIN


def test_envelopes_under_a_text_key_delete_by_the_before_image_or_the_key_as_the_one_key_column() -> None:
    """key_converter string (bytes: base64): a delete event by its ``before`` image; a tombstone by its
    key, as the value of the sinks' one key field (named as the record names it, before a rename)."""
    renamed = chain({"type": "ReplaceField", "renames": {"id": "order_id"}})
    sink = MySqlSinkConfig(type="mysql", name="m", table="orders", primary_key=["order_id"],
                           columns=[{"name": "order_id", "type": "VARCHAR(16)"}])
    records = [(b"7", _env(7)[1]), (b"8", _env(8, "d")[1]), (b"9", None)]
    for converter, key in (("string", "9"), ("bytes", base64.b64encode(b"9").decode())):
        decoder = change_decoder(job(sink, transforms=renamed, key_converter=converter))
        table = pa.Table.from_batches([decoder.decode_batch(raw_batch(records))])
        out = rows(rt.apply(table, renamed, "source_ts_ms", key_converter=converter))
        assert [(r["change_op"], r["image"], r["error_message"]) for r in out] == [
            ("upsert", {"order_id": "7"}, None), ("delete", {"order_id": "8"}, None),
            ("delete", {"order_id": key}, None)], converter
    # sinks keyed by two fields: a tombstone has nothing to delete by
    two = MySqlSinkConfig(type="mysql", name="m", table="orders", primary_key=["id", "shop"],
                          columns=[{"name": "id", "type": "INT"}, {"name": "shop", "type": "INT"}])
    decoder = change_decoder(job(two, transforms=chain(), key_converter="string"))
    said = pa.Table.from_batches([decoder.decode_batch(raw_batch(records[2:]))]).column("error_message")[0].as_py()
    assert said.startswith("a delete without a 'before' image deletes by its key, a text (key_converter string)")


def test_an_unwrap_of_values_of_the_string_or_bytes_converter_is_a_config_error() -> None:
    for converter in ("string", "bytes"):
        text = json.dumps({"name": "p", "source": {"topics": ["a.b.c"], "value_converter": converter},
                           "transforms": [{"type": "ExtractNewRecordState"}],
                           "sinks": [{"type": "mysql", "table": "t", "create_table": True}]})
        with pytest.raises(ConfigError) as exc:
            parse_pipeline(text, "p.yaml")
        assert ("transforms.0.type: ExtractNewRecordState unwraps Debezium's envelope, a JSON object, and "
                f"source.value_converter {converter} reads each value as a") in str(exc.value)
