"""A declared column's definition (connectors/mysql/definitions.parse_definition): what MySQL's
column_definition grammar takes after the type, as ``SHOW CREATE TABLE`` writes it (MySQL's and
MariaDB's forms), read into typed pieces and written back in one canonical form; and what it cannot
read, named (issue 42, part 5)."""

from __future__ import annotations

import pytest

from connectors.mysql.definitions import (
    ColumnDefault,
    DefinitionSyntaxError,
    parse_default,
    parse_definition,
    parse_on_update,
)
from connectors.mysql.types import (
    TypeSyntaxError,
    parse_type,
)


@pytest.mark.parametrize(("text", "canonical"), [
    ("TIMESTAMP(3) NULL", "TIMESTAMP(3) NULL"),
    # MySQL 8's SHOW CREATE TABLE
    ("timestamp(3) NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3) COMMENT 'synced'",
     "TIMESTAMP(3) NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3) COMMENT 'synced'"),
    ("varchar(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_ai_ci NOT NULL DEFAULT ''",
     "VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_ai_ci NOT NULL DEFAULT ''"),
    ("int NOT NULL DEFAULT '0'", "INT NOT NULL DEFAULT '0'"),
    ("varchar(10) DEFAULT _utf8mb4'x' /*!80023 INVISIBLE */", "VARCHAR(10) DEFAULT 'x'"),
    # MariaDB's SHOW CREATE TABLE
    ("datetime(6) NOT NULL DEFAULT current_timestamp(6) ON UPDATE current_timestamp(6)",
     "DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6)"),
    ("decimal(10,2) DEFAULT 0.00", "DECIMAL(10,2) DEFAULT 0.00"),
    ("int(10) unsigned NOT NULL DEFAULT 0 COMMENT 'it''s 50% off'",
     "INT(10) UNSIGNED NOT NULL DEFAULT 0 COMMENT 'it''s 50% off'"),
    # case, order, synonyms, the other literals
    ("Timestamp NOT NULL Default Now() on update localtimestamp", "TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP "
                                                                   "ON UPDATE CURRENT_TIMESTAMP"),
    ("VARCHAR(5) NOT NULL COLLATE latin1_bin CHARSET latin1", "VARCHAR(5) CHARACTER SET latin1 COLLATE latin1_bin NOT NULL"),
    ("BIT(4) DEFAULT b'0101'", "BIT(4) DEFAULT b'0101'"), ("VARBINARY(4) DEFAULT x'0aff'", "VARBINARY(4) DEFAULT X'0AFF'"),
    ("BOOLEAN DEFAULT TRUE", "BOOLEAN DEFAULT TRUE"), ("INT DEFAULT -1", "INT DEFAULT -1"),
    ("DOUBLE DEFAULT 1.5e3", "DOUBLE DEFAULT 1.5e3"), ("INT DEFAULT (7)", "INT DEFAULT 7"),
    ("ENUM('a','b') NOT NULL DEFAULT 'b'", "ENUM('a','b') NOT NULL DEFAULT 'b'"),
    ("SET('r','g') DEFAULT 'r,g'", "SET('r','g') DEFAULT 'r,g'"), ("JSON DEFAULT NULL", "JSON DEFAULT NULL"),
    ("DATE DEFAULT '2024-02-29'", "DATE DEFAULT '2024-02-29'"), ("VARCHAR(3) DEFAULT N'ü'", "VARCHAR(3) DEFAULT 'ü'"),
    # accepted as MySQL does, not made on a sink's table (its key is primary_key)
    ("int(11) NOT NULL AUTO_INCREMENT", "INT(11) NOT NULL"), ("BIGINT UNIQUE KEY", "BIGINT"),
    ("INT PRIMARY KEY COLUMN_FORMAT FIXED STORAGE DISK", "INT"), ("INT ENGINE_ATTRIBUTE = '{}'", "INT"),
    ("BIGINT UNSIGNED SERIAL DEFAULT VALUE", "BIGINT UNSIGNED NOT NULL"),
])
def test_a_column_definition_as_show_create_table_writes_it_is_read(text: str, canonical: str) -> None:
    assert parse_definition(text).sql == canonical
    assert parse_definition(canonical).sql == canonical  # canonical is a fixed point


def test_the_pieces_are_typed() -> None:
    d = parse_definition("TIMESTAMP(3) NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3) COMMENT 'a''b'")
    assert (d.type, d.nullable, d.default, d.on_update, d.comment) == (
        parse_type("TIMESTAMP(3)"), True, ColumnDefault("now", fsp=3), 3, "a'b")
    assert parse_definition("INT").nullable is None  # not said: the column's nullable decides
    assert parse_definition("VARCHAR(9) DEFAULT 'it''s'").default == ColumnDefault("string", "it's")
    assert parse_default("CURRENT_TIMESTAMP(6)") == ColumnDefault("now", fsp=6)
    assert parse_default("'x'").sql == "'x'" and parse_on_update("now()") == 0


@pytest.mark.parametrize(("text", "said"), [
    ("TIMESTAMP(3) NULLL", "could not read 'NULLL' after the type TIMESTAMP(3) (expected NULL, NOT NULL, DEFAULT"),
    ("INT NOT", "could not read 'NOT' after the type INT"),
    ("INT DEFAULT", "expected a literal (a number, 'text', NULL, TRUE, b'01', X'0F') or CURRENT_TIMESTAMP[(fsp)] "
                    "after DEFAULT"),
    ("INT DEFAULT abc", "could not read 'abc' after DEFAULT"),
    ("TIMESTAMP ON UPDATE NOWW()", "could not read 'NOWW()' after ON UPDATE (expected CURRENT_TIMESTAMP[(fsp)])"),
    ("INT COMMENT x", "could not read 'x' after COMMENT (expected a quoted text)"),
    ("INT DEFAULT (1 + 2)", "an expression default is not made on a sink's table"),
    ("INT NULL NOT NULL", "both NULL and NOT NULL after the type INT"),
    ("INT DEFAULT 1 DEFAULT 2", "two DEFAULTs"),
    ("INT DEFAULT 'abc'", "DEFAULT 'abc' does not fit INT: expected a number"),
    ("TEXT DEFAULT 'x'", "MySQL takes no literal DEFAULT for a TEXT column"),
    ("DATETIME(3) DEFAULT CURRENT_TIMESTAMP", "DEFAULT CURRENT_TIMESTAMP does not match DATETIME(3)"),
    ("INT ON UPDATE CURRENT_TIMESTAMP", "ON UPDATE CURRENT_TIMESTAMP applies to DATETIME and TIMESTAMP, not to INT"),
    ("VARCHAR(9) NOT NULL DEFAULT NULL", "NOT NULL with DEFAULT NULL"),
    ("ENUM('a') DEFAULT 'z'", "DEFAULT 'z' is not one of ENUM('a')'s values"),
    ("INT COLLATE utf8mb4_bin", "COLLATE applies to text columns"),
    ("INT GENERATED ALWAYS AS (a + 1) STORED", "a generated column (GENERATED ALWAYS AS …) cannot be written"),
    ("INT REFERENCES t (id)", "a foreign key (REFERENCES …) is not made on a sink's table"),
    ("INT CHECK (x > 0)", "a CHECK constraint is not made on a sink's table"),
    ("VARBINARY(2) DEFAULT x'abc'", "is not a hex value"),
    ("INT DEFAULT 1 ; DROP TABLE t", "could not read '; DROP TABLE t'"),
    ("VARCHAR(9) COMMENT '" + "c" * 1025 + "'", "a column COMMENT holds at most 1024 characters"),
])
def test_what_cannot_be_read_after_the_type_is_named(text: str, said: str) -> None:
    with pytest.raises(DefinitionSyntaxError) as exc:
        parse_definition(text)
    assert said in str(exc.value)


def test_a_bad_type_is_the_types_own_error() -> None:
    with pytest.raises(TypeSyntaxError, match="TIME\\(fsp\\) takes 0-6 fractional digits") as exc:
        parse_definition("TIME(9) NULL")
    assert not isinstance(exc.value, DefinitionSyntaxError)
    with pytest.raises(TypeSyntaxError, match="unexpected 'NULL' after the type"):
        parse_type("INT NULL")  # a type alone stays a type
