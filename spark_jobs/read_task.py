"""A read task of the one window path (spark_jobs/window.py runs one per partition range), its stages
in order: read and decode (read/), the chain of transforms (transform/), the projection per target
and the reduction to the last change per key (project/), and the writes of the targets known before
the read (write/), after its dead letters are sent. What it does not write it packs for the driver
(spark_jobs/blobs.py), with its tally. A chain with a Spark step reads in
spark_jobs/transform/spark_stage.read_task instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from connectors import images
from spark_jobs.blobs import CHANGES, DELETES, ROWS, TALLY, bucketed, pack, packed
from spark_jobs.job import Pieces, WindowJob
from spark_jobs.project import targets as project
from spark_jobs.project.routes import routes_checked
from spark_jobs.project.targets import LATER
from spark_jobs.read.ranges import reader
from spark_jobs.sink_targets import SinkTarget, mapped_by_records
from spark_jobs.transform import row_transforms
from spark_jobs.write.dead_letters import send_first
from spark_jobs.write.tasks import write_now


def read_task(job: WindowJob, pieces: Pieces, early: dict[str, SinkTarget] | None = None,
              ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The default path's read task: its partition ranges read and decoded (spark_jobs/read/ranges.py),
    ``truncate`` applied, then sorted out by target (project/targets.py). The ``early`` targets (prepared before the
    read: ``early.early_targets``) it writes itself, after sending its dead letters (but an index
    mapped from the records, unless they are :func:`schemaless`: ``handed`` on); the others' rows, and
    the dead letters when no target is early, it packs for the driver. Last, its tally."""
    decode = reader(job, pieces)
    tasks = len(pieces)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        batches = list(batches)
        task = batches[0].column("idx")[0].as_py() if batches and batches[0].num_rows else -1
        decoded_batches = list(decode(iter(batches)))
        if not decoded_batches:
            yield packed(task, TALLY, "", info={"counted": [], "schemas": {}})
            return
        decoded = images.concat_tables([pa.table(b) for b in decoded_batches])
        if job.transforms:  # the chain (a Spark step's: transform/spark_stage.read_task)
            decoded = routes_checked(row_transforms.apply(decoded, job.transforms, job.versioning,
                                                          key_converter=job.key_converter))
        decoded = project.truncate_policy(job, decoded)
        if not early:
            yield from project.split(job, task, decoded, tasks)
            return
        yield from written_early(job, task, decoded, early, tasks)
    return run


def written_early(job: WindowJob, task: int, decoded: pa.Table, early: dict[str, SinkTarget], tasks: int,
                  counted: bool = True) -> Iterator[pa.RecordBatch]:
    """A task's changes, its ``early`` targets written by itself, after sending its dead letters; the
    other targets' rows and the deletes packed, then its tally (:func:`read_task`; the task after a Spark
    stage, whose records the read tasks ``counted``: transform/spark_stage.finished)."""
    out = project.sort_out(job, decoded, early)
    if not counted:
        out.info["counted"] = [c for c in out.info["counted"] if c[0] is not None]
    reported = send_first(job, out.bad, out.info["examples"])  # before any of this task's writes
    plain = any(mapped_by_records(t) for t in early.values()) and project.schemaless(decoded)
    whole = [name for name, t in early.items() if mapped_by_records(t) and not t.schema_ids and not plain]
    rows = {name: table for name, kind, table, _cols in out.rows
            if name in early and name not in whole and kind == ROWS}
    # a table from the record schema: the changes of a schema it was not made for (early.schema_tables)
    handed = whole + sorted({name for name, kind, _t, _c in out.rows if name in early and kind in (CHANGES, LATER)})
    later = {name: deletes for name, deletes in ((n, project.mysql_deletes(early[n], t)) for n, t in rows.items())
             if deletes is not None}
    for name, deletes in later.items():
        yield from (packed(task, DELETES, name, blob) for blob in pack(rows[name].filter(deletes)))
        rows[name] = rows[name].filter(pc.invert(deletes))
    written = [b.to_pylist()[0] for b in write_now(job, early, {n: t for n, t in rows.items() if t.num_rows})]
    for name, kind, table, columns in out.rows:
        if not (kind == ROWS and name in rows):
            yield from bucketed(task, ROWS if kind == LATER else kind, name, table, columns, tasks)
    yield packed(task, TALLY, "", info={**out.info, "written": written, "reported": reported, "handed": handed})
