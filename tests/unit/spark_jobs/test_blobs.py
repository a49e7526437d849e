"""spark_jobs/blobs.py: what read tasks hand the JVM stays in blobs of bounded size."""

from __future__ import annotations

import pyarrow as pa

from spark_jobs import blobs


def test_wide_rows_are_packed_in_blobs_of_bounded_bytes_and_unpack_whole() -> None:
    value = b"x" * 10_000  # a Debezium value with its schema: ~10 kB a record
    table = pa.table({"offset": pa.array(range(5_000), pa.int64()), "value": pa.array([value] * 5_000, pa.binary())})
    packed = list(blobs.pack(table))
    assert len(packed) > 1 and max(len(b) for b in packed) <= blobs.BLOB_BYTES * 1.05
    assert blobs.unpack(packed).equals(table)


def test_narrow_rows_keep_blob_rows_per_blob_and_an_empty_table_one_blob() -> None:
    table = pa.table({"offset": pa.array(range(45_000), pa.int64())})
    assert [pa.ipc.open_stream(b).read_all().num_rows for b in blobs.pack(table)] == [20_000, 20_000, 5_000]
    empty = list(blobs.pack(table.slice(0, 0)))
    assert len(empty) == 1 and blobs.unpack(empty).num_rows == 0
