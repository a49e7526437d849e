"""History tables (``mode: history``, issue 44; docs/history.md): every version of a key, with the
interval in which it was current (SCD type 2), in MySQL, exactly once.

A history table has the sink's columns and five of cdcflow's:

* ``__valid_from``: the source time of the change that opened the version (DATETIME(3), UTC);
* ``__valid_to``: the next version's ``__valid_from``; NULL for the key's last version;
* ``__current``: 1 for the key's last version, unless that is a delete;
* ``__op``: ``r`` (a snapshot read: Debezium's op r, Maxwell's bootstrap-insert), ``c`` (another
  change that opens the key's first version, or its first after a delete), ``u``, or ``d`` (a delete:
  the key has no current version until it is inserted again);
* ``__version``: cdcflow's ordering version of that change; the primary key is the sink's key and it.

and ``__cdc_version``, the newest change the version holds: with ``track_history`` a change that
touches none of the tracked columns updates the key's version in place (Databricks' ``TRACK HISTORY
ON``), and ``__cdc_version`` then says which change wrote its values last.

**One rule, whatever the order.** The history of a key is the fold of its changes in version order
(:func:`fold`). A window's changes of a key are folded together with the stored versions they can
change: the version before the key's oldest change of the window and every later one
(:func:`apply_history` reads them, under the window's transaction). So a change older than the key's
newest version takes its place in the history and its neighbours' intervals follow, a change the
table holds already (a replay) changes nothing (the same ``__version``), and a change older than one
merged into a version in place is superseded by it. The values are compared as MySQL holds them:
the window's changes are loaded into a staging table with the target's column types and read back.

Partial updates (connectors/partial.py): a kept value (the TOAST placeholder, a null listed in
``ignore_null_updates``) takes the previous version's value, as the table holds it when the change
is applied (a change that arrives later and takes its place before it does not rewrite it). A
delete's row holds the delete's own values: the before image where the source sends one.
``truncate: apply`` (:func:`truncate_sql`) closes every current version at the truncate's
time with a ``d`` row at its version.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import sqlalchemy as sa

from connectors.base import SinkStats
from connectors.mysql.config import HISTORY_OWN, MySqlSinkConfig
from connectors.mysql.sql import SOURCE_MS, VERSION_COLUMN, column_sql, quote

VALID_FROM, VALID_TO, CURRENT, OP, VERSION = HISTORY_OWN
HISTORY_COLUMNS = (VALID_FROM, VALID_TO, CURRENT, OP, VERSION, VERSION_COLUMN)
STAGE, KEYS = "cdcflow_history_stage", "cdcflow_history_keys"
EPOCH = datetime(1970, 1, 1)
ROW_NUMBER, GROUP, LOWEST, KIND = "__cdc_n", "__cdc_group", "__cdc_lowest", "__cdc_kind"


def time_sql(version: str) -> str:
    """A version's source time as DATETIME(3) in UTC (its milliseconds: connectors/changes.VERSION_SHIFT)."""
    return f"TIMESTAMPADD(MICROSECOND, ({version} DIV {SOURCE_MS}) * 1000, CAST('1970-01-01 00:00:00' AS DATETIME(3)))"


# -- the fold ------------------------------------------------------------------------------------------
@dataclass
class Version:
    """One row of a key's history: opened by the change at ``version``, holding the values of the
    change at ``last`` (a later one merged in place), ``op`` c, u or d."""

    version: int
    last: int
    op: str
    values: list[Any]
    stored: bool = False  # read from the table (else opened by this window)
    held: tuple[Any, ...] = ()  # a stored version as the table holds it: last, op, values, closed, current


@dataclass(frozen=True)
class Event:
    """One change of the window: ``delete`` or an upsert, its data values, the indices of those that
    keep the previous version's value, and whether it is a snapshot read."""

    version: int
    delete: bool
    values: tuple[Any, ...]
    kept: frozenset[int] = frozenset()
    read: bool = False  # a snapshot read (Debezium's op r, Maxwell's bootstrap-insert)


@dataclass
class Folded:
    rows: list[Version]
    upserted: int = 0
    deleted: int = 0
    stale: int = 0
    unchanged: int = 0
    gone: list[int] = field(default_factory=list)  # stored versions merged into an earlier one


def fold(stored: Sequence[Version], events: Sequence[Event], tracked: Sequence[int] | None) -> Folded:
    """A key's history from its stored versions (the one before its oldest event, then every later
    one, in order) and its events: each in version order opens a version, merges into the previous
    one (``tracked``: the indices of the tracked columns; a ``u`` change equal there), or is
    skipped (what the history holds already: unchanged; older than a change merged in place: stale).
    A stored version is folded again as one change: its ``op`` follows what comes before it now (not
    for the first, whose predecessor is not read), and it may merge into a version opened before it."""
    items = sorted([(v.version, 0, i) for i, v in enumerate(stored)] + [(e.version, 1, i) for i, e in enumerate(events)])
    out = Folded([])
    for position, (version, is_event, i) in enumerate(items):
        prev = out.rows[-1] if out.rows else None
        if is_event:
            event = events[i]
            if prev is not None and version <= prev.last:
                if version in (prev.version, prev.last):
                    out.unchanged += 1
                else:
                    out.stale += 1
                continue
            if event.delete and prev is not None and prev.op == "d":
                out.unchanged += 1  # nothing current to close
                continue
            row = _opened(event, prev)
            if event.delete:
                out.deleted += 1
            else:
                out.upserted += 1
        else:
            row = stored[i]
            if position > 0 and prev is not None and row.op in ("c", "u"):
                row.op = "c" if prev.op == "d" else "u"
        if tracked is not None and prev is not None and prev.op != "d" and row.op == "u" and all(
                row.values[t] == prev.values[t] for t in tracked):
            prev.values, prev.last = row.values, row.last
            if row.stored:
                out.gone.append(row.version)
            continue
        out.rows.append(row)
    return out


def _opened(event: Event, prev: Version | None) -> Version:
    """The version a change opens: its kept values from the previous version; a delete's are its own
    (Debezium's before image; a delete known by its key alone has only the key)."""
    values = list(event.values)
    if prev is not None and not event.delete:
        for k in event.kept:
            values[k] = prev.values[k]
    op = "d" if event.delete else "r" if event.read else ("c" if prev is None or prev.op == "d" else "u")
    return Version(event.version, event.version, op, values)


def intervals(rows: Sequence[Version]) -> list[tuple[int | None, bool]]:
    """Per version: the version after it (its ``__valid_to`` is that one's time; None: the last),
    and whether it is current."""
    out = []
    for i, row in enumerate(rows):
        nxt = rows[i + 1].version if i + 1 < len(rows) else None
        out.append((nxt, nxt is None and row.op != "d"))
    return out


# -- the statements ------------------------------------------------------------------------------------
def create_table_sql(cfg: MySqlSinkConfig) -> str:
    """The history table: the sink's columns (only the key NOT NULL: a delete's row may lack the
    others), the history's own, and the key with ``__version`` as the primary key."""
    lines = [column_sql(c, c.name in cfg.primary_key) if c.name in cfg.primary_key else
             column_sql(c.model_copy(update={"nullable": True}), False) for c in cfg.columns]
    lines += [f"{quote(VALID_FROM)} DATETIME(3) NOT NULL", f"{quote(VALID_TO)} DATETIME(3) NULL DEFAULT NULL",
              f"{quote(CURRENT)} TINYINT(1) NOT NULL", f"{quote(OP)} CHAR(1) NOT NULL",
              f"{quote(VERSION)} BIGINT NOT NULL", f"{quote(VERSION_COLUMN)} BIGINT NOT NULL",
              f"PRIMARY KEY ({', '.join(quote(k) for k in [*cfg.primary_key, VERSION])})",
              f"KEY {quote('ix_' + cfg.table[:50] + '_current')} ({quote(CURRENT)})"]
    body = ",\n  ".join(lines)
    return f"CREATE TABLE IF NOT EXISTS {quote(cfg.table)} (\n  {body}\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"


def truncate_sql(table: str, columns: Sequence[str]) -> list[str]:
    """``truncate: apply`` (parameter: the truncate's version, twice): a ``d`` version of every key
    current before it, at its version, and the current versions closed at its time."""
    t, v = quote(table), quote(VERSION)
    data = ", ".join(quote(c) for c in columns)
    return [
        f"INSERT IGNORE INTO {t} ({data}, {quote(VALID_FROM)}, {quote(VALID_TO)}, {quote(CURRENT)}, {quote(OP)}, {v}, "
        f"{quote(VERSION_COLUMN)}) SELECT {data}, {time_sql('%(v)s')}, NULL, 0, 'd', %(v)s, %(v)s FROM {t} "
        f"WHERE {quote(CURRENT)} = 1 AND {v} < %(v)s",
        f"UPDATE {t} SET {quote(VALID_TO)} = {time_sql('%(v)s')}, {quote(CURRENT)} = 0 "
        f"WHERE {quote(CURRENT)} = 1 AND {v} < %(v)s",
    ]


class HistoryStatements:
    """A history table's statements (:func:`apply_history` runs them)."""

    def __init__(self, cfg: MySqlSinkConfig) -> None:
        self.cfg = cfg
        self.columns = [c.name for c in cfg.columns]
        self.keys = list(cfg.primary_key)
        self.data = [c for c in self.columns if c not in self.keys]
        self.tracked = [self.data.index(c) for c in cfg.track_history] if cfg.track_history else None
        t = quote(cfg.table)
        qualified = ", ".join(f"{t}.{quote(c)}" for c in self.columns)
        # the staged changes: the target's column types, every one nullable (LEFT JOIN ON FALSE)
        # (the added columns NULL: MariaDB checks NOT NULL ones without a default even on no rows)
        self.stage_sql = (f"CREATE TEMPORARY TABLE {quote(STAGE)} ({quote(ROW_NUMBER)} BIGINT NULL DEFAULT NULL, "
                          f"{quote(VERSION)} BIGINT NULL DEFAULT NULL, {quote(KIND)} CHAR(1) NULL DEFAULT NULL) "
                          f"SELECT {qualified} FROM (SELECT 1) x LEFT JOIN {t} ON FALSE WHERE FALSE")
        keylist = ", ".join(quote(k) for k in self.keys)
        self.keys_sql = (f"CREATE TEMPORARY TABLE {quote(KEYS)} SELECT {keylist}, MIN({quote(ROW_NUMBER)}) AS "
                         f"{quote(GROUP)}, MIN({quote(VERSION)}) AS {quote(LOWEST)} FROM {quote(STAGE)} GROUP BY {keylist}")
        on = " AND ".join(f"s.{quote(k)} = g.{quote(k)}" for k in self.keys)
        self.events_sql = (f"SELECT g.{quote(GROUP)}, s.{quote(ROW_NUMBER)}, s.{quote(VERSION)}, s.{quote(KIND)}, "
                           + ", ".join(f"s.{quote(c)}" for c in self.data)
                           + f" FROM {quote(STAGE)} s JOIN {quote(KEYS)} g ON {on} "
                           f"ORDER BY g.{quote(GROUP)}, s.{quote(VERSION)}, s.{quote(ROW_NUMBER)}")
        on_h = " AND ".join(f"h.{quote(k)} = g.{quote(k)}" for k in self.keys)
        on_p = " AND ".join(f"p.{quote(k)} = g.{quote(k)}" for k in self.keys)
        v = quote(VERSION)
        self.key_groups_sql = f"SELECT {quote(GROUP)}, {keylist} FROM {quote(KEYS)}"
        self.segment_sql = (
            f"SELECT g.{quote(GROUP)}, h.{v}, h.{quote(VERSION_COLUMN)}, h.{quote(OP)}, h.{quote(VALID_TO)}, "
            f"h.{quote(CURRENT)}, " + ", ".join(f"h.{quote(c)}" for c in self.data) + " "
            f"FROM {quote(KEYS)} g JOIN {t} h ON {on_h} WHERE h.{v} >= COALESCE((SELECT MAX(p.{v}) FROM {t} p "
            f"WHERE {on_p} AND p.{v} <= g.{quote(LOWEST)}), g.{quote(LOWEST)}) ORDER BY g.{quote(GROUP)}, h.{v}")
        self.drop_sql = f"DROP TEMPORARY TABLE IF EXISTS {quote(STAGE)}, {quote(KEYS)}"
        own = [VALID_FROM, VALID_TO, CURRENT, OP, VERSION, VERSION_COLUMN]
        every = [*self.columns, *own]
        marks = ", ".join(["%s"] * len(every))  # values only: the driver sends many rows per statement
        self.write_sql = (f"INSERT INTO {t} ({', '.join(quote(c) for c in every)}) VALUES ({marks}) "
                          "ON DUPLICATE KEY UPDATE " + ", ".join(f"{quote(c)} = VALUES({quote(c)})"
                                                                 for c in [*self.data, *own] if c != VERSION))
        where = " AND ".join(f"{quote(k)} = %s" for k in [*self.keys, VERSION])
        self.remove_sql = f"DELETE FROM {t} WHERE {where}"


# -- applying ------------------------------------------------------------------------------------------
def kept_of(sql: HistoryStatements, frame: pa.Table, rule: Any) -> tuple[list[frozenset[int]], dict[int, pa.Array]]:
    """Per change, the indices (in ``sql.data``) of its values that keep the previous version's
    (connectors/partial.py), and per such column (its index in ``sql.columns``) the mask."""
    kept: list[set[int]] = [set() for _ in range(frame.num_rows)]
    masks: dict[int, pa.Array] = {}
    if rule.active:
        for k, name in enumerate(sql.data):
            at = sql.columns.index(name)
            mask = rule.kept(name, frame.column(f"c_{at}"))
            if mask is None or not pc.any(mask).as_py():
                continue
            masks[at] = mask
            for row in pc.indices_nonzero(mask).to_pylist():
                kept[row].add(k)
    return [frozenset(k) for k in kept], masks


def staged(sql: HistoryStatements, frame: pa.Table, masks: dict[int, pa.Array]) -> tuple[list[str], list[Any]]:
    """The staged columns of a sink frame (c_0… in the order of the config's columns; a kept value
    as NULL), its row numbers, versions and kinds (d: a delete, r: a snapshot read, u: another upsert)."""
    columns: list[Any] = []
    for i in range(len(sql.columns)):
        values = frame.column(f"c_{i}").combine_chunks()
        columns.append(pc.if_else(masks[i], pa.nulls(len(values), values.type), values) if i in masks else values)
    read = pc.equal(frame.column("source_op"), "r") if "source_op" in frame.column_names else pa.nulls(
        frame.num_rows, pa.bool_())
    kinds = pc.if_else(pc.equal(frame.column("change_op"), "delete"), "d", pc.if_else(pc.fill_null(read, False), "r", "u"))
    return ([*sql.columns, ROW_NUMBER, VERSION, KIND],
            [*columns, pa.array(range(frame.num_rows), pa.int64()), frame.column("version"), kinds])


def apply_history(conn: sa.Connection, sql: HistoryStatements, frame: pa.Table, rule: Any,
                  load: Any, payload_bytes: int) -> SinkStats:
    """A sink frame's changes into the history table, on ``conn``'s transaction: staged (``load``:
    connectors/mysql/apply.load) and read back as MySQL holds them, folded per key with the stored
    versions they can change (:func:`fold`), and the versions that changed written."""
    kept, masks = kept_of(sql, frame, rule)
    cursor = conn.connection.cursor()
    cursor.execute(sql.drop_sql)  # left by a batch that failed earlier in this transaction
    cursor.execute(sql.stage_sql)
    load(cursor, STAGE, *staged(sql, frame, masks), payload_bytes)
    cursor.execute(sql.keys_sql)
    cursor.execute(sql.events_sql)
    events: dict[int, list[Event]] = {}
    for group, n, version, kind, *values in cursor.fetchall():
        events.setdefault(group, []).append(Event(version, kind == "d", tuple(values), kept[n], read=kind == "r"))
    cursor.execute(sql.key_groups_sql)
    keys = {group: tuple(key) for group, *key in cursor.fetchall()}
    cursor.execute(sql.segment_sql)
    stored: dict[int, list[Version]] = {}
    for group, version, last, op, valid_to, current, *data in cursor.fetchall():
        row = Version(version, last, op, list(data), stored=True)
        row.held = (last, op, tuple(data), valid_to is not None, bool(current))
        stored.setdefault(group, []).append(row)
    cursor.execute(sql.drop_sql)
    stats = SinkStats()
    writes: list[tuple[Any, ...]] = []
    removes: list[tuple[Any, ...]] = []
    for group, changes in events.items():
        before = stored.get(group, [])
        nexts = {v.version: (before[i + 1].version if i + 1 < len(before) else None) for i, v in enumerate(before)}
        folded = fold(before, changes, sql.tracked)
        stats.upserted += folded.upserted
        stats.deleted += folded.deleted
        stats.stale += folded.stale
        stats.unchanged += folded.unchanged
        removes += [(*keys[group], v) for v in folded.gone]
        for row, (nxt, current) in zip(folded.rows, intervals(folded.rows), strict=True):
            if row.stored and nexts.get(row.version, -1) == nxt and row.held == (
                    row.last, row.op, tuple(row.values), nxt is not None, current):
                continue  # as the table holds it
            writes.append(_row_params(sql, keys[group], row, nxt, current))
    if removes:
        cursor.executemany(sql.remove_sql, removes)
    if writes:
        cursor.executemany(sql.write_sql, writes)
    stats.count(sql.cfg.table, stats.upserted, stats.deleted)
    return stats


def _row_params(sql: HistoryStatements, key: tuple[Any, ...], row: Version, nxt: int | None,
                current: bool) -> tuple[Any, ...]:
    values = dict(zip(sql.data, row.values, strict=True))
    values.update(zip(sql.keys, key, strict=True))
    return (*(values[c] for c in sql.columns), source_time(row.version), None if nxt is None else source_time(nxt),
            1 if current else 0, row.op, row.version, row.last)


def source_time(version: int) -> datetime:
    """A version's source time (its milliseconds, UTC, naive as MySQL's DATETIME holds it)."""
    return EPOCH + timedelta(milliseconds=version // SOURCE_MS)
