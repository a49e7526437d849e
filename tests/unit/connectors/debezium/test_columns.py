"""The column-wise Debezium decode (connectors/debezium/columns.py) against the per-record one, on
change events written as Debezium's MySQL connector writes them (tests/fixtures/debezium/
mysql_all_types.py: every type, in each connector mode, with and without the schema wrapper)."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa
import pytest

from bench.workload import Workload
from connectors import images
from connectors.changes import JSON_DECODE, RecordDecoder
from connectors.debezium import columns
from connectors.debezium.envelope import Decoder, hints_from_columns
from tests.fixtures.debezium import mysql_all_types as fx
from tests.integration.connectors.debezium.test_types import COLUMNS, SCHEMALESS_ENCODINGS
from tests.unit.decoding import raw_batch


def _decoder(columns_: list[dict[str, Any]] | None, fields: bool, versioning: str = "source_ts_ms",
             documents: bool = False) -> Decoder:
    hints = hints_from_columns((c.get("field", c["name"]), c["type"], c.get("encoding")) for c in columns_ or [])
    used = frozenset(c.get("field", c["name"]) for c in columns_ or []) if fields else None
    return Decoder(versioning, hints, need_json=documents, fields=used)


def _both(columns_: list[dict[str, Any]] | None, records: list[tuple[bytes | None, bytes | None]], fields: bool,
          versioning: str = "source_ts_ms",
          documents: bool = False) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    """(column-wise rows, per-record rows, records the column-wise decode left to the per-record one)."""
    batch = raw_batch(records, fx.TOPIC)
    slow = [0]

    fast_decoder = _decoder(columns_, fields, versioning, documents)

    def per_record(b: pa.RecordBatch) -> pa.RecordBatch:
        slow[0] += b.num_rows
        return RecordDecoder.decode_batch(fast_decoder, b)

    fast = columns.decode_columns(fast_decoder, batch, per_record)
    reference = RecordDecoder.decode_batch(_decoder(columns_, fields, versioning, documents), batch)
    assert fast.schema.names == reference.schema.names
    return _texts(fast), _texts(reference), slow[0]


def _texts(decoded: pa.RecordBatch) -> list[dict[str, Any]]:
    """The rows, their images as {field: exact text} pairs (the typed images' texts: images.as_map)."""
    i = decoded.schema.get_field_index("image")
    return decoded.set_column(i, "image", images.as_map(decoded.column(i))).to_pylist()


def _value(text: str | None) -> Any:
    """A text as the value MySQL reads from it (a number's digits may differ: 19.90 and 19.9)."""
    if text is None:
        return None
    try:
        return Decimal(text)
    except InvalidOperation:
        return text


def _document(text: str | None) -> Any:
    """A document as its values: numbers by value, fields that are null left out."""
    if text is None:
        return None
    doc = JSON_DECODE.decode(text)
    return {k: v for k, v in doc.items() if v is not None}


def _same(fast: list[dict[str, Any]], reference: list[dict[str, Any]]) -> None:
    assert len(fast) == len(reference)
    for i, (f, r) in enumerate(zip(fast, reference, strict=True)):
        assert _document(f.pop("image_json")) == _document(r.pop("image_json")), i
        fi, ri = f.pop("image"), r.pop("image")
        assert f == r, i
        if ri is None:
            assert fi is None, i
            continue
        fmap = {k: _value(v) for k, v in fi if v is not None}
        rmap = {k: _value(v) for k, v in ri if v is not None}
        assert fmap == rmap, i


@pytest.mark.parametrize("modes", [
    {"time_precision_mode": "adaptive_time_microseconds"}, {"time_precision_mode": "connect"},
    {"time_precision_mode": "adaptive"},
    {"decimal_mode": "string", "binary_mode": "hex", "bigint_unsigned_mode": "precise"},
    {"decimal_mode": "double", "binary_mode": "base64", "bigint_unsigned_mode": "long"}])
@pytest.mark.parametrize(("fields", "documents"), [(True, False), (False, False), (False, True)])
def test_every_type_with_the_schema_wrapper_decodes_as_record_by_record(modes: dict[str, str], fields: bool,
                                                                        documents: bool) -> None:
    binary = modes.get("binary_mode")
    declared = [{**c, **({"encoding": binary} if binary and c["name"] in ("c_binary", "c_varbinary", "c_blob")
                         else {})} for c in COLUMNS]
    records = fx.events(**modes)
    fast, reference, slow = _both(declared, records, fields, documents=documents)
    _same(fast, reference)
    assert slow == sum(1 for _k, v in records if v is None)  # only the tombstone is read record by record


@pytest.mark.parametrize(("fields", "documents"), [(True, False), (False, True)])
def test_every_type_without_the_wrapper_decodes_as_record_by_record(fields: bool, documents: bool) -> None:
    declared = [{**c, **({"encoding": SCHEMALESS_ENCODINGS[c["name"]]} if c["name"] in SCHEMALESS_ENCODINGS else {})}
                for c in COLUMNS]
    records = fx.events(schemas=False)
    fast, reference, slow = _both(declared, records, fields, documents=documents)
    _same(fast, reference)
    assert slow == 1


@pytest.mark.parametrize(("versioning", "documents"), [("source_ts_ms", False), ("kafka_offset", False),
                                                       ("source_ts_ms", True)])
def test_the_bench_stream_decodes_column_wise(versioning: str, documents: bool) -> None:
    declared = [{"name": "id", "type": "BIGINT"}, {"name": "customer", "type": "VARCHAR(32)"},
                {"name": "status", "type": "VARCHAR(16)"}, {"name": "amount", "type": "DECIMAL(10,2)"},
                {"name": "updated_at", "type": "BIGINT", "field": "updated_ms"}]
    records = [(k, v) for k, v, *_ in Workload(2_000, 300, 7).stream()]
    fast, reference, slow = _both(declared, records, not documents, versioning, documents)
    _same(fast, reference)
    assert slow == 0


def test_odd_records_take_the_per_record_decode_and_keep_their_place() -> None:
    """A broken record, a value of another JSON type, an unwrapped row, a tombstone and a truncate
    among good records: the result is the per-record decode's, in the batch's order."""
    declared = [{"name": "id", "type": "BIGINT"}, {"name": "name", "type": "VARCHAR(20)"}]
    good = [(b'{"id":%d}' % i, b'{"op":"c","after":{"id":%d,"name":"n%d"},"source":{"ts_ms":%d,"db":"d",'
             b'"table":"t"},"ts_ms":1}' % (i, i, 1000 + i)) for i in range(6)]
    odd = [(b'{"id":9}', b'{"op":"c","after":{"id":"nine"},"source":{"ts_ms":5}}'),  # a string id
           (b'{"id":9}', b'{"op":"c","after":{'),  # broken JSON
           (b'{"id":9}', None),  # a tombstone
           (None, b'{"id":9,"name":"x","__deleted":"true","__source_ts_ms":7}'),  # unwrapped
           (None, b'{"op":"t","source":{"ts_ms":8,"db":"d","table":"t"}}'),  # a truncate
           (b'{"id":9}', b'{"op":"x","after":{"id":9},"source":{"ts_ms":5}}')]  # an unknown op
    records = [good[0], odd[0], good[1], odd[1], good[2], odd[2], good[3], odd[3], good[4], odd[4], good[5], odd[5]]
    fast, reference, slow = _both(declared, records, True)
    _same(fast, reference)
    assert slow > 0


def test_a_group_with_a_value_its_converter_refuses_is_read_record_by_record() -> None:
    declared = [{"name": "id", "type": "BIGINT"}, {"name": "d", "type": "DATE"}]
    records = [(b'{"id":1}', b'{"op":"c","after":{"id":1,"d":19000},"source":{"ts_ms":5}}'),
               (b'{"id":2}', b'{"op":"c","after":{"id":2,"d":99999999},"source":{"ts_ms":6}}')]
    fast, reference, slow = _both(declared, records, True)
    _same(fast, reference)
    assert slow == 2
    assert reference[1]["error_stage"] == "converter"


def test_a_value_with_a_line_break_between_its_tokens_is_read_and_keeps_its_place() -> None:
    """JSON allows a line break between tokens; the column-wise reader reads one value per line, so
    such a value (and only its neighbours down to HALVE_DOWN_TO) takes the per-record decode."""
    declared = [{"name": "id", "type": "BIGINT"}, {"name": "name", "type": "VARCHAR(20)"}]
    good = [(b'{"id":%d}' % i, b'{"op":"c","after":{"id":%d,"name":"n%d"},"source":{"ts_ms":%d,"db":"d",'
             b'"table":"t"},"ts_ms":1}' % (i, i, 1000 + i)) for i in range(6)]
    broken = (b'{"id":9}', b'{"op":"c",\n"after":{"id":9,"name":"nine"},"source":{"ts_ms":5,"db":"d","table":"t"}}')
    fast, reference, slow = _both(declared, [*good[:3], broken, *good[3:]], True)
    assert [dict(r["image"])["name"] for r in fast] == ["n0", "n1", "n2", "nine", "n3", "n4", "n5"]
    _same(fast, reference)
    assert slow > 0


def test_the_lines_the_json_reader_reads_are_the_values_of_the_slice() -> None:
    from connectors.debezium.arrow_read import Unsupported, one_per_line

    values = pa.array([b'{"a":1}', b'{"b":22}', b'{"c":333}', b'{"d":4}'], pa.binary())
    assert one_per_line(values).to_pybytes() == b'{"a":1}\n{"b":22}\n{"c":333}\n{"d":4}\n'
    assert one_per_line(values.slice(1, 2)).to_pybytes() == b'{"b":22}\n{"c":333}\n'
    assert one_per_line(pa.array(['{"é":1}'], pa.string())).to_pybytes() == '{"é":1}\n'.encode()
    for bad in ([b'{"a":\n1}'], [b'{"a":1}', b""], [b'{"a":1}', None]):
        with pytest.raises(Unsupported):
            one_per_line(pa.array(bad, pa.binary()))
