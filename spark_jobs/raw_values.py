"""The records' values as read, left out of the projected rows and of a Spark stage, read again for the
dead letters. Below the stages (read, transform, project and write all use it; it uses none of them).

Of the value as read only the few records that become dead letters have a need (the DLQ re-sends
the original bytes), yet it is most of a change: a real Debezium envelope is ~9 KB, its row a few
hundred bytes. So the decoded changes of a window without a chain (spark_jobs/read/ranges.py), the
projected rows (spark_jobs/project/tables.raw_columns) and a Spark stage's record frame
(spark_jobs/transform/spark_stage.py) carry :data:`OMITTED` in its place (a tombstone stays null,
so what tests for a null value still can), and a dead letter whose value was omitted gets it back
here, read again from Kafka by its coordinates: the window's ranges are fixed before it reads, so
the records are still there (the dead-letter tasks, spark_jobs/write/dead_letter_rows.reporter, and the
write tasks' sink rejections, spark_jobs/write/target_writes.write_target, call :func:`restored`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc

from connectors.base import FailedRecord
from connectors.errors import DeadLetterWriteFailed
from connectors.kafka.reader import KafkaRangeReader, ReadRange
from spark_jobs.job import WindowJob

# a record's raw value, left out once decoded: a real Debezium envelope is ~9 KB, and of the values as
# read only a dead letter's has a need (the DLQ re-sends the original bytes), which the dead-letter
# paths read again from Kafka by the record's coordinates (:func:`restored`). Not
# a value a converter reads (a NUL first); a tombstone's stays null.
OMITTED = b"\x00cdcflow:omitted"


def omitted(values: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """``values`` (the raw values) with each non-null one replaced by :data:`OMITTED`."""
    return pc.if_else(pc.is_valid(values), pa.scalar(OMITTED, values.type), pa.scalar(None, values.type))


def without_values(decoded: pa.RecordBatch) -> pa.RecordBatch:
    """A decoded batch whose raw values are :func:`omitted`: the read batch is freed at once, so the
    next one reuses its memory (a task held every value of its window: ~450 MB of fresh pages for
    50,000 real-shaped records, the most expensive part of the read, py-spy). Made column by column:
    a table made of the batch (``pa.table``, ``set_column``) kept the whole read batch alive."""
    names = decoded.schema.names
    return pa.RecordBatch.from_arrays(
        [omitted(decoded.column(i)) if name == "value" else decoded.column(i) for i, name in enumerate(names)],
        names=names)


_REREAD_SECONDS = 120.0


def restored(job: WindowJob, records: list[FailedRecord]) -> list[FailedRecord]:
    """``records`` with each omitted value read again from Kafka."""
    wanted = {(r.topic, r.partition, r.offset) for r in records if r.value == OMITTED}
    if not wanted:
        return records
    values = read_values(job, wanted)
    return [dataclasses.replace(r, value=values[(r.topic, r.partition, r.offset)]) if r.value == OMITTED else r
            for r in records]


Coordinates = tuple[str, int, int]  # topic, partition, offset


def read_values(job: WindowJob, coordinates: Iterable[Coordinates]) -> dict[Coordinates, bytes | None]:
    """The values at ``coordinates`` (topic, partition, offset), read from each partition's first
    to its last offset asked for, with one consumer."""
    offsets: dict[tuple[str, int], list[int]] = {}
    for topic, partition, offset in coordinates:
        offsets.setdefault((topic, partition), []).append(offset)
    deadline = time.time() + _REREAD_SECONDS
    ranges = [ReadRange(topic, partition, min(o), max(o) + 1 - min(o), max(o) + 1, deadline, True)
              for (topic, partition), o in offsets.items()]
    wanted = {(t, p, o) for (t, p), os in offsets.items() for o in os}
    found: dict[Coordinates, bytes | None] = {}
    for batch in KafkaRangeReader(job.consumer_conf).read_ranges(ranges):
        cols = batch.select(["topic", "partition", "offset", "value"]).to_pydict()
        for at in zip(cols["topic"], cols["partition"], cols["offset"], cols["value"], strict=True):
            if at[:3] in wanted:
                found[at[:3]] = at[3]
    missing = sorted(wanted - found.keys())
    if missing:
        raise DeadLetterWriteFailed(f"the dead letters' records {missing[:3]} could not be read again from Kafka "
                                    "(did retention or compaction remove them during the window?)")
    return found
