"""The MySQL sink's tables, once per window on the driver or when a sink opens: created, checked or
evolved (connectors/mysql/evolution.py) before any write; their tombstones read and pruned; a
``truncate: apply`` applied."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from connectors import faults
from connectors.errors import ConfigError, SinkUnavailable
from connectors.mysql import evolution, history
from connectors.mysql.config import HISTORY_OWN, MySqlSinkConfig
from connectors.mysql.connection import driver_error, infra_error, reader_engine, where, writer_engine
from connectors.mysql.sql import (
    TOMBSTONES,
    TOMBSTONES_AGE_INDEX,
    TOMBSTONES_DDL,
    TRUNCATE_HASH,
    TRUNCATE_KEY,
    VERSION_COLUMN,
    Statements,
    column_sql,
    deleted_column_sql,
    quote,
)

DDL_LOCK = "cdcflow_ddl"  # GET_LOCK name (per database): one window at a time plans and runs schema changes


def create_table_sql(cfg: MySqlSinkConfig) -> str:
    """The table's CREATE TABLE: a state table's (connectors/mysql/sql.py) or a history table's."""
    return history.create_table_sql(cfg) if cfg.mode == "history" else Statements(cfg).create_table_sql()


def run_ddl(conn: sa.Connection, statement: str) -> None:
    """A DDL statement, which has no parameters: its '%' (in an ENUM value, a DEFAULT, a COMMENT)
    doubled, as the driver formats every statement it is given with parameters."""
    conn.exec_driver_sql(statement.replace("%", "%%"))


def existing_columns(url: str, table: str, own: Sequence[str] = ()) -> tuple[list[dict[str, Any]], list[str]] | None:
    """A table's columns ({name, type, nullable}, without cdcflow's own: the version, and ``own``,
    e.g. a soft delete's column) and primary key, as MySQL has them; None when the table does not exist."""
    engine = sa.create_engine(url, poolclass=NullPool, connect_args={"connect_timeout": 10})
    try:
        with engine.connect() as conn:
            found = _existing(conn, [table]).get(table)
    except DBAPIError as exc:
        raise SinkUnavailable(f"MySQL at {where(url)} failed while reading the columns of table {table!r}: {exc.orig}") from exc
    finally:
        engine.dispose()
    if found is None:
        return None
    columns, key = found
    skip = {VERSION_COLUMN.lower(), *(n.lower() for n in own)}
    return ([{"name": c.name, "type": c.type, "nullable": c.nullable} for c in columns if c.name.lower() not in skip],
            [k for k in key if k.lower() not in skip])  # a history table's key: the sink's, without __version


def _existing(conn: sa.Connection, tables: Sequence[str]) -> dict[str, tuple[list[evolution.Column], list[str]]]:
    """Each existing table's columns (as MySQL has them) and primary key, in two queries."""
    if not tables:
        return {}
    marks = ", ".join(["%s"] * len(tables))
    found: dict[str, tuple[list[evolution.Column], list[str]]] = {}
    for table, name, kind, nullable in conn.exec_driver_sql(
            "SELECT table_name, column_name, column_type, is_nullable FROM information_schema.columns "
            f"WHERE table_schema = DATABASE() AND table_name IN ({marks}) ORDER BY table_name, ordinal_position",
            tuple(tables)):
        found.setdefault(table, ([], []))[0].append(evolution.Column(name, kind, nullable == "YES"))
    for table, name in conn.exec_driver_sql(
            "SELECT table_name, column_name FROM information_schema.statistics WHERE table_schema = DATABASE() "
            f"AND index_name = 'PRIMARY' AND table_name IN ({marks}) ORDER BY table_name, seq_in_index", tuple(tables)):
        if table in found:
            found[table][1].append(name)
    return found


def prepare_table(conn: sa.Connection, cfg: MySqlSinkConfig, tombstones: bool = True,
                  have: set[str] | None = None) -> None:
    """Create the table (``create_table``) and check it has the sink's columns, adding new ones
    (``auto_evolve``). ``have``: the table's columns (lower case) as read for many tables at once;
    an empty set is a table that does not exist."""
    if tombstones:
        conn.exec_driver_sql(TOMBSTONES_DDL)
    if cfg.create_table and not have:
        run_ddl(conn, create_table_sql(cfg))
        have = None
    _check_table(conn, cfg, have)


def _check_table(conn: sa.Connection, cfg: MySqlSinkConfig, have: set[str] | None = None) -> None:
    if have is None:
        have = {r[0].lower() for r in conn.exec_driver_sql(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = DATABASE() "
            "AND table_name = %s", (cfg.table,))}
    if not have:
        raise ConfigError(f"sink {cfg.name!r}: table {cfg.table!r} does not exist; create it or "
                          "set create_table: true")
    if cfg.delete == "soft" and cfg.deleted_column.lower() not in have:
        if not (cfg.create_table or cfg.auto_evolve):
            raise ConfigError(f"sink {cfg.name!r}: table {cfg.table!r} lacks the soft delete's column "
                              f"{cfg.deleted_column!r}; add it with: ALTER TABLE {quote(cfg.table)} ADD COLUMN "
                              f"{deleted_column_sql(cfg.deleted_column)} (or set create_table or auto_evolve: true)")
        run_ddl(conn, f"ALTER TABLE {quote(cfg.table)} ADD COLUMN {deleted_column_sql(cfg.deleted_column)}")
    if cfg.mode == "history":
        _check_history(conn, cfg, have)
    missing = [c for c in [*(c.name for c in cfg.columns), VERSION_COLUMN] if c.lower() not in have]
    evolvable = [c for c in cfg.columns if c.name in missing and c.name not in cfg.primary_key]
    if missing and cfg.auto_evolve and len(evolvable) == len(missing):
        for c in evolvable:  # new fields become nullable columns (NOT NULL with a declared DEFAULT); none is dropped
            run_ddl(conn, f"ALTER TABLE {quote(cfg.table)} ADD COLUMN {column_sql(c, added=True)}")
        return
    if missing:
        hint = (f"; add it with: ALTER TABLE {quote(cfg.table)} ADD COLUMN {quote(VERSION_COLUMN)} "
                "BIGINT NOT NULL DEFAULT 0" if VERSION_COLUMN in missing else "")
        raise ConfigError(f"sink {cfg.name!r}: table {cfg.table!r} lacks columns {missing}{hint}"
                          f"{'' if hint else ' (set auto_evolve: true to add new fields as columns)'}")


def _check_history(conn: sa.Connection, cfg: MySqlSinkConfig, have: set[str]) -> None:
    """A history table has the history's columns, and the sink's key with ``__version`` as its primary
    key: a state table named by mistake is refused before any write, named."""
    key = [r[0].lower() for r in conn.exec_driver_sql(
        "SELECT column_name FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name = %s "
        "AND index_name = 'PRIMARY' ORDER BY seq_in_index", (cfg.table,))]
    lacking = [c for c in HISTORY_OWN if c.lower() not in have]
    expected = [k.lower() for k in [*cfg.primary_key, "__version"]]
    if lacking or key != expected:
        raise ConfigError(
            f"sink {cfg.name!r}: table {cfg.table!r} is not a history table (mode: history): it "
            + (f"lacks the columns {lacking}" if lacking else f"has the primary key {key}, not {expected}")
            + "; name a new table (create_table: true creates it) or see docs/history.md for its definition")


def prepare_tables(url: str, configs: Sequence[MySqlSinkConfig]) -> None:
    """Create or evolve many tables (the tables of a routed sink) on one connection, once per window,
    before its tasks write to them (they then ``open(prepared=True)``)."""
    if not configs:
        return
    engine = writer_engine(url)
    current = configs[0]
    try:
        with engine.begin() as conn:
            have: dict[str, set[str]] = {c.table: set() for c in configs}
            marks = ", ".join(["%s"] * len(have))
            for table, column in conn.exec_driver_sql(  # every table's columns in one query
                    "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = DATABASE() "
                    f"AND table_name IN ({marks})", tuple(have)):
                have.setdefault(table, set()).add(column.lower())
            for i, current in enumerate(configs):
                prepare_table(conn, current, tombstones=i == 0, have=have.get(current.table, set()))
    except DBAPIError as exc:
        raise infra_error(current.name, current.table, url, "creating or checking", exc) from exc
    finally:
        engine.dispose()


def prepare_derived(url: str, tables: Sequence[tuple[MySqlSinkConfig, MySqlSinkConfig]], policy: str,
                    decisions: Mapping[str, str] | None = None, pipeline: str = "PIPELINE",
                    generic: Mapping[str, Mapping[str, str]] | None = None,
                    inferred: Mapping[str, frozenset[str]] | None = None,
                    ) -> tuple[dict[str, MySqlSinkConfig], list[dict[str, Any]]]:
    """Create the tables made from the record schema, or change them as ``policy`` says
    (connectors/mysql/evolution.py), once per window, before any write. ``tables``: per table, its
    config to create it with (the window's first schema decides a column's type) and to evolve it to
    (the latest one does; a table created by this window is evolved too, so the changes of its
    later schema fit). Returns the config each table is written with, and the schema changes
    (applied or ignored) for the window's stats. Under a MySQL lock, the tables read again: two
    windows never run the same DDL (MySQL's DDL is not transactional; a window killed between DDL
    statements finds the rest to do the next time). ``generic``: per table, the types its columns
    have without the source's exact types the records carry (evolution.changes); ``inferred``: per
    table, its columns typed from the values of records without a schema, which keep the type the
    table has where it holds them (evolution.settled)."""
    if not tables:
        return {}, []
    engine = writer_engine(url)
    configs: dict[str, MySqlSinkConfig] = {}
    recorded: list[dict[str, Any]] = []
    current = tables[0][0]
    try:
        with engine.connect() as conn:
            if conn.exec_driver_sql("SELECT GET_LOCK(CONCAT(%s, '.', DATABASE()), 60)", (DDL_LOCK,)).scalar() != 1:
                raise SinkUnavailable(f"MySQL at {where(url)}: another window held the schema-change lock for 60 s")
            try:
                found = _existing(conn, [create.table for create, _evolve in tables])
                for i, (create, evolve) in enumerate(tables):
                    existing = found.get(create.table)
                    if existing is None and evolve != create:  # a later schema in the window: created, then evolved
                        prepare_table(conn, create, tombstones=i == 0)
                        conn.commit()
                        existing = _existing(conn, [create.table]).get(create.table)
                    cfg, have = create, None
                    if existing is not None:
                        before = len(recorded)
                        settled = _settled(evolve, existing[0], (inferred or {}).get(create.table, frozenset()))
                        cfg = _evolve(conn, settled, existing, policy, recorded, decisions, pipeline,
                                      (generic or {}).get(create.table))
                        if not any(r["applied"] for r in recorded[before:]):  # the columns as read: no query
                            have = {c.name.lower() for c in existing[0]}
                    current = cfg
                    prepare_table(conn, cfg, tombstones=i == 0, have=have)
                    conn.commit()
                    configs[create.table] = cfg
            finally:
                conn.exec_driver_sql("SELECT RELEASE_LOCK(CONCAT(%s, '.', DATABASE()))", (DDL_LOCK,))
    except DBAPIError as exc:
        raise infra_error(current.name, current.table, url, "creating or changing", exc) from exc
    finally:
        engine.dispose()
    return configs, recorded


def _settled(cfg: MySqlSinkConfig, existing: list[evolution.Column], inferred: frozenset[str]) -> MySqlSinkConfig:
    """``cfg`` with each inferred column typed as the table's column of that name holds it
    (evolution.settled)."""
    have = {c.name.lower(): c.type for c in existing}
    if not inferred or not have:
        return cfg
    columns = [c.model_copy(update={"type": evolution.settled(have[c.name.lower()], c.type)})
               if c.name in inferred and c.name.lower() in have else c for c in cfg.columns]
    return cfg.model_copy(update={"columns": columns})


def _evolve(conn: sa.Connection, cfg: MySqlSinkConfig, existing: tuple[list[evolution.Column], list[str]],
            policy: str, recorded: list[dict[str, Any]], decisions: Mapping[str, str] | None,
            pipeline: str, generic: Mapping[str, str] | None = None) -> MySqlSinkConfig:
    columns, key = existing
    own = {VERSION_COLUMN.lower()} | ({cfg.deleted_column.lower()} if cfg.delete == "soft" else set())
    if cfg.mode == "history":  # its own columns, and its key without __version
        own |= {c.lower() for c in HISTORY_OWN}
        key = [k for k in key if k.lower() not in own]
    found = evolution.changes(cfg.table, [evolution.Column(c.name, c.type, c.nullable) for c in cfg.columns],
                              cfg.primary_key, columns, key, protected=frozenset(own), generic=generic)
    apply, ignored = evolution.decide(found, policy, decisions, pipeline)
    for change in apply:
        assert change.statement is not None, "a change to apply has its statement"
        run_ddl(conn, change.statement)
        recorded.append({**change.as_dict(), "applied": True})
        faults.checkpoint("during_ddl")  # MySQL's DDL commits itself: a kill here leaves the rest to the retry
    recorded += [{**c.as_dict(), "applied": False} for c in ignored if c.kind != "dropped" or c.statement]
    if not ignored:
        return cfg
    # ignored (or rejected) changes: the columns the table has, as the records type them
    have = {c.name.lower() for c in columns} | {c.column.lower() for c in apply if c.kind == "add"}
    return cfg.model_copy(update={"columns": [c for c in cfg.columns if c.name.lower() in have]})


def newest_tombstones(conn: sa.Connection, tables: Sequence[str]) -> dict[str, tuple[int | None, int | None]]:
    """Per table that has tombstones: (its newest key tombstone's version, its TRUNCATE mark), in one query."""
    marks = ", ".join(["%s"] * len(tables))
    return {t: (newest, truncated) for t, newest, truncated in conn.exec_driver_sql(
        "SELECT table_name, MAX(CASE WHEN key_hash <> %s THEN version END), "
        f"MAX(CASE WHEN key_hash = %s THEN version END) FROM {quote(TOMBSTONES)} "
        f"WHERE table_name IN ({marks}) GROUP BY table_name", (TRUNCATE_HASH, TRUNCATE_HASH, *tables))}


def prune_tombstones(url: str, cfg: MySqlSinkConfig, older_than_s: float, batch: int = 10_000) -> int:
    """Delete the tombstones of the sink's table(s) written more than ``older_than_s`` ago
    (retention.tombstones), in transactions of ``batch`` rows. Returns how many."""
    engine = reader_engine(url)
    # a routed table ('{topic}', '{source.table}' …): every table the template can produce
    pattern = re.sub(r"\{[^}]*\}", "%", re.sub(r"([%_\\])", r"\\\1", cfg.table))
    total = 0
    try:
        with engine.begin() as conn:
            if not conn.exec_driver_sql(
                    "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "
                    "AND TABLE_NAME = %s", (TOMBSTONES,)).scalar():
                return 0
            if not conn.exec_driver_sql(
                    "SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() "
                    "AND TABLE_NAME = %s AND INDEX_NAME = %s", (TOMBSTONES, TOMBSTONES_AGE_INDEX)).scalar():
                conn.exec_driver_sql(f"CREATE INDEX {quote(TOMBSTONES_AGE_INDEX)} ON {quote(TOMBSTONES)} "
                                     "(table_name, deleted_at)")
        while True:
            with engine.begin() as conn:
                n = conn.exec_driver_sql(
                    f"DELETE FROM {quote(TOMBSTONES)} WHERE table_name LIKE %s AND "
                    f"deleted_at < NOW() - INTERVAL %s SECOND LIMIT {int(batch)}",
                    (pattern, int(older_than_s))).rowcount
            total += n
            if n < batch:
                return total
    except DBAPIError as exc:
        raise infra_error(cfg.name, cfg.table, url, "pruning the tombstones of", exc) from exc
    finally:
        engine.dispose()


def truncate_tables(url: str, truncates: dict[str, int], sink: str,
                    kept: MySqlSinkConfig | None = None) -> dict[str, int]:
    """``truncate: apply``: per table, a TRUNCATE of its source table at a version. The rows written
    by older changes are deleted (``__cdc_version`` below the truncate's; a newer row, written by a
    later window a replay runs after, stays) and the table's TRUNCATE mark is raised to it, so that an
    older change replayed later is not written (:meth:`MySqlSink.write_arrow`). One transaction;
    idempotent. Returns the rows deleted per table. ``kept``: the sink's config when it is a history
    table (``mode: history``), whose rows are kept: its current versions are closed instead
    (history.truncate_sql), and the count is of those closed."""
    engine = writer_engine(url)
    deleted: dict[str, int] = {}
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(TOMBSTONES_DDL)
            have = {r[0] for r in conn.exec_driver_sql(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name IN "
                f"({', '.join(['%s'] * len(truncates))})", tuple(truncates))}
            for table, version in sorted(truncates.items()):
                deleted[table] = 0
                if table in have and kept is not None:  # a history table: its current versions closed
                    for statement in history.truncate_sql(table, [c.name for c in kept.columns]):
                        deleted[table] = conn.exec_driver_sql(statement, {"v": version}).rowcount
                elif table in have:
                    deleted[table] = conn.exec_driver_sql(
                        f"DELETE FROM {quote(table)} WHERE {quote(VERSION_COLUMN)} < %s", (version,)).rowcount
                conn.exec_driver_sql(
                    f"INSERT INTO {quote(TOMBSTONES)} (table_name, key_hash, key_json, version) VALUES (%s, %s, %s, %s) "
                    "ON DUPLICATE KEY UPDATE version = GREATEST(version, VALUES(version))",
                    (table, TRUNCATE_HASH, TRUNCATE_KEY, version))
    except DBAPIError as exc:
        raise SinkUnavailable(f"sink {sink!r}: MySQL at {where(url)} failed "
                              f"while applying the TRUNCATE of tables {sorted(truncates)}: {driver_error(exc)}") from exc
    finally:
        engine.dispose()
    return deleted
