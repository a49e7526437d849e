"""One window on Spark, stage by stage: read → decode → (transform) → project → dead letters → write.

:func:`run_window_job` runs the window under its deadline (``spark.timeout``),
releases what it checkpointed on the server, and names Spark's failures: an error from inside a
task comes back as the cdcflow error it was (or names what died).

:func:`run_partition_path` is the one path (issue 43): it keeps the records in the Python workers
from the read to the write; the JVM holds only a few large binary values (and, for a chain with a
Spark step, the typed record frame that step works on):

1. **read tasks** (spark_jobs/read_task.py; one per partition range, or a few ranges one
   after another in a small window) read with confluent-kafka (spark_jobs/read/ranges.py), decode
   (spark_jobs/read/decode.py) by the pipeline's ``source.format`` (connectors/formats.py), apply
   ``truncate``, and per sink target
   whose columns are known before the window project the changes and keep the last change per key,
   all in Arrow. What cannot be processed becomes a dead-letter row. Each task emits Arrow IPC blobs
   (spark_jobs/blobs.py) and one tally row: per partition its end, its record count and time range,
   the dead letters per stage, and the row schemas of the tables and indices made from the records.
   **Early targets** (spark_jobs/write/early.py::early_targets: tables of declared columns and indices,
   in a window of one Debezium topic without the breaker or ``truncate: apply``; and a table from
   the record schema, made ready from the schemas of each range's first records:
   ``schema_tables``) are
   prepared before the read and written by the read task itself, once it has sent its own dead
   letters (or failed, past ``errors.tolerance: none``): their rows never reach the JVM (no
   checkpoint of them, no shuffle), and one task's writes overlap the next task's read. A table's
   deletes come to the driver with the tally, which writes them once every read task ended: a key
   whose changes sit in two partitions is written by two tasks, whose upserts keep the newer, but a
   delete must not be written beside another task's older upsert (``project.mysql_deletes``).
2. The driver checkpoints that output (so no later stage re-reads Kafka),
   writes the read range to the ledger, fails a window past ``errors.tolerance: none``, sends the
   dead letters (one task) and applies the breaker (``errors.max_dead_letters``), all before any
   handed-on sink is written (spark_jobs/write/dead_letters.py). It then creates or evolves the tables and
   indices the tally names (spark_jobs/write/prepare.py).
3. **write tasks** (spark_jobs/write/tasks.py) get the blobs by a hash of the key (of the table, for a
   routed sink), so all the rows of a key, from every read task, meet in one write task, which keeps
   the last change per key again and writes its targets at the same time. Two tasks never write one
   key: a delete and an older upsert of a key, written at once, could race past the tombstone. The
   MySQL sink of ``offset_store.sink`` (exactly-once; its table declared or made from the record
   schema) is written last by one task, in one transaction with the window's offsets, once every
   other sink succeeded.

A chain with ``SqlExpression``, a ``Sql`` predicate or ``Python`` has a Spark stage between 1 and 2
(spark_jobs/transform/spark_stage.py): its read tasks hand on their changes as a typed record frame, Spark
applies those steps, and a task per Spark partition applies the rest of the chain and sorts the rows
out by target, as a read task does; only the MySQL tables of declared columns are written early,
by those last tasks (the read tasks send their own dead letters first).

Debezium keys records by primary key, so a key's changes usually sit in one read task; the second
reduction is for the others (several topics into one table, a primary key that is not the Kafka
key), and resolves a tombstone whose delete was read by another task.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import replace
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from connectors import errors as cdc_errors
from connectors import timing
from connectors.base import SinkStats
from connectors.errors import CdcflowError, WindowFailed
from spark_jobs import chains
from spark_jobs.blobs import BAD, DELETES, PACKED_SCHEMA, TALLY
from spark_jobs.deadline import Deadline
from spark_jobs.job import (
    MAX_EXAMPLES,
    REPORT_SCHEMA,
    Counted,
    Tally,
    WindowJob,
    WindowResult,
    count_written,
    ends_of,
    larger,
    read_pieces,
    read_result,
    smaller,
)
from spark_jobs.project import compose
from spark_jobs.read_task import read_task
from spark_jobs.session import Checkpoints, read_slots
from spark_jobs.spark_failures import out_of_memory, server_lost, spark_unavailable
from spark_jobs.transform import spark_stage
from spark_jobs.write import prepare
from spark_jobs.write.dead_letter_rows import blob_rows, reporter
from spark_jobs.write.dead_letters import send_dead_letters
from spark_jobs.write.early import before_read
from spark_jobs.write.tasks import write_handed

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

OnRead = Callable[[dict[tuple[str, int], tuple[int, int]]], None]  # the read range into the ledger


def run_window_job(spark: SparkSession, job: WindowJob, on_read: OnRead) -> WindowResult:
    checkpoints = Checkpoints()
    what = f"the window {job.run_id} of {job.pipeline}"
    try:
        with Deadline(spark, job.spark_timeout, what):
            return run_partition_path(spark, job, on_read, checkpoints)
    except CdcflowError:
        raise
    except Exception as exc:  # Py4J / PythonException wrappers from Spark
        inner = unwrap_spark_error(exc) or out_of_memory(exc, what) or spark_unavailable(exc) or server_lost(spark)
        if inner is not None:
            raise inner from None
        if "Python worker exited unexpectedly" in str(exc):
            raise WindowFailed(
                "a Spark task's Python worker died while the window ran (killed, or out of memory: see the Spark "
                "log, .local/services/spark/connect.log for the long-lived Spark); nothing of the window was "
                "committed and no offset moved: the retry runs it again") from exc
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise WindowFailed(f"Spark job failed: {exc.__class__.__name__}: {first}") from exc
    finally:
        checkpoints.release()  # what the window held on the server, gone with it


def run_partition_path(spark: SparkSession, job: WindowJob, on_read: OnRead,
                       checkpoint: Checkpoints) -> WindowResult:
    """The one path (see the module's docstring), its stages in order: the targets the read tasks write
    made ready (write/prepare.py); read, decode, transform and project in the read tasks
    (read_task.py: read/, transform/, project/, write/; a chain with a Spark step: transform/spark_stage.py);
    the dead letters and the breaker (write/dead_letters.py); the other targets made ready
    (write/prepare.py); the early targets' deletes and the write tasks (write/tasks.py), the
    exactly-once sink last."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    stages: dict[str, float] = {}
    with timing.timed(stages, "prepare"):  # the peek at the first records included (write/early.py::first_schemas)
        # a chain the window cannot apply refused; the targets the read tasks write themselves made ready
        # now, the tables and indices from the record schema with them
        early, made = before_read(job)
    with timing.timed(stages, "read+decode"):
        # read → decode → project → last change per key (→ the early targets' writes), in the read
        # tasks; checkpointed, so no later stage re-reads Kafka (a recomputation could see a
        # different range, and would write the early targets again)
        pieces = read_pieces(job.ranges, read_slots(spark))
        tasks = len(pieces)
        ranges = spark.range(0, tasks, 1, tasks).select(F.col("id").cast("int").alias("idx"))
        if chains.staged(job.transforms):  # SqlExpression, Sql predicates, Python: transform/spark_stage.py
            packed = checkpoint(ranges.mapInArrow(spark_stage.read_task(job, pieces, early), PACKED_SCHEMA))
            packed = spark_stage.run(spark, job, packed, tasks, checkpoint, early)
        else:
            packed = checkpoint(ranges.mapInArrow(read_task(job, pieces, early), PACKED_SCHEMA))
        collected = packed.where(F.col("kind").isin(TALLY, DELETES)).select("kind", "target", "blob", "info").collect()
        tallies = [json.loads(r.info) for r in collected if r.kind == TALLY]
        tally = merge_tallies(tallies)
        # the read range is in the ledger before anything is applied (but the early targets' writes)
        result = read_result(ends_of(job, tally), tally, on_read, stages)
    result.schema_changes += made
    result.seeds = compose.merge_seeds(tallies)
    for name in early:
        result.sinks.setdefault(name, SinkStats())
    for info in tallies:
        for row in info.get("written", []):
            count_written(result, row["sink"], SimpleNamespace(**row))
    handed = {name for info in tallies for name in info.get("handed", [])}
    staged = replace(job, sinks=tuple(t for t in job.sinks if t.config.name not in early or t.config.name in handed))
    if result.records == 0:
        return result

    with result.timed("dlq"):  # past errors.tolerance none the window fails here, naming examples
        send_dead_letters(  # and the breaker: before any handed-on sink is written, a poison burst applies nothing
            job, result, tally,
            lambda: "; ".join([e for info in tallies for e in info.get("examples", [])][:MAX_EXAMPLES]),
            lambda: sum(info.get("reported", 0) for info in tallies) if early else sum(
                r.reported for r in packed.where(F.col("kind") == BAD).coalesce(1).mapInArrow(
                    reporter(job, blob_rows), REPORT_SCHEMA).collect()))
    targets = None
    if staged.sinks:
        with result.timed("sinks"):  # tables and indices created or evolved; truncate: apply
            targets = prepare.make_ready(staged, tallies, result)
    deletes: dict[str, list[bytes]] = {}
    for r in collected:
        if r.kind == DELETES:
            deletes.setdefault(r.target, []).append(r.blob)
    write_handed(staged, packed, tasks, targets, early, deletes, result)  # the exactly-once sink last
    return result


def merge_tallies(tallies: list[dict[str, Any]]) -> Tally:
    """The read tasks' tallies as one: per (stage, topic, partition), the furthest end, the records
    summed, the earliest first and latest last record time, the TRUNCATEs summed."""
    tally: Tally = {}
    for info in tallies:
        for stage, topic, partition, end, count, first, last, truncates in info["counted"]:
            key = (stage, topic, partition)
            prior = tally.get(key)
            tally[key] = Counted(end, count, first, last, truncates) if prior is None else Counted(
                max(prior.end, end), prior.n + count, smaller(prior.first, first), larger(prior.last, last),
                prior.truncates + truncates)
    return tally


_ERROR_LINE = re.compile(r"^(cdcflow\.errors\.(\w+)): (.*)$", re.MULTILINE)


def unwrap_spark_error(exc: BaseException) -> CdcflowError | None:
    """Recover the cdcflow error raised inside a Spark task from Spark's wrapped exception."""
    matches = list(_ERROR_LINE.finditer(str(exc)))
    if not matches:
        return None
    last = matches[-1]
    cls = getattr(cdc_errors, last.group(2), WindowFailed)
    return cls(last.group(3).strip()) if cls is not cdc_errors.RecordError else WindowFailed(last.group(3))
