"""Maxwell's JSON (tests/fixtures/maxwell/orders.py: zendesk/maxwell docs/docs/dataformat.md,
config.md, producers.md) decoded in the read task: values by the declared columns, updates with
their old values, key moves, bootstrap markers, DDL and bad records to the DLQ with their reason."""

from __future__ import annotations

import json
from decimal import Decimal

from connectors.changes import VERSION_SHIFT
from tests.fixtures import orders as o
from tests.fixtures.maxwell import orders as fx
from tests.unit.decoding import apply, decode


def test_rows_by_the_declared_columns_with_exact_values() -> None:
    rows = decode("maxwell", fx.events(), o.SINK_COLUMNS)
    assert [(r["offset"], r["row_index"], r["change_op"], r["image"]["id"]) for r in rows] == [
        (0, 0, "upsert", "1"), (1, 0, "upsert", "2"), (2, 0, "upsert", "3"), (3, 0, "upsert", "1"),
        (4, 0, "upsert", "2"), (5, 0, "delete", "3"), (5, 1, "upsert", "4"), (6, 0, "delete", "2"),
        (6, 1, "upsert", "3"), (7, 0, "delete", "1")]
    assert rows[0]["image"] == {"id": "1", "customer": "Grüße, 東京", "amount": "1234567.89",
                                "qty": "18446744073709551615", "created": "2024-02-29 13:14:15.123456",
                                "ship_date": "2024-02-29", "paid": "1", "note": "line 1\nline 2"}
    assert json.loads(rows[1]["image_json"], parse_float=Decimal) == {
        "id": 2, "customer": "x y", "amount": Decimal("0.10"), "qty": 0, "created": "1969-12-31T23:59:59.999999",
        "ship_date": "1960-01-01", "paid": 0, "note": None}
    assert rows[0]["version"] == o.T0 * 1000 * VERSION_SHIFT  # ts is in seconds
    assert rows[4]["version"] == (o.T0 + 60) * 1000 * VERSION_SHIFT + 4
    assert apply(rows)["3"]["amount"] == "19.90" and sorted(apply(rows)) == ["3", "4"]


def test_without_declared_columns_values_are_read_as_written() -> None:
    row = decode("maxwell", fx.events()[:1])[0]
    assert row["image"]["amount"] == "1234567.89" and row["image"]["qty"] == "18446744073709551615"
    assert json.loads(row["image_json"])["created"] == "2024-02-29 13:14:15.123456"  # the string as sent


def test_a_key_change_is_found_by_the_kafka_key_the_key_columns_or_the_declared_key() -> None:
    key, value = fx.events()[5]
    msg = json.loads(value)
    assert [r["change_op"] for r in decode("maxwell", [(key, value)])] == ["delete", "upsert"]  # pk.id in the key
    assert [r["change_op"] for r in decode("maxwell", [(None, value)])] == ["upsert"]  # no key names known
    with_columns = fx.message(**msg, primary_key_columns=["id"])
    assert [r["change_op"] for r in decode("maxwell", [(None, with_columns)])] == ["delete", "upsert"]
    declared = decode("maxwell", [(None, value)], key_fields=frozenset({"id"}))
    assert [(r["change_op"], r["image"]["id"]) for r in declared] == [("delete", "3"), ("upsert", "4")]


def test_bootstrap_markers_ddl_and_bad_records() -> None:
    insert = json.loads(fx.events()[0][1])
    records = [
        (None, fx.message(database="fooDB", table="barTable", type="bootstrap-start", ts=1450557744, data={})),
        (None, fx.message(database="fooDB", table="barTable", type="bootstrap-insert", ts=1450557744,
                          data={"txt": "hello"})),
        (None, fx.message(database="fooDB", table="barTable", type="bootstrap-complete", ts=1450557744, data={})),
        (None, fx.message(type="table-alter", database="inventory", table="orders", ts=1477053308000,
                          sql="alter table orders add column torvalds bigint unsigned after qty")),
        (None, fx.message(**{**insert, "data": {**insert["data"], "created": "2024-02-30 00:00:00.000000"}})),
        (None, fx.message(**{**insert, "ts": None})),
        (None, fx.message(**{**insert, "type": "upsert"})),
        (None, fx.message(**{**insert, "ts": insert["ts"] * 1000})),  # ms where Maxwell writes seconds
        (None, b"[1, 2]"),
    ]
    rows = decode("maxwell", records, o.SINK_COLUMNS)
    assert [r["change_op"] for r in rows[:3]] == [None, "upsert", None]  # markers: read, nothing to apply
    assert [r["error_message"] for r in rows[:3]] == [None, None, None]
    assert rows[1]["image"] == {"txt": "hello"} and rows[1]["source_table"] == "barTable"
    # a DDL event is read and changes nothing (the table follows its declared columns)
    assert (rows[3]["change_op"], rows[3]["error_stage"], rows[3]["source_table"]) == (None, None, "orders")
    assert [(r["error_stage"], r["error_message"]) for r in rows[4:]] == [
        ("converter", "field 'created' = '2024-02-30 00:00:00.000000' is not a valid DATETIME(6) (a datetime "
                      "YYYY-MM-DD hh:mm:ss[.ffffff])"),
        ("transform", "no 'ts' (the binlog event's time, seconds) to version the change by (versioning: "
                      "source_ts_ms)"),
        ("transform", "unknown Maxwell type 'upsert' (expected insert, update, delete or bootstrap-insert)"),
        ("transform", "the change's time, 1717236000000000 ms since 1970, is out of a version's range (is it in the "
                      "unit the format documents?)"),
        ("converter", "value is JSON but not an object: expected a Maxwell message"),
    ]
