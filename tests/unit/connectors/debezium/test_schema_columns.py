"""The MySQL columns a Connect schema describes (connectors/debezium/schema_columns.py), with and without
the source types Debezium's column.propagate.source.type adds (issue 42, part 6).

The parameters are those of Debezium's MySQL connector, as its documentation names them (the
properties page, "column.propagate.source.type": ``__debezium.source.column.type``, ``.length``,
``.scale``) and as its code fills them (PropagateSourceTypeToSchemaParameter: the type name upper
case, with UNSIGNED / ZEROFILL; tests/fixtures/debezium/mysql_all_types.py, ``SOURCE_TYPES``)."""

from __future__ import annotations

from typing import Any

import pytest

from connectors.debezium.schema_columns import es_property, mysql_columns, mysql_type, source_type
from connectors.debezium.types import FieldSchema, converter

T, L, S = "__debezium.source.column.type", "__debezium.source.column.length", "__debezium.source.column.scale"


def field(kind: str, name: str | None = None, source: str | None = None, length: int | None = None,
          source_scale: int | None = None, **parameters: str) -> FieldSchema:
    """A Connect field; ``parameters``: the converter's own (scale, allowed …), then the source type's."""
    p: dict[str, Any] = dict(parameters)
    if source is not None:
        p[T] = source
    if length is not None:
        p[L] = str(length)
    if source_scale is not None:
        p[S] = str(source_scale)
    return FieldSchema(kind, name, p)


MICRO_TIME, MICRO_TS, TS = "io.debezium.time.MicroTime", "io.debezium.time.MicroTimestamp", "io.debezium.time.Timestamp"
ZONED, DECIMAL = "io.debezium.time.ZonedTimestamp", "org.apache.kafka.connect.data.Decimal"


@pytest.mark.parametrize(("schema", "exact", "today"), [
    (field("int64", MICRO_TIME, "TIME", 3), "TIME(3)", "TIME(6)"),
    (field("int64", MICRO_TIME, "TIME"), "TIME", "TIME(6)"),
    (field("int64", TS, "DATETIME", 3), "DATETIME(3)", "DATETIME(3)"),
    (field("int64", MICRO_TS, "DATETIME", 6), "DATETIME(6)", "DATETIME(6)"),
    (field("string", ZONED, "TIMESTAMP", 3), "TIMESTAMP(3)", "TIMESTAMP(6)"),
    (field("string", None, "VARCHAR", 200), "VARCHAR(200)", "LONGTEXT"),
    (field("string", None, "CHAR", 3), "CHAR(3)", "LONGTEXT"),
    (field("string", None, "TEXT"), "TEXT", "LONGTEXT"),
    (field("bytes", DECIMAL, "DECIMAL", 10, 2, scale="2", **{"connect.decimal.precision": "10"}), "DECIMAL(10,2)",
     "DECIMAL(10,2)"),
    (field("string", None, "DECIMAL", 10, 2), "DECIMAL(10,2)", "LONGTEXT"),  # decimal.handling.mode=string
    (field("int8", None, "TINYINT", 1), "TINYINT(1)", "TINYINT"),
    (field("boolean", None, "TINYINT", 1), "TINYINT(1)", "TINYINT(1)"),  # BOOLEAN
    (field("boolean", None, "BIT", 1), "BIT(1)", "TINYINT(1)"),
    (field("int32", None, "MEDIUMINT"), "MEDIUMINT", "INT"),
    (field("int32", None, "SMALLINT UNSIGNED"), "SMALLINT UNSIGNED", "INT"),
    (field("int64", None, "INT UNSIGNED ZEROFILL", 10), "INT(10) UNSIGNED ZEROFILL", "BIGINT"),
    (field("int64", None, "BIGINT UNSIGNED"), "BIGINT UNSIGNED", "BIGINT"),  # long mode: restored on read
    (field("bytes", DECIMAL, "BIGINT UNSIGNED", scale="0", **{"connect.decimal.precision": "20"}), "BIGINT UNSIGNED",
     "DECIMAL(20,0)"),  # precise mode
    (field("bytes", None, "BINARY", 4), "BINARY(4)", "LONGBLOB"), (field("bytes", None, "BLOB"), "BLOB", "LONGBLOB"),
    (field("string", "io.debezium.data.Enum", "ENUM", 1, allowed="a,b"), "ENUM('a','b')", "ENUM('a','b')"),
    (field("struct", "io.debezium.data.geometry.Geometry", "LINESTRING"), "LINESTRING", "GEOMETRY"),
    (field("int32", "io.debezium.time.Year", "YEAR"), "YEAR", "YEAR"),
    (field("int32", "io.debezium.time.Date", "DATE"), "DATE", "DATE"),
])
def test_the_source_type_is_the_columns_where_it_holds_the_values(schema: FieldSchema, exact: str, today: str) -> None:
    assert mysql_type(schema) == exact
    bare = FieldSchema(schema.type, schema.name, {k: v for k, v in schema.parameters.items() if not k.startswith("__")})
    assert mysql_type(bare) == today  # without the parameters: the data type tables, as before


@pytest.mark.parametrize(("schema", "why"), [
    (field("double", None, "DECIMAL", 10, 2), "decimal.handling.mode=double: the connector already rounded"),
    (field("string", None, "VARBINARY", 16), "binary.handling.mode=base64 or hex: text, not the bytes"),
    (field("float", None, "FLOAT", 10), "FLOAT(p): the data type tables' FLOAT"),
    (field("int32", None, "VARCHAR", 3), "a type of another family (a custom converter)"),
    (field("int64", MICRO_TIME, "TIME", 9), "out of MySQL's range"),
    (field("string", None, "VARCHAR", 70_000), "out of MySQL's range"),
    (field("string", None, "GEOGRAPHY"), "not a MySQL type"),
    (field("bytes", DECIMAL, "DECIMAL", 10, 3, scale="2"), "a scale that is not the schema's"),
])
def test_a_source_type_that_does_not_hold_the_field_falls_back(schema: FieldSchema, why: str) -> None:
    assert source_type(schema) is None, why


def test_key_columns_stay_bounded() -> None:
    assert mysql_type(field("string", None, "VARCHAR", 200), is_key=True) == "VARCHAR(200)"
    assert mysql_type(field("string", None, "VARCHAR", 1000), is_key=True) == "VARCHAR(255)"  # over InnoDB's limit
    assert mysql_type(field("string", None, "TEXT"), is_key=True) == "VARCHAR(255)"
    assert mysql_type(field("bytes", None, "BLOB"), is_key=True) == "VARBINARY(255)"


def test_the_table_says_the_type_without_the_source_type_where_that_differs() -> None:
    row = FieldSchema("struct", fields=(("id", field("int32", None, "INT")), ("t", field("int64", MICRO_TIME, "TIME", 3))))
    key = FieldSchema("struct", fields=(("id", field("int32", None, "INT")),), optional=False)
    assert mysql_columns(row, key)["columns"] == [
        {"name": "id", "type": "INT", "nullable": False},
        {"name": "t", "type": "TIME(3)", "nullable": True, "generic": "TIME(6)"}]


def test_a_bigint_unsigned_in_long_mode_is_read_back_unsigned_and_indexed_as_unsigned_long() -> None:
    """bigint.unsigned.handling.mode=long wraps values above 2^63-1 to negative longs; with the source
    type in the schema, the value is restored, as a declared BIGINT UNSIGNED column does."""
    schema = field("int64", None, "BIGINT UNSIGNED")
    assert converter(schema)(-9223372036854763463) == ("9223372036854788153", 9223372036854788153)
    assert converter(field("int64"))(-1) == ("-1", -1)
    assert es_property(schema) == {"type": "unsigned_long"} and es_property(field("int64")) == {"type": "long"}
