"""The dead-letter reporter: re-sends a failed record with Kafka Connect's error-context headers.

Records keep their original key, value and headers; the context headers use Kafka Connect's names
(``__connect.errors.*``) so existing DLQ tooling reads them, plus ``__cdcflow.errors.*`` extras.
:meth:`DeadLetterReporter.flush` raises unless every record was acknowledged: it runs before any
offset is committed, so a failed DLQ write fails the window instead of losing the record.

Without duplicates: every dead letter carries ``__cdcflow.errors.origin`` (the window's run id and
the record's topic, partition, offset and component). A retried window first reads what its earlier
attempts already sent (:func:`sent_dead_letters`) and the reporter skips those, so a window killed
after its DLQ flush does not send its dead letters twice.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer

from connectors.base import FailedRecord, Header
from connectors.errors import DeadLetterWriteFailed

ERROR_HEADER_PREFIX = "__connect.errors."


def context_headers(rec: FailedRecord, pipeline: str, run_id: str) -> list[Header]:
    def enc(value: object) -> bytes:
        return str(value).encode("utf-8")

    return [
        (ERROR_HEADER_PREFIX + "topic", enc(rec.topic)),
        (ERROR_HEADER_PREFIX + "partition", enc(rec.partition)),
        (ERROR_HEADER_PREFIX + "offset", enc(rec.offset)),
        (ERROR_HEADER_PREFIX + "connector.name", enc(pipeline)),
        (ERROR_HEADER_PREFIX + "task.id", enc(run_id)),
        (ERROR_HEADER_PREFIX + "stage", enc(rec.stage)),
        (ERROR_HEADER_PREFIX + "class.name", enc(rec.component)),
        (ERROR_HEADER_PREFIX + "exception.class.name", enc(rec.error_class)),
        (ERROR_HEADER_PREFIX + "exception.message", enc(rec.message)),
        (ERROR_HEADER_PREFIX + "exception.stacktrace", enc(rec.stacktrace or rec.message)),
        *rec.extra_headers,
    ]


class DeadLetterReporter:
    """report() many records, then flush() once; flush() raises if any write failed."""

    def __init__(self, producer_conf: dict[str, Any], topic: str, pipeline: str, run_id: str,
                 with_context: bool = True, flush_timeout: float = 30.0,
                 already_sent: frozenset[tuple[str, int, int, str]] = frozenset()) -> None:
        self.already_sent = already_sent
        self._sent: set[tuple[str, int, int, str]] = set()  # a record goes to the DLQ once per component
        self.skipped = 0
        self.topic = topic
        self.pipeline = pipeline
        self.run_id = run_id
        self.with_context = with_context
        self.flush_timeout = flush_timeout
        self.servers = str(producer_conf.get("bootstrap.servers"))
        self._failures: list[str] = []
        self._producer = Producer({**producer_conf, "error_cb": self._on_error})
        self.reported = 0

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self._failures.append(err.str())

    def _on_delivery(self, err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            self._failures.append(err.str())

    def report(self, rec: FailedRecord) -> None:
        origin = (rec.topic, rec.partition, rec.offset, rec.component)
        if origin in self._sent:  # another change of the same record (a Canal message of several rows)
            return
        self._sent.add(origin)
        if origin in self.already_sent:
            self.reported += 1  # this window's dead letter, sent by an earlier attempt
            self.skipped += 1
            return
        headers = list(rec.headers)
        if self.with_context:
            headers += context_headers(rec, self.pipeline, self.run_id)
        headers.append((ORIGIN_HEADER, json.dumps(
            {"run": self.run_id, "topic": rec.topic, "partition": rec.partition, "offset": rec.offset,
             "component": rec.component}).encode()))
        while True:
            try:
                self._producer.produce(self.topic, key=rec.key, value=rec.value, headers=headers,
                                       on_delivery=self._on_delivery)
                break
            except BufferError:
                self._producer.poll(0.5)  # local queue full: let deliveries drain
            except KafkaException as exc:
                raise DeadLetterWriteFailed(
                    f"writing offset {rec.offset} of {rec.topic}[{rec.partition}] to DLQ topic "
                    f"{self.topic!r} failed: {exc}") from exc
        self.reported += 1
        self._producer.poll(0)

    def flush(self) -> int:
        remaining = self._producer.flush(self.flush_timeout)
        if remaining or self._failures:
            detail = self._failures[0] if self._failures else f"{remaining} records not acknowledged"
            raise DeadLetterWriteFailed(
                f"dead-letter topic {self.topic!r} on {self.servers}: {len(self._failures) or remaining} "
                f"of {self.reported} records were not written ({detail}); no offset is committed")
        return self.reported


# -- inspect and redrive ---------------------------------------------------------------------------

CDCFLOW_ERROR_PREFIX = "__cdcflow.errors."
ORIGIN_HEADER = CDCFLOW_ERROR_PREFIX + "origin"
REDRIVE_HEADER = "__cdcflow.redrive"


def sent_dead_letters(consumer_conf: dict[str, Any], dlq_topic: str, run_ids: Collection[str],
                      since_ms: int) -> frozenset[tuple[str, int, int, str]]:
    """(topic, partition, offset, component) of the dead letters the windows ``run_ids`` sent to
    ``dlq_topic`` since ``since_ms`` (earlier attempts of a window, and windows over the same
    records that never committed), read back from the topic."""
    from connectors.errors import ConfigError  # noqa: PLC0415
    from connectors.kafka.reader import discover  # noqa: PLC0415
    from connectors.kafka.time_search import _messages, offsets_for_time  # noqa: PLC0415

    try:
        parts = [(p.topic, p.partition, p.low, p.end) for p in discover(consumer_conf, [dlq_topic])]
    except ConfigError:  # no DLQ topic yet: nothing was sent
        return frozenset()
    starts = offsets_for_time(consumer_conf, parts, since_ms)
    sent: set[tuple[str, int, int, str]] = set()
    consumer = Consumer({**consumer_conf, "enable.partition.eof": True})
    servers = str(consumer_conf.get("bootstrap.servers"))
    try:
        for topic, partition, _low, end in parts:
            for msg in _messages(consumer, topic, partition, starts[(topic, partition)], end, servers, 30.0):
                origin = dict(msg.headers() or ()).get(ORIGIN_HEADER)
                if not origin:
                    continue
                o = json.loads(origin)
                if o.get("run") in run_ids:
                    sent.add((o["topic"], int(o["partition"]), int(o["offset"]), o["component"]))
    finally:
        consumer.close()
    return frozenset(sent)


@dataclass(frozen=True)
class DeadLetter:
    """One record of a dead-letter topic, with its error context decoded from the headers."""

    partition: int
    offset: int
    timestamp: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]

    def header(self, name: str) -> str | None:
        for k, v in reversed(self.headers):  # the context headers come last
            if k == name:
                return v.decode("utf-8", "replace") if v is not None else None
        return None

    def context(self, name: str) -> str | None:
        return self.header(ERROR_HEADER_PREFIX + name)

    @property
    def original_topic(self) -> str | None:
        return self.context("topic")

    @property
    def original_partition(self) -> int | None:
        p = self.context("partition")
        return int(p) if p is not None and p.lstrip("-").isdigit() else None

    @property
    def original_offset(self) -> int | None:
        o = self.context("offset")
        return int(o) if o is not None and o.lstrip("-").isdigit() else None

    @property
    def stage(self) -> str | None:
        return self.context("stage")

    @property
    def error_class(self) -> str | None:
        return self.context("exception.class.name")

    @property
    def message(self) -> str | None:
        return self.context("exception.message")

    @property
    def stacktrace(self) -> str | None:
        return self.context("exception.stacktrace")

    @property
    def fingerprint(self) -> str:
        """Identifies this record beyond its offset (a recreated topic reuses offsets)."""
        import hashlib  # noqa: PLC0415

        h = hashlib.sha256(str(self.timestamp).encode())
        for part in (self.key, self.value):
            h.update(len(part or b"").to_bytes(8, "big"))
            h.update(part or b"")
        return h.hexdigest()[:32]

    def original_headers(self) -> list[Header]:
        """The record's own headers: the error context (ours and Connect's) removed."""
        return [(k, v) for k, v in self.headers
                if not k.startswith(ERROR_HEADER_PREFIX) and not k.startswith(CDCFLOW_ERROR_PREFIX)]


@dataclass(frozen=True)
class DlqPartition:
    partition: int
    low: int
    end: int


def describe(conf: dict[str, Any], topic: str, timeout: float = 15.0) -> list[DlqPartition]:
    """The DLQ's partitions with first and true end offsets; [] when the topic does not exist yet."""
    from connectors.errors import ConfigError  # noqa: PLC0415
    from connectors.kafka.reader import discover  # noqa: PLC0415

    try:
        states = discover(conf, [topic], timeout)
    except ConfigError:  # no dead letter was ever written: the topic is created by the first one
        return []
    return [DlqPartition(s.partition, s.low, s.end) for s in states]


def read_dead_letters(conf: dict[str, Any], topic: str, ranges: dict[int, tuple[int, int]],
                      timeout: float = 20.0) -> list[DeadLetter]:
    """The records of ``topic`` in ``ranges`` ({partition: (start, end exclusive)})."""
    from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415

    from connectors.kafka.client import convert_error, until_eof  # noqa: PLC0415

    wanted = {p: (s, e) for p, (s, e) in ranges.items() if e > s}
    if not wanted:
        return []
    servers = str(conf.get("bootstrap.servers"))
    consumer = Consumer({**conf, "enable.auto.commit": False, "enable.partition.eof": True,
                         "auto.offset.reset": "error"})
    out: list[DeadLetter] = []
    try:
        consumer.assign([TopicPartition(topic, p, s) for p, (s, _e) in wanted.items()])
        pending = {(topic, p) for p in wanted}
        for msg in until_eof(consumer, pending, f"reading dead-letter topic {topic!r}", servers, timeout, poll=0.5):
            p = msg.partition()
            if (topic, p) not in pending:
                continue
            start, end = wanted[p]
            if msg.offset() >= end:
                pending.discard((topic, p))
                continue
            if msg.offset() >= start:
                ts_type, ts = msg.timestamp()
                out.append(DeadLetter(p, msg.offset(), ts if ts_type else None, msg.key(), msg.value(),
                                      tuple(msg.headers() or ())))
            if msg.offset() + 1 >= end:
                pending.discard((topic, p))
    except KafkaException as exc:
        raise convert_error(exc, f"reading dead-letter topic {topic!r}", servers) from exc
    finally:
        consumer.close()
    return sorted(out, key=lambda d: (d.partition, d.offset))


def republish(producer_conf: dict[str, Any], records: Sequence[tuple[str, DeadLetter, Header]],
              timeout: float = 30.0) -> None:
    """Produce (target topic, dead letter, marker header) with the original key, value and headers.
    Raises DeadLetterWriteFailed unless every record was acknowledged."""
    failures: list[str] = []

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            failures.append(err.str())

    producer = Producer({**producer_conf, "error_cb": lambda e: failures.append(e.str()) if e.fatal() else None})
    servers = str(producer_conf.get("bootstrap.servers"))
    for target, rec, marker in records:
        while True:
            try:
                producer.produce(target, key=rec.key, value=rec.value,
                                 headers=[*rec.original_headers(), marker], on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.5)
            except KafkaException as exc:
                raise DeadLetterWriteFailed(f"redriving to {target!r} on {servers} failed: {exc}") from exc
        producer.poll(0)
    remaining = producer.flush(timeout)
    if remaining or failures:
        detail = failures[0] if failures else f"{remaining} records not acknowledged"
        raise DeadLetterWriteFailed(f"redrive to {servers}: {len(failures) or remaining} of {len(records)} "
                                    f"records were not written ({detail})")
