"""A composed index's config (``sinks: - type: elasticsearch`` with ``document:``): one search
document per row of a root table, with N:1 lookups and 1:N nested arrays read from MySQL tables that
the same pipeline's MySQL sinks keep (docs/composed-documents.md).

Relations say how a table meets its parent as ``on: {<this table's column>: <the parent's column>}``:
``customer: {table: customers, on: {id: customer_id}}`` reads ``customers.id = orders.customer_id``;
``lines: {table: order_lines, on: {order_id: id}}`` reads ``order_lines.order_id = orders.id``.
``fields`` picks a table's columns: a list keeps their names, a mapping renames (``{document field:
column}``); left out, every column is taken.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field, field_validator, model_validator

from connectors.models import Identifier, StrictModel
from connectors.mysql.config import TABLE_PLACEHOLDERS, MySqlSinkConfig

MEMBERS_FIELD = "cdcflow_members"  # indexed, left out of _source: the nested rows a document holds (compose.py)


def _fields_checked(value: Any) -> Any:
    if value is None:
        return value
    names = list(value) if isinstance(value, dict) else value
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"each field once; repeated: {repeated}")
    bad = [n for n in names if not n or "." in n or n == MEMBERS_FIELD]
    if bad:
        raise ValueError(f"expected document field names without '.' (and not {MEMBERS_FIELD!r}); got {bad}")
    return value


class Relation(StrictModel):
    """A table met from its parent's rows (a lookup or a nested array)."""

    table: Identifier = Field(description="The MySQL table (kept by this pipeline's MySQL sinks).")
    on: dict[Identifier, Identifier] = Field(
        min_length=1, description="{this table's column: the parent's column}: the columns the two meet on.")
    fields: list[Identifier] | dict[str, Identifier] | None = Field(
        default=None, description="The columns taken: a list, or {document field: column} to rename; default all.")
    lookups: dict[str, Lookup] = Field(default_factory=dict, description="N:1 lookups of this table's rows.")
    nested: dict[str, Nested] = Field(default_factory=dict, description="1:N arrays of this table's rows.")

    @model_validator(mode="before")
    @classmethod
    def _yaml_on(cls, data: Any) -> Any:
        """YAML 1.1 (PyYAML, Airflow's loader) reads a bare ``on:`` key as the boolean true."""
        if isinstance(data, dict) and True in data and "on" not in data:
            data = {("on" if k is True else k): v for k, v in data.items()}
        return data

    @field_validator("fields")
    @classmethod
    def _fields(cls, value: Any) -> Any:
        return _fields_checked(value)


class Lookup(Relation):
    """N:1: at most one row of ``table`` per parent row (its primary key, or a unique key); an object
    field, null when none matches."""


class Nested(Relation):
    """1:N: every row of ``table`` that meets the parent row, an array field ordered by ``order_by``."""

    order_by: list[Identifier] = Field(default_factory=list, description="Columns the array is ordered by "
                                       "(then by the table's primary key).")


class Root(StrictModel):
    table: Identifier = Field(description="The MySQL table with one row per document.")
    key: list[Identifier] = Field(min_length=1, description="Its primary key: the document id (joined with '+').")
    fields: list[Identifier] | dict[str, Identifier] | None = None

    @field_validator("fields")
    @classmethod
    def _fields(cls, value: Any) -> Any:
        return _fields_checked(value)


class DocumentConfig(StrictModel):
    """A document per row of ``root``, rebuilt from the tables' current state whenever a window changes
    any row it is made of."""

    root: Root
    lookups: dict[str, Lookup] = Field(default_factory=dict)
    nested: dict[str, Nested] = Field(default_factory=dict)
    kept_by: str | None = Field(default=None, description=(
        "The MySQL sink of this pipeline that keeps the tables (its connection is read, its routing says which "
        "table a change is of); default: the pipeline's one MySQL sink."))
    max_documents: int = Field(default=50_000, ge=1, le=10_000_000, description=(
        "Documents rebuilt per window at most; the rest are carried over to the next windows (the backlog)."))
    rebuild_batch: int = Field(default=2_000, ge=1, le=100_000,
                               description="Root keys per rebuild task's query batch.")

    @model_validator(mode="after")
    def _names(self) -> DocumentConfig:
        problems: list[str] = []

        def walk(path: str, own: set[str], lookups: dict[str, Lookup], nested: dict[str, Nested]) -> None:
            for name in [*lookups, *nested]:
                if name in own:
                    problems.append(f"{path}{name}: the field is also one of the table's own fields")
                if not name or "." in name or name == MEMBERS_FIELD:
                    problems.append(f"{path}{name}: expected a document field name without '.'")
            for name, rel in [*lookups.items(), *nested.items()]:
                walk(f"{path}{name}.", _own(rel.fields), rel.lookups, rel.nested)

        clash = sorted(set(self.lookups) & set(self.nested))
        if clash:
            problems.append(f"{clash}: a name is either a lookup or a nested array")
        walk("", _own(self.root.fields), self.lookups, self.nested)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def tables(self) -> list[str]:
        """Every table the documents are made of, root first."""
        out = [self.root.table]

        def walk(rels: dict[str, Any]) -> None:
            for rel in rels.values():
                if rel.table not in out:
                    out.append(rel.table)
                walk(rel.lookups)
                walk(rel.nested)

        walk(self.lookups)
        walk(self.nested)
        return out


def _own(fields: list[str] | dict[str, str] | None) -> set[str]:
    return set() if fields is None else set(fields)


def keeper_of(sinks: Sequence[Any], sink: Any) -> MySqlSinkConfig:
    """The MySQL sink of ``sinks`` that keeps a composed index's tables (checked by :func:`composed_problems`)."""
    mysql = [s for s in sinks if isinstance(s, MySqlSinkConfig)]
    wanted = sink.document.kept_by
    return next(s for s in mysql if s.name == wanted) if wanted else mysql[0]


Problem = tuple[tuple[str | int, ...], str, Any]  # (field path, what was expected, the value): field_errors


def composed_problems(sinks: Sequence[Any], offsets_sink: str | None, truncate: str) -> list[Problem]:
    """A pipeline's composed indices against the rest of its config. A composed index reads the current
    rows of tables this pipeline's MySQL sink keeps, after that sink wrote the window: one sink, a
    state table per source table, and the offsets committed after the documents
    (docs/composed-documents.md)."""
    mysql = {s.name: s for s in sinks if isinstance(s, MySqlSinkConfig)}
    problems: list[Problem] = []
    for i, sink in enumerate(sinks):
        if getattr(sink, "document", None) is None:
            continue
        at: tuple[str | int, ...] = ("sinks", i, "document", "kept_by")
        wanted = sink.document.kept_by
        if wanted is None and len(mysql) != 1:
            problems.append((at, "expected the name of the MySQL sink that keeps the document's tables: this "
                             f"pipeline has {len(mysql)} MySQL sinks {sorted(mysql)}", wanted))
            continue
        if wanted is not None and wanted not in mysql:
            problems.append((at, f"expected the name of one of this pipeline's MySQL sinks {sorted(mysql)}", wanted))
            continue
        keeper = keeper_of(sinks, sink)
        if keeper.mode != "state":
            problems.append((at, f"sink {keeper.name!r} keeps history tables (mode: history); a document is built "
                             "from current rows: name a sink with mode: state", wanted))
        tables = sink.document.tables()
        if not any(p in keeper.table for p in TABLE_PLACEHOLDERS) and tables != [keeper.table]:
            problems.append((("sinks", i, "document"), f"the tables {[t for t in tables if t != keeper.table]} are "
                             f"not kept by sink {keeper.name!r}, which writes the one table {keeper.table!r}: route "
                             "its tables with a template such as '{source.table}'", sorted(tables)))
        if offsets_sink is not None:
            problems.append((("offset_store", "sink"), f"exactly-once commits the offsets in sink "
                             f"{offsets_sink!r}'s transaction, before the composed index {sink.index!r} is "
                             "rebuilt: a window killed between the two would never rebuild its documents; leave "
                             "offset_store.sink unset with a composed index", offsets_sink))
        if truncate == "apply":
            problems.append((("truncate",), f"a TRUNCATE of a table would change every document of the composed "
                             f"index {sink.index!r}, which it does not rebuild yet: use truncate: ignore or dlq",
                             truncate))
    return problems


Relation.model_rebuild()
Lookup.model_rebuild()
Nested.model_rebuild()
