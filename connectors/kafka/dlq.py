"""The dead-letter reporter: re-sends a failed record with Kafka Connect's error-context headers.

Records keep their original key, value and headers; the context headers use Kafka Connect's names
(``__connect.errors.*``) so existing DLQ tooling reads them, plus ``__cdcflow.errors.*`` extras.
:meth:`DeadLetterReporter.flush` raises unless every record was acknowledged: it runs before any
offset is committed, so a failed DLQ write fails the window instead of losing the record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from cdcflow.errors import DeadLetterWriteFailed

Header = tuple[str, bytes | None]

ERROR_HEADER_PREFIX = "__connect.errors."


@dataclass(frozen=True)
class FailedRecord:
    """A record that cannot be processed, with its raw bytes and why."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[Header]
    stage: str  # "converter" | "transform" | "sink"
    component: str  # what was processing it (a sink name, the converter)
    error_class: str
    message: str
    stacktrace: str = ""
    extra_headers: Sequence[Header] = ()  # sink-specific context, e.g. the Elasticsearch error type


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
                 with_context: bool = True, flush_timeout: float = 30.0) -> None:
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
        headers = list(rec.headers)
        if self.with_context:
            headers += context_headers(rec, self.pipeline, self.run_id)
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
