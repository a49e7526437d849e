"""The column-wise logical types (connectors/debezium/typed.py) against the per-value converters,
on the edges the fixtures' rows do not reach: negative and 40-digit decimals, dates and times at the
ends of the years 1-9999, nanoseconds before 1970, TIMEs past 24 hours and below zero."""

from __future__ import annotations

import base64
from typing import Any

import pyarrow as pa
import pytest

from connectors.changes import JSON_DECODE, JSON_ENCODE
from connectors.debezium import typed
from connectors.debezium.types import (
    DATE,
    DECIMAL,
    LOGICAL,
    MICRO_TIME,
    MICRO_TIMESTAMP,
    NANO_TIME,
    NANO_TIMESTAMP,
    TIMESTAMP,
    ZONED_TIMESTAMP,
    FieldSchema,
    converter,
)


def _b64(unscaled: int) -> str:
    return base64.b64encode(unscaled.to_bytes((unscaled.bit_length() + 8) // 8 or 1, "big", signed=True)).decode()


CASES: list[tuple[FieldSchema, pa.DataType, list[Any]]] = [
    (FieldSchema("bytes", DECIMAL, {"scale": "2"}), pa.string(),
     [_b64(1999), _b64(-50), _b64(0), _b64(-1), None, _b64(10 ** 20 + 7)]),
    (FieldSchema("bytes", DECIMAL, {"scale": "30"}), pa.string(), [_b64(-(10 ** 64) + 1), _b64(5)]),
    (FieldSchema("int32", DATE), pa.int64(), [0, -3653, -719_162, 2_932_896, None, 18_000]),
    (FieldSchema("int64", MICRO_TIMESTAMP), pa.int64(),
     [0, -1, 1_500_000, typed.MIN_MICROS, typed.MAX_MICROS, None]),
    (FieldSchema("int64", TIMESTAMP), pa.int64(), [0, -1, 1_529_501_823_123, None]),
    (FieldSchema("int64", NANO_TIMESTAMP), pa.int64(), [0, -1, -1_001, 1_529_501_823_123_456_789, None]),
    (FieldSchema("int64", MICRO_TIME), pa.int64(), [0, 1, 86_399_999_999, 3_020_399_000_000, -3_020_399_000_000,
                                                     -1, None]),
    (FieldSchema("int64", NANO_TIME), pa.int64(), [0, 999, -1_001, None]),
    (FieldSchema("string", ZONED_TIMESTAMP), pa.string(),
     ["2018-06-20T13:37:03Z", "2018-06-20T13:37:03.5+02:00", "1969-12-31T23:59:59.999999-05:30", None]),
]


@pytest.mark.parametrize(("schema", "physical", "values"), CASES, ids=lambda c: getattr(c, "name", None) or "")
def test_a_column_reads_as_its_values_do_one_by_one(schema: FieldSchema, physical: pa.DataType,
                                                     values: list[Any]) -> None:
    convert = converter(schema)
    logical = LOGICAL[convert]
    column = typed.typed(pa.array(values, physical), logical)
    assert column is not None
    texts = typed.mysql_texts(column).to_pylist()
    documents = typed.json_values(column, logical).to_pylist()
    for value, text, document in zip(values, texts, documents, strict=True):
        want_text, want_document = convert(value)
        assert text == want_text, value
        got = None if document is None else JSON_DECODE.decode(document)
        assert got == (None if want_document is None else JSON_DECODE.decode(JSON_ENCODE.encode(want_document))), value


@pytest.mark.parametrize(("schema", "values"), [
    (FieldSchema("int32", DATE), [2_932_897]), (FieldSchema("int32", DATE), [-719_163]),
    (FieldSchema("int64", MICRO_TIMESTAMP), [typed.MAX_MICROS + 1]),
    (FieldSchema("int64", TIMESTAMP), [-62_135_596_800_001]),
    (FieldSchema("bytes", DECIMAL, {"scale": "0"}), ["not base64!"]),
])
def test_a_value_its_converter_refuses_fails_the_column(schema: FieldSchema, values: list[Any]) -> None:
    convert = converter(schema)
    physical = pa.string() if isinstance(values[0], str) else pa.int64()
    with pytest.raises(typed.OutOfRange):
        typed.typed(pa.array(values, physical), LOGICAL[convert])
    with pytest.raises(ValueError):  # noqa: PT011 - BadValue, the per-record decode's dead letter
        convert(values[0])
