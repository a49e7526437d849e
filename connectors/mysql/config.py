"""The MySQL sink's config model (``sinks: - type: mysql``) and its declared columns."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from connectors.models import ConnId, Identifier, StrictModel, field_errors
from connectors.mysql.types import EXPECTED as MYSQL_TYPES
from connectors.mysql.definitions import (
    ColumnDefinition,
    DefinitionSyntaxError,
    check_definition,
    now_sql,
    parse_default,
    parse_definition,
    parse_on_update,
)
from connectors.mysql.types import (
    ColumnType,
    TypeSyntaxError,
    parse_type,
)
from connectors.partial import DEBEZIUM_UNAVAILABLE, checked_placeholder

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
    """A declared column: a MySQL type, or a whole column definition as SHOW CREATE TABLE writes it."""

    # What follows the type in a definition (TIMESTAMP(3) NULL DEFAULT CURRENT_TIMESTAMP(3) COMMENT
    # 'synced') is read into nullable, default, on_update and comment (CHARACTER SET and COLLATE stay in
    # the type), each checked and rebuilt from its parsed pieces for the DDL
    # (connectors/mysql/definitions.parse_definition); values are read by the type alone.

    name: Identifier
    type: str = Field(description="MySQL column type, as MySQL's grammar has it: BIGINT UNSIGNED, TINYINT(1), "
                                  "DECIMAL(10,2), DATETIME(6), ENUM('a','b'), VARBINARY(16), POINT …; or a whole "
                                  "column definition as SHOW CREATE TABLE writes it: the type, then NULL / NOT NULL, "
                                  "DEFAULT, ON UPDATE CURRENT_TIMESTAMP, COMMENT, CHARACTER SET, COLLATE.")
    field: str | None = Field(default=None, description="Field of the row image; default: name.")
    nullable: bool = True
    default: str | None = Field(default=None, description="The created column's DEFAULT, as MySQL writes it: 0, "
                                "'text', NULL, b'1', CURRENT_TIMESTAMP(3) …")
    on_update: str | None = Field(default=None, description="ON UPDATE CURRENT_TIMESTAMP[(fsp)] of a created "
                                  "DATETIME or TIMESTAMP column.")
    comment: str | None = Field(default=None, description="The created column's COMMENT.")
    encoding: Literal["base64", "hex", "text", "days", "ms", "us", "ns"] | None = Field(
        default=None, description="How a value without a schema is written (streams with schemas.enable=false): "
        "binary columns base64 (default), hex or text; DECIMAL base64 (Debezium's precise mode) or text (default); "
        "DATE days or text; TIME/DATETIME/TIMESTAMP ms, us or ns since the epoch (midnight for TIME), or text.")

    @model_validator(mode="before")
    @classmethod
    def _definition(cls, data: Any) -> Any:
        """``type`` written as a whole column definition -> the type, and its attributes into their
        fields; one said twice (in the type and in its field) must say the same."""
        if not isinstance(data, dict) or not isinstance(data.get("type"), str):
            return data
        try:
            found = parse_definition(data["type"].strip())
        except TypeSyntaxError:
            return data  # the type's own check says what it could not read, on its field
        said = {"nullable": found.nullable, "default": found.default.sql if found.default else None,
                "on_update": now_sql(found.on_update) if found.on_update is not None else None,
                "comment": found.comment}
        out = {**data, "type": found.type.sql}
        for key, value in said.items():
            if value is None:
                continue
            given = data.get(key)
            if key in data and given is not None and _canonical(key, given) != value:
                raise ValueError(f"type {data['type']!r} says {key} {value!r}, the column's {key} says {given!r}")
            out[key] = value
        return out

    @field_validator("type")
    @classmethod
    def _sql_type(cls, value: str) -> str:
        try:
            return parse_definition(value.strip()).type.sql
        except DefinitionSyntaxError as exc:
            raise ValueError(str(exc)) from None
        except TypeSyntaxError as exc:
            raise ValueError(f"expected a MySQL type ({exc}); the column types are {MYSQL_TYPES}") from None

    @field_validator("default", mode="before")
    @classmethod
    def _default(cls, value: Any) -> Any:
        if value is None or isinstance(value, bool | int | float | str):
            return None if value is None else _canonical("default", value)
        return value

    @field_validator("on_update")
    @classmethod
    def _on_update(cls, value: str | None) -> str | None:
        return None if value is None else _canonical("on_update", value)

    @model_validator(mode="after")
    def _definition_fits(self) -> MySqlColumn:
        try:
            check_definition(self.definition)
        except TypeSyntaxError as exc:
            raise ValueError(str(exc)) from None
        return self

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

    @property
    def definition(self) -> ColumnDefinition:
        """The column's definition, typed: its type and what the created column is given."""
        return ColumnDefinition(parse_type(self.type), None if self.nullable else False,
                                parse_default(self.default) if self.default is not None else None,
                                parse_on_update(self.on_update) if self.on_update is not None else None, self.comment)


def _canonical(key: str, value: Any) -> Any:
    """A default or on_update as the DDL has it (a YAML number or boolean is its SQL literal); ValueError
    naming what could not be read."""
    if key not in ("default", "on_update"):
        return value
    text = ("TRUE" if value else "FALSE") if isinstance(value, bool) else str(value)
    try:
        return parse_default(text).sql if key == "default" else now_sql(parse_on_update(text))
    except TypeSyntaxError as exc:
        raise ValueError(f"{key} {text!r}: {exc}") from None


HISTORY_OWN = ("__valid_from", "__valid_to", "__current", "__op", "__version")  # mode: history (mysql/history.py)
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
    stage: Literal["load_data", "insert"] = Field(
        default="load_data", description="apply: set: how a set reaches its temporary table. load_data: LOAD DATA "
        "LOCAL INFILE from memory, where the server allows it (local_infile=ON; MySQL 8 ships it OFF), else "
        "multi-row INSERTs; a set whose load raises a warning is staged again by INSERT, so strict mode still "
        "rejects a bad value. insert: multi-row INSERTs only.")
    delete: Literal["hard", "soft"] = Field(
        default="hard", description="hard: a delete removes the row; soft: the row stays and deleted_column is set "
        "to the delete's source time (UTC); a newer change of the key clears it (docs/soft-deletes.md).")
    deleted_column: Identifier = Field(
        default="__deleted_at", description="delete: soft: the DATETIME(3) column that holds the delete's source time "
        "(NULL for a live row); added to the table.")
    mode: Literal["state", "history"] = Field(
        default="state", description="state: one row per key, its latest change; history: one row per version of "
        "a key with __valid_from, __valid_to, __current, __op and __version (SCD type 2, docs/history.md).")
    track_history: list[Identifier] = Field(
        default_factory=list, description="mode: history: the columns whose change opens a new version; a change "
        "that touches none of them updates the current version in place (empty: every change opens one).")
    unavailable_value: str | None = Field(
        default=DEBEZIUM_UNAVAILABLE, min_length=1, description="A value that stands for one the source did not send "
        "(Debezium's unavailable.value.placeholder for unchanged TOASTed PostgreSQL columns): such a column keeps "
        "the value the row holds. Default for Debezium sources; null: every value is written as it is.")
    ignore_null_updates: list[Identifier] = Field(
        default_factory=list, description="Columns where a null keeps the value the row holds (an update of "
        "binlog_row_image=MINIMAL, whose after image has only the key and the changed columns).")

    @field_validator("unavailable_value")
    @classmethod
    def _placeholder(cls, value: str | None) -> str | None:
        return checked_placeholder(value)

    @model_validator(mode="after")
    def _partial_and_soft(self) -> MySqlSinkConfig:
        listed = self.ignore_null_updates
        problems: list[tuple[tuple[str | int, ...], str, Any]] = []
        repeated = sorted({c for c in listed if listed.count(c) > 1})
        if repeated:
            problems.append((("ignore_null_updates",), f"each column once, repeated: {repeated}", listed))
        keys = [c for c in listed if c in self.primary_key]
        if keys:
            problems.append((("ignore_null_updates",), f"{keys} are primary key columns, which always have a value",
                             listed))
        names = [c.name for c in self.columns]
        unknown = [c for c in listed if c not in names]
        if self.columns and unknown:
            problems.append((("ignore_null_updates",), f"expected columns of this sink {names}; {unknown} are not",
                             listed))
        taken = {n.lower() for n in names} | {"__cdc_version", *KAFKA_PK_COLUMNS}
        if self.delete == "soft" and self.deleted_column.lower() in taken:
            problems.append((("deleted_column",), ("expected a column the table does not have otherwise (it holds the "
                                                   "delete time); this one is a column of the sink or cdcflow's own"),
                             self.deleted_column))
        if self.delete == "soft" and self.pk_mode == "kafka":
            problems.append((("delete",), ("delete: soft needs rows keyed by the record (pk_mode kafka appends every "
                                           "change as a row of its own: there is no row to mark deleted)"),
                             self.delete))
        problems += self._history_problems(names)
        if problems:
            raise field_errors("MySqlSinkConfig", problems)
        return self

    def _history_problems(self, names: list[str]) -> list[tuple[tuple[str | int, ...], str, Any]]:
        """What ``mode: history`` and ``track_history`` need (reported on those fields)."""
        if self.mode != "history":
            return [(("track_history",), "expected only with mode: history", self.track_history)] \
                if self.track_history else []
        problems: list[tuple[tuple[str | int, ...], str, Any]] = []
        needs = [("rows keyed by the record, not pk_mode: kafka", self.pk_mode == "kafka"),
                 ("delete: hard (a history keeps a delete as a version of its own, op d)", self.delete == "soft")]
        problems += [(("mode",), f"mode: history needs {what}", self.mode) for what, missing in needs if missing]
        own = {c.lower() for c in (*HISTORY_OWN, "__cdc_version")}
        clash = [n for n in names if n.lower() in own]
        if clash:
            problems.append((("columns",), f"{clash} are the history table's own columns {list(HISTORY_OWN)}", clash))
        data = [n for n in names if n not in self.primary_key]
        unknown = [c for c in self.track_history if c not in data]
        if self.columns and unknown:
            problems.append((("track_history",), f"expected columns of this sink outside the primary key {data}; "
                             f"{unknown} are not", self.track_history))
        return problems

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
        coordinates = list(KAFKA_PK_COLUMNS)
        if self.columns and self.pk_mode == "kafka" and (
                self.primary_key != coordinates or any(c not in names for c in coordinates)):
            raise ValueError(f"pk_mode kafka keys each row by its record's coordinates: declare the columns "
                             f"{coordinates} (e.g. VARCHAR(249), INT, BIGINT) and primary_key: {coordinates}; got "
                             f"primary_key {self.primary_key} and columns {names}")
        return self
