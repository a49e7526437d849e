"""The Spark stage of a window: ``SqlExpression``, ``Sql`` predicates and ``Python`` (issue 43).

These three are Spark by nature (a Spark SQL expression, a function ``DataFrame -> DataFrame``), so a
chain that has one runs them in Spark, between the per-partition steps of spark_jobs/transform/row_transforms.py:

1. The read task applies the steps before the first of them (:func:`cut`: the ``head``) and hands
   on its changes as the **record frame** (spark_jobs/transform/record_frame.py), packed as ``staged`` blobs,
   with its tally (what it read) and the frame's Arrow schema.
2. The driver makes one Spark frame of them, typed (the schemas of every task merged; Arrow into
   Spark, no JSON inference), and applies the segment's Spark steps (:func:`apply_spark`). A ``Sql``
   predicate is evaluated there into ``_when``, which the row step it belongs to reads.
3. A task per Spark partition takes the frame back into changes and applies the row steps up to
   the next Spark step; the last segment's task then does what the read task does
   without a Spark stage (spark_jobs/project/targets.split): the rows per target, the dead letters, the tally.
   A chain with Spark steps after row steps after Spark steps makes a stage of each.

The record frame is what a Kafka Connect SMT sees (its columns: spark_jobs/transform/record_frame.py);
before the chain's ExtractNewRecordState its value is Debezium's envelope, read a second time in the
read task, and the rows come back from it (spark_jobs/transform/envelope_frame.py).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from connectors import images
from connectors.errors import ConfigError
from spark_jobs.blobs import BAD, PACKED_SCHEMA, TALLY, bucketed, pack, packed
from spark_jobs.project import targets as project
from spark_jobs.project.routes import routes_checked
from spark_jobs.read.ranges import reader
from spark_jobs.transform import envelope_frame, record_frame, row_transforms
from spark_jobs.transform import transform_config as cfgs
from spark_jobs.chains import SPARK_STEPS, sparked
from spark_jobs.write.early_writes import send_first, written_early

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from spark_jobs.job import Pieces, WindowJob
    from spark_jobs.write.sinks import SinkTarget

STAGED = "staged"  # a packed kind: a task's changes as the record frame, for the Spark stage
_READS_VALUES = ("ExtractNewRecordState",)  # row steps that read the values as read (spark_jobs/row_unwrap.py)


@dataclass(frozen=True)
class Segment:
    """Spark steps, then the row steps up to the next Spark step; ``first`` is the chain index of
    the segment's first step (errors name the step by it). The first row step may carry a ``Sql``
    predicate: Spark evaluates it, last."""

    spark: tuple[Any, ...]
    rows: tuple[Any, ...]
    first: int

    @property
    def when(self) -> cfgs.SqlCondition | None:
        pred = getattr(self.rows[0], "predicate", None) if self.rows else None
        return pred if isinstance(pred, cfgs.SqlCondition) else None


def cut(chain: Any) -> tuple[tuple[Any, ...], list[Segment]]:
    """The chain as its head (row steps, in the read task) and its segments."""
    chain = list(chain)
    i = 0
    while i < len(chain) and not sparked(chain[i]):
        i += 1
    head, segments = tuple(chain[:i]), []
    while i < len(chain):
        start = i
        while i < len(chain) and chain[i].type in SPARK_STEPS:
            i += 1
        spark_end = i
        if i < len(chain):
            i += 1  # a row step, its predicate perhaps a Sql one
            while i < len(chain) and not sparked(chain[i]):
                i += 1
        segments.append(Segment(tuple(chain[start:spark_end]), tuple(chain[spark_end:i]), start))
    return head, segments


# -- the tasks around the Spark steps ---------------------------------------------------------------------
def reads_values(chain: Any) -> bool:
    """A row step after the chain's first Spark step reads the values as read."""
    _head, segments = cut(chain)
    return any(step.type in _READS_VALUES for segment in segments for step in segment.rows)


def staged_blobs(task: int, changes: pa.Table, job: WindowJob,
                 info: dict[str, Any] | None = None) -> Iterator[pa.RecordBatch]:
    """A task's changes packed as the record frame, then its tally (``info``) with the frame's schema."""
    frame = record_frame.to_frame(changes, job.key_converter, raw=reads_values(job.transforms),
                                  key=record_frame.reads_key(job.transforms))
    yield from (packed(task, STAGED, "", blob, bucket=task) for blob in pack(frame))
    yield packed(task, TALLY, "", info={"counted": [], **(info or {}),
                                        "frame": record_frame.schema_text(frame.schema)})


def read_task(job: WindowJob, pieces: Pieces, early: dict[str, SinkTarget] | None = None,
              ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The read task of a chain with a Spark stage: its ranges read and decoded, the chain's head,
    then the live changes as the record frame; its dead letters (which no Spark step sees; sent by
    itself in a window with ``early`` targets, which the tasks after the stage write) and its tally
    (every record read) from here (spark_jobs/read_task.py without a Spark stage)."""
    decode = reader(job, pieces)
    head, segments = cut(job.transforms)
    enveloped = bool(segments) and envelope_frame.before_unwrap(job.transforms, segments[0].first)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        batches = list(batches)
        task = batches[0].column("idx")[0].as_py() if batches and batches[0].num_rows else -1
        decoded_batches = list(decode(iter(batches)))
        if not decoded_batches:
            yield packed(task, TALLY, "", info={"counted": []})
            return
        decoded = images.concat_tables([pa.table(b) for b in decoded_batches])
        decoded = project.truncate_policy(job, row_transforms.apply(
            decoded, head, job.versioning, finish=False, key_converter=job.key_converter,
            enveloped=envelope_frame.before_unwrap(job.transforms, 0)))
        if enveloped:  # a Spark step before the unwrap sees Debezium's envelope: each value read as one
            decoded = envelope_frame.attach(decoded, job.value_converter)
        op = pc.fill_null(decoded.column("change_op"), "")
        live = pc.and_(pc.is_null(decoded.column("error_stage")),
                       pc.is_in(op, value_set=pa.array(["upsert", "delete"])))
        rest = project.sort_out(job, _without_envelope(decoded.filter(pc.invert(live))))  # dead letters; TRUNCATEs
        reported = {"reported": send_first(job, rest.bad, rest.info["examples"])} if early else {}
        if rest.bad.num_rows and not early:
            yield from (packed(task, BAD, "", blob) for blob in pack(rest.bad))
        yield from staged_blobs(task, decoded.filter(live), job,
                                {**rest.info, **project.tally_of(decoded, rest.bad), **reported})
    return run


def _without_envelope(changes: pa.Table) -> pa.Table:
    return changes.drop_columns([record_frame.ENVELOPE]) if record_frame.ENVELOPE in changes.column_names else changes


def _unstage(schema: pa.Schema, outside: list[str]) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The read tasks' frames into Spark, but the carried columns no Spark step reads (``outside``:
    record_frame.apart), which go as one value per blob, for the task after the steps."""
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for blob in batch.column("blob").to_pylist():
                frame = record_frame.conform(pa.ipc.open_stream(blob).read_all(), schema)
                yield from record_frame.set_apart(frame, outside).to_batches()
    return run


def _after(job: WindowJob, segment: Segment, last: bool, tasks: int, names: list[str],
           early: dict[str, SinkTarget], following: Segment | None = None,
           ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The task after a segment's Spark steps: the carried columns put back (the frame's ``names``),
    its row steps, then the next stage's frame (of the segment ``following``) or (last)
    :func:`finished`. Before the unwrap the frame held the envelopes, which the rows are read from
    (spark_jobs/transform/envelope_frame.py)."""
    enveloped = envelope_frame.before_unwrap(job.transforms, segment.first)
    keep = following is not None and envelope_frame.before_unwrap(job.transforms, following.first)
    rows_first = segment.first + len(segment.spark)  # the chain index of the segment's first row step

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext  # noqa: PLC0415

        task = TaskContext.get().partitionId()
        tables = [pa.table(b) for b in batches if b.num_rows]
        if not tables:
            yield packed(task, TALLY, "", info={"counted": []})
            return
        frame = record_frame.put_back(pa.concat_tables(tables), names)
        when = frame.column("_when").combine_chunks() if "_when" in frame.column_names else None
        back = envelope_frame.from_frame(frame, keep) if enveloped else record_frame.from_frame(frame)
        changes = row_transforms.apply(back, segment.rows, job.versioning, finish=last,
                                       first=rows_first, when=when,
                                       documents="all" if last else "kept", key_converter=job.key_converter,
                                       enveloped=envelope_frame.before_unwrap(job.transforms, rows_first))
        yield from finished(job, task, changes, tasks, early) if last else staged_blobs(task, changes, job)
    return run


def finished(job: WindowJob, task: int, changes: pa.Table, writers: int,
             early: dict[str, SinkTarget] | None = None) -> Iterator[pa.RecordBatch]:
    """After the chain: as spark_jobs/project/targets.split, but for the records read, which the read
    tasks counted; the ``early`` targets written here, as a read task without a Spark stage writes them
    (spark_jobs/write/early_writes.written_early)."""
    if early:
        yield from written_early(job, task, project.early_split(job, routes_checked(changes), early, counted=False),
                                 early, writers)
        return
    out = project.sort_out(job, routes_checked(changes))
    out.info["counted"] = [c for c in out.info["counted"] if c[0] is not None]
    for name, kind, table, columns in out.rows:
        yield from bucketed(task, kind, name, table, columns, writers)
    if out.bad.num_rows:
        yield from (packed(task, BAD, "", blob) for blob in pack(out.bad))
    yield packed(task, TALLY, "", info=out.info)


def apply_spark(frame: DataFrame, segment: Segment) -> DataFrame:
    """The segment's Spark steps over the record frame, and its row step's Sql predicate as ``_when``."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    for i, cfg in enumerate(segment.spark, start=segment.first):
        step = sql_expression if cfg.type == "SqlExpression" else python_transform
        frame = _analysed(lambda f=frame, c=cfg, s=step: s(f, c), f"transforms.{i} ({cfg.type})")
    if segment.when is not None:
        i = segment.first + len(segment.spark)
        condition = segment.when.condition
        frame = _analysed(lambda f=frame: f.withColumn("_when", F.expr(condition).cast("boolean")),
                          f"transforms.{i} ({segment.rows[0].type}): its Sql predicate {condition!r}")
    return frame


_REFUSALS = ("AnalysisException", "ParseException", "SparkConnectGrpcException")  # classic Spark or Connect


def _analysed(build: Callable[[], DataFrame], step: str) -> DataFrame:
    """``build()``'s frame, analysed now, so that an expression Spark refuses fails the window before
    any write, naming ``step``."""
    try:
        frame = build()
        frame.schema  # noqa: B018
    except ConfigError as exc:
        raise ConfigError(f"{step}: {exc}") from None
    except Exception as exc:
        if type(exc).__name__ not in _REFUSALS:
            raise
        raise ConfigError(f"{step}: Spark refused it: {_first_line(exc)}") from None
    return frame


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def sql_expression(frame: DataFrame, cfg: cfgs.SqlExpression) -> DataFrame:
    """Value fields set from Spark SQL expressions (a delete's null value stays null)."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    value = F.col("value")
    for name, expression in cfg.fields.items():
        value = value.withField(name, F.expr(expression))
    return frame.withColumn("value", F.when(F.col("value").isNull(), F.lit(None)).otherwise(value))


def python_transform(frame: DataFrame, cfg: cfgs.PythonTransform) -> DataFrame:
    """The user's ``DataFrame -> DataFrame``, which must keep the frame's columns."""
    module_name, _, attr = cfg.function.rpartition(".")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot import {cfg.function!r}: {exc}") from exc
    result = fn(frame, **cfg.options)
    if not hasattr(result, "columns") or not hasattr(result, "mapInArrow"):
        raise ConfigError(f"{cfg.function!r} returned {type(result).__name__}, expected a DataFrame")
    missing = [c for c in frame.columns if c not in result.columns]
    if missing:
        raise ConfigError(f"{cfg.function!r} returned a frame without the columns {missing}: keep every column of "
                          "the frame it is given (those starting with _ carry the record for the window)")
    return result.select(*frame.columns)


def run(spark: SparkSession, job: WindowJob, staged_frame: DataFrame, tasks: int, checkpoint: Any,
        early: dict[str, SinkTarget] | None = None) -> DataFrame:
    """The window's Spark stages over the read tasks' packed output (``staged_frame``): the last
    stage's packed rows per target (the ``early`` targets written by its tasks), with every tally and
    dead letter (the read tasks' too: no Spark step sees those)."""
    from pyspark.sql import functions as F  # noqa: PLC0415
    from pyspark.sql.pandas.types import from_arrow_schema  # noqa: PLC0415

    _head, segments = cut(job.transforms)
    current, tallies = staged_frame, staged_frame.where(F.col("kind").isin(TALLY, BAD))
    for n, segment in enumerate(segments):
        last = n == len(segments) - 1
        texts = [json.loads(r.info).get("frame") for r in current.where(F.col("kind") == TALLY).select("info").collect()]
        texts = [t for t in texts if t]
        if not texts:  # nothing was read
            return tallies
        schema = record_frame.merged(texts)
        outside = record_frame.apart(schema, segment.spark, segment.when.condition if segment.when else None)
        frame = current.where(F.col("kind") == STAGED).mapInArrow(
            _unstage(schema, outside), from_arrow_schema(record_frame.inside(schema, outside)))
        frame = apply_spark(frame, segment)
        following = None if last else segments[n + 1]
        out = checkpoint(frame.mapInArrow(_after(job, segment, last, tasks, schema.names, early or {}, following),
                                          PACKED_SCHEMA))
        if not last:
            current = out
            continue
        return out.unionByName(tallies)
    return tallies
