"""Schema changes of a table made from the record schema (issue 23): what differs between the table
in MySQL and the columns the window's records describe, and which of those changes the pipeline's
``schema_changes`` policy applies (docs/schema-changes.md).

Each difference is one :class:`SchemaChange` of a kind:

* ``add`` — a new field: ``ADD COLUMN … NULL`` (the rows already there have no value for it);
* ``widen`` — a wider type of the same family, which holds every value the column holds
  (VARCHAR(32)→(64), INT→BIGINT, DECIMAL(10,2)→(12,2), DATETIME→DATETIME(6), BIT(1)→BIT(8));
* ``extend`` — an ENUM or SET with values added after the old ones;
* ``relax`` — a NOT NULL column the records now say is optional;
* ``dropped`` — a column the records no longer have (also half of a rename): kept, made nullable
  so that rows without it can be written; never dropped;
* ``convert`` — another type that holds every old value (INT→DECIMAL(12,0), INT→VARCHAR(20),
  DATE→DATETIME);
* ``narrow`` — a type that cannot hold the old values (VARCHAR(64)→(32), BIGINT→INT, an ENUM
  without a value it had): never applied automatically;
* ``key`` — another primary key: never applied automatically;
* ``retype`` — an Elasticsearch field of another type: Elasticsearch cannot change it.

The policies: ``lenient`` (the default) applies add, widen, extend, relax and dropped; ``evolve``
also convert; both fail the window on narrow and key, naming them. ``fail`` fails on any change.
``ignore`` runs no DDL and writes the columns the table has (the fields it leaves out are in the
window's stats). ``pause`` stops the pipeline until an operator approves the changes (applied as
``evolve`` would) or rejects them (ignored). Another primary key stops the window under every policy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from connectors.errors import SchemaChangePending, SchemaChangeRefused
from connectors.mysql.types import ColumnType, parse_type

Policy = Literal["lenient", "evolve", "ignore", "fail", "pause"]
APPLIED: dict[str, frozenset[str]] = {
    "lenient": frozenset({"add", "widen", "extend", "relax", "dropped"}),
    "evolve": frozenset({"add", "widen", "extend", "relax", "dropped", "convert"}),
    "ignore": frozenset(),
    "fail": frozenset(),
    "pause": frozenset({"add", "widen", "extend", "relax", "dropped", "convert"}),  # once an operator approves
}

_INT_RANK = {"TINYINT": 1, "BOOLEAN": 1, "BOOL": 1, "SMALLINT": 2, "MEDIUMINT": 3, "INT": 4, "INTEGER": 4, "BIGINT": 5}
_INT_DIGITS = {1: 4, 2: 6, 3: 8, 4: 11, 5: 20}  # the longest text of each, its sign included
_TEXT = {"TINYTEXT": 255, "TEXT": 65_535, "MEDIUMTEXT": 16_777_215, "LONGTEXT": 4_294_967_295, "JSON": 4_294_967_295}
_BLOB = {"TINYBLOB": 255, "BLOB": 65_535, "MEDIUMBLOB": 16_777_215, "LONGBLOB": 4_294_967_295}
_TEMPORAL_TEXT = {"DATE": 10, "DATETIME": 26, "TIMESTAMP": 26, "TIME": 17, "YEAR": 4}


@dataclass(frozen=True)
class Column:
    """A column as MySQL has it."""

    name: str
    type: str  # information_schema.COLUMNS.COLUMN_TYPE
    nullable: bool


@dataclass(frozen=True)
class SchemaChange:
    table: str
    column: str
    kind: str
    old: str | None
    new: str | None
    statement: str | None  # the DDL that applies it; None: nothing to run (a dropped column already nullable)
    target: str = "table"  # a MySQL table, or an Elasticsearch "index" (its fields)

    def describe(self) -> str:
        what = {
            "add": f"new field, type {self.new}",
            "widen": f"{self.old} -> {self.new} (wider)",
            "extend": f"{self.old} -> {self.new} (values added)",
            "relax": f"{self.old} NOT NULL -> NULL (the field is optional now)",
            "dropped": f"no longer in the records ({self.old}); kept, nullable",
            "convert": f"{self.old} -> {self.new} (another type that holds every old value)",
            "narrow": f"{self.old} -> {self.new}: narrower, it cannot hold every value the column holds",
            "key": f"primary key {self.old} -> {self.new}",
            "retype": f"{self.old} -> {self.new}: Elasticsearch cannot change the type of an existing field "
                      "(reindex into a new index, or declare the sink's mapping)",
        }[self.kind]
        thing = "field" if self.target == "index" else "column"
        return f"{self.target} {self.table!r} {thing} {self.column!r}: {what}"

    @property
    def key(self) -> str:
        """What an operator's decision is about: this change of this column to this type."""
        return "|".join([self.table, self.column, self.kind, self.new or ""])

    def as_dict(self) -> dict[str, str | None]:
        return {"table": self.table, "column": self.column, "change": self.kind, "old": self.old, "new": self.new,
                "ddl": self.statement}


def _quote(identifier: str) -> str:
    return "`" + identifier.replace("`", "``") + "`"


def _text_size(t: ColumnType) -> int | None:
    """How many characters a text column holds (None: not text)."""
    if t.base in ("CHAR", "VARCHAR"):
        return t.args[0] if t.args else 1
    return _TEXT.get(t.base)


def _blob_size(t: ColumnType) -> int | None:
    if t.base in ("BINARY", "VARBINARY"):
        return t.args[0] if t.args else 1
    return _BLOB.get(t.base)


def _longest_text(t: ColumnType) -> int | None:
    """The longest text a value of ``t`` has (what a text column needs to hold it), or None."""
    if t.base in _INT_RANK:
        return _INT_DIGITS[_INT_RANK[t.base]]
    if t.base == "DECIMAL":
        return t.precision + 2
    if t.base in _TEMPORAL_TEXT:
        return _TEMPORAL_TEXT[t.base]
    if t.base in ("ENUM", "SET"):
        return max((len(v) for v in t.values), default=0) if t.base == "ENUM" else len(",".join(t.values))
    return _text_size(t)


def _same(old: ColumnType, new: ColumnType) -> bool:
    if old.base in _INT_RANK and new.base in _INT_RANK:  # display widths do not matter; TINYINT(1) is BOOLEAN
        return _INT_RANK[old.base] == _INT_RANK[new.base] and old.unsigned == new.unsigned
    norm = {"JSON": "LONGTEXT"}  # MariaDB's JSON is LONGTEXT
    if norm.get(old.base, old.base) != norm.get(new.base, new.base):
        return False
    if old.base == "YEAR":
        return True
    return old.args == new.args and old.values == new.values and old.unsigned == new.unsigned


def classify(old: ColumnType, new: ColumnType) -> str | None:
    """How a column of type ``old`` becomes ``new``: None (the same), widen, extend, convert or narrow."""
    if _same(old, new):
        return None
    if old.base in _INT_RANK and new.base in _INT_RANK:
        r_old, r_new = _INT_RANK[old.base], _INT_RANK[new.base]
        if old.unsigned == new.unsigned:
            return "widen" if r_new > r_old else "narrow"
        return "widen" if old.unsigned and r_new > r_old else "narrow"  # signed -> unsigned loses negatives
    if old.base == "DECIMAL" and new.base == "DECIMAL":
        holds = new.scale >= old.scale and new.precision - new.scale >= old.precision - old.scale
        return "widen" if holds else "narrow"
    if old.base in _INT_RANK and new.base == "DECIMAL":
        return "convert" if new.precision - new.scale >= _INT_DIGITS[_INT_RANK[old.base]] - 1 else "narrow"
    if old.base == "FLOAT" and new.base == "DOUBLE":
        return "widen"
    if old.base in ("DATETIME", "TIMESTAMP", "TIME") and new.base == old.base:
        return "widen" if new.fsp >= old.fsp else "narrow"
    if old.base == "DATE" and new.base == "DATETIME":
        return "convert"
    if old.base == "BIT" and new.base == "BIT":
        return "widen" if (new.args or (1,))[0] >= (old.args or (1,))[0] else "narrow"
    if old.base in ("ENUM", "SET") and new.base == old.base:
        return "extend" if new.values[:len(old.values)] == old.values else "narrow"
    if old.base == "YEAR" and new.base in _INT_RANK:
        return "convert" if _INT_RANK[new.base] >= 2 else "narrow"
    old_text, new_text = _text_size(old), _text_size(new)
    if old_text is not None and new_text is not None:
        return "widen" if new_text >= old_text else "narrow"
    old_blob, new_blob = _blob_size(old), _blob_size(new)
    if old_blob is not None and new_blob is not None:
        return "widen" if new_blob >= old_blob else "narrow"
    if new_text is not None:
        longest = _longest_text(old)
        return "convert" if longest is not None and new_text >= longest else "narrow"
    return "narrow"


def changes(table: str, desired: list[Column], key: list[str], existing: list[Column],
            existing_key: list[str], protected: frozenset[str] = frozenset(),
            generic: Mapping[str, str] | None = None) -> list[SchemaChange]:
    """What differs between the table (``existing``) and the columns the records describe
    (``desired``); ``protected``: cdcflow's own columns (never reported as dropped). ``generic``: per
    column whose desired type is its source's exact type (column.propagate.source.type), the type the
    same field has without it: a column of that type was made from the schema before the connector
    propagated the source type, and holds every value, so the narrower exact type is not a change."""
    have = {c.name.lower(): c for c in existing}
    want = {c.name.lower() for c in desired}
    out: list[SchemaChange] = []
    t = _quote(table)
    if existing_key and [k.lower() for k in key] != [k.lower() for k in existing_key]:
        out.append(SchemaChange(table, ",".join(key), "key", ",".join(existing_key), ",".join(key), None))
    for column in desired:
        old = have.get(column.name.lower())
        if old is None:
            out.append(SchemaChange(table, column.name, "add", None, column.type,
                                    f"ALTER TABLE {t} ADD COLUMN {_quote(column.name)} {column.type} NULL"))
            continue
        kind = classify(parse_type(old.type), parse_type(column.type))
        plain = (generic or {}).get(column.name)
        if kind == "narrow" and plain is not None and classify(parse_type(old.type), parse_type(plain)) is None:
            kind = None
        in_key = old.name.lower() in {k.lower() for k in existing_key}
        nullable = (old.nullable or column.nullable) and not in_key  # a key column stays NOT NULL
        name = _quote(old.name)
        if kind is not None:
            out.append(SchemaChange(table, old.name, kind, old.type, column.type,
                                    f"ALTER TABLE {t} MODIFY COLUMN {name} {column.type} {'NULL' if nullable else 'NOT NULL'}"
                                    if kind not in ("narrow",) else None))
        elif column.nullable and not old.nullable and not in_key:
            out.append(SchemaChange(table, old.name, "relax", old.type, old.type,
                                    f"ALTER TABLE {t} MODIFY COLUMN {name} {old.type} NULL"))
    for old in existing:
        lower = old.name.lower()
        if lower in want or lower in protected or lower in {k.lower() for k in existing_key}:
            continue
        out.append(SchemaChange(table, old.name, "dropped", old.type, None,
                                None if old.nullable else f"ALTER TABLE {t} MODIFY COLUMN {_quote(old.name)} {old.type} NULL"))
    return out


def decide(found: list[SchemaChange], policy: str, decisions: Mapping[str, str] | None = None,
           pipeline: str = "PIPELINE") -> tuple[list[SchemaChange], list[SchemaChange]]:
    """(the changes to apply, the changes the policy ignores); raises SchemaChangeRefused for a change
    it does not apply, naming every one. Under ``pause``, ``decisions`` (change key -> approved or
    rejected) says what an operator decided: approved changes are applied, rejected ones ignored, and
    the others raise SchemaChangePending."""
    allowed = APPLIED[policy]
    refused = [c for c in found if c.kind == "key" or (policy != "ignore" and c.kind not in allowed)]  # retype too
    if refused:
        why = ("schema_changes: fail stops at any change" if policy == "fail" else
               f"schema_changes: {policy} never applies {', '.join(sorted({c.kind for c in refused}))} changes"
               + (" (evolve converts types that hold every old value)" if policy == "lenient"
                  and any(c.kind == "convert" for c in refused) else ""))
        raise SchemaChangeRefused(
            f"{why}; the window stopped before writing and no offset moved: "
            + "; ".join(c.describe() for c in refused)
            + ". Change the table (or index) by hand, then the next window goes on; or set schema_changes to a "
              "policy that applies it")
    if policy == "ignore":
        return [], found
    if policy == "pause":
        decided = decisions or {}
        waiting = [c for c in found if decided.get(c.key) not in ("approved", "rejected")]
        if waiting:
            raise SchemaChangePending(
                f"schema_changes: pause: pipeline {pipeline!r} is stopped until an operator approves or rejects "
                f"{'this change' if len(waiting) == 1 else 'these changes'}: "
                + "; ".join(c.describe() for c in waiting)
                + f". Approve: `cdcflow schema apply {pipeline}` (or POST /cdcflow/connectors/{pipeline}/schema/"
                  f"approve, or the cdcflow page); reject (the table stays as it is; the windows write the columns "
                  f"it has): `cdcflow schema reject {pipeline}`. Nothing past the change is written and no offset "
                  "moved", [c.as_dict() | {"key": c.key} for c in waiting])
        return ([c for c in found if decided[c.key] == "approved" and c.statement is not None],
                [c for c in found if decided[c.key] == "rejected"])
    return [c for c in found if c.statement is not None], []


# -- columns inferred from values (tables from schemaless records: spark_jobs/transform/row_schemas.py) ----------
_NUMBERS = frozenset({"FLOAT", "DOUBLE", "DECIMAL"})


def _family(t: ColumnType) -> str:
    """What values a column of ``t`` holds, as inferred columns are joined: a TINYINT(1) is a boolean
    (the JSON ``true``), a MariaDB JSON (shown as LONGTEXT) is a text."""
    if t.base in ("BOOL", "BOOLEAN") or t.base == "TINYINT" and t.args == (1,):
        return "boolean"
    if t.base in _INT_RANK:
        return "integer"
    if t.base in _NUMBERS:
        return "number"
    if t.base != "JSON" and _text_size(t) is not None:
        return "text"
    return t.base


def joined(a: str, b: str) -> str:
    """The type of a column inferred from values that are of type ``a`` in some records and ``b`` in
    others (docs/types.md, "Tables from records without a schema"): the same type; the wider of two
    integers, two texts or two fractional times; an integer and a DOUBLE (or FLOAT) a DOUBLE, two
    DECIMALs or an integer and a DECIMAL the DECIMAL that holds both; a DATE and a DATETIME the
    DATETIME; anything else (a boolean and a number, a number and a text, JSON and a text) a text
    that holds both: the text column where it holds the other's longest text, else LONGTEXT."""
    ta, tb = parse_type(a), parse_type(b)
    if (ta.base == "JSON") == (tb.base == "JSON") and _same(ta, tb):
        return a
    fa, fb = _family(ta), _family(tb)
    if fa == fb == "integer":
        return a if _INT_RANK[ta.base] >= _INT_RANK[tb.base] else b
    if {fa, fb} <= {"integer", "number"}:
        if {ta.base, tb.base} <= {"DECIMAL"} | set(_INT_RANK):  # DECIMAL(p,s) and DECIMAL or an integer
            scale = max(t.scale for t in (ta, tb) if t.base == "DECIMAL")
            digits = max(t.precision - t.scale if t.base == "DECIMAL" else _INT_DIGITS[_INT_RANK[t.base]] - 1
                         for t in (ta, tb))
            return f"DECIMAL({min(digits + scale, 65)},{min(scale, 30)})"
        return "DOUBLE"
    if ta.base == tb.base and ta.base in ("DATETIME", "TIMESTAMP", "TIME"):
        return a if ta.fsp >= tb.fsp else b
    if {ta.base, tb.base} == {"DATE", "DATETIME"}:
        return a if ta.base == "DATETIME" else b
    for text, other in ((ta, tb), (tb, ta)):
        size, longest = _text_size(text), _longest_text(other) if other.base != "JSON" else None
        if _family(text) == "text" and size is not None and longest is not None and size >= longest:
            return text.sql
    return "LONGTEXT"


def settled(existing: str, inferred: str) -> str:
    """The type an inferred column is written with into a table that has it: the column's own type
    where that holds the values (a DOUBLE takes integers, a LONGTEXT anything: the table keeps what
    earlier windows saw), else the type both join to (a schema change, which ``schema_changes``
    decides: BIGINT to DOUBLE is narrow, a DOUBLE cannot hold every BIGINT)."""
    both = joined(existing, inferred)
    return parse_type(existing).sql if _same(parse_type(both), parse_type(existing)) else both
