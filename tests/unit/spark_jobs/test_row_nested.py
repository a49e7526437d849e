"""Flatten, ExtractField and HoistField on the per-partition path (spark_jobs/transform/row_nested.py), over
Kafka Connect's record model: Debezium's own change events (tests/fixtures/debezium/orders.py, the
JsonConverter with schemas) read as rows, as a sink connector without ExtractNewRecordState reads
them, and text values of the string converter."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

import pyarrow as pa
from pydantic import TypeAdapter

from connectors import images
from connectors.debezium.envelope import Decoder
from connectors.debezium.types import ColumnHint
from connectors.memory import MemorySource, Record
from spark_jobs.transform import row_transforms as rt
from spark_jobs.transform import transform_config as cfgs
from tests.fixtures import orders as o
from tests.fixtures.debezium import orders as fx

CHAIN = TypeAdapter(list[cfgs.TransformConfig])


def _through(records: list[tuple[bytes | None, bytes | None]], converter: str, *steps: dict[str, Any],
             documents: bool = False, hints: dict[str, ColumnHint] | None = None) -> list[dict[str, Any]]:
    decoder = Decoder("kafka_offset", hints or {}, need_json=documents, rows=converter, nested=True)
    decoder.column_wise_min = 1
    batch = MemorySource([Record(fx.TOPIC, 0, i, k, v, 1_700_000_000_000, [])
                          for i, (k, v) in enumerate(records)]).batch()
    out = rt.apply(pa.Table.from_batches([decoder.decode_batch(batch)]), CHAIN.validate_python(list(steps)),
                   "kafka_offset")
    rows = out.select(["change_op", "error_message", "image_json"]).to_pylist()
    for row, image in zip(rows, images.as_map(out.column("image")).to_pylist(), strict=True):
        row["image"] = dict(image) if image is not None else None
    return rows


def test_extract_field_after_reads_debeziums_events_as_rows_and_their_deletes_as_tombstones() -> None:
    rows = _through(fx.events(), "json_schema", {"type": "ExtractField", "field": "after"})
    assert [r["error_message"] for r in rows] == [None] * len(rows)
    final: dict[int, dict[str, str | None]] = {}
    for row in rows:
        key = int(row["image"]["id"])
        if row["change_op"] == "delete":
            assert row["image"] == {"id": str(key)}  # the Kafka key: a delete event's after is null
            final.pop(key, None)
        else:
            final[key] = row["image"]
    assert sorted(final) == sorted(o.FINAL)
    for key, want in o.FINAL.items():  # every field, a logical type inside ``after`` read by its Connect schema
        got = final[key]
        assert (got["customer"], got["note"], int(got["paid"])) == (want["customer"], want["note"], want["paid"])
        assert Decimal(got["amount"]) == want["amount"]  # org.apache.kafka.connect.data.Decimal: base64 bytes
        assert got["ship_date"] == want["ship_date"].isoformat()  # io.debezium.time.Date: days since the epoch
        assert dt.datetime.fromisoformat(got["created"]) == want["created"]  # MicroTimestamp
        assert int(got["qty"]) % 2**64 == want["qty"]  # BIGINT UNSIGNED, bigint.unsigned.handling.mode long


def test_extract_field_after_gives_documents_typed_values() -> None:
    rows = _through(fx.events(), "json_schema", {"type": "ExtractField", "field": "after"}, documents=True)
    last = {json.loads(r["image_json"])["id"]: json.loads(r["image_json"], parse_float=Decimal)
            for r in rows if r["change_op"] == "upsert"}
    want = o.FINAL[4]
    got = last[4]
    assert (got["amount"], got["ship_date"]) == (want["amount"], want["ship_date"].isoformat())
    assert dt.datetime.fromisoformat(got["created"]) == want["created"]


def test_a_declared_bigint_unsigned_column_reads_debeziums_long_inside_after_as_unsigned() -> None:
    """bigint.unsigned.handling.mode long (the default) writes 2^64-1 as -1, as at the top of a row."""
    rows = _through(fx.events()[:3], "json_schema", {"type": "ExtractField", "field": "after"}, documents=True,
                    hints={"qty": ColumnHint("BIGINT UNSIGNED")})
    assert [int(r["image"]["qty"]) for r in rows] == [o.ROW_1["qty"], o.ROW_2["qty"], o.ROW_3["qty"]]
    assert [json.loads(r["image_json"])["qty"] for r in rows] == [o.ROW_1["qty"], o.ROW_2["qty"], o.ROW_3["qty"]]


def test_flatten_of_the_envelope_reads_the_logical_types_inside_it() -> None:
    rows = _through(fx.events()[:1], "json_schema", {"type": "Flatten", "delimiter": "_"})
    image, want = rows[0]["image"], o.ROW_1
    assert Decimal(image["after_amount"]) == want["amount"]
    assert image["after_ship_date"] == want["ship_date"].isoformat()
    assert dt.datetime.fromisoformat(image["after_created"]) == want["created"]
    assert image["op"] == "c" and image["source_table"] == o.TABLE


def test_a_bytes_value_is_a_row_once_hoisted_its_bytes_as_base64() -> None:
    """Kafka Connect's ByteArrayConverter passes the bytes on as they are (an optional bytes schema).
    A row image holds binary data as base64 text (connectors/debezium/types.py):
    a binary column gets the bytes back (below), a text column and a document the base64, as on the
    older path, where Spark's to_json writes a binary value as base64."""
    raw = [b"\x00\x01\xfe\xff", b"", "Grüße".encode()]
    records: list[tuple[bytes | None, bytes | None]] = [(b'{"id": %d}' % i, v) for i, v in enumerate(raw)]
    steps = ({"type": "HoistField", "field": "payload"}, {"type": "InsertField", "offset_field": "id"})
    rows = _through(records, "bytes", *steps, documents=True)
    assert [(r["change_op"], r["image"], r["error_message"]) for r in rows] == [
        ("upsert", {"payload": "AAH+/w==", "id": "0"}, None), ("upsert", {"payload": "", "id": "1"}, None),
        ("upsert", {"payload": "R3LDvMOfZQ==", "id": "2"}, None)]
    assert [json.loads(r["image_json"]) for r in rows] == [
        {"payload": "AAH+/w==", "id": 0}, {"payload": "", "id": 1}, {"payload": "R3LDvMOfZQ==", "id": 2}]
    from cdcflow.config import MySqlSinkConfig
    from spark_jobs.project import tables

    decoder = Decoder("kafka_offset", need_json=False, rows="bytes")
    batch = MemorySource([Record(fx.TOPIC, 0, i, k, v, 1, []) for i, (k, v) in enumerate(records)]).batch()
    changed = rt.apply(pa.Table.from_batches([decoder.decode_batch(batch)]), CHAIN.validate_python(list(steps)),
                       "kafka_offset")
    sink = MySqlSinkConfig(type="mysql", name="m", table="t", primary_key=["id"], columns=[
        {"name": "id", "type": "BIGINT"}, {"name": "payload", "type": "BLOB"},
        {"name": "shown", "type": "TEXT", "field": "payload"}])
    projected = tables.project_rows(changed, sink)
    assert projected.select(["c_0", "c_1", "c_2"]).to_pylist() == [
        {"c_0": str(i), "c_1": v, "c_2": t} for i, (v, t) in enumerate(zip(raw, ["AAH+/w==", "", "R3LDvMOfZQ=="],
                                                                        strict=True))]


def test_flatten_names_nested_fields_by_their_path_and_keeps_arrays() -> None:
    values = [{"id": 1, "a": {"b": 1, "c": {"d": "x"}}, "tags": ["p", "q"]},
              {"id": 2, "a": {"b": 2, "c": None}, "tags": []}]
    records = [(json.dumps({"id": v["id"]}).encode(), json.dumps(v).encode()) for v in values]
    rows = _through(records, "json", {"type": "Flatten", "delimiter": "_"}, documents=True)
    assert [r["image"] for r in rows] == [{"id": "1", "a_b": "1", "a_c_d": "x", "tags": '["p","q"]'},
                                          {"id": "2", "a_b": "2", "a_c_d": None, "tags": "[]"}]
    assert [json.loads(r["image_json"]) for r in rows] == [{"id": 1, "a_b": 1, "a_c_d": "x", "tags": ["p", "q"]},
                                                           {"id": 2, "a_b": 2, "a_c_d": None, "tags": []}]


def test_a_text_value_is_a_row_once_hoisted_and_a_dead_letter_otherwise() -> None:
    records: list[tuple[bytes | None, bytes | None]] = [(None, "line one".encode()), (None, b"\xff\xfe")]
    hoisted = _through(records, "string", {"type": "HoistField", "field": "line"}, documents=True)
    assert [(r["image"], r["image_json"], r["error_message"]) for r in hoisted] == [
        ({"line": "line one"}, '{"line":"line one"}', None),
        (None, None, "value is not valid UTF-8 (value.converter string)")]
    [alone, _bad] = _through(records, "string", {"type": "InsertField", "static_field": "x", "static_value": "y"})
    assert alone["error_message"] == ("after the transforms the value is string, not a struct: sinks need a struct "
                                      "(a JSON object); add a HoistField")


def test_extract_field_of_a_field_a_schema_lacks_fails_that_record_and_a_schemaless_one_deletes_its_key() -> None:
    def wrapped(i: int, fields: list[dict[str, Any]], payload: dict[str, Any]) -> tuple[bytes, bytes]:
        value = {"schema": {"type": "struct", "fields": fields}, "payload": payload}
        return json.dumps({"id": i}).encode(), json.dumps(value, separators=(",", ":")).encode()

    inner = {"field": "inner", "type": "struct", "optional": True, "fields": [{"field": "v", "type": "int32"}]}
    records = [wrapped(1, [{"field": "id", "type": "int32"}, inner], {"id": 1, "inner": {"v": 1}}),
               wrapped(2, [{"field": "id", "type": "int32"}], {"id": 2})]
    rows = _through(records, "json_schema", {"type": "ExtractField", "field": "inner"})
    assert [(r["change_op"], r["image"], r["error_message"]) for r in rows] == [
        ("upsert", {"v": "1"}, None), ("upsert", {"id": "2"}, "ExtractField: value has no field 'inner'")]
    schemaless = [(b'{"id": 1}', b'{"id": 1, "inner": {"v": 1}}'), (b'{"id": 2}', b'{"id": 2}')]
    rows = _through(schemaless, "json", {"type": "ExtractField", "field": "inner"})
    assert [(r["change_op"], r["image"], r["error_message"]) for r in rows] == [
        ("upsert", {"v": "1"}, None), ("delete", {"id": "2"}, None)]


def test_what_a_review_found_stays_fixed() -> None:
    """A text that looks like JSON stays a text; a field step before HoistField on a text fails; a
    schemaless record without the field is a tombstone whatever its neighbours hold; a record whose
    structs cannot be read whole fails in the decode, naming why; a declared DECIMAL keeps its type."""
    looks_like_json: list[tuple[bytes | None, bytes | None]] = [(None, b'{"id":1,"a":2}')] * 2
    [hoisted, _same] = _through(looks_like_json, "string", {"type": "HoistField", "field": "line"}, documents=True)
    assert (hoisted["image"], json.loads(hoisted["image_json"])) == (
        {"line": '{"id":1,"a":2}'}, {"line": '{"id":1,"a":2}'})
    [late] = _through([(None, b"hello")], "string", {"type": "InsertField", "topic_field": "t"},
                      {"type": "HoistField", "field": "line"})
    assert late["error_message"].startswith("HoistField: the value is string, not a struct, and a step before")
    alone = [(b'{"id":2}', b'{"id":2}')]
    for records in (alone, [(b'{"id":1}', b'{"id":1,"inner":{"v":1}}'), *alone]):
        rows = _through(records, "json", {"type": "ExtractField", "field": "inner"})
        assert (rows[-1]["change_op"], rows[-1]["image"], rows[-1]["error_message"]) == ("delete", {"id": "2"}, None)
    [broken] = _through([(b'{"id":1}', b'{"id":1,\n"a":{"b":1}}')], "json", {"type": "Flatten"})
    assert broken["error_message"].startswith("the record has a struct or an array that could not be read whole")
    decoder = Decoder("kafka_offset", hints={"amt": ColumnHint("DECIMAL(20,2)")}, need_json=False, rows="json",
                      nested=True)
    decoder.column_wise_min = 1
    batch = MemorySource([Record(fx.TOPIC, 0, i, b'{"id":1}', v, 0, []) for i, v in enumerate(
        [b'{"id":1,"amt":null,"a":{"b":1}}', b'{"id":2,"amt":12345678901234567.89,"a":{"b":2}}'])]).batch()
    image = pa.Table.from_batches([decoder.decode_batch(batch)]).column("image")
    assert images.texts(image, "amt").to_pylist() == [None, "12345678901234567.89"]
