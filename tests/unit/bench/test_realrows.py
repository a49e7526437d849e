"""The real-shaped rows (bench/realrows.py): their row images are the fixture's own encoding, byte for
byte (tests/fixtures/debezium/mysql_all_types.py follows Debezium 3.7's MySQL connector documentation,
"Data type mappings", and its converters), and every other form of a row agrees with the canonical
text the benchmark's checksums compare."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

from bench import realrows
from bench.models import REAL
from tests.fixtures.debezium import mysql_all_types as fx

MODES = {"time": "adaptive_time_microseconds", "decimal": "precise", "binary": "bytes", "bigint": "long"}
ROWS = [realrows.row(1 + v % 997, v, seed=7) for v in range(2_000)]


def test_row_images_are_the_fixtures_encoding_byte_for_byte() -> None:
    for values in ROWS:
        expected = fx._dump(fx._row_payload(dict(zip(realrows.NAMES, values, strict=True)), MODES))
        assert realrows.payload_json(values) == expected


def test_rows_cover_every_column_type_with_nulls_and_vary_with_the_variant() -> None:
    assert len(realrows.COLUMNS) >= 30
    columns = list(zip(*ROWS, strict=True))
    for (name, _kind, optional, _arg), values in zip(realrows.COLUMNS, columns, strict=True):
        present = [v for v in values if v is not None]
        assert len({repr(v) for v in present}) > 1 or name in ("c_bit1", "c_tinyint1"), name
        assert (len(present) < len(values)) == optional or len(values) - len(present) < 3, name  # ~1 in 16 NULL
    assert all(v is not None for v in columns[realrows.NAMES.index("c_timestamp")])  # NOT NULL
    assert any(v < dt.date(1970, 1, 1) for v in columns[realrows.NAMES.index("c_date")] if v is not None)
    assert realrows.row(5, 123, 42) == realrows.row(5, 123, 42) != realrows.row(5, 124, 42)


def test_declared_columns_are_the_source_tables_ddl() -> None:
    declared = {c["name"]: c for c in realrows.DECLARED}
    assert list(declared) == realrows.NAMES
    assert declared["c_decimal"]["type"] == "DECIMAL(10,2)" and declared["c_datetime6"]["type"] == "DATETIME(6)"
    assert declared["c_timestamp"] == {"name": "c_timestamp", "type": "TIMESTAMP", "nullable": False}
    assert declared["c_timestamp3"] == {"name": "c_timestamp3", "type": "TIMESTAMP(3)"}
    assert declared["c_enum"]["type"] == "ENUM('small','medium','large')" and declared["c_point"]["type"] == "POINT"


def test_the_document_reads_back_to_the_same_canonical_text() -> None:
    """What cdcflow indexes (docs/types.md, "Elasticsearch gets"), as Elasticsearch returns it."""
    for values in ROWS[:500]:
        doc = json.loads(REAL.es_doc(values))
        assert realrows.es_text(doc) == realrows.row_text(values)
        assert realrows.es_text({k: v for k, v in doc.items() if v is not None}) == realrows.row_text(values)


def test_canonical_text_is_exact() -> None:
    values = dict(zip(realrows.NAMES, ROWS[3], strict=True))
    values.update(c_decimal=Decimal("-0.05"), c_float=-3495.5, c_double=1122762.0849609375, c_varbinary=b"\x00\xff",
                  c_time6=dt.timedelta(hours=1, microseconds=7), c_datetime=dt.datetime(1960, 1, 2, 3, 4, 5),
                  c_timestamp=dt.datetime(2024, 2, 29, 13, 14, 15, 120000, tzinfo=dt.UTC), c_bit1=None,
                  c_point={"x": 1.5, "y": -2.25, "srid": 0})
    fields = dict(zip(realrows.NAMES, realrows.row_text(tuple(values.values())).split("|"), strict=True))
    assert fields["c_decimal"] == "-0.05" and fields["c_float"] == "-13982" and fields["c_double"] == "1149708375"
    assert fields["c_varbinary"] == "00FF" and fields["c_time6"] == "01:00:00.000007"
    assert fields["c_datetime"] == "1960-01-02 03:04:05.000000"
    assert fields["c_timestamp"] == "2024-02-29 13:14:15.120000" and fields["c_bit1"] == realrows.NULL_TEXT
    assert fields["c_point"] == "00000000" + "0101000000000000000000F83F00000000000002C0"  # SRID, then the WKB


def test_load_data_lines_escape_text_and_hex_binary() -> None:
    values = list(ROWS[0])
    values[realrows.NAMES.index("c_text")] = "a\tb\nc\\d"
    values[realrows.NAMES.index("c_blob")] = b"\t\n"
    fields = realrows.load_fields(tuple(values)).split("\t")
    assert len(fields) == len(realrows.NAMES)
    assert fields[realrows.NAMES.index("c_text")] == "a\\tb\\nc\\\\d"
    assert fields[realrows.NAMES.index("c_blob")] == "090a"
    sql = realrows.load_columns("t", "/tmp/x.tsv")
    assert "`c_blob` = UNHEX(@c_blob)" in sql and "`c_bit10` = CAST(@c_bit10 AS UNSIGNED)" in sql


def test_mysql_checksum_reads_every_column() -> None:
    sql = realrows.MYSQL_CHECKSUM.format(table="t")
    assert all(f"`{name}`" in sql for name in realrows.NAMES)
    assert "'%%Y-%%m-%%d %%H:%%i:%%s.%%f'" in sql  # run with parameters (DB-API %-formatting)
