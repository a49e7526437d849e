"""Debezium's logical types, value by value (connectors/debezium/types.py), and the MySQL column grammar
(connectors/mysql/types.py). The representations are those of Debezium's MySQL connector documentation
("Data type mappings") and of Kafka Connect's Decimal/Date/Time/Timestamp; docs/types.md lists them."""

from __future__ import annotations

import base64
import struct
from decimal import Decimal
from typing import Any

import pytest

from cdcflow.config import MySqlColumn
from connectors.debezium import types as t
from connectors.debezium.types import ColumnHint, FieldSchema, converter, hinted
from connectors.mysql.types import TypeSyntaxError, parse_type


def read(schema: dict[str, Any], value: Any, hint: ColumnHint | None = None) -> tuple[str | None, Any]:
    return converter(FieldSchema.parse(schema), hint)(value)


def decimal_bytes(unscaled: int) -> str:
    length = max(1, (unscaled.bit_length() + 8) // 8)
    return base64.b64encode(unscaled.to_bytes(length, "big", signed=True)).decode()


@pytest.mark.parametrize(("unscaled", "scale", "text"), [
    (1999, 2, "19.99"), (-1234567, 2, "-12345.67"), (1990, 2, "19.90"), (0, 2, "0.00"), (5, 0, "5"),
    (-(10**65 - 1), 30, "-99999999999999999999999999999999999.999999999999999999999999999999"),  # DECIMAL(65,30)
])
def test_connect_decimal_keeps_digits_and_scale(unscaled: int, scale: int, text: str) -> None:
    schema = {"type": "bytes", "name": t.DECIMAL, "parameters": {"scale": str(scale)}}
    assert read(schema, decimal_bytes(unscaled)) == (text, Decimal(text))


def test_the_issues_example_decimal() -> None:  # 19.99 in DECIMAL(10,2), as the connector writes it
    assert read({"type": "bytes", "name": t.DECIMAL, "parameters": {"scale": "2"}}, "B88=") == ("19.99", Decimal("19.99"))


def test_variable_scale_decimal() -> None:
    assert read({"type": "struct", "name": t.VARIABLE_SCALE_DECIMAL},
                {"scale": 3, "value": decimal_bytes(-1500)}) == ("-1.500", Decimal("-1.500"))


@pytest.mark.parametrize(("name", "value", "text"), [
    (t.DATE, -3653, "1960-01-01"), (t.DATE, 19782, "2024-02-29"), (t.CONNECT_DATE, 0, "1970-01-01"),
    (t.TIME, 45296789, "12:34:56.789000"), (t.CONNECT_TIME, 1, "00:00:00.001000"),
    (t.MICRO_TIME, 3723456789, "01:02:03.456789"), (t.NANO_TIME, 3723456789123, "01:02:03.456789"),
    (t.MICRO_TIME, -1_000_000, "-00:00:01.000000"), (t.MICRO_TIME, 838 * 3_600_000_000, "838:00:00.000000"),
    (t.TIMESTAMP, 1709212455123, "2024-02-29 13:14:15.123000"),
    (t.CONNECT_TIMESTAMP, -1, "1969-12-31 23:59:59.999000"),
    (t.MICRO_TIMESTAMP, -1, "1969-12-31 23:59:59.999999"),
    (t.NANO_TIMESTAMP, 1709212455123456789, "2024-02-29 13:14:15.123456"),
    (t.ZONED_TIMESTAMP, "2024-02-29T14:14:15.120+01:00", "2024-02-29 13:14:15.120000"),
    (t.ZONED_TIMESTAMP, "2024-02-29T13:14:15Z", "2024-02-29 13:14:15.000000"),
    (t.ZONED_TIME, "13:37:03.125Z", "13:37:03.125000"), (t.ZONED_TIME, "01:00:00+02:00", "23:00:00.000000"),
    (t.YEAR, 1901, "1901"),
])
def test_temporal_types(name: str, value: Any, text: str) -> None:
    assert read({"type": "int64", "name": name}, value)[0] == text


def test_documents_get_iso_8601_and_instants_in_utc() -> None:
    assert read({"type": "int64", "name": t.MICRO_TIMESTAMP}, 1)[1] == "1970-01-01T00:00:00.000001"
    assert read({"type": "string", "name": t.ZONED_TIMESTAMP}, "2024-02-29T14:14:15+01:00")[1] == \
        "2024-02-29T13:14:15.000000Z"
    assert read({"type": "int32", "name": t.DATE}, -3653)[1] == "1960-01-01"


def test_text_enum_set_json_bits_and_geometry() -> None:
    assert read({"type": "string", "name": t.ENUM}, "medium") == ("medium", "medium")
    assert read({"type": "string", "name": t.ENUM_SET}, "red,blue") == ("red,blue", "red,blue")
    assert read({"type": "string", "name": t.JSON}, '{"a":1}') == ('{"a":1}', '{"a":1}')
    assert read({"type": "bytes", "name": t.BITS}, base64.b64encode(b"\x01\x02").decode()) == ("513", 513)
    wkb = struct.pack("<BIdd", 1, 1, 1.5, -2.25)
    text, doc = read({"type": "struct", "name": t.POINT},
                     {"x": 1.5, "y": -2.25, "wkb": base64.b64encode(wkb).decode(), "srid": 4326})
    assert base64.b64decode(text) == struct.pack("<I", 4326) + wkb and doc["srid"] == 4326
    assert read({"type": "string"}, "Grüße, 東京 🚀") == ("Grüße, 東京 🚀", "Grüße, 東京 🚀")


def test_bad_values_say_what_they_are() -> None:
    with pytest.raises(t.BadValue, match="not the base64 bytes of a Connect Decimal"):
        read({"type": "bytes", "name": t.DECIMAL, "parameters": {"scale": "2"}}, "not base64!")
    with pytest.raises(t.BadValue, match="outside the years"):
        read({"type": "int32", "name": t.DATE}, 10**9)


def test_schemaless_values_are_read_by_the_declared_column() -> None:
    assert hinted(ColumnHint("DECIMAL(10,2)", "base64"))("B88=") == ("19.99", Decimal("19.99"))
    assert hinted(ColumnHint("DECIMAL(10,2)"))("19.90") == ("19.90", "19.90")  # a string stays one in documents
    assert hinted(ColumnHint("DECIMAL(10,2)"))(Decimal("1E+5")) == ("100000", Decimal("1E+5"))
    assert hinted(ColumnHint("DATE"))(-3653)[0] == "1960-01-01"
    assert hinted(ColumnHint("DATE"))("1960-01-01")[0] == "1960-01-01"
    assert hinted(ColumnHint("DATETIME(6)", "us"))(1)[0] == "1970-01-01 00:00:00.000001"
    assert hinted(ColumnHint("DATETIME(3)", "ms"))(1709212455123)[0] == "2024-02-29 13:14:15.123000"
    assert hinted(ColumnHint("TIMESTAMP"))("2024-02-29T14:14:15+01:00") == ("2024-02-29 13:14:15.000000", "2024-02-29T14:14:15+01:00")
    assert hinted(ColumnHint("TIME(6)", "us"))(1)[0] == "00:00:00.000001"
    assert hinted(ColumnHint("BLOB", "hex"))("00ff")[0] == "AP8="
    assert hinted(ColumnHint("BLOB", "text"))("ab")[0] == "YWI="
    assert hinted(ColumnHint("BIGINT UNSIGNED"))(-1)[0] == "18446744073709551615"  # bigint.unsigned long mode
    assert hinted(ColumnHint("DATETIME"))(1709212455123)[0] == "1709212455123"  # no encoding: left for the check


def test_the_mysql_grammar_takes_every_column_type_and_writes_it_canonically() -> None:
    for text, canonical in [
        ("bigint unsigned", "BIGINT UNSIGNED"), ("tinyint(1)", "TINYINT(1)"), ("TIME(3)", "TIME(3)"),
        ("timestamp(6)", "TIMESTAMP(6)"), ("YEAR", "YEAR"), ("enum('a','it''s')", "ENUM('a','it''s')"),
        ("SET('x')", "SET('x')"), ("bit(64)", "BIT(64)"), ("binary(16)", "BINARY(16)"),
        ("varbinary(255)", "VARBINARY(255)"), ("mediumblob", "MEDIUMBLOB"), ("longtext", "LONGTEXT"),
        ("geometry", "GEOMETRY"), ("point", "POINT"), ("multipolygon", "MULTIPOLYGON"), ("json", "JSON"),
        ("decimal(65,30)", "DECIMAL(65,30)"), ("numeric(5)", "DECIMAL(5)"), ("double precision", "DOUBLE"),
        ("bool", "BOOLEAN"), ("integer(11) unsigned zerofill", "INT(11) UNSIGNED ZEROFILL"),
        ("varchar(64) character set utf8mb4 collate utf8mb4_bin", "VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"),
    ]:
        assert parse_type(text).sql == canonical
        assert MySqlColumn(name="c", type=text).type == canonical
    for bad in ["VARCHAR", "DECIMAL(66,2)", "DECIMAL(5,6)", "TIME(7)", "BIT(65)", "ENUM(a)", "INT; DROP TABLE t",
                "FOO", "CHAR(256)", "TEXT CHARACTER SET"]:
        with pytest.raises(TypeSyntaxError):
            parse_type(bad)


def test_an_encoding_must_fit_its_column() -> None:
    assert MySqlColumn(name="c", type="DATETIME(6)", encoding="us").encoding == "us"
    with pytest.raises(ValueError, match="encoding 'us' does not apply to a VARCHAR"):
        MySqlColumn(name="c", type="VARCHAR(5)", encoding="us")
