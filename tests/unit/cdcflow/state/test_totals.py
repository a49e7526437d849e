"""The metrics' cumulative totals (cdcflow/state/totals.py): a window counted once, at its commit,
whatever is retried, re-run or killed; failed attempts counted each; retention never touching them;
an older ledger seeded once."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from cdcflow.state import PartitionWindow, StateStore
from cdcflow.state.tables import runs_table
from cdcflow.state.totals import window_amounts

ROOT = Path(__file__).resolve().parents[4]
STATS: dict[str, Any] = {  # as process() writes them (spark_jobs/job.py::WindowResult.stats)
    "records": 15, "seconds": 1.7, "stages": {"read": 0.3, "sink:m": 0.9},
    "sinks": {"m": {"upserted": 8, "deleted": 2, "stale": 1, "unchanged": 3, "failed": 1},
              "es": {"upserted": 12, "deleted": 2, "stale": 0, "failed": 0}},  # no "unchanged": an older row
    "dead_letters": [{"stage": "sink", "error_class": "pymysql.err.DataError", "count": 1},
                     {"stage": "converter", "error_class": "cdcflow.errors.RecordError", "count": 2}],
}


def _window(store: StateStore, run_id: str, start: int, stats: dict[str, Any] = STATS, pipeline: str = "p") -> None:
    """A window planned over two partitions, read (10 + 5 records) and applied."""
    store.offsets.plan(pipeline, run_id, "stored", [PartitionWindow("t", 0, start, 10), PartitionWindow("t", 1, start, 10)])
    store.offsets.record_read(pipeline, run_id, {("t", 0): (start + 10, 10), ("t", 1): (start + 5, 5)})
    store.ledger.mark(pipeline, run_id, "applied", None, stats)


def _counters(store: StateStore, pipeline: str = "p") -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every total of the pipeline but the time of the newest commit (a gauge)."""
    return {(name, tuple(sorted(labels.items()))): v for name, rows in store.totals.read(pipeline).items()
            for labels, v in rows if name != "cdcflow_last_committed_at"}


def _one_window(windows: int = 1) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """What ``windows`` windows of STATS add up to, written out by hand."""
    n = float(windows)
    out = {
        ("cdcflow_windows", (("outcome", "committed"),)): n,
        ("cdcflow_records_read", (("partition", "0"), ("topic", "t"))): 10 * n,
        ("cdcflow_records_read", (("partition", "1"), ("topic", "t"))): 5 * n,
        ("cdcflow_dead_letters", (("error_class", "pymysql.err.DataError"), ("stage", "sink"))): n,
        ("cdcflow_dead_letters", (("error_class", "cdcflow.errors.RecordError"), ("stage", "converter"))): 2 * n,
        ("cdcflow_window_duration_seconds_bucket", (("le", "2.5"),)): n,
        ("cdcflow_window_duration_seconds_sum", ()): 1.7 * n,
        ("cdcflow_window_stage_seconds_bucket", (("le", "0.5"), ("stage", "read"))): n,
        ("cdcflow_window_stage_seconds_sum", (("stage", "read"),)): 0.3 * n,
        ("cdcflow_window_stage_seconds_bucket", (("le", "1"), ("stage", "sink:m"))): n,
        ("cdcflow_window_stage_seconds_sum", (("stage", "sink:m"),)): 0.9 * n,
    }
    for sink, counts in {"m": (8, 2, 1, 3, 1), "es": (12, 2, 0, 0, 0)}.items():
        for outcome, c in zip(("upserted", "deleted", "stale", "unchanged", "failed"), counts, strict=True):
            out[("cdcflow_sink_records", (("outcome", outcome), ("sink", sink)))] = c * n
    return out


def _close(a: dict[Any, float], b: dict[Any, float]) -> bool:
    return a.keys() == b.keys() and all(abs(a[k] - b[k]) < 1e-9 for k in a)


def test_a_committed_window_adds_its_figures_once(store: StateStore) -> None:
    assert window_amounts(STATS, {("t", 0): 10, ("t", 1): 5}) == {
        (n, labels): v for (n, labels), v in _one_window().items()}
    _window(store, "r1", 0)
    assert _counters(store) == {}  # applied is not final: nothing counted yet
    store.offsets.commit("p", "r1")
    assert _close(_counters(store), _one_window())
    store.offsets.commit("p", "r1")  # a retried commit task
    _window(store, "r1", 0, {**STATS, "sinks": {"m": {"upserted": 99}}})  # the run cleared, re-run, committed again
    store.offsets.commit("p", "r1")
    assert _close(_counters(store), _one_window())
    _window(store, "r2", 10)
    store.offsets.commit("p", "r2")
    assert _close(_counters(store), _one_window(2))
    [(_labels, at)] = store.totals.read("p")["cdcflow_last_committed_at"]  # the time of the newest count
    assert abs(at - datetime.now(UTC).timestamp()) < 60
    assert _counters(store, "other") == {}


def test_a_time_range_window_is_counted_too(store: StateStore) -> None:
    store.offsets.plan("p", "backfill", "backfill", [PartitionWindow("t", 0, 0, 10)])
    store.offsets.record_read("p", "backfill", {("t", 0): (4, 4)})
    store.ledger.mark("p", "backfill", "applied", None, {"sinks": {}})
    store.offsets.commit("p", "backfill")
    store.offsets.commit("p", "backfill")
    assert _counters(store) == {("cdcflow_windows", (("outcome", "committed"),)): 1,
                                ("cdcflow_records_read", (("partition", "0"), ("topic", "t"))): 4}
    assert store.offsets.load("p") == {}  # it replays a slice: offsets stay


def test_each_failed_attempt_is_counted_and_the_window_once_when_it_commits(store: StateStore) -> None:
    _window(store, "r1", 0)
    for attempt in (1, 2):
        store.ledger.begin_attempt("p", "r1")
        store.ledger.mark("p", "r1", "failed", f"attempt {attempt}: SinkUnavailable: down")
    assert _counters(store) == {("cdcflow_window_attempts_failed", ()): 2}
    store.ledger.mark("p", "r1", "applied", None, STATS)
    store.offsets.commit("p", "r1")
    assert _close(_counters(store), {**_one_window(), ("cdcflow_window_attempts_failed", ()): 2})


def test_a_commit_killed_inside_its_transaction_counts_nothing_and_its_retry_counts_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'o.db'}"
    store = StateStore(url)
    _window(store, "r1", 0)
    killed = subprocess.run(
        [sys.executable, "-c", f"from cdcflow.state import StateStore; StateStore({url!r}).offsets.commit('p', 'r1')"],
        env={**os.environ, "CDCFLOW_FAULTS": "during_commit"}, cwd=ROOT, capture_output=True, text=True, timeout=120,
        check=False)
    assert killed.returncode == -9, killed.stderr  # SIGKILL at connectors/faults.py's point, mid-transaction
    assert _counters(store) == {} and store.offsets.load("p") == {}
    store.offsets.commit("p", "r1")
    assert _close(_counters(store), _one_window())


def test_retention_never_touches_the_totals(store: StateStore) -> None:
    for i in range(6):
        _window(store, f"r{i}", i * 10)
        store.offsets.commit("p", f"r{i}")
    store.ledger.mark("p", "r5", "failed", "attempt 1: boom")  # a re-run of r5 that failed
    before = _counters(store)
    old = datetime.now(UTC).replace(tzinfo=None) - timedelta(days=40)
    with store.engine.begin() as conn:
        conn.execute(sa.update(runs_table).values(updated_at=old, created_at=old))
    assert store.chores.prune("p", older_than_s=30 * 86400, keep=2)["windows"] == 4
    assert len(store.ledger.history("p")) == 2
    assert _counters(store) == before
    assert _close(before, {**_one_window(6), ("cdcflow_window_attempts_failed", ()): 1})


def test_a_ledger_older_than_the_totals_is_seeded_once(tmp_path: Path) -> None:
    """A database written before the totals existed (no cdcflow_totals, no counted_at): the first
    store to open it counts its committed windows, marks them counted, and nobody does it again."""
    url = f"sqlite:///{tmp_path / 'o.db'}"
    store = StateStore(url)
    for i in range(3):
        _window(store, f"r{i}", i * 10)
        store.offsets.commit("p", f"r{i}")
    _window(store, "q1", 0, pipeline="q")
    store.offsets.commit("q", "q1")
    _window(store, "in-flight", 30)  # applied when the upgrade comes: counted at its commit, not by the seed
    with store.engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE cdcflow_totals")
        conn.exec_driver_sql("ALTER TABLE cdcflow_runs DROP COLUMN counted_at")
    store.close()

    upgraded = StateStore(url)
    assert _close(_counters(upgraded), _one_window(3)) and _close(_counters(upgraded, "q"), _one_window())
    assert upgraded.totals.seed_from_ledger() is None  # done, by the marker row
    again = StateStore(url)  # another process opening it later
    assert _close(_counters(again), _one_window(3))
    upgraded.offsets.commit("p", "r0")  # counted by the seed: not again
    upgraded.offsets.commit("p", "in-flight")
    assert _close(_counters(again), _one_window(4))
    again.close()
    upgraded.close()


def test_a_new_database_is_marked_seeded_with_nothing_to_count(store: StateStore) -> None:
    assert store.totals.seed_from_ledger() is None
    assert _counters(store) == {}


def test_a_composed_indexs_documents_are_counted_per_outcome() -> None:
    stats = {"documents": {"orders": {"version": 3, "affected": 8, "rebuilt": 3, "deleted": 1, "carried": 5,
                                      "backlog": 5}}}
    amounts = window_amounts(stats, {})
    got = {dict(labels)["outcome"]: v for (name, labels), v in amounts.items() if name == "cdcflow_documents"}
    assert got == {"affected": 8, "rebuilt": 3, "deleted": 1, "carried": 5}  # the backlog is a gauge, not a count
