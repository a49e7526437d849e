"""The window's first stage, on the driver before any read (spark_jobs/window.py): a chain the window
cannot apply refused, and the targets the read tasks write themselves made ready (issue 25: no
checkpoint of their rows, no shuffle, and a task's writes overlap the next task's read), the tables
and indices from the record schema among them (issue 41). The others are made ready after the read
(spark_jobs/write/prepare.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from connectors import faults
from connectors.errors import ConfigError
from connectors.mysql.config import MySqlSinkConfig
from spark_jobs import chains
from spark_jobs.job import WindowJob
from spark_jobs.sink_targets import SinkTarget, is_dynamic, is_history, is_routed, is_static, mapped_by_records
from spark_jobs.write.prepare import mapped_index
from spark_jobs.write.sinks import SINK_TYPES, TableGroup, derive_from_connect, prepare_derived


def before_read(job: WindowJob) -> tuple[dict[str, SinkTarget], list[dict[str, Any]]]:
    """The window's first stage, on the driver before any read: a chain it cannot apply refused
    (:func:`refuse_unserved`), the targets the read tasks write themselves made ready
    (:func:`early_targets`), and with them the tables and indices from the record schema
    (:func:`schema_tables`). Returns those targets by sink name, and the schema changes run."""
    refuse_unserved(job)
    early = early_targets(job)
    return early, schema_tables(job, early)


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
