"""What a read task hands on: Arrow IPC blobs in Spark rows, bucketed for the write tasks.

The JVM holds a few large binary values, never the records: one packed row per blob (at most
``BLOB_ROWS`` rows and about ``BLOB_BYTES`` each) and one tally row per read task.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connectors import images

PACKED_SCHEMA = "task int, bucket int, kind string, target string, blob binary, info string"


TALLY, BAD, ROWS, CHANGES = "tally", "bad", "rows", "changes"  # the kinds of packed row
DELETES = "deletes"  # a table's deletes from a read task that wrote its upserts: the driver writes them last


BLOB_ROWS = 20_000  # rows per blob: a Spark row holds one blob, whatever the window's size


BLOB_BYTES = 16 << 20  # and about this many bytes at most: wide records (a schema in every value) made
# blobs of hundreds of MB, which the JVM copies several times on their way (50,000 records of a
# 33-column table with schemas exhausted the long-lived Spark's 1.5 GB heap)


def pack(table: pa.Table) -> Iterator[bytes]:
    rows = max(1, min(BLOB_ROWS, BLOB_BYTES * table.num_rows // max(table.nbytes, 1)))
    for start in range(0, max(table.num_rows, 1), rows):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table.slice(start, rows))
        yield sink.getvalue().to_pybytes()


def unpack(blobs: list[bytes]) -> pa.Table:
    return images.concat_tables([pa.ipc.open_stream(b).read_all() for b in blobs])


def packed(task: int, kind: str, target: str, blob: bytes | None = None, info: Any = None,
            bucket: int = 0) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"task": [task], "bucket": [bucket], "kind": [kind], "target": [target],
                                       "blob": [blob], "info": [None if info is None else json.dumps(info)]},
                                      schema=pa.schema([("task", pa.int32()), ("bucket", pa.int32()),
                                                        ("kind", pa.string()),
                                                        ("target", pa.string()), ("blob", pa.binary()),
                                                        ("info", pa.string())]))


def buckets(rows: pa.Table, columns: list[str], n: int) -> np.ndarray:
    """The write task of each row: a hash of its key (``columns``) modulo ``n``, the same in every
    read task (CRC-32 of the key's text: Python's own str hash differs between processes)."""
    if n <= 1 or not columns or not rows.num_rows:
        return np.zeros(rows.num_rows, dtype=np.int64)
    parts = [pc.cast(rows.column(c), pa.string()) for c in columns]
    joined = parts[0] if len(parts) == 1 else pc.binary_join_element_wise(*parts, "\x1f")
    return np.fromiter((zlib.crc32(k.encode()) if k is not None else 0 for k in joined.to_pylist()),
                       dtype=np.int64, count=rows.num_rows) % n


def bucketed(task: int, kind: str, target: str, rows: pa.Table, columns: list[str] | None,
              n: int) -> list[pa.RecordBatch]:
    """``rows`` packed per write task: all the rows of one key (``columns``) go to one write task, so
    that two tasks never write one key at once (a delete and an older upsert of a key, written by two
    tasks, could race past the tombstone). Without key columns, the rows stay with their read task."""
    if not rows.num_rows:
        return []
    if not columns or n <= 1:
        return [packed(task, kind, target, blob, bucket=task % max(n, 1)) for blob in pack(rows)]
    which = buckets(rows, columns, n)
    out = []
    for b in np.unique(which).tolist():
        out += [packed(task, kind, target, blob, bucket=b) for blob in pack(rows.filter(pa.array(which == b)))]
    return out
