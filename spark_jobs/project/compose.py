"""Composed indices on Spark (connectors/elasticsearch/compose.py has the graph, the queries and the
documents; cdcflow/window/compose.py the stage on the driver):

* :func:`seeds_of`, in each read task: per composed index, the changed rows of its tables, as the
  texts of the columns their images are read for (``seed_columns``). A change goes to the table the
  keeping MySQL sink routes it to.
* :func:`rebuild`: the affected root keys, in batches of ``rebuild_batch`` keys, each batch a Spark
  task that reads its documents' rows from MySQL (a query per relation for the whole batch), builds
  them and bulk-indexes them with the rebuild's version (a gone root row: a versioned delete and its
  tombstone). No document is built on the driver.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from connectors import images
from connectors.base import Change, SourceRef
from connectors.elasticsearch import compose
from connectors.elasticsearch.config import ElasticsearchSinkConfig
from connectors.errors import WindowFailed
from connectors.mysql.config import MySqlSinkConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark_jobs.sink_targets import SinkTarget

STATS_SCHEMA = ("task int, upserted long, deleted long, stale long, unchanged long, failed long, errors string, "
                "read_s double, write_s double")  # read_s: the rows read and the documents built; write_s: written
NO_RECORD = SourceRef("", -1, -1, None, None)  # a rebuilt document comes from tables, not from a record


@dataclass(frozen=True)
class DocumentJob:
    """What the read tasks need of a composed index: the sink keeping its tables, and per table the
    columns its changed rows are read for."""

    sink: str
    keeper: MySqlSinkConfig
    columns: tuple[tuple[str, tuple[str, ...]], ...]


def seeds_of(jobs: tuple[DocumentJob, ...], valid: pa.Table,
             route: Callable[[pa.Table, str], pa.Array]) -> dict[str, dict[str, list[Any]]]:
    """Per composed index, per table: ``[columns, rows of texts]`` of the task's changed rows (``route``:
    the table of each change under a sink's table template, as the sink routes it)."""
    if not jobs or not valid.num_rows:
        return {}
    from spark_jobs.sink_targets import is_routed  # noqa: PLC0415

    ops = pc.fill_null(pc.is_in(valid.column("change_op"), pa.array(["upsert", "delete"])), False)
    rows = valid.filter(ops)
    out: dict[str, dict[str, list[Any]]] = {}
    for job in jobs:
        keeper = job.keeper
        names = route(rows, keeper.table) if is_routed(keeper) else pa.array(
            [keeper.table] * rows.num_rows, pa.string())
        per: dict[str, list[Any]] = {}
        for table, columns in job.columns:
            mine = pc.fill_null(pc.equal(names, table), False)
            if not pc.any(mine).as_py():
                continue
            fields = images.Fields(rows.filter(mine).column("image"))
            values = [fields.texts(c).to_pylist() for c in columns]
            per[table] = [list(columns), list({tuple(v) for v in zip(*values, strict=True)})]  # merge_seeds sorts
        if per:
            out[job.sink] = per
    return out


def merge_seeds(tallies: list[dict[str, Any]]) -> dict[str, dict[str, tuple[list[str], list[tuple[str, ...]]]]]:
    out: dict[str, dict[str, tuple[list[str], set[tuple[str, ...]]]]] = {}
    for info in tallies:
        for sink, tables in (info.get("seeds") or {}).items():
            for table, (columns, rows) in tables.items():
                held = out.setdefault(sink, {}).setdefault(table, (columns, set()))
                held[1].update(tuple(r) for r in rows)
    return {s: {t: (c, sorted(r, key=repr)) for t, (c, r) in tables.items()} for s, tables in out.items()}


def rebuild(spark: SparkSession, target: SinkTarget, mysql_url: str, keys: list[tuple[str, ...]], version: int,
            tables: compose.Tables, faults: tuple[str, ...] = (), indices: tuple[str, ...] = ()) -> dict[str, Any]:
    """The documents of ``keys`` rebuilt and written, a Spark task per batch of keys; their stats summed
    (``faults``: the driver's fault points, connectors/faults.py: ``before_rebuild_write`` once a task
    read its documents' rows, ``during_rebuild`` once it wrote them; ``indices``: where the documents go, by default the sink's index)."""
    cfg = target.config
    assert isinstance(cfg, ElasticsearchSinkConfig) and cfg.document is not None
    size = cfg.document.rebuild_batch
    batches = [keys[i:i + size] for i in range(0, len(keys), size)]
    if not batches:
        return {"upserted": 0, "deleted": 0, "stale": 0, "unchanged": 0, "failed": 0, "read_s": 0.0, "write_s": 0.0}
    frame = spark.range(0, len(batches), 1, len(batches)).selectExpr("cast(id as int) as idx")
    into = indices or (cfg.index,)
    rows = frame.mapInArrow(rebuild_task(target, mysql_url, batches, version, tables, faults, into),
                            STATS_SCHEMA).collect()
    errors = [e for r in rows if r.errors for e in json.loads(r.errors)]
    if errors:
        raise WindowFailed(f"sink {cfg.name!r}: Elasticsearch refused {len(errors)} rebuilt documents of index "
                           f"{cfg.index!r} (check document.fields against the index's mapping): {'; '.join(errors[:3])}")
    out: dict[str, Any] = {k: sum(getattr(r, k) for r in rows)
                           for k in ("upserted", "deleted", "stale", "unchanged", "failed")}
    # the tasks' seconds summed (they overlap on several cores): where a rebuild's time goes
    out.update({k: round(sum(getattr(r, k) for r in rows), 3) for k in ("read_s", "write_s")})
    return out


def rebuild_task(target: SinkTarget, mysql_url: str, batches: list[list[tuple[str, ...]]], version: int,
                 tables: compose.Tables, faults: tuple[str, ...] = (), indices: tuple[str, ...] = (),
                 ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def run(frames: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from connectors import faults as fault_points  # noqa: PLC0415

        for frame in frames:
            for idx in frame.column("idx").to_pylist():
                stats = _rebuild_batch(idx, target, mysql_url, batches[idx], version, tables, indices, faults)
                fault_points.checkpoint("during_rebuild", faults)
                yield stats
    return run


def _rebuild_batch(idx: int, target: SinkTarget, mysql_url: str, keys: list[tuple[str, ...]], version: int,
                   tables: compose.Tables, indices: tuple[str, ...], faults: tuple[str, ...] = ()) -> pa.RecordBatch:
    from connectors import faults as fault_points  # noqa: PLC0415
    from connectors.elasticsearch.sink import ElasticsearchSink  # noqa: PLC0415 - executor-side imports
    from connectors.mysql.connection import reader_cursor  # noqa: PLC0415

    cfg = target.config
    assert isinstance(cfg, ElasticsearchSinkConfig) and cfg.document is not None
    root = compose.graph(cfg.document)
    started = time.perf_counter()
    with reader_cursor(mysql_url) as cursor:
        cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        docs = compose.build(cursor, root, cfg.document.root.key, keys, tables)
    read_s = time.perf_counter() - started
    fault_points.checkpoint("before_rebuild_write", faults)  # the documents read, not written
    started = time.perf_counter()
    mapping = compose.mapping(cfg.mapping)
    sink = ElasticsearchSink(cfg, target.url, target.auth, mappings={index: mapping for index in indices})
    sink.open()
    try:
        encoded = [(doc_id, compose.encoded(doc) if doc is not None else None) for doc_id, doc in docs]
        changes = [Change("upsert" if doc is not None else "delete", (index, doc_id), {"doc": doc}, version, NO_RECORD)
                   for index in indices for doc_id, doc in encoded]
        failed = sink.write(changes)
        failed += sink.flush()
    finally:
        sink.close()
    write_s = time.perf_counter() - started
    s = sink.stats
    errors = [f"{f.message}" for f in failed]
    return pa.RecordBatch.from_pylist([{"task": idx, "upserted": s.upserted, "deleted": s.deleted, "stale": s.stale,
                                        "unchanged": s.unchanged, "failed": len(failed),
                                        "errors": json.dumps(errors) if errors else None,
                                        "read_s": read_s, "write_s": write_s}],
                                      schema=pa.schema([("task", pa.int32()), ("upserted", pa.int64()),
                                                        ("deleted", pa.int64()), ("stale", pa.int64()),
                                                        ("unchanged", pa.int64()), ("failed", pa.int64()),
                                                        ("errors", pa.string()), ("read_s", pa.float64()),
                                                        ("write_s", pa.float64())]))
