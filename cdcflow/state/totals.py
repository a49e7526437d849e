"""Cumulative totals per pipeline: the counters /cdcflow/metrics serves (cdcflow/metrics.py).

Why a table of their own: the counters used to be summed from the ledger at every scrape, and
retention prunes the ledger, so they went down after a prune, which Prometheus reads as a restart
(``rate()`` and ``increase()`` were wrong, and the DLQ-rate alert could fire on nothing). These rows
only grow, and retention (state/chores.py) never touches them.

When a window adds to them: **once, in the transaction that marks it committed in the ledger**
(:meth:`cdcflow.state.offsets.SqlOffsetStore.commit`), with the statistics the ledger holds for it
then. The run's ``counted_at`` is claimed in that transaction, so a repeated commit (a retried commit
task) or a committed run re-run and committed again adds nothing; a commit that dies before its
transaction ends adds nothing either, and its retry counts the window. Exactly-once pipelines follow
the same rule: their window's offsets commit in the MySQL sink's transaction, but the ledger learns it
only when the run's commit step runs (after a kill, the run's retry finds its sink transaction done,
writes nothing and commits the ledger), so a window is counted when its ledger commit happens, once.
A failed attempt adds to its own counter in the transaction that marks it failed (state/ledger.py):
a window may fail several times and then commit, so "failed" is never a window's final outcome here.

Rows are (pipeline, name, labels) -> value; a histogram keeps one row per bucket that an
observation fell into (not cumulative) and its sum, and the scrape adds them up, so a change of
``DURATION_BUCKETS`` keeps every count.

Databases that held a ledger before these totals existed are **seeded once** from the ledger as it
is (its committed windows), so the counters continue rather than start again at zero
(:meth:`Totals.seed_from_ledger`, run when the state store opens).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from cdcflow.errors import InfrastructureError
from cdcflow.state.tables import now, runs_table, totals_table, windows_table

# the counters' names, as Prometheus shows them without ``_total``
WINDOWS = "cdcflow_windows"  # {outcome="committed"}
ATTEMPTS_FAILED = "cdcflow_window_attempts_failed"
RECORDS_READ = "cdcflow_records_read"  # {topic, partition}
SINK_RECORDS = "cdcflow_sink_records"  # {sink, outcome}
DEAD_LETTERS = "cdcflow_dead_letters"  # {stage, error_class}
DOCUMENTS = "cdcflow_documents"  # a composed index's documents {sink, outcome}: affected, rebuilt, deleted, carried
DURATION = "cdcflow_window_duration_seconds"  # histogram
STAGE_SECONDS = "cdcflow_window_stage_seconds"  # histogram {stage}
LAST_COMMITTED = "cdcflow_last_committed_at"  # the newest count's time (Unix seconds): kept as a maximum
SINK_OUTCOMES = ("upserted", "deleted", "stale", "unchanged", "failed")
DOCUMENT_OUTCOMES = ("affected", "rebuilt", "deleted", "carried")
DURATION_BUCKETS = (0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)
SEEDED = ("", "seeded_from_ledger")  # (pipeline, name) of the marker row: no pipeline has an empty name

Labels = tuple[tuple[str, str], ...]  # sorted (name, value) pairs, the pipeline's left out
Amounts = dict[tuple[str, Labels], float]  # (name, labels) -> what to add


def _add(amounts: Amounts, name: str, amount: float, **labels: str) -> None:
    key = (name, tuple(sorted(labels.items())))
    amounts[key] = amounts.get(key, 0) + amount


def _observe(amounts: Amounts, histogram: str, seconds: float, **labels: str) -> None:
    bucket = next((str(b) for b in DURATION_BUCKETS if seconds <= b), "+Inf")
    _add(amounts, f"{histogram}_bucket", 1, le=bucket, **labels)
    _add(amounts, f"{histogram}_sum", seconds, **labels)


def window_amounts(stats: Mapping[str, Any], records: Mapping[tuple[str, int], int]) -> Amounts:
    """What one committed window adds: itself, the records it read per partition, its changes per sink
    and outcome, its dead letters, its duration and stage times (``stats`` as the ledger holds it;
    a sink's ``unchanged`` is missing from windows applied before it existed)."""
    amounts: Amounts = {}
    _add(amounts, WINDOWS, 1, outcome="committed")
    for (topic, partition), n in records.items():
        _add(amounts, RECORDS_READ, n, topic=topic, partition=str(partition))
    for sink, counts in (stats.get("sinks") or {}).items():
        for outcome in SINK_OUTCOMES:
            _add(amounts, SINK_RECORDS, int(counts.get(outcome, 0)), sink=sink, outcome=outcome)
    for sink, counts in (stats.get("documents") or {}).items():
        for outcome in DOCUMENT_OUTCOMES:
            _add(amounts, DOCUMENTS, int(counts.get(outcome, 0)), sink=sink, outcome=outcome)
    for d in stats.get("dead_letters") or []:
        _add(amounts, DEAD_LETTERS, int(d["count"]), stage=d["stage"], error_class=d["error_class"])
    if stats.get("seconds") is not None:
        _observe(amounts, DURATION, float(stats["seconds"]))
    for stage, seconds in (stats.get("stages") or {}).items():
        _observe(amounts, STAGE_SECONDS, float(seconds), stage=stage)
    return amounts


def _write(conn: sa.Connection, pipeline: str, amounts: Amounts, at: datetime, keep_max: bool = False) -> None:
    """Add ``amounts`` to the pipeline's rows (or, ``keep_max``, raise them to it). Update, else insert:
    two windows of one pipeline that create the same row at the same moment can meet a duplicate key
    (or a deadlock on MySQL); that commit's transaction rolls back whole, its run's ``counted_at``
    too, and Airflow's retry counts it."""
    t = totals_table.c
    for (name, labels), amount in sorted(amounts.items()):
        text = json.dumps(dict(labels), sort_keys=True)
        key = hashlib.sha1(text.encode()).hexdigest()
        value = sa.case((t.value < amount, amount), else_=t.value) if keep_max else t.value + amount
        if conn.execute(sa.update(totals_table).where(
                (t.pipeline == pipeline) & (t.name == name) & (t.labels_key == key))
                .values(value=value, updated_at=at)).rowcount == 0:
            conn.execute(sa.insert(totals_table).values(pipeline=pipeline, name=name, labels_key=key, labels=text,
                                                        value=amount, updated_at=at))


def _unix(at: datetime) -> float:
    return at.replace(tzinfo=UTC).timestamp()


def count_committed(conn: sa.Connection, pipeline: str, run_id: str) -> bool:
    """Inside the transaction that marks the run committed: add its window to the totals, unless the
    run was counted already. Returns whether it was counted now."""
    at = now()
    r = runs_table.c
    claimed = conn.execute(sa.update(runs_table).where(
        (r.pipeline == pipeline) & (r.run_id == run_id) & r.counted_at.is_(None)).values(counted_at=at)).rowcount
    if not claimed:
        return False
    stats = json.loads(conn.execute(sa.select(r.stats).where(
        (r.pipeline == pipeline) & (r.run_id == run_id))).scalar_one() or "{}")
    w = windows_table.c
    records = {(row.topic, row.partition): int(row.records or 0) for row in conn.execute(
        sa.select(w.topic, w.partition, w.records).where((w.pipeline == pipeline) & (w.run_id == run_id)))}
    _write(conn, pipeline, window_amounts(stats, records), at)
    _write(conn, pipeline, {(LAST_COMMITTED, ()): _unix(at)}, at, keep_max=True)
    return True


def count_failed_attempt(conn: sa.Connection, pipeline: str) -> None:
    """Inside the transaction that marks an attempt failed: one more failed attempt."""
    _write(conn, pipeline, {(ATTEMPTS_FAILED, ()): 1}, now())


def _seed(conn: sa.Connection) -> int:
    """The committed windows not counted yet, added to the totals and marked counted. Returns how many."""
    r, w = runs_table.c, windows_table.c
    uncounted = (r.status == "committed") & r.counted_at.is_(None)
    per_pipeline: dict[str, Amounts] = {}
    newest: dict[str, datetime] = {}
    n = 0
    for row in conn.execute(sa.select(r.pipeline, r.stats, r.updated_at).where(uncounted)):
        amounts = per_pipeline.setdefault(row.pipeline, {})
        for key, amount in window_amounts(json.loads(row.stats or "{}"), {}).items():
            amounts[key] = amounts.get(key, 0) + amount
        newest[row.pipeline] = max(row.updated_at, newest.get(row.pipeline, row.updated_at))
        n += 1
    for part in conn.execute(
            sa.select(w.pipeline, w.topic, w.partition, sa.func.sum(w.records).label("records"))
            .join(runs_table, (r.pipeline == w.pipeline) & (r.run_id == w.run_id)).where(uncounted)
            .group_by(w.pipeline, w.topic, w.partition)):
        _add(per_pipeline.setdefault(part.pipeline, {}), RECORDS_READ, int(part.records or 0), topic=part.topic,
             partition=str(part.partition))
    at = now()
    for pipeline, amounts in per_pipeline.items():
        _write(conn, pipeline, amounts, at)
    for pipeline, moment in newest.items():
        _write(conn, pipeline, {(LAST_COMMITTED, ()): _unix(moment)}, at, keep_max=True)
    conn.execute(sa.update(runs_table).where(uncounted).values(counted_at=at))
    return n


class Totals:
    """The totals of the pipelines in one state database."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def read(self, pipeline: str) -> dict[str, list[tuple[dict[str, str], float]]]:
        """name -> [(labels, value)] of the pipeline, sorted by labels."""
        t = totals_table.c
        out: dict[str, list[tuple[dict[str, str], float]]] = {}
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(t.name, t.labels, t.value).where(t.pipeline == pipeline)
                                .order_by(t.name, t.labels)).all()
        for row in rows:
            out.setdefault(row.name, []).append((json.loads(row.labels), float(row.value)))
        return out

    def seed_from_ledger(self) -> int | None:
        """Once per database (a marker row says it was done): count the ledger's committed windows.
        Returns how many were counted, or None when it was done before (here or by another process)."""
        t = totals_table.c
        marker = (t.pipeline == SEEDED[0]) & (t.name == SEEDED[1])
        try:
            with self.engine.connect() as conn:
                if conn.execute(sa.select(t.value).where(marker)).first() is not None:
                    return None
            try:
                with self.engine.begin() as conn:
                    # first: a second process's seed waits on this row, then fails on its key
                    conn.execute(sa.insert(totals_table).values(pipeline=SEEDED[0], name=SEEDED[1], labels_key="",
                                                                labels="{}", value=_unix(now()), updated_at=now()))
                    return _seed(conn)
            except IntegrityError:
                return None
        except SQLAlchemyError as exc:
            raise InfrastructureError(f"offset store: seeding the metric totals from the ledger failed: "
                                      f"{exc.__class__.__name__}: {getattr(exc, 'orig', exc)}") from exc
