"""Debezium decoding (in the read task, no Spark), column projection and last-change-per-key (on
real Spark frames built from the decoder's output)."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from cdcflow.config import MySqlSinkConfig
from connectors import images
from connectors.debezium.envelope import VERSION_SHIFT, Decoder, hints_from_columns
from connectors.kafka.reader import RAW_SCHEMA

SINK = MySqlSinkConfig(type="mysql", table="t", primary_key=["id"], columns=[
    {"name": "id", "type": "BIGINT"}, {"name": "name", "type": "VARCHAR(10)"},
    {"name": "amount", "type": "DECIMAL(6,2)"}, {"name": "flag", "type": "TINYINT"}])


def env(op: str, before: Any, after: Any, ts: int, wrapped: bool = False) -> bytes:
    payload = {"op": op, "before": before, "after": after, "source": {"ts_ms": ts}}
    return json.dumps({"schema": {}, "payload": payload} if wrapped else payload).encode()


def raw_batch(records: list[tuple[bytes | None, bytes | None]]) -> pa.RecordBatch:
    n = len(records)
    return pa.RecordBatch.from_pydict({
        "topic": ["t"] * n, "partition": [0] * n, "offset": list(range(n)), "timestamp": [1000 + i for i in range(n)],
        "key": [k for k, _v in records], "value": [v for _k, v in records], "headers": [[] for _ in range(n)]},
        schema=RAW_SCHEMA)


def decoded(records: list[tuple[bytes | None, bytes | None]], versioning: str = "source_ts_ms") -> list[dict[str, Any]]:
    """The changes, each image as the texts its fields give a sink (images.as_map)."""
    batch = Decoder(versioning).decode_batch(raw_batch(records))
    i = batch.schema.get_field_index("image")
    rows = batch.set_column(i, "image", images.as_map(batch.column(i))).to_pylist()
    for r in rows:
        r["image"] = dict(r["image"]) if r["image"] is not None else None
    return rows



def test_decode_envelopes_wrappers_tombstones_and_errors() -> None:
    k1 = b'{"id": 1}'
    records = [
        (k1, env("c", None, {"id": 1, "name": "a"}, 10)),
        (k1, env("u", {"id": 1}, {"id": 1, "name": "b"}, 20, wrapped=True)),
        (k1, env("d", {"id": 1, "name": "b"}, None, 30)),
        (b'{"schema": {}, "payload": {"id": 1}}', None),
        (k1, b"not json"),
        (k1, b'{"id": 1}'),
        (k1, json.dumps({"op": "z", "after": {"id": 1}, "source": {"ts_ms": 1}}).encode()),
        (k1, json.dumps({"op": "c", "after": None, "source": {"ts_ms": 1}}).encode()),
        (None, None),
        (k1, json.dumps({"op": "c", "after": {"id": 1}}).encode()),
    ]
    rows = decoded(records)
    assert [(r["change_op"], r["error_stage"]) for r in rows[:4]] == [
        ("upsert", None), ("upsert", None), ("delete", None), ("delete", None)]
    assert rows[1]["image"] == {"id": "1", "name": "b"}
    assert rows[2]["image"] == {"id": "1", "name": "b"}  # deletes use the before image
    assert rows[3]["image"] == {"id": "1"}  # tombstones use the key (unwrapped from {schema, payload})
    assert rows[0]["version"] == 10 * VERSION_SHIFT + 0 and rows[3]["version"] is None
    assert json.loads(rows[1]["image_json"]) == {"id": 1, "name": "b"} and rows[3]["image_json"] is None
    assert [(r["error_stage"], r["error_message"]) for r in rows[4:]] == [
        ("converter", "value is not a JSON object (value.converter json)"),
        ("transform", "not a Debezium change event: no 'op' field (expected an envelope with op, before, after, source)"),
        ("transform", "unknown Debezium op 'z' (expected c, r, u, d or t)"),
        ("transform", "op 'c' without an 'after' row image"),
        ("converter", "tombstone without a key: nothing to delete"),
        ("transform", "no source.ts_ms nor ts_ms to version the change by (versioning: source_ts_ms)"),
    ]
    assert decoded(records, "kafka_offset")[3]["version"] == 3


def test_numbers_keep_their_text_and_documents_their_json_types() -> None:
    value = ('{"op":"c","source":{"ts_ms":1},"after":{"id":1,"amount":12.50,"big":18446744073709551615,'
             '"flag":true,"tags":{"a": [1, 2]},"text":"Grüße 東京"}}').encode()
    rows = decoded([(b'{"id": 1}', value)])
    # a field no column declares: a JSON number is read as the column-wise decode reads it (a double's 12.50
    # is 12.5; past int64 its text), so both decodes type a record alike (connectors/images.values_array)
    assert rows[0]["image"] == {"id": "1", "amount": "12.5", "big": "18446744073709551615", "flag": "true",
                                "tags": '{"a":[1,2]}', "text": "Grüße 東京"}
    declared = Decoder("source_ts_ms", hints_from_columns([("amount", "DECIMAL(6,2)", None)]))
    image = declared.decode_batch(raw_batch([(b'{"id": 1}', value)])).column("image")
    assert images.texts(image, "amount").to_pylist() == ["12.50"]  # a declared column: the text as written
    assert rows[0]["image_json"] == ('{"id":1,"amount":12.50,"big":18446744073709551615,"flag":true,'
                                     '"tags":{"a":[1,2]},"text":"Grüße 東京"}')




def test_rows_unwrapped_by_extract_new_record_state_are_changes() -> None:
    """ExtractNewRecordState with add.fields=op,source.ts_ms,table and delete.handling.mode=rewrite
    (Debezium's "New Record State Extraction" page): the row plus __op, __source_ts_ms, __table,
    __deleted; with schemas the wrapper's schema is the row's struct."""
    row_schema = {"type": "struct", "name": "dbserver1.inventory.products.Value", "optional": False, "fields": [
        {"field": "id", "type": "int32", "optional": False},
        {"field": "price", "type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal",
         "parameters": {"scale": "2", "connect.decimal.precision": "10"}},
        {"field": "__op", "type": "string", "optional": True},
        {"field": "__source_ts_ms", "type": "int64", "optional": True},
        {"field": "__table", "type": "string", "optional": True},
        {"field": "__deleted", "type": "string", "optional": True}]}
    upsert = {"id": 1, "price": "B88=", "__op": "u", "__source_ts_ms": 20, "__table": "products", "__deleted": "false"}
    deleted = {**upsert, "__op": "d", "__source_ts_ms": 30, "__deleted": "true"}
    rows = decoded([(b'{"id": 1}', json.dumps({"schema": row_schema, "payload": upsert}).encode()),
                    (b'{"id": 1}', json.dumps(deleted).encode()),
                    (b'{"id": 2}', json.dumps({"id": 2, "__deleted": "false"}).encode())])
    assert (rows[0]["change_op"], rows[0]["image"], rows[0]["version"]) == (
        "upsert", {"id": "1", "price": "19.99"}, 20 * VERSION_SHIFT)
    assert json.loads(rows[0]["row_schema"])["columns"][1] == {"name": "price", "type": "DECIMAL(10,2)",
                                                               "nullable": True}
    assert rows[0]["source_table"] == "products"
    assert (rows[1]["change_op"], rows[1]["version"]) == ("delete", 30 * VERSION_SHIFT + 1)
    assert (rows[2]["error_stage"], rows[2]["error_message"]) == (
        "transform", "no __source_ts_ms to version the change by (add source.ts_ms to the ExtractNewRecordState's "
                     "add.fields, or set versioning: kafka_offset)")
