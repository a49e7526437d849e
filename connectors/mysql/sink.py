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
* ``delete: soft`` and partial updates (``unavailable_value``, ``ignore_null_updates``) are statements
  of the same paths under the same guard (connectors/mysql/sql.py, docs/soft-deletes.md).
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

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pymysql
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

from connectors.base import Change, FailedRecord, SinkStats
from connectors.errors import CdcflowError, ConfigError, SinkUnavailable
from connectors.mysql import apply, bulk, history
from connectors.mysql import offsets as sink_offsets
from connectors.mysql import tables as sink_tables
from connectors.mysql.apply import arrow_changes
from connectors.mysql.history import HistoryStatements
from connectors.mysql.config import MySqlSinkConfig
from connectors.mysql.connection import (
    DATA_ERRORS,
    DEADLOCK,
    RETRY_ERRORS,
    driver_error,
    error_code,
    error_detail,
    infra_error,
    writer_engine,
)
from connectors.mysql.sql import TOMBSTONES, TOMBSTONES_AGE_INDEX, VERSION_COLUMN, Statements, quote
from connectors.mysql.tables import existing_columns, prepare_derived, truncate_tables

# what importers take from here; the jobs live in sql.py, apply.py, tables.py, connection.py, offsets.py
__all__ = ["TOMBSTONES", "TOMBSTONES_AGE_INDEX", "VERSION_COLUMN", "MySqlSink", "arrow_changes", "existing_columns",
           "one_transaction", "prepare_derived", "prepare_tables", "quote", "read_newest_tombstones",
           "truncate_tables", "writer_engine"]

ROW_PATH_MAX = 64  # a set of at most this many changes is applied on the row path: no staging tables to make
SET_PAYLOAD_BYTES = 4_000_000  # per INSERT of the staging load: well under max_allowed_packet (16 MiB default)


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
        self.sql = Statements(cfg)
        self.history = HistoryStatements(cfg) if cfg.mode == "history" else None  # mode: history
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

    def create_table_sql(self) -> str:
        return sink_tables.create_table_sql(self.cfg)

    # -- retention ---------------------------------------------------------------------------------
    def prune_tombstones(self, older_than_s: float, batch: int = 10_000) -> int:
        """Delete the tombstones of this sink's table(s) written more than ``older_than_s`` ago
        (retention.tombstones), in transactions of ``batch`` rows. Returns how many."""
        return sink_tables.prune_tombstones(self.url, self.cfg, older_than_s, batch)

    # -- lifecycle ---------------------------------------------------------------------------------
    def open(self, prepared: bool = False) -> None:
        """Connect, create or evolve the table (``prepared``: :func:`prepare_tables` did it) and
        read the newest tombstone."""
        self._engine = self._shared or writer_engine(self.url)
        if prepared and self._known_tombstone is not None:
            self._newest_tombstone, self._truncated_at = self._known_tombstone
            return
        try:
            with self._engine.begin() as conn:
                if not prepared:
                    sink_tables.prepare_table(conn, self.cfg)
                # The newest tombstone when this task starts. Deletes written during the window are
                # for other keys (one change per key per window) and windows never overlap, so an
                # upsert newer than this cannot be blocked by any tombstone: no lookup needed.
                newest = sink_tables.newest_tombstones(conn, [self.cfg.table])
                self._newest_tombstone, self._truncated_at = newest.get(self.cfg.table, (None, None))
        except DBAPIError as exc:
            raise self._infra_error("opening", exc) from exc

    def open_for_offsets(self) -> None:
        """Exactly-once in a window without a row for this sink: connected to commit the window's
        offsets alone, the table left as it is (one made from the record schema may not exist yet)."""
        self._engine = self._shared or writer_engine(self.url)

    def write(self, changes: Sequence[Change]) -> list[FailedRecord]:
        if self.history is not None:
            raise ConfigError(f"sink {self.name!r}: a history table is written from Arrow frames (write_arrow)")
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
        if self.cfg.apply == "rows" and self.history is None:
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
        transaction (connectors/mysql/offsets.py). Returns False when this run's window committed
        already (nothing to write)."""
        assert self._engine is not None, "open() first"
        try:
            self._window = sink_offsets.begin(self._engine, commit)
        except DBAPIError as exc:
            raise self._infra_error("locking the offsets beside", exc) from exc
        return self._window is not None

    def commit_window(self, commit: sink_offsets.OffsetCommit,
                      before_commit: Callable[[], None] = lambda: None) -> dict[str, Any]:
        """Write the window's offsets into its transaction and commit rows and offsets together."""
        assert self._window is not None, "begin_window() first"
        window, self._window = self._window, None
        try:
            return sink_offsets.commit_window(window, commit, before_commit)
        except DBAPIError as exc:
            raise self._infra_error("committing the window's rows and offsets into", exc) from exc

    def join(self, conn: sa.Connection) -> None:
        """Write inside ``conn``'s open transaction (a savepoint per apply), which its owner commits:
        the few rows of many tables in one commit (spark_jobs/write/tasks.py::tables_writer)."""
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
        """The row path's batch: ``delete: soft``'s before images first (:meth:`_before_images`)."""
        deletes = [c for c in batch if c.op == "delete" and self._has_image(c.values)]
        return self._before_images(deletes) + self._apply_changes(batch)

    def _apply_changes(self, batch: list[Change]) -> list[FailedRecord]:
        return self._transact(lambda: self._apply_rows(batch), lambda: self._apply_one_by_one(batch))

    def _has_image(self, values: dict[str, Any]) -> bool:
        """``delete: soft``: whether a delete carries its row's values (Debezium's before image), not
        its key alone (a tombstone; a before image of the key, as PostgreSQL's REPLICA IDENTITY
        DEFAULT and MySQL's MINIMAL row image write)."""
        return self.sql.deleted is not None and any(values.get(c) is not None for c in self.sql.data_columns)

    def _before_images(self, deletes: list[Change]) -> list[FailedRecord]:
        """``delete: soft``: the deletes' before images written as upserts at their versions before
        the deletes mark them, so a soft-deleted row holds the values it had when it was deleted even
        when the window's changes before the delete were reduced away (an insert and its delete in
        one window leave the row, marked). Uncounted: the deletes are the changes counted."""
        if not deletes:
            return []
        upserts = [Change("upsert", c.key, c.values, c.version, c.source) for c in deletes]
        counted, self.stats = self.stats, SinkStats()
        try:
            return self._apply_changes(upserts)
        finally:
            counted.failed += self.stats.failed
            self.stats = counted

    def _transact(self, attempt_once: Callable[[], None],
                  on_data_error: Callable[[], list[FailedRecord]]) -> list[FailedRecord]:
        """Run one transaction: lock conflicts are retried with backoff, a row's data error goes to
        ``on_data_error`` (which isolates the bad rows), anything else fails the window."""
        for attempt in range(self.max_lock_retries + 1):
            try:
                attempt_once()
                return []
            except (DBAPIError, pymysql.MySQLError) as exc:  # the set path runs on the DBAPI cursor
                code = error_code(exc)
                if code == DEADLOCK and (self._window is not None or self._joined is not None):
                    raise self._rolled_back(exc) from exc
                if code in RETRY_ERRORS and attempt < self.max_lock_retries:
                    self.stats.extra["lock_retries"] = self.stats.extra.get("lock_retries", 0) + 1
                    time.sleep(0.1 * 2 ** attempt)
                    continue
                if code in DATA_ERRORS:
                    return on_data_error()
                raise self._infra_error("writing", exc) from exc
        raise AssertionError("unreachable")

    def _rolled_back(self, exc: BaseException) -> SinkUnavailable:
        """A deadlock inside a transaction of more than this batch: MySQL rolled all of it back."""
        if self._window is not None:
            return SinkUnavailable(
                f"sink {self.name!r}: MySQL chose this window's transaction as a deadlock victim and "
                f"rolled it back (table {self.cfg.table!r}); nothing of the window is in MySQL and no "
                "offset moved: the retry applies it")
        return SinkUnavailable(
            f"sink {self.name!r}: MySQL chose the transaction of this task's tables as a deadlock "
            f"victim and rolled it back (table {self.cfg.table!r}); no offset moved: the retry "
            "applies them")

    def _apply_rows(self, batch: list[Change]) -> None:
        with self._transaction() as conn:
            stats = apply.apply_rows(conn, self.sql, batch, self._newest_tombstone)
        stats.count(self.cfg.table, stats.upserted, stats.deleted)  # per target: the asset events
        self.stats.add(stats)

    def _apply_pending(self) -> list[FailedRecord]:
        table = pa.Table.from_batches(self._pending)
        self._pending, self._pending_rows = [], 0
        if self.history is not None:
            return self._transact(lambda: self.stats.add(self._apply_history(table)),
                                  lambda: self._history_one_by_one(table))

        failed: list[FailedRecord] = []
        if self.sql.deleted is not None:  # delete: soft: the deletes' before images first
            deletes = table.filter(pc.equal(table.column("change_op"), "delete"))
            failed = self._before_images([c for batch in deletes.to_batches() for c in arrow_changes(batch, self.cfg)
                                          if self._has_image(c.values)])
        changes = [c for batch in table.to_batches() for c in arrow_changes(batch, self.cfg)] \
            if table.num_rows <= ROW_PATH_MAX else None

        def by_rows() -> list[FailedRecord]:
            """Some row's data (or a column the encoder does not take): the row path finds which rows,
            and sends only those to the DLQ."""
            self.stats.extra["set_fallbacks"] = self.stats.extra.get("set_fallbacks", 0) + 1
            every = changes if changes is not None else [
                c for batch in table.to_batches() for c in arrow_changes(batch, self.cfg)]
            size = self.cfg.batch_size
            return [f for i in range(0, len(every), size) for f in self._apply_changes(every[i:i + size])]

        if table.num_rows <= ROW_PATH_MAX:  # a few rows: fewer statements than the staging tables take
            assert changes is not None
            return failed + self._apply_changes(changes)
        try:
            return failed + self._transact(lambda: self.stats.add(self._apply_set(table)), by_rows)
        except bulk.NotBulkLoadable:  # e.g. a binary column: the row path binds it as a parameter
            return failed + by_rows()

    def _apply_set(self, table: pa.Table) -> SinkStats:
        """One transaction: the set path (connectors/mysql/apply.py), timed to its commit."""
        with self._transaction() as conn:
            stats = apply.apply_set(conn, self.sql, table, self._newest_tombstone, SET_PAYLOAD_BYTES)
            started = time.perf_counter()
        apply.lap(stats, "commit_s", started)
        stats.extra["set_batches"] = 1
        stats.count(self.cfg.table, stats.upserted, stats.deleted)  # per target: the asset events
        return stats

    def _apply_history(self, table: pa.Table) -> SinkStats:
        """One transaction (a savepoint of the window's): the changes into the history table."""
        assert self.history is not None
        with self._transaction() as conn:
            return history.apply_history(conn, self.history, table, self.sql.rule,
                                         partial(apply.load, local=self.cfg.stage == "load_data"), SET_PAYLOAD_BYTES)

    def _history_one_by_one(self, table: pa.Table) -> list[FailedRecord]:
        """Some change's data MySQL refuses: each change alone, and those it still refuses to the DLQ."""
        def one(i: int) -> None:
            self.stats.add(self._apply_history(table.slice(i, 1)))

        changes = arrow_changes(table.combine_chunks().to_batches()[0], self.cfg) if table.num_rows else []
        return self._one_by_one(changes, one, "the change for history table")

    def _apply_one_by_one(self, batch: list[Change]) -> list[FailedRecord]:
        return self._one_by_one(batch, lambda i: self._apply_rows([batch[i]]), "the row for table")

    def _one_by_one(self, changes: list[Change], apply_one: Callable[[int], None], what: str) -> list[FailedRecord]:
        """Each change applied alone; those whose data MySQL refuses become failed records, named."""
        failed: list[FailedRecord] = []
        for i, change in enumerate(changes):
            try:
                apply_one(i)
            except (DBAPIError, pymysql.MySQLError) as exc:
                if error_code(exc) not in DATA_ERRORS:
                    raise self._infra_error("writing", exc) from exc
                orig = driver_error(exc)
                failed.append(change.failed(
                    "sink", f"mysql:{self.name}", f"{type(orig).__module__}.{type(orig).__name__}",
                    f"MySQL rejected {what} {self.cfg.table!r} (key {list(change.key)}): {error_detail(exc)}"))
                self.stats.failed += 1
        return failed

    def _infra_error(self, doing: str, exc: DBAPIError | pymysql.MySQLError) -> CdcflowError:
        return infra_error(self.name, self.cfg.table, self.url, doing, exc)


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
            found = sink_tables.newest_tombstones(conn, [s.cfg.table for s in sinks])
    except DBAPIError as exc:
        raise sinks[0]._infra_error("reading the newest tombstones of", exc) from exc
    for sink in sinks:
        sink._known_tombstone = found.get(sink.cfg.table, (None, None))


def prepare_tables(url: str, sinks: Sequence[MySqlSink]) -> None:
    """Create or evolve the tables of many sinks (the tables of a routed sink) on one connection,
    once per window, before its tasks write to them (they then ``open(prepared=True)``)."""
    sink_tables.prepare_tables(url, [s.cfg for s in sinks])
