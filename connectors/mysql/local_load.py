"""A set staged by ``LOAD DATA LOCAL INFILE`` from memory (issue 41): the server parses tab-separated
lines instead of a multi-row ``INSERT``'s literals. On real-shaped rows (33 columns, ~1 KB) it takes
about half the server time and half the client time of the INSERTs (docs/benchmarks.md).

What makes it safe to use where ``connectors/mysql/bulk.py``'s INSERTs were:

* **No file of the worker can be read.** The connection offers LOCAL (the capability flag), but
  PyMySQL answers a server's request for a file only while :func:`load_data` runs its own
  statement, and then it sends the bytes of this set from memory, whatever name the server asks for
  (:class:`_FromMemory`); at any other time PyMySQL refuses the request, as it does by default.
* **Nothing is coerced.** With LOCAL, MySQL turns a data error (a value too long, a NULL in a NOT
  NULL column, text in a number) into a warning and stores a changed value, even in strict mode.
  The set is loaded into the temporary staging table, never the target: when the load raises any
  warning, the stage is emptied and the set staged again by INSERT, where strict mode rejects the
  value and the sink isolates the row for the dead-letter topic, as before.
* **A server that refuses LOCAL** (MySQL 8's default ``local_infile=OFF``, or a client-side ban)
  is asked once per process: the sets go by INSERT, as before.

Binary columns (BLOB, BIT, spatial) travel as hex and are decoded by the statement (``UNHEX``), as
the INSERT's ``X'…'`` literals do; every other value as its text, with MySQL's conversions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pymysql
import pymysql.connections

from connectors.arrow_values import value_bytes
from connectors.mysql.bulk import as_text
from connectors.mysql.sql import quote

# the server refuses LOCAL: ER_NOT_ALLOWED_COMMAND (MySQL 5.7, older MariaDB), ER_CLIENT_LOCAL_FILES_DISABLED
# (MySQL 8), ER_LOAD_INFILE_CAPABILITY_DISABLED (MariaDB 10.5+), CR_LOAD_DATA_LOCAL_INFILE_REJECTED
REFUSED = frozenset({1148, 3948, 4166, 2068})
NAME = "cdcflow-set"  # the file name the statement gives; its bytes come from memory
CHUNK = 64 * 1024  # bytes per packet of the file's contents
_DATA = "_cdcflow_local_data"  # the connection's attribute that holds the set's bytes during the load
# the TSV's escapes: the backslash first, so the escapes added after it are not escaped again
_ESCAPES = ((b"\\", b"\\\\"), (b"\t", b"\\t"), (b"\n", b"\\n"))
_NULL = pa.scalar(b"\\N", pa.binary())

_refused: set[tuple[str, int]] = set()  # the servers (host, port) that refused LOCAL, in this process


class _FromMemory(pymysql.connections.LoadLocalFile):
    """PyMySQL's sender of a LOCAL file: during :func:`load_data`, the set's bytes (no file is
    opened); otherwise PyMySQL's own behaviour (which refuses unless the connection allows LOCAL)."""

    def send_data(self) -> None:
        data = getattr(self.connection, _DATA, None)
        if data is None:
            super().send_data()
            return
        conn = self.connection
        try:
            view = memoryview(data)
            for start in range(0, len(view), CHUNK):
                conn.write_packet(view[start:start + CHUNK])
        finally:
            if not conn._closed:
                conn.write_packet(b"")  # the end of the file


pymysql.connections.LoadLocalFile = _FromMemory  # type: ignore[misc]  # read at each request by PyMySQL


def _field(column: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, bool]:
    """A column's fields as bytes (``\\N`` for null, TSV escapes), and whether it is hex (binary)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    binary = pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type)
    if binary:
        text = pa.array([None if v is None else v.hex() for v in column.to_pylist()], pa.string())
    else:
        text = as_text(column)
    raw = text.cast(pa.binary())
    data = value_bytes(raw)[0].tobytes()
    for plain, escaped in _ESCAPES:
        if data.find(plain) >= 0:
            raw = pc.replace_substring(raw, plain, escaped)
    return pc.fill_null(raw, _NULL), binary


def tsv(columns: Sequence[pa.Array | pa.ChunkedArray]) -> tuple[bytes, list[bool]]:
    """The rows as LOAD DATA's default format (tab-separated fields, a line each, backslash escapes),
    and which columns are hex."""
    fields = [_field(c) for c in columns]
    tab, end = pa.scalar(b"\t", pa.binary()), pa.scalar(b"\n", pa.binary())
    line = pc.binary_join_element_wise(*(f for f, _b in fields), tab) if len(fields) > 1 else fields[0][0]
    line = pc.binary_join_element_wise(line, pa.scalar(b"", pa.binary()), end)
    return value_bytes(line)[0].tobytes(), [b for _f, b in fields]


def statement(stage: str, names: Sequence[str], hexed: Sequence[bool]) -> str:
    targets = [f"@h{i}" if h else quote(n) for i, (n, h) in enumerate(zip(names, hexed, strict=True))]
    sets = [f"{quote(n)} = UNHEX(@h{i})" for i, (n, h) in enumerate(zip(names, hexed, strict=True)) if h]
    return (f"LOAD DATA LOCAL INFILE '{NAME}' INTO TABLE {quote(stage)} CHARACTER SET utf8mb4 "
            "FIELDS TERMINATED BY '\\t' ESCAPED BY '\\\\' LINES TERMINATED BY '\\n' "
            f"({', '.join(targets)})" + (f" SET {', '.join(sets)}" if sets else ""))


def load_data(cursor: Any, stage: str, names: Sequence[str], columns: Sequence[pa.Array | pa.ChunkedArray],
              payload_bytes: int) -> bool:
    """Stage the rows into the (empty) temporary table ``stage`` with LOAD DATA LOCAL, in loads of
    about ``payload_bytes`` each. False, with the stage empty, when the server refuses LOCAL or a
    value raised a warning: the caller stages the rows by INSERT."""
    conn = cursor.connection
    server = (getattr(conn, "host", ""), getattr(conn, "port", 0))
    if server in _refused:
        return False
    rows = len(columns[0])
    step = max(1, rows * payload_bytes // max(sum(c.nbytes for c in columns), 1))
    for start in range(0, rows, step):
        warnings = _load(cursor, stage, names, [c.slice(start, step) for c in columns], server)
        if warnings is None and start == 0:
            return False  # refused: nothing staged
        if warnings != 0:  # a value MySQL changed (or a refusal midway): the INSERT path rejects it instead
            cursor.execute(f"DELETE FROM {quote(stage)}")
            return False
    return True


def _load(cursor: Any, stage: str, names: Sequence[str], columns: Sequence[pa.Array | pa.ChunkedArray],
          server: tuple[str, int]) -> int | None:
    """One LOAD DATA LOCAL of ``columns``' rows: its warnings, or None when the server refused LOCAL."""
    conn = cursor.connection
    data, hexed = tsv(columns)
    setattr(conn, _DATA, data)
    allowed, conn._local_infile = conn._local_infile, True
    try:
        cursor.execute(statement(stage, names, hexed))
    except pymysql.MySQLError as exc:
        if not (exc.args and exc.args[0] in REFUSED):
            raise
        _refused.add(server)
        return None
    finally:
        conn._local_infile = allowed
        delattr(conn, _DATA)
    return int(cursor.warning_count)
