"""Composed documents (docs/composed-documents.md): which documents a window's changes affect, and
each document rebuilt from its tables' current state.

* **The graph** (:class:`Node`): the root table, then each lookup (N:1) and nested array (1:N) with
  the columns it meets its parent on.
* **Seeds**: what a changed row says, read from its change's row image in the read task (the after
  image of an upsert, the before image of a delete): a root row its key; a lookup's or a nested
  row its ``on`` columns (which parent rows it meets) and its primary key.
* **Affected root keys** (:func:`affected_roots`): a root seed is a root key. Any other seed is
  joined back up the graph through the tables' current state, one query per node
  (``SELECT DISTINCT root key FROM root JOIN … WHERE parent.column IN (seed values)``). The state
  read is the one after the window's MySQL writes, so a row that now meets a parent finds it. The
  parents a row met *before* the window (a line moved to another order, a customer whose looked-up
  column changed, a row deleted without a before image) are found in the index: every document
  lists the rows of its lookups and nested arrays (``cdcflow_members``, indexed, left out of
  ``_source``), and the documents holding a changed row are affected too (:func:`member_values`).
* **Documents** (:func:`build`): the root rows of a batch of keys in one query, then each relation
  of all of them in one query per node (``WHERE (columns) IN (…)``), assembled in Python. A key
  whose root row is gone is a delete.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from connectors.elasticsearch.compose_config import MEMBERS_FIELD, DocumentConfig, Lookup, Nested

IN_BATCH = 1_000  # values per IN list
_ENCODE = msgspec.json.Encoder(decimal_format="number")

Key = tuple[str, ...]  # a row's key as MySQL texts


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


@dataclass
class Node:
    """A table of the document: the root (``path`` empty), a lookup or a nested array."""

    path: tuple[str, ...]
    table: str
    kind: str  # root | lookup | nested
    on: tuple[tuple[str, str], ...] = ()  # (this table's column, the parent's column)
    fields: list[str] | dict[str, str] | None = None
    order_by: tuple[str, ...] = ()
    parent: Node | None = field(default=None, repr=False)
    children: list[Node] = field(default_factory=list, repr=False)

    @property
    def name(self) -> str:
        return ".".join(self.path) or "(root)"

    def walk(self) -> Iterator[Node]:
        yield self
        for child in self.children:
            yield from child.walk()


def graph(doc: DocumentConfig) -> Node:
    root = Node((), doc.root.table, "root", fields=doc.root.fields)

    def add(parent: Node, lookups: Mapping[str, Lookup], nested: Mapping[str, Nested]) -> None:
        for name, rel in [*lookups.items(), *nested.items()]:
            kind = "nested" if isinstance(rel, Nested) else "lookup"
            node = Node((*parent.path, name), rel.table, kind, tuple(rel.on.items()), rel.fields,
                        tuple(rel.order_by) if isinstance(rel, Nested) else (), parent)
            parent.children.append(node)
            add(node, rel.lookups, rel.nested)

    add(root, doc.lookups, doc.nested)
    return root


def seed_columns(root: Node, root_key: Sequence[str], keys: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """Per table, the columns its changed rows' images are read for (``keys``: each table's primary
    key, where known: a related row's membership)."""
    out: dict[str, list[str]] = {}

    def want(table: str, columns: Iterable[str]) -> None:
        have = out.setdefault(table, [])
        have += [c for c in columns if c not in have]

    for node in root.walk():
        if node.kind == "root":
            want(node.table, root_key)
        else:
            want(node.table, [c for c, _p in node.on])
            want(node.table, keys.get(node.table, ()))
    return out


def member(table: str, key: Sequence[Any]) -> str:
    return f"{table}:" + "+".join(text(v) for v in key)


def member_values(root: Node, seeds: Mapping[str, tuple[list[str], list[Key]]],
                  keys: Mapping[str, Sequence[str]]) -> list[str]:
    """The membership values of the changed related rows: the documents that hold them are affected."""
    out: set[str] = set()
    for node in root.walk():
        if node.kind == "root" or node.table not in seeds or not keys.get(node.table):
            continue
        columns, rows = seeds[node.table]
        at = [columns.index(c) for c in keys[node.table] if c in columns]
        if len(at) != len(keys[node.table]):
            continue
        out.update(member(node.table, [row[i] for i in at]) for row in rows if all(row[i] is not None for i in at))
    return sorted(out)


def _chain(node: Node) -> list[Node]:
    """The nodes from the root down to ``node``."""
    out = []
    at: Node | None = node
    while at is not None:
        out.append(at)
        at = at.parent
    return out[::-1]


def up_query(node: Node, root_key: Sequence[str], columns: Sequence[str], n: int) -> str:
    """The root keys of the parent rows that ``n`` rows of ``node`` meet (their ``on`` values, given
    as ``columns`` of ``node``): the root joined down to ``node``'s parent."""
    assert node.parent is not None
    chain = _chain(node.parent)
    alias = {id(x): f"t{i}" for i, x in enumerate(chain)}
    sql = f"SELECT DISTINCT {', '.join(f't0.{quote(k)}' for k in root_key)} FROM {quote(chain[0].table)} t0"
    for x in chain[1:]:
        assert x.parent is not None
        cond = " AND ".join(f"{alias[id(x)]}.{quote(c)} = {alias[id(x.parent)]}.{quote(p)}" for c, p in x.on)
        sql += f" JOIN {quote(x.table)} {alias[id(x)]} ON {cond}"
    parent_alias = alias[id(node.parent)]
    on = dict(node.on)
    target = [f"{parent_alias}.{quote(on[c])}" for c in columns]
    return sql + " WHERE " + _in(target, n)


def _in(columns: Sequence[str], n: int) -> str:
    if len(columns) == 1:
        return f"{columns[0]} IN ({', '.join(['%s'] * n)})"
    row = "(" + ", ".join(["%s"] * len(columns)) + ")"
    return f"({', '.join(columns)}) IN ({', '.join([row] * n)})"


def affected_roots(cursor: Any, root: Node, root_key: Sequence[str],
                   seeds: Mapping[str, tuple[list[str], list[Key]]], tables: Tables | None = None) -> set[Key]:
    """The root keys the seeds reach (see the module's docstring), from the tables' current state (a
    table that does not exist yet holds no row)."""
    out: set[Key] = set()
    for node in root.walk():
        if node.table not in seeds:
            continue
        if node.kind != "root" and tables is not None and not tables.exist(*(x.table for x in _chain(node.parent))):
            continue
        columns, rows = seeds[node.table]
        if node.kind == "root":
            at = [columns.index(k) for k in root_key]
            out.update(tuple(row[i] for i in at) for row in rows if all(row[i] is not None for i in at))
            continue
        on = [c for c, _p in node.on]
        at = [columns.index(c) for c in on]
        values = sorted({tuple(row[i] for i in at) for row in rows if all(row[i] is not None for i in at)})
        for part in _batches(values):
            cursor.execute(up_query(node, root_key, on, len(part)), [v for t in part for v in t])
            out.update(tuple(text(v) for v in r) for r in cursor.fetchall())
    return out


def _batches(values: Sequence[Any], size: int = IN_BATCH) -> Iterator[Sequence[Any]]:
    for i in range(0, len(values), size):
        yield values[i:i + size]


def text(value: Any) -> str:
    """A key value as the MySQL text the row images give (connectors/images.texts)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    return str(value)


def json_value(value: Any) -> Any:
    """A column's value in a document: numbers exact, times ISO 8601, bytes base64."""
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, set):
        return ",".join(sorted(value))
    return value


def _project(node: Node, row: Mapping[str, Any], hidden: frozenset[str]) -> dict[str, Any]:
    if node.fields is None:
        return {k: json_value(v) for k, v in row.items() if k not in hidden and not k.startswith("__")}
    pairs = node.fields.items() if isinstance(node.fields, dict) else ((f, f) for f in node.fields)
    return {name: json_value(row.get(column)) for name, column in pairs}


@dataclass
class Tables:
    """What the builder knows of the tables: each one's primary key, and the soft-delete column
    whose rows count as gone (a MySQL sink with ``delete: soft``)."""

    keys: Mapping[str, Sequence[str]]
    deleted_column: str | None = None
    existing: frozenset[str] | None = None  # None: every table is taken to exist

    def exist(self, *names: str) -> bool:
        return self.existing is None or all(n in self.existing for n in names)

    def alive(self, alias: str = "") -> str:
        if self.deleted_column is None:
            return ""
        return f" AND {alias}{quote(self.deleted_column)} IS NULL"


def build(cursor: Any, root: Node, root_key: Sequence[str], keys: Sequence[Key], tables: Tables,
          ) -> list[tuple[str, dict[str, Any] | None]]:
    """Each key's document (None: its root row is gone, a delete), by document id."""
    hidden = frozenset({tables.deleted_column} if tables.deleted_column else ())
    rows = _select(cursor, root.table, list(root_key), keys, tables)
    found: dict[Key, dict[str, Any]] = {tuple(text(r[k]) for k in root_key): r for r in rows}
    docs: dict[Key, dict[str, Any]] = {}
    members: dict[Key, list[str]] = {}
    parents = []
    for key in keys:
        row = found.get(key)
        if row is None:
            continue
        docs[key] = _project(root, row, hidden)
        members[key] = []
        parents.append((row, docs[key], key))
    _attach(cursor, root, parents, members, tables, hidden)
    out: list[tuple[str, dict[str, Any] | None]] = []
    for key in keys:
        doc = docs.get(key)
        if doc is not None:
            doc[MEMBERS_FIELD] = sorted(set(members[key]))
        out.append(("+".join(key), doc))
    return out


def _attach(cursor: Any, node: Node, parents: list[tuple[dict[str, Any], dict[str, Any], Key]],
            members: dict[Key, list[str]], tables: Tables, hidden: frozenset[str]) -> None:
    """Each child relation of ``node`` read for every parent row at once, and laid into their documents."""
    for child in node.children:
        this = [c for c, _p in child.on]
        wanted = sorted({t for t in (tuple(p[0].get(pc) for _c, pc in child.on) for p in parents)
                         if all(v is not None for v in t)}, key=lambda t: tuple(text(v) for v in t))
        order = [*this, *child.order_by, *(tables.keys.get(child.table) or ())]
        rows = _select(cursor, child.table, this, wanted, tables, order) if wanted else []
        by: dict[Key, list[dict[str, Any]]] = {}
        for r in rows:
            by.setdefault(tuple(text(r[c]) for c in this), []).append(r)
        below = []
        for row, doc, root_key in parents:
            meets = tuple(row.get(pc) for _c, pc in child.on)
            met = by.get(tuple(text(v) for v in meets), []) if all(v is not None for v in meets) else []
            pk = tables.keys.get(child.table) or ()
            if child.kind == "lookup":
                first = met[0] if met else None
                doc[child.path[-1]] = None if first is None else _project(child, first, hidden)
                if first is not None:
                    below.append((first, doc[child.path[-1]], root_key))
                    if pk:
                        members[root_key].append(member(child.table, [first[k] for k in pk]))
                continue
            items = []
            for r in met:
                item = _project(child, r, hidden)
                items.append(item)
                below.append((r, item, root_key))
                if pk:
                    members[root_key].append(member(child.table, [r[k] for k in pk]))
            doc[child.path[-1]] = items
        if below and child.children:
            _attach(cursor, child, below, members, tables, hidden)


def _select(cursor: Any, table: str, columns: list[str], values: Sequence[tuple[Any, ...]], tables: Tables,
            order: Sequence[str] = ()) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if not tables.exist(table):
        return out
    names = [quote(c) for c in columns]
    for part in _batches(values):
        sql = f"SELECT * FROM {quote(table)} WHERE {_in(names, len(part))}{tables.alive()}"
        if order:
            sql += " ORDER BY " + ", ".join(quote(c) for c in order)
        cursor.execute(sql, [v for t in part for v in t])
        described = [d[0] for d in cursor.description]
        out += [dict(zip(described, r, strict=True)) for r in cursor.fetchall()]
    return out


def encoded(doc: Mapping[str, Any]) -> str:
    return _ENCODE.encode(doc).decode()


def mapping(user: Mapping[str, Any] | None) -> dict[str, Any]:
    """The index's mapping: the user's, with the membership field indexed and left out of ``_source``."""
    out = dict(user or {})
    out["properties"] = {**(out.get("properties") or {}), MEMBERS_FIELD: {"type": "keyword"}}
    source = dict(out.get("_source") or {})
    source["excludes"] = sorted({*source.get("excludes", ()), MEMBERS_FIELD})
    out["_source"] = source
    return out

