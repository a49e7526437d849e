"""Lag over time, per partition: the log end and the committed offset as seen at each window's
plan, at its commit, at an operator's offset change and at each monitor sample. cdcflow/lag.py
evaluates these entries the way Burrow does; the page charts them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from cdcflow.state.tables import LagSource, lag_table, now
from cdcflow.state.windows import TopicPartition

# (topic, partition, source, committed, log end, run id)
LagRow = tuple[str, int, LagSource, int | None, int | None, str | None]


@dataclass(frozen=True)
class LagEntry:
    topic: str
    partition: int
    source: LagSource
    committed: int | None
    log_end: int | None
    run_id: str | None
    at: datetime


def add_lag(conn: sa.Connection, pipeline: str, rows: list[LagRow]) -> None:
    """Inside a caller's transaction: an offset change and the lag it leaves are written together."""
    if rows:
        at = now()
        conn.execute(sa.insert(lag_table), [
            {"pipeline": pipeline, "topic": t, "partition": p, "source": src, "committed": c, "log_end": e,
             "run_id": r, "at": at} for t, p, src, c, e, r in rows])


def ranked_by_age() -> sa.Label[int]:
    """1 for the newest entry of each partition and source, 2 for the one before, ..."""
    return sa.func.row_number().over(
        partition_by=(lag_table.c.topic, lag_table.c.partition, lag_table.c.source),
        order_by=lag_table.c.id.desc()).label("rank")


class LagHistory:
    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def record(self, pipeline: str, source: LagSource,
               rows: Mapping[TopicPartition, tuple[int | None, int | None]], run_id: str | None = None) -> None:
        """{tp: (committed, log end)} observed now."""
        with self.engine.begin() as conn:
            add_lag(conn, pipeline, [(t, p, source, c, e, run_id) for (t, p), (c, e) in rows.items()])

    def entries(self, pipeline: str, per_partition: int = 50) -> dict[TopicPartition, list[LagEntry]]:
        """The newest entries of each partition (oldest first), at most ``per_partition`` of each source,
        in one query."""
        newest = sa.select(lag_table, ranked_by_age()).where(lag_table.c.pipeline == pipeline).subquery()
        out: dict[TopicPartition, list[LagEntry]] = {}
        with self.engine.connect() as conn:
            for r in conn.execute(sa.select(newest).where(newest.c.rank <= per_partition).order_by(newest.c.id)):
                out.setdefault((r.topic, r.partition), []).append(
                    LagEntry(r.topic, r.partition, r.source, r.committed, r.log_end, r.run_id, r.at))
        return out
