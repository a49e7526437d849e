"""The window's last stage, on the driver: the deletes of the tables the read tasks wrote, then every
handed-on sink, a write task per bucket of keys (:func:`write_handed`), the breaker again with the rows
the sinks rejected, and the exactly-once sink last (``offset_store.sink``: its rows and the window's
offsets in one transaction of one task).

A task reports success only after its sinks and its dead letters are flushed, so the driver commits
only what every task confirmed.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from connectors import images
from connectors.base import SinkStats
from connectors.mysql.config import MySqlSinkConfig
from connectors.mysql.offsets import OffsetCommit
from spark_jobs.blobs import CHANGES, ROWS, unpack
from spark_jobs.job import SINK_OFFSETS_KEY, WRITE_SCHEMA, WindowJob, WindowResult, breaker, count_written
from spark_jobs.project.partial import fill_kept
from spark_jobs.project.tables import by_table, key_columns, latest_rows, project_rows
from spark_jobs.sink_targets import SinkTarget
from spark_jobs.write.dead_letter_rows import dead_letter_reporter
from spark_jobs.write.prepare import Targets
from spark_jobs.write.sinks import SINK_TYPES, TableGroup
from spark_jobs.write.target_writes import at_once, offset_sink, write_static, write_target

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def write_handed(job: WindowJob, packed: DataFrame, tasks: int, targets: Targets | None,
                 early: dict[str, SinkTarget], deletes: dict[str, list[bytes]], result: WindowResult) -> None:
    """The window's writes after its dead letters (``job``: the handed-on sinks; ``targets``: made
    ready for them by write/prepare.py): the early targets' ``deletes`` first, once every read task's
    upserts are in; then every handed-on sink but the exactly-once one; the breaker with the rows the
    sinks rejected; the exactly-once sink last, once every other sink succeeded."""
    if deletes:
        with result.timed("deletes"):
            _write_deletes(job, early, deletes, result)
    if targets is None:  # no handed-on sink (window.py makes them ready only when there is one)
        return
    with result.timed("sinks"):
        commit = job.offset_commit(result.ends)
        _write(job, packed, tasks, targets, result, skip_offsets_sink=commit is not None)
        breaker(job, result)  # with the rows the sinks rejected, before the exactly-once sink
        if commit is not None:  # last, once every other sink succeeded: its transaction commits the offsets
            _write_offsets_sink(job, packed, targets, commit, result)


def _write(job: WindowJob, packed: DataFrame, tasks: int, targets: Targets, result: WindowResult,
           skip_offsets_sink: bool) -> None:
    """Every sink (but the exactly-once one, written last): a write task per bucket of keys."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    names = [t.config.name for t in job.sinks if not (skip_offsets_sink and t.config.name == job.offsets_sink)]
    for name in names:
        result.sinks.setdefault(name, SinkStats())
    if not names:
        return
    frame = packed.where(F.col("kind").isin(ROWS, CHANGES) & F.col("target").isin(*names))
    if tasks > 1:  # every key's (and table's) rows of every read task in one write task (blobs.bucketed)
        frame = frame.repartition(tasks, "bucket")
    _count_writes(result, frame.mapInArrow(write_task(job, targets), WRITE_SCHEMA).collect())


def _write_deletes(job: WindowJob, early: dict[str, SinkTarget], deletes: dict[str, list[bytes]],
                   result: WindowResult) -> None:
    """The deletes of the tables the read tasks wrote (``project.mysql_deletes``), written here, on
    the driver, once every read task's upserts are in. They came with the tallies: a row per key a
    read task deleted (its last change, with its record for a dead letter), too few for a Spark stage
    of their own."""
    writes = {name: (lambda n=name, b=blobs: [write_static(job, early[n], unpack(b), several=True)])
              for name, blobs in deletes.items()}
    for row in at_once(writes):
        count_written(result, row.column("sink")[0].as_py(), SimpleNamespace(**row.to_pylist()[0]))


def _write_offsets_sink(job: WindowJob, packed: DataFrame, targets: Targets, commit: Any,
                        result: WindowResult) -> None:
    """Exactly-once: the offset sink's rows of every read task and the window's offsets, in one
    transaction of one task (or the offsets alone, from the driver, when the sink has no row). A
    table from the record schema comes as its changes (a table group of one table: the config allows
    no routing), made ready before like the others (``prepare.make_ready``: its DDL, which MySQL
    commits apart, runs before the transaction, as a declared table's does)."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    assert job.offsets_sink is not None
    group = targets.groups.get(job.offsets_sink)
    target = targets.static[job.offsets_sink] if group is None else group.target
    kind = ROWS if group is None else CHANGES
    frame = packed.where((F.col("kind") == kind) & (F.col("target") == job.offsets_sink)).coalesce(1)
    rows = frame.mapInArrow(write_task(job, targets, commit), WRITE_SCHEMA).collect()
    if not any(SINK_OFFSETS_KEY in json.loads(r.extra) for r in rows):
        rows.append(commit_without_rows(job, target, commit))
    result.sinks.setdefault(target.config.name, SinkStats())
    _count_writes(result, rows)


def _count_writes(result: WindowResult, rows: list[Any]) -> None:
    for row in rows:
        count_written(result, row.sink, row)


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
