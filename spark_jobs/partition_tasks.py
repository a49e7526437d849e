"""The default window path: one Spark task per partition range keeps the records in its Python
worker from the read to the write (issue 25).

The older path (``cdc_window.run_spark_path``, still the one for pipelines with transforms) handed every
record to the JVM: Arrow rows converted to Spark rows and back, a checkpoint of every row, a shuffle
and a sort to find the last change per key. Here the JVM holds only a few large binary values:

1. **read task** (one per partition range, or a few ranges one after another in a small window):
   reads with confluent-kafka, decodes by the pipeline's ``source.format`` (connectors/formats.py),
   applies ``truncate``, and per sink target whose columns are known before the window (declared
   MySQL columns, Elasticsearch) projects the changes (spark_jobs/tables.py, :func:`project_documents`)
   and keeps the last change per key (``tables.latest_rows``), all in Arrow. What cannot be processed
   becomes a dead-letter row. The task emits Arrow IPC blobs (one row each) and one tally row: per
   partition its end, its record count and time range, the dead letters per stage, and the row
   schemas of the tables and indices whose columns or mappings come from the records.
2. The driver checkpoints that output (so no later stage re-reads Kafka), writes the read range to
   the ledger, fails a window past ``errors.tolerance: none``, sends the dead letters (one task) and
   applies the breaker (``errors.max_dead_letters``), all before any sink is written. It then creates
   or evolves the tables and indices named by the tally.
3. **write tasks** get the blobs by a hash of the key (of the table, for a routed sink), so all the
   rows of a key, from every read task, meet in one write task, which keeps the last change per key
   again and writes its targets at the same time (threads). Two tasks never write one key: a delete
   and an older upsert of a key, written at once, could race past the tombstone. The MySQL sink of
   ``offset_store.sink`` (exactly-once) is written last by one task, in one transaction with the
   window's offsets, once every other sink succeeded.

Debezium keys records by primary key, so a key's changes usually sit in one read task; the second
reduction is for the others (several topics into one table, a primary key that is not the Kafka
key), and resolves a tombstone whose delete was read by another task.
"""

from __future__ import annotations

import json
import os
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdcflow import faults
from cdcflow.config import ElasticsearchSinkConfig, MySqlSinkConfig
from connectors import images
from connectors.base import SinkStats
from connectors.changes import TRUNCATE
from connectors.kafka.dlq import DeadLetterReporter
from spark_jobs import cdc_window as cw
from spark_jobs.sinks import (
    SINK_TYPES,
    SinkTarget,
    TableGroup,
    derive_from_connect,
    es_mappings,
    is_routed,
    prepare_derived,
    prepare_tables,
)
from spark_jobs.tables import RAW_COLUMNS, TABLE_COLUMN, key_columns, latest_rows, project_rows

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from connectors.elasticsearch.sink import ElasticsearchSink

    from spark_jobs.deadline import Deadline
    from spark_jobs.session import Checkpoints

PACKED_SCHEMA = "task int, bucket int, kind string, target string, blob binary, info string"
TALLY, BAD, ROWS, CHANGES = "tally", "bad", "rows", "changes"  # the kinds of packed row
BLOB_ROWS = 20_000  # rows per blob: a Spark row holds one blob, whatever the window's size
BAD_COLUMNS = [*RAW_COLUMNS, "error_stage", "error_message", "component"]
_ROUTE = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,248}$"  # spark_jobs/records.ROUTE, in RE2
_RESERVED = r"^(?i)cdcflow[_-]"


# -- which sinks take this path ----------------------------------------------------------------------
def _static(target: SinkTarget) -> bool:
    """A target whose columns are known before the window: projected and reduced in the read task."""
    cfg = target.config
    if isinstance(cfg, ElasticsearchSinkConfig):
        return True
    return bool(cfg.columns) and not is_routed(cfg) and cfg.pk_mode != "kafka"


def _dynamic(target: SinkTarget, job: cw.WindowJob) -> bool:
    """A MySQL sink whose tables or columns come from the records (spark_jobs/tables.py)."""
    cfg = target.config
    return (isinstance(cfg, MySqlSinkConfig) and cfg.pk_mode != "kafka" and cfg.name != job.offsets_sink
            and not _static(target))


def eligible(job: cw.WindowJob) -> bool:
    """This path serves pipelines without transforms whose every sink is static or dynamic; the others
    (pk_mode kafka, an exactly-once sink without declared columns) take ``cdc_window.run_spark_path``, as does
    every window when ``CDCFLOW_WINDOW_PATH=spark`` is set in the driver's environment."""
    if os.environ.get("CDCFLOW_WINDOW_PATH") == "spark":  # the older path, for comparisons (bench/run.py)
        return False
    return not job.transforms and all(_static(t) or _dynamic(t, job) for t in job.sinks)


# -- blobs -------------------------------------------------------------------------------------------
def _pack(table: pa.Table) -> Iterator[bytes]:
    for start in range(0, max(table.num_rows, 1), BLOB_ROWS):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table.slice(start, BLOB_ROWS))
        yield sink.getvalue().to_pybytes()


def _unpack(blobs: list[bytes]) -> pa.Table:
    return images.concat_tables([pa.ipc.open_stream(b).read_all() for b in blobs])


def _packed(task: int, kind: str, target: str, blob: bytes | None = None, info: Any = None,
            bucket: int = 0) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"task": [task], "bucket": [bucket], "kind": [kind], "target": [target],
                                       "blob": [blob], "info": [None if info is None else json.dumps(info)]},
                                      schema=pa.schema([("task", pa.int32()), ("bucket", pa.int32()),
                                                        ("kind", pa.string()),
                                                        ("target", pa.string()), ("blob", pa.binary()),
                                                        ("info", pa.string())]))


def buckets(rows: pa.Table, columns: list[str], n: int) -> np.ndarray:
    """The write task of each row: a hash of its key (``columns``) modulo ``n``, the same in every
    read task (CRC-32 of the key's text: Python's own str hash differs between processes)."""
    if n <= 1 or not columns or not rows.num_rows:
        return np.zeros(rows.num_rows, dtype=np.int64)
    parts = [pc.cast(rows.column(c), pa.string()) for c in columns]
    joined = parts[0] if len(parts) == 1 else pc.binary_join_element_wise(*parts, "\x1f")
    return np.fromiter((zlib.crc32(k.encode()) if k is not None else 0 for k in joined.to_pylist()),
                       dtype=np.int64, count=rows.num_rows) % n


def _bucketed(task: int, kind: str, target: str, rows: pa.Table, columns: list[str] | None,
              n: int) -> list[pa.RecordBatch]:
    """``rows`` packed per write task: all the rows of one key (``columns``) go to one write task, so
    that two tasks never write one key at once (a delete and an older upsert of a key, written by two
    tasks, could race past the tombstone). Without key columns, the rows stay with their read task."""
    if not rows.num_rows:
        return []
    if not columns or n <= 1:
        return [_packed(task, kind, target, blob, bucket=task % max(n, 1)) for blob in _pack(rows)]
    which = buckets(rows, columns, n)
    out = []
    for b in np.unique(which).tolist():
        out += [_packed(task, kind, target, blob, bucket=b) for blob in _pack(rows.filter(pa.array(which == b)))]
    return out


# -- Arrow projections ------------------------------------------------------------------------------
def _join(parts: list[pa.Array], sep: str, nulls: str) -> pa.Array:
    """``sep``-joined; nulls "skip" (Spark's concat_ws: nulls left out, "" when all are) or "emit_null".
    pyarrow's own skip mode drops the rows whose every part is null (pyarrow 21), so it is not used."""
    if nulls == "emit_null":
        return pc.binary_join_element_wise(*parts, sep)
    joined = parts[0]
    for part in parts[1:]:
        joined = pc.coalesce(pc.binary_join_element_wise(joined, part, sep), joined, part)
    return pc.fill_null(joined, "")


def _messages(errors: list[pa.Array], n: int) -> pa.Array:
    """The rows' error texts "; "-joined (nulls skipped), null where there is none."""
    message = pa.nulls(n, pa.string())
    for error in errors:
        message = pc.coalesce(pc.binary_join_element_wise(message, error, "; "), message, error)
    return message


def project_documents(rows: pa.Table, sink: ElasticsearchSinkConfig) -> pa.Table:
    """Valid changes -> RAW_COLUMNS + route, change_op, version, row_index, c_0 (index), c_1 (document
    id), c_2 (the document as JSON) and error_message: the rules of the Spark projection
    (``debezium.project_for_elasticsearch``)."""
    tombstone = pc.is_null(rows.column("value"))
    if sink.behavior_on_null_values == "ignore" or sink.key_ignore:
        rows = rows.filter(pc.invert(tombstone))
    if sink.key_ignore:  # no stable id: every change is its own document, deletes have no target
        rows = rows.filter(pc.equal(rows.column("change_op"), "upsert"))
    n = rows.num_rows
    tombstone = pc.is_null(rows.column("value"))
    errors: list[pa.Array] = []
    if sink.key_ignore:
        doc_id = _join([rows.column("topic"), pc.cast(rows.column("partition"), pa.string()),
                        pc.cast(rows.column("offset"), pa.string())], "+", "skip")
    else:
        image = images.Fields(rows.column("image"))  # its layout worked out once for every id field
        parts = [image.texts(f) for f in sink.id_fields]
        doc_id = _join(parts, "+", "skip")
        errors += [pc.if_else(pc.is_null(p), f"document id field '{f}' is missing or null", None)
                   for p, f in zip(parts, sink.id_fields, strict=True)]
    index = _index_names(rows, sink.index)
    if sink.behavior_on_null_values == "fail":
        errors.append(pc.if_else(tombstone, "null value (tombstone) with behavior_on_null_values: fail", None))
    base = [*RAW_COLUMNS, "route", "change_op", "version", "row_index"]
    return pa.table([*[rows.column(c) for c in base], index, doc_id, rows.column("image_json"), _messages(errors, n)],
                    names=[*base, "c_0", "c_1", "c_2", "error_message"])


def _index_names(rows: pa.Table, template: str) -> Any:
    """The index of each change: the template with {topic} filled by its route, lower-cased."""
    pieces = template.split("{topic}")
    index: Any = pa.array([pieces[0]] * rows.num_rows, pa.string())
    for piece in pieces[1:]:
        index = pc.binary_join_element_wise(index, pc.utf8_lower(rows.column("route")), piece, "")
    return index


def _table_names(rows: pa.Table, template: str) -> pa.Array:
    """The table of each change: the template with {topic}, {source.table}, {source.db} filled (null
    where the change lacks one): ``sinks.table_name``."""
    import re  # noqa: PLC0415

    columns = {"{topic}": "route", "{source.table}": "source_table", "{source.db}": "source_db"}
    parts = [p for p in re.split(r"(\{[^}]*\})", template) if p]
    arrays = [rows.column(columns[p]) if p in columns else pa.array([p] * rows.num_rows, pa.string()) for p in parts]
    return arrays[0] if len(arrays) == 1 else _join(arrays, "", "emit_null")


def _bad_route(names: pa.Array, template: str) -> pa.Array:
    """Why a change cannot go to a table (``sinks.unroutable`` / ``records.bad_route_reason``), or null."""
    shown = pc.utf8_slice_codeunits(names, 0, 80)
    no_field = f"the change has no source field for table {template!r} (source.table / source.db)"
    invalid = pc.binary_join_element_wise("the routed topic '", shown, "' cannot name a table or an index: expected "
                                          "1-249 of A-Z a-z 0-9 . _ -, not starting with '.'", "")
    reserved = pc.binary_join_element_wise("the routed topic '", shown, "' is reserved: names starting with cdcflow_ "
                                           "or cdcflow- are cdcflow's own tables and indices", "")
    ok_name = pc.fill_null(pc.match_substring_regex(names, _ROUTE), False)
    is_reserved = pc.fill_null(pc.match_substring_regex(names, _RESERVED), False)
    return pc.if_else(pc.is_null(names), no_field,
                      pc.if_else(pc.invert(ok_name), invalid, pc.if_else(is_reserved, reserved, None)))


def _schemas(rows: pa.Table, group: pa.Array) -> list[list[Any]]:
    """[group, row_schema, min version] of the changes that carry a row schema (``sinks.schemas_by``),
    and [group, None, min version] for the groups without one."""
    t = pa.table({"g": group, "s": rows.column("row_schema"), "v": rows.column("version")})
    agg = t.group_by(["g", "s"], use_threads=False).aggregate([("v", "min")])
    return [[g, s, v] for g, s, v in zip(agg.column("g").to_pylist(), agg.column("s").to_pylist(),
                                          agg.column("v_min").to_pylist(), strict=True)]


# -- the read task -----------------------------------------------------------------------------------
def _bad_rows(rows: pa.Table, stage: Any, message: Any, component: str) -> pa.Table:
    n = rows.num_rows
    return pa.table([*[rows.column(c) for c in RAW_COLUMNS],
                     stage if isinstance(stage, pa.Array | pa.ChunkedArray) else pa.array([stage] * n, pa.string()),
                     message, pa.array([component] * n, pa.string())], names=BAD_COLUMNS)


def _tally_of(decoded: pa.Table, bad: pa.Table) -> dict[str, Any]:
    """Per partition: end, records, first and last Kafka timestamps, TRUNCATEs left unapplied; per
    (stage, partition) the dead letters (cdc_window.Counted, by JSON)."""
    first = pc.equal(decoded.column("row_index"), 0)
    ignored = pc.and_(pc.equal(pc.fill_null(decoded.column("change_op"), ""), TRUNCATE),
                      pc.is_null(decoded.column("error_stage")))
    t = pa.table({"topic": decoded.column("topic"), "partition": decoded.column("partition"),
                  "offset": decoded.column("offset"), "timestamp": decoded.column("timestamp"),
                  "record": pc.cast(first, pa.int64()), "truncate": pc.cast(ignored, pa.int64())})
    agg = t.group_by(["topic", "partition"], use_threads=False).aggregate(
        [("offset", "max"), ("record", "sum"), ("timestamp", "min"), ("timestamp", "max"), ("truncate", "sum")])
    read = [[None, *r] for r in zip(*[agg.column(c).to_pylist() for c in
                                      ("topic", "partition", "offset_max", "record_sum", "timestamp_min",
                                       "timestamp_max", "truncate_sum")], strict=True)]
    out = [[s, tp, p, end + 1, n, lo, hi, tr] for s, tp, p, end, n, lo, hi, tr in read]
    if bad.num_rows:
        b = bad.group_by(["error_stage", "topic", "partition"], use_threads=False).aggregate(
            [("offset", "max"), ("offset", "count"), ("timestamp", "min"), ("timestamp", "max")])
        out += [[s, tp, p, end + 1, n, lo, hi, 0] for s, tp, p, end, n, lo, hi in zip(
            *[b.column(c).to_pylist() for c in ("error_stage", "topic", "partition", "offset_max", "offset_count",
                                                "timestamp_min", "timestamp_max")], strict=True)]
    return {"counted": out}


def _truncate_policy(job: cw.WindowJob, decoded: pa.Table) -> pa.Table:
    """truncate: dlq: a TRUNCATE becomes a bad record with its table (``cdc_window._truncates``)."""
    if job.truncate != "dlq" or not decoded.num_rows:
        return decoded
    is_truncate = pc.and_(pc.equal(pc.fill_null(decoded.column("change_op"), ""), TRUNCATE),
                          pc.is_null(decoded.column("error_stage")))
    if not pc.any(is_truncate).as_py():
        return decoded
    table = pc.if_else(pc.is_null(decoded.column("source_table")), decoded.column("topic"),
                       _join([decoded.column("source_db"), decoded.column("source_table")], ".", "skip"))
    before, after = cw.TRUNCATE_TO_DLQ.split("{table}")
    message = pc.if_else(is_truncate, pc.binary_join_element_wise(before, table, after, ""),
                         decoded.column("error_message"))
    stage = pc.if_else(is_truncate, "transform", decoded.column("error_stage"))
    decoded = decoded.set_column(decoded.schema.get_field_index("error_message"), "error_message", message)
    return decoded.set_column(decoded.schema.get_field_index("error_stage"), "error_stage", stage)


def _read_task(job: cw.WindowJob, tasks: int) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    decode = cw._reader(job, tasks, decode=True, typed=True)  # noqa: SLF001 - the read task's reading and decoding

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        batches = list(batches)
        task = batches[0].column("idx")[0].as_py() if batches and batches[0].num_rows else -1
        decoded_batches = list(decode(iter(batches)))
        if not decoded_batches:
            yield _packed(task, TALLY, "", info={"counted": [], "schemas": {}})
            return
        decoded = _truncate_policy(job, images.concat_tables([pa.table(b) for b in decoded_batches]))
        yield from _split(job, task, decoded, tasks)
    return run


def _split(job: cw.WindowJob, task: int, decoded: pa.Table, writers: int = 1) -> Iterator[pa.RecordBatch]:
    """A read task's decoded changes -> its dead letters, each static target's last change per key,
    each dynamic sink's changes tagged with their table (both packed per write task, of ``writers``,
    by key or table: :func:`_bucketed`), and the tally."""
    stage = decoded.column("error_stage")
    bad_parts = []
    errored = pc.is_valid(stage)
    if pc.any(errored).as_py():
        failed = decoded.filter(errored)
        bad_parts.append(_bad_rows(failed, failed.column("error_stage"), failed.column("error_message"),
                                   f"converter:{job.value_converter}"))
    op = pc.fill_null(decoded.column("change_op"), "")
    valid = decoded.filter(pc.and_(pc.invert(errored), pc.and_(pc.not_equal(op, ""), pc.not_equal(op, TRUNCATE))))
    truncates = _truncates(job, decoded.filter(pc.and_(pc.invert(errored), pc.equal(op, TRUNCATE))))
    schemas: dict[str, list[list[Any]]] = {}
    out: list[pa.RecordBatch] = []
    for target in job.sinks:
        cfg = target.config
        name = cfg.name
        if _static(target):
            keys = _keys(target)
            if isinstance(cfg, MySqlSinkConfig):
                projected = project_rows(valid, cfg)
            else:
                projected = project_documents(valid, cfg)
                if cfg.mapping is None and projected.num_rows:  # the index mapping from the record schemas
                    routes = (valid.column("route") if "{topic}" in cfg.index
                              else pa.nulls(valid.num_rows, pa.string()))
                    schemas[name] = _schemas(valid, routes)
            unfit = pc.is_valid(projected.column("error_message"))
            if pc.any(unfit).as_py():
                rejected = projected.filter(unfit)
                bad_parts.append(_bad_rows(rejected, "transform", rejected.column("error_message"), target.component))
                projected = projected.filter(pc.invert(unfit))
            rows = latest_rows(projected, keys, keep_unresolved=True) if keys and projected.num_rows else projected
            out += _bucketed(task, ROWS, name, rows, keys, writers)
            continue
        assert isinstance(cfg, MySqlSinkConfig)
        names = _table_names(valid, cfg.table) if is_routed(cfg) else pa.array([cfg.table] * valid.num_rows,
                                                                              pa.string())
        reason = _bad_route(names, cfg.table) if is_routed(cfg) else pa.nulls(valid.num_rows, pa.string())
        unroutable = pc.is_valid(reason)
        routed = valid
        if pc.any(unroutable).as_py():
            lost = valid.filter(unroutable)
            bad_parts.append(_bad_rows(lost, "transform", reason.filter(unroutable), target.component))
            routed, names = valid.filter(pc.invert(unroutable)), names.filter(pc.invert(unroutable))
        if cfg.columns and routed.num_rows:  # declared columns: what does not fit is known before any write
            unfit = pc.is_valid(project_rows(routed, cfg).column("error_message"))
            if pc.any(unfit).as_py():
                rejected = project_rows(routed.filter(unfit), cfg)
                bad_parts.append(_bad_rows(rejected, "transform", rejected.column("error_message"), target.component))
                routed, names = routed.filter(pc.invert(unfit)), names.filter(pc.invert(unfit))
        if not routed.num_rows:
            continue
        tagged = routed.select(["topic", "partition", "offset", "timestamp", "key", "value", "headers", "route",
                                "change_op", "version", "row_index", "image", "key_image"]).append_column(
            TABLE_COLUMN, names)
        schemas[name] = _schemas(routed, names)
        out += _bucketed(task, CHANGES, name, tagged, [TABLE_COLUMN], writers)
    bad = pa.concat_tables(bad_parts) if bad_parts else pa.table(
        {c: pa.array([], t) for c, t in zip(BAD_COLUMNS, [decoded.schema.field(c).type for c in RAW_COLUMNS]
                                            + [pa.string()] * 3, strict=True)})
    if job.source_format != "debezium" and bad.num_rows:
        bad = _first_per_record(bad)
    yield from out
    if bad.num_rows:
        yield from (_packed(task, BAD, "", blob) for blob in _pack(bad))
    examples = [f"{t}[{p}]@{o} ({s}): {m}" for t, p, o, s, m in zip(
        *[bad.column(c).slice(0, cw.MAX_EXAMPLES).to_pylist() for c in
          ("topic", "partition", "offset", "error_stage", "error_message")], strict=True)]
    yield _packed(task, TALLY, "", info={**_tally_of(decoded, bad), "schemas": schemas, "examples": examples,
                                         "truncates": truncates})


def _truncates(job: cw.WindowJob, rows: pa.Table) -> dict[str, dict[str, int]]:
    """``truncate: apply``: per sink, the tables (or indices) its TRUNCATEs go to (routed like the
    sink's changes) and the newest truncate's version of each."""
    if job.truncate != "apply" or not rows.num_rows:
        return {}
    out: dict[str, dict[str, int]] = {}
    for target in job.sinks:
        cfg = target.config
        if isinstance(cfg, ElasticsearchSinkConfig):
            names = _index_names(rows, cfg.index)
        elif is_routed(cfg):
            names = _table_names(rows, cfg.table)
            names = pc.if_else(pc.is_valid(_bad_route(names, cfg.table)), None, names)
        else:
            names = pa.array([cfg.table] * rows.num_rows, pa.string())
        t = pa.table({"table": names, "version": rows.column("version")}).filter(pc.is_valid(names))
        agg = t.group_by("table", use_threads=False).aggregate([("version", "max")])
        out[cfg.name] = dict(zip(agg.column("table").to_pylist(), agg.column("version_max").to_pylist(), strict=True))
    return out


def _apply_truncates(job: cw.WindowJob, targets: Targets, tallies: list[dict[str, Any]],
                     result: cw.WindowResult) -> None:
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
            with _opened(target) as sink:
                deleted = sink.truncate(merged[name])
            unit = "documents"
        else:
            deleted, unit = truncate_tables(target.url, merged[name], name), "rows"
        result.truncates += [{"sink": name, "table": t, "version": v, "deleted": deleted[t], "unit": unit}
                             for t, v in sorted(merged[name].items())]


@contextmanager
def _opened(target: SinkTarget) -> Iterator[ElasticsearchSink]:
    """An Elasticsearch sink opened on the driver, for what runs once per window before the writes
    (its TRUNCATE marks, its mappings: what only Elasticsearch sinks do)."""
    from connectors.elasticsearch.sink import ElasticsearchSink  # noqa: PLC0415

    sink = SINK_TYPES[target.config.type].open(target)
    assert isinstance(sink, ElasticsearchSink), f"sink {target.config.name!r} is not an Elasticsearch sink"
    sink.open()
    try:
        yield sink
    finally:
        sink.close()


def _first_per_record(bad: pa.Table) -> pa.Table:
    """One dead letter per record and component (a record of several changes may fail in several)."""
    seen: set[tuple[Any, ...]] = set()
    keep = []
    for i, k in enumerate(zip(*[bad.column(c).to_pylist() for c in
                                ("error_stage", "component", "topic", "partition", "offset")], strict=True)):
        if k not in seen:
            seen.add(k)
            keep.append(i)
    return bad.take(pa.array(keep, pa.int64()))


# -- the write tasks ---------------------------------------------------------------------------------
def _report_task(job: cw.WindowJob) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def report(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        assert job.dlq_topic is not None
        dlq = DeadLetterReporter(job.producer_conf, job.dlq_topic, job.pipeline, job.run_id, job.context_headers,
                                 already_sent=job.dead_letters_sent)
        for batch in batches:
            for blob in batch.column("blob").to_pylist():
                for row in _unpack([blob]).to_pylist():
                    dlq.report(cw._failed_from_row(row, row["error_stage"], row["component"],  # noqa: SLF001
                                                   row["error_message"]))
        faults.checkpoint("before_dlq_flush", job.faults)
        yield pa.RecordBatch.from_pydict({"reported": [dlq.flush()]})
    return report


def _keys(target: SinkTarget) -> list[str] | None:
    """What "the same row" means for a static target's projected rows (None: every change is its own)."""
    cfg = target.config
    if isinstance(cfg, MySqlSinkConfig):
        return key_columns(cfg)
    return None if cfg.key_ignore else ["c_0", "c_1"]


@dataclass(frozen=True)
class Targets:
    """What the write tasks write: the static targets by sink name, the dynamic sinks' table groups."""

    static: dict[str, SinkTarget]
    groups: dict[str, TableGroup]
    schema_changes: list[dict[str, Any]] = field(default_factory=list)  # run (or ignored) before the writes


def _write_task(job: cw.WindowJob, targets: Targets,
                commit: Any = None) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """Each target's rows of this task's blobs, the targets at the same time (MySQL and Elasticsearch
    wait on different servers; every one finishes before the first error is raised); with ``commit``,
    the exactly-once sink's rows of every task in one transaction with the window's offsets."""
    def one(name: str, blobs: list[bytes], tasks: set[int]) -> list[pa.RecordBatch]:
        started = time.perf_counter()
        if name in targets.groups:
            rows = list(cw._tables_writer(job, targets.groups[name])(_unpack(blobs).to_batches()))  # noqa: SLF001
        else:
            target = targets.static[name]
            table = _unpack(blobs)
            keys = _keys(target)
            if keys and (len(tasks) > 1 or table.column("version").null_count):
                table = latest_rows(table, keys)  # the rows of a key from several read tasks, unresolved tombstones
            rows = [cw._write_target(job, target, iter(table.to_batches()),  # noqa: SLF001
                                     SINK_TYPES[target.config.type].open(target), cw._dead_letters(job),  # noqa: SLF001
                                     commit)]
        seconds = (time.perf_counter() - started) / max(len(rows), 1)
        out = []
        for row in rows:
            extra = json.loads(row.column("extra")[0].as_py())
            extra[cw.SECONDS_KEY] = seconds
            out.append(row.set_column(row.schema.get_field_index("extra"), "extra", pa.array([json.dumps(extra)])))
        return out

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        blobs: dict[str, list[bytes]] = {}
        tasks: dict[str, set[int]] = {}  # the read tasks each target's blobs come from
        for batch in batches:
            for name, blob, task in zip(batch.column("target").to_pylist(), batch.column("blob").to_pylist(),
                                        batch.column("task").to_pylist(), strict=True):
                blobs.setdefault(name, []).append(blob)
                tasks.setdefault(name, set()).add(task)
        names = [t.config.name for t in job.sinks if t.config.name in blobs]  # in the config's order
        if len(names) <= 1:
            for name in names:
                yield from one(name, blobs[name], tasks[name])
            return
        with ThreadPoolExecutor(max_workers=len(names), thread_name_prefix="cdcflow-write") as pool:
            futures = [pool.submit(one, name, blobs[name], tasks[name]) for name in names]
        for future in futures:
            yield from future.result()
    return write


# -- the driver --------------------------------------------------------------------------------------
def run(spark: SparkSession, job: cw.WindowJob, on_read: Callable[[dict[tuple[str, int], tuple[int, int]]], None],
        deadline: Deadline, checkpoint: Checkpoints) -> cw.WindowResult:
    from pyspark.sql import functions as F  # noqa: PLC0415

    t = time.perf_counter()
    n = cw.read_tasks(job.ranges)
    ranges = spark.range(0, n, 1, n).select(F.col("id").cast("int").alias("idx"))
    packed = checkpoint(ranges.mapInArrow(_read_task(job, n), PACKED_SCHEMA))
    tallies = [json.loads(r.info) for r in packed.where(F.col("kind") == TALLY).select("info").collect()]
    tally: cw.Tally = {}
    for info in tallies:
        for stage, topic, partition, end, count, first, last, truncates in info["counted"]:
            key = (stage, topic, partition)
            prior = tally.get(key)
            tally[key] = cw.Counted(end, count, first, last, truncates) if prior is None else cw.Counted(
                max(prior.end, end), prior.n + count, _min(prior.first, first), _max(prior.last, last),
                prior.truncates + truncates)
    ends = cw._ends(job, tally)  # noqa: SLF001
    result = cw.read_result(ends, tally, on_read)  # the read range is in the ledger before anything is applied
    t = result.lap("read+decode", t)
    if result.records == 0:
        return result
    cw.send_dead_letters(
        job, result, tally,
        lambda: "; ".join([e for info in tallies for e in info.get("examples", [])][:cw.MAX_EXAMPLES]),
        lambda: sum(r.reported for r in packed.where(F.col("kind") == BAD).coalesce(1).mapInArrow(
            _report_task(job), cw.REPORT_SCHEMA).collect()))
    t = result.lap("dlq", t)
    cw._breaker(job, result)  # noqa: SLF001 - before any sink is written: a poison burst applies nothing

    targets = _prepare(job, tallies)
    result.schema_changes += targets.schema_changes
    if job.truncate == "apply":
        result.truncates_ignored = 0
        _apply_truncates(job, targets, tallies, result)
    commit = job.offset_commit(ends)
    others = [t.config.name for t in job.sinks if not (commit is not None and t.config.name == job.offsets_sink)]
    for name in others:
        result.sinks.setdefault(name, SinkStats())
    if others:
        frame = packed.where(F.col("kind").isin(ROWS, CHANGES) & F.col("target").isin(*others))
        if n > 1:  # every key's (and table's) rows of every read task in one write task: _bucketed
            frame = frame.repartition(n, "bucket")
        _count_writes(result, frame.mapInArrow(_write_task(job, targets), cw.WRITE_SCHEMA).collect())
    cw._breaker(job, result)  # noqa: SLF001 - with the rows the sinks rejected, before the exactly-once sink
    if commit is not None:
        assert job.offsets_sink is not None, "a commit in the sink's transaction names its sink"
        target = targets.static[job.offsets_sink]
        frame = packed.where((F.col("kind") == ROWS) & (F.col("target") == job.offsets_sink)).coalesce(1)
        rows = frame.mapInArrow(_write_task(job, targets, commit), cw.WRITE_SCHEMA).collect()
        if not any(cw.SINK_OFFSETS_KEY in json.loads(r.extra) for r in rows):
            rows.append(cw._commit_without_rows(job, target, commit))  # noqa: SLF001 - no row for this sink
        result.sinks.setdefault(target.config.name, SinkStats())
        _count_writes(result, rows)
    result.lap("sinks", t)
    return result


def _min(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _max(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def _described(tallies: list[dict[str, Any]], sink: str) -> dict[Any, list[str]]:
    """Per table (or route), the row schemas of its changes in this window, first by version
    (``sinks.schemas_by``, merged over the read tasks)."""
    best: dict[tuple[Any, Any], Any] = {}
    for info in tallies:
        for group, schema, version in info.get("schemas", {}).get(sink, []):
            k = (group, schema)
            best[k] = version if k not in best else _min(best[k], version)
    described: dict[Any, list[str]] = {}
    for (group, schema), _v in sorted(best.items(), key=lambda kv: (kv[1] is None, kv[1] or 0)):
        described.setdefault(group, [])
        if schema is not None and schema not in described[group]:
            described[group].append(schema)
    return described


def _prepare(job: cw.WindowJob, tallies: list[dict[str, Any]]) -> Targets:
    """On the driver, before any write: the static targets' tables created or evolved, each dynamic
    sink's tables derived from the row schemas the read tasks saw and created, and each Elasticsearch
    index without a declared mapping given one from those schemas."""
    static: dict[str, SinkTarget] = {}
    groups: dict[str, TableGroup] = {}
    changes: list[dict[str, Any]] = []
    for target in job.sinks:
        cfg = target.config
        if _static(target):
            if isinstance(cfg, ElasticsearchSinkConfig) and cfg.mapping is None:
                target = replace(target, mappings=tuple(es_mappings(cfg, _described(tallies, cfg.name))))
                if target.mappings:  # indices that exist get the new fields (schema_changes)
                    with _opened(target) as sink:
                        found = sink.evolve_mappings(job.schema_changes, dict(job.schema_decisions), job.pipeline)
                    changes += found
                    left_out: dict[str, list[str]] = {}
                    for c in found:
                        if c["change"] == "add" and not c["applied"]:
                            left_out.setdefault(c["table"], []).append(c["column"])
                    target = replace(target, left_out=tuple((i, tuple(f)) for i, f in sorted(left_out.items())))
            SINK_TYPES[cfg.type].prepare(target)
            static[cfg.name] = target
            continue
        assert isinstance(cfg, MySqlSinkConfig)
        described = _described(tallies, cfg.name)
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


def _count_writes(result: cw.WindowResult, rows: list[Any]) -> None:
    for row in rows:
        cw.count_written(result, row.sink, row)
