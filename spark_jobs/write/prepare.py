"""The targets the write tasks write, made ready (spark_jobs/write/early.py made the read tasks' own
ready before the read).

On the driver, after the read and the dead letters, before any write: the static targets' tables
created or evolved, each dynamic sink's tables derived from the row schemas the read tasks saw,
Elasticsearch mappings from those schemas, and ``truncate: apply``'s TRUNCATEs run.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from connectors import faults
from connectors.elasticsearch.config import ElasticsearchSinkConfig
from connectors.elasticsearch.sink import ElasticsearchSink
from connectors.mysql.config import MySqlSinkConfig
from spark_jobs.job import WindowJob, WindowResult, smaller
from spark_jobs.sink_targets import SinkTarget, is_static
from spark_jobs.write.sinks import SINK_TYPES, TableGroup, derive_from_connect, es_mappings, prepare_derived, prepare_tables


@dataclass(frozen=True)
class Targets:
    """What the write tasks write: the static targets by sink name, the dynamic sinks' table groups."""

    static: dict[str, SinkTarget]
    groups: dict[str, TableGroup]
    schema_changes: list[dict[str, Any]] = field(default_factory=list)  # run (or ignored) before the writes


def schemas_seen(tallies: list[dict[str, Any]], sink: str) -> dict[Any, list[str]]:
    """Per table (or route), the row schemas of its changes in this window, first by version
    (``sinks.schemas_by``, merged over the read tasks)."""
    best: dict[tuple[Any, Any], Any] = {}
    for info in tallies:
        for group, schema, version in info.get("schemas", {}).get(sink, []):
            k = (group, schema)
            best[k] = version if k not in best else smaller(best[k], version)
    described: dict[Any, list[str]] = {}
    for (group, schema), _v in sorted(best.items(), key=lambda kv: (kv[1] is None, kv[1] or 0)):
        described.setdefault(group, [])
        if schema is not None and schema not in described[group]:
            described[group].append(schema)
    return described


def make_ready(job: WindowJob, tallies: list[dict[str, Any]], result: WindowResult) -> Targets:
    """The targets ready for the write tasks (:func:`ready_targets`), the schema changes and ``truncate:
    apply``'s TRUNCATEs run and recorded in ``result``."""
    ready = ready_targets(job, tallies)
    result.schema_changes += ready.schema_changes
    if job.truncate == "apply":
        result.truncates_ignored = 0
        apply_truncates(job, ready, tallies, result)
    return ready


def ready_targets(job: WindowJob, tallies: list[dict[str, Any]]) -> Targets:
    """On the driver, before any write: the static targets' tables created or evolved, each dynamic
    sink's tables derived from the row schemas the read tasks saw and created, and each Elasticsearch
    index without a declared mapping given one from those schemas."""
    static: dict[str, SinkTarget] = {}
    groups: dict[str, TableGroup] = {}
    changes: list[dict[str, Any]] = []
    for target in job.sinks:
        cfg = target.config
        if is_static(target):
            if isinstance(cfg, ElasticsearchSinkConfig) and cfg.mapping is None:
                target, found = mapped_index(job, target, schemas_seen(tallies, cfg.name))
                changes += found
            SINK_TYPES[cfg.type].prepare(target)
            static[cfg.name] = target
            continue
        assert isinstance(cfg, MySqlSinkConfig)
        described = schemas_seen(tallies, cfg.name)
        tables = {}
        for table, descriptions in sorted(described.items()):
            eff = (cfg.model_copy(update={"table": table}) if cfg.columns
                   else derive_from_connect(target, table, descriptions))
            tables[table] = replace(target, config=eff)
        group = TableGroup(target, tables, described)
        if cfg.columns:
            prepare_tables(list(tables.values()))
        else:  # tables from the record schema: created, or changed by the schema_changes policy
            group, found = prepare_derived(group, job.schema_changes, dict(job.schema_decisions), job.pipeline)
            changes += found
            if found:
                faults.checkpoint("after_ddl", job.faults)
        groups[cfg.name] = group
    return Targets(static, groups, changes)


def mapped_index(job: WindowJob, target: SinkTarget,
                 by_route: dict[Any, list[str]]) -> tuple[SinkTarget, list[dict[str, Any]]]:
    """An index without a declared mapping given the mapping of the record schemas ``by_route``
    (``sinks.es_mappings``); an index that exists gets their new fields as ``schema_changes`` says,
    and the fields it left out are written without (``left_out``). Returns the schema changes run."""
    cfg = target.config
    assert isinstance(cfg, ElasticsearchSinkConfig)
    target = replace(target, mappings=tuple(es_mappings(cfg, by_route)))
    if not target.mappings:
        return target, []
    with opened(target) as sink:  # indices that exist get the new fields (schema_changes)
        found = sink.evolve_mappings(job.schema_changes, dict(job.schema_decisions), job.pipeline)
    left_out: dict[str, list[str]] = {}
    for c in found:
        if c["change"] == "add" and not c["applied"]:
            left_out.setdefault(c["table"], []).append(c["column"])
    return replace(target, left_out=tuple((i, tuple(f)) for i, f in sorted(left_out.items()))), found


@contextmanager
def opened(target: SinkTarget) -> Iterator[ElasticsearchSink]:
    """An Elasticsearch sink opened on the driver, for what runs once per window before the writes
    (its TRUNCATE marks, its mappings: what only Elasticsearch sinks do)."""
    sink = SINK_TYPES[target.config.type].open(target)
    assert isinstance(sink, ElasticsearchSink), f"sink {target.config.name!r} is not an Elasticsearch sink"
    sink.open()
    try:
        yield sink
    finally:
        sink.close()


def apply_truncates(job: WindowJob, targets: Targets, tallies: list[dict[str, Any]],
                     result: WindowResult) -> None:
    """On the driver, after the tables are prepared and before any row is written: each TRUNCATE the
    read tasks found, once per table or index at its newest version (MySQL:
    connectors/mysql/sink.truncate_tables; Elasticsearch: ``ElasticsearchSink.truncate``). The
    sinks then leave out every change older than it (the table's or index's TRUNCATE mark)."""
    from connectors.mysql.sink import truncate_tables  # noqa: PLC0415

    merged: dict[str, dict[str, int]] = {}
    for info in tallies:
        for sink, tables in info.get("truncates", {}).items():
            for table, version in tables.items():
                merged.setdefault(sink, {})[table] = max(version, merged.get(sink, {}).get(table, version))
    for target in job.sinks:
        name = target.config.name
        if name not in merged:
            continue
        if isinstance(target.config, ElasticsearchSinkConfig):
            with opened(target) as sink:
                deleted = sink.truncate(merged[name])
            unit = "documents"
        else:
            history = target.config if target.config.mode == "history" else None
            deleted = truncate_tables(target.url, merged[name], name, history)
            unit = "rows" if history is None else "versions closed"
        result.truncates += [{"sink": name, "table": t, "version": v, "deleted": deleted[t], "unit": unit}
                             for t, v in sorted(merged[name].items())]
