"""Dead letters as records, and the producer that sends them: below the write stage's modules (the
read tasks' early writes, the window's dead letters and the write tasks all send with these; these
use none of them). A failed DLQ write fails the window.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa

from connectors import faults
from connectors.base import FailedRecord
from connectors.errors import ToleranceExceeded
from connectors.kafka.dlq import DeadLetterReporter
from spark_jobs.blobs import unpack
from spark_jobs.job import WindowJob
from spark_jobs.raw_values import restored


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


def tolerance_exceeded(count: int, examples: str) -> ToleranceExceeded:
    return ToleranceExceeded(f"errors.tolerance is 'none' and {count} record(s) cannot be processed: {examples}")


def dead_letter_reporter(job: WindowJob) -> DeadLetterReporter | None:
    """A write task's reporter of the rows its sinks reject: None unless they go to the DLQ."""
    return _producer(job) if job.dlq_topic and job.tolerance == "all" else None


def _producer(job: WindowJob) -> DeadLetterReporter:
    """The window's dead-letter reporter (what earlier attempts sent is not sent again)."""
    assert job.dlq_topic is not None
    return DeadLetterReporter(job.producer_conf, job.dlq_topic, job.pipeline, job.run_id, job.context_headers,
                              already_sent=job.dead_letters_sent)
