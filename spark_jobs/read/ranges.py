"""The read task's first stage: a window's partition ranges read from Kafka and decoded into typed
change columns (spark_jobs/read/decode.py), which stay in the Python worker."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from connectors import faults
from connectors.kafka.reader import KafkaRangeReader
from spark_jobs.job import Pieces, WindowJob
from spark_jobs.read.decode import change_decoder


# a record's raw value, left out once decoded: a real Debezium envelope is ~9 KB, and of the values as
# read only a dead letter's has a need (the DLQ re-sends the original bytes), which the dead-letter
# paths read again from Kafka by the record's coordinates (spark_jobs/write/raw_values.restored). Not
# a value a converter reads (a NUL first); a tombstone's stays null.
OMITTED = b"\x00cdcflow:omitted"


def omitted(values: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """``values`` (the raw values) with each non-null one replaced by :data:`OMITTED`."""
    return pc.if_else(pc.is_valid(values), pa.scalar(OMITTED, values.type), pa.scalar(None, values.type))


def without_values(decoded: pa.RecordBatch) -> pa.RecordBatch:
    """A decoded batch whose raw values are :func:`omitted`: the read batch is freed at once, so the
    next one reuses its memory (a task held every value of its window: ~450 MB of fresh pages for
    50,000 real-shaped records, the most expensive part of the read, py-spy). Made column by column:
    a table made of the batch (``pa.table``, ``set_column``) kept the whole read batch alive."""
    names = decoded.schema.names
    return pa.RecordBatch.from_arrays(
        [omitted(decoded.column(i)) if name == "value" else decoded.column(i) for i, name in enumerate(names)],
        names=names)


def reader(job: WindowJob, pieces: Pieces) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The read task's records: each piece's ranges read and decoded by the pipeline's source.format
    and converters (connectors/formats.py: values read by their schema, or by the declared columns)."""
    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        reader = KafkaRangeReader(job.consumer_conf)
        decoder = change_decoder(job)
        for batch in batches:
            for idx in batch.column("idx").to_pylist():
                ranges = list(pieces[idx])  # several in a small window, or a split one (job.read_pieces)
                for raw in reader.read_ranges(ranges, midway=lambda: faults.checkpoint("during_read", job.faults)):
                    decoded = decoder.decode_batch(raw)
                    # a chain may read the values again (transform/row_unwrap.py, envelope_frame.py)
                    yield decoded if job.transforms else without_values(decoded)
    return read
