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
