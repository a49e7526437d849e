"""A read task's decoded changes split by sink target: projected, reduced, packed.

Per target whose columns are known before the window (declared MySQL columns, Elasticsearch) the
changes are projected (spark_jobs/project/tables.py, project/documents.py) and reduced to the last change
per key; a sink whose tables come from the records gets its changes tagged with their table. What
cannot be processed becomes a dead-letter row; the tally counts what was read.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from connectors.changes import TRUNCATE
from connectors.elasticsearch.config import ElasticsearchSinkConfig
from connectors.mysql.config import MySqlSinkConfig
from spark_jobs.project import compose
from spark_jobs.transform import row_schemas
from spark_jobs.blobs import BAD, CHANGES, ROWS, TALLY, bucketed, pack, packed
from spark_jobs.job import MAX_EXAMPLES, TRUNCATE_TO_DLQ, WindowJob
from spark_jobs.project.documents import project_documents
from spark_jobs.project.partial import fill_kept
from spark_jobs.project.routes import bad_route, index_names, join_texts, table_names
from spark_jobs.sink_targets import SinkTarget, is_history, is_routed, is_static, mapped_by_records
from spark_jobs.project.tables import RAW_COLUMNS, TABLE_COLUMN, latest_rows, project_rows, row_keys

BAD_COLUMNS = [*RAW_COLUMNS, "error_stage", "error_message", "component"]


LATER = "later"  # an early index's rows of schemas it was not made for: handed on as ROWS (sort_out)


def _schemas(rows: pa.Table, group: pa.Array, known: dict[str, str]) -> list[list[Any]]:
    """[group, row_schema, min version] of the changes of each group (a table, a route) that have a
    row schema, and [group, None, min version] for the groups without one (``sinks.schemas_by``).
    The decoder describes a schema on its first change in the task only: the others are found by
    their schema_id (``known``: the task's schema_id -> row_schema), so a table is its route's and a
    schema is shared by content (:func:`by_content`)."""
    t = pa.table({"g": group, "i": rows.column("schema_id"), "s": rows.column("row_schema"),
                  "v": rows.column("version")})
    agg = t.group_by(["g", "i", "s"], use_threads=False).aggregate([("v", "min")])
    seen = list(zip(*[agg.column(c).to_pylist() for c in ("g", "i", "s", "v_min")], strict=True))
    return [[g, s, v] for g, s, v in by_content(seen, known)]


def _known_schemas(decoded: pa.Table) -> dict[str, str]:
    """schema_id -> row_schema of the task's changes that carry their schema's description (every
    change, dead letters and dropped ones too: the description rides on a schema's first change)."""
    described = decoded.filter(pc.and_(pc.is_valid(decoded.column("schema_id")),
                                       pc.is_valid(decoded.column("row_schema"))))
    return dict(zip(described.column("schema_id").to_pylist(), described.column("row_schema").to_pylist(),
                    strict=True)) if described.num_rows else {}


def _bad_rows(rows: pa.Table, stage: Any, message: Any, component: str) -> pa.Table:
    n = rows.num_rows
    return pa.table([*[rows.column(c) for c in RAW_COLUMNS],
                     stage if isinstance(stage, pa.Array | pa.ChunkedArray) else pa.array([stage] * n, pa.string()),
                     message, pa.array([component] * n, pa.string())], names=BAD_COLUMNS)


def tally_of(decoded: pa.Table, bad: pa.Table) -> dict[str, Any]:
    """Per partition: end, records, first and last Kafka timestamps, TRUNCATEs left unapplied; per
    (stage, partition) the dead letters (spark_jobs.job.Counted, by JSON)."""
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


def truncate_policy(job: WindowJob, decoded: pa.Table) -> pa.Table:
    """truncate: dlq: a TRUNCATE becomes a bad record with its table."""
    if job.truncate != "dlq" or not decoded.num_rows:
        return decoded
    is_truncate = pc.and_(pc.equal(pc.fill_null(decoded.column("change_op"), ""), TRUNCATE),
                          pc.is_null(decoded.column("error_stage")))
    if not pc.any(is_truncate).as_py():
        return decoded
    table = pc.if_else(pc.is_null(decoded.column("source_table")), decoded.column("topic"),
                       join_texts([decoded.column("source_db"), decoded.column("source_table")], ".", "skip"))
    before, after = TRUNCATE_TO_DLQ.split("{table}")
    message = pc.if_else(is_truncate, pc.binary_join_element_wise(before, table, after, ""),
                         decoded.column("error_message"))
    stage = pc.if_else(is_truncate, "transform", decoded.column("error_stage"))
    decoded = decoded.set_column(decoded.schema.get_field_index("error_message"), "error_message", message)
    return decoded.set_column(decoded.schema.get_field_index("error_stage"), "error_stage", stage)


def mysql_deletes(target: SinkTarget, rows: pa.Table) -> pa.Array | None:
    """Which of a MySQL table's rows are deletes (None: none, or not a table), which its read task
    hands to the driver, to be written after every read task ended (spark_jobs/window.py).

    A read task writes its other rows itself, though a key's changes may sit in two partitions, so
    in two tasks at once: records keyed by other fields than the table's key, null keys (a table
    without a primary key), or a key whose bytes changed (the key converter's schemas turned on or
    off, a key schema changed, partitions added). Two tasks' upserts of one key keep the newer (the
    version guard; the tombstones a task's sink read when it opened are all there are while the
    read tasks run). But a delete written by one task and an older upsert by another at the same
    time would bring the deleted row back; a delete written once every upsert is in removes the
    older ones. Elasticsearch needs none of this: it keeps a deleted document's version
    (``index.gc_deletes``, and the sink's tombstone documents) and refuses an older index of it."""
    if not isinstance(target.config, MySqlSinkConfig):
        return None
    deletes = pc.fill_null(pc.equal(rows.column("change_op"), "delete"), False).combine_chunks()
    return deletes if pc.any(deletes).as_py() else None


def schemaless(decoded: pa.Table) -> bool:
    """No record of the task carries a schema, and it has a row to index (not only deletes and
    tombstones, which a stream with schemas has too): an index mapped from the records' schemas
    (``sink_targets.mapped_by_records``) takes its documents as they are, dynamically mapped."""
    return not pc.any(pc.is_valid(decoded.column("row_schema"))).as_py() and bool(
        pc.any(pc.equal(pc.fill_null(decoded.column("change_op"), ""), "upsert")).as_py())


@dataclass
class Sorted:
    """A read task's decoded changes by target: per target its rows (name, packed kind, rows, the
    columns that bucket them per write task), the dead letters, and the tally's info."""

    rows: list[tuple[str, str, pa.Table, list[str] | None]]
    bad: pa.Table
    info: dict[str, Any]


@dataclass
class EarlySplit:
    """A read task's changes when it writes targets itself (``early``): sorted out by target
    (``out``), the rows it writes per early target (``rows``: the deletes held back), those deletes
    per table (written by the driver once every read task ended: :func:`mysql_deletes`), and the
    early targets whose rows it hands on (``handed``)."""

    out: Sorted
    rows: dict[str, pa.Table]
    deletes: dict[str, pa.Table]
    handed: list[str]


def early_split(job: WindowJob, decoded: pa.Table, early: dict[str, SinkTarget], counted: bool = True) -> EarlySplit:
    """:func:`sort_out` for a task that writes its ``early`` targets (spark_jobs/write/early_writes.py):
    an index mapped from the records whose records carry no schema, and a table from the record schema's
    changes of a schema it was not made for (``early.schema_tables``), are handed on. ``counted``: the
    read tasks counted the records (the task after a Spark stage: transform/spark_stage.finished)."""
    out = sort_out(job, decoded, early)
    if not counted:
        out.info["counted"] = [c for c in out.info["counted"] if c[0] is not None]
    plain = any(mapped_by_records(t) for t in early.values()) and schemaless(decoded)
    whole = [name for name, t in early.items() if mapped_by_records(t) and not t.schema_ids and not plain]
    rows = {name: table for name, kind, table, _cols in out.rows
            if name in early and name not in whole and kind == ROWS}
    handed = whole + sorted({name for name, kind, _t, _c in out.rows if name in early and kind in (CHANGES, LATER)})
    deletes = {}
    for name, table in list(rows.items()):
        held = mysql_deletes(early[name], table)
        if held is not None:
            deletes[name] = table.filter(held)
            rows[name] = table.filter(pc.invert(held))
    return EarlySplit(out, rows, deletes, handed)


def split(job: WindowJob, task: int, decoded: pa.Table, writers: int = 1) -> Iterator[pa.RecordBatch]:
    """A read task's decoded changes -> its dead letters, each static target's last change per key,
    each dynamic sink's changes tagged with their table (both packed per write task, of ``writers``,
    by key or table: :func:`bucketed`), and the tally."""
    out = sort_out(job, decoded)
    for name, kind, table, columns in out.rows:
        yield from bucketed(task, kind, name, table, columns, writers)
    if out.bad.num_rows:
        yield from (packed(task, BAD, "", blob) for blob in pack(out.bad))
    yield packed(task, TALLY, "", info=out.info)


def sort_out(job: WindowJob, decoded: pa.Table, early: dict[str, SinkTarget] | None = None) -> Sorted:
    """A read task's decoded changes -> its dead letters, each static target's last change per key,
    each dynamic sink's changes tagged with their table, and the tally (:func:`split`). A table
    from the record schema made ready before the read (``early``, with its ``schema_ids``) is both:
    :func:`_made_table_rows`."""
    stage = decoded.column("error_stage")
    bad_parts = []
    errored = pc.is_valid(stage)
    if pc.any(errored).as_py():
        failed = decoded.filter(errored)
        bad_parts.append(_bad_rows(failed, failed.column("error_stage"), failed.column("error_message"),
                                   f"converter:{job.value_converter}"))
    op = pc.fill_null(decoded.column("change_op"), "")
    keep = pc.and_(pc.invert(errored), pc.and_(pc.not_equal(op, ""), pc.not_equal(op, TRUNCATE)))
    valid = decoded if pc.all(keep).as_py() else decoded.filter(keep)  # mostly all: no copy of the values
    truncates = truncates_of(job, decoded.filter(pc.and_(pc.invert(errored), pc.equal(op, TRUNCATE))))
    schemas: dict[str, list[list[Any]]] = {}
    known = _known_schemas(decoded)
    rows: list[tuple[str, str, pa.Table, list[str] | None]] = []
    for target in job.sinks:
        made = (early or {}).get(target.config.name)
        if made is not None and made.schema_ids:
            rows += _made_table_rows(made, target, valid, schemas, bad_parts, known, job.transforms)
            continue
        if is_static(target):
            found = _static_rows(target, valid, schemas, bad_parts, known)
        else:
            found = _tagged_changes(target, valid, schemas, bad_parts, known, job.transforms)
        if found is not None:
            rows.append(found)
    bad = pa.concat_tables(bad_parts) if bad_parts else pa.table(
        {c: pa.array([], t) for c, t in zip(BAD_COLUMNS, [decoded.schema.field(c).type for c in RAW_COLUMNS]
                                            + [pa.string()] * 3, strict=True)})
    if job.source_format != "debezium" and bad.num_rows:
        bad = first_per_record(bad)
    examples = [f"{t}[{p}]@{o} ({s}): {m}" for t, p, o, s, m in zip(
        *[bad.column(c).slice(0, MAX_EXAMPLES).to_pylist() for c in
          ("topic", "partition", "offset", "error_stage", "error_message")], strict=True)]
    seeds = compose.seeds_of(job.documents, valid, table_names)  # the changed rows of composed indices' tables
    return Sorted(rows, bad, {**tally_of(decoded, bad), "schemas": schemas, "examples": examples,
                              "truncates": truncates, **({"seeds": seeds} if seeds else {})})


def _static_rows(target: SinkTarget, valid: pa.Table, schemas: dict[str, list[list[Any]]], bad_parts: list[pa.Table],
                 known: dict[str, str]) -> tuple[str, str, pa.Table, list[str] | None] | None:
    """A target whose columns are known: its projected rows, the last change per key, bucketed by key
    (the rows that do not fit into ``bad_parts``; an index's row schemas into ``schemas``)."""
    cfg = target.config
    keys = row_keys(target)
    if isinstance(cfg, MySqlSinkConfig):
        projected = project_rows(valid, cfg)
    else:
        projected = project_documents(valid, cfg)
        if cfg.mapping is None and projected.num_rows:  # the index mapping from the record schemas
            routes = valid.column("route") if "{topic}" in cfg.index else pa.nulls(valid.num_rows, pa.string())
            schemas.setdefault(cfg.name, []).extend(_schemas(valid, routes, known))  # ours and LATER's
    unfit = pc.is_valid(projected.column("error_message"))
    if pc.any(unfit).as_py():
        rejected = projected.filter(unfit)
        bad_parts.append(_bad_rows(rejected, "transform", rejected.column("error_message"), target.component))
        projected = projected.filter(pc.invert(unfit))
    projected = fill_kept(projected, cfg, keys)  # partial changes take their key's earlier values first
    rows = latest_rows(projected, keys, keep_unresolved=True, every_version=is_history(target)) \
        if keys and projected.num_rows else projected
    return (cfg.name, ROWS, rows, keys) if rows.num_rows else None


def _made_table_rows(made: SinkTarget, target: SinkTarget, valid: pa.Table, schemas: dict[str, list[list[Any]]],
                     bad_parts: list[pa.Table], known: dict[str, str], chain: Any = (),
                     ) -> list[tuple[str, str, pa.Table, list[str] | None]]:
    """A table from the record schema, or an index mapped from it, made ready before the read
    (``early.schema_tables``): the changes of the schemas it was made for, and the deletes without
    a schema (tombstones), as a static target's rows (``made``: the table's columns, the index's
    mapping, as written); the others for the window, which makes the table or the index ready for
    their schemas after the read: a table's tagged (:func:`_tagged_changes`), an index's as
    :data:`LATER` rows."""
    schema_id = valid.column("schema_id")
    ours = pc.or_(pc.fill_null(pc.is_in(schema_id, value_set=pa.array(made.schema_ids, pa.string())), False),
                  pc.and_(pc.is_null(schema_id), pc.fill_null(pc.equal(valid.column("change_op"), "delete"), False)))
    if pc.all(ours).as_py():
        return [f for f in [_static_rows(made, valid, schemas, bad_parts, known)] if f is not None]
    found = [_static_rows(made, valid.filter(ours), schemas, bad_parts, known)]
    others = valid.filter(pc.invert(ours))
    if isinstance(made.config, ElasticsearchSinkConfig):
        later = _static_rows(made, others, schemas, bad_parts, known)
        found.append(None if later is None else (later[0], LATER, later[2], later[3]))
    else:
        found.append(_tagged_changes(target, others, schemas, bad_parts, known, chain))
    return [f for f in found if f is not None]


def _tagged_changes(target: SinkTarget, valid: pa.Table, schemas: dict[str, list[list[Any]]], bad_parts: list[pa.Table],
                    known: dict[str, str], chain: Any = ()) -> tuple[str, str, pa.Table, list[str] | None] | None:
    """A MySQL sink whose tables or columns come from the records: its changes tagged with their
    table, packed by table (the unroutable and, with declared columns, the unfit into ``bad_parts``;
    each table's row schemas into ``schemas``, inferred from the images after ``chain`` for records
    without one: spark_jobs/transform/row_schemas.py)."""
    cfg = target.config
    assert isinstance(cfg, MySqlSinkConfig)
    names = table_names(valid, cfg.table) if is_routed(cfg) else pa.array([cfg.table] * valid.num_rows, pa.string())
    reason = bad_route(names, cfg.table) if is_routed(cfg) else pa.nulls(valid.num_rows, pa.string())
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
        return None
    tagged = routed.select(["topic", "partition", "offset", "timestamp", "key", "value", "headers", "route",
                            "change_op", "version", "row_index", "image", "key_image", "source_op"]).append_column(
        TABLE_COLUMN, names)
    found = _schemas(routed, names, known)
    schemas[cfg.name] = found if cfg.columns else row_schemas.with_inferred(found, routed, names, chain)
    return cfg.name, CHANGES, tagged, [TABLE_COLUMN]


def truncates_of(job: WindowJob, rows: pa.Table) -> dict[str, dict[str, int]]:
    """``truncate: apply``: per sink, the tables (or indices) its TRUNCATEs go to (routed like the
    sink's changes) and the newest truncate's version of each."""
    if job.truncate != "apply" or not rows.num_rows:
        return {}
    out: dict[str, dict[str, int]] = {}
    for target in job.sinks:
        cfg = target.config
        if isinstance(cfg, ElasticsearchSinkConfig):
            names = index_names(rows, cfg.index)
        elif is_routed(cfg):
            names = table_names(rows, cfg.table)
            names = pc.if_else(pc.is_valid(bad_route(names, cfg.table)), None, names)
        else:
            names = pa.array([cfg.table] * rows.num_rows, pa.string())
        t = pa.table({"table": names, "version": rows.column("version")}).filter(pc.is_valid(names))
        agg = t.group_by("table", use_threads=False).aggregate([("version", "max")])
        out[cfg.name] = dict(zip(agg.column("table").to_pylist(), agg.column("version_max").to_pylist(), strict=True))
    return out


def first_per_record(bad: pa.Table) -> pa.Table:
    """One dead letter per record and component (a record of several changes may fail in several)."""
    seen: set[tuple[Any, ...]] = set()
    keep = []
    for i, k in enumerate(zip(*[bad.column(c).to_pylist() for c in
                                ("error_stage", "component", "topic", "partition", "offset")], strict=True)):
        if k not in seen:
            seen.add(k)
            keep.append(i)
    return bad.take(pa.array(keep, pa.int64()))


def by_content(seen: list[tuple[Any, str | None, str | None, int | None]],
               known: dict[str, str] | None = None) -> list[tuple[Any, str | None, int | None]]:
    """(group, schema_id, row_schema, min version) of a window's changes -> (group, row_schema, min
    version) first by version: each change's description found by its schema_id where the change
    carries none (in ``seen`` or in ``known``, schema_id -> row_schema); (group, None, version) for
    a group none of whose changes has one."""
    known = dict(known or {})
    for _g, sid, s, _v in sorted(seen, key=lambda r: (r[3] is None, r[3] or 0)):
        if sid is not None and s is not None:
            known.setdefault(sid, s)
    best: dict[tuple[Any, str | None], int | None] = {}
    for g, sid, s, v in seen:
        k = (g, s if s is not None else known.get(sid) if sid is not None else None)
        best[k] = v if k not in best else _smaller(best[k], v)
    described = {g for g, s in best if s is not None}
    kept = [(g, s, v) for (g, s), v in best.items() if s is not None or g not in described]
    return sorted(kept, key=lambda r: (r[2] is None, r[2] or 0))


def _smaller(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)
