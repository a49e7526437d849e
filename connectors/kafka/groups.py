"""Mirror committed offsets to the pipeline's Kafka consumer group.

The SQL offset store is the source of truth; the mirror lets standard lag tools
(``kafka-consumer-groups``, Burrow) see each pipeline's progress.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

log = logging.getLogger(__name__)


def mirror_offsets(conf: dict[str, Any], offsets: Mapping[tuple[str, int], int]) -> bool:
    """Commit ``offsets`` to the consumer group in ``conf['group.id']``; False (and a warning) on failure."""
    if not offsets:
        return True
    consumer = Consumer(conf)
    try:
        consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                        asynchronous=False)
        return True
    except KafkaException as exc:
        log.warning("offsets are committed in the offset store, but mirroring them to consumer group "
                    "%r failed (lag tools will lag until the next run): %s", conf.get("group.id"), exc)
        return False
    finally:
        consumer.close()


def group_offsets(conf: dict[str, Any], tps: list[tuple[str, int]], timeout: float = 10.0) -> dict[tuple[str, int], int]:
    """Read the group's committed offsets (what lag tools see)."""
    consumer = Consumer(conf)
    try:
        got = consumer.committed([TopicPartition(t, p) for t, p in tps], timeout=timeout)
        return {(tp.topic, tp.partition): tp.offset for tp in got}
    finally:
        consumer.close()
