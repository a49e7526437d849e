"""A read task of the one window path (spark_jobs/window.py runs one per partition range), its stages
in order: read and decode (read/), the chain of transforms (transform/), the projection per target
and the reduction to the last change per key (project/), and the writes of the targets known before
the read (write/early_writes.py), after its dead letters are sent. What it does not write it packs
for the driver (spark_jobs/blobs.py), with its tally. A chain with a Spark step reads in
spark_jobs/transform/spark_stage.read_task instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pyarrow as pa

from connectors import images
from spark_jobs.blobs import TALLY, packed
from spark_jobs.job import Pieces, WindowJob
from spark_jobs.project import targets as project
from spark_jobs.project.routes import routes_checked
from spark_jobs.read.ranges import reader
from spark_jobs.sink_targets import SinkTarget
from spark_jobs.transform import row_transforms
from spark_jobs.write.early_writes import written_early


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
        yield from written_early(job, task, project.early_split(job, decoded, early), early, tasks)
    return run
