"""Which targets the per-partition path serves, and their tables and indices made ready.

On the driver, after the read and before any write: the static targets' tables created or evolved,
each dynamic sink's tables derived from the row schemas the read tasks saw, Elasticsearch mappings
from those schemas, and ``truncate: apply``'s TRUNCATEs run.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from connectors import faults
from connectors.elasticsearch.config import ElasticsearchSinkConfig
from connectors.errors import ConfigError
from connectors.elasticsearch.sink import ElasticsearchSink
from connectors.mysql.config import MySqlSinkConfig
from spark_jobs import chains
from spark_jobs.job import WindowJob, WindowResult, smaller
from spark_jobs.sink_targets import SinkTarget, is_dynamic, is_history, is_routed, is_static, mapped_by_records
from spark_jobs.write.sinks import (
    SINK_TYPES,
    TableGroup,
    derive_from_connect,
    es_mappings,
    prepare_derived,
    prepare_tables,
)


def refuse_unserved(job: WindowJob) -> None:
    """A chain the window cannot apply fails the window before any read, naming the step and why.
    cdcflow/config.py refuses such a chain when the config is loaded; a job built otherwise (a test,
    a job file from an older release) is refused here."""
    why = chains.unserved(job) if job.transforms else None
    if why is not None:
        raise ConfigError(f"transforms: {why}")


def early_targets(job: WindowJob) -> dict[str, SinkTarget]:
    """The targets the read tasks write themselves, prepared now, before the read (issue 25: no
    checkpoint of their rows, no shuffle, and a task's writes overlap the next task's read): static
    targets that need nothing from the read (MySQL tables of declared columns; indices, of which a
    task hands on the documents whose records carry a schema when the index's mapping comes from the
    records: :func:`mapped_by_records`), but the exactly-once sink. Only in windows where nothing
    must be decided for the whole window before the first write: no ``errors.max_dead_letters`` (the
    breaker), no ``truncate: apply``; and of Debezium's records of one topic, the case measured and
    tested. Two tasks may still write one key (a key's changes in two partitions): their upserts
    keep the newer, and a table's deletes are written by the driver after them
    (``project.mysql_deletes``). ``CDCFLOW_WINDOW_PATH=staged`` turns it off. Behind a Spark stage
    (transform/spark_stage.py) the tasks after it write the MySQL tables of declared columns (an index's
    documents come from what Spark left, the record schema dropped: handed on)."""
    if not early_window(job, staged_too=True):
        return {}
    staged = chains.staged(job.transforms)
    early = {}
    for target in job.sinks:
        if is_static(target) and target.config.name != job.offsets_sink and not is_history(target) and not (
                staged and not isinstance(target.config, MySqlSinkConfig)):
            SINK_TYPES[target.config.type].prepare(target)
            early[target.config.name] = target
    return early


def early_window(job: WindowJob, staged_too: bool = False) -> bool:
    """A window whose read tasks may write (:func:`early_targets`); ``staged_too``: or, with a Spark
    stage, the tasks after it."""
    return not (os.environ.get("CDCFLOW_WINDOW_PATH") == "staged" or job.max_dead_letters is not None
                or (chains.staged(job.transforms) and not staged_too)
                or job.truncate == "apply" or len({r.topic for r in job.ranges}) != 1
                or job.source_format != "debezium")


PEEK_RECORDS = 200  # per range: the records read before the window for the schemas of its first changes


def schema_tables(job: WindowJob, early: dict[str, SinkTarget],
                  peek: Callable[[WindowJob], list[tuple[str, str, int]]] | None = None) -> list[dict[str, Any]]:
    """Tables created from the record schema, and indices mapped from it, that the read tasks write
    themselves too (issue 41), added to ``early``: a MySQL sink of one table (not routed) without
    declared columns, and an index of ``early`` without a declared mapping (not routed by
    ``{topic}``), in a window of :func:`early_window`. The record schemas of each range's first
    records (``peek``: (schema_id, row_schema, version), :func:`first_schemas`) make the table or the
    index ready before the read, as the window would after it (created, or changed by
    ``schema_changes``): the target then has columns (a table) or mappings (an index), and
    ``schema_ids``, the schemas it was made for. A read task writes the changes of those schemas,
    and deletes (a tombstone has no schema); a change of another schema (the source table changed
    within the window) goes the staged way: the window makes the table or the index ready for it
    after the read, then writes it (``project.sort_out``). Returns the schema changes run."""
    tables = [t for t in job.sinks if is_dynamic(t) and isinstance(t.config, MySqlSinkConfig)
              and not t.config.columns and not is_routed(t.config) and not is_history(t)
              and not chains.nested(job.transforms)  # described from the images (row_schemas)
              and t.config.name != job.offsets_sink]  # exactly-once: written last, with the offsets
    indices = [t for t in early.values() if mapped_by_records(t) and "{topic}" not in t.config.index]
    if not (tables or indices) or not early_window(job):
        return []
    seen = sorted((peek or first_schemas)(job), key=lambda s: s[2])
    descriptions = list(dict.fromkeys(text for _id, text, _v in seen))  # first by version
    if not descriptions:  # the first records carry no schema: the window finds them (staged)
        return []
    ids = tuple(sorted({schema_id for schema_id, _text, _v in seen}))
    changes: list[dict[str, Any]] = []
    for target in tables:
        table = target.config.table
        eff = derive_from_connect(target, table, descriptions)
        group = TableGroup(target, {table: replace(target, config=eff)}, {table: descriptions})
        group, found = prepare_derived(group, job.schema_changes, dict(job.schema_decisions), job.pipeline)
        changes += found
        early[target.config.name] = replace(group.tables[table], schema_ids=ids)
    for target in indices:
        target, found = mapped_index(job, target, {None: descriptions})
        changes += found
        early[target.config.name] = replace(target, schema_ids=ids)
    if changes:
        faults.checkpoint("after_ddl", job.faults)
    return changes


def first_schemas(job: WindowJob, limit: int | None = None) -> list[tuple[str, str, int]]:
    """(schema_id, row_schema, version) of the record schemas among each range's first ``limit``
    records (:data:`PEEK_RECORDS`), read and decoded on the driver as a read task would (spark_jobs/read/decode.py),
    and described as the chain leaves them (``chains.described``), as a read task's changes are."""
    limit = limit or PEEK_RECORDS
    from connectors.kafka.reader import KafkaRangeReader  # noqa: PLC0415
    from spark_jobs.read.decode import change_decoder  # noqa: PLC0415

    ranges = [replace(r, max_records=min(r.max_records, limit), stop_on_eof=True) for r in job.ranges]
    decoder = change_decoder(job)
    found = []
    for raw in KafkaRangeReader(job.consumer_conf).read_ranges(ranges):
        decoded = decoder.decode_batch(raw)
        for schema_id, text, version in zip(*(decoded.column(c).to_pylist() for c in (
                "schema_id", "row_schema", "version")), strict=True):
            if schema_id is not None and text is not None:
                text = chains.described(job.transforms, text) if job.transforms else text
                found.append((schema_id, text, version or 0))
    return found


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
