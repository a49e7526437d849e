"""A pipeline's Airflow Assets: its Kafka topics (inlets) and its sink targets (outlets).

Every MySQL table and Elasticsearch index a pipeline writes is an Asset, named by a URI in the
convention of Airflow's providers:

- ``mysql://host:port/database/table`` (the mysql provider's form);
- ``elasticsearch://host:port/index``;
- ``kafka://bootstrap-server/topic`` (the apache-kafka provider's form), for the topics read.

A window's commit task emits one asset event per target that changed, through the pipeline's
AssetAlias ``cdcflow:<pipeline>`` (an alias, because a template such as ``{source.table}`` only
knows its tables at run time, and because a declared outlet would get an event on every success,
even for an empty window). The events are emitted when the commit task succeeds, so after the
offsets are committed: never for a failed window, and never for a window that changed nothing.
Each event's ``extra`` says what the window did to that target (:func:`window_events`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cdcflow.config import TABLE_PLACEHOLDERS, PipelineConfig
from cdcflow.connections import get_connection
from cdcflow.errors import ConfigError
from cdcflow.state import WindowPlan

log = logging.getLogger("cdcflow.assets")


def alias_name(pipeline: str) -> str:
    return f"cdcflow:{pipeline}"


def _hostport(host: str | None, port: int | None, default_port: int) -> str:
    return f"{host or 'localhost'}:{port or default_port}"


def _sink_uri(cfg: PipelineConfig, sink_name: str) -> str:
    """Where the sink ``sink_name`` writes, without the table or index (its connection, resolved once)."""
    sink = next(s for s in cfg.sinks if s.name == sink_name)
    conn = get_connection(sink.conn_id)
    if sink.type == "elasticsearch":
        return f"elasticsearch://{_hostport(conn.host, conn.port, 9200)}"
    return f"mysql://{_hostport(conn.host, conn.port, 3306)}/{conn.schema or ''}"


def target_uri(cfg: PipelineConfig, sink_name: str, target: str) -> str:
    """The URI of one table (MySQL) or index (Elasticsearch) of the sink ``sink_name``."""
    return f"{_sink_uri(cfg, sink_name)}/{target}"


def topic_uri(cfg: PipelineConfig, topic: str) -> str:
    servers = str(get_connection(cfg.source.kafka_conn_id).kafka_config().get("bootstrap.servers", "kafka"))
    return f"kafka://{servers.split(',')[0].strip()}/{topic}"


def composed_inlets(cfg: PipelineConfig, sink_name: str) -> list[str]:
    """The URIs of the tables a composed index (``document:``) is built from: its inlets."""
    from connectors.elasticsearch.compose_config import keeper_of  # noqa: PLC0415

    sink = next(s for s in cfg.sinks if s.name == sink_name)
    document = getattr(sink, "document", None)
    if document is None:
        return []
    keeper = keeper_of(cfg.sinks, sink)
    return [target_uri(cfg, keeper.name, table) for table in document.tables()]


def declared(cfg: PipelineConfig) -> tuple[list[str], list[str]]:
    """At DAG parse: the inlets (the URIs of the topics, listed ones: a topics_regex has none yet; and
    the tables of a composed index) and the outlets (the sink targets whose name has no template).
    ([], []) when a connection cannot be resolved here: the events still carry their URIs, and Airflow
    registers an asset with its first event."""
    try:
        topics = [topic_uri(cfg, t) for t in cfg.source.topics]
        topics += [uri for sink in cfg.sinks for uri in composed_inlets(cfg, sink.name) if uri not in topics]
        targets = []
        for sink in cfg.sinks:
            name = sink.table if sink.type == "mysql" else sink.index  # type: ignore[union-attr]
            if not any(p in name for p in (*TABLE_PLACEHOLDERS, "{")):
                targets.append(target_uri(cfg, sink.name, name))
    except ConfigError as exc:
        log.warning("pipeline %s: its assets are declared at its first window (%s)", cfg.name, exc)
        return [], []
    return topics, targets


@dataclass(frozen=True)
class AssetEvent:
    uri: str
    extra: dict[str, Any]


def _iso(ms: int | None) -> str | None:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z") if ms is not None else None


def window_events(cfg: PipelineConfig, window: WindowPlan) -> list[AssetEvent]:
    """One event per sink target the window changed (rows upserted or deleted), from the window's
    statistics in the ledger; none for an empty window or one whose every change was stale."""
    stats = window.stats or {}
    offsets = {f"{p.topic}[{p.partition}]": [p.start, p.end if p.end is not None else p.start]
               for p in window.partitions if (p.records or 0) > 0}
    record_time = stats.get("record_time") or [None, None]
    events = []
    for sink_name, sink_stats in sorted((stats.get("sinks") or {}).items()):
        changed = {t: c for t, c in (sink_stats.get("changed") or {}).items() if any(c)}
        base = _sink_uri(cfg, sink_name) if changed else ""  # a connection lookup per sink, not per table
        for target, (upserted, deleted) in sorted(changed.items()):
            events.append(AssetEvent(f"{base}/{target}", {
                "pipeline": cfg.name, "run_id": window.run_id, "sink": sink_name, "target": target,
                "offsets": offsets, "upserted": upserted, "deleted": deleted,
                # the Kafka timestamps of the window's first and last record (for Debezium: when each
                # change was produced, a little after source.ts_ms)
                "record_time": {"from": _iso(record_time[0]), "to": _iso(record_time[1])},
            }))
    for sink_name, figures in sorted((stats.get("documents") or {}).items()):
        if not (figures.get("upserted") or figures.get("deleted")):
            continue
        sink = next(s for s in cfg.sinks if s.name == sink_name)
        index = sink.index  # type: ignore[union-attr]
        events.append(AssetEvent(target_uri(cfg, sink_name, index), {
            "pipeline": cfg.name, "run_id": window.run_id, "sink": sink_name, "target": index,
            "offsets": offsets, "upserted": figures["upserted"], "deleted": figures["deleted"],
            "record_time": {"from": _iso(record_time[0]), "to": _iso(record_time[1])},
            # a composed index (docs/composed-documents.md): the tables its documents are built from
            "inlets": composed_inlets(cfg, sink_name), "version": figures.get("version"),
            "backlog": figures.get("backlog", 0)}))
    return events
