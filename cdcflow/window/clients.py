"""What a pipeline's config resolves to on the driver: its state store, the exactly-once sink's
offsets, its Kafka settings and topics, its sink targets; and its stored offsets, read and set
through them (exactly-once: the MySQL sink's offsets are the authority).

A window resolves them once (:class:`Clients`): each connection lookup may be a call to Airflow's
connection store (a task asks the API server), and one window needs the Kafka connection up to five
times and each sink's twice. ``run_window`` makes one for its three steps; each Airflow task (plan,
process, commit) makes its own. The functions after the class serve one-off callers (the CLI, the
control plane).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import cached_property
from typing import Any

from cdcflow.config import PipelineConfig
from cdcflow.connections import ConnectionInfo, get_connection
from cdcflow.state import StateStore, TopicPartition, default_store_url

log = logging.getLogger("cdcflow.runner")


class Clients:
    """A pipeline's connections, each resolved once, and what is built from them."""

    def __init__(self, cfg: PipelineConfig) -> None:
        self.cfg = cfg
        self._connections: dict[str, ConnectionInfo] = {}

    def connection(self, conn_id: str) -> ConnectionInfo:
        if conn_id not in self._connections:
            self._connections[conn_id] = get_connection(conn_id)
        return self._connections[conn_id]

    @cached_property
    def store_url(self) -> str:
        conn_id = self.cfg.offset_store.conn_id
        return self.connection(conn_id).sqlalchemy_url() if conn_id else default_store_url()

    def store(self) -> StateStore:
        return StateStore(self.store_url)

    @cached_property
    def kafka(self) -> dict[str, Any]:
        """The Kafka client settings of source.kafka_conn_id."""
        return self.connection(self.cfg.source.kafka_conn_id).kafka_config()

    @cached_property
    def consumer(self) -> dict[str, Any]:
        from connectors.kafka.client import consumer_config  # noqa: PLC0415 - confluent-kafka import

        return consumer_config(self.kafka, self.cfg.group_id, dict(self.cfg.source.consumer_config))

    @cached_property
    def producer(self) -> dict[str, Any]:
        from connectors.kafka.client import producer_config  # noqa: PLC0415 - confluent-kafka import

        return producer_config(self.kafka)

    @cached_property
    def targets(self) -> tuple[Any, ...]:
        """Each sink's SinkTarget (its connection resolved: executors need no Airflow), in config order."""
        return tuple(self.target(sink) for sink in self.cfg.sinks)

    @cached_property
    def documents(self) -> tuple[tuple[Any, Any], ...]:
        """Each composed index (an Elasticsearch sink with ``document:``) and the MySQL sink keeping its
        tables, both resolved."""
        from connectors.elasticsearch.compose_config import keeper_of  # noqa: PLC0415

        return tuple((self.target(s), self.target(keeper_of(self.cfg.sinks, s))) for s in self.cfg.sinks
                     if getattr(s, "document", None) is not None)

    def target(self, sink: Any) -> Any:
        from spark_jobs.sink_targets import SinkTarget  # noqa: PLC0415

        conn = self.connection(sink.conn_id)
        if sink.type == "elasticsearch":
            auth = (conn.login, conn.password or "") if conn.login else None
            return SinkTarget(sink, conn.http_url(), auth)
        return SinkTarget(sink, conn.sqlalchemy_url())

    @cached_property
    def registry(self) -> Any:
        """The Schema Registry of a registry converter (source.schema_registry), resolved for the read
        tasks; None when the pipeline reads no registry-framed records."""
        conf = self.cfg.source.schema_registry
        if conf is None:
            return None
        from connectors.registry.client import RegistrySettings  # noqa: PLC0415

        conn = self.connection(conf.conn_id)
        return RegistrySettings(conn.registry_url(), conf.conn_id, conn.login, conn.password, conn.bearer_token(),
                                conf.timeout)

    def sink_offsets(self) -> Any:
        """Exactly-once (offset_store.sink): the offsets in that MySQL sink's database, else None."""
        if self.cfg.offset_store.sink is None:
            return None
        from connectors.mysql.offsets import SinkOffsets  # noqa: PLC0415

        sink = next(s for s in self.cfg.sinks if s.name == self.cfg.offset_store.sink)
        return SinkOffsets(self.connection(sink.conn_id).sqlalchemy_url())

    @contextmanager
    def held_offsets(self) -> Iterator[Any]:
        """sink_offsets() for the block (None when the pipeline is not exactly-once), closed after."""
        held = self.sink_offsets()
        try:
            yield held
        finally:
            if held is not None:
                held.close()


def offset_store_url(cfg: PipelineConfig) -> str:
    return Clients(cfg).store_url


def offset_store(cfg: PipelineConfig) -> StateStore:
    return Clients(cfg).store()


def held_offsets(cfg: PipelineConfig) -> Any:
    return Clients(cfg).held_offsets()


def stored_offsets(cfg: PipelineConfig, store: StateStore,
                   clients: Clients | None = None) -> dict[TopicPartition, int]:
    """Where the next window starts. Exactly-once: the sink's offsets are the authority; the offset
    store is brought up to them when a window's sink transaction committed and its ledger commit did
    not happen (the process died between the two). A partition the sink has no offset for yet (a
    pipeline switched to exactly-once) starts from the store's."""
    stored = store.offsets.load(cfg.name)
    with (clients or Clients(cfg)).held_offsets() as held:
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
    return Clients(cfg).kafka


def source_topics(cfg: PipelineConfig) -> Any:
    """The topics to discover: the list, or the pattern of source.topics_regex (matched anew at every
    plan, so topics created later are read from initial_offsets)."""
    from connectors.kafka.reader import TopicPattern  # noqa: PLC0415

    return list(cfg.source.topics) if cfg.source.topics else TopicPattern(cfg.source.topics_regex or "")


def consumer_conf(cfg: PipelineConfig) -> dict[str, Any]:
    return Clients(cfg).consumer
