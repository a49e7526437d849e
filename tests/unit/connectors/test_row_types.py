"""The types a chain reads the formats' values in (connectors/row_types.py): by a MySQL column type,
Canal's sqlType, a JSON value; and the texts that stay texts."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa

from connectors import images, row_types
from connectors.canal.decode import CanalDecoder
from connectors.changes import change_arrays
from connectors.mysql.types import parse_type
from tests.fixtures import orders as o
from tests.fixtures.canal import orders as canal


def test_a_mysql_column_type_gives_its_values_type() -> None:
    kinds = {t: row_types.of_column(parse_type(t)) for t in (
        "tinyint(1)", "int(11)", "bigint(20)", "bigint(20) unsigned", "double", "float", "decimal(10,2)",
        "decimal(65,30)", "datetime(6)", "date", "varchar(64)", "bit(1)", "json", "year")}
    assert kinds == {
        "tinyint(1)": pa.int64(), "int(11)": pa.int64(), "bigint(20)": pa.int64(),
        "bigint(20) unsigned": pa.decimal128(20, 0), "double": pa.float64(), "float": pa.float64(),
        "decimal(10,2)": pa.decimal128(10, 2), "decimal(65,30)": None,  # past decimal128: its text
        "datetime(6)": None, "date": None, "varchar(64)": None, "bit(1)": None, "json": None, "year": None}


def test_a_json_value_gives_its_type() -> None:
    assert [row_types.of_json(v) for v in (7, 2**63, True, Decimal("19.90"), Decimal("1E+2"), "19.90", None,
                                            ["a"])] == [
        pa.int64(), None, pa.bool_(), pa.decimal128(38, 2), pa.float64(), None, None, None]
    # a field of one scale keeps it; of several, or with integers among them, a double; a text among them: text
    assert row_types.common([pa.decimal128(38, 2)] * 2) == pa.decimal128(38, 2)
    assert row_types.common([pa.decimal128(38, 2), pa.decimal128(38, 1), pa.int64()]) == pa.float64()
    assert row_types.common([pa.int64(), None]) is None


def test_a_number_a_double_does_not_hold_stays_its_text() -> None:
    assert row_types.typed_texts(["0.1", "1.0E10", None], pa.float64()).to_pylist() == [0.1, 1e10, None]
    kept = row_types.typed_texts(["0.1", "12345678901234567.5"], pa.float64())
    assert kept.type == pa.string() and kept.to_pylist() == ["0.1", "12345678901234567.5"]
    assert row_types.typed_texts(["18446744073709551615"], pa.int64()).to_pylist() == ["18446744073709551615"]


def test_canal_types_a_column_by_its_sql_type_where_its_mysql_type_does_not_read() -> None:
    """A ``mysqlType`` the parser does not know (a newer server's spelling) leaves the column's text for
    the sinks; a chain reads it by its ``sqlType``: INTEGER (4) an int64, DECIMAL (3) at its text's scale."""
    msg = canal.message(o.STATEMENTS[0], 1)
    msg["mysqlType"] = {**msg["mysqlType"], "id": "int(11) frobnicated", "amount": "decimal(10,2) frobnicated"}
    decoder = CanalDecoder("source_ts_ms")
    decoder.typed = True
    changes = decoder.decode_record(0, None, canal.dumps(msg), canal.TOPIC)
    assert [(c.types["id"], c.types["amount"]) for c in changes] == [  # type: ignore[index]
        (pa.int64(), pa.decimal128(38, 2))] * 3  # by sqlType: the scale its text has
    image = change_arrays(changes, pa.array([canal.TOPIC] * 3))[1]
    values = images.as_struct(image).to_pylist()
    assert [(v["id"], v["amount"]) for v in values] == [(r["id"], r["amount"]) for r in (o.ROW_1, o.ROW_2, o.ROW_3)]
    assert images.texts(image, "amount").to_pylist() == ["1234567.89", "0.10", "-12345.67"]
    decoder.typed = False  # without a chain: texts
    untyped = change_arrays(decoder.decode_record(0, None, canal.dumps(msg), canal.TOPIC), pa.array([canal.TOPIC] * 3))
    assert images.as_struct(untyped[1]).to_pylist()[0]["id"] == "1"
