"""Periodic chores of a pipeline's state: when each last ran (so that it runs at most every so
often, whichever process commits), and retention, which forgets old ledger windows and lag samples.
Retention never touches the metrics' totals (state/totals.py): Prometheus counters must not go down."""

from __future__ import annotations

from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from cdcflow.state.lag_history import ranked_by_age
from cdcflow.state.tables import chores_table, lag_table, now, runs_table, windows_table

BATCH = 500  # ids per DELETE: keeps each statement's IN list small


class Chores:
    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def due(self, pipeline: str, chore: str, every_s: float) -> bool:
        """True (and marked done now) when ``chore`` last ran more than ``every_s`` ago or never."""
        at = now()
        with self.engine.begin() as conn:
            done = conn.execute(sa.update(chores_table).where(
                (chores_table.c.pipeline == pipeline) & (chores_table.c.chore == chore)
                & (chores_table.c.last_at < at - timedelta(seconds=every_s))).values(last_at=at)).rowcount
            if done:
                return True
        try:
            with self.engine.begin() as conn:
                conn.execute(sa.insert(chores_table).values(pipeline=pipeline, chore=chore, last_at=at))
            return True
        except IntegrityError:  # it ran recently (or another process marked it just now)
            return False

    def prune(self, pipeline: str, older_than_s: float, keep: int = 100) -> dict[str, int]:
        """Delete ledger windows (not planned or running ones) and lag samples older than
        ``older_than_s``, keeping the newest ``keep`` windows and the newest ``keep`` samples of each
        partition and source whatever their age. Returns the rows deleted per table."""
        cutoff = now() - timedelta(seconds=older_than_s)
        with self.engine.begin() as conn:
            runs, windows = _prune_windows(conn, pipeline, cutoff, keep)
            lag = _prune_lag(conn, pipeline, cutoff, keep)
        return {"windows": runs, "window_partitions": windows, "lag_samples": lag}


def _prune_windows(conn: sa.Connection, pipeline: str, cutoff: datetime, keep: int) -> tuple[int, int]:
    """(runs, window partitions) deleted."""
    newest = sa.select(runs_table.c.run_id).where(runs_table.c.pipeline == pipeline).order_by(
        runs_table.c.created_at.desc()).limit(keep)
    old = [r for r in conn.execute(sa.select(runs_table.c.run_id).where(
        (runs_table.c.pipeline == pipeline) & (runs_table.c.updated_at < cutoff)
        & runs_table.c.status.in_(("committed", "applied", "failed"))
        & runs_table.c.run_id.not_in(newest.scalar_subquery()))).scalars()]
    windows = runs = 0
    for i in range(0, len(old), BATCH):
        chunk = old[i:i + BATCH]
        windows += conn.execute(sa.delete(windows_table).where(
            (windows_table.c.pipeline == pipeline) & windows_table.c.run_id.in_(chunk))).rowcount
        runs += conn.execute(sa.delete(runs_table).where(
            (runs_table.c.pipeline == pipeline) & runs_table.c.run_id.in_(chunk))).rowcount
    return runs, windows


def _prune_lag(conn: sa.Connection, pipeline: str, cutoff: datetime, keep: int) -> int:
    ranked = sa.select(lag_table.c.id, lag_table.c.at, ranked_by_age()).where(
        lag_table.c.pipeline == pipeline).subquery()
    stale = [r for r in conn.execute(sa.select(ranked.c.id).where(
        (ranked.c.rank > keep) & (ranked.c.at < cutoff))).scalars()]
    lag = 0
    for i in range(0, len(stale), BATCH):
        lag += conn.execute(sa.delete(lag_table).where(lag_table.c.id.in_(stale[i:i + BATCH]))).rowcount
    return lag
