"""The MySQL sink's SQL: quoting of hostile identifiers and the version-guarded upsert."""

from __future__ import annotations

from cdcflow.config import MySqlSinkConfig
from connectors.mysql.sink import MySqlSink, quote


def test_quote_doubles_backticks() -> None:
    assert quote("orders") == "`orders`"
    assert quote("a`b; DROP TABLE x; --") == "`a``b; DROP TABLE x; --`"


def test_upsert_guards_every_column_and_assigns_version_last() -> None:
    cfg = MySqlSinkConfig(type="mysql", table="t`x", primary_key=["id"],
                          columns=[{"name": "id", "type": "BIGINT"}, {"name": "n`ame", "type": "TEXT"}])
    sink = MySqlSink(cfg, "mysql+pymysql://u:p@127.0.0.1:1/db")
    assert sink.sql.upsert_sql.startswith("INSERT INTO `t``x` (`id`, `n``ame`, `__cdc_version`)")
    assert "`n``ame` = IF(VALUES(`__cdc_version`) >= `__cdc_version`, VALUES(`n``ame`), `n``ame`)" in sink.sql.upsert_sql
    assert sink.sql.upsert_sql.endswith("`__cdc_version` = GREATEST(`__cdc_version`, VALUES(`__cdc_version`))")
    assert sink.sql.delete_sql == "DELETE FROM `t``x` WHERE `id` = %s AND `__cdc_version` <= %s"
    assert "`n``ame` TEXT NULL" in sink.create_table_sql()


def test_key_hashes_equal_key_hash_of_every_row() -> None:
    """The set path hashes a set's keys by Arrow where it can; each must equal the row path's
    key_hash (the tombstones of both paths are one table)."""
    from decimal import Decimal

    import pyarrow as pa

    from connectors.mysql.sql import key_hash, key_hashes

    ints = pa.chunked_array([pa.array([1, -22, 3_000_000_000_000, 0], pa.int64())])
    plain = pa.array(["x", "é ü", "emoji \U0001F600", ""])
    hostile = pa.array(['say "hi"', "back\\slash", "tab\there", "nul\x00"])
    cases = [[ints], [plain], [ints, plain], [hostile], [ints, hostile],
             [pa.array([1, None, 3, 4], pa.int32())], [pa.array([Decimal("1.50"), Decimal("2"), None, Decimal("-3.25")])]]
    for parts in cases:
        rows = list(zip(*[p.to_pylist() for p in parts], strict=True))
        assert key_hashes(parts) == [key_hash(r) for r in rows], parts


def test_a_declared_definition_is_created_with_its_attributes_rebuilt_from_its_pieces() -> None:
    """connectors/mysql/sql.column_sql: NOT NULL, DEFAULT, ON UPDATE, COMMENT, CHARACTER SET and COLLATE
    of the declared definition; a key column is NOT NULL; ADD COLUMN keeps NOT NULL only with a DEFAULT."""
    from connectors.mysql.sql import column_sql

    cfg = MySqlSinkConfig(type="mysql", table="t", primary_key=["id"], columns=[
        {"name": "id", "type": "BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'the key'"},
        {"name": "synced_at", "type": "timestamp(3) NULL DEFAULT current_timestamp(3) ON UPDATE current_timestamp(3)"},
        {"name": "code", "type": "varchar(8) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'n/a'"},
        {"name": "qty", "type": "INT NOT NULL"},
        {"name": "note", "type": "TEXT", "comment": "it's \\ 50%"}])
    ddl = MySqlSink(cfg, "mysql+pymysql://u:p@127.0.0.1:1/db").create_table_sql()
    assert "`id` BIGINT UNSIGNED NOT NULL COMMENT 'the key'" in ddl
    assert "`synced_at` TIMESTAMP(3) NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3)" in ddl
    assert "`code` VARCHAR(8) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'n/a'" in ddl
    assert "`qty` INT NOT NULL," in ddl and "`note` TEXT NULL COMMENT 'it''s \\\\ 50%'" in ddl
    code, qty = cfg.columns[2], cfg.columns[3]
    assert column_sql(code, added=True).endswith("NOT NULL DEFAULT 'n/a'")
    assert column_sql(qty, added=True) == "`qty` INT NULL"  # the rows already there have no value
