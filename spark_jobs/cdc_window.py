"""The consume-window Spark job: read the planned ranges, decode, report bad records, apply sinks.

The driver ships one read range per Spark task; each task reads its partition with confluent-kafka
(the partition-consumer model) and hands Arrow batches to the JVM. The read result is checkpointed
locally so later stages never re-read Kafka (a recomputation could see a different range). Decoding
and per-key reduction are Spark expressions; sinks and the DLQ reporter run inside tasks, each task
flushing before it reports success, so the driver commits only what every task confirmed.

Run in-process (``airflow dags test``, the CLI) through :func:`cdcflow.runner.process`, or under
``spark-submit`` / SparkSubmitOperator with ``python spark_jobs/submit.py --pipeline NAME --run-id ID``.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from cdcflow import errors as cdc_errors
from cdcflow import faults
from cdcflow.config import ElasticsearchSinkConfig, MySqlSinkConfig
from cdcflow.errors import CdcflowError, ConfigError, DeadLettersExceeded, ToleranceExceeded, WindowFailed
from connectors import images
from connectors.base import ArrowSink, OffsetSink, Sink, SinkStats
from connectors.changes import DECODED_SPARK_COLUMNS, TRUNCATE
from connectors.debezium.envelope import hints_from_columns
from connectors.formats import decoder as format_decoder
from connectors.kafka.dlq import DeadLetterReporter, FailedRecord
from connectors.kafka.reader import RAW_SPARK_SCHEMA, KafkaRangeReader, ReadRange
from connectors.mysql.offsets import OffsetCommit
from spark_jobs.deadline import Deadline
from spark_jobs.session import Checkpoints, activate
from spark_jobs.sinks import (
    SINK_TYPES,
    SinkTarget,
    TableGroup,
    mysql_routes,
    prepare_derived,
    prepare_tables,
    unroutable,
)
from spark_jobs.tables import GROUP_COLUMNS, TABLE_COLUMN, by_table, key_columns, latest_rows, project_rows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

RANGE_SCHEMA = pa.schema([("idx", pa.int32())])
REPORT_SCHEMA = "reported long"
DLQ_CLASS_KEY = "dlq:"  # sink dead letters by error class ride in the writer's extra stats
WRITE_SCHEMA = "sink string, upserted long, deleted long, stale long, failed long, extra string"
SINK_OFFSETS_KEY = "sink_offsets"  # the offset sink's commit result, in its writer's extra stats
CHANGED_KEY = "changed"  # per table/index: [upserted, deleted] (SinkStats.changed), for the asset events
SECONDS_KEY = "seconds"  # a per-partition write task's time on one target (spark_jobs/partition_tasks.py)
UNFIT_KEY = "unfit"  # rows a writer sent to the DLQ because their values do not fit (reports_own_errors)
MAX_EXAMPLES = 5
SMALL_WINDOW = 20_000  # records; up to this, each sink is written by one task (no shuffle)
SINK_CONCURRENCY = 4  # sink targets written at the same time (routed tables can be many)
RECORDS_PER_READ_TASK = 5_000  # planned records per read task, in windows that end by themselves
# the changes the sinks get: read, and not a record that changes nothing (a Maxwell bootstrap-start) nor a
# TRUNCATE (the pipeline's truncate setting: ignored, or dead-lettered by _truncates)
VALID_CHANGES = f"error_stage IS NULL AND change_op IS NOT NULL AND change_op != '{TRUNCATE}'"
TRUNCATE_TO_DLQ = ("a TRUNCATE of the source table {table} (truncate: dlq): sent to the dead-letter topic, the target "
                   "keeps its rows; truncate: ignore skips such records")


@dataclass(frozen=True)
class WindowJob:
    """Everything the executors need; resolved on the driver so executors need no Airflow."""

    pipeline: str
    run_id: str
    consumer_conf: dict[str, Any]
    producer_conf: dict[str, Any]
    ranges: tuple[ReadRange, ...]
    sinks: tuple[SinkTarget, ...]
    versioning: str
    tolerance: str
    dlq_topic: str | None
    context_headers: bool
    transforms: tuple[Any, ...] = ()
    key_converter: str = "json"
    value_converter: str = "json"
    # dead letters an earlier attempt of this window sent already: (topic, partition, offset, component)
    dead_letters_sent: frozenset[tuple[str, int, int, str]] = frozenset()
    faults: tuple[str, ...] = ()  # fault injection points active in the tasks (cdcflow.faults)
    # exactly-once (offset_store.sink): the MySQL sink whose transaction commits the window's offsets,
    # and how (advance: compare-and-set from the starts; set: a rewind; keep: a time-range replay)
    offsets_sink: str | None = None
    offsets_mode: str = "advance"
    max_dead_letters: Any = None  # errors.max_dead_letters (cdcflow.config.DeadLetterLimit): the breaker
    spark_timeout: float = 1800.0  # spark.timeout: the window's Spark work is cancelled past it (spark_jobs/deadline.py)
    source_format: str = "debezium"  # source.format: the decoder of the records (connectors/formats.py)
    truncate: str = "ignore"  # truncate: what a TRUNCATE of a source table does (ignore | dlq)
    schema_changes: str = "lenient"  # tables made from the record schema: connectors/mysql/evolution.py
    schema_decisions: tuple[tuple[str, str], ...] = ()  # schema_changes pause: (change key, approved|rejected)
    # Debezium: a smaller batch is decoded record by record (connectors/debezium/envelope.COLUMN_WISE_MIN;
    # $CDCFLOW_COLUMN_WISE_MIN on the driver sets it, so that tests run small windows column-wise too)
    column_wise_min: int | None = None

    def offset_commit(self, ends: dict[tuple[str, int], tuple[int, int]]) -> OffsetCommit | None:
        if self.offsets_sink is None:
            return None
        return OffsetCommit(self.pipeline, self.run_id, self.offsets_mode,  # type: ignore[arg-type]
                            tuple((r.topic, r.partition, r.start, ends[(r.topic, r.partition)][0]) for r in self.ranges))


@dataclass
class WindowResult:
    ends: dict[tuple[str, int], tuple[int, int]]
    records: int = 0
    dead_lettered: int = 0
    dead_letters: dict[tuple[str, str], int] = field(default_factory=dict)  # (stage, error class) -> count
    sinks: dict[str, SinkStats] = field(default_factory=dict)
    stages: dict[str, float] = field(default_factory=dict)  # wall seconds per stage, where time goes
    # exactly-once: what the offset sink's transaction committed ({advanced, left} or {already: run})
    sink_offsets: dict[str, Any] | None = None
    record_time: list[int | None] = field(default_factory=lambda: [None, None])  # Kafka ms: first, last
    truncates_ignored: int = 0  # TRUNCATEs of source tables left unapplied (truncate: ignore)
    schema_changes: list[dict[str, Any]] = field(default_factory=list)  # DDL run and changes ignored, per column
    truncates: list[dict[str, Any]] = field(default_factory=list)  # truncate: apply: per table, its version, rows deleted

    def stats(self) -> dict[str, Any]:
        return {"records": self.records, "dead_lettered": self.dead_lettered, "record_time": self.record_time,
                **({"sink_offsets": self.sink_offsets} if self.sink_offsets is not None else {}),
                **({"truncates_ignored": self.truncates_ignored} if self.truncates_ignored else {}),
                **({"schema_changes": self.schema_changes} if self.schema_changes else {}),
                **({"truncates": self.truncates} if self.truncates else {}),
                "dead_letters": [{"stage": st, "error_class": ec, "count": n}
                                 for (st, ec), n in sorted(self.dead_letters.items())],
                "sinks": {n: vars(s) for n, s in self.sinks.items()},
                "stages": {k: round(v, 3) for k, v in self.stages.items()}}

    def lap(self, stage: str, since: float) -> float:
        now = time.perf_counter()
        self.stages[stage] = self.stages.get(stage, 0.0) + now - since
        return now


# -- executor side ---------------------------------------------------------------------------------
def _reader(job: WindowJob, tasks: int, decode: bool = False,
            typed: bool = False) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The read task; with ``decode``, it also decodes what it read into changes, by the pipeline's
    source.format (connectors/formats.py: values read by their schema, or by the declared columns).
    The images stay typed with ``typed`` (the records stay in the worker: spark_jobs/partition_tasks.py);
    else they go to Spark as map<string,string> of their exact texts (DECODED_SPARK_COLUMNS)."""
    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        reader = KafkaRangeReader(job.consumer_conf)
        decoder = change_decoder(job) if decode else None
        for batch in batches:
            for idx in batch.column("idx").to_pylist():
                ranges = list(job.ranges[idx::tasks])  # several only in a small window (read_tasks)
                for raw in reader.read_ranges(ranges, midway=lambda: faults.checkpoint("during_read", job.faults)):
                    if decoder is None:
                        yield raw
                    elif typed:
                        yield decoder.decode_batch(raw)
                    else:
                        yield _as_maps(decoder.decode_batch(raw))
    return read


def _as_maps(decoded: pa.RecordBatch) -> pa.RecordBatch:
    """A decoded batch for Spark, which has no unions: its images as map<string,string>."""
    for name in ("image", "key_image"):
        i = decoded.schema.get_field_index(name)
        decoded = decoded.set_column(i, name, images.as_map(decoded.column(i)))
    return decoded


def change_decoder(job: WindowJob) -> Any:
    """The decoder of the pipeline's source.format, with the sinks' declared columns as hints."""
    need_json = any(tg.config.type == "elasticsearch" for tg in job.sinks)
    hints = hints_from_columns((c.source_field, c.type, c.encoding) for tg in job.sinks
                               if isinstance(tg.config, MySqlSinkConfig) for c in tg.config.columns)
    key_fields = frozenset(f for tg in job.sinks for f in _key_fields(tg.config))
    decoder = format_decoder(job.source_format, job.versioning, hints, need_json, key_fields, _used_fields(job))
    if job.column_wise_min is not None and hasattr(decoder, "column_wise_min"):
        decoder.column_wise_min = job.column_wise_min
    return decoder


def _used_fields(job: WindowJob) -> frozenset[str] | None:
    """The row fields the sinks read, when every sink is a MySQL table of declared columns (no
    documents, no columns from the record schema, no table named from the record); else None."""
    fields: set[str] = set()
    for tg in job.sinks:
        cfg = tg.config
        if not isinstance(cfg, MySqlSinkConfig) or not cfg.columns or cfg.pk_mode == "kafka" or any(
                p in cfg.table for p in ("{", "}")):
            return None
        fields.update(c.source_field for c in cfg.columns)
    return frozenset(fields)


def _key_fields(cfg: MySqlSinkConfig | ElasticsearchSinkConfig) -> list[str]:
    """The source fields a sink keys its rows by (an update that changes them moves the row)."""
    if isinstance(cfg, MySqlSinkConfig):
        fields = {c.name: c.source_field for c in cfg.columns}
        return [fields.get(k, k) for k in cfg.primary_key]
    return list(cfg.id_fields)  # Elasticsearch


def read_tasks(ranges: tuple[ReadRange, ...]) -> int:
    """How many Spark tasks read the window: one per partition range, except that a small window
    whose ranges all end by themselves (at EOF, a known stop or their budget, never by waiting for
    new records) is read by fewer tasks, one after another: a task costs more to schedule (~0.1 s)
    than reading a few thousand records takes."""
    if not all(r.stop_on_eof or r.stop is not None for r in ranges):
        return len(ranges)  # a range that waits until the deadline must not delay the next one
    planned = sum(max(r.max_records, 0) for r in ranges)
    return max(1, min(len(ranges), -(-planned // RECORDS_PER_READ_TASK)))


def _failed_from_row(row: dict[str, Any], stage: str, component: str, message: str) -> FailedRecord:
    return FailedRecord(row["topic"], row["partition"], row["offset"], row["key"], row["value"],
                        [(h["key"], h["value"]) for h in row["headers"] or []], stage, component,
                        "cdcflow.errors.RecordError", message)


def _reporter(job: WindowJob) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def report(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        assert job.dlq_topic is not None
        dlq = DeadLetterReporter(job.producer_conf, job.dlq_topic, job.pipeline, job.run_id, job.context_headers,
                                 already_sent=job.dead_letters_sent)
        for batch in batches:
            for row in batch.to_pylist():
                dlq.report(_failed_from_row(row, row["error_stage"], row["component"], row["error_message"]))
        faults.checkpoint("before_dlq_flush", job.faults)
        yield pa.RecordBatch.from_pydict({"reported": [dlq.flush()]})
    return report


def _rejected(batch: pa.RecordBatch, component: str) -> tuple[pa.RecordBatch, list[FailedRecord]]:
    """The rows of a writer's batch whose values do not fit their columns (error_message set, for the
    targets that report their own, see ``reports_own_errors``) as dead letters, and the rest."""
    if "error_message" not in batch.schema.names or batch.column("error_message").null_count == batch.num_rows:
        return batch, []
    errors = batch.column("error_message")
    bad = batch.filter(pc.is_valid(errors)).to_pylist()
    return batch.filter(pc.is_null(errors)), [_failed_from_row(r, "transform", component, r["error_message"])
                                              for r in bad]


def reports_own_errors(target: SinkTarget, frame: DataFrame) -> bool:
    """A MySQL table created from the record schema: its columns come from the same schema as the
    values, so a value that does not fit is rare (a type changed within the window). Its writer sends
    such rows to the DLQ itself, rather than every table's projection joining the window's tally (a
    plan that grew with tables × columns: seconds per window for 50 tables, docs/benchmarks.md)."""
    return isinstance(target.config, MySqlSinkConfig) and not target.config.columns and "row_schema" in frame.columns


def _dead_letters(job: WindowJob) -> DeadLetterReporter | None:
    return (DeadLetterReporter(job.producer_conf, job.dlq_topic, job.pipeline, job.run_id, job.context_headers,
                               already_sent=job.dead_letters_sent)
            if job.dlq_topic and job.tolerance == "all" else None)


def _writer(job: WindowJob, target: SinkTarget,
            commit: OffsetCommit | None = None) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The write task of one sink target; with ``commit`` (the offset sink, exactly-once) the task
    writes everything in one transaction that also commits the window's offsets."""
    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield _write_target(job, target, batches, SINK_TYPES[target.config.type].open(target), _dead_letters(job),
                            commit)
    return write


JOINED_ROWS = 10_000  # a write task's tables with fewer changes than this are written in one transaction


def _tables_writer(job: WindowJob,
                   group: TableGroup) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The write task of a sink's many tables (spark_jobs/tables.py): per table of the task's
    changes, the projection and the last change per key in Arrow, then the table's writer; one
    connection and one dead-letter producer for them all. A few changes of many tables (a Debezium
    deployment's steady state) are written in one transaction, a savepoint per table: one commit
    (an fsync) instead of one per table; larger ones table by table, each in its own."""
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
        dlq = _dead_letters(job)
        try:
            tables = [(group.tables[name], rows) for name, rows in by_table(images.concat_tables(
                [pa.table(b) for b in received]))]
            sinks = [MySqlSink(_table_config(t), t.url, engine=engine) for t, _rows in tables]
            read_newest_tombstones(engine, sinks)  # one query for the task's tables (each open() would read its own)
            joined = len(tables) > 1 and sum(r.num_rows for _t, r in tables) <= JOINED_ROWS
            with one_transaction(engine, sinks) if joined else contextlib.nullcontext():
                out = []
                for (target, rows), sink in zip(tables, sinks, strict=True):
                    latest = latest_rows(project_rows(rows, sink.cfg), key_columns(sink.cfg))
                    sink.open(prepared=True)  # the window prepared its tables and read their tombstones
                    out.append(_write_target(job, target, iter(latest.to_batches()), sink, dlq, opened=True))
            yield from out  # once the tables' transaction committed
        finally:
            engine.dispose()
    return write


def _table_config(target: SinkTarget) -> MySqlSinkConfig:
    assert isinstance(target.config, MySqlSinkConfig), "a sink's tables are MySQL tables"
    return target.config


def _offset_sink(sink: Sink, name: str) -> OffsetSink:
    if not isinstance(sink, OffsetSink):  # the config allows a MySQL sink only (cdcflow/config.py)
        raise ConfigError(f"offset_store.sink: sink {name!r} cannot commit offsets in its transaction")
    return sink


def _write_target(job: WindowJob, target: SinkTarget, batches: Iterator[pa.RecordBatch], sink: Sink,
                  dlq: DeadLetterReporter | None, commit: OffsetCommit | None = None,
                  opened: bool = False) -> pa.RecordBatch:
    """Write one target's batches and flush them, and its dead letters, before the task reports
    success (so before any commit). Rows whose values do not fit (error_message set:
    ``reports_own_errors``, spark_jobs/tables.py) go to the DLQ from here. Returns its stats row.
    ``opened``: the caller opened the sink (a table of many, whose tables the window prepared)."""
    cfg = target.config
    kind = SINK_TYPES[cfg.type]
    classes: dict[str, int] = {}
    unfit = 0

    def handle(failed: list[FailedRecord]) -> None:
        for rec in failed:
            if dlq is None:
                raise ToleranceExceeded(
                    f"errors.tolerance is 'none' and sink {cfg.name!r} rejected {rec.topic}[{rec.partition}]"
                    f"@{rec.offset}: {rec.message}")
            dlq.report(rec)
            if rec.stage == "sink":
                classes[rec.error_class] = classes.get(rec.error_class, 0) + 1

    write_arrow = sink.write_arrow if isinstance(sink, ArrowSink) else None  # the batches as they are
    offsets = _offset_sink(sink, cfg.name) if commit is not None else None  # exactly-once
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
            batch, rejected = _rejected(batch, target.component)
            handle(rejected)
            unfit += len(rejected)
            handle(write_arrow(batch) if write_arrow is not None else sink.write(kind.to_changes(batch, cfg)))
            if sink.stats.upserted + sink.stats.deleted + sink.stats.stale:
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
                                       "stale": [s.stale], "failed": [s.failed],
                                       "extra": [json.dumps({**s.extra, **extra, **{f"{DLQ_CLASS_KEY}{c}": n
                                                                                     for c, n in classes.items()}})]})


# -- driver side -----------------------------------------------------------------------------------
_ERROR_LINE = re.compile(r"^(cdcflow\.errors\.(\w+)): (.*)$", re.MULTILINE)


def unwrap_spark_error(exc: BaseException) -> CdcflowError | None:
    """Recover the cdcflow error raised inside a Spark task from Spark's wrapped exception."""
    matches = list(_ERROR_LINE.finditer(str(exc)))
    if not matches:
        return None
    last = matches[-1]
    cls = getattr(cdc_errors, last.group(2), WindowFailed)
    return cls(last.group(3).strip()) if cls is not cdc_errors.RecordError else WindowFailed(last.group(3))


def _examples(df: DataFrame) -> str:
    rows = df.select("topic", "partition", "offset", "error_stage", "error_message").limit(MAX_EXAMPLES).collect()
    return "; ".join(f"{r.topic}[{r.partition}]@{r.offset} ({r.error_stage}): {r.error_message}" for r in rows)


def run_spark_path(spark: SparkSession, job: WindowJob,
                   on_read: Callable[[dict[tuple[str, int], tuple[int, int]]], None], deadline: Deadline,
                   checkpoint: Checkpoints) -> WindowResult:
    """The older window path, which spark_jobs/window.py picks for the pipelines the per-partition
    path does not serve (SMTs, pk_mode kafka …). Few Spark jobs, because each costs a round of
    scheduling (~0.1-0.2 s on the long-lived Spark): read + decode (one checkpoint), one tally (ends
    per partition and bad records per stage), the DLQ report when there are bad records, and one
    write per sink target."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    if job.truncate == "apply":  # cdcflow/config.py refuses the pipelines it does not cover; this is the env switch
        raise ConfigError("truncate: apply runs on the per-partition window path only (unset CDCFLOW_WINDOW_PATH)")
    from spark_jobs.debezium import RAW_COLUMNS, latest_per_key  # noqa: PLC0415

    t = time.perf_counter()
    n = read_tasks(job.ranges)
    # task i reads ranges i, i+n, ...: range(0, n, 1, n) puts exactly one id in each of its n
    # partitions (works on a classic session and on Spark Connect, which has no sparkContext)
    ranges = spark.range(0, n, 1, n).select(F.col("id").cast("int").alias("idx"))
    if job.transforms:
        raw = ranges.mapInArrow(_reader(job, n), RAW_SPARK_SCHEMA)
        # converters and transforms infer one schema per topic from its records: read first
        raw = checkpoint(raw)
        read_tally = _tally(raw, None)
        ends = _ends(job, read_tally)
        if not any(c for _e, c in ends.values()):
            on_read(ends)
            return WindowResult(ends=ends)
        frames = _change_frames(raw, job, ends, checkpoint)
    else:
        # decoded in the read task and checkpointed there (the frame keeps the raw columns), so later
        # stages never re-read Kafka: a recomputation could see a different range
        decoded = ranges.mapInArrow(_reader(job, n, decode=True), f"{RAW_SPARK_SCHEMA}, {DECODED_SPARK_COLUMNS}")
        frames = [_truncates(job, checkpoint(decoded))]
        ends, read_tally = None, {}
    per_sink = []
    own_targets: set[tuple[str, str]] = set()
    bad = None
    for target in job.sinks:
        kind = SINK_TYPES[target.config.type]
        for frame in frames:
            changes = frame.where(VALID_CHANGES)
            lost = unroutable(target, changes)
            if lost is not None:
                bad = _union(bad, lost.select(*RAW_COLUMNS, F.lit("transform").alias("error_stage"), "error_message",
                                              F.lit(target.component).alias("component")))
            own = reports_own_errors(target, frame)
            if own and _one_job_for_tables(job, target):  # spark_jobs/tables.py
                tagged, tables, described = mysql_routes(target, changes)
                if tables:
                    per_sink.append((TableGroup(target, dict(tables), described), tagged.select(*GROUP_COLUMNS)))
                continue
            for concrete, subset in kind.expand(target, changes):
                projected = kind.project(subset, concrete.config)
                if own:  # its writer sends what does not fit to the DLQ (see reports_own_errors)
                    per_sink.append((concrete, projected))
                    own_targets.add(_target_key(concrete))
                    continue
                per_sink.append((concrete, projected.where("error_message IS NULL")))
                bad = _union(bad, projected.where("error_message IS NOT NULL").select(
                    *RAW_COLUMNS, F.lit("transform").alias("error_stage"), "error_message",
                    F.lit(concrete.component).alias("component")))
    per_sink = _one_target_for_offsets(job, per_sink)
    for frame in frames:
        bad = _union(bad, frame.where("error_stage IS NOT NULL").select(
            *RAW_COLUMNS, "error_stage", "error_message", F.lit(f"converter:{job.value_converter}").alias("component")))
    assert bad is not None
    if job.source_format != "debezium":
        # a record of several changes (connectors/changes.py) may fail in several of them: one dead letter per
        # record and component, counted once
        bad = bad.dropDuplicates(["error_stage", "component", "topic", "partition", "offset"])
    tally = _tally(frames[0] if ends is None else None, bad)
    if ends is None:
        ends = _ends(job, tally)
    result = read_result(ends, {**read_tally, **tally}, on_read)
    t = result.lap("read+decode", t)
    if result.records == 0:
        return result
    send_dead_letters(job, result, tally, lambda: _examples(bad), lambda: sum(
        r.reported for r in bad.coalesce(1).mapInArrow(_reporter(job), REPORT_SCHEMA).collect()))
    t = result.lap("dlq", t)
    _breaker(job, result)  # before any sink is written: a poison burst applies nothing

    small = result.records <= SMALL_WINDOW
    commit = job.offset_commit(ends)

    def write(target: SinkTarget | TableGroup, projected: DataFrame,
              holds_offsets: bool = False) -> tuple[list[Any], float]:
        """One sink target's Spark job: last change per key, then the writer tasks."""
        started = time.perf_counter()
        activate(spark)  # this thread's active session (see spark_jobs.session.activate)
        if isinstance(target, TableGroup):  # every table of the sink in one job: all of a table's changes in one task
            if target.config.columns:
                prepare_tables(list(target.tables.values()))
            else:  # tables from the record schema: created, or changed by the schema_changes policy
                target, found = prepare_derived(target, job.schema_changes, dict(job.schema_decisions), job.pipeline)
                result.schema_changes += found
            grouped = projected.coalesce(1) if small else projected.repartition(TABLE_COLUMN)
            return grouped.mapInArrow(_tables_writer(job, target), WRITE_SCHEMA).collect(), time.perf_counter() - started
        kind = SINK_TYPES[target.config.type]
        kind.prepare(target)
        keys = kind.key_columns(target.config)
        if small:  # one task: a single partition already satisfies the per-key window, so no shuffle
            projected = projected.coalesce(1)
        # a target that reports its own errors: what does not fit never wins its key, the writer dead-letters it
        latest = latest_per_key(projected, keys, keep_unfit=_target_key(target) in own_targets) if keys else projected
        if holds_offsets:  # exactly-once: the window's one transaction is written by one task
            latest = latest.coalesce(1)
        rows = latest.mapInArrow(_writer(job, target, commit if holds_offsets else None), WRITE_SCHEMA).collect()
        if commit is not None and holds_offsets and not any(SINK_OFFSETS_KEY in json.loads(r.extra) for r in rows):
            rows.append(_commit_without_rows(job, target, commit))  # no task ran: no rows for this sink
        return rows, time.perf_counter() - started

    # the sinks write concurrently (MySQL and Elasticsearch wait on different servers): one Spark job
    # per target, submitted from its own thread; every job finishes before the first error is raised.
    # Exactly-once: the offset sink writes last, once every other sink and the DLQ have succeeded.
    holds = [commit is not None and t.config.name == job.offsets_sink for t, _p in per_sink]
    first = [pair for pair, h in zip(per_sink, holds, strict=True) if not h]
    last = [pair for pair, h in zip(per_sink, holds, strict=True) if h]
    if len(first) == 1:
        outcomes = [write(*first[0])]
    else:
        with ThreadPoolExecutor(max_workers=min(SINK_CONCURRENCY, max(1, len(first))),
                                thread_name_prefix="cdcflow-sink") as pool:
            futures = [pool.submit(deadline.tagged(write), target, projected) for target, projected in first]
        outcomes = [f.result() for f in futures]
    _tally_sinks(result, first, outcomes)
    # with the records the sinks rejected; before the exactly-once sink, whose transaction commits
    # the offsets (what that sink itself rejects is counted after its commit, so not by the breaker)
    _breaker(job, result)
    _tally_sinks(result, last, [write(*pair, holds_offsets=True) for pair in last])
    result.lap("sinks", t)  # the wall time of all sinks together
    return result


def _tally_sinks(result: WindowResult, targets: list[tuple[Any, DataFrame]],
                 outcomes: list[tuple[list[Any], float]]) -> None:
    """The sink targets' writer rows into the window's statistics and dead-letter counts."""
    for (target, _projected), (rows, seconds) in zip(targets, outcomes, strict=True):
        for row in rows:
            count_written(result, target.config.name, row)
        stage = f"sink:{target.config.name}"  # each sink's own job time; they overlap
        result.stages[stage] = result.stages.get(stage, 0.0) + seconds


def count_written(result: WindowResult, sink: str, row: Any) -> None:
    """One writer row (WRITE_SCHEMA) into the window's statistics and dead-letter counts (and, from
    the per-partition write tasks, its seconds into the sink's stage)."""
    stats = result.sinks.setdefault(sink, SinkStats())
    extra = json.loads(row.extra)
    if SINK_OFFSETS_KEY in extra:
        result.sink_offsets = extra.pop(SINK_OFFSETS_KEY)
    if UNFIT_KEY in extra:
        unfit = int(extra.pop(UNFIT_KEY))
        result.dead_lettered += unfit
        dl = ("transform", "cdcflow.errors.RecordError")
        result.dead_letters[dl] = result.dead_letters.get(dl, 0) + unfit
    for key in [k for k in extra if k.startswith(DLQ_CLASS_KEY)]:
        dl = ("sink", key.removeprefix(DLQ_CLASS_KEY))
        result.dead_letters[dl] = result.dead_letters.get(dl, 0) + int(extra.pop(key))
    if SECONDS_KEY in extra:
        stage = f"sink:{sink}"
        result.stages[stage] = result.stages.get(stage, 0.0) + float(extra.pop(SECONDS_KEY))
    changed = extra.pop(CHANGED_KEY, {})
    stats.add(SinkStats(row.upserted, row.deleted, row.stale, row.failed, extra, changed))
    result.dead_lettered += row.failed


def read_result(ends: dict[tuple[str, int], tuple[int, int]], tally: Tally,
                on_read: Callable[[dict[tuple[str, int], tuple[int, int]]], None]) -> WindowResult:
    """The read range into the ledger (before anything is applied), and the window's result so far."""
    on_read(ends)
    return WindowResult(ends=ends, records=sum(c for _e, c in ends.values()), record_time=_record_time(tally),
                        truncates_ignored=sum(c.truncates for (stage, _t, _p), c in tally.items() if stage is None))


def send_dead_letters(job: WindowJob, result: WindowResult, tally: Tally, examples: Callable[[], str],
                      report: Callable[[], int]) -> None:
    """The window's bad records (the tally's stages): past errors.tolerance none the window fails,
    naming ``examples()``; else ``report()`` sends them to the DLQ, and they are counted by stage."""
    bad_by_stage: dict[str, int] = {}
    for (stage, _t, _p), counted in tally.items():
        if stage is not None:
            bad_by_stage[stage] = bad_by_stage.get(stage, 0) + counted.n
    bad_count = sum(bad_by_stage.values())
    if not bad_count:
        return
    if job.tolerance == "none":
        raise ToleranceExceeded(f"errors.tolerance is 'none' and {bad_count} record(s) cannot be processed: "
                                f"{examples()}")
    result.dead_lettered += report()
    for stage, count in bad_by_stage.items():
        key = (stage, "cdcflow.errors.RecordError")
        result.dead_letters[key] = result.dead_letters.get(key, 0) + count


def _breaker(job: WindowJob, result: WindowResult) -> None:
    """errors.max_dead_letters: past it, the window fails before its commit (the runner then STOPs the
    pipeline). What it sent to the DLQ stays there, and no later window sends it again."""
    limit = job.max_dead_letters
    if limit is None or not limit.exceeded(result.dead_lettered, result.records):
        return
    raise DeadLettersExceeded(
        f"{result.dead_lettered} of the {result.records} records of window {job.run_id} went to the dead-letter "
        f"topic {job.dlq_topic} ({result.dead_lettered / max(result.records, 1):.0%}), past errors.max_dead_letters "
        f"({limit.describe()}): pipeline {job.pipeline!r} is STOPPED and no offset moved. See the dead letters "
        f"(the page, or GET /cdcflow/connectors/{job.pipeline}/dlq), fix their cause, then resume the pipeline; "
        "the records already in the DLQ are not sent again")


def _one_job_for_tables(job: WindowJob, target: SinkTarget) -> bool:
    """A sink whose tables come from the record schema writes them all in one job (spark_jobs/tables.py);
    not the offset sink (exactly-once: one table, one transaction), nor pk_mode kafka."""
    cfg = target.config
    return isinstance(cfg, MySqlSinkConfig) and cfg.pk_mode != "kafka" and cfg.name != job.offsets_sink


def _target_key(target: SinkTarget) -> tuple[str, str]:
    cfg = target.config
    return cfg.name, cfg.table if isinstance(cfg, MySqlSinkConfig) else cfg.index


def _one_target_for_offsets(job: WindowJob,
                            per_sink: list[tuple[SinkTarget, DataFrame]]) -> list[tuple[SinkTarget, DataFrame]]:
    """Exactly-once: the offset sink's changes of every topic go into its one transaction (the
    window has one frame per topic when it has transforms)."""
    mine = [(t, p) for t, p in per_sink if t.config.name == job.offsets_sink]
    if len(mine) <= 1:
        return per_sink
    if any(t.config != mine[0][0].config for t, _p in mine):
        raise ConfigError(
            f"offset_store.sink: sink {job.offsets_sink!r} gets different columns from the topics of this window "
            "(its table is created from each topic's record schema); declare the sink's columns so that every "
            "topic's changes fit its one table and one transaction")
    merged = mine[0][1]
    for _t, projected in mine[1:]:
        merged = merged.unionByName(projected)
    return [(t, p) for t, p in per_sink if t.config.name != job.offsets_sink] + [(mine[0][0], merged)]


def _commit_without_rows(job: WindowJob, target: SinkTarget, commit: OffsetCommit) -> Any:
    """Exactly-once when the offset sink has no row in this window (every change went elsewhere or
    to the DLQ): its transaction commits the offsets alone, from the driver."""
    from pyspark.sql import Row  # noqa: PLC0415

    rows = list(_writer(job, target, commit)(iter(())))[0].to_pylist()[0]
    return Row(**rows)


class Counted(NamedTuple):
    """One (stage, topic, partition) of the tally: its end offset, its records, the Kafka timestamps
    of its first and last record, and the TRUNCATEs it left unapplied (truncate: ignore)."""

    end: int
    n: int
    first: int | None
    last: int | None
    truncates: int


Tally = dict[tuple[str | None, str, int], Counted]  # (bad stage or None for what was read, topic, partition)


def _tally(read: DataFrame | None, bad: DataFrame | None) -> Tally:
    """One Spark job, one task: per partition, the end offset and record count of ``read`` (stage
    None) and the bad records per stage. A single task reads the checkpointed blocks and needs no
    shuffle (measured: 0.33 s with a shuffle, 0.55 s as per-task Python counts, see docs/benchmarks.md)."""
    from functools import reduce  # noqa: PLC0415

    from pyspark.sql import functions as F  # noqa: PLC0415

    cols = ["topic", "partition", "offset", "timestamp"]
    # a record of several changes counts once: its first change (row_index 0) stands for it
    first = F.col("row_index") == 0 if read is not None and "row_index" in read.columns else F.lit(True)
    # TRUNCATEs ignored (truncate: ignore; with dlq they are bad records)
    ignored = ((F.col("change_op") == TRUNCATE) & F.col("error_stage").isNull()
               if read is not None and "change_op" in read.columns else F.lit(False))
    parts = ([read.select(F.lit(None).cast("string").alias("stage"), *cols, first.alias("record"),
                          ignored.alias("truncate"))] if read is not None else []) + (
        [bad.select(F.col("error_stage").alias("stage"), *cols, F.lit(True).alias("record"),
                    F.lit(False).alias("truncate"))] if bad is not None else [])
    rows = reduce(lambda a, b: a.unionByName(b), parts).coalesce(1).groupBy("stage", "topic", "partition").agg(
        (F.max("offset") + 1).alias("end"), F.count(F.when(F.col("record"), 1)).alias("n"),
        F.min("timestamp").alias("first"), F.max("timestamp").alias("last"),
        F.count(F.when(F.col("truncate"), 1)).alias("truncates")).collect()
    return {(r.stage, r.topic, r.partition): Counted(r.end, r.n, r.first, r.last, r.truncates) for r in rows}


def _truncates(job: WindowJob, decoded: DataFrame) -> DataFrame:
    """truncate: dlq: a TRUNCATE change becomes a bad record (with its table, and how to ignore such
    records instead); ignore: it stays as it is, left out of the sinks (VALID_CHANGES), counted."""
    if job.truncate != "dlq":
        return decoded
    from pyspark.sql import functions as F  # noqa: PLC0415

    is_truncate = (F.col("change_op") == TRUNCATE) & F.col("error_stage").isNull()
    table = F.when(F.col("source_table").isNull(), F.col("topic")).otherwise(
        F.concat_ws(".", "source_db", "source_table"))  # db.table, or the topic where the change names none
    before, after = TRUNCATE_TO_DLQ.split("{table}")
    message = F.when(is_truncate, F.concat(F.lit(before), table, F.lit(after))).otherwise(F.col("error_message"))
    stage = F.when(is_truncate, F.lit("transform")).otherwise(F.col("error_stage"))
    return decoded.withColumn("error_message", message).withColumn("error_stage", stage)


def _ends(job: WindowJob, tally: Tally) -> dict[tuple[str, int], tuple[int, int]]:
    """Per planned range, (end offset, records read); a range that read nothing ends at its start."""
    read = {(t, p): c for (stage, t, p), c in tally.items() if stage is None}
    return {(r.topic, r.partition): (c.end, c.n) if (c := read.get((r.topic, r.partition))) else (r.start, 0)
            for r in job.ranges}


def _record_time(tally: Tally) -> list[int | None]:
    """The Kafka timestamps (ms) of the window's first and last record read: [min, max]."""
    read = [c for (stage, _t, _p), c in tally.items() if stage is None]
    return [min((c.first for c in read if c.first is not None), default=None),
            max((c.last for c in read if c.last is not None), default=None)]


def _union(a: DataFrame | None, b: DataFrame) -> DataFrame:
    return b if a is None else a.unionByName(b)


def _change_frames(raw: DataFrame, job: WindowJob, ends: dict[tuple[str, int], tuple[int, int]],
                   checkpoint: Checkpoints) -> list[DataFrame]:
    """Per topic with records: converters, then the transform chain."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    from spark_jobs.converters import to_records  # noqa: PLC0415
    from spark_jobs.records import records_to_changes  # noqa: PLC0415
    from spark_jobs.transforms import apply_chain  # noqa: PLC0415

    frames = []
    for topic in sorted({t for (t, _p), (_e, n) in ends.items() if n > 0}):
        # one frame per topic: each topic has its own schema (inferred or from its Connect schemas)
        records = to_records(raw.where(F.col("topic") == topic), job.key_converter, job.value_converter)
        changes = records_to_changes(apply_chain(records, list(job.transforms)), job.versioning)
        frames.append(checkpoint(changes))
    return frames
