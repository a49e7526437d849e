"""The values a Spark stage leaves behind (spark_jobs/raw_values.py): only a dead letter whose value was
omitted reads it again, from the range of its partition's offsets asked for. Against Kafka:
tests/integration/spark_jobs/test_spark_stage.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest

from connectors.base import FailedRecord
from connectors.errors import DeadLetterWriteFailed
from connectors.kafka.reader import RAW_SCHEMA
from spark_jobs import raw_values


def _failed(partition: int, offset: int, value: bytes | None) -> FailedRecord:
    return FailedRecord("t", partition, offset, b"k", value, [], "transform", "m", "cdcflow.errors.RecordError", "x")


class _Reader:
    """A partition holding ``value-<offset>`` at each offset; remembers the ranges asked for."""

    asked: list[Any] = []

    def __init__(self, _conf: dict[str, Any]) -> None:
        pass

    def read_ranges(self, ranges: list[Any]) -> Any:
        _Reader.asked = [(r.topic, r.partition, r.start, r.stop) for r in ranges]
        for r in ranges:
            offsets = list(range(r.start, r.stop))
            yield pa.RecordBatch.from_pydict({
                "topic": [r.topic] * len(offsets), "partition": [r.partition] * len(offsets), "offset": offsets,
                "timestamp": [0] * len(offsets), "key": [b"k"] * len(offsets),
                "value": [f"value-{o}".encode() for o in offsets], "headers": [[] for _ in offsets]}, schema=RAW_SCHEMA)


def test_only_the_omitted_values_are_read_again_each_partition_from_its_first_to_its_last_offset(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(raw_values, "KafkaRangeReader", _Reader)
    job: Any = SimpleNamespace(consumer_conf={})
    records = [_failed(0, 7, raw_values.OMITTED), _failed(0, 3, raw_values.OMITTED), _failed(1, 5, b"kept"),
               _failed(1, 9, None)]
    got = raw_values.restored(job, records)
    assert [r.value for r in got] == [b"value-7", b"value-3", b"kept", None]
    assert _Reader.asked == [("t", 0, 3, 8)]
    assert raw_values.restored(job, records[2:]) == records[2:]  # nothing omitted: no read


def test_a_record_no_longer_in_kafka_fails_the_window(monkeypatch: pytest.MonkeyPatch) -> None:
    class Gone(_Reader):
        def read_ranges(self, ranges: list[Any]) -> Any:
            return iter(())
    monkeypatch.setattr(raw_values, "KafkaRangeReader", Gone)
    job: Any = SimpleNamespace(consumer_conf={})
    with pytest.raises(DeadLetterWriteFailed, match=r"\('t', 0, 7\)"):
        raw_values.restored(job, [_failed(0, 7, raw_values.OMITTED)])
