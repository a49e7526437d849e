"""Ledger retention on the offset store: old windows and lag samples go, the newest stay."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

from cdcflow.state import PartitionWindow, StateStore
from cdcflow.state.tables import lag_table, runs_table


def test_prune_keeps_the_newest_windows_and_everything_recent(tmp_path: Path) -> None:
    store = StateStore(f"sqlite:///{tmp_path / 'o.db'}")
    for i in range(30):
        store.offsets.plan("p", f"run-{i:02}", "stored", [PartitionWindow("t", 0, i * 10, 10)])
        store.offsets.record_read("p", f"run-{i:02}", {("t", 0): (i * 10 + 10, 10)})
        store.offsets.commit("p", f"run-{i:02}")
        store.lag.record("p", "sample", {("t", 0): (i * 10, 1000)})
    store.offsets.plan("p", "running", "stored", [PartitionWindow("t", 0, 300, 10)])
    store.offsets.plan("other", "run-00", "stored", [PartitionWindow("t", 0, 0, 10)])
    old = datetime.now(UTC).replace(tzinfo=None) - timedelta(days=40)
    with store.engine.begin() as conn:  # the first 25 windows (a minute apart) and the running one: 40 days old
        for i in range(25):
            at = old + timedelta(minutes=i)
            conn.execute(sa.update(runs_table).where(runs_table.c.run_id == f"run-{i:02}").values(
                updated_at=at, created_at=at))
        conn.execute(sa.update(runs_table).where(runs_table.c.run_id == "running").values(updated_at=old))
        conn.execute(sa.update(lag_table).where(lag_table.c.id <= 40).values(at=old))

    pruned = store.chores.prune("p", older_than_s=30 * 86400, keep=10)
    kept = [w.run_id for w in store.ledger.history("p", limit=100)]
    # the newest 10 windows stay (whatever their age: run-21..24 are old), so do recent ones (25..29)
    # and unfinished ones ("running", planned 40 days ago)
    assert sorted(kept) == [f"run-{i}" for i in range(21, 30)] + ["running"]
    assert pruned["windows"] == 21 and pruned["window_partitions"] == 21
    assert [w.run_id for w in store.ledger.history("other")] == ["run-00"]  # another pipeline is untouched
    entries = store.lag.entries("p", per_partition=1000)[("t", 0)]
    samples = [e for e in entries if e.source == "sample"]
    assert len(samples) == 10  # 30 samples: the 20 oldest were old and beyond the newest 10
    # 60 rows (a commit entry and a sample per window), the first 40 old: the 20 oldest of each kind go
    assert pruned["lag_samples"] == 40
    assert store.offsets.load("p") == {("t", 0): 300}  # offsets are never pruned


def test_retention_runs_at_most_every_so_often(tmp_path: Path) -> None:
    store = StateStore(f"sqlite:///{tmp_path / 'o.db'}")
    assert store.chores.due("p", "retention", 600) is True
    assert store.chores.due("p", "retention", 600) is False
    assert store.chores.due("q", "retention", 600) is True  # per pipeline
    assert store.chores.due("p", "retention", 0) is True  # its period has passed
