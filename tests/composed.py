"""The composed-index test kit (docs/composed-documents.md): a shop's four tables as Debezium writes
their changes (tests/fixtures/debezium/shop.py), the documents they make computed from the events
alone (:class:`Shop`), a pipeline that keeps the tables and the ``orders`` index, and the comparison
of an index with the model, field by field."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from cdcflow import cdcgen
from cdcflow.config import load_pipeline
from tests.fixtures.debezium import shop
from tests.helpers import bootstrap, es_docs, write_pipeline


class Shop:
    """The tables as the events leave them, and the documents they make (the test's own, simple
    computation: no query, no code of cdcflow's)."""

    def __init__(self, prefix: str) -> None:
        self.stream = shop.Stream(prefix)
        self.rows: dict[str, dict[int, dict[str, Any]]] = {t: {} for t in shop.TABLES}
        self.pending: dict[str, list[cdcgen.Event]] = {}

    def put(self, table: str, **row: Any) -> None:
        before = self.rows[table].get(row["id"])
        after = {**(before or {}), **row}
        self._emit(table, before, after)
        self.rows[table][row["id"]] = after

    def delete(self, table: str, key: int) -> None:
        self._emit(table, self.rows[table].pop(key), None)

    def _emit(self, table: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> None:
        topic, key, value, extra = self.stream.change(table, before, after)
        self.pending.setdefault(topic, []).extend(
            [cdcgen.Event(key, value), *(cdcgen.Event(k, v) for k, v in extra)])

    def produce(self, created: set[str]) -> None:
        for topic, events in self.pending.items():
            cdcgen.produce(bootstrap(), topic, events, partitions=1, create=topic not in created)
            created.add(topic)
        self.pending = {}

    def documents(self) -> dict[str, dict[str, Any]]:
        out = {}
        for oid, order in self.rows["orders"].items():
            customer = self.rows["customers"].get(order["customer_id"])
            lines = sorted((r for r in self.rows["order_lines"].values() if r["order_id"] == oid),
                           key=lambda r: (r["line_no"], r["id"]))
            out[str(oid)] = {
                "id": oid, "customer_id": order["customer_id"], "status": order["status"],
                "total": Decimal(order["total"]), "created": order["created"],
                "customer": None if customer is None else {"name": customer["name"], "tier": customer["tier"]},
                "lines": [{"no": r["line_no"], "qty": r["qty"],
                           "product": ({"title": self.rows["products"][r["product_id"]]["title"]}
                                       if r["product_id"] in self.rows["products"] else None)} for r in lines]}
        return out


def pipeline(config_dir: Path, prefix: str, **document: Any) -> Any:
    t = f"{prefix}_{{}}".format
    path = write_pipeline(config_dir, prefix, f"{prefix}.unused", "unused", sinks=[
        {"type": "mysql", "name": "tables", "conn_id": "cdcflow_mysql", "table": f"{prefix}_{{source.table}}",
         "create_table": True, "auto_evolve": True},
        {"type": "elasticsearch", "name": "orders", "conn_id": "cdcflow_elasticsearch", "index": f"{prefix}-orders",
         "mapping": {"properties": {"total": {"type": "scaled_float", "scaling_factor": 100},
                                    "status": {"type": "keyword"}}},
         "document": {
             "root": {"table": t("orders"), "key": ["id"], "fields": ["id", "customer_id", "status", "total",
                                                                         "created"]},
             "lookups": {"customer": {"table": t("customers"), "on": {"id": "customer_id"},
                                      "fields": ["name", "tier"]}},
             "nested": {"lines": {"table": t("order_lines"), "on": {"order_id": "id"}, "order_by": ["line_no"],
                                  "fields": {"no": "line_no", "qty": "qty"},
                                  "lookups": {"product": {"table": t("products"), "on": {"id": "product_id"},
                                                          "fields": ["title"]}}}},
             **document}}])
    data = yaml.safe_load(path.read_text())
    data["source"] = {**{k: v for k, v in data["source"].items() if k != "topics"},
                      "topics_regex": rf"{prefix}\.shop\..*"}
    data["errors"] = {"tolerance": "none"}
    path.write_text(yaml.safe_dump(data))
    return load_pipeline(path)


def read(index: str) -> dict[str, dict[str, Any]]:
    docs = es_docs(index)
    out = {}
    for doc_id, doc in docs.items():
        doc = json.loads(json.dumps(doc), parse_float=Decimal)
        doc.pop("_version")
        doc["total"] = Decimal(str(doc["total"])).quantize(Decimal("0.01")) if doc.get("total") is not None else None
        out[doc_id] = doc
    return out


def same(got: dict[str, dict[str, Any]], want: dict[str, dict[str, Any]], when: str) -> None:
    assert sorted(got) == sorted(want), f"{when}: document ids"
    for doc_id, doc in want.items():
        for name, value in doc.items():
            assert got[doc_id].get(name) == value, f"{when}: document {doc_id}, field {name}"
        assert set(got[doc_id]) == set(doc), f"{when}: document {doc_id}'s fields"
