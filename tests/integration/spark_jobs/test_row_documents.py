"""An Elasticsearch index behind an SMT chain, on the per-partition path (spark_jobs/transform/row_documents.py):
the same Debezium records into an index without a chain and into one with, and the documents read
back compared field by field, and with the values the source database held.

The records are Debezium's MySQL connector's own (tests/fixtures/debezium/orders.py: the JsonConverter
with schemas, per the pages that module names).
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from cdcflow import cdcgen, runner
from cdcflow.config import load_pipeline
from cdcflow.state import StateStore
from tests.fixtures import orders as o
from tests.fixtures.debezium import orders as fx
from tests.helpers import bootstrap, es_client, mysql_engine, unique, write_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.services("kafka", "mysql", "elasticsearch", "spark")]

CHAIN = [
    {"type": "ExtractNewRecordState", "delete_handling": "none", "drop_tombstones": False},
    {"type": "Cast", "spec": {"paid": "boolean"}},
    {"type": "ReplaceField", "exclude": ["note"], "renames": {"customer": "buyer"}},
    {"type": "TimestampConverter", "field": "created", "target_type": "unix", "unix_precision": "microseconds"},
    {"type": "InsertField", "static_field": "src", "static_value": "shop"},
]



def _micros(at: dt.datetime) -> int:
    return (at.replace(tzinfo=dt.UTC) - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)


def _documents(index: str) -> dict[int, dict[str, Any]]:
    es = es_client()
    es.indices.refresh(index=index)
    return {h["_source"]["id"]: h["_source"] for h in es.search(index=index, size=100)["hits"]["hits"]}


def test_an_index_behind_a_chain_holds_the_documents_without_it_with_the_chains_changes(
        config_dir: Path, store: StateStore, spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a table beside the index, both made from the record schema before the read (the read
    tasks write them: early.schema_tables) as the chain leaves that schema."""
    tag = unique("rowdocs")
    topic = f"{tag}.inventory.orders"
    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(k, v) for k, v in fx.events()], partitions=2)
    stats = {}
    for name, chain in (("plain", []), ("chain", CHAIN)):
        cfg = load_pipeline(write_pipeline(
            config_dir, f"{tag}_{name}", topic, "unused", transforms=chain,
            source={"key_converter": "json_schema" if chain else "json",
                    "value_converter": "json_schema" if chain else "json"},
            sinks=[{"type": "elasticsearch", "name": "e", "conn_id": "cdcflow_elasticsearch",
                    "index": f"{tag}-{name}", "id_fields": ["id"]},  # mapped from the record schema
                   {"type": "mysql", "name": "m", "conn_id": "cdcflow_mysql", "table": f"{tag}_{name}",
                    "create_table": True, "pk_mode": "record_key"}]))  # made from it
        stats[name] = runner.run_window(cfg, name, store=store, spark=spark)

    plain, chained = _documents(f"{tag}-plain"), _documents(f"{tag}-chain")
    assert sorted(chained) == sorted(plain) == sorted(o.FINAL)  # the deleted row's document deleted
    for i, row in o.FINAL.items():
        want = {k: v for k, v in plain[i].items() if k not in ("note", "customer", "created", "paid")}
        want |= {"buyer": plain[i]["customer"], "created": _micros(row["created"]), "paid": bool(row["paid"]),
                 "src": "shop"}
        assert chained[i] == want
        assert (chained[i]["buyer"], Decimal(str(chained[i]["amount"])), chained[i]["ship_date"]) == (
            row["customer"], row["amount"], row["ship_date"].isoformat())
    es = es_client()
    properties = {name: es.indices.get_mapping(index=f"{tag}-{name}")[f"{tag}-{name}"]["mappings"]["properties"]
                  for name in ("plain", "chain")}
    assert properties["chain"]["buyer"] == properties["plain"]["customer"]  # a renamed field keeps its mapping
    assert properties["chain"]["amount"] == properties["plain"]["amount"]
    assert properties["chain"]["created"]["type"] == "long"  # retyped: mapped by Elasticsearch from its value
    assert "note" not in properties["chain"]
    assert stats["chain"]["records"] == stats["plain"]["records"] == len(fx.events())
    assert stats["chain"]["dead_lettered"] == stats["plain"]["dead_lettered"] == 0
    with mysql_engine().connect() as conn:
        types = dict(conn.exec_driver_sql(
            "SELECT column_name, column_type FROM information_schema.columns WHERE table_schema = DATABASE() "
            "AND table_name = %s", (f"{tag}_chain",)).fetchall())
        rows = [tuple(r) for r in conn.exec_driver_sql(f"SELECT id, buyer, paid, created FROM `{tag}_chain` ORDER BY id")]
    assert (types["buyer"], types["paid"], types["created"], types["src"]) == (
        "longtext", "tinyint(1)", "bigint(20)", "longtext")
    assert "note" not in types and "customer" not in types
    assert rows == [(i, r["customer"], r["paid"], _micros(r["created"])) for i, r in sorted(o.FINAL.items())]
    assert "sinks" not in stats["chain"]["stages"]  # written by the read tasks, nothing handed on
