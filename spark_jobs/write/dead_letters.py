"""The window's dead letters: bad records to the dead-letter topic, the tolerance and the breaker.

Everything here runs before any sink is written (``send_dead_letters``, ``breaker``; a read task that
writes its targets itself sends its own first, ``send_first``), or inside a write task for the rows
a sink rejects (``dead_letter_reporter``); a failed DLQ write fails the window.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa

from connectors import faults
from connectors.base import FailedRecord
from connectors.errors import DeadLettersExceeded, ToleranceExceeded
from connectors.kafka.dlq import DeadLetterReporter
from spark_jobs.blobs import unpack
from spark_jobs.job import Tally, WindowJob, WindowResult
from spark_jobs.write.raw_values import restored


def failed_from_row(row: dict[str, Any], stage: str, component: str, message: str) -> FailedRecord:
    return FailedRecord(row["topic"], row["partition"], row["offset"], row["key"], row["value"],
                        [(h["key"], h["value"]) for h in row["headers"] or []], stage, component,
                        "cdcflow.errors.RecordError", message)


def blob_rows(batch: pa.RecordBatch) -> Iterator[dict[str, Any]]:
    """The dead-letter rows of a batch of packed blobs (the per-partition path), blob by blob."""
    for blob in batch.column("blob").to_pylist():
        yield from unpack([blob]).to_pylist()


def reporter(job: WindowJob, rows: Callable[[pa.RecordBatch], Iterable[dict[str, Any]]] = pa.RecordBatch.to_pylist,
             ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The task that sends the window's bad records to the DLQ (one task, so one producer) and flushes
    them before it reports how many it sent; ``rows`` reads a batch's rows (bad records as rows, or
    packed in blobs: :func:`blob_rows`)."""
    def report(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        dlq = _producer(job)
        for batch in batches:
            failed = [failed_from_row(row, row["error_stage"], row["component"], row["error_message"])
                      for row in rows(batch)]
            for rec in restored(job, failed):  # the values a Spark stage left out, read again
                dlq.report(rec)
        faults.checkpoint("before_dlq_flush", job.faults)
        yield pa.RecordBatch.from_pydict({"reported": [dlq.flush()]})
    return report


def send_first(job: WindowJob, bad: pa.Table, examples: list[str]) -> int:
    """A read task that writes its targets itself (``early.early_targets``): its bad records before
    any of its writes. Past errors.tolerance none it fails, naming them; else it sends them to the DLQ
    and flushes. Returns how many it sent (what an earlier attempt sent is not sent again)."""
    if not bad.num_rows:
        return 0
    if job.tolerance == "none":
        raise tolerance_exceeded(bad.num_rows, "; ".join(examples))
    return list(reporter(job)(iter(bad.to_batches())))[0].column("reported")[0].as_py()


def send_dead_letters(job: WindowJob, result: WindowResult, tally: Tally, examples: Callable[[], str],
                      report: Callable[[], int]) -> None:
    """The window's bad records (the tally's stages): past errors.tolerance none the window fails,
    naming ``examples()``; else ``report()`` sends them to the DLQ, and they are counted by stage."""
    bad_by_stage: dict[str, int] = {}
    for (stage, _t, _p), counted in tally.items():
        if stage is not None:
            bad_by_stage[stage] = bad_by_stage.get(stage, 0) + counted.n
    bad_count = sum(bad_by_stage.values())
    if not bad_count:
        return
    if job.tolerance == "none":
        raise tolerance_exceeded(bad_count, examples())
    result.dead_lettered += report()
    for stage, count in bad_by_stage.items():
        key = (stage, "cdcflow.errors.RecordError")
        result.dead_letters[key] = result.dead_letters.get(key, 0) + count


def tolerance_exceeded(count: int, examples: str) -> ToleranceExceeded:
    return ToleranceExceeded(f"errors.tolerance is 'none' and {count} record(s) cannot be processed: {examples}")


def breaker(job: WindowJob, result: WindowResult) -> None:
    """errors.max_dead_letters: past it, the window fails before its commit (the runner then STOPs the
    pipeline). What it sent to the DLQ stays there, and no later window sends it again."""
    limit = job.max_dead_letters
    if limit is None or not limit.exceeded(result.dead_lettered, result.records):
        return
    raise DeadLettersExceeded(
        f"{result.dead_lettered} of the {result.records} records of window {job.run_id} went to the dead-letter "
        f"topic {job.dlq_topic} ({result.dead_lettered / max(result.records, 1):.0%}), past errors.max_dead_letters "
        f"({limit.describe()}): pipeline {job.pipeline!r} is STOPPED and no offset moved. See the dead letters "
        f"(the page, or GET /cdcflow/connectors/{job.pipeline}/dlq), fix their cause, then resume the pipeline; "
        "the records already in the DLQ are not sent again")


def dead_letter_reporter(job: WindowJob) -> DeadLetterReporter | None:
    """A write task's reporter of the rows its sinks reject: None unless they go to the DLQ."""
    return _producer(job) if job.dlq_topic and job.tolerance == "all" else None


def _producer(job: WindowJob) -> DeadLetterReporter:
    """The window's dead-letter reporter (what earlier attempts sent is not sent again)."""
    assert job.dlq_topic is not None
    return DeadLetterReporter(job.producer_conf, job.dlq_topic, job.pipeline, job.run_id, job.context_headers,
                              already_sent=job.dead_letters_sent)


