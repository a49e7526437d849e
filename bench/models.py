"""The two kinds of rows the benchmark writes, behind one interface: what each measured path needs of them.

``SMALL``: the orders rows of bench/workload.py (5 columns, schemaless events). ``REAL``: the 33-column
rows of bench/realrows.py (Debezium's MySQL connector with the JsonConverter's schemas). Each says
the sink's declared columns, the table the baselines create, the bare upsert and LOAD DATA, the
Elasticsearch document, and the checksum (row count, sum of CRC32 of a canonical row text) that every
sink is checked by: computed inside MySQL, from Elasticsearch's documents, and from the events.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from bench import realrows, workload

Row = tuple[Any, ...]
_JSON = msgspec.json.Encoder(decimal_format="number")  # a DECIMAL as an exact JSON number, as cdcflow sends it


@dataclass(frozen=True)
class RowModel:
    name: str
    columns: list[dict[str, Any]]  # the sink's declared columns (name, type, field, nullable)
    es_fields: list[str]  # the document fields the checksum reads

    def ddl(self, table: str) -> str:
        raise NotImplementedError

    def checksum_sql(self, table: str) -> str:
        """Row count and checksum of a table (time_zone +00:00; ``%`` doubled, run with parameters)."""
        raise NotImplementedError

    def checksum(self, rows: list[Row]) -> tuple[int, int]:
        raise NotImplementedError

    def es_checksum(self, docs: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
        raise NotImplementedError

    def upsert_sql(self, table: str) -> str:
        raise NotImplementedError

    def params(self, row: Row) -> Row:
        raise NotImplementedError

    def load_sql(self, table: str, path: str) -> str:
        raise NotImplementedError

    def load_line(self, row: Row) -> str:
        raise NotImplementedError

    def es_doc(self, row: Row) -> bytes:
        raise NotImplementedError


class SmallModel(RowModel):
    """bench/workload.py's orders: (id, customer, status, amount, updated_ms)."""

    def ddl(self, table: str) -> str:
        return (f"CREATE TABLE `{table}` (id BIGINT NOT NULL PRIMARY KEY, customer VARCHAR(32), "
                "status VARCHAR(16), amount DECIMAL(10,2), updated_at BIGINT) ENGINE=InnoDB")

    def checksum_sql(self, table: str) -> str:
        return workload.MYSQL_CHECKSUM.format(table=table)

    def checksum(self, rows: list[Row]) -> tuple[int, int]:
        return workload.checksum(rows)

    def es_checksum(self, docs: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
        return workload.checksum([tuple(d[f] for f in self.es_fields) for d in docs])

    def upsert_sql(self, table: str) -> str:
        return (f"INSERT INTO `{table}` (id, customer, status, amount, updated_at) VALUES (%s, %s, %s, %s, %s) "
                "ON DUPLICATE KEY UPDATE customer = VALUES(customer), status = VALUES(status), "
                "amount = VALUES(amount), updated_at = VALUES(updated_at)")

    def params(self, row: Row) -> Row:
        return row

    def load_sql(self, table: str, path: str) -> str:
        return (f"LOAD DATA LOCAL INFILE '{path}' INTO TABLE `{table}` CHARACTER SET utf8mb4 "
                "(id, customer, status, amount, updated_at)")

    def load_line(self, row: Row) -> str:
        return "\t".join(str(v) for v in row)

    def es_doc(self, row: Row) -> bytes:
        return json.dumps(dict(zip(self.es_fields, row, strict=True))).encode()


class RealModel(RowModel):
    """bench/realrows.py's 33 columns of every MySQL type."""

    def ddl(self, table: str) -> str:
        return realrows.ddl(table)

    def checksum_sql(self, table: str) -> str:
        return realrows.MYSQL_CHECKSUM.format(table=table)

    def checksum(self, rows: list[Row]) -> tuple[int, int]:
        return realrows.checksum(rows)

    def es_checksum(self, docs: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
        return len(docs), sum(zlib.crc32(realrows.es_text(d).encode()) for d in docs)

    def upsert_sql(self, table: str) -> str:
        return realrows.upsert_sql(table)

    def params(self, row: Row) -> Row:
        return realrows.params(row)

    def load_sql(self, table: str, path: str) -> str:
        return realrows.load_columns(table, path)

    def load_line(self, row: Row) -> str:
        return realrows.load_fields(row)

    def es_doc(self, row: Row) -> bytes:
        return _JSON.encode(realrows.es_doc(row))


SMALL = SmallModel("small", [{"name": "id", "type": "BIGINT"}, {"name": "customer", "type": "VARCHAR(32)"},
                             {"name": "status", "type": "VARCHAR(16)"}, {"name": "amount", "type": "DECIMAL(10,2)"},
                             {"name": "updated_at", "type": "BIGINT", "field": "updated_ms"}],
                   ["id", "customer", "status", "amount", "updated_ms"])
REAL = RealModel("real", realrows.DECLARED, realrows.NAMES)
