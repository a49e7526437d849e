"""Debezium's binary logical types read a column at a time (issue 41): a geometry's {wkb, srid} as
MySQL's internal form in base64 (connectors/debezium/types.geometry_read), and io.debezium.data.Bits
as its number (types.bits_read), for the sinks' texts (not documents: those keep the per-value
reading). None where a column holds what those readers would refuse or read otherwise (a value they
raise on, a BIT wider than 64): the caller reads it value by value, which names the bad value.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connectors import base64_columns
from connectors.arrow_values import from_value_bytes, value_bytes
from connectors.debezium.types import bits_read, geometry_read


def texts(values: pa.Array, convert: Any) -> pa.Array | None:
    """The column's texts as ``convert`` gives them value by value, or None (read it so)."""
    read = getattr(convert, "read", None)
    if read is geometry_read:
        return _geometry(values)
    if read is bits_read:
        return _bits(values)
    return None


def _geometry(values: pa.Array) -> pa.Array | None:
    """base64(SRID as 4 bytes little-endian + WKB), a null struct null."""
    if not pa.types.is_struct(values.type) or values.type.get_field_index("wkb") < 0:
        return None
    present = values.is_valid()
    wkb_text = values.field("wkb")
    if not pa.types.is_string(wkb_text.type) or pc.any(pc.and_(present, wkb_text.is_null())).as_py():
        return None  # a geometry without its WKB text: the per-value reading refuses it
    srid_at = values.type.get_field_index("srid")
    srid = (np.zeros(len(values), dtype=np.int64) if srid_at < 0 else
            pc.fill_null(values.field("srid"), 0).to_numpy(zero_copy_only=False))
    if srid.dtype.kind != "i" or np.any((srid < 0) | (srid >= 1 << 32)):
        return None
    wkb = base64_columns.decode(pc.fill_null(wkb_text, ""))
    if wkb is None:
        return None
    raw, bounds = value_bytes(wkb)
    lengths = np.diff(bounds) + 4
    out_bounds = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out_bounds[1:])
    out = np.empty(int(out_bounds[-1]), dtype=np.uint8)
    heads = out_bounds[:-1, None] + np.arange(4)
    out[heads] = srid.astype("<u4").view(np.uint8).reshape(-1, 4)
    body = np.ones(len(out), dtype=bool)
    body[heads.reshape(-1)] = False
    out[body] = raw
    return base64_columns.encode(from_value_bytes(pa.binary(), out, out_bounds, values))  # a null struct: null


def _bits(values: pa.Array) -> pa.Array | None:
    """A BIT's number as text: from Debezium's bytes (base64, least significant first), or a number."""
    if pa.types.is_integer(values.type):
        return pc.cast(values, pa.string())
    if not pa.types.is_string(values.type):
        return None
    data = base64_columns.decode(values)
    if data is None:
        return None
    raw, bounds = value_bytes(data)
    lengths = np.diff(bounds)
    if np.any(lengths > 8):
        return None  # wider than 64 bits: Python's integers read it
    padded = np.zeros((len(lengths), 8), dtype=np.uint8)
    rows = np.repeat(np.arange(len(lengths)), lengths)
    padded[rows, np.arange(len(raw)) - bounds[:-1][rows]] = raw
    numbers = pa.array(padded.view("<u8").reshape(-1), pa.uint64())
    return pc.if_else(values.is_valid(), pc.cast(numbers, pa.string()), pa.nulls(len(values), pa.string()))
