"""Finding records by time: per partition, the first offset whose record time is at or after a
moment (backfills, ``start_time``/``end_time``, aligned windows, ``offsets set --to-time``).

A binary search over offsets (:func:`search_time`), each probe one record read, where the record
times only grow; a linear scan (:func:`scan_for_time`) checks it in tests. The record time is the
Kafka timestamp or the change's ``source.ts_ms`` (:func:`record_time`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from connectors.kafka.client import until_eof

TimestampSource = str  # "kafka" (the record's timestamp) or "source_ts_ms" (the change's source.ts_ms)


def record_time(msg: Any, source: TimestampSource = "kafka") -> int | None:
    """The time a record stands for, in epoch ms, or None when it has none (a tombstone, a value
    without ``source.ts_ms``): such a record goes with the records before it."""
    if source == "kafka":
        ts_type, ts = msg.timestamp()
        return ts if ts_type and ts >= 0 else None
    value = msg.value()
    if not value:
        return None
    try:
        doc = json.loads(value)
    except ValueError:
        return None
    if isinstance(doc, dict) and isinstance(doc.get("payload"), dict) and "schema" in doc:
        doc = doc["payload"]
    src = doc.get("source") if isinstance(doc, dict) else None
    ts = src.get("ts_ms") if isinstance(src, dict) else None
    return ts if isinstance(ts, int) and not isinstance(ts, bool) else None


def offsets_for_time(conf: dict[str, Any], partitions: list[tuple[str, int, int, int]],
                     timestamp_ms: int, timeout: float = 30.0,
                     source: TimestampSource = "kafka") -> dict[tuple[str, int], int]:
    """For (topic, partition, low, end): the first offset whose record time is >= ``timestamp_ms``,
    or ``end`` when there is none (records without a time go with the records before them).

    With the Kafka record timestamp, the broker's answer (ListOffsets by time) is used when the
    records confirm it (the record there is at/after the time, the one before it earlier); where they
    do not (our local broker answers 0 for any time) and for ``source_ts_ms``, a binary search over
    the records' own times finds it in O(log n) single-record reads. Both assume times that do not go
    backwards within a partition; docs/semantics.md says what happens when they do."""
    servers = str(conf.get("bootstrap.servers"))
    # single-record reads: small fetches, and no waiting for more bytes (a fetch otherwise waits
    # fetch.wait.max.ms on a broker that does not honour fetch.min.bytes)
    consumer = Consumer({**conf, "enable.partition.eof": True, "max.partition.fetch.bytes": 65536,
                         "fetch.max.bytes": 1_048_576, "queued.max.messages.kbytes": 1024,
                         "fetch.wait.max.ms": 10})
    out: dict[tuple[str, int], int] = {}
    try:
        broker: dict[tuple[str, int], int] = {}
        if source == "kafka":
            try:
                answers = consumer.offsets_for_times(
                    [TopicPartition(t, p, timestamp_ms) for t, p, _lo, _end in partitions], timeout=timeout)
                broker = {(a.topic, a.partition): a.offset for a in answers}
            except KafkaException:
                broker = {}
        for topic, partition, low, end in partitions:
            probe = _Probe(consumer, topic, partition, end, source, servers, timeout)
            guess = broker.get((topic, partition), -1)
            guess = end if guess is None or guess < 0 else guess
            if source == "kafka" and low <= guess <= end and _is_first_at(
                    consumer, topic, partition, low, end, guess, timestamp_ms, servers, timeout):
                out[(topic, partition)] = guess
            else:
                out[(topic, partition)] = search_time(probe, low, end, timestamp_ms)
    finally:
        consumer.close()
    return out


def search_time(probe: Any, low: int, end: int, timestamp_ms: int) -> int:
    """Binary search: the smallest position ``o`` in [low, end] whose first timed record at or after
    it has a time >= ``timestamp_ms``; the answer is that record's offset (``end`` when none).
    ``probe(o)`` returns (offset, time) of the first timed record in [o, end), or None."""
    lo, hi = low, end
    while lo < hi:
        mid = (lo + hi) // 2
        hit = probe(mid)
        if hit is None or hit[1] >= timestamp_ms:
            hi = mid
        else:
            lo = hit[0] + 1
    hit = probe(lo) if lo < end else None
    return hit[0] if hit is not None else end


class _Probe:
    """(offset, time) of the first timed record at or after an offset, one short fetch each."""

    def __init__(self, consumer: Consumer, topic: str, partition: int, end: int, source: TimestampSource,
                 servers: str, timeout: float) -> None:
        self.consumer, self.topic, self.partition, self.end = consumer, topic, partition, end
        self.source, self.servers, self.timeout = source, servers, timeout
        self.reads = 0

    def __call__(self, offset: int) -> tuple[int, int] | None:
        self.reads += 1
        for msg in _messages(self.consumer, self.topic, self.partition, offset, self.end, self.servers,
                             self.timeout):
            ts = record_time(msg, self.source)
            if ts is not None:
                return msg.offset(), ts
        return None


def _messages(consumer: Consumer, topic: str, partition: int, start: int, end: int, servers: str,
              timeout: float) -> Iterator[Any]:
    """The records in [start, end), in order."""
    if start >= end:
        return
    consumer.assign([TopicPartition(topic, partition, start)])
    pending = {(topic, partition)}
    for msg in until_eof(consumer, pending, f"reading timestamps of {topic}[{partition}]", servers, timeout,
                         batch=100, per_record=True):
        if msg.offset() < start:
            continue
        if msg.offset() >= end:
            return
        yield msg
        if msg.offset() + 1 >= end:
            return


def scan_for_time(conf: dict[str, Any], topic: str, partition: int, low: int, end: int, timestamp_ms: int,
                  source: TimestampSource = "kafka", timeout: float = 30.0) -> int:
    """The same answer as :func:`offsets_for_time` by reading every record (the reference for tests)."""
    servers = str(conf.get("bootstrap.servers"))
    consumer = Consumer({**conf, "enable.partition.eof": True})
    try:
        for msg in _messages(consumer, topic, partition, low, end, servers, timeout):
            ts = record_time(msg, source)
            if ts is not None and ts >= timestamp_ms:
                return msg.offset()
        return end
    finally:
        consumer.close()


def _is_first_at(consumer: Consumer, topic: str, partition: int, low: int, end: int, offset: int,
                 timestamp_ms: int, servers: str, timeout: float) -> bool:
    seen = {m.offset(): record_time(m) for m in _messages(consumer, topic, partition, max(low, offset - 1),
                                                          min(end, offset + 1), servers, timeout)}
    here = seen.get(offset)
    before = seen.get(offset - 1)
    here_ok = offset == end or (here is not None and here >= timestamp_ms)
    before_ok = offset == low or (before is not None and before < timestamp_ms)
    return here_ok and before_ok
