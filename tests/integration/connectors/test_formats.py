"""The same changes (tests/fixtures/orders.py) written by Debezium, Oracle GoldenGate's JSON
formatter, Canal and Maxwell, each the way its producer documents it (tests/fixtures/<format>/orders.py
name the pages), through four pipelines (``source.format``) and real windows on the running Spark
into MariaDB: the four tables hold the same rows, value by value. Canal's table is created from its
``mysqlType``, and its Elasticsearch index (mapping from the same types) holds the same values. A
Canal TRUNCATE (truncate: dlq), a DDL statement and a value that does not parse by its type go to
the DLQ with their reason; a GoldenGate TRUNCATE (truncate: ignore) leaves the rows and is counted;
a message of N rows counts as one record."""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import requests

from cdcflow import cdcgen, runner
from cdcflow.connections import get_connection
from cdcflow.state import StateStore
from connectors.kafka.dlq import DeadLetter
from tests.fixtures import orders as o
from tests.fixtures.canal import orders as canal
from tests.fixtures.debezium import orders as debezium
from tests.fixtures.goldengate import orders as goldengate
from tests.fixtures.maxwell import orders as maxwell
from tests.helpers import bootstrap, make_pipeline, mysql_engine, read_topic, unique

pytestmark = [pytest.mark.integration, pytest.mark.services]

EXPECTED = [tuple(o.FINAL[k][c] for c in o.COLUMNS) for k in sorted(o.FINAL)]


def mysql_sink(table: str, columns: list[dict[str, Any]] | None) -> dict[str, Any]:
    sink: dict[str, Any] = {"type": "mysql", "name": "rows", "conn_id": "cdcflow_mysql", "table": table,
                            "create_table": True, "primary_key": [], "columns": []}
    if columns:
        sink.update(primary_key=["id"], columns=columns)
    return sink


def run(config_dir: Path, store: StateStore, spark: Any, source_format: str, events: list[tuple[Any, Any]],
        columns: list[dict[str, Any]] | None, extra_sinks: tuple[dict[str, Any], ...] = (),
        **overrides: Any) -> tuple[Any, dict[str, Any]]:
    table = unique(f"orders_{source_format}")
    cfg = make_pipeline(config_dir, source={"format": source_format}, sinks=[mysql_sink(table, columns), *extra_sinks],
                        **overrides)
    cdcgen.produce(bootstrap(), cfg.source.topics[0], [cdcgen.Event(k, v) for k, v in events], partitions=1)
    stats = runner.run_window(cfg, unique("run"), store=store, spark=spark)
    return cfg, {**stats, "table": table}


def read_mysql(table: str) -> list[tuple[Any, ...]]:
    with mysql_engine().connect() as conn:
        return [tuple(r) for r in conn.exec_driver_sql(
            f"SELECT {', '.join(o.COLUMNS)} FROM `{table}` ORDER BY id")]


def column_types(table: str) -> dict[str, str]:
    with mysql_engine().connect() as conn:
        return dict(conn.exec_driver_sql(
            "SELECT column_name, column_type FROM information_schema.columns WHERE table_schema = DATABASE() "
            f"AND table_name = '{table}'").fetchall())


def read_es(index: str) -> dict[int, dict[str, Any]]:
    url = get_connection("cdcflow_elasticsearch").http_url()
    requests.post(f"{url}/{index}/_refresh", timeout=30).raise_for_status()
    hits = json.loads(requests.get(f"{url}/{index}/_search?size=100", timeout=30).text,
                      parse_float=Decimal)["hits"]["hits"]
    return {h["_source"]["id"]: h["_source"] for h in hits}


@pytest.fixture
def index() -> Iterator[str]:
    """A throw-away index, deleted after the test (the cluster's shards are few: 1,000 by default)."""
    name = unique("orders-canal").replace("_", "-")
    yield name
    requests.delete(f"{get_connection('cdcflow_elasticsearch').http_url()}/{name}", timeout=30)


def test_the_same_changes_in_four_formats_give_the_same_table(config_dir: Path, store: StateStore, spark: Any,
                                                                index: str) -> None:
    es_sink = {"type": "elasticsearch", "name": "docs", "conn_id": "cdcflow_elasticsearch", "index": index,
               "id_fields": ["id"]}
    bad = canal.message(o.STATEMENTS[0], 9)
    bad["data"] = [{**bad["data"][0], "id": "9", "created": "2024-13-01 00:00:00.000000"}]
    canal_events = [*canal.events(), (None, canal.truncate()), (None, canal.alter()), (None, canal.dumps(bad))]
    runs = {
        "debezium": run(config_dir, store, spark, "debezium", debezium.events(), o.SINK_COLUMNS),
        # the table's JSON schema first (the handler's schema topic read too: read, nothing applied); a GoldenGate
        # TRUNCATE (op_type T) after the changes: truncate: ignore (the default) leaves the rows
        "goldengate": run(config_dir, store, spark, "goldengate",
                          [goldengate.schema(goldengate.COLUMN_TYPES), *goldengate.events(),
                           (None, goldengate.message(goldengate.operation("T", o.T0 + 300, 9000)))],
                          [{**c, "field": c["name"].upper()} for c in o.SINK_COLUMNS]),
        # truncate: dlq sends Canal's TRUNCATE to the dead-letter topic
        "canal": run(config_dir, store, spark, "canal", canal_events, None, (es_sink,), truncate="dlq"),
        "maxwell": run(config_dir, store, spark, "maxwell", maxwell.events(), o.SINK_COLUMNS),
    }
    for name, (_cfg, stats) in runs.items():
        assert read_mysql(stats["table"]) == EXPECTED, name  # value by value: Decimal, datetime(6), date, int, text

    # records, not rows: Debezium's 13 events (key moves and deletes with their tombstones), GoldenGate's and
    # Maxwell's 8 operations (GoldenGate's with its schema and truncate), Canal's 4 messages of 10 rows, its ALTER
    # (read, nothing applied) and 2 dead letters
    assert {n: s["records"] for n, (_c, s) in runs.items()} == {"debezium": 13, "goldengate": 10, "canal": 7,
                                                               "maxwell": 8}
    assert {n: s.get("truncates_ignored", 0) for n, (_c, s) in runs.items()} == {
        "debezium": 0, "goldengate": 1, "canal": 0, "maxwell": 0}
    assert {n: s["dead_lettered"] for n, (_c, s) in runs.items()} == {"debezium": 0, "goldengate": 0, "canal": 2,
                                                                     "maxwell": 0}

    cfg, stats = runs["canal"]
    types = column_types(stats["table"])  # the table Canal's mysqlType describes
    assert {c: types[c].lower() for c in ("amount", "qty", "created", "paid")} == {
        "amount": "decimal(10,2)", "qty": "bigint(20) unsigned", "created": "datetime(6)", "paid": "tinyint(1)"}
    docs = read_es(index)
    assert sorted(docs) == [3, 4]
    for key, row in o.FINAL.items():
        expected = {"id": key, "customer": row["customer"], "amount": row["amount"], "qty": row["qty"],
                    "created": row["created"].isoformat(timespec="microseconds"),
                    "ship_date": row["ship_date"].isoformat(), "paid": row["paid"], "note": row["note"]}
        assert docs[key] == expected
        assert str(docs[key]["amount"]) == str(row["amount"])  # digits and scale: 19.90, -12345.67

    assert cfg.errors.dlq_topic is not None
    dead = [DeadLetter(m.partition(), m.offset(), None, m.key(), m.value(), tuple(m.headers() or ()))
            for m in read_topic(cfg.errors.dlq_topic)]
    assert sorted((d.original_offset, d.context("exception.message")) for d in dead) == [
        (4, "a TRUNCATE of the source table inventory.orders (truncate: dlq): sent to the dead-letter topic, the "
            "target keeps its rows; truncate: ignore skips such records"),
        (6, "field 'created' = '2024-13-01 00:00:00.000000' is not a valid DATETIME(6) (a datetime YYYY-MM-DD "
            "hh:mm:ss[.ffffff])"),
    ]
    assert all(d.value == canal_events[d.original_offset][1] for d in dead)  # the original bytes, once each
