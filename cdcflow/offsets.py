"""The offset store and window ledger, on any SQLAlchemy database.

Kafka auto-commit is never used: the stored offset of a partition is the next offset to read, and
it moves only in :meth:`OffsetStore.commit`, after every sink flushed. Each run first writes its
window to the ledger (start offsets and the per-partition record budget), so a retry or a cleared
run replays exactly the same range: once a read finished, its actual end offsets are recorded and a
retry reads up to them, no further.

Commits are compare-and-set: a window planned from the stored offsets advances a partition only if
the stored offset is still the window's start. A cleared old run therefore re-applies its range
(harmless: sinks are idempotent and version-guarded) without moving offsets back or forth. A window
whose start offsets were given explicitly (replay/rewind) sets the offsets to its end. A window of
a time range (a backfill run, or start_time + end_time) replays that slice and never moves them.

Windows of one pipeline never write at the same time: :meth:`OffsetStore.writer_lease` is held while
a window reads and writes its sinks (Airflow runs backfills beside the live runs).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from cdcflow.errors import InfrastructureError, WindowFailed
from connectors import faults

TopicPartition = tuple[str, int]
WindowStatus = Literal["planned", "read", "applied", "committed", "failed"]
Origin = Literal["stored", "params", "backfill", "time_range"]
MOVES_OFFSETS: frozenset[str] = frozenset({"stored", "params"})
PipelineState = Literal["running", "stopped"]
RedriveStatus = Literal["pending", "done"]

metadata = sa.MetaData()

offsets_table = sa.Table(
    "cdcflow_offsets",
    metadata,
    sa.Column("pipeline", sa.String(200), primary_key=True),
    sa.Column("topic", sa.String(249), primary_key=True),
    sa.Column("partition", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("next_offset", sa.BigInteger, nullable=False),
    sa.Column("run_id", sa.String(250), nullable=False),
    sa.Column("updated_at", sa.DateTime, nullable=False),
)

runs_table = sa.Table(
    "cdcflow_runs",
    metadata,
    sa.Column("pipeline", sa.String(200), primary_key=True),
    sa.Column("run_id", sa.String(250), primary_key=True),
    sa.Column("origin", sa.String(16), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False, default=0),
    sa.Column("message", sa.Text, nullable=True),
    sa.Column("stats", sa.Text, nullable=True),
    sa.Column("created_at", sa.DateTime, nullable=False),
    sa.Column("updated_at", sa.DateTime, nullable=False),
    # the time range [start, end) of a backfill / time-range window, or of an aligned scheduled window
    sa.Column("interval_start", sa.DateTime, nullable=True),
    sa.Column("interval_end", sa.DateTime, nullable=True),
)

windows_table = sa.Table(
    "cdcflow_windows",
    metadata,
    sa.Column("pipeline", sa.String(200), primary_key=True),
    sa.Column("run_id", sa.String(250), primary_key=True),
    sa.Column("topic", sa.String(249), primary_key=True),
    sa.Column("partition", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("start_offset", sa.BigInteger, nullable=False),
    sa.Column("max_records", sa.BigInteger, nullable=False),
    sa.Column("end_offset", sa.BigInteger, nullable=True),
    sa.Column("records", sa.BigInteger, nullable=True),
    # where the read must stop (exclusive) whatever the budget: a time range's end offset
    sa.Column("stop_offset", sa.BigInteger, nullable=True),
)

# When a periodic chore (retention) last ran per pipeline, so that it runs at most every so often.
chores_table = sa.Table(
    "cdcflow_chores",
    metadata,
    sa.Column("pipeline", sa.String(200), primary_key=True),
    sa.Column("chore", sa.String(32), primary_key=True),
    sa.Column("last_at", sa.DateTime, nullable=False),
)

# Columns added after a table was first released: created on older databases at start-up.
_ADDED_COLUMNS = {"cdcflow_runs": ("interval_start", "interval_end"), "cdcflow_windows": ("stop_offset",)}

# Who writes a pipeline's sinks now (one window at a time, live or backfill); expires unless renewed,
# so a killed task does not block the pipeline for longer than the lease.
writers_table = sa.Table(
    "cdcflow_writers",
    metadata,
    sa.Column("pipeline", sa.String(200), primary_key=True),
    sa.Column("holder", sa.String(250), nullable=False),
    sa.Column("expires_at", sa.DateTime, nullable=False),
)

# The operator's "stopped" state (Kafka Connect's STOPPED): no window may be planned, not even a
# manually triggered one, and only then may the stored offsets be altered. Paused is Airflow's own
# DAG pause and is not stored here.
states_table = sa.Table(
    "cdcflow_pipeline_states",
    metadata,
    sa.Column("pipeline", sa.String(200), primary_key=True),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("updated_by", sa.String(200), nullable=False),
    sa.Column("updated_at", sa.DateTime, nullable=False),
)

# Schema changes a window met under schema_changes: pause (connectors/mysql/evolution.py): one row per
# change, "pending" until an operator approves (the next window applies it) or rejects it (the next
# windows write the columns the table has, as ignore does).
schema_changes_table = sa.Table(
    "cdcflow_schema_changes",
    metadata,
    sa.Column("pipeline", sa.String(200), primary_key=True),
    sa.Column("change_key", sa.String(700), primary_key=True),
    sa.Column("change", sa.Text, nullable=False),  # JSON: table, column, change, old, new, ddl
    sa.Column("decision", sa.String(16), nullable=False),  # pending | approved | rejected
    sa.Column("run_id", sa.String(250), nullable=False),  # the window that met it
    sa.Column("decided_by", sa.String(200), nullable=True),
    sa.Column("updated_at", sa.DateTime, nullable=False),
)

# Dead letters sent back through the pipeline: one row per DLQ record, so that a record is never
# redriven twice by accident. "pending" is written before producing and "done" after the broker
# acknowledged it; a crash in between leaves "pending", which a later request reports instead of
# silently sending again.
redrives_table = sa.Table(
    "cdcflow_redrives",
    metadata,
    sa.Column("pipeline", sa.String(200), primary_key=True),
    sa.Column("dlq_topic", sa.String(249), primary_key=True),
    sa.Column("partition", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("offset", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("target_topic", sa.String(249), nullable=False),
    # the DLQ record's timestamp, key and value hashed: a recreated DLQ topic reuses offsets, and a new
    # record at an old offset must not look redriven already
    sa.Column("fingerprint", sa.String(32), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("request_id", sa.String(64), nullable=False),
    sa.Column("requested_by", sa.String(200), nullable=False),
    sa.Column("updated_at", sa.DateTime, nullable=False),
)

# Lag over time, per partition: at each window's plan (the log end seen, source "plan"), at its commit
# (the committed offset and that log end, "commit"), at an operator's offset change ("reset") and at
# each monitor sample ("sample"). cdcflow.lag evaluates it the way Burrow does.
lag_table = sa.Table(
    "cdcflow_lag",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("pipeline", sa.String(200), nullable=False),
    sa.Column("topic", sa.String(249), nullable=False),
    sa.Column("partition", sa.Integer, nullable=False),
    sa.Column("source", sa.String(8), nullable=False),
    sa.Column("committed", sa.BigInteger, nullable=True),
    sa.Column("log_end", sa.BigInteger, nullable=True),
    sa.Column("run_id", sa.String(250), nullable=True),
    sa.Column("at", sa.DateTime, nullable=False),
    sa.Index("ix_cdcflow_lag_pipeline_tp", "pipeline", "topic", "partition", "id"),
)
LagSource = Literal["plan", "commit", "reset", "sample"]


@dataclass(frozen=True)
class LagEntry:
    topic: str
    partition: int
    source: LagSource
    committed: int | None
    log_end: int | None
    run_id: str | None
    at: datetime


@dataclass(frozen=True)
class Redrive:
    dlq_topic: str
    partition: int
    offset: int
    target_topic: str
    fingerprint: str
    status: RedriveStatus
    request_id: str
    requested_by: str
    updated_at: datetime


@dataclass(frozen=True)
class PartitionWindow:
    topic: str
    partition: int
    start: int
    max_records: int
    end: int | None = None  # actual end (exclusive) once the read finished
    records: int | None = None
    stop: int | None = None  # the read stops here (exclusive) whatever the budget (a time range's end)

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)


@dataclass(frozen=True)
class WindowPlan:
    pipeline: str
    run_id: str
    origin: Origin
    status: WindowStatus
    partitions: tuple[PartitionWindow, ...]
    attempt: int = 0
    message: str | None = None
    stats: dict[str, Any] = field(default_factory=dict)
    interval: tuple[datetime, datetime] | None = None  # UTC, naive

    @property
    def moves_offsets(self) -> bool:
        """False for a backfill or time-range window: a replay of a slice, the live position stays."""
        return self.origin in MOVES_OFFSETS

    @property
    def read_done(self) -> bool:
        return all(p.end is not None for p in self.partitions)

    @property
    def total_records(self) -> int:
        return sum(p.records or 0 for p in self.partitions)


@dataclass(frozen=True)
class CommitResult:
    advanced: dict[TopicPartition, int]
    left: dict[TopicPartition, str]  # partitions not moved, with the reason


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _naive_utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(tzinfo=None) if moment.tzinfo else moment


def default_store_url() -> str:
    url = os.environ.get("CDCFLOW_OFFSET_STORE_URL")
    if url:
        return url
    home = Path(os.environ.get("CDCFLOW_HOME", Path(__file__).resolve().parent.parent / ".local"))
    (home / "state").mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{home / 'state' / 'offsets.db'}"


class OffsetStore:
    """load / plan / commit, with the run id kept beside the offsets."""

    def __init__(self, url: str | None = None) -> None:
        self.url = url or default_store_url()
        kwargs: dict[str, Any] = {"pool_pre_ping": True}
        if self.url.startswith("sqlite"):
            kwargs["connect_args"] = {"timeout": 30}
        self.engine = sa.create_engine(self.url, **kwargs)
        try:
            metadata.create_all(self.engine)
            self._add_missing_columns()
        except SQLAlchemyError as exc:
            raise InfrastructureError(f"offset store {self._safe_url()} is unavailable: {exc.__class__.__name__}: {exc.orig if hasattr(exc, 'orig') else exc}") from exc

    def _add_missing_columns(self) -> None:
        inspector = sa.inspect(self.engine)
        for table_name, columns in _ADDED_COLUMNS.items():
            have = {c["name"] for c in inspector.get_columns(table_name)}
            table = metadata.tables[table_name]
            for name in columns:
                if name not in have:
                    column = table.c[name]
                    kind = column.type.compile(dialect=self.engine.dialect)
                    with self.engine.begin() as conn:
                        conn.exec_driver_sql(f"ALTER TABLE {table_name} ADD COLUMN {name} {kind} NULL")

    def _safe_url(self) -> str:
        return sa.make_url(self.url).render_as_string(hide_password=True)

    def close(self) -> None:
        self.engine.dispose()

    # -- offsets -------------------------------------------------------------------------------
    def load(self, pipeline: str) -> dict[TopicPartition, int]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(offsets_table.c.topic, offsets_table.c.partition, offsets_table.c.next_offset)
                .where(offsets_table.c.pipeline == pipeline)
            )
            return {(r.topic, r.partition): r.next_offset for r in rows}

    def set_offsets(self, pipeline: str, offsets: Mapping[TopicPartition, int], run_id: str) -> None:
        """Operator reset (the CLI's ``offsets set``): writes the given offsets as they are."""
        with self.engine.begin() as conn:
            for (topic, partition), offset in offsets.items():
                self._upsert_offset(conn, pipeline, topic, partition, offset, run_id)
            self._add_lag(conn, pipeline, [(t, p, "reset", o, None, run_id) for (t, p), o in offsets.items()])

    def mirror_offsets(self, pipeline: str, offsets: Mapping[TopicPartition, tuple[int, str]]) -> None:
        """Exactly-once: take the offsets (and the runs that set them) the MySQL sink holds."""
        with self.engine.begin() as conn:
            for (topic, partition), (offset, run_id) in offsets.items():
                self._upsert_offset(conn, pipeline, topic, partition, offset, run_id)

    # -- lag -------------------------------------------------------------------------------------
    def _add_lag(self, conn: sa.Connection, pipeline: str,
                 rows: list[tuple[str, int, LagSource, int | None, int | None, str | None]]) -> None:
        if rows:
            now = _now()
            conn.execute(sa.insert(lag_table), [
                {"pipeline": pipeline, "topic": t, "partition": p, "source": src, "committed": c, "log_end": e,
                 "run_id": r, "at": now} for t, p, src, c, e, r in rows])

    def record_lag(self, pipeline: str, source: LagSource,
                   rows: Mapping[TopicPartition, tuple[int | None, int | None]], run_id: str | None = None) -> None:
        """{tp: (committed, log end)} observed now."""
        with self.engine.begin() as conn:
            self._add_lag(conn, pipeline, [(t, p, source, c, e, run_id) for (t, p), (c, e) in rows.items()])

    def lag_entries(self, pipeline: str, per_partition: int = 50) -> dict[TopicPartition, list[LagEntry]]:
        """The newest entries of each partition (oldest first), at most ``per_partition`` of each source,
        in one query."""
        rank = sa.func.row_number().over(
            partition_by=(lag_table.c.topic, lag_table.c.partition, lag_table.c.source),
            order_by=lag_table.c.id.desc()).label("rank")
        newest = sa.select(lag_table, rank).where(lag_table.c.pipeline == pipeline).subquery()
        out: dict[TopicPartition, list[LagEntry]] = {}
        with self.engine.connect() as conn:
            for r in conn.execute(sa.select(newest).where(newest.c.rank <= per_partition).order_by(newest.c.id)):
                out.setdefault((r.topic, r.partition), []).append(
                    LagEntry(r.topic, r.partition, r.source, r.committed, r.log_end, r.run_id, r.at))
        return out

    def run_ids(self, pipeline: str, origin: Origin) -> list[str]:
        with self.engine.connect() as conn:
            return list(conn.execute(sa.select(runs_table.c.run_id).where(
                (runs_table.c.pipeline == pipeline) & (runs_table.c.origin == origin))).scalars())

    def windows_summary(self, pipeline: str) -> list[tuple[str, str, str, dict[str, Any], datetime]]:
        """(run_id, status, origin, stats, updated_at) of every window in the ledger, oldest first."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(runs_table.c.run_id, runs_table.c.status, runs_table.c.origin,
                                          runs_table.c.stats, runs_table.c.updated_at)
                                .where(runs_table.c.pipeline == pipeline).order_by(runs_table.c.created_at)).all()
        return [(r.run_id, r.status, r.origin, json.loads(r.stats or "{}"), r.updated_at) for r in rows]

    def records_read(self, pipeline: str) -> dict[TopicPartition, int]:
        """Records read per partition by windows that were applied or committed (a failed window's
        records are counted when its retry succeeds)."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(windows_table.c.topic, windows_table.c.partition, sa.func.sum(windows_table.c.records))
                .join(runs_table, (runs_table.c.pipeline == windows_table.c.pipeline)
                      & (runs_table.c.run_id == windows_table.c.run_id))
                .where((windows_table.c.pipeline == pipeline) & runs_table.c.status.in_(("applied", "committed")))
                .group_by(windows_table.c.topic, windows_table.c.partition)).all()
        return {(t, p): int(n or 0) for t, p, n in rows}

    def clear(self, pipeline: str) -> None:
        """Forget a pipeline's stored offsets (the next run starts from initial_offsets)."""
        with self.engine.begin() as conn:
            conn.execute(sa.delete(offsets_table).where(offsets_table.c.pipeline == pipeline))

    def forget_offsets(self, pipeline: str, tps: list[TopicPartition]) -> None:
        """Forget some partitions' stored offsets (they start from initial_offsets again)."""
        with self.engine.begin() as conn:
            for topic, partition in tps:
                conn.execute(sa.delete(offsets_table).where(
                    (offsets_table.c.pipeline == pipeline) & (offsets_table.c.topic == topic)
                    & (offsets_table.c.partition == partition)))

    def _upsert_offset(self, conn: sa.Connection, pipeline: str, topic: str, partition: int,
                       offset: int, run_id: str) -> None:
        key = (offsets_table.c.pipeline == pipeline) & (offsets_table.c.topic == topic) & (
            offsets_table.c.partition == partition)
        values = {"next_offset": offset, "run_id": run_id, "updated_at": _now()}
        if conn.execute(sa.update(offsets_table).where(key).values(**values)).rowcount == 0:
            conn.execute(sa.insert(offsets_table).values(
                pipeline=pipeline, topic=topic, partition=partition, **values))

    # -- ledger --------------------------------------------------------------------------------
    def get_window(self, pipeline: str, run_id: str) -> WindowPlan | None:
        with self.engine.connect() as conn:
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

    def plan(self, pipeline: str, run_id: str, origin: Origin, partitions: list[PartitionWindow],
             interval: tuple[datetime, datetime] | None = None) -> WindowPlan:
        """Record the window before any record is processed. Idempotent per run id."""
        existing = self.get_window(pipeline, run_id)
        if existing is not None:
            return existing
        now = _now()
        start, end = (_naive_utc(interval[0]), _naive_utc(interval[1])) if interval else (None, None)
        with self.engine.begin() as conn:
            conn.execute(sa.insert(runs_table).values(
                pipeline=pipeline, run_id=run_id, origin=origin, status="planned", attempt=0,
                created_at=now, updated_at=now, interval_start=start, interval_end=end))
            if partitions:
                conn.execute(sa.insert(windows_table), [
                    {"pipeline": pipeline, "run_id": run_id, "topic": p.topic, "partition": p.partition,
                     "start_offset": p.start, "max_records": p.max_records, "stop_offset": p.stop}
                    for p in partitions])
        plan = self.get_window(pipeline, run_id)
        assert plan is not None
        return plan

    def begin_attempt(self, pipeline: str, run_id: str) -> int:
        with self.engine.begin() as conn:
            conn.execute(sa.update(runs_table).where(
                (runs_table.c.pipeline == pipeline) & (runs_table.c.run_id == run_id)
            ).values(attempt=runs_table.c.attempt + 1, updated_at=_now()))
            return int(conn.execute(sa.select(runs_table.c.attempt).where(
                (runs_table.c.pipeline == pipeline) & (runs_table.c.run_id == run_id))).scalar_one())

    def record_read(self, pipeline: str, run_id: str, ends: Mapping[TopicPartition, tuple[int, int]]) -> None:
        """Store the actual (end offset, record count) of each partition once the read finished."""
        with self.engine.begin() as conn:
            for (topic, partition), (end, count) in ends.items():
                conn.execute(sa.update(windows_table).where(
                    (windows_table.c.pipeline == pipeline) & (windows_table.c.run_id == run_id)
                    & (windows_table.c.topic == topic) & (windows_table.c.partition == partition)
                ).values(end_offset=end, records=count))
            faults.checkpoint("during_ledger_write")
            self._set_status(conn, pipeline, run_id, "read", None)

    def mark(self, pipeline: str, run_id: str, status: WindowStatus, message: str | None = None,
             stats: Mapping[str, Any] | None = None) -> None:
        with self.engine.begin() as conn:
            self._set_status(conn, pipeline, run_id, status, message, stats)

    def _set_status(self, conn: sa.Connection, pipeline: str, run_id: str, status: WindowStatus,
                    message: str | None, stats: Mapping[str, Any] | None = None) -> None:
        values: dict[str, Any] = {"status": status, "message": message, "updated_at": _now()}
        if stats is not None:
            values["stats"] = json.dumps(stats, sort_keys=True, default=str)
        conn.execute(sa.update(runs_table).where(
            (runs_table.c.pipeline == pipeline) & (runs_table.c.run_id == run_id)).values(**values))

    def commit(self, pipeline: str, run_id: str) -> CommitResult:
        """Move the stored offsets to the window's ends, in one transaction, compare-and-set."""
        plan = self.get_window(pipeline, run_id)
        if plan is None:
            raise WindowFailed(f"run {run_id!r} of pipeline {pipeline!r} has no planned window to commit")
        if not plan.read_done:
            raise WindowFailed(f"run {run_id!r}: the window was not read completely; nothing to commit")
        advanced: dict[TopicPartition, int] = {}
        left: dict[TopicPartition, str] = {}
        if not plan.moves_offsets:
            for p in plan.partitions:
                left[p.tp] = f"a {plan.origin.replace('_', '-')} window (a replay of a time range): stored offsets stay"
            self.mark(pipeline, run_id, "committed")
            return CommitResult(advanced, left)
        with self.engine.begin() as conn:
            stored_rows = conn.execute(
                sa.select(offsets_table).where(offsets_table.c.pipeline == pipeline)
                .with_for_update()).all()
            stored = {(r.topic, r.partition): (r.next_offset, r.run_id) for r in stored_rows}
            for p in plan.partitions:
                assert p.end is not None
                current = stored.get(p.tp)
                if plan.origin == "stored" and current is not None and current[0] != p.start:
                    if current[1] == run_id and current[0] == p.end:
                        advanced[p.tp] = p.end  # this run committed already (a repeated commit)
                    else:
                        left[p.tp] = (f"stored offset is {current[0]} (set by run {current[1]}), "
                                      f"not this window's start {p.start}: left unchanged")
                    continue
                self._upsert_offset(conn, pipeline, p.topic, p.partition, p.end, run_id)
                advanced[p.tp] = p.end
            planned_ends = {(r.topic, r.partition): r.log_end for r in conn.execute(
                sa.select(lag_table.c.topic, lag_table.c.partition, lag_table.c.log_end).where(
                    (lag_table.c.pipeline == pipeline) & (lag_table.c.run_id == run_id)
                    & (lag_table.c.source == "plan")))}
            self._add_lag(conn, pipeline, [
                (t, p, "commit", end, max(end, planned_ends.get((t, p)) or end), run_id)
                for (t, p), end in advanced.items()])
            faults.checkpoint("during_commit")
            self._set_status(conn, pipeline, run_id, "committed", None)
        return CommitResult(advanced, left)

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

    # -- operator state ------------------------------------------------------------------------
    def get_state(self, pipeline: str) -> PipelineState:
        with self.engine.connect() as conn:
            state = conn.execute(sa.select(states_table.c.state)
                                 .where(states_table.c.pipeline == pipeline)).scalar_one_or_none()
        return "stopped" if state == "stopped" else "running"

    def set_state(self, pipeline: str, state: PipelineState, by: str) -> None:
        with self.engine.begin() as conn:
            values = {"state": state, "updated_by": by, "updated_at": _now()}
            if conn.execute(sa.update(states_table).where(states_table.c.pipeline == pipeline)
                            .values(**values)).rowcount == 0:
                conn.execute(sa.insert(states_table).values(pipeline=pipeline, **values))

    # -- schema changes waiting for an operator (schema_changes: pause) ---------------------------
    def schema_changes(self, pipeline: str) -> list[dict[str, Any]]:
        """Every schema change recorded for the pipeline: {key, change, decision, run_id, decided_by,
        updated_at}, newest first."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(schema_changes_table).where(schema_changes_table.c.pipeline == pipeline)
                                .order_by(schema_changes_table.c.updated_at.desc())).all()
        return [{"key": r.change_key, "change": json.loads(r.change), "decision": r.decision, "run_id": r.run_id,
                 "decided_by": r.decided_by, "updated_at": r.updated_at} for r in rows]

    def record_schema_pending(self, pipeline: str, run_id: str, changes: Mapping[str, Mapping[str, Any]]) -> None:
        """The changes (by key) a window met and waits on; a change decided before keeps its decision."""
        with self.engine.begin() as conn:
            known = set(conn.execute(sa.select(schema_changes_table.c.change_key)
                                     .where(schema_changes_table.c.pipeline == pipeline)).scalars())
            for key, change in changes.items():
                if key not in known:
                    conn.execute(sa.insert(schema_changes_table).values(
                        pipeline=pipeline, change_key=key, change=json.dumps(change, sort_keys=True),
                        decision="pending", run_id=run_id, decided_by=None, updated_at=_now()))

    def decide_schema_changes(self, pipeline: str, decision: str, by: str) -> list[dict[str, Any]]:
        """Approve or reject every pending change; returns them."""
        with self.engine.begin() as conn:
            where = (schema_changes_table.c.pipeline == pipeline) & (schema_changes_table.c.decision == "pending")
            pending = [json.loads(c) for c in conn.execute(sa.select(schema_changes_table.c.change).where(where))
                       .scalars()]
            conn.execute(sa.update(schema_changes_table).where(where).values(
                decision=decision, decided_by=by, updated_at=_now()))
        return pending

    # -- redrives ------------------------------------------------------------------------------
    def redrives(self, pipeline: str, dlq_topic: str) -> dict[tuple[int, int], Redrive]:
        """Every recorded redrive of the pipeline's DLQ, by (DLQ partition, DLQ offset)."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(redrives_table).where(
                (redrives_table.c.pipeline == pipeline) & (redrives_table.c.dlq_topic == dlq_topic)))
            return {(r.partition, r.offset): Redrive(
                r.dlq_topic, r.partition, r.offset, r.target_topic, r.fingerprint, r.status, r.request_id,
                r.requested_by, r.updated_at) for r in rows}

    def claim_redrives(self, pipeline: str, dlq_topic: str, records: list[tuple[int, int, str, str]],
                       request_id: str, by: str) -> None:
        """Record (partition, offset, target, fingerprint) as pending, in one transaction. An entry of
        another record at the same offset (the DLQ topic was recreated) is replaced; one of the same
        record makes the insert fail, so two concurrent requests cannot both send it."""
        now = _now()
        with self.engine.begin() as conn:
            for p, o, _t, f in records:
                conn.execute(sa.delete(redrives_table).where(
                    (redrives_table.c.pipeline == pipeline) & (redrives_table.c.dlq_topic == dlq_topic)
                    & (redrives_table.c.partition == p) & (redrives_table.c.offset == o)
                    & (redrives_table.c.fingerprint != f)))
            conn.execute(sa.insert(redrives_table), [
                {"pipeline": pipeline, "dlq_topic": dlq_topic, "partition": p, "offset": o,
                 "target_topic": t, "fingerprint": f, "status": "pending", "request_id": request_id,
                 "requested_by": by, "updated_at": now} for p, o, t, f in records])

    def finish_redrives(self, pipeline: str, request_id: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(sa.update(redrives_table).where(
                (redrives_table.c.pipeline == pipeline) & (redrives_table.c.request_id == request_id)
            ).values(status="done", updated_at=_now()))

    # -- retention -------------------------------------------------------------------------------
    def due(self, pipeline: str, chore: str, every_s: float) -> bool:
        """True (and marked done now) when ``chore`` last ran more than ``every_s`` ago or never."""
        now = _now()
        with self.engine.begin() as conn:
            done = conn.execute(sa.update(chores_table).where(
                (chores_table.c.pipeline == pipeline) & (chores_table.c.chore == chore)
                & (chores_table.c.last_at < now - timedelta(seconds=every_s))).values(last_at=now)).rowcount
            if done:
                return True
        try:
            with self.engine.begin() as conn:
                conn.execute(sa.insert(chores_table).values(pipeline=pipeline, chore=chore, last_at=now))
            return True
        except IntegrityError:  # it ran recently (or another process marked it just now)
            return False

    def prune(self, pipeline: str, older_than_s: float, keep: int = 100) -> dict[str, int]:
        """Delete ledger windows (not planned or running ones) and lag samples older than
        ``older_than_s``, keeping the newest ``keep`` windows and the newest ``keep`` samples of each
        partition and source whatever their age. Returns the rows deleted per table."""
        cutoff = _now() - timedelta(seconds=older_than_s)
        with self.engine.begin() as conn:
            newest = sa.select(runs_table.c.run_id).where(runs_table.c.pipeline == pipeline).order_by(
                runs_table.c.created_at.desc()).limit(keep)
            old = [r for r in conn.execute(sa.select(runs_table.c.run_id).where(
                (runs_table.c.pipeline == pipeline) & (runs_table.c.updated_at < cutoff)
                & runs_table.c.status.in_(("committed", "applied", "failed"))
                & runs_table.c.run_id.not_in(newest.scalar_subquery()))).scalars()]
            windows = runs = 0
            for i in range(0, len(old), 500):
                chunk = old[i:i + 500]
                windows += conn.execute(sa.delete(windows_table).where(
                    (windows_table.c.pipeline == pipeline) & windows_table.c.run_id.in_(chunk))).rowcount
                runs += conn.execute(sa.delete(runs_table).where(
                    (runs_table.c.pipeline == pipeline) & runs_table.c.run_id.in_(chunk))).rowcount
            rank = sa.func.row_number().over(
                partition_by=(lag_table.c.topic, lag_table.c.partition, lag_table.c.source),
                order_by=lag_table.c.id.desc()).label("rank")
            ranked = sa.select(lag_table.c.id, lag_table.c.at, rank).where(lag_table.c.pipeline == pipeline).subquery()
            stale = [r for r in conn.execute(sa.select(ranked.c.id).where(
                (ranked.c.rank > keep) & (ranked.c.at < cutoff))).scalars()]
            lag = 0
            for i in range(0, len(stale), 500):
                lag += conn.execute(sa.delete(lag_table).where(lag_table.c.id.in_(stale[i:i + 500]))).rowcount
        return {"windows": runs, "window_partitions": windows, "lag_samples": lag}

    # -- one writer per pipeline -----------------------------------------------------------------
    def try_lease(self, pipeline: str, holder: str, seconds: float,
                  dead: Callable[[str], bool] | None = None) -> str | None:
        """Take or renew the pipeline's writer lease for ``seconds``. None when taken, else the
        current holder (whose lease has not expired). A holder that ``dead`` says is gone (a killed
        attempt, see runner.writer_lease) is taken at once, without waiting for its lease to expire."""
        now = _now()
        until = now + timedelta(seconds=seconds)
        try:
            with self.engine.begin() as conn:
                conn.execute(sa.insert(writers_table).values(pipeline=pipeline, holder=holder, expires_at=until))
            return None
        except IntegrityError:  # held (by us: renew; by another: take it only once expired)
            pass
        with self.engine.begin() as conn:
            row = conn.execute(sa.select(writers_table).where(writers_table.c.pipeline == pipeline)).first()
            if row is None:
                return "(released meanwhile; try again)"
            if row.holder != holder and row.expires_at > now and not (dead is not None and dead(row.holder)):
                return str(row.holder)
            taken = conn.execute(sa.update(writers_table).where(
                (writers_table.c.pipeline == pipeline) & (writers_table.c.holder == row.holder)
                & (writers_table.c.expires_at == row.expires_at)).values(holder=holder, expires_at=until))
            return None if taken.rowcount == 1 else str(row.holder)

    def release_lease(self, pipeline: str, holder: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(sa.delete(writers_table).where(
                (writers_table.c.pipeline == pipeline) & (writers_table.c.holder == holder)))

    def uncommitted_overlapping(self, pipeline: str, window: WindowPlan, limit: int = 20) -> list[str]:
        """The newest runs (up to ``limit``) of the pipeline, other than ``window``'s, that were
        attempted, never committed, and planned records ``window`` reads too. One query: it runs
        before every window."""
        w = windows_table.c
        other_end = sa.func.coalesce(w.end_offset, w.start_offset + w.max_records)  # read, else planned
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
                       & (runs_table.c.status != "committed") & (runs_table.c.attempt >= 1) & sa.or_(*overlaps))
                .group_by(runs_table.c.run_id).order_by(sa.func.max(runs_table.c.created_at).desc())
                .limit(limit)).scalars())

    def history(self, pipeline: str, limit: int = 20) -> list[WindowPlan]:
        with self.engine.connect() as conn:
            ids = conn.execute(sa.select(runs_table.c.run_id).where(runs_table.c.pipeline == pipeline)
                               .order_by(runs_table.c.created_at.desc()).limit(limit)).scalars().all()
        return [w for w in (self.get_window(pipeline, i) for i in ids) if w is not None]
