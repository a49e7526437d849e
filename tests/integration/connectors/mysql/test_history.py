"""Issue 44 on the real MariaDB: ``mode: history`` (SCD type 2) through the MySQL sink, the history table
read back row by row and compared with the history written out by hand from the changes.

Versions are ``source_ts_ms`` versions (ts_ms * 2^20 + offset low bits, docs/semantics.md): a version's
``__valid_from`` is its source time.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa

from cdcflow.config import MySqlSinkConfig
from cdcflow.connections import get_connection
from connectors.errors import ConfigError
from connectors.mysql import tables as sink_tables
from connectors.mysql.sink import MySqlSink, truncate_tables
from connectors.partial import DEBEZIUM_UNAVAILABLE
from tests.helpers import mysql_engine, unique

pytestmark = [pytest.mark.integration, pytest.mark.services("mysql")]

COLUMNS = [{"name": "id", "type": "BIGINT"}, {"name": "status", "type": "VARCHAR(16) NOT NULL"},
           {"name": "note", "type": "TEXT"}, {"name": "qty", "type": "DECIMAL(10,2)"}]
SHIFT = 1 << 20


def v(ts_ms: int, offset: int = 0) -> int:
    return ts_ms * SHIFT + offset


def at(ts_ms: int | None) -> dt.datetime | None:
    return None if ts_ms is None else dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=ts_ms)


def make_sink(table: str, **extra: Any) -> MySqlSink:
    cfg = MySqlSinkConfig(type="mysql", name="h", table=table, primary_key=["id"], columns=COLUMNS,
                          create_table=True, mode="history", **extra)
    sink = MySqlSink(cfg, get_connection("cdcflow_mysql").sqlalchemy_url())
    sink.open()
    return sink


def frame(rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
    """The writer's sink frame: (op, version, id, status, note, qty)."""
    n = len(rows)
    col = list(zip(*rows, strict=True))
    return pa.RecordBatch.from_pydict({
        "topic": ["t"] * n, "partition": [0] * n, "offset": list(range(n)),
        "key": pa.array([b"k"] * n, pa.binary()), "value": pa.array([b"v"] * n, pa.binary()),
        "headers": pa.array([[]] * n, pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
        "change_op": list(col[0]), "version": pa.array(col[1], pa.int64()), "c_0": pa.array(col[2], pa.int64()),
        "c_1": pa.array(col[3], pa.string()), "c_2": pa.array(col[4], pa.string()),
        "c_3": pa.array(col[5], pa.string())})


def apply(sink: MySqlSink, rows: list[tuple[Any, ...]]) -> list[Any]:
    return sink.write_arrow(frame(rows)) + sink.flush()


def history(table: str, key: int) -> list[tuple[Any, ...]]:
    """(status, note, qty, valid_from, valid_to, current, op, __version, __cdc_version) per version."""
    with mysql_engine().connect() as conn:
        return [(r[0], r[1], None if r[2] is None else str(r[2]), *r[3:]) for r in conn.exec_driver_sql(
            "SELECT status, note, qty, __valid_from, __valid_to, __current, __op, __version, __cdc_version "
            f"FROM `{table}` WHERE id = %s ORDER BY __version", (key,))]


def version(status: str | None, note: str | None, qty: str | None, start: int, end: int | None, current: int,
            op: str, opened: int, last: int | None = None) -> tuple[Any, ...]:
    """An expected version: its values, its interval from the source times ``start`` to ``end``."""
    return (status, note, qty, at(start), at(end), current, op, v(opened), v(last if last is not None else opened))


# the changes of key 1, in the order they arrive (a late update at 3,500 arrives after 5,000)
INSERT = ("upsert", v(1_000), 1, "new", "a", "1.00")
UNTRACKED = ("upsert", v(2_000), 1, "new", "b", "2.00")  # status unchanged: in place with track_history
PAID = ("upsert", v(3_000), 1, "paid", "b", "2.00")
DELETE = ("delete", v(4_000), 1, "shipped", "b", "2.00")  # Debezium's before image
REINSERT = ("upsert", v(5_000), 1, "new", "c", "5.00")
LATE = ("upsert", v(3_500), 1, "shipped", "b", "2.00")


def test_one_key_through_its_life_is_the_history_written_by_hand_and_a_replay_changes_nothing() -> None:
    table = unique("hist")
    sink = make_sink(table, track_history=["status"])
    url = sink.url
    try:
        other = ("upsert", v(1_500), 2, "new", "x", "9.00")
        assert apply(sink, [INSERT, UNTRACKED, other]) == []  # two changes of one key in one window
        assert apply(sink, [PAID]) == []
        assert apply(sink, [DELETE, REINSERT]) == []
        assert apply(sink, [LATE]) == []
        expected = [
            version("new", "b", "2.00", 1_000, 3_000, 0, "c", 1_000, last=2_000),  # the untracked change in place
            version("paid", "b", "2.00", 3_000, 3_500, 0, "u", 3_000),
            version("shipped", "b", "2.00", 3_500, 4_000, 0, "u", 3_500),  # the late one, at its place
            version("shipped", "b", "2.00", 4_000, 5_000, 0, "d", 4_000),
            version("new", "c", "5.00", 5_000, None, 1, "c", 5_000),  # inserted again: c
        ]
        assert history(table, 1) == expected
        assert history(table, 2) == [version("new", "x", "9.00", 1_500, None, 1, "c", 1_500)]
        sink.close()

        again = make_sink(table, track_history=["status"])  # every window replayed, in one
        assert apply(again, [INSERT, UNTRACKED, PAID, DELETE, REINSERT, LATE]) == []
        assert history(table, 1) == expected
        assert (again.stats.upserted, again.stats.deleted, again.stats.unchanged) == (0, 0, 6)
        again.close()

        truncated = truncate_tables(url, {table: v(6_000)}, "h", again.cfg)
        assert truncated == {table: 2}  # keys 1 and 2 had a current version
        closed = [*expected[:-1], version("new", "c", "5.00", 5_000, 6_000, 0, "c", 5_000),
                  version("new", "c", "5.00", 6_000, None, 0, "d", 6_000)]
        assert history(table, 1) == closed
        assert truncate_tables(url, {table: v(6_000)}, "h", again.cfg) == {table: 0}  # idempotent
        assert history(table, 1) == closed
        after = make_sink(table, track_history=["status"])
        assert apply(after, [INSERT, ("upsert", v(7_000), 1, "new", "d", "7.00")]) == []
        assert history(table, 1) == [*closed[:-1], version("new", "c", "5.00", 6_000, 7_000, 0, "d", 6_000),
                                     version("new", "d", "7.00", 7_000, None, 1, "c", 7_000)]
        assert after.stats.stale == 1  # older than the truncate
        after.close()
    finally:
        sink.close()


def test_without_track_history_every_change_opens_a_version_and_a_late_one_closes_its_neighbours() -> None:
    table = unique("hist")
    sink = make_sink(table)
    try:
        assert apply(sink, [INSERT, UNTRACKED, PAID]) == []
        assert apply(sink, [("upsert", v(2_500), 1, "new", "late", "2.50")]) == []
        assert history(table, 1) == [
            version("new", "a", "1.00", 1_000, 2_000, 0, "c", 1_000),
            version("new", "b", "2.00", 2_000, 2_500, 0, "u", 2_000),
            version("new", "late", "2.50", 2_500, 3_000, 0, "u", 2_500),
            version("paid", "b", "2.00", 3_000, None, 1, "u", 3_000),
        ]
    finally:
        sink.close()


def test_a_late_change_merges_a_stored_version_that_no_longer_changes_a_tracked_column() -> None:
    """paid at 3,000 was a new version; a late paid at 2,500 makes 3,000 a change in place of it."""
    table = unique("hist")
    sink = make_sink(table, track_history=["status"])
    try:
        assert apply(sink, [INSERT, PAID]) == []
        assert apply(sink, [("upsert", v(2_500), 1, "paid", "early", "2.50")]) == []
        assert history(table, 1) == [
            version("new", "a", "1.00", 1_000, 2_500, 0, "c", 1_000),
            version("paid", "b", "2.00", 2_500, None, 1, "u", 2_500, last=3_000),
        ]
    finally:
        sink.close()


def test_a_kept_value_takes_the_previous_versions_value() -> None:
    table = unique("hist")
    sink = make_sink(table, ignore_null_updates=["qty"])
    try:
        assert apply(sink, [INSERT]) == []
        assert apply(sink, [("upsert", v(2_000), 1, "paid", DEBEZIUM_UNAVAILABLE, None)]) == []
        assert history(table, 1)[-1] == version("paid", "a", "1.00", 2_000, None, 1, "u", 2_000)
    finally:
        sink.close()


def test_a_change_mysql_refuses_goes_to_the_dlq_and_the_others_are_written() -> None:
    table = unique("hist")
    sink = make_sink(table)
    try:
        failed = apply(sink, [INSERT, ("upsert", v(1_000), 2, "x" * 40, "too long a status", "1.00")])
        assert [(f.stage, f.component) for f in failed] == [("sink", "mysql:h")]
        assert "history table" in failed[0].message and "status" in failed[0].message
        assert history(table, 1) == [version("new", "a", "1.00", 1_000, None, 1, "c", 1_000)]
        assert history(table, 2) == []
    finally:
        sink.close()


def test_a_state_table_named_as_a_history_table_is_refused_with_its_definition() -> None:
    table = unique("state")
    with mysql_engine().begin() as conn:
        conn.exec_driver_sql(f"CREATE TABLE `{table}` (id BIGINT PRIMARY KEY, status VARCHAR(16), note TEXT, "
                             "qty DECIMAL(10,2), __cdc_version BIGINT NOT NULL DEFAULT 0)")
    cfg = MySqlSinkConfig(type="mysql", name="h", table=table, primary_key=["id"], columns=COLUMNS, mode="history")
    engine = sa.create_engine(get_connection("cdcflow_mysql").sqlalchemy_url())
    with pytest.raises(ConfigError, match=rf"table '{table}' is not a history table .*lacks the columns "
                                          r"\['__valid_from', '__valid_to', '__current', '__op', '__version'\]"), \
            engine.begin() as conn:
        sink_tables.prepare_table(conn, cfg)
