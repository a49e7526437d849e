"""One sink target's rows written: below the write stage's modules (a read task writes its early
targets with these, the write tasks theirs; these use none of them). A target's write reports
success only after its rows and its dead letters are flushed, so the driver commits only what every
task confirmed. With ``commit`` (``offset_store.sink``, exactly-once) the rows and the window's
offsets are one transaction.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from connectors import faults
from connectors.base import ArrowSink, FailedRecord, OffsetSink, Sink
from connectors.errors import ConfigError, ToleranceExceeded
from connectors.kafka.dlq import DeadLetterReporter
from connectors.mysql.offsets import OffsetCommit
from spark_jobs.job import CHANGED_KEY, DLQ_CLASS_KEY, SECONDS_KEY, SINK_OFFSETS_KEY, UNFIT_KEY, WindowJob
from spark_jobs.project.partial import fill_kept
from spark_jobs.project.tables import latest_rows, row_keys
from spark_jobs.raw_values import restored
from spark_jobs.sink_targets import SinkTarget, is_history
from spark_jobs.write.dead_letter_rows import dead_letter_reporter, failed_from_row
from spark_jobs.write.sinks import SINK_TYPES


def rejected(batch: pa.RecordBatch, component: str) -> tuple[pa.RecordBatch, list[FailedRecord]]:
    """The rows of a writer's batch whose values do not fit their columns (error_message set, for the
    targets that report their own, see ``reports_own_errors``) as dead letters, and the rest."""
    if "error_message" not in batch.schema.names or batch.column("error_message").null_count == batch.num_rows:
        return batch, []
    errors = batch.column("error_message")
    bad = batch.filter(pc.is_valid(errors)).to_pylist()
    return batch.filter(pc.is_null(errors)), [failed_from_row(r, "transform", component, r["error_message"])
                                              for r in bad]


def offset_sink(sink: Sink, name: str) -> OffsetSink:
    if not isinstance(sink, OffsetSink):  # the config allows a MySQL sink only (cdcflow/config.py)
        raise ConfigError(f"offset_store.sink: sink {name!r} cannot commit offsets in its transaction")
    return sink


def write_target(job: WindowJob, target: SinkTarget, batches: Iterator[pa.RecordBatch], sink: Sink,
                  dlq: DeadLetterReporter | None, commit: OffsetCommit | None = None,
                  opened: bool = False) -> pa.RecordBatch:
    """Write one target's batches and flush them, and its dead letters, before the task reports
    success (so before any commit). Rows whose values do not fit (error_message set:
    ``reports_own_errors``, spark_jobs/project/tables.py) go to the DLQ from here. Returns its stats row.
    ``opened``: the caller opened the sink (a table of many, whose tables the window prepared)."""
    cfg = target.config
    kind = SINK_TYPES[cfg.type]
    classes: dict[str, int] = {}
    unfit = 0

    def handle(failed: list[FailedRecord]) -> None:
        for rec in restored(job, failed) if dlq is not None else failed:  # values a Spark stage left out
            if dlq is None:
                raise ToleranceExceeded(
                    f"errors.tolerance is 'none' and sink {cfg.name!r} rejected {rec.topic}[{rec.partition}]"
                    f"@{rec.offset}: {rec.message}")
            dlq.report(rec)
            if rec.stage == "sink":
                classes[rec.error_class] = classes.get(rec.error_class, 0) + 1

    write_arrow = sink.write_arrow if isinstance(sink, ArrowSink) else None  # the batches as they are
    offsets = offset_sink(sink, cfg.name) if commit is not None else None  # exactly-once
    if not opened:
        sink.open()
    extra: dict[str, Any] = {}
    try:
        if commit is not None and offsets is not None and not offsets.begin_window(commit):
            for _batch in batches:  # an earlier attempt of this run committed: nothing to write
                pass
            extra[SINK_OFFSETS_KEY] = {"already": commit.run_id}
            batches = iter(())
        for batch in batches:
            batch, refused = rejected(batch, target.component)
            handle(refused)
            unfit += len(refused)
            handle(write_arrow(batch) if write_arrow is not None else sink.write(kind.to_changes(batch, cfg)))
            if sink.stats.upserted + sink.stats.deleted + sink.stats.stale + sink.stats.unchanged:
                faults.checkpoint("between_sink_batches", job.faults)
        handle(sink.flush())
        if dlq is not None:
            faults.checkpoint("before_dlq_flush", job.faults)
            dlq.flush()  # before the task reports success, so before any commit
        if commit is not None and SINK_OFFSETS_KEY not in extra:
            assert offsets is not None
            extra[SINK_OFFSETS_KEY] = offsets.commit_window(
                commit, lambda: faults.checkpoint("during_sink_commit", job.faults))
    finally:
        sink.close()
    s = sink.stats
    if unfit:
        extra[UNFIT_KEY] = unfit
    if s.changed:
        extra[CHANGED_KEY] = s.changed
    return pa.RecordBatch.from_pydict({"sink": [cfg.name], "upserted": [s.upserted], "deleted": [s.deleted],
                                       "stale": [s.stale], "unchanged": [s.unchanged], "failed": [s.failed],
                                       "extra": [json.dumps({**s.extra, **extra, **{f"{DLQ_CLASS_KEY}{c}": n
                                                                                     for c, n in classes.items()}})]})


def write_static(job: WindowJob, target: SinkTarget, table: pa.Table, several: bool,
                 commit: Any = None) -> pa.RecordBatch:
    """A static target's rows (each key's last change, per read task) written: reduced again when they
    come from ``several`` read tasks or hold tombstones whose delete was not resolved."""
    keys = row_keys(target)
    if keys and (several or table.column("version").null_count):
        table = latest_rows(fill_kept(table, target.config, keys), keys, every_version=is_history(target))
    return write_target(job, target, iter(table.to_batches()), SINK_TYPES[target.config.type].open(target),
                        dead_letter_reporter(job), commit)


def at_once(writes: dict[str, Callable[[], list[pa.RecordBatch]]]) -> list[pa.RecordBatch]:
    """Each target's write (its stats rows, with its seconds) at the same time: MySQL and
    Elasticsearch wait on different servers; every one finishes before the first error is raised."""
    def timed(name: str) -> list[pa.RecordBatch]:
        started = time.perf_counter()
        rows = writes[name]()
        seconds = (time.perf_counter() - started) / max(len(rows), 1)
        out = []
        for row in rows:
            extra = json.loads(row.column("extra")[0].as_py())
            extra[SECONDS_KEY] = seconds
            out.append(row.set_column(row.schema.get_field_index("extra"), "extra", pa.array([json.dumps(extra)])))
        return out

    if len(writes) <= 1:
        return [row for name in writes for row in timed(name)]
    with ThreadPoolExecutor(max_workers=len(writes), thread_name_prefix="cdcflow-write") as pool:
        futures = [pool.submit(timed, name) for name in writes]
    return [row for future in futures for row in future.result()]
