"""The state store on MySQL (MariaDB here), as docker-compose.yaml runs it (CDCFLOW_OFFSET_STORE_URL
on the mysql service): its tables are created, and a window is planned, read, committed and found, and
counted once in the metrics' totals. ``round_trip`` does the same on any database (PostgreSQL:
tests/integration/cdcflow/airflow/test_celery.py)."""

from __future__ import annotations

import uuid

import pytest

from cdcflow.connections import get_connection
from cdcflow.state import PartitionWindow, StateStore

pytestmark = [pytest.mark.integration, pytest.mark.services("mysql")]


def test_the_state_store_creates_its_tables_and_commits_on_mysql() -> None:
    """Every table's key fits InnoDB's 3,072 bytes in utf8mb4 (cdcflow_schema_changes' did not)."""
    round_trip(get_connection("cdcflow_mysql").sqlalchemy_url())


def round_trip(url: str) -> None:
    """The state store at ``url`` creates its tables, plans, reads, commits and finds windows, keeps
    schema changes with long keys, and counts a window once in the metrics' totals."""
    store = StateStore(url)
    pipeline = f"p_{uuid.uuid4().hex[:8]}"
    try:
        for run, attempts in (("retried", 2), ("next", 0)):
            window = store.offsets.plan(pipeline, run, "stored", [PartitionWindow("t", 0, 100 if attempts else 120, 50)])
            for _ in range(attempts):
                store.ledger.begin_attempt(pipeline, run)
            if attempts:
                store.offsets.record_read(pipeline, run, {("t", 0): (120, 20)})
                store.offsets.commit(pipeline, run)
        assert store.offsets.load(pipeline) == {("t", 0): 120}
        # it planned up to 150
        assert store.ledger.runs_that_may_have_sent_dead_letters(pipeline, window) == ["retried"]
        key = "orders.note: add LONGTEXT " + "x" * 470  # change keys up to 500 characters
        store.operator.record_schema_pending(pipeline, "next", {key: {"key": key, "table": "orders"}})
        assert [c["key"] for c in store.operator.schema_changes(pipeline)] == [key]
        # the metrics' totals (cdcflow/state/totals.py): a failed attempt, then the window committed, twice
        store.ledger.mark(pipeline, "next", "failed", "attempt 1: SinkUnavailable: down")
        store.offsets.record_read(pipeline, "next", {("t", 0): (130, 10)})
        store.ledger.mark(pipeline, "next", "applied", None, {"sinks": {"m": {"upserted": 7, "unchanged": 3}}})
        store.offsets.commit(pipeline, "next")
        store.offsets.commit(pipeline, "next")
        totals = store.totals.read(pipeline)
        assert totals["cdcflow_windows"] == [({"outcome": "committed"}, 2.0)]
        assert totals["cdcflow_window_attempts_failed"] == [({}, 1.0)]
        assert totals["cdcflow_records_read"] == [({"partition": "0", "topic": "t"}, 30.0)]
        assert {d["outcome"]: v for d, v in totals["cdcflow_sink_records"]} == {
            "upserted": 7, "deleted": 0, "stale": 0, "unchanged": 3, "failed": 0}
        assert len(totals["cdcflow_last_committed_at"]) == 1
    finally:
        store.close()
