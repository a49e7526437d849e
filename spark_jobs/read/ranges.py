"""The read task: a window's partition ranges read from Kafka and, on request, decoded
(spark_jobs/read/decode.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pyarrow as pa

from connectors import faults
from connectors.kafka.reader import KafkaRangeReader
from spark_jobs.read.decode import as_maps, change_decoder
from spark_jobs.job import Pieces, WindowJob


def reader(job: WindowJob, pieces: Pieces, decode: bool = False,
           typed: bool = False) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The read task; with ``decode``, it also decodes what it read into changes, by the pipeline's
    source.format (connectors/formats.py: values read by their schema, or by the declared columns).
    The images stay typed with ``typed`` (the records stay in the worker: spark_jobs/window.py);
    else they go to Spark as map<string,string> of their exact texts (DECODED_SPARK_COLUMNS)."""
    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        reader = KafkaRangeReader(job.consumer_conf)
        decoder = change_decoder(job) if decode else None
        for batch in batches:
            for idx in batch.column("idx").to_pylist():
                ranges = list(pieces[idx])  # several in a small window, or a split one (job.read_pieces)
                for raw in reader.read_ranges(ranges, midway=lambda: faults.checkpoint("during_read", job.faults)):
                    if decoder is None:
                        yield raw
                    elif typed:
                        yield decoder.decode_batch(raw)
                    else:
                        yield as_maps(decoder.decode_batch(raw))
    return read
