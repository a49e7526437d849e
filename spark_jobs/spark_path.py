"""The older window path: the records in Spark frames, for the pipelines the per-partition path does
not serve yet (spark_jobs/row_chains.unserved: Sql/SqlExpression/Python …).

spark_jobs/window.py picks it for the pipelines the per-partition path does not serve. The records
are decoded in the read task, then handed to Spark: converters and the transform chain are Spark
expressions (spark_jobs/transforms.py), the last change per key a Spark window, the writes one Spark
job per sink target, at the same time.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from connectors import timing
from connectors.changes import DECODED_SPARK_COLUMNS, TRUNCATE
from connectors.errors import ConfigError
from connectors.kafka.reader import RAW_SPARK_SCHEMA
from connectors.mysql.config import MySqlSinkConfig
from spark_jobs.dead_letters import breaker, reporter, send_dead_letters
from spark_jobs.job import (
    MAX_EXAMPLES,
    REPORT_SCHEMA,
    SINK_OFFSETS_KEY,
    TRUNCATE_TO_DLQ,
    WRITE_SCHEMA,
    Counted,
    Tally,
    WindowJob,
    WindowResult,
    count_written,
    ends_of,
    read_result,
    read_pieces,
)
from spark_jobs.read import reader
from spark_jobs.session import activate
from spark_jobs.sinks import (
    SINK_TYPES,
    SinkTarget,
    TableGroup,
    mysql_routes,
    prepare_derived,
    prepare_tables,
    unroutable,
)
from spark_jobs.tables import GROUP_COLUMNS, TABLE_COLUMN
from spark_jobs.write import commit_without_rows, reports_own_errors, tables_writer, writer

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from spark_jobs.deadline import Deadline
    from spark_jobs.session import Checkpoints


SMALL_WINDOW = 20_000  # records; up to this, each sink is written by one task (no shuffle)


SINK_CONCURRENCY = 4  # sink targets written at the same time (routed tables can be many)


# the changes the sinks get: read, and not a record that changes nothing (a Maxwell bootstrap-start) nor a
# TRUNCATE (the pipeline's truncate setting: ignored, or dead-lettered by _truncates)
VALID_CHANGES = f"error_stage IS NULL AND change_op IS NOT NULL AND change_op != '{TRUNCATE}'"


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
    if job.truncate == "apply":  # cdcflow/config.py refuses the pipelines it does not cover; this is the env switch
        raise ConfigError("truncate: apply runs on the per-partition window path only (unset CDCFLOW_WINDOW_PATH)")
    t = time.perf_counter()
    frames, ends, read_tally = _decoded(spark, job, checkpoint)  # read → decode (→ converters → transforms)
    if not frames:
        on_read(ends)
        return WindowResult(ends=ends)
    per_sink, own_targets, bad = _projected(job, frames)  # each sink target's rows; what does not fit is bad
    tally = _tally(frames[0] if not ends else None, bad)
    result = read_result(ends or ends_of(job, tally), {**read_tally, **tally}, on_read)  # into the ledger
    t = timing.lap(result.stages, "read+decode", t)
    if result.records == 0:
        return result
    send_dead_letters(job, result, tally, lambda: _examples(bad), lambda: sum(
        r.reported for r in bad.coalesce(1).mapInArrow(reporter(job), REPORT_SCHEMA).collect()))
    t = timing.lap(result.stages, "dlq", t)
    breaker(job, result)  # before any sink is written: a poison burst applies nothing
    _write_sinks(spark, job, per_sink, own_targets, result, deadline)
    timing.lap(result.stages, "sinks", t)  # the wall time of all sinks together
    return result


def _decoded(spark: SparkSession, job: WindowJob, checkpoint: Checkpoints,
             ) -> tuple[list[DataFrame], dict[tuple[str, int], tuple[int, int]], Tally]:
    """The window's changes as checkpointed frames: with transforms, one frame per topic read (with
    the ends and tally of the read, and no frame when nothing was read); else one frame decoded in
    the read tasks (its ends come from its tally later: empty here)."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    pieces = read_pieces(job.ranges)  # not split (no slots): the older path is read as it was
    n = len(pieces)
    # task i reads ranges i, i+n, ...: range(0, n, 1, n) puts exactly one id in each of its n
    # partitions (works on a classic session and on Spark Connect, which has no sparkContext)
    ranges = spark.range(0, n, 1, n).select(F.col("id").cast("int").alias("idx"))
    if job.transforms:
        # converters and transforms infer one schema per topic from its records: read first
        raw = checkpoint(ranges.mapInArrow(reader(job, pieces), RAW_SPARK_SCHEMA))
        read_tally = _tally(raw, None)
        ends = ends_of(job, read_tally)
        if not any(c for _e, c in ends.values()):
            return [], ends, read_tally
        return _change_frames(raw, job, ends, checkpoint), ends, read_tally
    # decoded in the read task and checkpointed there (the frame keeps the raw columns), so later
    # stages never re-read Kafka: a recomputation could see a different range
    decoded = ranges.mapInArrow(reader(job, pieces, decode=True), f"{RAW_SPARK_SCHEMA}, {DECODED_SPARK_COLUMNS}")
    return [_truncates(job, checkpoint(decoded))], {}, {}


def _projected(job: WindowJob, frames: list[DataFrame],
               ) -> tuple[list[tuple[Any, DataFrame]], set[tuple[str, str]], DataFrame]:
    """Per sink target its projected changes (a table group for a sink whose tables come from the
    records), the targets whose writers dead-letter what does not fit, and the window's bad records."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    from spark_jobs.debezium import RAW_COLUMNS  # noqa: PLC0415

    def bad_of(frame: DataFrame, component: str) -> DataFrame:
        return frame.select(*RAW_COLUMNS, F.lit("transform").alias("error_stage"), "error_message",
                            F.lit(component).alias("component"))

    per_sink: list[tuple[Any, DataFrame]] = []
    own_targets: set[tuple[str, str]] = set()
    bad = None
    for target in job.sinks:
        kind = SINK_TYPES[target.config.type]
        for frame in frames:
            changes = frame.where(VALID_CHANGES)
            lost = unroutable(target, changes)
            if lost is not None:
                bad = _union(bad, bad_of(lost, target.component))
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
                bad = _union(bad, bad_of(projected.where("error_message IS NOT NULL"), concrete.component))
    for frame in frames:
        bad = _union(bad, frame.where("error_stage IS NOT NULL").select(
            *RAW_COLUMNS, "error_stage", "error_message", F.lit(f"converter:{job.value_converter}").alias("component")))
    assert bad is not None
    if job.source_format != "debezium":
        # a record of several changes (connectors/changes.py) may fail in several of them: one dead letter per
        # record and component, counted once
        bad = bad.dropDuplicates(["error_stage", "component", "topic", "partition", "offset"])
    return _one_target_for_offsets(job, per_sink), own_targets, bad


def _write_sinks(spark: SparkSession, job: WindowJob, per_sink: list[tuple[Any, DataFrame]],
                 own_targets: set[tuple[str, str]], result: WindowResult, deadline: Deadline) -> None:
    """The sinks write concurrently (MySQL and Elasticsearch wait on different servers): one Spark job
    per target, submitted from its own thread; every job finishes before the first error is raised.
    Exactly-once: the offset sink writes last, once every other sink and the DLQ have succeeded."""
    from spark_jobs.debezium import latest_per_key  # noqa: PLC0415
    from spark_jobs.partial import fill_kept_frame  # noqa: PLC0415

    small = result.records <= SMALL_WINDOW
    commit = job.offset_commit(result.ends)

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
            return grouped.mapInArrow(tables_writer(job, target), WRITE_SCHEMA).collect(), time.perf_counter() - started
        kind = SINK_TYPES[target.config.type]
        kind.prepare(target)
        keys = kind.key_columns(target.config)
        if small:  # one task: a single partition already satisfies the per-key window, so no shuffle
            projected = projected.coalesce(1)
        projected = fill_kept_frame(projected, target.config, keys)  # partial changes: their key's earlier values
        # a target that reports its own errors: what does not fit never wins its key, the writer dead-letters it
        latest = latest_per_key(projected, keys, keep_unfit=_target_key(target) in own_targets) if keys else projected
        if holds_offsets:  # exactly-once: the window's one transaction is written by one task
            latest = latest.coalesce(1)
        rows = latest.mapInArrow(writer(job, target, commit if holds_offsets else None), WRITE_SCHEMA).collect()
        if commit is not None and holds_offsets and not any(SINK_OFFSETS_KEY in json.loads(r.extra) for r in rows):
            rows.append(commit_without_rows(job, target, commit))  # no task ran: no rows for this sink
        return rows, time.perf_counter() - started

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
    breaker(job, result)
    _tally_sinks(result, last, [write(*pair, holds_offsets=True) for pair in last])


def _tally_sinks(result: WindowResult, targets: list[tuple[Any, DataFrame]],
                 outcomes: list[tuple[list[Any], float]]) -> None:
    """The sink targets' writer rows into the window's statistics and dead-letter counts."""
    for (target, _projected), (rows, seconds) in zip(targets, outcomes, strict=True):
        for row in rows:
            count_written(result, target.config.name, row)
        stage = f"sink:{target.config.name}"  # each sink's own job time; they overlap
        timing.add(result.stages, stage, seconds)


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
