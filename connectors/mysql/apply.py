"""Applying a batch of changes to a MySQL table inside a transaction the sink opened
(connectors/mysql/sink.py decides which path, retries and isolates bad rows).

* The row path (:func:`apply_rows`): one multi-row version-guarded upsert of the live upserts (those
  newer than their key's tombstone), one delete and one tombstone upsert, with parameters.
* The set path (:func:`apply_set`): the upserts and the deletes bulk-loaded column-wise from Arrow
  (connectors/mysql/bulk.py) into temporary tables with the target's column types, then one
  ``INSERT … SELECT … ON DUPLICATE KEY UPDATE`` with the version guard, one ``DELETE … JOIN`` and one
  tombstone ``INSERT … SELECT``: no per-row Python.
"""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import sqlalchemy as sa

from connectors import timing
from connectors.base import ArrowRecords, Change, SinkStats
from connectors.mysql import bulk
from connectors.mysql.config import MySqlSinkConfig
from connectors.mysql.sql import (
    DELETE_STAGE,
    HASH_COLUMN,
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
    opened (no upsert newer than it can be blocked by a tombstone: no lookup)."""
    upserts = [c for c in batch if c.op == "upsert"]
    deletes = [c for c in batch if c.op == "delete"]
    stats = SinkStats()
    if upserts:
        live = _without_tombstoned(conn, sql.cfg.table, upserts, newest_tombstone)
        stats.stale += len(upserts) - len(live)
        if live:
            conn.exec_driver_sql(sql.upsert_sql, [
                (*(c.values.get(col) for col in sql.columns), c.version) for c in live])
            stats.upserted += len(live)
    if deletes:
        conn.exec_driver_sql(sql.delete_sql, [(*c.key, c.version) for c in deletes])
        conn.exec_driver_sql(sql.tombstone_sql, [
            (sql.cfg.table, *key_hash(c.key), c.version) for c in deletes])
        stats.deleted += len(deletes)
    return stats


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
    ops = table.column("change_op")
    upserts, deletes = table.filter(pc.equal(ops, "upsert")), table.filter(pc.equal(ops, "delete"))
    stats = SinkStats()
    cursor = conn.connection.cursor()  # the DBAPI cursor: statements without % formatting
    cursor.execute(sql.drop_stages_sql)  # left by a batch that failed earlier on this connection (one window transaction)
    if upserts.num_rows:
        _upsert_set(cursor, sql, upserts, newest_tombstone, payload_bytes, stats)
    if deletes.num_rows:
        _delete_set(cursor, sql, deletes, payload_bytes, stats)
    cursor.execute(sql.drop_stages_sql)
    return stats


def _upsert_set(cursor: Any, sql: Statements, upserts: pa.Table, newest_tombstone: int | None,
                payload_bytes: int, stats: SinkStats) -> None:
    columns = [upserts.column(f"c_{i}") for i in range(len(sql.columns))] + [upserts.column("version")]
    guarded = newest_tombstone is not None and pc.min(upserts.column("version")).as_py() <= newest_tombstone
    if guarded:  # a tombstone may be newer than some of these: look them up in the join
        columns.append(pa.array([h.hex() for h, _text in key_hashes(key_parts(upserts, sql))], pa.string()))
    cursor.execute(sql.stage_sql)
    started = time.perf_counter()
    load(cursor, UPSERT_STAGE, [*sql.columns, VERSION_COLUMN] + ([HASH_COLUMN] if guarded else []), columns,
         payload_bytes)
    started = lap(stats, "load_s", started)
    if guarded:
        cursor.execute(sql.set_stale_sql)
        stats.stale += cursor.fetchone()[0]
        cursor.execute(sql.set_upsert_live_sql)
    else:
        cursor.execute(sql.set_upsert_sql)
    stats.upserted += upserts.num_rows - stats.stale
    lap(stats, "upsert_s", started)


def _delete_set(cursor: Any, sql: Statements, deletes: pa.Table, payload_bytes: int, stats: SinkStats) -> None:
    pk = sql.cfg.primary_key
    hashed = key_hashes(key_parts(deletes, sql))
    cursor.execute(sql.stage_delete_sql)
    load(cursor, DELETE_STAGE, [*pk, VERSION_COLUMN, HASH_COLUMN, KEY_JSON_COLUMN],
         [deletes.column(f"c_{sql.columns.index(k)}") for k in pk]
         + [deletes.column("version"), pa.array([h.hex() for h, _j in hashed], pa.string()),
            pa.array([j for _h, j in hashed], pa.string())], payload_bytes)
    started = time.perf_counter()
    cursor.execute(sql.set_delete_sql)
    cursor.execute(sql.set_tombstone_sql)
    lap(stats, "delete_s", started)
    stats.deleted += deletes.num_rows


def key_parts(table: pa.Table, sql: Statements) -> list[pa.ChunkedArray]:
    """The primary key's columns, for the tombstone hashes (sql.key_hashes)."""
    return [table.column(f"c_{sql.columns.index(k)}") for k in sql.cfg.primary_key]


def load(cursor: Any, stage: str, names: list[str], columns: list[pa.Array | pa.ChunkedArray],
         payload_bytes: int) -> None:
    """Multi-row INSERTs of escaped literals, each under ``payload_bytes``."""
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
