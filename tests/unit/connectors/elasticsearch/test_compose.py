"""Composed indices without a service: the config's checks (each names the file, the field and what
was expected), the graph, the queries that find affected documents, and a document built from rows
handed over by a cursor double (the real queries run against MariaDB in
tests/integration/cdcflow/window/test_composed_documents.py)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from cdcflow.config import load_pipeline
from cdcflow.errors import ConfigError
from connectors.elasticsearch import compose
from connectors.elasticsearch.compose_config import MEMBERS_FIELD, DocumentConfig

DOCUMENT = {
    "root": {"table": "orders", "key": ["id"]},
    "lookups": {"customer": {"table": "customers", "on": {"id": "customer_id"}, "fields": ["name", "tier"]}},
    "nested": {"lines": {"table": "order_lines", "on": {"order_id": "id"}, "order_by": ["line_no"],
                         "fields": {"no": "line_no", "qty": "qty"},
                         "lookups": {"product": {"table": "products", "on": {"id": "product_id"},
                                                 "fields": ["title"]}}}},
}

PIPELINE = """\
name: p
source: {topics_regex: 'shop\\..*'}
sinks:
  - {type: mysql, name: tables, table: "{source.table}", create_table: true}
  - type: elasticsearch
    name: orders
    index: %(index)s
%(extra)s    document:
      root: {table: orders, key: [id]}
      nested:
        lines: {table: order_lines, on: {order_id: id}}
errors: {tolerance: all, dlq_topic: dlq}
%(tail)s"""


def _load(tmp_path: Path, index: str = "orders", extra: str = "", tail: str = "") -> Any:
    path = tmp_path / "p.yaml"
    path.write_text(PIPELINE % {"index": index, "extra": extra, "tail": tail})
    return load_pipeline(path)


def test_a_composed_index_loads_and_lists_its_tables(tmp_path: Path) -> None:
    cfg = _load(tmp_path)
    assert cfg.sinks[1].document.tables() == ["orders", "order_lines"]
    assert DocumentConfig.model_validate(DOCUMENT).tables() == ["orders", "customers", "order_lines", "products"]


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({"index": "'o-{topic}'"}, "sinks.1.index: one index name (no {topic})"),
    ({"extra": "    id_fields: [id]\n"}, "sinks.1.id_fields: not allowed: a composed index"),
    ({"tail": "offset_store: {sink: tables}\n"}, "offset_store.sink: exactly-once commits the offsets in sink 'tables'"),
    ({"tail": "truncate: apply\n"}, "truncate: a TRUNCATE of a table would change every document"),
    ({"extra": "    document_typo: 1\n"}, "sinks.1.document_typo"),
])
def test_a_composed_index_that_cannot_work_names_the_field(tmp_path: Path, kwargs: dict[str, str],
                                                          expected: str) -> None:
    with pytest.raises(ConfigError) as exc:
        _load(tmp_path, **kwargs)
    assert expected in str(exc.value) and "p.yaml" in str(exc.value), str(exc.value)


def test_the_tables_must_be_kept_by_one_named_mysql_sink(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("""\
name: p
source: {topics: [a]}
sinks:
  - {type: mysql, name: one, table: orders, create_table: true}
  - {type: mysql, name: two, table: "{source.table}", create_table: true, mode: history}
  - type: elasticsearch
    index: orders
    document: {root: {table: orders, key: [id]}, nested: {lines: {table: lines, on: {order_id: id}}}}
  - type: elasticsearch
    name: e2
    index: orders2
    document: {kept_by: one, root: {table: orders, key: [id]}, nested: {lines: {table: lines, on: {order_id: id}}}}
  - type: elasticsearch
    name: e3
    index: orders3
    document: {kept_by: two, root: {table: orders, key: [id]}}
errors: {tolerance: all, dlq_topic: dlq}
""")
    with pytest.raises(ConfigError) as exc:
        load_pipeline(path)
    msg = str(exc.value)
    assert "sinks.2.document.kept_by: expected the name of the MySQL sink that keeps the document's tables: " \
           "this pipeline has 2 MySQL sinks ['one', 'two']" in msg, msg
    assert "sinks.3.document: the tables ['lines'] are not kept by sink 'one', which writes the one table " \
           "'orders'" in msg, msg
    assert "sinks.4.document.kept_by: sink 'two' keeps history tables (mode: history)" in msg, msg


def test_names_that_clash_in_the_document_are_refused() -> None:
    with pytest.raises(ValueError, match="a name is either a lookup or a nested array"):
        DocumentConfig.model_validate({**DOCUMENT, "lookups": {"lines": DOCUMENT["lookups"]["customer"]}})
    with pytest.raises(ValueError, match="customer: the field is also one of the table's own fields"):
        DocumentConfig.model_validate({**DOCUMENT, "root": {"table": "orders", "key": ["id"],
                                                            "fields": ["id", "customer"]}})
    with pytest.raises(ValueError, match="each field once"):
        DocumentConfig.model_validate({**DOCUMENT, "root": {"table": "orders", "key": ["id"], "fields": ["a", "a"]}})
    with pytest.raises(ValueError, match=MEMBERS_FIELD):
        DocumentConfig.model_validate({**DOCUMENT, "root": {"table": "orders", "key": ["id"],
                                                            "fields": [MEMBERS_FIELD]}})


def test_seed_columns_are_each_tables_links_and_a_nested_rows_key() -> None:
    root = compose.graph(DocumentConfig.model_validate(DOCUMENT))
    assert [n.name for n in root.walk()] == ["(root)", "customer", "lines", "lines.product"]
    columns = compose.seed_columns(root, ["id"], {"order_lines": ["id"], "products": ["id"]})
    assert columns == {"orders": ["id"], "customers": ["id"], "order_lines": ["order_id", "id"], "products": ["id"]}


def test_the_query_up_joins_the_root_down_to_the_changed_rows_parent() -> None:
    root = compose.graph(DocumentConfig.model_validate(DOCUMENT))
    product = next(n for n in root.walk() if n.name == "lines.product")
    assert compose.up_query(product, ["id"], ["id"], 2) == (
        "SELECT DISTINCT t0.`id` FROM `orders` t0 JOIN `order_lines` t1 ON t1.`order_id` = t0.`id` "
        "WHERE t1.`product_id` IN (%s, %s)")
    customer = next(n for n in root.walk() if n.name == "customer")
    assert compose.up_query(customer, ["id"], ["id"], 1) == (
        "SELECT DISTINCT t0.`id` FROM `orders` t0 WHERE t0.`customer_id` IN (%s)")


class Cursor:
    """A DB-API cursor double: each query answered by the rows of its table that match the IN list."""

    def __init__(self, tables: dict[str, list[dict[str, Any]]]) -> None:
        self.tables, self.description, self._rows = tables, [], []
        self.queries: list[str] = []

    def execute(self, sql: str, params: list[Any]) -> None:
        self.queries.append(sql)
        if sql.startswith("SELECT DISTINCT"):  # affected roots: customers -> orders
            rows = [(r["id"],) for r in self.tables["orders"] if str(r["customer_id"]) in params]
            self.description, self._rows = [("id",)], rows
            return
        table = sql.split("FROM `")[1].split("`")[0]
        column = sql.split("WHERE `")[1].split("`")[0]
        rows = [r for r in self.tables[table] if compose.text(r[column]) in {compose.text(p) for p in params}]
        if "ORDER BY" in sql:
            order = [c.strip(" `") for c in sql.split("ORDER BY ")[1].split(",")]
            rows.sort(key=lambda r: tuple(r[c] for c in order))
        names = list(self.tables[table][0])
        self.description, self._rows = [(n,) for n in names], [tuple(r[n] for n in names) for r in rows]

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self._rows


TABLES = {
    "orders": [{"id": 1, "customer_id": 7, "total": Decimal("19.90"), "at": dt.datetime(2026, 1, 2, 3, 4, 5, 6),
                "__cdc_version": 99},
               {"id": 2, "customer_id": None, "total": Decimal("0.00"), "at": None, "__cdc_version": 98}],
    "customers": [{"id": 7, "name": "Ada", "tier": "gold"}],
    "order_lines": [{"id": 11, "order_id": 1, "line_no": 2, "product_id": 5, "qty": 1},
                    {"id": 10, "order_id": 1, "line_no": 1, "product_id": 6, "qty": 3}],
    "products": [{"id": 5, "title": "Lamp"}],
}


def test_a_document_is_built_from_its_rows_with_lookups_nested_rows_and_members() -> None:
    root = compose.graph(DocumentConfig.model_validate(DOCUMENT))
    cursor = Cursor(TABLES)
    docs = dict(compose.build(cursor, root, ["id"], [("1",), ("2",), ("3",)],
                              compose.Tables({"order_lines": ["id"], "customers": ["id"]})))
    assert docs["3"] is None  # no root row: a delete
    assert docs["1"] == {
        "id": 1, "customer_id": 7, "total": Decimal("19.90"), "at": "2026-01-02T03:04:05.000006",
        "customer": {"name": "Ada", "tier": "gold"},
        "lines": [{"no": 1, "qty": 3, "product": None}, {"no": 2, "qty": 1, "product": {"title": "Lamp"}}],
        MEMBERS_FIELD: ["customers:7", "order_lines:10", "order_lines:11"]}
    assert docs["2"] == {"id": 2, "customer_id": None, "total": Decimal("0.00"), "at": None, "customer": None,
                         "lines": [], MEMBERS_FIELD: []}
    assert compose.encoded(docs["1"]).startswith('{"id":1,"customer_id":7,"total":19.90,')
    assert len(cursor.queries) == 4  # one query per table for every key at once


def test_affected_roots_from_seeds_and_members() -> None:
    root = compose.graph(DocumentConfig.model_validate(DOCUMENT))
    seeds = {"orders": (["id"], [("2",)]), "customers": (["id"], [("7",)]),
             "order_lines": (["order_id", "id"], [("1", "10"), (None, "12")])}
    cursor = Cursor(TABLES)
    got = compose.affected_roots(cursor, root, ["id"], {"orders": seeds["orders"], "customers": seeds["customers"]})
    assert got == {("2",), ("1",)}
    assert compose.member_values(root, seeds, {"order_lines": ["id"]}) == ["order_lines:10", "order_lines:12"]
    # a looked-up row is a member too: a customer whose looked-up column changed reaches the documents
    # that held it before
    assert compose.member_values(root, seeds, {"order_lines": ["id"], "customers": ["id"]}) == [
        "customers:7", "order_lines:10", "order_lines:12"]


def test_the_index_mapping_indexes_the_members_and_leaves_them_out_of_the_source() -> None:
    mapping = compose.mapping({"properties": {"total": {"type": "scaled_float", "scaling_factor": 100}},
                               "_source": {"excludes": ["secret"]}})
    assert mapping == {"properties": {"total": {"type": "scaled_float", "scaling_factor": 100},
                                      MEMBERS_FIELD: {"type": "keyword"}},
                       "_source": {"excludes": [MEMBERS_FIELD, "secret"]}}
