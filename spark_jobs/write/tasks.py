"""The write tasks: each sink target's rows written, flushed, and their rejects dead-lettered.

A task reports success only after its sinks and its dead letters are flushed, so the driver commits
only what every task confirmed. With ``offset_store.sink`` (exactly-once) one task writes that sink's
rows and the window's offsets in one transaction.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from connectors import faults, images
from connectors.base import ArrowSink, FailedRecord, OffsetSink, Sink
from connectors.errors import ConfigError, ToleranceExceeded
from connectors.kafka.dlq import DeadLetterReporter
from connectors.mysql.config import MySqlSinkConfig
from connectors.mysql.offsets import OffsetCommit
from spark_jobs.blobs import unpack
from spark_jobs.write.dead_letters import dead_letter_reporter, failed_from_row
from spark_jobs.job import CHANGED_KEY, DLQ_CLASS_KEY, SECONDS_KEY, SINK_OFFSETS_KEY, UNFIT_KEY, WindowJob
from spark_jobs.project.partial import fill_kept
from spark_jobs.sink_targets import SinkTarget, is_history
from spark_jobs.write.prepare import Targets
from spark_jobs.write.raw_values import restored
from spark_jobs.write.sinks import SINK_TYPES, TableGroup
from spark_jobs.project.tables import by_table, key_columns, latest_rows, project_rows, row_keys

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def rejected(batch: pa.RecordBatch, component: str) -> tuple[pa.RecordBatch, list[FailedRecord]]:
    """The rows of a writer's batch whose values do not fit their columns (error_message set, for the
    targets that report their own, see ``reports_own_errors``) as dead letters, and the rest."""
    if "error_message" not in batch.schema.names or batch.column("error_message").null_count == batch.num_rows:
        return batch, []
    errors = batch.column("error_message")
    bad = batch.filter(pc.is_valid(errors)).to_pylist()
    return batch.filter(pc.is_null(errors)), [failed_from_row(r, "transform", component, r["error_message"])
                                              for r in bad]


def reports_own_errors(target: SinkTarget, frame: DataFrame) -> bool:
    """A MySQL table created from the record schema: its columns come from the same schema as the
    values, so a value that does not fit is rare (a type changed within the window). Its writer sends
    such rows to the DLQ itself, rather than every table's projection joining the window's tally (a
    plan that grew with tables × columns: seconds per window for 50 tables, docs/benchmarks.md)."""
    return isinstance(target.config, MySqlSinkConfig) and not target.config.columns and "row_schema" in frame.columns


def writer(job: WindowJob, target: SinkTarget,
            commit: OffsetCommit | None = None) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The write task of one sink target; with ``commit`` (the offset sink, exactly-once) the task
    writes everything in one transaction that also commits the window's offsets."""
    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield write_target(job, target, batches, SINK_TYPES[target.config.type].open(target), dead_letter_reporter(job),
                            commit)
    return write


JOINED_ROWS = 10_000  # a write task's tables with fewer changes than this are written in one transaction


def tables_writer(job: WindowJob, group: TableGroup,
                  commit: OffsetCommit | None = None) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The write task of a sink's many tables (spark_jobs/project/tables.py): per table of the task's
    changes, the projection and the last change per key in Arrow, then the table's writer; one
    connection and one dead-letter producer for them all. A few changes of many tables (a Debezium
    deployment's steady state) are written in one transaction, a savepoint per table: one commit
    (an fsync) instead of one per table; larger ones table by table, each in its own. With
    ``commit`` (the exactly-once sink, one table) the table's rows and the window's offsets are one
    transaction."""
    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from connectors.mysql.sink import (  # noqa: PLC0415
            MySqlSink,
            one_transaction,
            read_newest_tombstones,
            writer_engine,
        )

        received = list(batches)
        if not received:
            return
        engine = writer_engine(group.target.url, shared=True)
        dlq = dead_letter_reporter(job)
        try:
            tables = [(group.tables[name], rows) for name, rows in by_table(images.concat_tables(
                [pa.table(b) for b in received]))]
            sinks = [MySqlSink(_table_config(t), t.url, engine=engine) for t, _rows in tables]
            read_newest_tombstones(engine, sinks)  # one query for the task's tables (each open() would read its own)
            assert commit is None or len(tables) == 1, "the exactly-once sink writes one table"
            joined = len(tables) > 1 and sum(r.num_rows for _t, r in tables) <= JOINED_ROWS
            with one_transaction(engine, sinks) if joined else contextlib.nullcontext():
                out = []
                for (target, rows), sink in zip(tables, sinks, strict=True):
                    keys = key_columns(sink.cfg)
                    latest = latest_rows(fill_kept(project_rows(rows, sink.cfg), sink.cfg, keys), keys,
                                         every_version=sink.cfg.mode == "history")
                    sink.open(prepared=True)  # the window prepared its tables and read their tombstones
                    out.append(write_target(job, target, iter(latest.to_batches()), sink, dlq, commit, opened=True))
            yield from out  # once the tables' transaction committed
        finally:
            engine.dispose()
    return write


def _table_config(target: SinkTarget) -> MySqlSinkConfig:
    assert isinstance(target.config, MySqlSinkConfig), "a sink's tables are MySQL tables"
    return target.config


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


def commit_without_rows(job: WindowJob, target: SinkTarget, commit: OffsetCommit) -> Any:
    """Exactly-once when the offset sink has no row in this window (every change went elsewhere or
    to the DLQ): its transaction commits the offsets alone, from the driver. A table from the record
    schema is left as it is (no change of the window made it ready; it may not exist yet)."""
    from pyspark.sql import Row  # noqa: PLC0415

    if isinstance(target.config, MySqlSinkConfig) and not target.config.columns:
        sink = offset_sink(SINK_TYPES[target.config.type].open(target), target.config.name)
        sink.open_for_offsets()
        row = write_target(job, target, iter(()), sink, dead_letter_reporter(job), commit, opened=True)
        return Row(**row.to_pylist()[0])
    rows = list(writer(job, target, commit)(iter(())))[0].to_pylist()[0]
    return Row(**rows)


def write_task(job: WindowJob, targets: Targets,
                commit: Any = None) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """Each target's rows of this task's blobs, the targets at the same time (:func:`at_once`); with
    ``commit``, the exactly-once sink's rows of every task in one transaction with the window's offsets."""
    def one(name: str, blobs: list[bytes], tasks: set[int]) -> list[pa.RecordBatch]:
        if name in targets.groups:
            return list(tables_writer(job, targets.groups[name], commit)(unpack(blobs).to_batches()))
        return [write_static(job, targets.static[name], unpack(blobs), several=len(tasks) > 1, commit=commit)]

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        blobs: dict[str, list[bytes]] = {}
        tasks: dict[str, set[int]] = {}  # the read tasks each target's blobs come from
        for batch in batches:
            for name, blob, task in zip(batch.column("target").to_pylist(), batch.column("blob").to_pylist(),
                                        batch.column("task").to_pylist(), strict=True):
                blobs.setdefault(name, []).append(blob)
                tasks.setdefault(name, set()).add(task)
        names = [t.config.name for t in job.sinks if t.config.name in blobs]  # in the config's order
        yield from at_once({name: (lambda n=name: one(n, blobs[n], tasks[n])) for name in names})
    return write


def write_now(job: WindowJob, targets: dict[str, SinkTarget], rows: dict[str, pa.Table]) -> list[pa.RecordBatch]:
    """A read task's own rows of the targets it writes itself (``early.early_targets``: their keys
    are in no other task), the targets at the same time."""
    names = [t.config.name for t in job.sinks if t.config.name in rows]  # in the config's order
    return at_once({name: (lambda n=name: [write_static(job, targets[n], rows[n], several=False)]) for name in names})


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
