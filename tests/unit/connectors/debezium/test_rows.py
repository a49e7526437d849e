"""Kafka Connect's record model (``Decoder(rows=...)``: the value is the row), decoded column-wise and
record by record, against the envelope decode of the same rows.

The rows are Debezium's MySQL connector's all-types rows (tests/fixtures/debezium/mysql_all_types.py),
each written as the JsonConverter writes a row after an ExtractNewRecordState that ran upstream in
Kafka Connect (debezium's "New Record State Extraction" page): the ``after`` struct's schema and the
row as the payload; without schemas, the row alone.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest

from connectors.changes import RecordDecoder
from connectors.debezium import columns
from connectors.debezium.envelope import Decoder
from tests.fixtures.debezium import mysql_all_types as fx
from tests.unit.connectors.debezium.test_columns import _same, _texts
from tests.unit.decoding import raw_batch


def _rows(schemas: bool) -> list[tuple[bytes, bytes]]:
    """The upserts of fx.events() as records of the row alone (with the row struct's schema)."""
    out = []
    for key, value in fx.events(schemas=schemas):
        if value is None or json.loads(value).get("payload", json.loads(value)).get("op") == "d":
            continue
        envelope = json.loads(value)
        if schemas:
            [after] = [f for f in envelope["schema"]["fields"] if f["field"] == "after"]
            row = {"schema": {k: v for k, v in after.items() if k != "field"}, "payload": envelope["payload"]["after"]}
        else:
            row = envelope["after"]
        out.append((key, json.dumps(row, separators=(",", ":")).encode()))  # compact, as the JsonConverter writes
    return out


SLOW: list[int] = []  # the records the last column-wise decode left to the per-record one


def _decoded(records: list[tuple[bytes | None, bytes | None]], rows: str | None, column_wise: bool,
             documents: bool) -> list[dict[str, Any]]:
    decoder = Decoder("kafka_offset", need_json=documents, rows=rows)
    batch = raw_batch(records, fx.TOPIC)
    if column_wise:
        SLOW[:] = [0]

        def per_record(b: pa.RecordBatch) -> pa.RecordBatch:
            SLOW[0] += b.num_rows
            return RecordDecoder.decode_batch(decoder, b)
        return _texts(columns.decode_columns(decoder, batch, per_record))
    return _texts(RecordDecoder.decode_batch(decoder, batch))


@pytest.mark.parametrize("documents", [False, True])
@pytest.mark.parametrize("schemas", [True, False], ids=["json_schema", "json"])
def test_rows_decode_as_their_envelopes_do(schemas: bool, documents: bool) -> None:
    converter = "json_schema" if schemas else "json"
    envelopes = [(k, v) for k, v in fx.events(schemas=schemas)
                 if v is not None and json.loads(v).get("payload", json.loads(v)).get("op") != "d"]
    for column_wise in (True, False):
        reference = _decoded(envelopes, None, False, documents)
        got = _decoded(_rows(schemas), converter, column_wise, documents)
        if column_wise and schemas:
            assert SLOW == [0]  # every row typed by its schema, none left to the per-record decode
        for row, ref in zip(got, reference, strict=True):
            # the record, and the envelope's source, op and schema (of the envelope: a row's is its own)
            for name in ("value", "source_db", "source_table", "source_op", "schema_id", "row_schema"):
                row.pop(name), ref.pop(name)
        _same(got, reference)
    assert all(r["change_op"] == "upsert" and r["error_message"] is None for r in got)


def test_what_is_not_a_row_is_a_dead_letter_with_the_converters_words_and_a_tombstone_a_delete() -> None:
    records = [(b'{"id": 1}', b"[1]"), (b'{"id": 2}', b"not json"), (b'{"id": 3}', None),
               (b'{"id": 4}', b'{"id": 4}'), (b'{"id": 5}', b'{"schema": null, "payload": {"id": 5}}'),
               (b'{"id": 6}', b'{"schema": {"type": "struct", "fields": []}, "payload": null}')]
    said = {}
    for converter in ("json", "json_schema"):
        for column_wise in (True, False):
            rows = _decoded(records, converter, column_wise, False)
            said[converter, column_wise] = [(r["change_op"], r["error_message"]) for r in rows]
        assert said[converter, True] == said[converter, False]
    assert said["json", True] == [
        (None, "value is JSON but not an object (value.converter json)"),
        (None, "value is not valid JSON (value.converter json)"), ("delete", None), ("upsert", None),
        ("upsert", None), ("upsert", None)]  # {schema, payload} is a row of two fields to the json converter
    assert said["json_schema", True] == [
        (None, "value is not a {schema, payload} JSON envelope (value.converter json_schema)"),
        (None, "value is not a {schema, payload} JSON envelope (value.converter json_schema)"), ("delete", None),
        (None, "value is not a {schema, payload} JSON envelope (value.converter json_schema)"), ("upsert", None),
        ("delete", None)]  # the JsonConverter's null value: a tombstone


def test_source_ts_ms_versioning_names_what_a_row_lacks() -> None:
    decoder = Decoder("source_ts_ms", rows="json")
    [row] = RecordDecoder.decode_batch(decoder, raw_batch([(b'{"id": 1}', b'{"id": 1}')], fx.TOPIC)).to_pylist()
    assert row["error_message"].startswith("no source.ts_ms to version the change by")
    assert pa.types.is_string(pa.array([row["error_stage"]]).type)
