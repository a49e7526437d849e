"""What a pipeline's config resolves to on the driver: its state store, the exactly-once sink's
offsets, its Kafka settings and topics, its sink targets; and its stored offsets, read and set
through them (exactly-once: the MySQL sink's offsets are the authority).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from cdcflow.config import PipelineConfig
from cdcflow.connections import get_connection
from cdcflow.state import StateStore, TopicPartition, default_store_url

log = logging.getLogger("cdcflow.runner")


def offset_store_url(cfg: PipelineConfig) -> str:
    if cfg.offset_store.conn_id:
        return get_connection(cfg.offset_store.conn_id).sqlalchemy_url()
    return default_store_url()


def offset_store(cfg: PipelineConfig) -> StateStore:
    return StateStore(offset_store_url(cfg))


def sink_offsets(cfg: PipelineConfig) -> Any:
    """Exactly-once (offset_store.sink): the offsets in that MySQL sink's database, else None."""
    if cfg.offset_store.sink is None:
        return None
    from connectors.mysql.offsets import SinkOffsets  # noqa: PLC0415

    sink = next(s for s in cfg.sinks if s.name == cfg.offset_store.sink)
    return SinkOffsets(get_connection(sink.conn_id).sqlalchemy_url())


@contextmanager
def held_offsets(cfg: PipelineConfig) -> Iterator[Any]:
    """sink_offsets(cfg) for the block (None when the pipeline is not exactly-once), closed after."""
    held = sink_offsets(cfg)
    try:
        yield held
    finally:
        if held is not None:
            held.close()


def stored_offsets(cfg: PipelineConfig, store: StateStore) -> dict[TopicPartition, int]:
    """Where the next window starts. Exactly-once: the sink's offsets are the authority; the offset
    store is brought up to them when a window's sink transaction committed and its ledger commit did
    not happen (the process died between the two). A partition the sink has no offset for yet (a
    pipeline switched to exactly-once) starts from the store's."""
    stored = store.offsets.load(cfg.name)
    with held_offsets(cfg) as held:
        if held is None:
            return stored
        in_sink = held.load(cfg.name)
    behind = {tp: (o, run) for tp, (o, run) in in_sink.items() if stored.get(tp) != o}
    if behind:
        log.warning("pipeline %s: the MySQL sink %r holds offsets the offset store does not (%s): taking them; the "
                    "windows that committed them in the sink did not reach their ledger commit", cfg.name,
                    cfg.offset_store.sink, ", ".join(f"{t}[{p}] {stored.get((t, p))} -> {o} (run {run})"
                                                     for (t, p), (o, run) in sorted(behind.items())))
        store.offsets.mirror(cfg.name, behind)
    return {**stored, **{tp: o for tp, (o, _run) in in_sink.items()}}


def backlog(cfg: PipelineConfig, store: StateStore) -> dict[TopicPartition, int]:
    """Per partition, the records the next window would find: the true end (read to EOF) minus the
    stored offset, or minus initial_offsets' start for a partition with none. Reads ends only: no
    offset is committed and no consumer group moves."""
    from connectors.kafka.reader import discover  # noqa: PLC0415

    stored = stored_offsets(cfg, store)
    waiting = {}
    for s in discover(consumer_conf(cfg), source_topics(cfg), timeout=10):
        start = stored.get((s.topic, s.partition))
        if start is None:
            start = s.low if cfg.initial_offsets == "earliest" else s.end
        waiting[(s.topic, s.partition)] = max(0, s.end - start)
    return waiting


def set_offsets(cfg: PipelineConfig, store: StateStore, offsets: Mapping[TopicPartition, int | None], by: str) -> None:
    """Operator reset of some partitions (None: forget), in the offset store and, exactly-once, in the sink."""
    values = {tp: o for tp, o in offsets.items() if o is not None}
    forget = [tp for tp, o in offsets.items() if o is None]
    with held_offsets(cfg) as held:
        if held is not None:
            held.set(cfg.name, values, by)
            if forget:
                held.forget(cfg.name, forget)
    if values:
        store.offsets.set(cfg.name, values, run_id=by)
    if forget:
        store.offsets.forget(cfg.name, forget)


def clear_offsets(cfg: PipelineConfig, store: StateStore) -> None:
    """Forget every stored offset of the pipeline (the next window starts from initial_offsets)."""
    with held_offsets(cfg) as held:
        if held is not None:
            held.forget(cfg.name)
    store.offsets.clear(cfg.name)


def kafka_client(cfg: PipelineConfig) -> dict[str, Any]:
    return get_connection(cfg.source.kafka_conn_id).kafka_config()


def source_topics(cfg: PipelineConfig) -> Any:
    """The topics to discover: the list, or the pattern of source.topics_regex (matched anew at every
    plan, so topics created later are read from initial_offsets)."""
    from connectors.kafka.reader import TopicPattern  # noqa: PLC0415

    return list(cfg.source.topics) if cfg.source.topics else TopicPattern(cfg.source.topics_regex or "")


def consumer_conf(cfg: PipelineConfig) -> dict[str, Any]:
    from connectors.kafka.client import consumer_config  # noqa: PLC0415 - confluent-kafka import

    return consumer_config(kafka_client(cfg), cfg.group_id, dict(cfg.source.consumer_config))


def sink_target(sink: Any) -> Any:
    """Resolve a sink's connection on the driver (executors need no Airflow)."""
    from spark_jobs.sinks import SinkTarget  # noqa: PLC0415

    conn = get_connection(sink.conn_id)
    if sink.type == "elasticsearch":
        auth = (conn.login, conn.password or "") if conn.login else None
        return SinkTarget(sink, conn.http_url(), auth)
    return SinkTarget(sink, conn.sqlalchemy_url())
