"""The records' values as read, left out of the projected rows and of a Spark stage, read again for the
dead letters.

Of the value as read only the few records that become dead letters have a need (the DLQ re-sends
the original bytes), yet it is most of a change: a real Debezium envelope is ~9 KB, its row a few
hundred bytes. So the decoded changes of a window without a chain (spark_jobs/read/ranges.py), the
projected rows (spark_jobs/project/tables.raw_columns) and a Spark stage's record frame
(spark_jobs/transform/spark_stage.py) carry :data:`OMITTED` in its place (a tombstone stays null,
so what tests for a null value still can), and a dead letter whose value was omitted gets it back
here, read again from Kafka by its coordinates: the window's ranges are fixed before it reads, so
the records are still there (the window's dead-letter task, spark_jobs/dead_letters.reporter, and the
write tasks' sink rejections, spark_jobs/write.write_target, call :func:`restored`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable

from connectors.base import FailedRecord
from connectors.errors import DeadLetterWriteFailed
from connectors.kafka.reader import KafkaRangeReader, ReadRange
from spark_jobs.job import WindowJob
from spark_jobs.read.ranges import OMITTED

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
