"""Applying a batch of changes to a MySQL table inside a transaction the sink opened
(connectors/mysql/sink.py decides which path, retries and isolates bad rows).

* The row path (:func:`apply_rows`): one multi-row version-guarded upsert of the live upserts (those
  newer than their key's tombstone), one delete and one tombstone upsert, with parameters.
* The set path (:func:`apply_set`): the upserts and the deletes bulk-loaded column-wise from Arrow
  (connectors/mysql/bulk.py) into temporary tables with the target's column types, then one
  ``INSERT … SELECT … ON DUPLICATE KEY UPDATE`` with the version guard, one ``DELETE … JOIN`` and one
  tombstone ``INSERT … SELECT``: no per-row Python.

Soft deletes and partial updates (connectors/mysql/sql.py) take the same paths: a soft delete is the
delete statement's ``UPDATE`` form; the upserts that keep some columns' stored values are applied by
one statement per set of kept columns (connectors/partial.py), the others by the plain one.
"""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import sqlalchemy as sa

from connectors import timing
from connectors.base import ArrowRecords, Change, SinkStats, newest_per_key
from connectors.mysql import bulk, local_load
from connectors.mysql.config import MySqlSinkConfig
from connectors.mysql.sql import (
    DELETE_STAGE,
    HASH_COLUMN,
    KEEP_CODE_SEPARATOR,
    KEPT_COLUMN,
    KEY_JSON_COLUMN,
    TOMBSTONES,
    UPSERT_STAGE,
    VERSION_COLUMN,
    Statements,
    key_hash,
    key_hashes,
    quote,
)


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


def lap(stats: SinkStats, key: str, since: float) -> float:
    """Add the seconds since ``since`` to ``stats.extra[key]`` (where a set's time goes), rounded to
    the millisecond: the one stage timer (connectors/timing.py)."""
    return timing.lap(stats.extra, key, since, digits=3)


# -- the row path ------------------------------------------------------------------------------------
def apply_rows(conn: sa.Connection, sql: Statements, batch: list[Change], newest_tombstone: int | None) -> SinkStats:
    """``batch`` on ``conn``'s transaction; ``newest_tombstone``: the table's newest when the sink
    opened (no upsert newer than it can be blocked by a tombstone: no lookup). Counted as MySQL
    reports it (:func:`count_upserts`), with the versions the table held before (one lookup)."""
    batch, superseded = newest_per_key(batch)
    upserts = [c for c in batch if c.op == "upsert"]
    deletes = [c for c in batch if c.op == "delete"]
    stats = SinkStats(stale=superseded)
    if upserts:
        live = _without_tombstoned(conn, sql.cfg.table, upserts, newest_tombstone)
        stats.stale += len(upserts) - len(live)
        if live:
            held = _held(conn, sql, live)
            affected = _upsert_rows(conn, sql, live)
            count_upserts(stats, len(live), sum(v is not None and v > c.version for v, c in zip(held, live, strict=True)),
                          sum(v is not None for v in held), affected)
    if deletes:
        gone = conn.exec_driver_sql(sql.delete_sql, [sql.delete_params(c.key, c.version) for c in deletes]).rowcount
        # after the deletes, before their tombstones: a row still there is newer than its delete
        held, tombs = _held(conn, sql, deletes), _tombstoned(conn, sql, deletes)
        kept = sum((v is not None and v > c.version) or (v is None and t is not None and t > c.version)
                   for v, t, c in zip(held, tombs, deletes, strict=True))
        conn.exec_driver_sql(sql.tombstone_sql, [
            (sql.cfg.table, *key_hash(c.key), c.version) for c in deletes])
        count_deletes(stats, len(deletes), gone, kept)
    return stats


def _upsert_rows(conn: sa.Connection, sql: Statements, live: list[Change]) -> int:
    """The upserts, as MySQL counts their affected rows: those that keep no stored value in one
    multi-row statement, the others by the statement of the columns they keep (sql.partial_upsert_sql)."""
    by_kept: dict[frozenset[str], list[Change]] = {}
    for change in live:
        by_kept.setdefault(sql.kept(change.values), []).append(change)
    affected = 0
    for kept, changes in by_kept.items():
        if not kept:
            affected += conn.exec_driver_sql(sql.upsert_sql, [
                (*(c.values.get(col) for col in sql.columns), c.version) for c in changes]).rowcount
            continue
        written = [col for col in sql.columns if col not in kept]
        affected += conn.exec_driver_sql(sql.partial_upsert_sql(kept), [
            (*(c.values.get(col) for col in written), c.version, *c.key) for c in changes]).rowcount
    return affected


LOOKUP_CHUNK = 500  # keys per lookup statement (a scalar subquery each)


def _held(conn: sa.Connection, sql: Statements, changes: list[Change]) -> list[int | None]:
    """The version the table holds of each change's key (None: no row), in order. Each key is
    compared by MySQL itself (its column's type and collation), in a scalar subquery of its own."""
    out: list[int | None] = []
    for i in range(0, len(changes), LOOKUP_CHUNK):
        part = changes[i:i + LOOKUP_CHUNK]
        out += conn.exec_driver_sql(sql.held_sql(len(part)), tuple(k for c in part for k in c.key)).one()
    return out


def _tombstoned(conn: sa.Connection, sql: Statements, changes: list[Change]) -> list[int | None]:
    """The version of each change's key's tombstone (None: none), in order."""
    out: list[int | None] = []
    for i in range(0, len(changes), LOOKUP_CHUNK):
        part = changes[i:i + LOOKUP_CHUNK]
        out += conn.exec_driver_sql(sql.tombstone_versions_sql(len(part)), tuple(key_hash(c.key)[0] for c in part)).one()
    return out


def count_upserts(stats: SinkStats, live: int, newer: int, present: int, affected: int) -> None:
    """``live`` upserts (none blocked by a tombstone), of which ``present`` met a row of their key,
    ``newer`` of those a newer one; ``affected``: MySQL's affected rows of their ``INSERT … ON
    DUPLICATE KEY UPDATE`` (1 per insert, 2 per changed row, 0 per row left as it was; the sink's
    connections do not ask for found rows). An upsert of an equal version whose values differ (a
    range re-applied after a transform was fixed) changed its row: upserted."""
    inserted = live - present
    changed = max(0, (affected - inserted) // 2)
    stats.upserted += inserted + changed
    stats.stale += newer
    stats.unchanged += max(0, live - inserted - changed - newer)


def count_deletes(stats: SinkStats, deletes: int, gone: int, kept: int) -> None:
    """``gone``: MySQL's affected rows of the deletes; ``kept``: the deletes that met a newer row, or
    a tombstone newer than themselves (older than what the table holds); the others met no row:
    nothing to delete, unchanged."""
    stats.deleted += gone
    stats.stale += kept
    stats.unchanged += max(0, deletes - gone - kept)


def _without_tombstoned(conn: sa.Connection, table: str, upserts: list[Change],
                        newest_tombstone: int | None) -> list[Change]:
    if newest_tombstone is None or min(c.version for c in upserts) > newest_tombstone:
        return upserts
    hashes = {key_hash(c.key)[0]: c for c in upserts}
    marks = ", ".join(["%s"] * len(hashes))
    rows = conn.exec_driver_sql(
        f"SELECT key_hash, version FROM {quote(TOMBSTONES)} WHERE table_name = %s AND key_hash IN ({marks})",
        (table, *hashes)).all()
    dead = {bytes(r[0]): r[1] for r in rows}
    return [c for h, c in hashes.items() if h not in dead or c.version > dead[h]]


# -- the set path ------------------------------------------------------------------------------------
def apply_set(conn: sa.Connection, sql: Statements, table: pa.Table, newest_tombstone: int | None,
              payload_bytes: int) -> SinkStats:
    """``table`` (the window's sink frame) on ``conn``'s transaction: load the upserts and the deletes
    into temporary tables, in INSERTs of at most ``payload_bytes`` each, then apply each set with one
    statement."""
    table, superseded = newest_rows(table, [f"c_{sql.columns.index(k)}" for k in sql.cfg.primary_key])
    ops = table.column("change_op")
    upserts, deletes = table.filter(pc.equal(ops, "upsert")), table.filter(pc.equal(ops, "delete"))
    stats = SinkStats(stale=superseded)
    cursor = conn.connection.cursor()  # the DBAPI cursor: statements without % formatting
    cursor.execute(sql.drop_stages_sql)  # left by a batch that failed earlier on this connection (one window transaction)
    if upserts.num_rows:
        _upsert_set(cursor, sql, upserts, newest_tombstone, payload_bytes, stats)
    if deletes.num_rows:
        _delete_set(cursor, sql, deletes, payload_bytes, stats)
    cursor.execute(sql.drop_stages_sql)
    return stats


def newest_rows(table: pa.Table, keys: list[str]) -> tuple[pa.Table, int]:
    """:func:`connectors.base.newest_per_key` of a sink frame (``keys``: its key columns): the frame
    as it is when no key repeats (a window's frame; checked by a hash group-by), else reduced."""
    n = table.num_rows
    if n < 2:
        return table, 0
    try:
        if table.select(keys).group_by(keys).aggregate([]).num_rows == n:
            return table, 0
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):  # a key type Arrow cannot group
        pass
    versions = table.column("version").to_pylist()
    best: dict[tuple[Any, ...], int] = {}
    for i, key in enumerate(zip(*(table.column(k).to_pylist() for k in keys), strict=True)):
        held = best.get(key)
        if held is None or versions[i] >= versions[held]:
            best[key] = i
    if len(best) == n:
        return table, 0
    return table.take(pa.array(sorted(best.values()), pa.int64())), n - len(best)


def _upsert_set(cursor: Any, sql: Statements, upserts: pa.Table, newest_tombstone: int | None,
                payload_bytes: int, stats: SinkStats) -> None:
    columns = [upserts.column(f"c_{i}") for i in range(len(sql.columns))] + [upserts.column("version")]
    names = [*sql.columns, VERSION_COLUMN]
    codes, masks = kept_codes(sql, upserts)  # None: no upsert keeps a stored value (the usual set)
    if codes is not None:  # a kept value is staged as NULL, and each row says which columns it keeps
        columns = [_null_where(masks[i], col) if i in masks else col for i, col in enumerate(columns)] + [codes]
        names.append(KEPT_COLUMN)
    guarded = newest_tombstone is not None and pc.min(upserts.column("version")).as_py() <= newest_tombstone
    if guarded:  # a tombstone may be newer than some of these: look them up in the join
        columns.append(pa.array([h.hex() for h, _text in key_hashes(key_parts(upserts, sql))], pa.string()))
        names.append(HASH_COLUMN)
    cursor.execute(sql.stage_sql if codes is None else sql.stage_partial_sql)
    started = time.perf_counter()
    staged_by_load(stats, load(cursor, UPSERT_STAGE, names, columns, payload_bytes, sql.cfg.stage == "load_data"))
    started = lap(stats, "load_s", started)
    tombstoned = 0
    if guarded:
        cursor.execute(sql.set_stale_sql)
        tombstoned = int(cursor.fetchone()[0])
    cursor.execute(sql.set_held_sql(guarded))  # what the table holds of these keys, before
    newer, present = cursor.fetchone()
    if codes is None:
        cursor.execute(sql.set_upsert_live_sql if guarded else sql.set_upsert_sql)
        affected = cursor.rowcount
    else:  # one statement per set of kept columns
        affected = 0
        for code in pc.unique(codes).to_pylist():
            kept = frozenset(sql.data_columns_at(code))
            cursor.execute(sql.partial_upsert_sql(kept, staged=True, guarded=guarded, code=code))
            affected += cursor.rowcount
    stats.stale += tombstoned
    count_upserts(stats, upserts.num_rows - tombstoned, int(newer or 0), int(present), affected)
    lap(stats, "upsert_s", started)


def kept_codes(sql: Statements, upserts: pa.Table) -> tuple[pa.Array | None, dict[int, pa.Array]]:
    """Per upsert, the indices of the columns whose values keep the stored ones, each followed by
    ``KEEP_CODE_SEPARATOR`` ('' for none), and each such column's mask; (None, {}) when no upsert
    keeps any (connectors/partial.py)."""
    if not sql.rule.active:
        return None, {}
    masks = {}
    for i, name in enumerate(sql.columns):
        mask = sql.rule.kept(name, upserts.column(f"c_{i}"))
        if mask is not None and pc.any(mask).as_py():
            masks[i] = mask
    if not masks:
        return None, {}
    parts = [pc.if_else(mask, f"{i}{KEEP_CODE_SEPARATOR}", "") for i, mask in masks.items()]
    return (parts[0] if len(parts) == 1 else pc.binary_join_element_wise(*parts, "")), masks


def _null_where(mask: pa.Array, column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A staged column with its kept values (the placeholder, a kept null) as NULL: the statement
    reads the stored value in their place."""
    values = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return pc.if_else(mask, pa.nulls(len(values), values.type), values)


def _delete_set(cursor: Any, sql: Statements, deletes: pa.Table, payload_bytes: int, stats: SinkStats) -> None:
    pk = sql.cfg.primary_key
    hashed = key_hashes(key_parts(deletes, sql))
    cursor.execute(sql.stage_delete_sql)
    staged_by_load(stats, load(cursor, DELETE_STAGE, [*pk, VERSION_COLUMN, HASH_COLUMN, KEY_JSON_COLUMN],
                               [deletes.column(f"c_{sql.columns.index(k)}") for k in pk]
                               + [deletes.column("version"), pa.array([h.hex() for h, _j in hashed], pa.string()),
                                  pa.array([j for _h, j in hashed], pa.string())],
                               payload_bytes, sql.cfg.stage == "load_data"))
    started = time.perf_counter()
    cursor.execute(sql.set_delete_sql)
    gone = cursor.rowcount
    cursor.execute(sql.set_kept_sql)  # before the tombstones: those newer than the deletes are older ones'
    kept = int(cursor.fetchone()[0] or 0)
    cursor.execute(sql.set_tombstone_sql)
    lap(stats, "delete_s", started)
    count_deletes(stats, deletes.num_rows, gone, kept)


def staged_by_load(stats: SinkStats, by_load: bool) -> None:
    """Count the stages made by LOAD DATA and those by INSERT (``stats.extra``: how a sink's sets went)."""
    key = "staged_by_load_data" if by_load else "staged_by_insert"
    stats.extra[key] = stats.extra.get(key, 0) + 1


def key_parts(table: pa.Table, sql: Statements) -> list[pa.ChunkedArray]:
    """The primary key's columns, for the tombstone hashes (sql.key_hashes)."""
    return [table.column(f"c_{sql.columns.index(k)}") for k in sql.cfg.primary_key]


def load(cursor: Any, stage: str, names: list[str], columns: list[pa.Array | pa.ChunkedArray],
         payload_bytes: int, local: bool = True) -> bool:
    """Stage the rows into the temporary table ``stage``: with ``local`` by LOAD DATA LOCAL from
    memory where the server allows it and no value is coerced (connectors/mysql/local_load.py), else
    by multi-row INSERTs of escaped literals, each under ``payload_bytes``. True: LOAD DATA did."""
    if local and local_load.load_data(cursor, stage, names, columns, payload_bytes):
        return True
    head = f"INSERT INTO {quote(stage)} ({', '.join(quote(n) for n in names)}) VALUES "
    rows = len(columns[0])
    step = rows
    start = 0
    while start < rows:
        payload = bulk.values([c.slice(start, step) for c in columns])
        if len(payload) > payload_bytes and step > 1:
            step = max(1, step * payload_bytes // len(payload) * 9 // 10)
            continue
        cursor.execute(head.encode("utf-8") + payload)  # bytes: pymysql sends them as they are
        start += step
    return False
