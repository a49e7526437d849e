"""Reading Kafka in the partition-consumer model: explicit assignment, explicit offsets.

``discover`` runs on the driver: it lists the partitions and finds each partition's true end by
reading to partition EOF (ListOffsets' high watermark is not trusted: some brokers report it wrong).
``KafkaRangeReader`` runs inside Spark tasks: one consumer reads a task's partition ranges and yields
Arrow record batches, so the records go to the JVM without per-row pickling. Finding offsets by
time: connectors/kafka/time_search.py.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from connectors.errors import ConfigError
from connectors.kafka.client import convert_error, until_eof

RAW_SCHEMA = pa.schema([
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", pa.int64()),
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
])

BATCH_ROWS = 5_000


@dataclass(frozen=True)
class PartitionState:
    topic: str
    partition: int
    low: int  # first offset still in the log
    end: int  # true end (next offset to be written), found by reading to EOF


@dataclass(frozen=True)
class ReadRange:
    topic: str
    partition: int
    start: int
    max_records: int
    stop: int | None  # exclusive; set when replaying a range whose end is known
    deadline: float  # epoch seconds
    stop_on_eof: bool
    # a piece of a partition's range that another read task goes on from (spark_jobs/job.read_pieces):
    # it ends at its stop, its budget or EOF, never at a deadline, so no offset is left unread behind
    # the next piece's records
    piece: bool = False


@dataclass
class ReadOutcome:
    end: int
    records: int
    reason: str  # "eof" | "limit" | "stop" | "deadline"


def _error_collector(errors: list[KafkaError]) -> Any:
    def on_error(err: KafkaError) -> None:
        errors.append(err)
    return on_error


@dataclass(frozen=True)
class TopicPattern:
    """Every topic whose whole name matches ``regex`` (never the internal '__' topics)."""

    regex: str

    def select(self, names: Iterable[str]) -> list[str]:
        return sorted(n for n in names if not n.startswith("__") and re.fullmatch(self.regex, n))


def discover(conf: dict[str, Any], topics: list[str] | TopicPattern, timeout: float = 15.0) -> list[PartitionState]:
    """List the topics' partitions (a list, or the topics a pattern matches now) with their first
    offset and true end offset."""
    servers = str(conf.get("bootstrap.servers"))
    errors: list[KafkaError] = []
    consumer = Consumer({**conf, "error_cb": _error_collector(errors), "fetch.wait.max.ms": 10})
    try:
        try:
            meta = consumer.list_topics(timeout=timeout)
        except KafkaException as exc:
            raise convert_error(exc, "listing topics", servers) from exc
        tps: list[TopicPartition] = []
        if isinstance(topics, TopicPattern):
            topics = topics.select(meta.topics)
        for topic in topics:
            tmeta = meta.topics.get(topic)
            if tmeta is None or (tmeta.error is not None and tmeta.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
                raise ConfigError(f"topic {topic!r} does not exist on {servers} (source.topics)")
            if tmeta.error is not None:
                raise convert_error(tmeta.error, f"describing topic {topic!r}", servers)
            tps.extend(TopicPartition(topic, p) for p in sorted(tmeta.partitions))
        marks: dict[tuple[str, int], tuple[int, int]] = {}
        for tp in tps:
            try:
                marks[(tp.topic, tp.partition)] = consumer.get_watermark_offsets(tp, timeout=timeout)
            except KafkaException as exc:
                raise convert_error(exc, f"reading offsets of {tp.topic}[{tp.partition}]", servers) from exc
        ends = _read_to_eof(consumer, marks, timeout, servers)
        return [PartitionState(t, p, marks[(t, p)][0], ends[(t, p)]) for t, p in marks]
    finally:
        consumer.close()


def _read_to_eof(consumer: Consumer, marks: dict[tuple[str, int], tuple[int, int]],
                 timeout: float, servers: str) -> dict[tuple[str, int], int]:
    """Read from each reported high watermark to EOF: the true end is the last offset seen + 1."""
    ends = {tp: hi for tp, (_lo, hi) in marks.items()}
    if not marks:
        return ends
    consumer.assign([TopicPartition(t, p, max(hi, lo)) for (t, p), (lo, hi) in marks.items()])

    def at_end(tp: tuple[str, int], offset: int) -> None:
        ends[tp] = max(ends[tp], offset)

    for msg in until_eof(consumer, set(marks), "finding the end of the partitions", servers, timeout, batch=1000,
                         on_eof=at_end):
        tp = (msg.topic(), msg.partition())
        ends[tp] = max(ends[tp], msg.offset() + 1)
    consumer.unassign()
    return ends


class _Range:
    """One range being read: its outcome so far and the columns of the batch it is building."""

    def __init__(self, rng: ReadRange, outcome: ReadOutcome) -> None:
        self.rng, self.outcome = rng, outcome
        self.cols: dict[str, list[Any]] = {name: [] for name in RAW_SCHEMA.names}
        outcome.end, outcome.records, outcome.reason = rng.start, 0, "deadline"
        self.done = rng.max_records <= 0 or (rng.stop is not None and rng.stop <= rng.start)
        if self.done:
            outcome.reason = "stop" if rng.stop is not None else "limit"

    def batch(self) -> pa.RecordBatch:
        cols, self.cols = self.cols, {name: [] for name in RAW_SCHEMA.names}
        return pa.RecordBatch.from_pydict(cols, schema=RAW_SCHEMA)

    def take_all(self, msgs: list[Any]) -> bool:
        """The common batch of a range read alone, taken column by column (a comprehension per
        field: about a fifth of the per-message loop's time, the hot path of every window): no
        message is an error or an EOF, none is at or past ``stop``. False: nothing was taken, the
        caller takes them one by one (the last batch of a range, mostly)."""
        if any([m.error() is not None for m in msgs]):
            return False
        rng, out = self.rng, self.outcome
        offsets = [m.offset() for m in msgs]
        if rng.stop is not None and offsets[-1] >= rng.stop:
            return False
        room = rng.max_records - out.records
        if len(msgs) > room:  # the budget ends inside this batch: the rest is not the window's
            msgs, offsets = msgs[:room], offsets[:room]
        n, cols = len(msgs), self.cols
        cols["topic"] += [rng.topic] * n
        cols["partition"] += [rng.partition] * n
        cols["offset"] += offsets
        cols["timestamp"] += [ts if kind else None for kind, ts in [m.timestamp() for m in msgs]]
        cols["key"] += [m.key() for m in msgs]
        cols["value"] += [m.value() for m in msgs]
        headers = [m.headers() for m in msgs]
        cols["headers"] += [[{"key": k, "value": v} for k, v in h] if h else [] for h in headers]
        out.end, out.records = offsets[-1] + 1, out.records + n
        if out.records >= rng.max_records:
            out.reason, self.done = "limit", True
        elif rng.stop is not None and out.end >= rng.stop:
            out.reason, self.done = "stop", True
        return True


class KafkaRangeReader:
    """Reads partition ranges: each from ``start`` until EOF, its record budget, ``stop`` or the deadline."""

    def __init__(self, conf: dict[str, Any], stall_timeout: float = 30.0) -> None:
        self.conf = conf
        self.servers = str(conf.get("bootstrap.servers"))
        self.stall_timeout = stall_timeout

    def read_batches(self, rng: ReadRange, outcome: ReadOutcome) -> Iterator[pa.RecordBatch]:
        """One range; ``outcome`` says where and why it ended."""
        return self.read_ranges([rng], [outcome])

    def read_ranges(self, ranges: list[ReadRange], outcomes: list[ReadOutcome] | None = None,
                    midway: Callable[[], None] | None = None) -> Iterator[pa.RecordBatch]:
        """Several ranges (distinct partitions) with one consumer, all assigned at once: a read task
        of a small window reads its ranges without a consumer each (~2.5 ms apiece), and without
        assigning them one after another, which librdkafka delays by about a second per partition
        added to a consumer that already fetches. A range that ends is paused, the others go on.
        The batches of different ranges interleave; each range's are in offset order. ``midway``
        (several ranges only) is called once, after the first records or ends arrive and before the
        rest: the fault point ``during_read`` of connectors/faults.py.

        Kept whole (about 90 lines): it is one consume loop, the per-record hot path of every window,
        and each step (assign, consume, take or end a record, batch, pause) reads in its place. A
        range read alone takes most batches whole (:meth:`_Range.take_all`)."""
        outcomes = outcomes if outcomes is not None else [ReadOutcome(0, 0, "") for _ in ranges]
        states = [_Range(r, o) for r, o in zip(ranges, outcomes, strict=True)]
        by_tp = {(st.rng.topic, st.rng.partition): st for st in states}
        if len(by_tp) != len(states):
            raise ValueError(f"ranges of one partition read together: {[(r.topic, r.partition) for r in ranges]}")
        single = states[0] if len(states) == 1 else None
        errors: list[KafkaError] = []
        consumer = Consumer({**self.conf, "error_cb": _error_collector(errors)})
        what = "reading " + ", ".join(f"{r.topic}[{r.partition}] from offset {r.start}" for r in ranges[:3]) + (
            f" and {len(ranges) - 3} more ranges" if len(ranges) > 3 else "")
        last_progress = time.monotonic()
        try:
            reading = [st for st in states if not st.done]
            if reading:
                consumer.assign([TopicPartition(st.rng.topic, st.rng.partition, st.rng.start) for st in reading])
            while reading:
                now = time.time()
                expired = [st for st in reading if st.rng.deadline <= now]  # each range its own deadline
                if expired:  # (they differ only in a window split into pieces: job.read_pieces)
                    for st in expired:
                        st.done = True  # its outcome's reason: "deadline"
                    reading = [st for st in reading if not st.done]
                    if not reading:
                        break
                    consumer.pause([TopicPartition(st.rng.topic, st.rng.partition) for st in expired])
                remaining_time = min(st.rng.deadline for st in reading) - now
                want = min(1000, max(st.rng.max_records - st.outcome.records for st in reading))
                msgs = consumer.consume(num_messages=want, timeout=min(1.0, remaining_time))
                if msgs:
                    last_progress = time.monotonic()
                elif errors and time.monotonic() - last_progress > self.stall_timeout:
                    raise convert_error(errors[-1], what, self.servers)
                ended = []
                if msgs and single is not None and not single.done and single.take_all(msgs):
                    ended, msgs = ([single] if single.done else []), []
                for msg in msgs:
                    st = single or by_tp[(msg.topic(), msg.partition())]
                    if st.done:
                        continue
                    rng, out = st.rng, st.outcome
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            if rng.stop_on_eof and (rng.stop is None or rng.piece):
                                out.reason, st.done = "eof", True
                                ended.append(st)
                            continue
                        raise convert_error(err, what, self.servers)
                    offset = msg.offset()
                    if rng.stop is not None and offset >= rng.stop:
                        out.reason, st.done = "stop", True
                        ended.append(st)
                        continue
                    ts_type, ts = msg.timestamp()
                    cols = st.cols
                    cols["topic"].append(rng.topic)
                    cols["partition"].append(rng.partition)
                    cols["offset"].append(offset)
                    cols["timestamp"].append(ts if ts_type else None)
                    cols["key"].append(msg.key())
                    cols["value"].append(msg.value())
                    hdrs = msg.headers()
                    cols["headers"].append([{"key": k, "value": v} for k, v in hdrs] if hdrs else [])
                    out.end, out.records = offset + 1, out.records + 1
                    if out.records >= rng.max_records:
                        out.reason, st.done = "limit", True
                        ended.append(st)
                    elif rng.stop is not None and out.end >= rng.stop:
                        out.reason, st.done = "stop", True
                        ended.append(st)
                for st in reading:
                    if len(st.cols["offset"]) >= BATCH_ROWS:
                        yield st.batch()
                if midway is not None and msgs and single is None:
                    midway()
                    midway = None
                if ended:
                    reading = [st for st in reading if not st.done]
                    if reading:  # the ended ranges' partitions fetch nothing more
                        consumer.pause([TopicPartition(st.rng.topic, st.rng.partition) for st in ended])
            for st in states:
                if st.cols["offset"]:
                    yield st.batch()
        except KafkaException as exc:
            raise convert_error(exc, what, self.servers) from exc
        finally:
            consumer.close()


def read_topic(conf: dict[str, Any], topic: str, timeout: float = 20.0) -> list[Any]:
    """Every message of ``topic`` (all partitions) up to partition EOF; [] when the topic does not
    exist. For reports and tests (the DLQ read back), not for windows."""
    consumer = Consumer({**conf, "group.id": conf.get("group.id", "cdcflow-read-topic"),
                         "enable.auto.commit": False, "enable.partition.eof": True})
    servers = str(conf.get("bootstrap.servers"))
    try:
        meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None:
            return []
        consumer.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
        return list(until_eof(consumer, {(topic, p) for p in meta.partitions}, f"reading {topic}", servers, timeout,
                              poll=0.5))
    finally:
        consumer.close()
