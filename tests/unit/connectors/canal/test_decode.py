"""Canal flat messages (tests/fixtures/canal/orders.py: Flink's "Canal Format" page and Canal's
message converter) decoded in the read task: values read by mysqlType exactly, N rows -> N
changes in order, updates with their old values, key moves, DDL/TRUNCATE and bad records to the
DLQ with their reason."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from connectors.changes import VERSION_SHIFT
from tests.fixtures import orders as o
from tests.fixtures.canal import orders as fx
from tests.unit.decoding import apply, decode

ROW_1 = {"id": "1", "customer": "Grüße, 東京", "amount": "1234567.89", "qty": "18446744073709551615",
         "created": "2024-02-29 13:14:15.123456", "ship_date": "2024-02-29", "paid": "1", "note": "line 1\nline 2"}


def doc(row: dict[str, Any]) -> dict[str, Any]:
    return json.loads(row["image_json"], parse_float=Decimal)


def test_a_message_of_n_rows_is_n_changes_in_order_with_exact_values() -> None:
    rows = decode("canal", fx.events())
    assert [(r["offset"], r["row_index"], r["change_op"], r["image"]["id"]) for r in rows] == [
        (0, 0, "upsert", "1"), (0, 1, "upsert", "2"), (0, 2, "upsert", "3"),
        (1, 0, "upsert", "1"), (1, 1, "upsert", "2"),
        (2, 0, "delete", "3"), (2, 1, "upsert", "4"), (2, 2, "delete", "2"), (2, 3, "upsert", "3"),
        (3, 0, "delete", "1")]
    assert rows[0]["image"] == ROW_1
    assert doc(rows[0]) == {"id": 1, "customer": "Grüße, 東京", "amount": Decimal("1234567.89"),
                            "qty": 18446744073709551615, "created": "2024-02-29T13:14:15.123456",
                            "ship_date": "2024-02-29", "paid": 1, "note": "line 1\nline 2"}
    assert rows[1]["image"]["amount"] == "0.10" and rows[1]["image"]["note"] is None  # digits and scale kept
    assert rows[1]["image"]["created"] == "1969-12-31 23:59:59.999999"
    assert doc(rows[4])["amount"] == Decimal("19.90") and str(doc(rows[4])["amount"]) == "19.90"
    # every change of a record has the record's version (es), its rows ordered by row_index
    assert {r["version"] for r in rows[:3]} == {o.T0 * 1000 * VERSION_SHIFT}
    assert rows[5]["version"] == (o.T0 + 120) * 1000 * VERSION_SHIFT + 2
    assert {(r["source_db"], r["source_table"]) for r in rows} == {("inventory", "orders")}
    # the key move: the delete of the old key carries the whole row before the change (data + old)
    assert rows[7]["image"] == {**rows[4]["image"], "id": "2"}
    assert apply(rows) == {"3": {**rows[4]["image"], "id": "3"}, "4": {**rows[2]["image"], "id": "4"}}


def test_the_table_is_described_from_mysql_type_and_pk_names() -> None:
    rows = decode("canal", fx.events())
    described = json.loads(rows[0]["row_schema"])
    assert described["columns"] == [
        {"name": "id", "type": "INT(11)", "nullable": False},
        {"name": "customer", "type": "VARCHAR(64)", "nullable": True},
        {"name": "amount", "type": "DECIMAL(10,2)", "nullable": True},
        {"name": "qty", "type": "BIGINT(20) UNSIGNED", "nullable": True},
        {"name": "created", "type": "DATETIME(6)", "nullable": True},
        {"name": "ship_date", "type": "DATE", "nullable": True},
        {"name": "paid", "type": "TINYINT(1)", "nullable": True}, {"name": "note", "type": "TEXT", "nullable": True}]
    assert described["key"] == ["id"]
    assert described["properties"]["amount"] == {"type": "scaled_float", "scaling_factor": 100}
    assert described["properties"]["qty"] == {"type": "unsigned_long"}
    assert described["properties"]["created"]["type"] == "date"
    assert all(r["row_schema"] is None for r in rows[1:])  # described once per task
    assert len({r["schema_id"] for r in rows}) == 1


def test_values_by_mysql_type_bit_enum_set_binary_unsigned_and_times() -> None:
    types = {"id": "int(10) unsigned", "b": "bit(10)", "b1": "bit(1)", "e": "enum('small','medium','large')",
             "s": "set('red','green','blue')", "bin": "binary(4)", "vb": "varbinary(16)", "blob": "blob",
             "t": "time(6)", "y": "year(4)", "ts": "timestamp(3)", "f": "float", "j": "json",
             "tiny": "tinyint(3) unsigned"}
    data = {"id": "4294967295", "b": "513", "b1": "1", "e": "2", "s": "5", "bin": "\u0000\u00ff", "vb": "\u00e9\u0001",
            "blob": "", "t": "-838:59:59.000000", "y": "2024", "ts": "2038-01-19 03:14:07.999", "f": "1.5",
            "j": '{"a": [1, 2]}', "tiny": "255"}
    msg = {"data": [data], "database": "db", "es": 1000, "id": 1, "isDdl": False, "mysqlType": types, "old": None,
           "pkNames": ["id"], "sql": "", "sqlType": {}, "table": "t", "ts": 1001, "type": "INSERT"}
    row = decode("canal", [(None, json.dumps(msg).encode())])[0]
    assert row["error_message"] is None, row["error_message"]
    assert row["image"] == {"id": "4294967295", "b": "513", "b1": "1", "e": "medium", "s": "red,blue",
                            "bin": "AP8AAA==", "vb": "6QE=", "blob": "", "t": "-838:59:59.000000", "y": "2024",
                            "ts": "2038-01-19 03:14:07.999000", "f": "1.5", "j": '{"a": [1, 2]}', "tiny": "255"}
    assert doc(row)["b"] == 513 and doc(row)["ts"] == "2038-01-19T03:14:07.999000" and doc(row)["f"] == Decimal("1.5")


def test_a_truncate_is_a_truncate_change_of_its_table() -> None:
    [row] = decode("canal", [(None, fx.truncate())])
    assert (row["change_op"], row["source_db"], row["source_table"], row["error_stage"]) == (
        "truncate", "inventory", "orders", None)


def test_ddl_is_read_and_bad_records_go_to_the_dlq_with_their_reason() -> None:
    good = fx.message(o.STATEMENTS[0], 1)
    bad_value = {**good, "data": [{**good["data"][0], "amount": "12,50"}]}
    no_old = {**fx.message(o.STATEMENTS[1], 2), "old": None}
    records = [(None, fx.alter()), (None, b"{not json"), (None, fx.dumps(bad_value)),
               (None, fx.dumps(no_old)), (None, fx.dumps({**good, "type": "QUERY"})),
               (None, fx.dumps({**good, "es": None})), (None, fx.dumps({**good, "data": []}))]
    rows = decode("canal", records)
    assert [r["offset"] for r in rows] == list(range(len(records)))  # one row per bad record, nothing applied
    # the DDL statement is read and changes nothing: the rows after it carry the new mysqlType (schema_changes)
    assert (rows[0]["change_op"], rows[0]["error_stage"], rows[0]["source_table"]) == (None, None, "orders")
    assert [(r["error_stage"], r["error_message"]) for r in rows[1:]] == [
        ("converter", "value is not a JSON object (value.converter json): expected a Canal flat message"),
        ("converter", "field 'amount' = '12,50' is not a valid DECIMAL(10,2) (a decimal number)"),
        ("transform", "field 'old': expected an array with one object per row of 'data' (the changed columns' "
                      "previous values) in an UPDATE"),
        ("transform", "unknown Canal type 'QUERY' (expected INSERT, UPDATE or DELETE, or a statement with isDdl: "
                      "true)"),
        ("transform", "no 'es' (the binlog event's time, ms) to version the change by (versioning: source_ts_ms)"),
        ("transform", "field 'data': expected an array of row objects (one per row the INSERT changed), got []"),
    ]
    assert decode("canal", records[5:6], versioning="kafka_offset")[0]["change_op"] == "upsert"
