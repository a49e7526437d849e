"""A window's default path without a service: raw Debezium records from a memory source, decoded,
projected to a table's columns with the last change per key (as the read task does), written to a
memory sink; a replay of an older part of the stream leaves the table as it is."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from connectors.debezium.envelope import hints_from_columns
from connectors.formats import decoder
from connectors.memory import MemorySink, MemorySource, MemoryStore, Record
from connectors.mysql.config import MySqlSinkConfig
from connectors.mysql.sink import arrow_changes
from spark_jobs.project.tables import key_columns, latest_rows, project_rows
from tests.unit.connectors.debezium.test_envelope import env

SINK = MySqlSinkConfig(type="mysql", table="orders", primary_key=["id"],
                       columns=[{"name": "id", "type": "BIGINT"}, {"name": "name", "type": "VARCHAR(10)"},
                                {"name": "amount", "type": "DECIMAL(6,2)"}])
STREAM = [
    (b'{"id":1}', env("c", None, {"id": 1, "name": "a", "amount": "1.50"}, 10)),
    (b'{"id":2}', env("c", None, {"id": 2, "name": "b", "amount": "2.00"}, 11)),
    (b'{"id":1}', env("u", {"id": 1}, {"id": 1, "name": "a2", "amount": "1.75"}, 12)),
    (b'{"id":2}', env("d", {"id": 2, "name": "b", "amount": "2.00"}, None, 13)),
    (b'{"id":3}', env("c", None, {"id": 3, "name": "c", "amount": None}, 14)),
]


def window(source: MemorySource, store: MemoryStore, start: int = 0, end: int | None = None) -> MemorySink:
    hints = hints_from_columns((c.source_field, c.type, c.encoding) for c in SINK.columns)
    decoded = pa.table(decoder("debezium", "source_ts_ms", hints, False).decode_batch(source.batch(start, end)))
    op = pc.fill_null(decoded.column("change_op"), "")
    valid = decoded.filter(pc.and_(pc.is_null(decoded.column("error_stage")), pc.not_equal(op, "")))
    rows = latest_rows(project_rows(valid, SINK), key_columns(SINK))
    sink = MemorySink("orders", SINK.table, store)
    sink.open()
    try:
        failed = [f for batch in rows.to_batches() for f in sink.write(arrow_changes(batch, SINK))] + sink.flush()
        assert failed == []
    finally:
        sink.close()
    return sink


def test_a_window_through_memory_and_an_older_replay_changes_nothing() -> None:
    source = MemorySource([Record("orders", 0, i, k, v, 1000 + i) for i, (k, v) in enumerate(STREAM)])
    store = MemoryStore()
    first = window(source, store)
    # the values as the projection gives them to MySQL: exact texts
    assert store.table("orders") == {("1",): {"id": "1", "name": "a2", "amount": "1.75"},
                                     ("3",): {"id": "3", "name": "c", "amount": None}}
    # key 2 was inserted and deleted in the window: its last change, a delete, found no row (unchanged)
    assert (first.stats.upserted, first.stats.deleted, first.stats.unchanged) == (2, 0, 1)
    before = store.table("orders")
    replay = window(source, store, 0, 3)  # an older window: the first three records again
    assert store.table("orders") == before
    # key 2's insert is older than its delete (stale); key 1's update is the one stored (the same: unchanged)
    assert (replay.stats.stale, replay.stats.upserted, replay.stats.unchanged) == (1, 0, 1)
