"""Maxwell's JSON -> the window's change rows (``source.format: maxwell``; the change model is
connectors/changes.py).

A Maxwell row (docs/docs/dataformat.md of zendesk/maxwell) is one row of one table: ``database``,
``table``, ``type`` (insert, update, delete; bootstrap-insert for the rows of a bootstrap, between a
bootstrap-start and a bootstrap-complete that carry no row; DDL types such as table-alter with
``--output_ddl``), ``ts`` (the binlog event's time, seconds), ``xid``, ``xoffset`` (with
``--output_xoffset``), ``commit``, ``data`` (the whole row: after the change, or the deleted row),
``old`` (an update's changed columns, their previous values), and optionally ``primary_key`` and
``primary_key_columns``. The Kafka key is ``{"database", "table", "pk.<column>": value…}``.

Maxwell writes JSON types (numbers, strings; base64 for binary columns; an array for a SET; the
document itself for a JSON column), but no column types: values are read by the sink's declared
columns (connectors/mysql/values.py), and as written where none is declared. A chain reads them
typed (connectors/row_types.py): by a declared column's type, else as the JSON has them (integers
int64, a number with a fraction a decimal of its written scale; dates and datetimes are strings).

Versions (``source_ts_ms``) come from ``ts`` in ms; ``ts`` has second resolution, so the changes of
one second keep their log order (Maxwell writes in binlog order, ``xid`` then ``xoffset``) by
offset.
"""

from __future__ import annotations

import msgspec

from connectors.changes import (
    JSON_DECODE,
    Change,
    RecordError,
    RowDecoder,
    bigint,
    json_object,
    operation_changes,
    text,
    version_of,
)

FORMAT = "Maxwell"
OPERATIONS = {"insert": "insert", "bootstrap-insert": "insert", "update": "update", "delete": "delete"}
NO_ROW = ("bootstrap-start", "bootstrap-complete")  # markers around a bootstrap's rows: no change
DDL = ("database-create", "database-alter", "database-drop", "table-create", "table-alter", "table-drop")


class MaxwellDecoder(RowDecoder):
    def decode_record(self, offset: int, key: bytes | None, value: bytes | None, topic: str) -> list[Change]:
        msg = json_object(value, FORMAT)
        kind, database, table = msg.get("type"), msg.get("database"), msg.get("table")
        if kind in NO_ROW:
            return [Change(source_db=text(database), source_table=text(table))]  # read, counted, nothing to apply
        if kind in DDL:  # read and counted; a table follows its declared columns (Maxwell's rows carry no types)
            return [Change(source_db=text(database), source_table=text(table))]
        if kind not in OPERATIONS:
            raise RecordError("transform", f"unknown Maxwell type {kind!r} (expected insert, update, delete or "
                                           "bootstrap-insert)")
        if not isinstance(database, str) or not isinstance(table, str):
            raise RecordError("transform", "fields 'database' and 'table': expected the source database and table "
                                           f"names (strings), got {database!r} and {table!r}")
        data, old = msg.get("data"), msg.get("old") or {}
        if not isinstance(data, dict) or not data:
            raise RecordError("transform", f"field 'data': expected the row (an object) of a Maxwell {kind}")
        if not isinstance(old, dict):
            raise RecordError("transform", "field 'old': expected an object of the changed columns' previous values")
        ts = bigint(msg.get("ts"))
        version = version_of(self.versioning, offset, ts * 1000 if ts is not None else None,
                             "no 'ts' (the binlog event's time, seconds) to version the change by (versioning: "
                             "source_ts_ms)")
        op = OPERATIONS[kind]
        columns = msg.get("primary_key_columns")
        own = frozenset(c for c in columns if isinstance(c, str)) if isinstance(columns, list) else frozenset()
        keys = self.key_fields | own | _key_fields(key)
        before = {**data, **old} if op == "update" else data if op == "delete" else None
        changes = operation_changes(op, before, data if op != "delete" else None, keys, self.read, self.need_json,
                                    version, self.typing(), source_db=database, source_table=table)
        if kind == "bootstrap-insert":  # a snapshot read of the row, as Debezium's op r
            for change in changes:
                change.source_op = "r"
        return changes


def _key_fields(key: bytes | None) -> frozenset[str]:
    """The primary key columns Maxwell's Kafka key names: ``{"database", "table", "pk.<column>": …}``."""
    if key is None:
        return frozenset()
    try:
        doc = JSON_DECODE.decode(key)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        return frozenset()
    return frozenset(k[3:] for k in doc if k.startswith("pk.")) if isinstance(doc, dict) else frozenset()
