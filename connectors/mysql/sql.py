"""The MySQL sink's statements, built once per table from its config (connectors/mysql/sink.py says
what they guarantee). Identifiers are always quoted; values are parameters, or, in the set-based
statements that run without parameters, escaped literals.

* The upsert: ``INSERT … ON DUPLICATE KEY UPDATE`` where every column is only replaced when the
  incoming version is at least the stored one (``__cdc_version``). MySQL evaluates the assignments
  left to right, so the version column is assigned last.
* The delete: ``DELETE … WHERE __cdc_version <= version``, and a row of ``cdcflow_tombstones``
  (table, key, version) for the key.
* The set-based statements: the same guards from the staging tables (temporary tables with the
  target's column types) that connectors/mysql/apply.py loads.
* ``delete: soft``: the delete is an ``UPDATE`` that sets the deleted column to the delete's source
  time and the version to the delete's, under the same guard; an upsert replaces a soft-deleted row
  only when it is newer than its delete, and clears the column.
* Partial updates (connectors/partial.py): an upsert some of whose columns keep the stored value
  writes those columns with the stored value (read in the statement itself: a NOT NULL column must
  have one in the row MySQL builds before it finds the duplicate) and never assigns them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pymysql

from connectors.errors import ConfigError
from connectors.mysql.config import MySqlColumn, MySqlSinkConfig
from connectors.partial import PartialRule

VERSION_COLUMN = "__cdc_version"
TOMBSTONES = "cdcflow_tombstones"
TOMBSTONES_AGE_INDEX = "ix_cdcflow_tombstones_age"  # (table_name, deleted_at), for retention
TOMBSTONES_DDL = (
    f"CREATE TABLE IF NOT EXISTS `{TOMBSTONES}` ("
    "table_name VARCHAR(64) NOT NULL, key_hash BINARY(20) NOT NULL, key_json TEXT NOT NULL, "
    "version BIGINT NOT NULL, deleted_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP, "
    f"PRIMARY KEY (table_name, key_hash), KEY `{TOMBSTONES_AGE_INDEX}` (table_name, deleted_at)"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4")
# a table's TRUNCATE mark (truncate: apply): a tombstone row of the whole table, at the truncate's version
TRUNCATE_HASH = hashlib.sha1(b"cdcflow:truncate").digest()
TRUNCATE_KEY = '"<truncate>"'
UPSERT_STAGE, DELETE_STAGE = "cdcflow_stage_upserts", "cdcflow_stage_deletes"
HASH_COLUMN, KEY_JSON_COLUMN = "__cdc_key_hash", "__cdc_key_json"
KEPT_COLUMN = "__cdc_kept"  # the staged upserts' kept columns: their indices, each ended by KEEP_CODE_SEPARATOR
KEEP_CODE_SEPARATOR = ","
SOURCE_MS = 1 << 20  # a source_ts_ms version is ts_ms * 2^20 + (offset mod 2^20) (connectors.changes.VERSION_SHIFT)


def deleted_at_sql(version: str) -> str:
    """A soft delete's time, DATETIME(3) in UTC: the source time in the delete's version (its ms),
    counted from the epoch by MySQL itself (no session time zone in it)."""
    return f"TIMESTAMPADD(MICROSECOND, ({version} DIV {SOURCE_MS}) * 1000, CAST('1970-01-01 00:00:00' AS DATETIME(3)))"


def quote(identifier: str) -> str:
    """Quote a MySQL identifier; backticks inside are doubled, so no name can break out."""
    if "\x00" in identifier:
        raise ConfigError(f"identifier {identifier!r} contains a NUL byte")
    return "`" + identifier.replace("`", "``") + "`"


def literal(text: str) -> str:
    """A MySQL string literal (backslash escapes on, as the sink's session has them)."""
    return "'" + pymysql.converters.escape_string(text) + "'"


def column_sql(column: MySqlColumn, in_key: bool = False, added: bool = False) -> str:
    """A declared column's definition for CREATE TABLE, from its parsed pieces (the type, NULL or NOT
    NULL, DEFAULT, ON UPDATE, COMMENT: connectors/mysql/definitions.ColumnDefinition); a key column is NOT
    NULL. ``added``: for ADD COLUMN to a table with rows, NOT NULL only with a DEFAULT to give them."""
    defined = column.definition
    not_null = in_key or (defined.nullable is False and (not added or defined.default is not None))
    return f"{quote(column.name)} " + replace(defined, nullable=not not_null).sql


def key_hash(key: tuple[Any, ...]) -> tuple[bytes, str]:
    """A primary key's tombstone hash, and the text hashed: the JSON array of its parts' texts."""
    text = json.dumps([str(k) for k in key], ensure_ascii=False)
    return hashlib.sha1(text.encode("utf-8")).digest(), text


_JSON_ESCAPES = r'["\\\x00-\x1f]'  # what json.dumps escapes in a string (ensure_ascii off)


def key_hashes(parts: Sequence[pa.Array | pa.ChunkedArray]) -> list[tuple[bytes, str]]:
    """:func:`key_hash` of every row's key, given a column per key part. A set of upserts or deletes
    hashes tens of thousands of keys: when every part is an integer, or a string JSON writes as it
    is, Arrow builds the texts (``["7", "x"]``) and only the SHA-1 is per row; else row by row."""
    texts: list[str] | None = None
    if all(p.null_count == 0 for p in parts):
        strings = []
        for p in parts:
            if pa.types.is_integer(p.type):
                strings.append(pc.cast(p, pa.string()))
            elif pa.types.is_string(p.type) and not pc.any(pc.match_substring_regex(p, _JSON_ESCAPES)).as_py():
                strings.append(p)
            else:
                break
        else:
            joined = pc.binary_join_element_wise(*strings, '", "')
            texts = pc.binary_join_element_wise('["', joined, '"]', "").to_pylist()
    if texts is None:
        return [key_hash(k) for k in zip(*[p.to_pylist() for p in parts], strict=True)]
    sha1 = hashlib.sha1
    return [(sha1(t.encode("utf-8")).digest(), t) for t in texts]


def deleted_column_sql(name: str) -> str:
    """The soft delete's column: the delete's source time, NULL while the row is live."""
    return f"{quote(name)} DATETIME(3) NULL DEFAULT NULL"


class Statements:
    """A table's statements: the row path's, the set path's and its DDL."""

    def __init__(self, cfg: MySqlSinkConfig) -> None:
        self.cfg = cfg
        self.columns = [c.name for c in cfg.columns]
        self.data_columns = [c for c in self.columns if c not in cfg.primary_key]
        self.deleted = cfg.deleted_column if cfg.delete == "soft" else None  # the soft delete's column
        self.rule = PartialRule.of(cfg, never=cfg.primary_key)  # which values keep the stored ones
        self._partial: dict[tuple[frozenset[str], bool, str | None], str] = {}  # the partial upserts, per kept set
        t = quote(cfg.table)
        cols = [*self.columns, VERSION_COLUMN]
        collist = ", ".join(quote(c) for c in cols)
        placeholders = ", ".join(["%s"] * len(cols))
        v = quote(VERSION_COLUMN)
        self.upsert_sql = f"INSERT INTO {t} ({collist}) VALUES ({placeholders}) {self.guard()}"
        where = " AND ".join(f"{quote(k)} = %s" for k in cfg.primary_key)
        self.delete_sql = f"DELETE FROM {t} WHERE {where} AND {v} <= %s"
        if self.deleted is not None:  # the row stays, marked with its delete's time and version
            self.delete_sql = (f"UPDATE {t} SET {quote(self.deleted)} = {deleted_at_sql('%s')}, {v} = %s "
                               f"WHERE {where} AND {v} <= %s")
        self.tombstone_sql = (
            f"INSERT INTO {quote(TOMBSTONES)} (table_name, key_hash, key_json, version) "
            "VALUES (%s, %s, %s, %s) ON DUPLICATE KEY UPDATE version = GREATEST(version, VALUES(version))")
        self._set_statements(t, cols, collist)

    def _set_statements(self, t: str, cols: list[str], collist: str) -> None:
        """Set-based: the same guard, from the staging tables (target columns qualified: the SELECT may join)."""
        cfg = self.cfg
        v = quote(VERSION_COLUMN)
        su, sd, tb = quote(UPSERT_STAGE), quote(DELETE_STAGE), quote(TOMBSTONES)
        name = literal(cfg.table)  # inlined: these run without parameters, so '%' in a name is plain
        h = quote(HASH_COLUMN)
        tv = f"{t}.{v}"
        selected = ", ".join(f"s.{quote(c)}" for c in cols)
        order = ", ".join(f"s.{quote(k)}" for k in cfg.primary_key)  # lock rows in key order

        def set_upsert(join: str = "") -> str:
            return (f"INSERT INTO {t} ({collist}) SELECT {selected} FROM {su} s{join} ORDER BY {order} "
                    f"{self.guard(t)}")

        self.set_upsert_sql = set_upsert()
        # when some tombstone may be newer than an upsert of the batch (replays): skip those upserts
        self.set_upsert_live_sql = set_upsert(
            f" LEFT JOIN {tb} tb ON tb.table_name = {name} AND tb.key_hash = UNHEX(s.{h}) "
            f"WHERE tb.version IS NULL OR s.{v} > tb.version")
        self.set_stale_sql = (f"SELECT COUNT(*) FROM {su} s JOIN {tb} tb ON tb.table_name = {name} "
                              f"AND tb.key_hash = UNHEX(s.{h}) WHERE s.{v} <= tb.version")
        on = " AND ".join(f"{t}.{quote(k)} = d.{quote(k)}" for k in cfg.primary_key)
        self.set_delete_sql = f"DELETE {t} FROM {t} JOIN {sd} d ON {on} WHERE {tv} <= d.{v}"
        if self.deleted is not None:
            self.set_delete_sql = (f"UPDATE {t} JOIN {sd} d ON {on} SET {t}.{quote(self.deleted)} = "
                                   f"{deleted_at_sql(f'd.{v}')}, {tv} = d.{v} WHERE {tv} <= d.{v}")
        self.set_tombstone_sql = (
            f"INSERT INTO {tb} (table_name, key_hash, key_json, version) "
            f"SELECT {name}, UNHEX(d.{h}), d.{quote(KEY_JSON_COLUMN)}, d.{v} FROM {sd} d "
            f"ON DUPLICATE KEY UPDATE version = GREATEST({tb}.version, VALUES(version))")
        # what the table holds of the staged keys, before the upsert: (newer than the change, present);
        # ``guarded``: of the upserts no tombstone blocks (set_stale_sql counts those)
        held = (f"SELECT COALESCE(SUM({tv} > s.{v}), 0), COUNT(*) FROM {su} s JOIN {t} ON "
                + " AND ".join(f"{t}.{quote(k)} = s.{quote(k)}" for k in cfg.primary_key))
        self._set_held = {False: held, True: (
            f"{held} LEFT JOIN {tb} tb ON tb.table_name = {name} AND tb.key_hash = UNHEX(s.{h}) "
            f"WHERE tb.version IS NULL OR s.{v} > tb.version")}
        # after the delete, before the tombstones: the deletes older than what the table holds (a row
        # still there is newer than its delete; an absent row's tombstone newer than the delete)
        self.set_kept_sql = (
            f"SELECT COUNT(*) FROM {sd} d LEFT JOIN {t} ON {on} "
            f"LEFT JOIN {tb} tb ON tb.table_name = {name} AND tb.key_hash = UNHEX(d.{h}) "
            f"WHERE {tv} > d.{v} OR ({tv} IS NULL AND tb.version > d.{v})")
        keylist = ", ".join(quote(k) for k in cfg.primary_key)
        # staging tables with the target's column types (and NOT NULLs): a value MySQL would reject
        # in the target is rejected by the load, in strict mode, as on the row path
        # (the added columns take NULL: MariaDB checks NOT NULL ones without a default even on no rows)
        self.stage_sql = (f"CREATE TEMPORARY TABLE {su} ({h} CHAR(40) NULL DEFAULT NULL) "
                          f"SELECT {collist} FROM {t} WHERE 1 = 0")
        self.stage_delete_sql = (f"CREATE TEMPORARY TABLE {sd} ({h} CHAR(40) NULL DEFAULT NULL, "
                                 f"{quote(KEY_JSON_COLUMN)} TEXT NULL DEFAULT NULL) SELECT {keylist}, {v} FROM {t} WHERE 1 = 0")
        self.drop_stages_sql = f"DROP TEMPORARY TABLE IF EXISTS {su}, {sd}"
        # a set with kept values: they are staged as NULL, so the stage's columns are nullable (the
        # columns of the outer side of a join are), and each row says which it keeps
        qualified = ", ".join(f"{t}.{quote(c)}" for c in cols)
        self.stage_partial_sql = (f"CREATE TEMPORARY TABLE {su} ({h} CHAR(40) NULL DEFAULT NULL, "
                                  f"{quote(KEPT_COLUMN)} TEXT NULL DEFAULT NULL) "
                                  f"SELECT {qualified} FROM (SELECT 1) x LEFT JOIN {t} ON FALSE WHERE FALSE")

    def set_held_sql(self, guarded: bool) -> str:
        return self._set_held[guarded]

    def held_sql(self, n: int) -> str:
        """The version held of each of ``n`` keys (parameters: their parts, key after key): one row,
        a scalar subquery per key (NULL: no row). Each column is named: unnamed, MySQL names it after
        its text, parameters included, and a key's bytes (a tombstone's SHA-1) are no UTF-8 name:
        the driver failed to decode it mid-result and the connection was lost to the window."""
        t, v = quote(self.cfg.table), quote(VERSION_COLUMN)
        where = " AND ".join(f"{quote(k)} = %s" for k in self.cfg.primary_key)
        return "SELECT " + ", ".join(f"(SELECT {v} FROM {t} WHERE {where}) AS v{i}" for i in range(n))

    def tombstone_versions_sql(self, n: int) -> str:
        """The tombstone version of each of ``n`` keys (parameters: their hashes): one row (NULL: none)."""
        one = f"(SELECT version FROM {quote(TOMBSTONES)} WHERE table_name = {literal(self.cfg.table).replace('%', '%%')} AND key_hash = %s)"
        return "SELECT " + ", ".join(f"{one} AS v{i}" for i in range(n))

    def guard(self, table: str = "", kept: frozenset[str] = frozenset()) -> str:
        """The version guard of an upsert: every column replaced only when the incoming version is at
        least the stored one; ``table`` qualifies the target's columns (a SELECT that joins needs it).
        A soft-deleted row is replaced only by a newer change, which clears its deleted column.
        ``kept``: columns the upsert leaves as they are."""
        q = f"{table}." if table else ""
        v = quote(VERSION_COLUMN)
        newer = f"VALUES({v}) >= {q}{v}"
        if self.deleted is not None:  # a delete wins a tie, as its tombstone does
            newer = f"(VALUES({v}) > {q}{v} OR (VALUES({v}) = {q}{v} AND {q}{quote(self.deleted)} IS NULL))"
        guarded = [f"{q}{quote(c)} = IF({newer}, VALUES({quote(c)}), {q}{quote(c)})"
                   for c in self.data_columns if c not in kept]
        if self.deleted is not None:  # after the columns: their IFs read whether the row was deleted
            guarded.append(f"{q}{quote(self.deleted)} = IF({newer}, NULL, {q}{quote(self.deleted)})")
        guarded.append(f"{q}{v} = GREATEST({q}{v}, VALUES({v}))")  # last: the IFs above read the old version
        return f"ON DUPLICATE KEY UPDATE {', '.join(guarded)}"

    # -- partial updates ---------------------------------------------------------------------------
    def kept(self, values: dict[str, Any]) -> frozenset[str]:
        """The columns of a row's values that keep the stored ones (connectors/partial.py)."""
        return self.rule.kept_fields(values, self.data_columns) if self.rule.active else frozenset()

    def data_columns_at(self, code: str) -> list[str]:
        """The columns a staged row's ``KEPT_COLUMN`` names (apply.kept_codes)."""
        return [self.columns[int(i)] for i in code.split(KEEP_CODE_SEPARATOR) if i]

    def delete_params(self, key: tuple[Any, ...], version: int) -> tuple[Any, ...]:
        return (version, version, *key, version) if self.deleted is not None else (*key, version)

    def _stored(self, name: str, staged: bool) -> str:
        """A kept column's value in the row MySQL builds: the stored one (``e``), or for a new row the
        declared DEFAULT (else NULL: a NOT NULL column without a default refuses the row)."""
        column = self.cfg.columns[self.columns.index(name)]
        default = column.default if column.default is not None else "NULL"
        if not staged:  # the row path's statement has parameters: a '%' of the default is a plain one
            default = default.replace("%", "%%")
        return f"IF(e.{quote(self.cfg.primary_key[0])} IS NULL, {default}, e.{quote(name)})"

    def partial_upsert_sql(self, kept: frozenset[str], staged: bool = False, guarded: bool = False,
                           code: str | None = None) -> str:
        """The upsert of rows that keep the columns ``kept``: the row path's (parameters: the other
        columns' values, the version, then the key), or with ``staged`` the set path's, of the staged
        rows whose ``KEPT_COLUMN`` is ``code`` (``guarded``: skipping the keys a tombstone blocks)."""
        cached = self._partial.get((kept, guarded, code if staged else None))
        if cached is not None:
            return cached
        t, v = quote(self.cfg.table), quote(VERSION_COLUMN)
        cols = [*self.columns, VERSION_COLUMN]
        values = [self._stored(c, staged) if c in kept else (f"s.{quote(c)}" if staged else "%s") for c in cols]
        key = " AND ".join(f"e.{quote(k)} = " + (f"s.{quote(k)}" if staged else "%s") for k in self.cfg.primary_key)
        if staged:
            tb, h = quote(TOMBSTONES), quote(HASH_COLUMN)
            where = [f"s.{quote(KEPT_COLUMN)} = {literal(code or '')}"]
            joins = f"LEFT JOIN {t} e ON {key}" if kept else ""
            if guarded:
                joins += (f" LEFT JOIN {tb} tb ON tb.table_name = {literal(self.cfg.table)} "
                          f"AND tb.key_hash = UNHEX(s.{h})")
                where.append(f"(tb.version IS NULL OR s.{v} > tb.version)")
            order = ", ".join(f"s.{quote(k)}" for k in self.cfg.primary_key)
            source = (f"FROM {quote(UPSERT_STAGE)} s {joins} WHERE {' AND '.join(where)} ORDER BY {order}")
        else:
            source = f"FROM (SELECT 1) x LEFT JOIN {t} e ON {key}"
        statement = (f"INSERT INTO {t} ({', '.join(quote(c) for c in cols)}) SELECT {', '.join(values)} {source} "
                     f"{self.guard(t, kept)}")
        self._partial[(kept, guarded, code if staged else None)] = statement
        return statement

    def create_table_sql(self) -> str:
        cfg = self.cfg
        lines = [column_sql(c, c.name in cfg.primary_key) for c in cfg.columns]
        lines.append(f"{quote(VERSION_COLUMN)} BIGINT NOT NULL DEFAULT 0")
        if self.deleted is not None:
            lines.append(deleted_column_sql(self.deleted))
        lines.append(f"PRIMARY KEY ({', '.join(quote(k) for k in cfg.primary_key)})")
        body = ",\n  ".join(lines)
        return f"CREATE TABLE IF NOT EXISTS {quote(cfg.table)} (\n  {body}\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
