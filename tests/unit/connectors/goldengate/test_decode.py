"""Oracle GoldenGate for Big Data's JSON formatter, operation modelled (tests/fixtures/goldengate/orders.py)
and row modelled (tests/fixtures/goldengate/orders_row.py; both follow Oracle's "Using the Pluggable
Formatters" pages: "Operation versus Row Based Formatting", "Using the JSON Formatter", "Sample Row
Modeled JSON Messages", and ``pkUpdateHandling``), decoded in the read task: SCHEMA.TABLE for
routing, op_type I/U/D, values by the declared columns (Oracle's NUMBER without trailing zeros, DATE
with a time of day), updates as before overlaid with after, key moves (a before image with the old
key, or a delete and an insert), the model read from each record, truncate and bad records to the
DLQ."""

from __future__ import annotations

import json
from decimal import Decimal

from connectors.changes import VERSION_SHIFT
from tests.fixtures import orders as o
from tests.fixtures.goldengate import orders as fx
from tests.fixtures.goldengate import orders_row as row_fx
from tests.unit.decoding import apply, decode

COLUMNS = [{**c, "field": c["name"].upper()} for c in o.SINK_COLUMNS]


def test_operations_by_the_declared_columns_with_exact_values() -> None:
    rows = decode("goldengate", fx.events(), COLUMNS)
    assert [(r["offset"], r["row_index"], r["change_op"], r["image"]["ID"]) for r in rows] == [
        (0, 0, "upsert", "1"), (1, 0, "upsert", "2"), (2, 0, "upsert", "3"), (3, 0, "upsert", "1"),
        (4, 0, "upsert", "2"), (5, 0, "delete", "3"), (5, 1, "upsert", "4"), (6, 0, "delete", "2"),
        (6, 1, "upsert", "3"), (7, 0, "delete", "1")]
    assert rows[1]["image"] == {"ID": "2", "CUSTOMER": "x y", "AMOUNT": "0.10", "QTY": "0",
                                "CREATED": "1969-12-31 23:59:59.999999", "SHIP_DATE": "1960-01-01", "PAID": "0",
                                "NOTE": None}
    assert json.loads(rows[4]["image_json"], parse_float=Decimal)["AMOUNT"] == Decimal("19.90")  # 19.9 -> scale 2
    assert (rows[0]["source_db"], rows[0]["source_table"]) == ("INVENTORY", "ORDERS")
    assert rows[0]["version"] == o.T0 * 1000 * VERSION_SHIFT  # op_ts
    assert sorted(apply(rows, "ID")) == ["3", "4"]


def test_an_update_is_its_before_image_overlaid_with_its_after_image() -> None:
    before = {"ID": 7, "NAME": "a", "CITY": "x"}
    compressed = fx.operation("U", o.T0, 99, before=None, after=None)
    compressed.update(before=before, after={"ID": 7, "CITY": "y", "NAME": None, "NAME_isMissing": True})
    row = decode("goldengate", [(b"7", fx.message(compressed))])[0]
    assert row["image"] == {"ID": "7", "NAME": "a", "CITY": "y"}  # a missing column keeps its before value
    after_only = {**compressed, "before": None, "after": {"ID": 7, "CITY": "z"}}
    assert decode("goldengate", [(b"7", fx.message(after_only))])[0]["image"] == {"ID": "7", "CITY": "z"}


def test_a_truncate_is_a_truncate_change_of_its_table() -> None:
    [row] = decode("goldengate", [(None, fx.message(fx.operation("T", o.T0 + 300, 6000)))], COLUMNS)
    assert (row["change_op"], row["source_db"], row["source_table"], row["error_stage"]) == (
        "truncate", "INVENTORY", "ORDERS", None)
    assert row["version"] >> 20 == (o.T0 + 300) * 1000  # op_ts, in ms (versioning: source_ts_ms)


def test_a_table_schema_message_is_read_and_changes_nothing() -> None:
    """The JSON schema the handler publishes at a table's first operation and after a metadata change
    (an added column here), among the operations of a topic that carries both."""
    added = {**fx.COLUMN_TYPES, "DISCOUNT": "number"}
    records = [fx.schema(fx.COLUMN_TYPES), *fx.events()[:2], fx.schema(added)]
    rows = decode("goldengate", records, COLUMNS)
    assert [(r["offset"], r["change_op"], r["error_stage"], r["source_table"]) for r in rows] == [
        (0, None, None, "ORDERS"), (1, "upsert", None, "ORDERS"), (2, "upsert", None, "ORDERS"),
        (3, None, None, "ORDERS")]
    untitled = json.loads(fx.schema(added)[1])
    untitled["title"] = "ORDERS"
    [row] = decode("goldengate", [(None, fx.message(untitled))], COLUMNS)
    assert (row["error_stage"], row["error_message"]) == (
        "transform", "a JSON schema message whose 'title' is not the qualified table name SCHEMA.TABLE: 'ORDERS'")


def test_bad_records_go_to_the_dlq_with_their_reason() -> None:
    insert = json.loads(fx.events()[0][1])
    records = [
        (None, fx.message({**insert, "table": "ORDERS"})),
        (None, fx.message({**insert, "op_type": "X"})),
        (None, fx.message({**insert, "after": None})),
        (None, fx.message({**insert, "op_type": "D", "before": None, "after": None})),
        (None, fx.message({**insert, "op_ts": "yesterday"})),
        (None, fx.message({**insert, "after": {**insert["after"], "SHIP_DATE": "2024-02-29 10:00:00"}})),
        (None, fx.message({**insert, "after": {**insert["after"], "QTY": "many"}})),
    ]
    rows = decode("goldengate", records, COLUMNS)
    assert [(r["error_stage"], r["error_message"]) for r in rows] == [
        ("transform", "field 'table': expected the qualified table name SCHEMA.TABLE, got 'ORDERS'"),
        ("transform", "unknown GoldenGate op_type 'X' (expected I, U, D or T)"),
        ("transform", "op_type I without an 'after' image"),
        ("transform", "op_type D without a 'before' image"),
        ("transform", "no 'op_ts' (yyyy-MM-dd HH:mm:ss.SSSSSS) to version the change by (versioning: source_ts_ms)"),
        ("converter", "field 'SHIP_DATE' = '2024-02-29 10:00:00' is not a valid DATE (a date YYYY-MM-DD)"),
        ("converter", "field 'QTY' = 'many' is not a valid BIGINT UNSIGNED (an integer)"),
    ]


def _table(final: dict[int, o.Row]) -> dict[str, dict[str, str | None]]:
    """The image texts the declared columns give each row of ``final``."""
    texts = decode("goldengate", [(None, fx.message(fx.operation("I", o.T0, 1, after=row)))
                                  for _k, row in sorted(final.items())], COLUMNS)
    return {r["image"]["ID"]: r["image"] for r in texts}


def test_row_modelled_operations_with_a_key_update_as_delete_and_insert() -> None:
    """json_row with pkUpdateHandling=delete-insert: the key moves 3 -> 4 and 2 -> 3 are each a delete of
    the before image and an insert of the after image; the table is the operation model's."""
    rows = decode("goldengate", row_fx.events("delete-insert"), COLUMNS)
    assert [(r["offset"], r["change_op"], r["image"]["ID"], r["error_stage"]) for r in rows] == [
        (0, "upsert", "1", None), (1, "upsert", "2", None), (2, "upsert", "3", None), (3, "upsert", "1", None),
        (4, "upsert", "2", None), (5, "delete", "3", None), (6, "upsert", "4", None), (7, "delete", "2", None),
        (8, "upsert", "3", None), (9, "delete", "1", None)]
    assert rows[1]["image"] == {"ID": "2", "CUSTOMER": "x y", "AMOUNT": "0.10", "QTY": "0",
                                "CREATED": "1969-12-31 23:59:59.999999", "SHIP_DATE": "1960-01-01", "PAID": "0",
                                "NOTE": None}
    assert rows[5]["image"] == _table({3: o.ROW_3})["3"]  # a delete's before image: the whole row
    assert (rows[0]["source_db"], rows[0]["source_table"]) == ("INVENTORY", "ORDERS")
    assert rows[0]["version"] == o.T0 * 1000 * VERSION_SHIFT  # op_ts
    assert rows[5]["version"] < rows[6]["version"]  # one op_ts: the delete before the insert, by offset
    table = apply(rows, "ID")
    assert table == _table(row_fx.final("delete-insert")) == apply(decode("goldengate", fx.events(), COLUMNS), "ID")


def test_row_modelled_key_update_as_update_leaves_the_old_key() -> None:
    """json_row with pkUpdateHandling=update: the update carries the new key only (the row model has no
    before image), so the row under the old key stays, as Oracle says of that setting."""
    rows = decode("goldengate", row_fx.events("update"), COLUMNS)
    assert [(r["change_op"], r["image"]["ID"]) for r in rows][5:] == [
        ("upsert", "4"), ("upsert", "3"), ("delete", "1")]
    assert apply(rows, "ID") == _table(row_fx.final("update"))
    assert sorted(apply(rows, "ID")) == ["2", "3", "4"]


def test_the_model_is_read_from_each_record() -> None:
    """Both models in one topic; the row model's metadata (primary_keys, tokens) is not a column, its
    missing-column flags apply as in the operation model, and a truncate has the metadata alone."""
    insert = row_fx.operation("I", o.T0, 7, o.ROW_1)
    flagged = {**row_fx.operation("U", o.T0 + 1, 8), "primary_keys": ["ID"], "tokens": {"L": "206080450"},
               "ID": 1, "NOTE": None, "NOTE_isMissing": True, "PAID": 0}
    records = [(b"1", row_fx.message(insert)), (b"1", row_fx.message(flagged)), *fx.events()[3:4],
               (None, row_fx.message(row_fx.operation("T", o.T0 + 300, 6000)))]
    rows = decode("goldengate", records, COLUMNS)
    assert [(r["change_op"], r["error_stage"]) for r in rows] == [
        ("upsert", None), ("upsert", None), ("upsert", None), ("truncate", None)]
    assert rows[0]["image"] == _table({1: o.ROW_1})["1"]
    assert rows[1]["image"] == {"ID": "1", "PAID": "0"}  # no metadata, no missing column
    assert rows[2]["image"] == _table({1: o.ROW_1B})["1"]  # the operation-modelled update of orders.py
    assert (rows[3]["source_table"], rows[3]["version"] >> 20) == ("ORDERS", (o.T0 + 300) * 1000)


def test_row_modelled_bad_records_go_to_the_dlq_with_their_reason() -> None:
    insert = row_fx.operation("I", o.T0, 7, o.ROW_1)
    records = [
        (None, row_fx.message({**insert, "op_type": "X"})),
        (None, row_fx.message({**insert, "table": "ORDERS"})),
        (None, row_fx.message({**insert, "QTY": "many"})),
        (None, row_fx.message({k: v for k, v in insert.items() if k != "op_ts"})),
    ]
    rows = decode("goldengate", records, COLUMNS)
    assert [(r["error_stage"], r["error_message"]) for r in rows] == [
        ("transform", "unknown GoldenGate op_type 'X' (expected I, U, D or T)"),
        ("transform", "field 'table': expected the qualified table name SCHEMA.TABLE, got 'ORDERS'"),
        ("converter", "field 'QTY' = 'many' is not a valid BIGINT UNSIGNED (an integer)"),
        ("transform", "no 'op_ts' (yyyy-MM-dd HH:mm:ss.SSSSSS) to version the change by (versioning: source_ts_ms)"),
    ]
