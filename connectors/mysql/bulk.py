"""Arrow columns -> the rows of an ``INSERT … VALUES (…), (…)``, column-wise with Arrow compute
kernels (no Python object per row or per value): every value a quoted, escaped string literal
(MySQL converts it to the column's type as it would a bound parameter), ``NULL`` for null. Binary
columns (BLOB, BINARY, BIT, spatial in MySQL's internal form) are hex literals ``X'…'``.
A set is staged this way where ``LOAD DATA LOCAL`` is refused or would coerce a value
(connectors/mysql/local_load.py), and the row path's batches always are.

Escaping follows MySQL's string-literal rules with backslash escapes on (the sink's session sets no
NO_BACKSLASH_ESCAPES): no value can end its literal early.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from connectors.arrow_values import value_bytes

# order matters: the backslash first, so the escapes added after it are not escaped again
_SQL_ESCAPES = (("\\", "\\\\"), ("'", "\\'"), ("\x00", "\\0"), ("\x1a", "\\Z"))


class NotBulkLoadable(TypeError):
    """A column this encoder does not write: the caller takes the row path."""


def as_text(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A column as UTF-8 text, nulls kept: numbers and decimals as MySQL reads them, booleans 1/0."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    kind = column.type
    if pa.types.is_string(kind):
        return column
    if pa.types.is_large_string(kind):
        return column.cast(pa.string())
    if pa.types.is_boolean(kind):
        column = column.cast(pa.int8())
    if pa.types.is_null(kind):
        return pa.nulls(len(column), pa.string())
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        raise NotBulkLoadable(f"{kind} columns are not bulk-loaded")
    return pc.cast(column, pa.string())


def _escape(text: pa.Array) -> pa.Array:
    """Each value with MySQL's escapes. Most columns need none: one search of the column's bytes per
    escaped character (memchr speed) finds that, where a kernel call per character over the values
    was ~1/8 of a read task's time on real-shaped rows (py-spy)."""
    raw = value_bytes(text)[0].tobytes()  # the values' bytes: a slice's only
    for plain, escaped in _SQL_ESCAPES:
        if raw.find(plain.encode()) >= 0 and pc.any(pc.match_substring(text, plain)).as_py():
            text = pc.replace_substring(text, plain, escaped)
    return text


def _payload(lines: pa.Array) -> bytes:
    """The concatenation of every line, straight from the array's data buffer."""
    lines = lines.combine_chunks() if isinstance(lines, pa.ChunkedArray) else lines
    if lines.null_count:
        raise ValueError("a line is null")  # every field was filled; a null line is a bug
    return value_bytes(lines)[0].tobytes()


def _literals(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Each value as a SQL literal: 'text' or X'hex' (binary), NULL for null."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
        hexed = pa.array([None if v is None else v.hex() for v in column.to_pylist()], pa.string())
        return pc.fill_null(pc.binary_join_element_wise(pa.scalar("X'"), hexed, pa.scalar("'"), ""), "NULL")
    return pc.fill_null(pc.binary_join_element_wise(pa.scalar("'"), _escape(as_text(column)), pa.scalar("'"), ""),
                        "NULL")


def values(columns: Sequence[pa.Array]) -> bytes:
    """Rows for ``INSERT … VALUES <rows>``: ``('a','1',NULL),('b','2',NULL)``."""
    fields = [_literals(c) for c in columns]
    row = pc.binary_join_element_wise(*fields, ",") if len(fields) > 1 else fields[0]
    return _payload(pc.binary_join_element_wise(pa.scalar("("), row, pa.scalar("),"), ""))[:-1]
