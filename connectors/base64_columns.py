"""Base64 over whole Arrow columns, with numpy: the binary and spatial values of Debezium's rows
(BLOB, BINARY, geometry's WKB, BIT's bytes) come as base64 text, and decoding them one Python call
per value was a few per cent of a real-shaped read task (py-spy, issue 41).

:func:`decode` reads a column of standard base64 (RFC 4648, padded, as Debezium writes it) into
bytes, or returns None when a value is not exactly that (a character outside the alphabet, a length
that is not a multiple of four, padding anywhere but at the end): the caller then takes its per-value
path, which says what is wrong. The result equals ``base64.b64decode(value, validate=True)`` per value
(tests/unit/connectors/test_base64_columns.py). :func:`encode` is ``base64.b64encode`` per value.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from connectors.arrow_values import from_value_bytes, value_bytes

_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_PAD = 64
_INVALID = 255
_SEXTETS = np.full(256, _INVALID, dtype=np.uint8)
_SEXTETS[np.frombuffer(_ALPHABET, dtype=np.uint8)] = np.arange(64, dtype=np.uint8)
_SEXTETS[ord("=")] = _PAD
_LETTERS = np.frombuffer(_ALPHABET, dtype=np.uint8)


def decode(column: pa.Array | pa.ChunkedArray) -> pa.Array | None:
    """A string (or binary) column of base64 -> its bytes (binary); nulls stay null. None: a value
    is not padded standard base64 (the caller reads the column value by value)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    raw, bounds = value_bytes(column)
    lengths = np.diff(bounds)
    if len(raw) % 4 or np.any(lengths % 4):
        return None
    sextets = _SEXTETS[raw]
    if np.any(sextets == _INVALID):
        return None
    pads = np.zeros(len(lengths), dtype=np.int64)
    padded = sextets == _PAD
    if padded.any():
        ends = bounds[1:][lengths > 0]
        last, second = padded[ends - 1], padded[ends - 2]
        if np.count_nonzero(padded) != np.count_nonzero(last) + np.count_nonzero(second) or np.any(second & ~last):
            return None  # padding inside a value, or "x=" before a letter
        pads[lengths > 0] = last.astype(np.int64) + second
    quads = np.where(padded, 0, sextets).reshape(-1, 4).astype(np.uint32)
    word = quads[:, 0] << 18 | quads[:, 1] << 12 | quads[:, 2] << 6 | quads[:, 3]
    triples = np.stack([word >> 16, word >> 8 & 0xFF, word & 0xFF], axis=1).astype(np.uint8).reshape(-1)
    decoded = lengths // 4 * 3 - pads
    out_bounds = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(decoded, out=out_bounds[1:])
    if pads.any():  # the padding's bytes left out: each value's last one or two
        keep = np.ones(len(triples), dtype=bool)
        full_ends = np.cumsum(lengths // 4 * 3)
        for n in (1, 2):
            keep[full_ends[pads >= n] - n] = False
        triples = triples[keep]
    return from_value_bytes(pa.binary(), triples, out_bounds, column)


def encode(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A binary column -> its values as padded standard base64 (string); nulls stay null."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    raw, bounds = value_bytes(column)
    lengths = np.diff(bounds)
    groups = -(-lengths // 3)  # three bytes a group, the last one padded with zeros
    starts = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(groups * 3, out=starts[1:])
    padded = np.zeros(int(starts[-1]), dtype=np.uint8)
    if len(raw):
        owner = np.repeat(np.arange(len(lengths)), lengths)
        padded[starts[:-1][owner] + (np.arange(len(raw)) - bounds[:-1][owner])] = raw
    triples = padded.reshape(-1, 3).astype(np.uint32)
    word = triples[:, 0] << 16 | triples[:, 1] << 8 | triples[:, 2]
    letters = _LETTERS[np.stack([word >> 18, word >> 12 & 63, word >> 6 & 63, word & 63], axis=1)].reshape(-1)
    text_bounds = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(groups * 4, out=text_bounds[1:])
    short = (3 - lengths % 3) % 3  # the '=' at the end of a value whose last group is short
    for n in (1, 2):
        letters[text_bounds[1:][short >= n] - n] = ord("=")
    return from_value_bytes(pa.string(), letters, text_bounds, column)
