"""Arrow columns -> the bytes MySQL loads, column-wise (no Python object per row or per value).

Two encodings of the same rows, both built with Arrow compute kernels:

* :func:`tsv` for ``LOAD DATA LOCAL INFILE`` with the default field options (tab-separated,
  backslash escapes, ``\\N`` for NULL);
* :func:`values` for ``INSERT … VALUES (…), (…)`` where ``LOCAL INFILE`` is off (MySQL 8's default):
  every value a quoted, escaped string literal (MySQL converts it to the column's type as it would a
  bound parameter), ``NULL`` for null.

Escaping follows MySQL's string-literal rules with backslash escapes on (the sink's session sets no
NO_BACKSLASH_ESCAPES): no value can end its literal or field early.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

# order matters: the backslash first, so the escapes added after it are not escaped again
_TSV_ESCAPES = (("\\", "\\\\"), ("\t", "\\t"), ("\n", "\\n"), ("\r", "\\r"), ("\x00", "\\0"))
_SQL_ESCAPES = (("\\", "\\\\"), ("'", "\\'"), ("\x00", "\\0"), ("\x1a", "\\Z"))


class NotBulkLoadable(TypeError):
    """A column this encoder does not write as text (binary): the caller takes the row path."""


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


def _escape(text: pa.Array, escapes: tuple[tuple[str, str], ...]) -> pa.Array:
    for plain, escaped in escapes:
        if pc.any(pc.match_substring(text, plain)).as_py():  # most columns need none of them
            text = pc.replace_substring(text, plain, escaped)
    return text


def _joined(fields: Sequence[pa.Array], sep: str, prefix: str = "", suffix: str = "") -> pa.Array:
    parts: list[pa.Array | pa.Scalar] = list(fields)
    if prefix:
        parts.insert(0, pa.scalar(prefix))
    if suffix:
        parts.append(pa.scalar(suffix))
    if len(parts) == 1:
        return parts[0]  # type: ignore[return-value]
    if prefix or suffix:  # the separator goes between fields only: join them first, then wrap
        inner = pc.binary_join_element_wise(*fields, sep) if len(fields) > 1 else fields[0]
        return pc.binary_join_element_wise(pa.scalar(prefix), inner, pa.scalar(suffix), "")
    return pc.binary_join_element_wise(*parts, sep)


def _payload(lines: pa.Array) -> bytes:
    """The concatenation of every line, straight from the array's data buffer."""
    lines = lines.combine_chunks() if isinstance(lines, pa.ChunkedArray) else lines
    if lines.null_count:
        raise ValueError("a line is null")  # every field was filled; a null line is a bug
    _validity, offsets, data = lines.buffers()
    bounds = memoryview(offsets).cast("i")  # int32 offsets of a string array
    start, end = bounds[lines.offset], bounds[lines.offset + len(lines)]
    return memoryview(data)[start:end].tobytes()


def tsv(columns: Sequence[pa.Array]) -> bytes:
    """Rows for ``LOAD DATA … FIELDS TERMINATED BY '\\t' ESCAPED BY '\\\\' LINES TERMINATED BY '\\n'``."""
    fields = [pc.fill_null(_escape(as_text(c), _TSV_ESCAPES), "\\N") for c in columns]
    return _payload(_joined(fields, "\t", suffix="\n"))


def values(columns: Sequence[pa.Array]) -> bytes:
    """Rows for ``INSERT … VALUES <rows>``: ``('a','1',NULL),('b','2',NULL)``."""
    fields = [pc.fill_null(pc.binary_join_element_wise(pa.scalar("'"), _escape(as_text(c), _SQL_ESCAPES),
                                                       pa.scalar("'"), ""), "NULL") for c in columns]
    return _payload(_joined(fields, ",", prefix="(", suffix="),"))[:-1]


def slices(table: pa.Table, max_rows: int) -> Iterator[pa.Table]:
    for start in range(0, table.num_rows, max_rows):
        yield table.slice(start, max_rows)
