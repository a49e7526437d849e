"""The MySQL sink's two apply paths on the real MariaDB: the set-based path (staging tables, one
statement per set) must leave exactly the state the row path leaves, keep every guarantee (never
older, no resurrected delete, idempotent) and send only the bad rows of a rejected batch to the DLQ."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa

from cdcflow.config import MySqlSinkConfig
from cdcflow.connections import get_connection
from connectors.mysql import sink as mysql_sink
from connectors.mysql.sink import MySqlSink
from tests.helpers import mysql_engine, unique

pytestmark = [pytest.mark.integration, pytest.mark.services("mysql")]

COLUMNS = [{"name": "id", "type": "BIGINT"}, {"name": "name", "type": "VARCHAR(32)"},
           {"name": "amount", "type": "DECIMAL(10,2)"}, {"name": "note", "type": "TEXT"},
           {"name": "score", "type": "DOUBLE"}]
HOSTILE = ["it's", 'say "hi"', "back\\slash", "tab\there", "new\nline", "cr\rlf", "nul\x00byte", "ctrl-z\x1a",
           "100% sure", "'); DROP TABLE x; --", "emoji \U0001F600 é", "", "NULL", "\\N", "\\"]


@pytest.fixture(autouse=True)
def _small_sets_take_the_set_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests' sets are small; the set path is what they test (a set of at most ROW_PATH_MAX
    changes takes the row path: test_a_small_set_takes_the_row_path_with_the_same_result)."""
    monkeypatch.setattr(mysql_sink, "ROW_PATH_MAX", 0)


def make_sink(table: str, apply: str, **extra: Any) -> MySqlSink:
    cfg = MySqlSinkConfig(type="mysql", name="m", table=table, primary_key=["id"], columns=COLUMNS,
                          create_table=True, apply=apply, **{"batch_size": 7, **extra})
    sink = MySqlSink(cfg, get_connection("cdcflow_mysql").sqlalchemy_url())
    sink.open()
    return sink


def batch(rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
    """The window's sink frame as the writer task sees it: (op, version, id, name, amount, note, score)."""
    n = len(rows)
    col = list(zip(*rows, strict=True)) if rows else [[]] * 7
    return pa.RecordBatch.from_pydict({
        "topic": ["t"] * n, "partition": [0] * n, "offset": list(range(n)),
        "key": pa.array([b"k"] * n, pa.binary()), "value": pa.array([b"v"] * n, pa.binary()),
        "headers": pa.array([[]] * n, pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
        "change_op": list(col[0]), "version": pa.array(col[1], pa.int64()), "c_0": pa.array(col[2], pa.int64()),
        "c_1": pa.array(col[3], pa.string()), "c_2": pa.array(col[4], pa.decimal128(10, 2)),
        "c_3": pa.array(col[5], pa.string()), "c_4": pa.array(col[6], pa.float64())})


def apply(sink: MySqlSink, rows: list[tuple[Any, ...]]) -> list[Any]:
    failed = sink.write_arrow(batch(rows))
    return failed + sink.flush()


def table_rows(table: str) -> list[tuple[Any, ...]]:
    with mysql_engine().connect() as conn:
        return [tuple(r) for r in conn.exec_driver_sql(
            f"SELECT id, name, amount, note, score, __cdc_version FROM `{table}` ORDER BY id").all()]


def hostile_changes() -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    for i, text in enumerate(HOSTILE):
        rows.append(("upsert", 10 + i, i, text[:32], Decimal(f"{i}.25"), text * 3, i / 3 if i % 4 else None))
    rows.append(("upsert", 50, 100, None, None, None, -1.5e-7))  # every nullable column null
    rows.append(("delete", 60, 101, None, None, None, None))    # a delete of a key never seen
    return rows


def test_set_path_writes_exactly_what_the_row_path_writes_for_hostile_values() -> None:
    t_set, t_rows = unique("set"), unique("rows")
    sinks = make_sink(t_set, "set"), make_sink(t_rows, "rows")
    try:
        for s in sinks:
            assert apply(s, hostile_changes()) == []
        assert table_rows(t_set) == table_rows(t_rows)
        got = {r[0]: r for r in table_rows(t_set)}
        assert got[0][1] == "it's" and got[6][3] == "nul\x00byte" * 3 and got[10][1] == "emoji \U0001F600 é"
        assert got[12][1] == "NULL" and got[13][1] == "\\N" and got[100][1:5] == (None, None, None, -1.5e-7)
        assert sinks[0].stats.extra.get("set_batches") == 1 and sinks[0].stats.upserted == len(HOSTILE) + 1
        # the delete of a key never seen deleted nothing (issue 40): both paths count it unchanged
        assert [(s.stats.upserted, s.stats.deleted, s.stats.stale, s.stats.unchanged) for s in sinks] == [
            (len(HOSTILE) + 1, 0, 0, 1)] * 2
    finally:
        for s in sinks:
            s.close()


def test_a_small_set_takes_the_row_path_with_the_same_result(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mysql_sink, "ROW_PATH_MAX", 64)
    t_small, t_set = unique("small"), unique("set")
    small = make_sink(t_small, "set")
    try:
        assert apply(small, hostile_changes()) == []
        monkeypatch.setattr(mysql_sink, "ROW_PATH_MAX", 0)
        big = make_sink(t_set, "set")
        assert apply(big, hostile_changes()) == []
        big.close()
        assert table_rows(t_small) == table_rows(t_set)
        assert "set_batches" not in small.stats.extra and small.stats.upserted == len(HOSTILE) + 1
        assert (small.stats.deleted, small.stats.unchanged) == (0, 1)  # a delete of a key never seen
        # the row path keeps the guard: an older replay neither goes back nor resurrects the delete
        monkeypatch.setattr(mysql_sink, "ROW_PATH_MAX", 64)
        small.close()
        small = make_sink(t_small, "set")
        assert apply(small, [("upsert", 1, 0, "older", Decimal("1.00"), None, None),
                             ("upsert", 60, 101, "deleted before", None, None, None)]) == []
        assert table_rows(t_small) == table_rows(t_set)
        # both older than what the table holds: a newer row, and the key's tombstone
        assert (small.stats.upserted, small.stats.stale, small.stats.unchanged) == (0, 2, 0)
    finally:
        small.close()


def test_set_path_never_goes_back_and_never_resurrects_a_delete() -> None:
    table = unique("guard")
    sink = make_sink(table, "set")
    try:
        assert apply(sink, [("upsert", 20, 1, "new", Decimal("2.00"), None, None),
                            ("upsert", 20, 2, "doomed", Decimal("1.00"), None, None)]) == []
        assert apply(sink, [("delete", 30, 2, None, None, None, None)]) == []
        sink.close()
        sink = make_sink(table, "set")  # a replay starts a new task: it reads the newest tombstone
        # a replay of older changes: neither the older value nor the deleted key may come back
        assert apply(sink, [("upsert", 10, 1, "old", Decimal("9.00"), None, None),
                            ("upsert", 10, 2, "doomed", Decimal("1.00"), None, None),
                            ("upsert", 40, 3, "fresh", Decimal("3.00"), None, None)]) == []
        assert table_rows(table) == [(1, "new", Decimal("2.00"), None, None, 20),
                                     (3, "fresh", Decimal("3.00"), None, None, 40)]
        # stale: the tombstoned key, and the older row the version guard kept; the new key upserted
        assert (sink.stats.upserted, sink.stats.stale, sink.stats.unchanged) == (1, 2, 0)
        # the same window again is a no-op
        assert apply(sink, [("upsert", 40, 3, "fresh", Decimal("3.00"), None, None)]) == []
        assert table_rows(table)[-1] == (3, "fresh", Decimal("3.00"), None, None, 40)
        assert (sink.stats.upserted, sink.stats.stale, sink.stats.unchanged) == (1, 2, 1)
        # an upsert newer than the tombstone brings the key back, as the row path does
        assert apply(sink, [("upsert", 50, 2, "reborn", Decimal("5.00"), None, None)]) == []
        assert table_rows(table)[1] == (2, "reborn", Decimal("5.00"), None, None, 50)
    finally:
        sink.close()


@pytest.mark.parametrize("stage", ["load_data", "insert"])
def test_a_rejected_set_falls_back_to_rows_and_only_the_bad_row_fails(stage: str) -> None:
    """With LOAD DATA (connectors/mysql/local_load.py) MariaDB would cut the value with a warning:
    the set is staged again by INSERT, strict mode rejects it there, and only its row fails."""
    table = unique("bad")
    sink = make_sink(table, "set", stage=stage)
    try:
        rows = [("upsert", 5, i, f"name{i}", Decimal(i), None, None) for i in range(20)]
        rows[13] = ("upsert", 5, 13, "x" * 40, Decimal(13), None, None)  # too long for VARCHAR(32)
        failed = apply(sink, rows)
        assert [(f.offset, f.stage) for f in failed] == [(13, "sink")]
        assert "(key [13])" in failed[0].message and "Data too long for column 'name'" in failed[0].message
        assert failed[0].value == b"v"  # the original bytes, for the DLQ
        assert [r[0] for r in table_rows(table)] == [i for i in range(20) if i != 13]
        assert sink.stats.extra.get("set_fallbacks") == 1 and sink.stats.failed == 1
    finally:
        sink.close()


def test_large_sets_are_split_into_transactions_and_statements(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mysql_sink, "SET_PAYLOAD_BYTES", 2_000)  # many INSERTs per staging load
    table = unique("split")
    sink = make_sink(table, "set", set_rows=300)
    try:
        rows = [("upsert", 7, i, f"n{i}", Decimal(i % 1000), "z" * (i % 50), float(i)) for i in range(1_000)]
        for start in range(0, 1_000, 100):  # the writer task gets batches; 300 rows make a transaction
            assert sink.write_arrow(batch(rows[start:start + 100])) == []
        assert sink.flush() == []
        assert sink.stats.extra["set_batches"] == 4 and sink.stats.upserted == 1_000
        with mysql_engine().connect() as conn:
            count, total = conn.execute(sa.text(f"SELECT COUNT(*), SUM(LENGTH(note)) FROM `{table}`")).one()
        assert (count, total) == (1_000, sum(i % 50 for i in range(1_000)))
    finally:
        sink.close()


def test_a_window_commits_its_rows_and_offsets_together_and_a_committed_run_writes_nothing_again() -> None:
    """Exactly-once on the sink itself (the window job's own path runs on the Spark server's code)."""
    from connectors.mysql.offsets import OffsetCommit, SinkOffsets

    table, pipeline = unique("eo"), unique("eo_pipeline")
    offsets = SinkOffsets(get_connection("cdcflow_mysql").sqlalchemy_url())
    commit = OffsetCommit(pipeline, "run-1", "advance", (("t", 0, 0, 2),))
    rows = [("upsert", 1, 1, "a", Decimal("1.00"), None, None), ("upsert", 2, 2, "b", None, None, None)]
    try:
        sink = make_sink(table, "set")
        assert sink.begin_window(commit)
        assert apply(sink, rows) == []
        sink.close()  # killed before its commit: nothing of the window stays
        assert table_rows(table) == [] and offsets.load(pipeline) == {}
        sink = make_sink(table, "set")
        assert sink.begin_window(commit)
        assert apply(sink, rows) == []
        assert sink.commit_window(commit) == {"advanced": {"t:0": 2}, "left": {}}
        sink.close()
        assert table_rows(table) == [(1, "a", Decimal("1.00"), None, None, 1), (2, "b", None, None, None, 2)]
        assert offsets.load(pipeline) == {("t", 0): (2, "run-1")}
        sink = make_sink(table, "set")
        assert not sink.begin_window(commit)  # this run committed already: nothing to write
        sink.close()
    finally:
        offsets.close()


def test_many_tables_in_one_transaction_and_a_truncate_mark_keeps_older_changes_out() -> None:
    table_a, table_b = unique("ja"), unique("jb")
    url = get_connection("cdcflow_mysql").sqlalchemy_url()
    engine = mysql_sink.writer_engine(url, shared=True)
    cfgs = [MySqlSinkConfig(type="mysql", name="m", table=t, primary_key=["id"], columns=COLUMNS, create_table=True)
            for t in (table_a, table_b)]
    sinks = [MySqlSink(cfg, url, engine=engine) for cfg in cfgs]
    try:
        mysql_sink.prepare_tables(url, sinks)
        mysql_sink.read_newest_tombstones(engine, sinks)
        with mysql_sink.one_transaction(engine, sinks):
            for i, sink in enumerate(sinks):
                sink.open(prepared=True)
                assert apply(sink, [("upsert", 10, i, f"in {sink.cfg.table}", None, None, None)]) == []
                sink.close()
        assert [table_rows(t) for t in (table_a, table_b)] == [[(0, f"in {table_a}", None, None, None, 10)],
                                                               [(1, f"in {table_b}", None, None, None, 10)]]
        assert mysql_sink.truncate_tables(url, {table_a: 20}, "m") == {table_a: 1}
        sink = make_sink(table_a, "set")
        assert apply(sink, [("upsert", 15, 5, "older than the TRUNCATE", None, None, None),
                            ("upsert", 25, 6, "newer", None, None, None)]) == []
        sink.close()
        assert table_rows(table_a) == [(6, "newer", None, None, None, 25)] and sink.stats.stale == 1
    finally:
        engine.dispose()


def test_the_row_path_counts_deletes_whatever_their_keys_hash_to() -> None:
    """The row path reads the versions the table holds, and the tombstones, of each change's key to
    count it (connectors/mysql/apply.py). Unnamed, a lookup's columns were named after their SQL text,
    the tombstone's SHA-1 bytes included; MariaDB passes a surrogate-like sequence (ED A0-BF 80-BF)
    as a name the driver cannot decode, the connection was lost mid-result and every later window
    failed ('Packet sequence number wrong'; the 200-fault campaign of 0aa4dd1 from its 18th fault
    on). Keys 143 and 804 hash to such bytes."""
    table = unique("many")
    sink = make_sink(table, "rows", batch_size=500)
    try:
        keys = [143, 804, *range(300)]
        rows = [("upsert", 10, i, f"n{i}", Decimal(i), None, None) for i in dict.fromkeys(keys)]
        assert apply(sink, rows) == []
        deletes = [("delete", 20, i, None, None, None, None) for i in (143, 804, *range(0, 100, 2))]  # held
        deletes += [("delete", 20, i, None, None, None, None) for i in range(1000, 1050)]  # never there
        assert apply(sink, deletes) == []
        assert (sink.stats.upserted, sink.stats.deleted, sink.stats.stale, sink.stats.unchanged) == (301, 52, 0, 50)
        # replayed: the rows upserted before their deletes are older than the tombstones; the
        # deletes again find no row and the same tombstone: unchanged
        assert apply(sink, rows + deletes) == []
        assert (sink.stats.upserted, sink.stats.deleted, sink.stats.stale, sink.stats.unchanged) == (
            301, 52, 52, 50 + 249 + 102)
        assert [r[0] for r in table_rows(table)] == [i for i in range(300) if (i >= 100 or i % 2) and i != 143]
    finally:
        sink.close()
