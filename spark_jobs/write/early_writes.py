"""A read task's own writes (spark_jobs/read_task.py, or the task after a Spark stage): the targets
made ready before the read (spark_jobs/write/early.py::early_targets), written by the task that read
their rows, after it sent its dead letters; the rest packed for the driver with its tally.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from spark_jobs.blobs import DELETES, ROWS, TALLY, bucketed, pack, packed
from spark_jobs.job import WindowJob
from spark_jobs.project.targets import LATER, EarlySplit
from spark_jobs.sink_targets import SinkTarget
from spark_jobs.write.dead_letter_rows import reporter, tolerance_exceeded
from spark_jobs.write.target_writes import at_once, write_static


def written_early(job: WindowJob, task: int, split: EarlySplit, early: dict[str, SinkTarget],
                  tasks: int) -> Iterator[pa.RecordBatch]:
    """A task's changes sorted out by target (``split``: project/targets.early_split): its dead
    letters sent first, then its ``early`` targets' rows written; the deletes held back, the other
    targets' rows packed, then its tally."""
    out = split.out
    reported = send_first(job, out.bad, out.info["examples"])  # before any of this task's writes
    for name, deletes in split.deletes.items():
        yield from (packed(task, DELETES, name, blob) for blob in pack(deletes))
    written = [b.to_pylist()[0] for b in write_now(job, early, {n: t for n, t in split.rows.items() if t.num_rows})]
    for name, kind, table, columns in out.rows:
        if not (kind == ROWS and name in split.rows):
            yield from bucketed(task, ROWS if kind == LATER else kind, name, table, columns, tasks)
    yield packed(task, TALLY, "", info={**out.info, "written": written, "reported": reported, "handed": split.handed})


def send_first(job: WindowJob, bad: pa.Table, examples: list[str]) -> int:
    """A read task that writes its targets itself (``early.early_targets``): its bad records before
    any of its writes. Past errors.tolerance none it fails, naming them; else it sends them to the DLQ
    and flushes. Returns how many it sent (what an earlier attempt sent is not sent again)."""
    if not bad.num_rows:
        return 0
    if job.tolerance == "none":
        raise tolerance_exceeded(bad.num_rows, "; ".join(examples))
    return list(reporter(job)(iter(bad.to_batches())))[0].column("reported")[0].as_py()


def write_now(job: WindowJob, targets: dict[str, SinkTarget], rows: dict[str, pa.Table]) -> list[pa.RecordBatch]:
    """A read task's own rows of the targets it writes itself (``early.early_targets``: their keys
    are in no other task), the targets at the same time."""
    names = [t.config.name for t in job.sinks if t.config.name in rows]  # in the config's order
    return at_once({name: (lambda n=name: [write_static(job, targets[n], rows[n], several=False)]) for name in names})
