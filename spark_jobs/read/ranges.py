"""The read task's first stage: a window's partition ranges read from Kafka and decoded into typed
change columns (spark_jobs/read/decode.py), which stay in the Python worker."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pyarrow as pa

from connectors import faults
from connectors.kafka.reader import KafkaRangeReader
from spark_jobs.job import Pieces, WindowJob
from spark_jobs.raw_values import without_values
from spark_jobs.read.decode import change_decoder


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
