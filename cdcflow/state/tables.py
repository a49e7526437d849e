"""The state's tables and its one engine: the schema every part of cdcflow.state reads and writes.

The names and columns are those of the released schema (existing SQLite files keep working); a
column added after a table was first released is listed in ``_ADDED_COLUMNS`` and created on an
older database at start-up.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError, ProgrammingError, SQLAlchemyError

from cdcflow.errors import InfrastructureError

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
    # when the window was added to cdcflow_totals (at its first commit): a repeated commit adds nothing
    sa.Column("counted_at", sa.DateTime, nullable=True),
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
_ADDED_COLUMNS = {"cdcflow_runs": ("interval_start", "interval_end", "counted_at"),
                  "cdcflow_windows": ("stop_offset",)}

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
    sa.Column("change_key", sa.String(500), primary_key=True),  # (200 + 500) x 4 bytes: under InnoDB's 3072-byte key (utf8mb4)
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

# Cumulative totals per pipeline, the Prometheus counters of /cdcflow/metrics (cdcflow/state/totals.py):
# they only grow, and retention never deletes them. One row per metric and label set; ``labels`` is
# the JSON object of the labels besides the pipeline, ``labels_key`` its SHA-1 (a key of any length
# fits InnoDB's 3,072 bytes).
totals_table = sa.Table(
    "cdcflow_totals",
    metadata,
    sa.Column("pipeline", sa.String(200), primary_key=True),
    sa.Column("name", sa.String(100), primary_key=True),
    sa.Column("labels_key", sa.String(40), primary_key=True),
    sa.Column("labels", sa.Text, nullable=False),
    sa.Column("value", sa.Double, nullable=False),
    sa.Column("updated_at", sa.DateTime, nullable=False),
)


# Composed indices (cdcflow/window/compose.py): the last document version handed out per index (each
# rebuild takes a newer one before it reads the tables), and the backlog, the root keys a window found
# affected past its max_documents, carried over to the next windows.
document_versions_table = sa.Table(
    "cdcflow_document_versions",
    metadata,
    sa.Column("pipeline", sa.String(200), primary_key=True),
    sa.Column("sink", sa.String(200), primary_key=True),
    sa.Column("version", sa.BigInteger, nullable=False),
)
document_backlog_table = sa.Table(
    "cdcflow_document_backlog",
    metadata,
    sa.Column("pipeline", sa.String(200), primary_key=True),
    sa.Column("sink", sa.String(200), primary_key=True),
    sa.Column("key_hash", sa.String(40), primary_key=True),  # SHA-1 of ``root_key``: any key fits InnoDB's index
    sa.Column("root_key", sa.Text, nullable=False),  # JSON array of the key's MySQL texts
    sa.Column("run_id", sa.String(250), nullable=False),  # the window that found it affected
    sa.Column("added_at", sa.DateTime, nullable=False),
)

def now() -> datetime:
    """Naive UTC, as every timestamp column stores it."""
    return datetime.now(UTC).replace(tzinfo=None)


def naive_utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(tzinfo=None) if moment.tzinfo else moment


def default_store_url() -> str:
    url = os.environ.get("CDCFLOW_OFFSET_STORE_URL")
    if url:
        return url
    home = Path(os.environ.get("CDCFLOW_HOME", Path(__file__).resolve().parent.parent.parent / ".local"))
    (home / "state").mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{home / 'state' / 'offsets.db'}"


def safe_url(url: str) -> str:
    return sa.make_url(url).render_as_string(hide_password=True)


def open_engine(url: str) -> sa.Engine:
    """The engine of the state database, with every table (and every later column) in place."""
    kwargs: dict[str, Any] = {"pool_pre_ping": True}
    if url.startswith("sqlite"):
        kwargs["connect_args"] = {"timeout": 30}
    engine = sa.create_engine(url, **kwargs)
    try:
        try:
            _create_tables(engine)
        except (IntegrityError, ProgrammingError):
            # another process created them between our look and our CREATE (two workers' first tasks on
            # a new PostgreSQL or MySQL database): they are there now
            _create_tables(engine)
    except SQLAlchemyError as exc:
        raise InfrastructureError(f"offset store {safe_url(url)} is unavailable: {exc.__class__.__name__}: "
                                  f"{exc.orig if hasattr(exc, 'orig') else exc}") from exc
    return engine


def _create_tables(engine: sa.Engine) -> None:
    metadata.create_all(engine)
    _add_missing_columns(engine)


def _add_missing_columns(engine: sa.Engine) -> None:
    inspector = sa.inspect(engine)
    for table_name, columns in _ADDED_COLUMNS.items():
        have = {c["name"] for c in inspector.get_columns(table_name)}
        table = metadata.tables[table_name]
        for name in columns:
            if name not in have:
                column = table.c[name]
                kind = column.type.compile(dialect=engine.dialect)
                with engine.begin() as conn:
                    conn.exec_driver_sql(f"ALTER TABLE {table_name} ADD COLUMN {name} {kind} NULL")
