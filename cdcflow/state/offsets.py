"""The offset store on any SQLAlchemy database: each partition's next offset to read, and the
window lifecycle that moves it (plan, record the read, commit).

Kafka auto-commit is never used: the stored offset of a partition is the next offset to read, and
it moves only in :meth:`SqlOffsetStore.commit`, after every sink flushed. Each run first writes its
window to the ledger (start offsets and the per-partition record budget), so a retry or a cleared
run replays exactly the same range: once a read finished, its actual end offsets are recorded and a
retry reads up to them, no further.

Commits follow the one compare-and-set rule of connectors/offset_rule.py: a window planned from the
stored offsets advances a partition only if the stored offset is still the window's start; a window
whose start offsets were given explicitly (replay/rewind) sets the offsets to its end; a window of a
time range (a backfill run, or start_time + end_time) replays that slice and never moves them.

Operators alter the offsets here too (set, forget, clear), and exactly-once pipelines mirror the
offsets their MySQL sink holds (connectors/mysql/offsets.py) into them.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

import sqlalchemy as sa

from cdcflow.errors import WindowFailed
from cdcflow.state.lag_history import LagRow, add_lag
from cdcflow.state.ledger import read_window, set_status
from cdcflow.state.tables import lag_table, naive_utc, now, offsets_table, runs_table, windows_table
from cdcflow.state.totals import count_committed
from cdcflow.state.windows import CommitResult, Origin, PartitionWindow, TopicPartition, WindowPlan
from connectors import faults
from connectors.offset_rule import commit_outcome


def _upsert(conn: sa.Connection, pipeline: str, topic: str, partition: int, offset: int, run_id: str) -> None:
    key = (offsets_table.c.pipeline == pipeline) & (offsets_table.c.topic == topic) & (
        offsets_table.c.partition == partition)
    values = {"next_offset": offset, "run_id": run_id, "updated_at": now()}
    if conn.execute(sa.update(offsets_table).where(key).values(**values)).rowcount == 0:
        conn.execute(sa.insert(offsets_table).values(pipeline=pipeline, topic=topic, partition=partition, **values))


class SqlOffsetStore:
    """load / plan / record_read / commit (the :class:`cdcflow.state.protocol.OffsetStore` protocol),
    with the run id kept beside the offsets, and the operator's changes to them."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def load(self, pipeline: str) -> dict[TopicPartition, int]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(offsets_table.c.topic, offsets_table.c.partition, offsets_table.c.next_offset)
                .where(offsets_table.c.pipeline == pipeline)
            )
            return {(r.topic, r.partition): r.next_offset for r in rows}

    # -- the operator's changes ----------------------------------------------------------------
    def set(self, pipeline: str, offsets: Mapping[TopicPartition, int], run_id: str) -> None:
        """Operator reset (the CLI's ``offsets set``): writes the given offsets as they are."""
        with self.engine.begin() as conn:
            for (topic, partition), offset in offsets.items():
                _upsert(conn, pipeline, topic, partition, offset, run_id)
            add_lag(conn, pipeline, [(t, p, "reset", o, None, run_id) for (t, p), o in offsets.items()])

    def mirror(self, pipeline: str, offsets: Mapping[TopicPartition, tuple[int, str]]) -> None:
        """Exactly-once: take the offsets (and the runs that set them) the MySQL sink holds."""
        with self.engine.begin() as conn:
            for (topic, partition), (offset, run_id) in offsets.items():
                _upsert(conn, pipeline, topic, partition, offset, run_id)

    def clear(self, pipeline: str) -> None:
        """Forget a pipeline's stored offsets (the next run starts from initial_offsets)."""
        with self.engine.begin() as conn:
            conn.execute(sa.delete(offsets_table).where(offsets_table.c.pipeline == pipeline))

    def forget(self, pipeline: str, tps: list[TopicPartition]) -> None:
        """Forget some partitions' stored offsets (they start from initial_offsets again)."""
        with self.engine.begin() as conn:
            for topic, partition in tps:
                conn.execute(sa.delete(offsets_table).where(
                    (offsets_table.c.pipeline == pipeline) & (offsets_table.c.topic == topic)
                    & (offsets_table.c.partition == partition)))

    # -- a window's life -----------------------------------------------------------------------
    def plan(self, pipeline: str, run_id: str, origin: Origin, partitions: list[PartitionWindow],
             interval: tuple[datetime, datetime] | None = None) -> WindowPlan:
        """Record the window before any record is processed. Idempotent per run id."""
        with self.engine.connect() as conn:
            existing = read_window(conn, pipeline, run_id)
        if existing is not None:
            return existing
        at = now()
        start, end = (naive_utc(interval[0]), naive_utc(interval[1])) if interval else (None, None)
        with self.engine.begin() as conn:
            conn.execute(sa.insert(runs_table).values(
                pipeline=pipeline, run_id=run_id, origin=origin, status="planned", attempt=0,
                created_at=at, updated_at=at, interval_start=start, interval_end=end))
            if partitions:
                conn.execute(sa.insert(windows_table), [
                    {"pipeline": pipeline, "run_id": run_id, "topic": p.topic, "partition": p.partition,
                     "start_offset": p.start, "max_records": p.max_records, "stop_offset": p.stop}
                    for p in partitions])
        with self.engine.connect() as conn:
            plan = read_window(conn, pipeline, run_id)
        assert plan is not None
        return plan

    def record_read(self, pipeline: str, run_id: str, ends: Mapping[TopicPartition, tuple[int, int]]) -> None:
        """Store the actual (end offset, record count) of each partition once the read finished."""
        with self.engine.begin() as conn:
            for (topic, partition), (end, count) in ends.items():
                conn.execute(sa.update(windows_table).where(
                    (windows_table.c.pipeline == pipeline) & (windows_table.c.run_id == run_id)
                    & (windows_table.c.topic == topic) & (windows_table.c.partition == partition)
                ).values(end_offset=end, records=count))
            faults.checkpoint("during_ledger_write")
            set_status(conn, pipeline, run_id, "read", None)

    def commit(self, pipeline: str, run_id: str) -> CommitResult:
        """Move the stored offsets to the window's ends, in one transaction, compare-and-set; the same
        transaction marks the window committed and adds it to the metrics' totals (once per run)."""
        with self.engine.connect() as conn:
            plan = read_window(conn, pipeline, run_id)
        plan = committable(plan, pipeline, run_id)
        advanced: dict[TopicPartition, int] = {}
        left: dict[TopicPartition, str] = {}
        if plan.offsets_mode == "keep":
            for p in plan.partitions:
                left[p.tp] = kept_reason(plan)
            with self.engine.begin() as conn:
                set_status(conn, pipeline, run_id, "committed", None)
                count_committed(conn, pipeline, run_id)
            return CommitResult(advanced, left)
        with self.engine.begin() as conn:
            stored_rows = conn.execute(
                sa.select(offsets_table).where(offsets_table.c.pipeline == pipeline)
                .with_for_update()).all()
            stored = {(r.topic, r.partition): (r.next_offset, r.run_id) for r in stored_rows}
            for p in plan.partitions:
                assert p.end is not None
                current = stored.get(p.tp)
                outcome = commit_outcome(plan.offsets_mode, current, p.start, p.end, run_id)
                if outcome == "conflict":
                    assert current is not None
                    left[p.tp] = conflict_reason(current, p.start)
                    continue
                if outcome == "move":
                    _upsert(conn, pipeline, p.topic, p.partition, p.end, run_id)
                advanced[p.tp] = p.end  # moved now, or by this run's earlier commit ("repeated")
            add_lag(conn, pipeline, self._commit_lag(conn, pipeline, run_id, advanced))
            faults.checkpoint("during_commit")
            set_status(conn, pipeline, run_id, "committed", None)
            count_committed(conn, pipeline, run_id)  # the metrics' totals, once per run (state/totals.py)
        return CommitResult(advanced, left)

    @staticmethod
    def _commit_lag(conn: sa.Connection, pipeline: str, run_id: str,
                    advanced: Mapping[TopicPartition, int]) -> list[LagRow]:
        """The lag each committed partition is left with: the log end its plan saw (or the new
        offset, if the log was read past it) minus the new offset."""
        planned_ends = {(r.topic, r.partition): r.log_end for r in conn.execute(
            sa.select(lag_table.c.topic, lag_table.c.partition, lag_table.c.log_end).where(
                (lag_table.c.pipeline == pipeline) & (lag_table.c.run_id == run_id)
                & (lag_table.c.source == "plan")))}
        return [(t, p, "commit", end, max(end, planned_ends.get((t, p)) or end), run_id)
                for (t, p), end in advanced.items()]


def committable(plan: WindowPlan | None, pipeline: str, run_id: str) -> WindowPlan:
    """The window, if it can be committed: planned and read completely (else WindowFailed)."""
    if plan is None:
        raise WindowFailed(f"run {run_id!r} of pipeline {pipeline!r} has no planned window to commit")
    if not plan.read_done:
        raise WindowFailed(f"run {run_id!r}: the window was not read completely; nothing to commit")
    return plan


def kept_reason(plan: WindowPlan) -> str:
    return f"a {plan.origin.replace('_', '-')} window (a replay of a time range): stored offsets stay"


def conflict_reason(stored: tuple[int, str], start: int) -> str:
    return f"stored offset is {stored[0]} (set by run {stored[1]}), not this window's start {start}: left unchanged"
