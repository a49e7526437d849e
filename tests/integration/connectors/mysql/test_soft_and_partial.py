"""Issue 44 on the real MariaDB: ``delete: soft`` and partial updates through the MySQL sink's two apply
paths (the set path: staging tables; the row path: ``apply: rows``, and a small set), with the values
read back, never counts alone.

Versions are ``source_ts_ms`` versions (ts_ms * 2^20 + offset low bits, docs/semantics.md): the
deleted column holds the delete's source time, read back from MariaDB.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest

from cdcflow.config import MySqlSinkConfig
from cdcflow.connections import get_connection
from connectors.mysql import sink as mysql_sink
from connectors.mysql.sink import MySqlSink
from connectors.partial import DEBEZIUM_UNAVAILABLE
from tests.helpers import mysql_engine, unique

pytestmark = [pytest.mark.integration, pytest.mark.services("mysql")]

# body: a TEXT NOT NULL without a default, as a TOASTed PostgreSQL column usually is
COLUMNS = [{"name": "id", "type": "BIGINT"}, {"name": "name", "type": "VARCHAR(32)"},
           {"name": "body", "type": "TEXT NOT NULL"}, {"name": "qty", "type": "INT"}]
SHIFT = 1 << 20
PATHS = ["set", "small set", "rows"]


def v(ts_ms: int, offset: int = 0) -> int:
    """A source_ts_ms version: the change's source time in ms and its offset's low bits."""
    return ts_ms * SHIFT + offset


def at(ts_ms: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=ts_ms)


FILLERS = {"on": True}  # whether filler() gives rows: not for the small sets


@pytest.fixture(params=PATHS)
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The set path (ROW_PATH_MAX 0, and sets of 70 rows and more), a set small enough for the row path
    (the default ROW_PATH_MAX, and no filler rows), and apply: rows."""
    small = request.param == "small set"
    monkeypatch.setattr(mysql_sink, "ROW_PATH_MAX", 64 if small else 0)
    monkeypatch.setitem(FILLERS, "on", not small)
    return str(request.param)


def make_sink(table: str, path: str, **extra: Any) -> MySqlSink:
    cfg = MySqlSinkConfig(type="mysql", name="m", table=table, primary_key=["id"], columns=COLUMNS,
                          create_table=True, apply="rows" if path == "rows" else "set", **extra)
    sink = MySqlSink(cfg, get_connection("cdcflow_mysql").sqlalchemy_url())
    sink.open()
    return sink


def batch(rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
    """The writer's sink frame: (op, version, id, name, body, qty)."""
    n = len(rows)
    col = list(zip(*rows, strict=True))
    return pa.RecordBatch.from_pydict({
        "topic": ["t"] * n, "partition": [0] * n, "offset": list(range(n)),
        "key": pa.array([b"k"] * n, pa.binary()), "value": pa.array([b"v"] * n, pa.binary()),
        "headers": pa.array([[]] * n, pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
        "change_op": list(col[0]), "version": pa.array(col[1], pa.int64()), "c_0": pa.array(col[2], pa.int64()),
        "c_1": pa.array(col[3], pa.string()), "c_2": pa.array(col[4], pa.string()),
        "c_3": pa.array(col[5], pa.int32())})


def apply(sink: MySqlSink, rows: list[tuple[Any, ...]]) -> list[Any]:
    return sink.write_arrow(batch(rows)) + sink.flush()


def read(table: str, deleted: str | None = "__deleted_at") -> dict[int, tuple[Any, ...]]:
    """id -> (name, body, qty, the deleted column (None without one), __cdc_version)."""
    with mysql_engine().connect() as conn:
        return {r[0]: tuple(r[1:]) for r in conn.exec_driver_sql(
            f"SELECT id, name, body, qty, {f'`{deleted}`' if deleted else 'NULL'}, __cdc_version FROM `{table}` "
            "ORDER BY id")}


def filler(first: int, n: int = 70) -> list[tuple[Any, ...]]:
    """Rows of other keys, so that a set is a set (the set path stages sets of more than ROW_PATH_MAX)."""
    if not FILLERS["on"]:
        return []
    return [("upsert", v(1_000), i, f"f{i}", "filler", i) for i in range(first, first + n)]


def test_a_soft_delete_keeps_the_row_with_its_source_time_and_only_a_newer_change_brings_it_back(path: str) -> None:
    table = unique("soft")
    sink = make_sink(table, path, delete="soft")
    try:
        assert apply(sink, [("upsert", v(10_000), 1, "a", "first body", 5),
                            ("upsert", v(10_000, 1), 2, "b", "other", 6), *filler(100)]) == []
        deleted_ms = 1_764_000_000_123  # 2025-11-24T16:00:00.123Z
        assert apply(sink, [("delete", v(deleted_ms, 7), 1, None, None, None),
                            ("delete", v(deleted_ms, 8), 3, None, None, None)]) == []  # 3: never held
        rows = read(table)
        assert rows[1] == ("a", "first body", 5, at(deleted_ms), v(deleted_ms, 7))  # kept, marked, its version
        assert rows[2] == ("b", "other", 6, None, v(10_000, 1)) and 3 not in rows
        assert (sink.stats.deleted, sink.stats.unchanged) == (1, 1)
        assert ("set_batches" in sink.stats.extra) is (path == "set")
        sink.close()

        # a replay: an older upsert of the deleted key (and of the key deleted unseen) is refused,
        # the same delete again changes nothing
        sink = make_sink(table, path, delete="soft")
        assert apply(sink, [("upsert", v(20_000), 1, "older", "older body", 9),
                            ("upsert", v(20_000), 3, "older", "never", 1),
                            ("delete", v(deleted_ms, 7), 1, None, None, None), *filler(100)]) == []
        rows = read(table)
        assert rows[1] == ("a", "first body", 5, at(deleted_ms), v(deleted_ms, 7)) and 3 not in rows
        assert (sink.stats.upserted, sink.stats.deleted, sink.stats.stale) == (0, 0, 2)

        # a newer insert of the key clears the deleted time
        assert apply(sink, [("upsert", v(deleted_ms + 5, 9), 1, "back", "new body", 1), *filler(200)]) == []
        assert read(table)[1] == ("back", "new body", 1, None, v(deleted_ms + 5, 9))
    finally:
        sink.close()


def test_partial_updates_keep_the_stored_values_of_placeholders_and_listed_nulls(path: str) -> None:
    table = unique("partial")
    sink = make_sink(table, path, ignore_null_updates=["qty"])
    try:
        assert apply(sink, [("upsert", v(1_000), 1, "a", "a long text, TOASTed at the source", 5),
                            ("upsert", v(1_000), 2, "b", "two", None), *filler(100)]) == []
        # an update of name only: the TOASTed body is the placeholder, qty (MINIMAL image) null
        assert apply(sink, [("upsert", v(2_000), 1, "a2", DEBEZIUM_UNAVAILABLE, None),
                            ("upsert", v(2_000), 2, None, "two, changed", 3), *filler(200)]) == []
        rows = read(table, None)
        assert rows[1] == ("a2", "a long text, TOASTed at the source", 5, None, v(2_000))
        assert rows[2] == (None, "two, changed", 3, None, v(2_000))  # name is not listed: its null is written
        # an older partial change (a replay) never applies over the newer row
        assert apply(sink, [("upsert", v(1_500), 1, "older", DEBEZIUM_UNAVAILABLE, 99), *filler(300)]) == []
        assert read(table, None)[1] == ("a2", "a long text, TOASTed at the source", 5, None, v(2_000))
        if path == "set":  # every set applied set-based: the partial statements, not a fallback to rows
            assert sink.stats.extra["set_batches"] == 3 and "set_fallbacks" not in sink.stats.extra
        # a partial change of a key the table does not hold: body has no stored value and no default,
        # so MySQL refuses the row (to the DLQ) and writes the others
        failed = apply(sink, [("upsert", v(3_000), 9, "new", DEBEZIUM_UNAVAILABLE, 1),
                              ("upsert", v(3_000), 2, "b3", DEBEZIUM_UNAVAILABLE, None), *filler(400)])
        assert [f.offset for f in failed] == [0] and "Column 'body' cannot be null" in failed[0].message
        rows = read(table, None)
        assert 9 not in rows and rows[2] == ("b3", "two, changed", 3, None, v(3_000))
        assert sink.stats.failed == 1 and sink.stats.extra.get("set_fallbacks", 0) == (path == "set")
    finally:
        sink.close()


def test_a_partial_change_after_a_soft_delete_revives_the_row_with_its_stored_values(path: str) -> None:
    table = unique("both")
    sink = make_sink(table, path, delete="soft", ignore_null_updates=["qty"])
    try:
        assert apply(sink, [("upsert", v(1_000), 1, "a", "body", 5), *filler(100)]) == []
        assert apply(sink, [("delete", v(2_000), 1, None, None, None)]) == []
        assert read(table)[1] == ("a", "body", 5, at(2_000), v(2_000))
        assert apply(sink, [("upsert", v(1_500), 1, "older", DEBEZIUM_UNAVAILABLE, None), *filler(100)]) == []
        assert read(table)[1] == ("a", "body", 5, at(2_000), v(2_000))  # older than the delete: refused
        assert apply(sink, [("upsert", v(3_000), 1, "again", DEBEZIUM_UNAVAILABLE, None), *filler(200)]) == []
        assert read(table)[1] == ("again", "body", 5, None, v(3_000))
    finally:
        sink.close()


def test_an_existing_table_gets_the_deleted_column_and_its_name_is_the_configs(path: str) -> None:
    table = unique("named")
    sink = make_sink(table, path)  # created with hard deletes: no deleted column
    try:
        assert apply(sink, [("upsert", v(1_000), 1, "a", "body", 5)]) == []
    finally:
        sink.close()
    sink = make_sink(table, path, delete="soft", deleted_column="removed_at")
    try:
        assert apply(sink, [("delete", v(4_000), 1, None, None, None)]) == []
        assert read(table, "removed_at")[1] == ("a", "body", 5, at(4_000), v(4_000))
    finally:
        sink.close()


def test_soft_deletes_and_partial_updates_commit_with_the_offsets_or_not_at_all(path: str) -> None:
    """Exactly-once (offset_store.sink): the soft delete's UPDATE and the partial upserts run in the
    window's one transaction; a window that does not commit leaves neither rows nor offsets."""
    from connectors.mysql.offsets import OffsetCommit, SinkOffsets

    table, pipeline = unique("eo_soft"), unique("eo_soft_pipeline")
    offsets = SinkOffsets(get_connection("cdcflow_mysql").sqlalchemy_url())
    seed = make_sink(table, path, delete="soft")
    assert apply(seed, [("upsert", v(1_000), 1, "a", "body", 5), ("upsert", v(1_000), 2, "b", "two", 6)]) == []
    seed.close()
    window = [("delete", v(2_000), 1, None, None, None), ("upsert", v(2_000), 2, "b2", DEBEZIUM_UNAVAILABLE, 7),
              *filler(100)]
    commit = OffsetCommit(pipeline, "run-1", "advance", (("t", 0, 0, 3),))
    before = read(table)
    try:
        sink = make_sink(table, path, delete="soft")
        assert sink.begin_window(commit)
        assert apply(sink, window) == []
        sink.close()  # killed before its commit
        assert read(table) == before and offsets.load(pipeline) == {}
        sink = make_sink(table, path, delete="soft")
        assert sink.begin_window(commit)
        assert apply(sink, window) == []
        assert sink.commit_window(commit) == {"advanced": {"t:0": 3}, "left": {}}
        sink.close()
        rows = read(table)
        assert rows[1] == ("a", "body", 5, at(2_000), v(2_000)) and rows[2] == ("b2", "two", 7, None, v(2_000))
        assert offsets.load(pipeline) == {("t", 0): (3, "run-1")}
    finally:
        offsets.close()


def test_a_soft_delete_marks_its_before_image_even_when_the_table_never_held_the_row(path: str) -> None:
    """A window reduces an insert and its delete to the delete: Debezium's before image is what the row
    held, so the row is there, marked; an update then a delete: the updated values. A delete known by
    its key alone marks what the table holds."""
    table = unique("soft")
    sink = make_sink(table, path, delete="soft")
    try:
        assert apply(sink, [("upsert", v(1_000), 2, "b", "stored", 1), ("upsert", v(1_000), 3, "c", "kept", 3),
                            *filler(100)]) == []
        deleted_ms = 1_764_000_000_123
        assert apply(sink, [("delete", v(deleted_ms, 1), 1, "a", "inserted and deleted in one window", 5),
                            ("delete", v(deleted_ms, 2), 2, "b2", "updated then deleted", 2),
                            ("delete", v(deleted_ms, 3), 3, None, None, None), *filler(200)]) == []
        rows = read(table)
        assert rows[1] == ("a", "inserted and deleted in one window", 5, at(deleted_ms), v(deleted_ms, 1))
        assert rows[2] == ("b2", "updated then deleted", 2, at(deleted_ms), v(deleted_ms, 2))
        assert rows[3] == ("c", "kept", 3, at(deleted_ms), v(deleted_ms, 3))
        assert (sink.stats.deleted, sink.stats.upserted) == (3, 2 + (140 if FILLERS["on"] else 0))  # the images uncounted
        sink.close()

        sink = make_sink(table, path, delete="soft")  # the window again: nothing changes
        assert apply(sink, [("delete", v(deleted_ms, 1), 1, "a", "inserted and deleted in one window", 5)]) == []
        assert read(table)[1] == rows[1] and sink.stats.deleted == 0
    finally:
        sink.close()
