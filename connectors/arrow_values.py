"""The bytes of a string or binary Arrow column's values, read straight from its buffers, and a
column made back from such bytes: what the column-wise readers (base64, the JSON reader's lines,
MySQL's literals) share, without a Python object per value."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def value_bytes(column: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(the bytes of every value, one after another; each value's start and end in them, as int64)
    of a string or binary column: its slice's values only, nulls as empty."""
    _validity, offsets, data = column.buffers()
    wide = pa.types.is_large_string(column.type) or pa.types.is_large_binary(column.type)
    bounds = np.frombuffer(offsets, dtype=np.int64 if wide else np.int32)[
        column.offset:column.offset + len(column) + 1].astype(np.int64)
    raw = (np.frombuffer(data, dtype=np.uint8)[bounds[0]:bounds[-1]] if data is not None
           else np.zeros(0, dtype=np.uint8))
    return raw, bounds - bounds[0]


def from_value_bytes(kind: pa.DataType, data: np.ndarray, bounds: np.ndarray,
                     validity: pa.Array | None = None) -> pa.Array:
    """A ``kind`` (string or binary) column of the values ``data[bounds[i]:bounds[i + 1]]``, null where
    ``validity`` (an array of the same length) is."""
    out = pa.Array.from_buffers(kind, len(bounds) - 1,
                                [None, pa.py_buffer(bounds.astype(np.int32)), pa.py_buffer(data)])
    if validity is None or not validity.null_count:
        return out
    return pc.if_else(validity.is_valid(), out, pa.nulls(len(out), kind))
