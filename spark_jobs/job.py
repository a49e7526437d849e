"""A window's job and its result: what the driver hands the tasks, and what comes back.

``WindowJob`` is everything the Spark tasks need, resolved on the driver (no Airflow on the
executors); ``WindowResult`` is what the window did, with the wall time of each stage
(``WindowResult.timed``, the one stage timer). The tally is what the read tasks counted per
partition: its end offset, its records, and the bad records per stage.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from connectors import timing
from connectors.base import SinkStats
from connectors.errors import DeadLettersExceeded
from connectors.kafka.reader import ReadRange
from connectors.mysql.offsets import OffsetCommit
from spark_jobs.sink_targets import SinkTarget

REPORT_SCHEMA = "reported long"


DLQ_CLASS_KEY = "dlq:"  # sink dead letters by error class ride in the writer's extra stats


WRITE_SCHEMA = "sink string, upserted long, deleted long, stale long, unchanged long, failed long, extra string"


SINK_OFFSETS_KEY = "sink_offsets"  # the offset sink's commit result, in its writer's extra stats


CHANGED_KEY = "changed"  # per table/index: [upserted, deleted] (SinkStats.changed), for the asset events


SECONDS_KEY = "seconds"  # a per-partition write task's time on one target (spark_jobs/write/tasks.py)


UNFIT_KEY = "unfit"  # rows a writer sent to the DLQ because their values do not fit (reports_own_errors)


MAX_EXAMPLES = 5


RECORDS_PER_READ_TASK = 5_000  # planned records per read task, in windows that end by themselves


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
    # a registry converter's Schema Registry (connectors/registry/client.RegistrySettings), else None
    registry: Any = None
    # dead letters an earlier attempt of this window sent already: (topic, partition, offset, component)
    dead_letters_sent: frozenset[tuple[str, int, int, str]] = frozenset()
    faults: tuple[str, ...] = ()  # fault injection points active in the tasks (connectors.faults)
    # exactly-once (offset_store.sink): the MySQL sink whose transaction commits the window's offsets,
    # and how (advance: compare-and-set from the starts; set: a rewind; keep: a time-range replay)
    offsets_sink: str | None = None
    offsets_mode: str = "advance"
    max_dead_letters: Any = None  # errors.max_dead_letters (cdcflow.config_sections.DeadLetterLimit): the breaker
    spark_timeout: float = 1800.0  # spark.timeout: the window's Spark work is cancelled past it (spark_jobs/deadline.py)
    source_format: str = "debezium"  # source.format: the decoder of the records (connectors/formats.py)
    truncate: str = "ignore"  # truncate: what a TRUNCATE of a source table does (ignore | dlq)
    schema_changes: str = "lenient"  # tables made from the record schema: connectors/mysql/evolution.py
    schema_decisions: tuple[tuple[str, str], ...] = ()  # schema_changes pause: (change key, approved|rejected)
    # Debezium: a smaller batch is decoded record by record (connectors/debezium/envelope.COLUMN_WISE_MIN;
    # $CDCFLOW_COLUMN_WISE_MIN on the driver sets it, so that tests run small windows column-wise too)
    column_wise_min: int | None = None
    # composed indices (document:): what the read tasks read of their tables' changes (spark_jobs/project/compose.py)
    documents: tuple[Any, ...] = ()

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
    # composed indices: per sink, per table, the changed rows' columns (spark_jobs/compose.merge_seeds)
    seeds: dict[str, Any] = field(default_factory=dict)

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

    def timed(self, stage: str) -> AbstractContextManager[None]:
        """The wall time of a block into ``stages[stage]`` (connectors/timing.py, the one stage timer)."""
        return timing.timed(self.stages, stage)


class Counted(NamedTuple):
    """One (stage, topic, partition) of the tally: its end offset, its records, the Kafka timestamps
    of its first and last record, and the TRUNCATEs it left unapplied (truncate: ignore)."""

    end: int
    n: int
    first: int | None
    last: int | None
    truncates: int


Tally = dict[tuple[str | None, str, int], Counted]  # (bad stage or None for what was read, topic, partition)


Pieces = tuple[tuple[ReadRange, ...], ...]  # per read task, the ranges (or pieces of ranges) it reads
MIN_PIECE = 2_000  # records: a range's rest this close to a task's share is read by that task whole


def read_pieces(ranges: tuple[ReadRange, ...], slots: int = 0) -> Pieces:
    """Per read task, the ranges it reads: task i reads ranges i, i + n, … (:func:`read_tasks`),
    except in a window whose ranges all end by themselves and that ``slots`` tasks running at once
    would read in uneven waves (3 partitions on 2 cores: two tasks, then one alone; 1 partition on
    2 cores: one task). Such a window is read by a multiple of ``slots`` tasks of equal shares, a
    range cut into consecutive pieces where a share ends (:func:`_linear`). A piece but the last of
    its range stops at its stop offset or EOF, never at the deadline (``ReadRange.piece``): no
    offset is left unread behind the next piece, so the window's end per partition is its last
    piece's. The records of one partition then sit in two tasks, as a key's may today (in two
    partitions): the version guard, the deletes written after every read task
    (``project.mysql_deletes``) and the write tasks' reduction across read tasks keep the newer."""
    tasks = read_tasks(ranges)
    plain = tuple(tuple(ranges[i::tasks]) for i in range(tasks))
    if slots < 2 or len(ranges) >= 4 * slots or not ends_by_themselves(ranges):
        return plain
    total = sum(max(r.max_records, 0) for r in ranges)
    even = slots * max(1, len(ranges) // slots)
    if total < even * MIN_PIECE:
        return plain
    share = -(-total // even)
    if even == tasks and max(sum(max(r.max_records, 0) for r in t) for t in plain) <= share + MIN_PIECE:
        return plain  # already even
    return _linear(ranges, even, share)


def _linear(ranges: tuple[ReadRange, ...], tasks: int, share: int) -> Pieces:
    """``ranges`` in order filled into ``tasks`` tasks of ``share`` records, cut where a task is
    full; a range's pieces go to consecutive tasks, so no task reads two pieces of one partition."""
    out: list[list[ReadRange]] = [[] for _ in range(tasks)]
    t = load = 0
    for r in ranges:
        start, left = r.start, max(r.max_records, 0)
        if left == 0:
            out[t].append(r)
            continue
        while left > 0:
            take = left if t == tasks - 1 or left <= share - load + MIN_PIECE else share - load
            last = take == left
            out[t].append(r if start == r.start and last else replace(
                r, start=start, max_records=take, stop=r.stop if last else start + take,
                deadline=r.deadline if last else math.inf, piece=not last))
            start, left, load = start + take, left - take, load + take
            if load >= share and t < tasks - 1:
                t, load = t + 1, 0
    return tuple(tuple(t) for t in out if t)


def ends_by_themselves(ranges: tuple[ReadRange, ...]) -> bool:
    """Every range ends at EOF, a known stop or its budget, never by waiting for new records."""
    return all(r.stop_on_eof or r.stop is not None for r in ranges)


def read_tasks(ranges: tuple[ReadRange, ...]) -> int:
    """How many Spark tasks read the window: one per partition range, except that a small window
    whose ranges all end by themselves (at EOF, a known stop or their budget, never by waiting for
    new records) is read by fewer tasks, one after another: a task costs more to schedule (~0.1 s)
    than reading a few thousand records takes."""
    if not ends_by_themselves(ranges):
        return len(ranges)  # a range that waits until the deadline must not delay the next one
    planned = sum(max(r.max_records, 0) for r in ranges)
    return max(1, min(len(ranges), -(-planned // RECORDS_PER_READ_TASK)))


def read_result(ends: dict[tuple[str, int], tuple[int, int]], tally: Tally,
                on_read: Callable[[dict[tuple[str, int], tuple[int, int]]], None],
                stages: dict[str, float] | None = None) -> WindowResult:
    """The read range into the ledger (before anything is applied), and the window's result so far
    (its ``stages``: the timer the window's stages already run on)."""
    on_read(ends)
    return WindowResult(ends=ends, records=sum(c for _e, c in ends.values()), record_time=record_time(tally),
                        truncates_ignored=sum(c.truncates for (stage, _t, _p), c in tally.items() if stage is None),
                        stages={} if stages is None else stages)


def ends_of(job: WindowJob, tally: Tally) -> dict[tuple[str, int], tuple[int, int]]:
    """Per planned range, (end offset, records read); a range that read nothing ends at its start."""
    read = {(t, p): c for (stage, t, p), c in tally.items() if stage is None}
    return {(r.topic, r.partition): (c.end, c.n) if (c := read.get((r.topic, r.partition))) else (r.start, 0)
            for r in job.ranges}


def record_time(tally: Tally) -> list[int | None]:
    """The Kafka timestamps (ms) of the window's first and last record read: [min, max]."""
    read = [c for (stage, _t, _p), c in tally.items() if stage is None]
    return [min((c.first for c in read if c.first is not None), default=None),
            max((c.last for c in read if c.last is not None), default=None)]


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
        timing.add(result.stages, stage, float(extra.pop(SECONDS_KEY)))
    changed = extra.pop(CHANGED_KEY, {})
    stats.add(SinkStats(row.upserted, row.deleted, row.stale, row.failed, extra, changed, row.unchanged))
    result.dead_lettered += row.failed


def smaller(a: int | None, b: int | None) -> int | None:
    """The smaller of two values where None is unknown (the other wins)."""
    return b if a is None else a if b is None else min(a, b)


def larger(a: int | None, b: int | None) -> int | None:
    """The larger of two values where None is unknown (the other wins)."""
    return b if a is None else a if b is None else max(a, b)


def breaker(job: WindowJob, result: WindowResult) -> None:
    """errors.max_dead_letters: past it, the window fails before its commit (the runner then STOPs the
    pipeline). What it sent to the DLQ stays there, and no later window sends it again. Applied after
    the dead letters (write/dead_letters.py) and again with the rows the sinks rejected, before the
    exactly-once sink (write/tasks.py)."""
    limit = job.max_dead_letters
    if limit is None or not limit.exceeded(result.dead_lettered, result.records):
        return
    raise DeadLettersExceeded(
        f"{result.dead_lettered} of the {result.records} records of window {job.run_id} went to the dead-letter "
        f"topic {job.dlq_topic} ({result.dead_lettered / max(result.records, 1):.0%}), past errors.max_dead_letters "
        f"({limit.describe()}): pipeline {job.pipeline!r} is STOPPED and no offset moved. See the dead letters "
        f"(the page, or GET /cdcflow/connectors/{job.pipeline}/dlq), fix their cause, then resume the pipeline; "
        "the records already in the DLQ are not sent again")
