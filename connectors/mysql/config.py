"""The MySQL sink's config model (``sinks: - type: mysql``) and its declared columns."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from connectors.models import ConnId, Identifier, StrictModel
from connectors.mysql.types import EXPECTED as MYSQL_TYPES
from connectors.mysql.types import ColumnType, TypeSyntaxError, parse_type

# what a declared column's ``encoding`` may be, by the kind of column (for values without a schema)
ENCODINGS = {"binary": ("base64", "hex", "text"), "decimal": ("base64", "text"), "date": ("days", "text"),
             "time": ("ms", "us", "ns", "text")}


def _encoding_kind(column_type: ColumnType) -> str | None:
    if column_type.is_binary:
        return "binary"
    if column_type.base == "DECIMAL":
        return "decimal"
    if column_type.base == "DATE":
        return "date"
    if column_type.base in ("TIME", "DATETIME", "TIMESTAMP"):
        return "time"
    return None


class MySqlColumn(StrictModel):
    name: Identifier
    type: str = Field(description="MySQL column type, as MySQL's grammar has it: BIGINT UNSIGNED, TINYINT(1), "
                                  "DECIMAL(10,2), DATETIME(6), ENUM('a','b'), VARBINARY(16), POINT …")
    field: str | None = Field(default=None, description="Field of the row image; default: name.")
    nullable: bool = True
    encoding: Literal["base64", "hex", "text", "days", "ms", "us", "ns"] | None = Field(
        default=None, description="How a value without a schema is written (streams with schemas.enable=false): "
        "binary columns base64 (default), hex or text; DECIMAL base64 (Debezium's precise mode) or text (default); "
        "DATE days or text; TIME/DATETIME/TIMESTAMP ms, us or ns since the epoch (midnight for TIME), or text.")

    @field_validator("type")
    @classmethod
    def _sql_type(cls, value: str) -> str:
        try:
            return parse_type(value.strip()).sql
        except TypeSyntaxError as exc:
            raise ValueError(f"expected a MySQL type ({exc}); the column types are {MYSQL_TYPES}") from None

    @model_validator(mode="after")
    def _encoding_fits(self) -> MySqlColumn:
        if self.encoding is None:
            return self
        kind = _encoding_kind(parse_type(self.type))
        allowed = ENCODINGS.get(kind or "", ())
        if self.encoding not in allowed:
            raise ValueError(f"encoding {self.encoding!r} does not apply to a {self.type} column"
                             + (f" (expected one of {', '.join(allowed)})" if allowed else
                                " (only binary, DECIMAL, DATE, TIME, DATETIME and TIMESTAMP columns take one)"))
        return self

    @property
    def source_field(self) -> str:
        return self.field or self.name

    @property
    def column_type(self) -> ColumnType:
        return parse_type(self.type)


KAFKA_PK_COLUMNS = ("__connect_topic", "__connect_partition", "__connect_offset")
# what a MySQL sink's table name may route by, as the Debezium JDBC sink's collection.name.format
TABLE_PLACEHOLDERS = ("{topic}", "{source.table}", "{source.db}")


MAX_MYSQL_COLUMNS = 1017  # InnoDB's limit on a table's columns (MySQL and MariaDB)


class MySqlSinkConfig(StrictModel):
    """Upserts changes and deletes deleted keys in MySQL tables."""

    type: Literal["mysql"]
    name: str = "mysql"
    conn_id: ConnId = "cdcflow_mysql"
    table: Identifier = Field(description="Table name, or a template: '{topic}' is replaced by the record's topic "
                                          "(after the transforms), '{source.table}' and '{source.db}' by the "
                                          "change's source table and database; one sink can feed many tables.")
    pk_mode: Literal["record_value", "record_key", "kafka"] = Field(
        default="record_value", description="Where the primary key comes from (Kafka Connect's pk.mode).")
    primary_key: list[Identifier] = Field(
        default_factory=list, description="Key fields; record_key: default all fields of the key; kafka: unused.")
    columns: list[MySqlColumn] = Field(
        default_factory=list, description="Explicit column mapping; empty: from the record schema (Debezium's "
        "Connect schema, schemas.enable=true, or the schema the transforms leave), with create_table: true.")
    create_table: bool = Field(default=False, description="Create missing tables (Kafka Connect's auto.create).")
    auto_evolve: bool = Field(default=False, description="Add the declared columns the table lacks, nullable; never "
                              "drops any. A table made from the record schema follows schema_changes instead.")
    batch_size: int = Field(default=500, ge=1, le=10_000, description="Rows per statement on the row path.")
    apply: Literal["set", "rows"] = Field(
        default="set", description="set: bulk-load each batch of changes into a temporary table and apply it "
        "with one version-guarded upsert and one delete join (falls back to rows for a batch MySQL rejects); "
        "rows: multi-row upserts of batch_size rows.")
    set_rows: int = Field(default=50_000, ge=100, le=1_000_000,
                          description="Changes per set-based transaction (apply: set).")

    @model_validator(mode="after")
    def _keys_are_columns(self) -> MySqlSinkConfig:
        if len(self.columns) > MAX_MYSQL_COLUMNS:
            raise ValueError(f"{len(self.columns)} columns: an InnoDB table has at most {MAX_MYSQL_COLUMNS} (MySQL "
                             "refuses a wider one); split the table, or drop fields with a ReplaceField transform")
        names = [c.name for c in self.columns]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"column names must be unique, repeated: {dupes}")
        if self.pk_mode == "record_value" and not self.primary_key and self.columns:
            raise ValueError("primary_key is required with pk_mode record_value and declared columns (without "
                             "columns the key comes from the record key's schema)")
        unknown = sorted(set(re.findall(r"\{[^}]*\}", self.table)) - set(TABLE_PLACEHOLDERS))
        if unknown:
            raise ValueError(f"table {self.table!r}: unknown placeholder(s) {unknown}; expected "
                             f"{', '.join(TABLE_PLACEHOLDERS)}")
        missing = [k for k in self.primary_key if k not in names]
        if self.columns and self.pk_mode != "kafka" and missing:
            raise ValueError(f"primary_key {missing} must be listed in columns {names}")
        return self
