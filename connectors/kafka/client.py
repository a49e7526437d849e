"""Client settings and error conversion for confluent-kafka.

The settings that the offset guarantees rest on are forced here and cannot be overridden from a
pipeline file: auto-commit off, explicit assignment, partition EOF on, and no silent offset reset.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException

from connectors.errors import BrokerUnavailable, OffsetOutOfRange, WindowFailed

FORCED_CONSUMER_SETTINGS: dict[str, Any] = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": True,
    # A stored offset that no longer exists must stop the window, never jump silently.
    "auto.offset.reset": "error",
    "isolation.level": "read_committed",
}


def consumer_config(client: dict[str, Any], group_id: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "socket.timeout.ms": 10_000,
        "session.timeout.ms": 10_000,
        "fetch.wait.max.ms": 100,
        "queued.max.messages.kbytes": 65_536,
        "topic.metadata.refresh.interval.ms": 30_000,
    }
    conf.update(client)
    conf.update(extra or {})
    conf.update(FORCED_CONSUMER_SETTINGS)
    conf["group.id"] = group_id
    return conf


def producer_config(client: dict[str, Any]) -> dict[str, Any]:
    conf: dict[str, Any] = {"linger.ms": 20, "socket.timeout.ms": 10_000, "message.timeout.ms": 30_000}
    conf.update(client)
    conf.update({"acks": "all", "enable.idempotence": True})
    return conf


_BROKER_DOWN = {
    KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT,
    KafkaError._RESOLVE, KafkaError.REQUEST_TIMED_OUT, KafkaError.NETWORK_EXCEPTION,
    KafkaError.BROKER_NOT_AVAILABLE, KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError._MSG_TIMED_OUT,
}


def convert_error(err: KafkaError | KafkaException | Exception, what: str, servers: str) -> WindowFailed:
    """Turn a confluent-kafka error into the cdcflow error that says what to do about it."""
    kerr = err.args[0] if isinstance(err, KafkaException) and err.args else err
    if isinstance(kerr, KafkaError):
        code = kerr.code()
        if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
            return OffsetOutOfRange(
                f"{what}: the offset is no longer in the log ({kerr.str()}); records were deleted by "
                "retention or the topic was recreated. Replay with start_offsets or reset the "
                "pipeline's offsets (`cdcflow offsets set`) after deciding what to do about the gap")
        if code in _BROKER_DOWN or kerr.retriable():
            return BrokerUnavailable(f"{what}: Kafka at {servers} is unavailable: {kerr.str()}")
        return BrokerUnavailable(f"{what}: Kafka error from {servers}: {kerr.name()}: {kerr.str()}")
    return BrokerUnavailable(f"{what}: Kafka at {servers} failed: {err.__class__.__name__}: {err}")


def until_eof(consumer: Consumer, pending: set[tuple[str, int]], what: str, servers: str, timeout: float,
              batch: int = 500, poll: float = 0.05, on_eof: Callable[[tuple[str, int], int], None] | None = None,
              per_record: bool = False) -> Iterator[Any]:
    """The records of the consumer's assigned partitions, until every (topic, partition) of ``pending``
    has reported its end (``on_eof`` gets it and the end offset) or was discarded from ``pending`` by
    the caller (a range read to its end). ``what`` names the read in errors: a broker error is
    converted (:func:`convert_error`); no end within ``timeout`` (from the start, or with
    ``per_record`` from the last record) is a BrokerUnavailable. ``poll`` is short: ``consume()``
    returns when its batch is full or at its timeout, not at a partition's end."""
    deadline = time.monotonic() + timeout
    while pending:
        if time.monotonic() > deadline:
            raise BrokerUnavailable(f"{what}: no end-of-partition for {sorted(pending)} from {servers} "
                                    f"within {timeout:.0f}s")
        for msg in consumer.consume(num_messages=batch, timeout=poll):
            tp = (msg.topic(), msg.partition())
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    raise convert_error(err, f"{what} ({tp[0]}[{tp[1]}])", servers)
                if on_eof is not None:
                    on_eof(tp, msg.offset())
                pending.discard(tp)
                continue
            if per_record:
                deadline = time.monotonic() + timeout
            yield msg
