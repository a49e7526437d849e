"""The window ledger: every window a pipeline planned, its attempts, status and stats, and the
queries over that history (the page, metrics, the dead letters an unfinished run sent already).
The metrics' counters are not summed from it (retention prunes it): a window's commit
(state/offsets.py) and each failed attempt add to cdcflow/state/totals.py in the transaction that
records them in the ledger.

A window's plan, its read ends and its commit are written by the offset store
(cdcflow/state/offsets.py), since they decide which records a window covers; the ledger keeps the
rest of the window's life and reads it back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from cdcflow.state.tables import now, runs_table, windows_table
from cdcflow.state.totals import count_failed_attempt
from cdcflow.state.windows import Origin, PartitionWindow, WindowPlan, WindowStatus


def read_window(conn: sa.Connection, pipeline: str, run_id: str) -> WindowPlan | None:
    run = conn.execute(sa.select(runs_table).where(
        (runs_table.c.pipeline == pipeline) & (runs_table.c.run_id == run_id))).first()
    if run is None:
        return None
    parts = conn.execute(sa.select(windows_table).where(
        (windows_table.c.pipeline == pipeline) & (windows_table.c.run_id == run_id)
    ).order_by(windows_table.c.topic, windows_table.c.partition)).all()
    interval = ((run.interval_start, run.interval_end)
                if run.interval_start is not None and run.interval_end is not None else None)
    return WindowPlan(
        pipeline=pipeline, run_id=run_id, origin=run.origin, status=run.status,
        attempt=run.attempt, message=run.message, stats=json.loads(run.stats or "{}"), interval=interval,
        partitions=tuple(PartitionWindow(p.topic, p.partition, p.start_offset, p.max_records,
                                         p.end_offset, p.records, p.stop_offset) for p in parts),
    )


def set_status(conn: sa.Connection, pipeline: str, run_id: str, status: WindowStatus,
               message: str | None, stats: Mapping[str, Any] | None = None) -> None:
    values: dict[str, Any] = {"status": status, "message": message, "updated_at": now()}
    if stats is not None:
        values["stats"] = json.dumps(stats, sort_keys=True, default=str)
    conn.execute(sa.update(runs_table).where(
        (runs_table.c.pipeline == pipeline) & (runs_table.c.run_id == run_id)).values(**values))


class Ledger:
    """Windows by run id: their attempts and status, and the history the operator sees."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def get_window(self, pipeline: str, run_id: str) -> WindowPlan | None:
        with self.engine.connect() as conn:
            return read_window(conn, pipeline, run_id)

    def begin_attempt(self, pipeline: str, run_id: str) -> int:
        with self.engine.begin() as conn:
            conn.execute(sa.update(runs_table).where(
                (runs_table.c.pipeline == pipeline) & (runs_table.c.run_id == run_id)
            ).values(attempt=runs_table.c.attempt + 1, updated_at=now()))
            return int(conn.execute(sa.select(runs_table.c.attempt).where(
                (runs_table.c.pipeline == pipeline) & (runs_table.c.run_id == run_id))).scalar_one())

    def mark(self, pipeline: str, run_id: str, status: WindowStatus, message: str | None = None,
             stats: Mapping[str, Any] | None = None) -> None:
        """Set the window's status; a failed attempt is counted in the same transaction (state/totals.py)."""
        with self.engine.begin() as conn:
            set_status(conn, pipeline, run_id, status, message, stats)
            if status == "failed":
                count_failed_attempt(conn, pipeline)

    def last_window(self, pipeline: str) -> tuple[WindowPlan, datetime] | None:
        """The newest window of the ledger and when it last changed."""
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(runs_table.c.run_id, runs_table.c.updated_at)
                               .where(runs_table.c.pipeline == pipeline)
                               .order_by(runs_table.c.created_at.desc()).limit(1)).first()
        if row is None:
            return None
        window = self.get_window(pipeline, row.run_id)
        return (window, row.updated_at) if window is not None else None

    def window_times(self, pipeline: str, run_ids: list[str]) -> dict[str, tuple[datetime, datetime]]:
        """(created_at, updated_at) of the given runs."""
        if not run_ids:
            return {}
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(runs_table.c.run_id, runs_table.c.created_at, runs_table.c.updated_at)
                                .where((runs_table.c.pipeline == pipeline) & runs_table.c.run_id.in_(run_ids)))
            return {r.run_id: (r.created_at, r.updated_at) for r in rows}

    def history(self, pipeline: str, limit: int = 20) -> list[WindowPlan]:
        with self.engine.connect() as conn:
            ids = conn.execute(sa.select(runs_table.c.run_id).where(runs_table.c.pipeline == pipeline)
                               .order_by(runs_table.c.created_at.desc()).limit(limit)).scalars().all()
        return [w for w in (self.get_window(pipeline, i) for i in ids) if w is not None]

    def run_ids(self, pipeline: str, origin: Origin) -> list[str]:
        with self.engine.connect() as conn:
            return list(conn.execute(sa.select(runs_table.c.run_id).where(
                (runs_table.c.pipeline == pipeline) & (runs_table.c.origin == origin))).scalars())

    def status_counts(self, pipeline: str) -> dict[str, int]:
        """How many windows the ledger holds now in each status (retention removes old ones)."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(runs_table.c.status, sa.func.count()).where(runs_table.c.pipeline == pipeline)
                                .group_by(runs_table.c.status)).all()
        return {status: int(n) for status, n in rows}

    def newest_status(self, pipeline: str) -> str | None:
        """The status of the newest window (by when it was planned), None without any."""
        with self.engine.connect() as conn:
            return conn.execute(sa.select(runs_table.c.status).where(runs_table.c.pipeline == pipeline)
                                .order_by(runs_table.c.created_at.desc()).limit(1)).scalar()

    def runs_that_may_have_sent_dead_letters(self, pipeline: str, window: WindowPlan, limit: int = 20) -> list[str]:
        """The newest runs (up to ``limit``) of the pipeline, other than ``window``'s, that may have
        sent dead letters for records ``window`` reads: attempted and never committed, or committed
        after a retry (an attempt whose read tasks sent dead letters and wrote, then failed before the
        ledger held its read's ends, may have read further than the retry that committed:
        spark_jobs/write/early.py::early_targets), and planned records ``window`` reads too. One query: it
        runs before every window."""
        w = windows_table.c
        committed = runs_table.c.status == "committed"
        planned_end = w.start_offset + w.max_records
        # a committed run: what it planned (a read never passes its budget); else what it read, or planned
        other_end = sa.case((committed, planned_end), else_=sa.func.coalesce(w.end_offset, planned_end))
        overlaps = []
        for p in window.partitions:
            a, b = p.start, p.end if p.end is not None else p.start + max(p.max_records, 0)
            overlaps.append((w.topic == p.topic) & (w.partition == p.partition) & (w.start_offset < b)
                            & (other_end > a))
        if not overlaps:
            return []
        with self.engine.connect() as conn:
            return list(conn.execute(
                sa.select(runs_table.c.run_id).join(windows_table, (w.pipeline == runs_table.c.pipeline)
                                                    & (w.run_id == runs_table.c.run_id))
                .where((runs_table.c.pipeline == pipeline) & (runs_table.c.run_id != window.run_id)
                       & sa.or_(~committed & (runs_table.c.attempt >= 1), committed & (runs_table.c.attempt >= 2))
                       & sa.or_(*overlaps))
                .group_by(runs_table.c.run_id).order_by(sa.func.max(runs_table.c.created_at).desc())
                .limit(limit)).scalars())
