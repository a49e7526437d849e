"""The MySQL sink: batched upserts and deletes that are idempotent and never go back in time.

* c/r/u changes: ``INSERT … ON DUPLICATE KEY UPDATE`` where every column is only replaced when the
  incoming version is at least the stored one (``__cdc_version``). MySQL evaluates the assignments
  left to right, so the version column is assigned last.
* d changes and tombstones: ``DELETE … WHERE __cdc_version <= version`` plus a row in
  ``cdcflow_tombstones`` (table, key, version). An upsert older than the key's tombstone is skipped,
  so a replayed insert cannot resurrect a row deleted later.
* Re-applying a window is therefore a no-op, and so is replaying an older one.
* A batch that MySQL rejects for its data is retried row by row; the rows it still rejects are
  returned as failed records (they go to the DLQ). Connection and server failures raise.
Identifiers are always quoted.

Two ways to apply, with the same guarantees (``apply`` in the sink config):

* ``set`` (default, :meth:`MySqlSink.write_arrow`): up to ``set_rows`` changes are bulk-loaded,
  column-wise from Arrow (connectors/mysql/bulk.py), into temporary tables with the target's column
  types, then applied in the same transaction by one ``INSERT … SELECT … ON DUPLICATE KEY UPDATE``
  with the version guard, one ``DELETE … JOIN`` and one tombstone ``INSERT … SELECT``. A batch that
  MySQL rejects for its data is re-applied on the row path, which isolates the bad rows.
* ``rows``: multi-row ``INSERT … ON DUPLICATE KEY UPDATE`` of ``batch_size`` rows, built per row.

Exactly-once (``offset_store.sink`` names this sink): :meth:`MySqlSink.begin_window` opens one
transaction for the whole window, every batch runs in a savepoint of it (a batch with a bad row
rolls back to its savepoint and takes the row path there), and :meth:`MySqlSink.commit_window`
writes the window's offsets (connectors/mysql/offsets.py) and commits: the rows and the offsets are
in MySQL together or not at all.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pymysql
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from cdcflow import faults
from cdcflow.config import MySqlSinkConfig
from cdcflow.errors import CdcflowError, ConfigError, SinkUnavailable
from connectors.base import ArrowRecords, Change, FailedRecord, SinkStats
from connectors.mysql import bulk, evolution
from connectors.mysql import offsets as sink_offsets

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

SESSION_SQL = (
    "SET SESSION sql_mode='STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION,ERROR_FOR_DIVISION_BY_ZERO,"
    "NO_ZERO_DATE,NO_ZERO_IN_DATE', time_zone='+00:00'"
)

# MySQL/MariaDB error codes that mean "this row's data is wrong": the row goes to the DLQ.
DATA_ERRORS = frozenset({1048, 1062, 1264, 1265, 1292, 1364, 1366, 1367, 1406, 1411, 1452, 1690,
                         3140, 4025, 4078})
# Lock conflicts: retry the batch.
RETRY_ERRORS = frozenset({1205, 1213})
# Problems of the deployment rather than of a record: fail the window with the server's words.
CONFIG_ERRORS = frozenset({1044, 1045, 1049, 1054, 1059, 1103, 1117, 1118, 1142, 1146, 1166, 1170})
ROW_PATH_MAX = 64  # a set of at most this many changes is applied on the row path: no staging tables to make
SET_PAYLOAD_BYTES = 4_000_000  # per INSERT of the staging load: well under max_allowed_packet (16 MiB default)
UPSERT_STAGE, DELETE_STAGE = "cdcflow_stage_upserts", "cdcflow_stage_deletes"
HASH_COLUMN, KEY_JSON_COLUMN = "__cdc_key_hash", "__cdc_key_json"
CONNECT_ARGS: dict[str, Any] = {"connect_timeout": 10, "read_timeout": 120, "write_timeout": 120, "charset": "utf8mb4"}


def writer_engine(url: str, shared: bool = False) -> sa.Engine:
    """The engine a sink writes with. READ COMMITTED: no gap locks. Concurrent writer tasks of a
    window upsert disjoint keys of one table; under REPEATABLE READ their set-based upserts deadlocked
    on the gaps between interleaved keys. Each statement still locks and re-reads the rows it guards.
    ``shared``: one pooled connection, reused by the sinks of many tables one after another (a
    connection costs a few milliseconds; a table of a routed sink may have one change)."""
    pool: dict[str, Any] = {"pool_size": 1, "max_overflow": 1} if shared else {
        "poolclass": NullPool}
    return sa.create_engine(url, isolation_level="READ COMMITTED",
                            connect_args={**CONNECT_ARGS, "init_command": SESSION_SQL}, **pool)


def quote(identifier: str) -> str:
    """Quote a MySQL identifier; backticks inside are doubled, so no name can break out."""
    if "\x00" in identifier:
        raise ConfigError(f"identifier {identifier!r} contains a NUL byte")
    return "`" + identifier.replace("`", "``") + "`"


def _lap(stats: SinkStats, key: str, since: float) -> float:
    """Add the seconds since ``since`` to ``stats.extra[key]`` (where a set's time goes)."""
    now = time.perf_counter()
    stats.extra[key] = round(stats.extra.get(key, 0.0) + now - since, 3)
    return now


def literal(text: str) -> str:
    """A MySQL string literal (backslash escapes on, as the sink's session has them)."""
    return "'" + pymysql.converters.escape_string(text) + "'"


def error_code(exc: BaseException) -> int | None:
    orig = getattr(exc, "orig", exc)
    args = getattr(orig, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def key_hash(key: tuple[Any, ...]) -> tuple[bytes, str]:
    text = json.dumps([str(k) for k in key], ensure_ascii=False)
    return hashlib.sha1(text.encode("utf-8")).digest(), text


def arrow_changes(batch: pa.RecordBatch, cfg: MySqlSinkConfig) -> list[Change]:
    """A batch of the window's sink frame (c_0… in the order of ``cfg.columns``) as Changes."""
    raw = ArrowRecords(batch)
    names = [c.name for c in cfg.columns]
    cols = [batch.column(f"c_{i}").to_pylist() for i in range(len(names))]
    ops, versions = batch.column("change_op").to_pylist(), batch.column("version").to_pylist()
    key_at = [names.index(k) for k in cfg.primary_key]
    return [Change(ops[i], tuple(values[k] for k in key_at), dict(zip(names, values, strict=True)), versions[i],
                   raw.ref(i))
            for i, values in enumerate(zip(*cols, strict=True))]


def existing_columns(url: str, table: str) -> tuple[list[dict[str, Any]], list[str]] | None:
    """A table's columns ({name, type, nullable}, without cdcflow's own) and primary key, as MySQL
    has them; None when the table does not exist."""
    engine = sa.create_engine(url, poolclass=NullPool, connect_args={"connect_timeout": 10})
    try:
        with engine.connect() as conn:
            found = _existing(conn, [table]).get(table)
    except DBAPIError as exc:
        where = sa.make_url(url).render_as_string(hide_password=True)
        raise SinkUnavailable(f"MySQL at {where} failed while reading the columns of table {table!r}: {exc.orig}") from exc
    finally:
        engine.dispose()
    if found is None:
        return None
    columns, key = found
    return [{"name": c.name, "type": c.type, "nullable": c.nullable} for c in columns if c.name != VERSION_COLUMN], key


class MySqlSink:
    """Writes changes to one table; see the module docstring for the guarantees."""

    def __init__(self, cfg: MySqlSinkConfig, url: str, max_lock_retries: int = 5,
                 engine: sa.Engine | None = None) -> None:
        """``engine``: a writer engine shared by the sinks of many tables (:meth:`writer_engine`),
        left open by :meth:`close`; without it the sink makes and disposes its own."""
        self.cfg = cfg
        self.name = cfg.name
        self.url = url
        self.max_lock_retries = max_lock_retries
        self.stats = SinkStats()
        self._buffer: list[Change] = []
        self._pending: list[pa.RecordBatch] = []  # apply: set
        self._pending_rows = 0
        self._engine: sa.Engine | None = None
        self._shared = engine
        self._window: sa.Connection | None = None  # exactly-once: the window's one transaction
        self._joined: sa.Connection | None = None  # a transaction of many tables' sinks, its owner commits (join)
        self._newest_tombstone: int | None = None
        self._known_tombstone: tuple[int | None, int | None] | None = None  # read for many tables at once
        self._truncated_at: int | None = None  # the table's TRUNCATE mark: older changes are not written
        self._columns = [c.name for c in cfg.columns]
        self._data_columns = [c for c in self._columns if c not in cfg.primary_key]
        self._build_sql()

    # -- SQL ---------------------------------------------------------------------------------------
    def _build_sql(self) -> None:
        t = quote(self.cfg.table)
        cols = [*self._columns, VERSION_COLUMN]
        collist = ", ".join(quote(c) for c in cols)
        placeholders = ", ".join(["%s"] * len(cols))
        v = quote(VERSION_COLUMN)
        self.upsert_sql = f"INSERT INTO {t} ({collist}) VALUES ({placeholders}) {self._guard()}"
        where = " AND ".join(f"{quote(k)} = %s" for k in self.cfg.primary_key)
        self.delete_sql = f"DELETE FROM {t} WHERE {where} AND {v} <= %s"
        self.tombstone_sql = (
            f"INSERT INTO {quote(TOMBSTONES)} (table_name, key_hash, key_json, version) "
            "VALUES (%s, %s, %s, %s) ON DUPLICATE KEY UPDATE version = GREATEST(version, VALUES(version))")
        # set-based: the same guard, from the staging tables (target columns qualified: the SELECT may join)
        su, sd, tb = quote(UPSERT_STAGE), quote(DELETE_STAGE), quote(TOMBSTONES)
        name = literal(self.cfg.table)  # inlined: these run without parameters, so '%' in a name is plain
        h = quote(HASH_COLUMN)
        tv = f"{t}.{v}"
        selected = ", ".join(f"s.{quote(c)}" for c in cols)
        order = ", ".join(f"s.{quote(k)}" for k in self.cfg.primary_key)  # lock rows in key order

        def set_upsert(join: str = "") -> str:
            return (f"INSERT INTO {t} ({collist}) SELECT {selected} FROM {su} s{join} ORDER BY {order} "
                    f"{self._guard(t)}")

        self.set_upsert_sql = set_upsert()
        # when some tombstone may be newer than an upsert of the batch (replays): skip those upserts
        self.set_upsert_live_sql = set_upsert(
            f" LEFT JOIN {tb} tb ON tb.table_name = {name} AND tb.key_hash = UNHEX(s.{h}) "
            f"WHERE tb.version IS NULL OR s.{v} > tb.version")
        self.set_stale_sql = (f"SELECT COUNT(*) FROM {su} s JOIN {tb} tb ON tb.table_name = {name} "
                              f"AND tb.key_hash = UNHEX(s.{h}) WHERE s.{v} <= tb.version")
        on = " AND ".join(f"{t}.{quote(k)} = d.{quote(k)}" for k in self.cfg.primary_key)
        self.set_delete_sql = f"DELETE {t} FROM {t} JOIN {sd} d ON {on} WHERE {tv} <= d.{v}"
        self.set_tombstone_sql = (
            f"INSERT INTO {tb} (table_name, key_hash, key_json, version) "
            f"SELECT {name}, UNHEX(d.{h}), d.{quote(KEY_JSON_COLUMN)}, d.{v} FROM {sd} d "
            f"ON DUPLICATE KEY UPDATE version = GREATEST({tb}.version, VALUES(version))")
        keylist = ", ".join(quote(k) for k in self.cfg.primary_key)
        # staging tables with the target's column types (and NOT NULLs): a value MySQL would reject
        # in the target is rejected by the load, in strict mode, as on the row path
        # (the added columns take NULL: MariaDB checks NOT NULL ones without a default even on no rows)
        self.stage_sql = (f"CREATE TEMPORARY TABLE {su} ({h} CHAR(40) NULL DEFAULT NULL) "
                          f"SELECT {collist} FROM {t} WHERE 1 = 0")
        self.stage_delete_sql = (f"CREATE TEMPORARY TABLE {sd} ({h} CHAR(40) NULL DEFAULT NULL, "
                                 f"{quote(KEY_JSON_COLUMN)} TEXT NULL DEFAULT NULL) SELECT {keylist}, {v} FROM {t} WHERE 1 = 0")

    def _guard(self, table: str = "") -> str:
        """The version guard of an upsert: every column replaced only when the incoming version is at
        least the stored one; ``table`` qualifies the target's columns (a SELECT that joins needs it)."""
        q = f"{table}." if table else ""
        v = quote(VERSION_COLUMN)
        guarded = [f"{q}{quote(c)} = IF(VALUES({v}) >= {q}{v}, VALUES({quote(c)}), {q}{quote(c)})"
                   for c in self._data_columns]
        guarded.append(f"{q}{v} = GREATEST({q}{v}, VALUES({v}))")  # last: the IFs above read the old version
        return f"ON DUPLICATE KEY UPDATE {', '.join(guarded)}"

    def create_table_sql(self) -> str:
        lines = [f"{quote(c.name)} {c.type} {'NOT NULL' if (c.name in self.cfg.primary_key or not c.nullable) else 'NULL'}"
                 for c in self.cfg.columns]
        lines.append(f"{quote(VERSION_COLUMN)} BIGINT NOT NULL DEFAULT 0")
        lines.append(f"PRIMARY KEY ({', '.join(quote(k) for k in self.cfg.primary_key)})")
        body = ",\n  ".join(lines)
        return f"CREATE TABLE IF NOT EXISTS {quote(self.cfg.table)} (\n  {body}\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"

    def _make_engine(self, writer: bool = False) -> sa.Engine:
        return writer_engine(self.url) if writer else sa.create_engine(
            self.url, poolclass=NullPool, connect_args=CONNECT_ARGS)

    # -- retention ---------------------------------------------------------------------------------
    def prune_tombstones(self, older_than_s: float, batch: int = 10_000) -> int:
        """Delete the tombstones of this sink's table(s) written more than ``older_than_s`` ago
        (retention.tombstones), in transactions of ``batch`` rows. Returns how many."""
        engine = self._make_engine()
        # a routed table ('{topic}', '{source.table}' …): every table the template can produce
        pattern = re.sub(r"\{[^}]*\}", "%", re.sub(r"([%_\\])", r"\\\1", self.cfg.table))
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
            raise self._infra_error("pruning the tombstones of", exc) from exc
        finally:
            engine.dispose()

    # -- lifecycle ---------------------------------------------------------------------------------
    def open(self, prepared: bool = False) -> None:
        """Connect, create or evolve the table (``prepared``: :func:`prepare_tables` did it) and
        read the newest tombstone."""
        self._engine = self._shared or self._make_engine(writer=True)
        if prepared and self._known_tombstone is not None:
            self._newest_tombstone, self._truncated_at = self._known_tombstone
            return
        try:
            with self._engine.begin() as conn:
                if not prepared:
                    self._prepare(conn)
                # The newest tombstone when this task starts. Deletes written during the window are
                # for other keys (one change per key per window) and windows never overlap, so an
                # upsert newer than this cannot be blocked by any tombstone: no lookup needed.
                newest = _newest_tombstones(conn, [self.cfg.table])
                self._newest_tombstone, self._truncated_at = newest.get(self.cfg.table, (None, None))
        except DBAPIError as exc:
            raise self._infra_error("opening", exc) from exc

    def _prepare(self, conn: sa.Connection, tombstones: bool = True, have: set[str] | None = None) -> None:
        """``have``: the table's columns (lower case) as read for many tables at once; an empty set
        is a table that does not exist."""
        if tombstones:
            conn.exec_driver_sql(TOMBSTONES_DDL)
        if self.cfg.create_table and not have:
            conn.exec_driver_sql(self.create_table_sql())
            have = None
        self._check_table(conn, have)

    def _check_table(self, conn: sa.Connection, have: set[str] | None = None) -> None:
        if have is None:
            have = {r[0].lower() for r in conn.exec_driver_sql(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = DATABASE() "
                "AND table_name = %s", (self.cfg.table,))}
        if not have:
            raise ConfigError(f"sink {self.name!r}: table {self.cfg.table!r} does not exist; create it or "
                              "set create_table: true")
        missing = [c for c in [*self._columns, VERSION_COLUMN] if c.lower() not in have]
        evolvable = [c for c in self.cfg.columns if c.name in missing and c.name not in self.cfg.primary_key]
        if missing and self.cfg.auto_evolve and len(evolvable) == len(missing):
            for c in evolvable:  # new fields become nullable columns; nothing is ever dropped
                conn.exec_driver_sql(f"ALTER TABLE {quote(self.cfg.table)} ADD COLUMN {quote(c.name)} {c.type} NULL")
            return
        if missing:
            hint = (f"; add it with: ALTER TABLE {quote(self.cfg.table)} ADD COLUMN {quote(VERSION_COLUMN)} "
                    "BIGINT NOT NULL DEFAULT 0" if VERSION_COLUMN in missing else "")
            raise ConfigError(f"sink {self.name!r}: table {self.cfg.table!r} lacks columns {missing}{hint}"
                              f"{'' if hint else ' (set auto_evolve: true to add new fields as columns)'}")

    def write(self, changes: Sequence[Change]) -> list[FailedRecord]:
        if self._truncated_at is not None:
            kept = [c for c in changes if c.version > self._truncated_at]
            self.stats.stale += len(changes) - len(kept)
            changes = kept
        self._buffer.extend(changes)
        failed: list[FailedRecord] = []
        while len(self._buffer) >= self.cfg.batch_size:
            batch, self._buffer = self._buffer[: self.cfg.batch_size], self._buffer[self.cfg.batch_size:]
            failed += self._apply(batch)
        return failed

    def write_arrow(self, batch: pa.RecordBatch) -> list[FailedRecord]:
        """The set-based path (``apply: set``); ``rows`` converts the batch and takes the row path."""
        if self.cfg.apply == "rows":
            return self.write(arrow_changes(batch, self.cfg))
        if self._truncated_at is not None:  # older than the table's TRUNCATE (a replay): not written
            newer = pc.greater(batch.column("version"), self._truncated_at)
            self.stats.stale += batch.num_rows - pc.sum(pc.cast(newer, pa.int64())).as_py()
            batch = batch.filter(newer)
        self._pending.append(batch)
        self._pending_rows += batch.num_rows
        return self._apply_pending() if self._pending_rows >= self.cfg.set_rows else []

    def flush(self) -> list[FailedRecord]:
        failed = self._apply_pending() if self._pending else []
        batch, self._buffer = self._buffer, []
        return failed + (self._apply(batch) if batch else [])

    def begin_window(self, commit: sink_offsets.OffsetCommit) -> bool:
        """Exactly-once: from here to :meth:`commit_window` every write of this sink is one
        transaction. Returns False when this run's window committed already (nothing to write)."""
        assert self._engine is not None, "open() first"
        conn: sa.Connection | None = None
        try:
            conn = self._engine.connect()
            sink_offsets.create_tables(conn)
            conn.commit()
            conn.begin()
            if not sink_offsets.lock(conn, commit):
                self._window, conn = conn, None
                return True
            return False
        except DBAPIError as exc:
            raise self._infra_error("locking the offsets beside", exc) from exc
        finally:
            if conn is not None:  # committed already, or failed: this connection is done
                conn.close()

    def commit_window(self, commit: sink_offsets.OffsetCommit,
                      before_commit: Callable[[], None] = lambda: None) -> dict[str, Any]:
        """Write the window's offsets into its transaction and commit rows and offsets together."""
        assert self._window is not None, "begin_window() first"
        try:
            result = sink_offsets.write(self._window, commit)
            before_commit()
            self._window.commit()
        except DBAPIError as exc:
            raise self._infra_error("committing the window's rows and offsets into", exc) from exc
        finally:
            self._window.close()
            self._window = None
        return result

    def join(self, conn: sa.Connection) -> None:
        """Write inside ``conn``'s open transaction (a savepoint per apply), which its owner commits:
        the few rows of many tables in one commit (spark_jobs/cdc_window._tables_writer)."""
        self._joined = conn

    @contextmanager
    def _transaction(self) -> Iterator[sa.Connection]:
        """A transaction of its own, or, inside a window's or a joined transaction, a savepoint of it."""
        assert self._engine is not None, "open() first"
        outer = self._window if self._window is not None else self._joined
        if outer is None:
            with self._engine.begin() as conn:
                yield conn
            return
        with outer.begin_nested():
            yield outer

    def close(self) -> None:
        if self._window is not None:  # a window that did not commit: nothing of it stays
            try:
                self._window.rollback()
                self._window.close()
            except DBAPIError:
                pass
            self._window = None
        if self._engine is not None and self._engine is not self._shared:
            self._engine.dispose()
        self._engine = None

    # -- applying ----------------------------------------------------------------------------------
    def _apply(self, batch: list[Change]) -> list[FailedRecord]:
        return self._transact(lambda: self._apply_in_transaction(batch), lambda: self._apply_one_by_one(batch))

    def _transact(self, apply: Callable[[], None], on_data_error: Callable[[], list[FailedRecord]]) -> list[FailedRecord]:
        """Run one transaction: lock conflicts are retried with backoff, a row's data error goes to
        ``on_data_error`` (which isolates the bad rows), anything else fails the window."""
        for attempt in range(self.max_lock_retries + 1):
            try:
                apply()
                return []
            except (DBAPIError, pymysql.MySQLError) as exc:  # the set path runs on the DBAPI cursor
                code = error_code(exc)
                if code == 1213 and self._window is not None:  # the deadlock rolled back the whole transaction
                    raise SinkUnavailable(
                        f"sink {self.name!r}: MySQL chose this window's transaction as a deadlock victim and "
                        f"rolled it back (table {self.cfg.table!r}); nothing of the window is in MySQL and no "
                        "offset moved: the retry applies it") from exc
                if code == 1213 and self._joined is not None:
                    raise SinkUnavailable(
                        f"sink {self.name!r}: MySQL chose the transaction of this task's tables as a deadlock "
                        f"victim and rolled it back (table {self.cfg.table!r}); no offset moved: the retry "
                        "applies them") from exc
                if code in RETRY_ERRORS and attempt < self.max_lock_retries:
                    self.stats.extra["lock_retries"] = self.stats.extra.get("lock_retries", 0) + 1
                    time.sleep(0.1 * 2 ** attempt)
                    continue
                if code in DATA_ERRORS:
                    return on_data_error()
                raise self._infra_error("writing", exc) from exc
        raise AssertionError("unreachable")

    def _apply_in_transaction(self, batch: list[Change], count: bool = True) -> None:
        assert self._engine is not None, "open() first"
        upserts = [c for c in batch if c.op == "upsert"]
        deletes = [c for c in batch if c.op == "delete"]
        stats = SinkStats()
        with self._transaction() as conn:
            if upserts:
                live = self._without_tombstoned(conn, upserts)
                stats.stale += len(upserts) - len(live)
                if live:
                    conn.exec_driver_sql(self.upsert_sql, [
                        (*(c.values.get(col) for col in self._columns), c.version) for c in live])
                    stats.upserted += len(live)
            if deletes:
                conn.exec_driver_sql(self.delete_sql, [(*c.key, c.version) for c in deletes])
                conn.exec_driver_sql(self.tombstone_sql, [
                    (self.cfg.table, *key_hash(c.key), c.version) for c in deletes])
                stats.deleted += len(deletes)
        if count:
            stats.count(self.cfg.table, stats.upserted, stats.deleted)  # per target: the asset events
            self.stats.add(stats)

    def _apply_pending(self) -> list[FailedRecord]:
        table = pa.Table.from_batches(self._pending)
        self._pending, self._pending_rows = [], 0

        def by_rows() -> list[FailedRecord]:
            """Some row's data (or a column the encoder does not take): the row path finds which rows,
            and sends only those to the DLQ."""
            self.stats.extra["set_fallbacks"] = self.stats.extra.get("set_fallbacks", 0) + 1
            changes = [c for batch in table.to_batches() for c in arrow_changes(batch, self.cfg)]
            size = self.cfg.batch_size
            return [f for i in range(0, len(changes), size) for f in self._apply(changes[i:i + size])]

        if table.num_rows <= ROW_PATH_MAX:  # a few rows: fewer statements than the staging tables take
            changes = [c for batch in table.to_batches() for c in arrow_changes(batch, self.cfg)]
            return self._apply(changes)
        try:
            return self._transact(lambda: self.stats.add(self._apply_set(table)), by_rows)
        except bulk.NotBulkLoadable:  # e.g. a binary column: the row path binds it as a parameter
            return by_rows()

    def _apply_set(self, table: pa.Table) -> SinkStats:
        """One transaction: load the upserts and the deletes into temporary tables, then apply each
        set with one statement (see the module docstring)."""
        assert self._engine is not None, "open() first"
        ops = table.column("change_op")
        upserts, deletes = table.filter(pc.equal(ops, "upsert")), table.filter(pc.equal(ops, "delete"))
        stats = SinkStats()
        names = [f"c_{i}" for i in range(len(self._columns))]
        with self._transaction() as conn:
            cursor = conn.connection.cursor()  # the DBAPI cursor: statements without % formatting
            # left by a batch that failed earlier on this connection (one window transaction)
            cursor.execute(f"DROP TEMPORARY TABLE IF EXISTS {quote(UPSERT_STAGE)}, {quote(DELETE_STAGE)}")
            if upserts.num_rows:
                columns = [upserts.column(n) for n in names] + [upserts.column("version")]
                versions = upserts.column("version")
                guarded = (self._newest_tombstone is not None
                           and pc.min(versions).as_py() <= self._newest_tombstone)
                if guarded:  # a tombstone may be newer than some of these: look them up in the join
                    columns.append(pa.array([key_hash(k)[0].hex() for k in self._keys(upserts)], pa.string()))
                cursor.execute(self.stage_sql)
                started = time.perf_counter()
                self._load(cursor, UPSERT_STAGE, [*self._columns, VERSION_COLUMN] + ([HASH_COLUMN] if guarded else []),
                           columns)
                started = _lap(stats, "load_s", started)
                if guarded:
                    cursor.execute(self.set_stale_sql)
                    stats.stale += cursor.fetchone()[0]
                    cursor.execute(self.set_upsert_live_sql)
                else:
                    cursor.execute(self.set_upsert_sql)
                stats.upserted += upserts.num_rows - stats.stale
                _lap(stats, "upsert_s", started)
            if deletes.num_rows:
                hashed = [key_hash(k) for k in self._keys(deletes)]
                cursor.execute(self.stage_delete_sql)
                self._load(cursor, DELETE_STAGE, [*self.cfg.primary_key, VERSION_COLUMN, HASH_COLUMN, KEY_JSON_COLUMN],
                           [deletes.column(f"c_{self._columns.index(k)}") for k in self.cfg.primary_key]
                           + [deletes.column("version"), pa.array([h.hex() for h, _j in hashed], pa.string()),
                              pa.array([j for _h, j in hashed], pa.string())])
                started = time.perf_counter()
                cursor.execute(self.set_delete_sql)
                cursor.execute(self.set_tombstone_sql)
                _lap(stats, "delete_s", started)
                stats.deleted += deletes.num_rows
            cursor.execute(f"DROP TEMPORARY TABLE IF EXISTS {quote(UPSERT_STAGE)}, {quote(DELETE_STAGE)}")
            started = time.perf_counter()
        _lap(stats, "commit_s", started)
        stats.extra["set_batches"] = 1
        stats.count(self.cfg.table, stats.upserted, stats.deleted)  # per target: the asset events
        return stats

    def _keys(self, table: pa.Table) -> list[tuple[Any, ...]]:
        """Primary keys as the row path builds them (Python values), for the tombstone hashes."""
        cols = [table.column(f"c_{self._columns.index(k)}").to_pylist() for k in self.cfg.primary_key]
        return list(zip(*cols, strict=True))

    def _load(self, cursor: Any, stage: str, names: list[str], columns: list[pa.Array | pa.ChunkedArray]) -> None:
        """Multi-row INSERTs of escaped literals, each under SET_PAYLOAD_BYTES."""
        head = f"INSERT INTO {quote(stage)} ({', '.join(quote(n) for n in names)}) VALUES "
        rows = len(columns[0])
        step = rows
        start = 0
        while start < rows:
            payload = bulk.values([c.slice(start, step) for c in columns])
            if len(payload) > SET_PAYLOAD_BYTES and step > 1:
                step = max(1, step * SET_PAYLOAD_BYTES // len(payload) * 9 // 10)
                continue
            cursor.execute(head.encode("utf-8") + payload)  # bytes: pymysql sends them as they are
            start += step

    def _without_tombstoned(self, conn: sa.Connection, upserts: list[Change]) -> list[Change]:
        if self._newest_tombstone is None or min(c.version for c in upserts) > self._newest_tombstone:
            return upserts
        hashes = {key_hash(c.key)[0]: c for c in upserts}
        marks = ", ".join(["%s"] * len(hashes))
        rows = conn.exec_driver_sql(
            f"SELECT key_hash, version FROM {quote(TOMBSTONES)} WHERE table_name = %s AND key_hash IN ({marks})",
            (self.cfg.table, *hashes)).all()
        dead = {bytes(r[0]): r[1] for r in rows}
        return [c for h, c in hashes.items() if h not in dead or c.version > dead[h]]

    def _apply_one_by_one(self, batch: list[Change]) -> list[FailedRecord]:
        failed: list[FailedRecord] = []
        for change in batch:
            try:
                self._apply_in_transaction([change])
            except DBAPIError as exc:
                code = error_code(exc)
                if code not in DATA_ERRORS:
                    raise self._infra_error("writing", exc) from exc
                orig = getattr(exc, "orig", exc)
                failed.append(change.failed(
                    "sink", f"mysql:{self.name}", f"{type(orig).__module__}.{type(orig).__name__}",
                    f"MySQL rejected the row for table {self.cfg.table!r} (key {list(change.key)}): "
                    f"{orig.args[1] if len(orig.args) > 1 else orig}"))
                self.stats.failed += 1
        return failed

    def _infra_error(self, doing: str, exc: DBAPIError | pymysql.MySQLError) -> CdcflowError:
        code = error_code(exc)
        orig = getattr(exc, "orig", exc)
        where = sa.make_url(self.url).render_as_string(hide_password=True)
        detail = orig.args[1] if len(getattr(orig, "args", ())) > 1 else str(orig)
        if code in CONFIG_ERRORS:
            return ConfigError(f"sink {self.name!r}: MySQL refused {doing} table {self.cfg.table!r} at {where}: "
                               f"({code}) {detail}")
        return SinkUnavailable(f"sink {self.name!r}: MySQL at {where} failed while {doing} "
                               f"table {self.cfg.table!r}: ({code}) {detail}")


def _newest_tombstones(conn: sa.Connection, tables: Sequence[str]) -> dict[str, tuple[int | None, int | None]]:
    """Per table that has tombstones: (its newest key tombstone's version, its TRUNCATE mark), in one query."""
    marks = ", ".join(["%s"] * len(tables))
    return {t: (newest, truncated) for t, newest, truncated in conn.exec_driver_sql(
        "SELECT table_name, MAX(CASE WHEN key_hash <> %s THEN version END), "
        f"MAX(CASE WHEN key_hash = %s THEN version END) FROM {quote(TOMBSTONES)} "
        f"WHERE table_name IN ({marks}) GROUP BY table_name", (TRUNCATE_HASH, TRUNCATE_HASH, *tables))}


@contextmanager
def one_transaction(engine: sa.Engine, sinks: Sequence[MySqlSink]) -> Iterator[None]:
    """The sinks' writes in one transaction on one of ``engine``'s connections, committed at the end
    (:meth:`MySqlSink.join`); a failing commit fails the task, named."""
    try:
        with engine.connect() as conn, conn.begin():
            for sink in sinks:
                sink.join(conn)
            yield
    except DBAPIError as exc:
        raise sinks[0]._infra_error("committing", exc) from exc
    finally:
        for sink in sinks:
            sink._joined = None


def read_newest_tombstones(engine: sa.Engine, sinks: Sequence[MySqlSink]) -> None:
    """Each sink's newest tombstone, for many tables in one query (what :meth:`MySqlSink.open`
    reads per table). The tables must be prepared (:func:`prepare_tables`: the tombstone table exists)."""
    if not sinks:
        return
    try:
        with engine.connect() as conn:
            found = _newest_tombstones(conn, [s.cfg.table for s in sinks])
    except DBAPIError as exc:
        raise sinks[0]._infra_error("reading the newest tombstones of", exc) from exc  # noqa: SLF001
    for sink in sinks:
        sink._known_tombstone = found.get(sink.cfg.table, (None, None))  # noqa: SLF001


def truncate_tables(url: str, truncates: dict[str, int], sink: str) -> dict[str, int]:
    """``truncate: apply``: per table, a TRUNCATE of its source table at a version. The rows written
    by older changes are deleted (``__cdc_version`` below the truncate's; a newer row, written by a
    later window a replay runs after, stays) and the table's TRUNCATE mark is raised to it, so that an
    older change replayed later is not written (:meth:`MySqlSink.write_arrow`). One transaction;
    idempotent. Returns the rows deleted per table."""
    engine = writer_engine(url)
    deleted: dict[str, int] = {}
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(TOMBSTONES_DDL)
            have = {r[0] for r in conn.exec_driver_sql(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name IN "
                f"({', '.join(['%s'] * len(truncates))})", tuple(truncates))}
            for table, version in sorted(truncates.items()):
                deleted[table] = conn.exec_driver_sql(
                    f"DELETE FROM {quote(table)} WHERE {quote(VERSION_COLUMN)} < %s", (version,)).rowcount \
                    if table in have else 0
                conn.exec_driver_sql(
                    f"INSERT INTO {quote(TOMBSTONES)} (table_name, key_hash, key_json, version) VALUES (%s, %s, %s, %s) "
                    "ON DUPLICATE KEY UPDATE version = GREATEST(version, VALUES(version))",
                    (table, TRUNCATE_HASH, TRUNCATE_KEY, version))
    except DBAPIError as exc:
        orig = getattr(exc, "orig", exc)
        raise SinkUnavailable(f"sink {sink!r}: MySQL at {sa.make_url(url).render_as_string(hide_password=True)} failed "
                              f"while applying the TRUNCATE of tables {sorted(truncates)}: {orig}") from exc
    finally:
        engine.dispose()
    return deleted


DDL_LOCK = "cdcflow_ddl"  # GET_LOCK name (per database): one window at a time plans and runs schema changes


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


def prepare_derived(url: str, tables: Sequence[tuple[MySqlSinkConfig, MySqlSinkConfig]], policy: str,
                    decisions: Mapping[str, str] | None = None,
                    pipeline: str = "PIPELINE") -> tuple[dict[str, MySqlSinkConfig], list[dict[str, Any]]]:
    """Create the tables made from the record schema, or change them as ``policy`` says
    (connectors/mysql/evolution.py), once per window, before any write. ``tables``: per table, its
    config to create it with (the window's first schema decides a column's type) and to evolve it to
    (the latest one does). Returns the config each table is written with, and the schema changes
    (applied or ignored) for the window's stats. Under a MySQL lock, the tables read again: two
    windows never run the same DDL (MySQL's DDL is not transactional; a window killed between DDL
    statements finds the rest to do the next time)."""
    if not tables:
        return {}, []
    engine = writer_engine(url)
    configs: dict[str, MySqlSinkConfig] = {}
    recorded: list[dict[str, Any]] = []
    current = MySqlSink(tables[0][0], url)
    try:
        with engine.connect() as conn:
            if conn.exec_driver_sql("SELECT GET_LOCK(CONCAT(%s, '.', DATABASE()), 60)", (DDL_LOCK,)).scalar() != 1:
                raise SinkUnavailable(f"MySQL at {sa.make_url(url).render_as_string(hide_password=True)}: another "
                                      "window held the schema-change lock for 60 s")
            try:
                found = _existing(conn, [create.table for create, _evolve in tables])
                for i, (create, evolve) in enumerate(tables):
                    existing = found.get(create.table)
                    cfg, have = create, None
                    if existing is not None:
                        before = len(recorded)
                        cfg = _evolve(conn, evolve, existing, policy, recorded, decisions, pipeline)
                        if not any(r["applied"] for r in recorded[before:]):  # the columns as read: no query
                            have = {c.name.lower() for c in existing[0]}
                    current = MySqlSink(cfg, url)
                    current._prepare(conn, tombstones=i == 0, have=have)
                    conn.commit()
                    configs[create.table] = cfg
            finally:
                conn.exec_driver_sql("SELECT RELEASE_LOCK(CONCAT(%s, '.', DATABASE()))", (DDL_LOCK,))
    except DBAPIError as exc:
        raise current._infra_error("creating or changing", exc) from exc
    finally:
        engine.dispose()
    return configs, recorded


def _evolve(conn: sa.Connection, cfg: MySqlSinkConfig, existing: tuple[list[evolution.Column], list[str]],
            policy: str, recorded: list[dict[str, Any]], decisions: Mapping[str, str] | None,
            pipeline: str) -> MySqlSinkConfig:
    columns, key = existing
    found = evolution.changes(cfg.table, [evolution.Column(c.name, c.type, c.nullable) for c in cfg.columns],
                              cfg.primary_key, columns, key, protected=frozenset({VERSION_COLUMN.lower()}))
    apply, ignored = evolution.decide(found, policy, decisions, pipeline)
    for change in apply:
        conn.exec_driver_sql(change.statement)  # type: ignore[arg-type]
        recorded.append({**change.as_dict(), "applied": True})
        faults.checkpoint("during_ddl")  # MySQL's DDL commits itself: a kill here leaves the rest to the retry
    recorded += [{**c.as_dict(), "applied": False} for c in ignored if c.kind != "dropped" or c.statement]
    if not ignored:
        return cfg
    # ignored (or rejected) changes: the columns the table has, as the records type them
    have = {c.name.lower() for c in columns} | {c.column.lower() for c in apply if c.kind == "add"}
    return cfg.model_copy(update={"columns": [c for c in cfg.columns if c.name.lower() in have]})


def prepare_tables(url: str, sinks: Sequence[MySqlSink]) -> None:
    """Create or evolve the tables of many sinks (the tables of a routed sink) on one connection,
    once per window, before its tasks write to them (they then ``open(prepared=True)``)."""
    if not sinks:
        return
    engine = writer_engine(url)
    current = sinks[0]
    try:
        with engine.begin() as conn:
            have: dict[str, set[str]] = {s.cfg.table: set() for s in sinks}
            marks = ", ".join(["%s"] * len(have))
            for table, column in conn.exec_driver_sql(  # every table's columns in one query
                    "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = DATABASE() "
                    f"AND table_name IN ({marks})", tuple(have)):
                have.setdefault(table, set()).add(column.lower())
            for i, current in enumerate(sinks):
                current._prepare(conn, tombstones=i == 0, have=have.get(current.cfg.table, set()))
    except DBAPIError as exc:
        raise current._infra_error("creating or checking", exc) from exc
    finally:
        engine.dispose()
