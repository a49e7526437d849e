"""Canal's flat messages (canal.mq ``flatMessage: true``) -> the window's change rows
(``source.format: canal``; the change model is connectors/changes.py).

A flat message is one binlog event of one table (the fields of ``com.alibaba.otter.canal.protocol.FlatMessage``,
written by fastjson with nulls): ``type`` INSERT, UPDATE or DELETE, ``data`` one object per row the
statement changed, ``old`` (UPDATE) one object per row with the changed columns' previous values,
``mysqlType`` and ``sqlType`` per column, ``pkNames``, ``database``, ``table``, ``es`` (the binlog
event's time, ms), ``ts`` (when Canal built the message), ``id`` (Canal's batch id), and
``isDdl``/``sql`` for statements that change a table's definition (TRUNCATE among them).

A message of N rows becomes N changes, in the message's order. Canal writes every value as text;
each is read by its column's ``mysqlType`` (connectors/mysql/values.py): ``decimal(10,2)`` keeps its
digits and scale, ``datetime(6)`` its microseconds, ``bit(10)`` is its number, an ENUM's index and a
SET's bit mask (what the binlog holds, and Canal writes) become their members, binary values (bytes
as ISO-8859-1 characters) become base64; a chain reads them typed by ``mysqlType`` (else ``sqlType``,
the JDBC type codes): integers int64, FLOAT and DOUBLE float64, DECIMAL(p,s) a decimal of scale s, the
rest (dates too) their text (connectors/row_types.py). The ``mysqlType`` and ``pkNames`` also describe the table,
so a MySQL sink without declared columns can create it (``row_schema``), and an index gets a mapping.

Versions (``source_ts_ms``) come from ``es``; ``es`` has the binlog's second resolution, so the
changes of one second keep their log order by offset, and the rows of one message by ``row_index``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from connectors import row_types
from connectors.changes import (
    JSON_ENCODE,
    TRUNCATE,
    Change,
    RecordError,
    RowDecoder,
    bigint,
    json_object,
    operation_changes,
    text,
    version_of,
)
from connectors.debezium.types import ColumnHint, Converter
from connectors.mysql.types import ColumnType, TypeSyntaxError, parse_type
from connectors.mysql.values import column_reader, describe_table, read_row

FORMAT = "Canal flat"
OPERATIONS = {"INSERT": "insert", "UPDATE": "update", "DELETE": "delete"}
MAX_SCHEMAS = 256  # compiled column readers kept per task


class _Table:
    """The readers of one ``mysqlType`` (and ``pkNames``), and the table they describe."""

    def __init__(self, mysql_types: Mapping[str, Any], pk_names: list[str], sql_types: Mapping[str, Any]) -> None:
        types: list[tuple[str, ColumnType]] = []
        self.readers: dict[str, Converter] = {}
        self.arrow: dict[str, pa.DataType | None] = {}  # the values' types a chain reads (connectors/row_types.py)
        self.sql_types = {n: sql_types.get(n) for n in mysql_types}
        for name, declared in mysql_types.items():
            try:
                column = parse_type(str(declared))
            except TypeSyntaxError:
                continue  # read as text, typed by its sqlType; no table can be described from it
            types.append((name, column))
            self.arrow[name] = row_types.of_column(column)
            self.readers[name] = column_reader(column, binary="latin1", indexed=True)
        self.schema_id: str | None = None
        self.row_schema: str | None = None
        if len(types) == len(mysql_types) and types:
            self.row_schema = JSON_ENCODE.encode(describe_table(types, pk_names)).decode("utf-8")
            self.schema_id = hashlib.blake2b(self.row_schema.encode(), digest_size=8).hexdigest()

    def read(self, row: Mapping[str, Any]) -> tuple[dict[str, str | None], dict[str, Any]]:
        return read_row(self.readers, row)

    def types_of(self, row: Mapping[str, Any]) -> dict[str, pa.DataType | None]:
        """A row's fields' types: by ``mysqlType``, else by ``sqlType`` (a JDBC type code)."""
        arrow = self.arrow
        if len(arrow) == len(self.sql_types) and all(k in arrow for k in row):
            return arrow  # one mapping for the rows of this mysqlType (images.from_texts reads it once)
        return {k: arrow[k] if k in arrow else row_types.of_sql_type(self.sql_types.get(k), v) for k, v in row.items()}


class CanalDecoder(RowDecoder):
    """Decodes a task's Canal flat messages; keeps the readers of the ``mysqlType`` it has seen."""

    def __init__(self, versioning: str, hints: Mapping[str, ColumnHint] | None = None, need_json: bool = True,
                 key_fields: frozenset[str] = frozenset()) -> None:
        super().__init__(versioning, hints, need_json, key_fields)  # pkNames add the message's own keys
        self._tables: dict[str, _Table] = {}
        self._described: set[str] = set()

    def _table(self, mysql_types: dict[str, Any], pk_names: list[str], sql_types: Any) -> _Table:
        sql_types = sql_types if isinstance(sql_types, dict) else {}
        cache_key = JSON_ENCODE.encode([mysql_types, pk_names, sql_types]).decode("utf-8")
        table = self._tables.get(cache_key)
        if table is None:
            if len(self._tables) >= MAX_SCHEMAS:
                self._tables.clear()
            table = self._tables[cache_key] = _Table(mysql_types, pk_names, sql_types)
        return table

    def decode_record(self, offset: int, key: bytes | None, value: bytes | None, topic: str) -> list[Change]:
        msg = json_object(value, FORMAT)
        kind, database, table = msg.get("type"), msg.get("database"), msg.get("table")
        if kind == "TRUNCATE" and isinstance(database, str) and isinstance(table, str):
            # the pipeline's truncate setting decides (connectors/changes.py)
            return [Change(TRUNCATE, version=version_of(self.versioning, offset, bigint(msg.get("es")),
                                                        "no 'es' (the binlog event's time, ms) to version the "
                                                        "truncate by (versioning: source_ts_ms)"),
                           source_db=database, source_table=table)]
        if msg.get("isDdl") is True:  # read and counted: the rows after it carry the new mysqlType, which the
            # pipeline's schema_changes policy applies to the tables made from them (docs/schema-changes.md)
            return [Change(source_db=text(database), source_table=text(table))]
        if kind not in OPERATIONS:
            raise RecordError("transform", f"unknown Canal type {kind!r} (expected INSERT, UPDATE or DELETE, or a "
                                           "statement with isDdl: true)")
        if not isinstance(database, str) or not isinstance(table, str):
            raise RecordError("transform", "fields 'database' and 'table': expected the source database and table "
                                           f"names (strings), got {database!r} and {table!r}")
        op = OPERATIONS[kind]
        data, old = msg.get("data"), msg.get("old")
        if not isinstance(data, list) or not data or not all(isinstance(r, dict) for r in data):
            raise RecordError("transform", f"field 'data': expected an array of row objects (one per row the {kind} "
                                           f"changed), got {JSON_ENCODE.encode(data)[:80].decode('utf-8', 'replace')}")
        if op == "update" and (not isinstance(old, list) or len(old) != len(data)
                               or not all(isinstance(r, dict) for r in old)):
            raise RecordError("transform", "field 'old': expected an array with one object per row of 'data' (the "
                                           "changed columns' previous values) in an UPDATE")
        mysql_types, pk_names = msg.get("mysqlType"), msg.get("pkNames") or []
        if not isinstance(mysql_types, dict) or not all(isinstance(t, str) for t in mysql_types.values()):
            raise RecordError("transform", "field 'mysqlType': expected an object of column -> MySQL type, got "
                                           f"{JSON_ENCODE.encode(mysql_types)[:80].decode('utf-8', 'replace')}")
        if not isinstance(pk_names, list) or not all(isinstance(k, str) for k in pk_names):
            raise RecordError("transform", f"field 'pkNames': expected an array of column names, got {pk_names!r}")
        version = version_of(self.versioning, offset, bigint(msg.get("es")),
                             "no 'es' (the binlog event's time, ms) to version the change by (versioning: "
                             "source_ts_ms)")
        reader = self._table(mysql_types, pk_names, msg.get("sqlType"))
        keys = self.key_fields | frozenset(pk_names)
        changes: list[Change] = []
        for i, row in enumerate(data):
            before = ({**row, **old[i]} if op == "update" else row) if op != "insert" else None
            changes += operation_changes(op, before, row if op != "delete" else None, keys, reader.read,
                                         self.need_json, version, reader.types_of if self.typed else None,
                                         source_db=database, source_table=table)
        if reader.schema_id is not None:
            for change in changes:
                change.schema_id = reader.schema_id
            if reader.schema_id not in self._described:
                self._described.add(reader.schema_id)
                changes[0].row_schema = reader.row_schema
        return changes
