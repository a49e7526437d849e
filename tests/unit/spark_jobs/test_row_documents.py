"""The documents of changes a chain rewrote (spark_jobs/transform/row_documents.py), on Debezium's own records
(tests/fixtures/debezium/orders.py: the MySQL connector with the JsonConverter and schemas)."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pyarrow as pa

from connectors.debezium import typed
from spark_jobs.transform import row_transforms as rt
from tests.fixtures import orders as o
from tests.fixtures.debezium import orders as fx
from tests.unit.spark_jobs.test_row_transforms import _micros, chain, decoded


def _documents(table: pa.Table) -> list[dict[str, Any] | None]:
    return [None if d is None else json.loads(d, parse_float=Decimal) for d in table.column("image_json").to_pylist()]


def test_a_chain_that_changes_nothing_leaves_the_decodes_documents_byte_for_byte() -> None:
    for column_wise in (True, False):
        records = decoded(fx.events(), column_wise)
        after = rt.apply(records, chain(), "source_ts_ms")
        assert after.column("image_json").to_pylist() == records.column("image_json").to_pylist()


def test_fields_a_chain_leaves_keep_their_json_and_the_others_get_their_new_values() -> None:
    steps = chain({"type": "Cast", "spec": {"paid": "boolean"}},
                  {"type": "ReplaceField", "exclude": ["note"], "renames": {"ship_date": "ship"}},
                  {"type": "MaskField", "fields": ["customer"], "replacement": "***"},
                  {"type": "TimestampConverter", "field": "created", "target_type": "unix",
                   "unix_precision": "milliseconds"},
                  {"type": "InsertField", "static_field": "src", "static_value": "shop", "offset_field": "off"})
    records = decoded(fx.events())
    before, after = _documents(records), _documents(rt.apply(records, steps, "source_ts_ms"))
    row = o.ROW_1
    assert after[0] == {
        "id": 1, "customer": "***", "amount": row["amount"], "qty": before[0]["qty"],  # exact, as without a chain
        "created": _micros(row["created"]) // 1000, "ship": "2024-02-29",  # renamed: its JSON as decoded
        "paid": True, "src": "shop", "off": 0}
    assert list(after[0]) == ["id", "customer", "amount", "qty", "created", "ship", "paid", "off", "src"]
    assert str(after[1]["amount"]) == "0.10"  # the decode's JSON, its trailing zero kept
    # a change without a document (a delete, a tombstone) keeps none
    assert [i for i, d in enumerate(after) if d is None] == [i for i, d in enumerate(before) if d is None]


def test_a_new_value_is_written_as_json_of_its_type() -> None:
    values = {
        "s": pa.array(['a "b"\\', None, "line\n"]), "b": pa.array([True, False, None]),
        "f": pa.array([1.5, float("inf"), None]), "i": pa.array([1, -2, None], pa.int64()),
        "d": pa.array([Decimal("1.50"), None, Decimal("-0.01")], pa.decimal128(5, 2)),
        "t": pa.array([0, None, 1], pa.timestamp("us")), "z": pa.array([0, None, 1], pa.timestamp("us", "UTC")),
        "day": pa.array([0, None, 1], pa.date32()), "time": pa.array([1_000_001, None, -1], pa.duration("us")),
    }
    got = {name: typed.json_of(array).to_pylist() for name, array in values.items()}
    assert got == {
        "s": ['"a \\"b\\"\\\\"', None, '"line\\n"'], "b": ["true", "false", None], "f": ["1.5", None, None],
        "i": ["1", "-2", None], "d": ["1.50", None, "-0.01"],
        "t": ['"1970-01-01T00:00:00.000000"', None, '"1970-01-01T00:00:00.000001"'],
        "z": ['"1970-01-01T00:00:00.000000Z"', None, '"1970-01-01T00:00:00.000001Z"'],
        "day": ['"1970-01-01"', None, '"1970-01-02"'], "time": ['"00:00:01.000001"', None, '"-00:00:00.000001"']}
    for texts in got.values():
        [json.loads(t) for t in texts if t is not None]  # every one is JSON
