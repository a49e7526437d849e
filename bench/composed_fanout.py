"""Documents rebuilt per second by a composed index (docs/composed-documents.md): one changed order
(a fan-out of 1), and one changed customer who has 200,000 orders of two lines each (a fan-out of
200,000), each a window run by ``cdcflow``'s runner on the long-lived Spark.

    python -m bench.composed_fanout [--orders 200000] [--small 5]

The stream is Debezium's encoding of the shop's tables (tests/fixtures/debezium/shop.py). A first
window creates the four tables from the record schema; the 200,000 orders and 400,000 lines are
then inserted by SQL (MariaDB's sequence engine) as the MySQL sink would have written them, so that
the bench measures the rebuild and not the loading. The ceiling: the same 200,000 documents, read
back, bulk-indexed into an index of the same mapping by ``elasticsearch.helpers.streaming_bulk``
(2,000 per request, no version, no mget, no tombstone), in one process.

Prints a table and writes bench/results/<time>-composed-fanout.json. Needs the services
(scripts/services.sh start).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

from cdcflow import cdcgen, runner
from cdcflow.config import load_pipeline
from cdcflow.connections import get_connection
from tests.fixtures.debezium import shop

ROOT = Path(__file__).resolve().parent.parent


class Emitter:
    def __init__(self, prefix: str) -> None:
        self.stream = shop.Stream(prefix)
        self.rows: dict[tuple[str, int], dict[str, Any]] = {}
        self.created: set[str] = set()

    def put(self, table: str, **row: Any) -> None:
        before = self.rows.get((table, row["id"]))
        after = {**(before or {}), **row}
        topic, key, value, _extra = self.stream.change(table, before, after)
        bootstrap = get_connection("cdcflow_kafka").kafka_config()["bootstrap.servers"]
        cdcgen.produce(bootstrap, topic, [cdcgen.Event(key, value)], partitions=1, create=topic not in self.created)
        self.created.add(topic)
        self.rows[(table, row["id"])] = after


def pipeline(directory: Path, prefix: str, orders: int) -> Any:
    t = f"{prefix}_{{}}".format
    data = {"name": prefix, "source": {"topics_regex": rf"{prefix}\.shop\..*", "kafka_conn_id": "cdcflow_kafka"},
            "window": {"max_records": 100_000, "max_duration": "120s", "stop_on_empty": True},
            "initial_offsets": "earliest", "errors": {"tolerance": "none"},
            "sinks": [
                {"type": "mysql", "name": "tables", "conn_id": "cdcflow_mysql", "table": f"{prefix}_{{source.table}}",
                 "create_table": True},
                {"type": "elasticsearch", "name": "orders", "conn_id": "cdcflow_elasticsearch",
                 "index": f"{prefix}-orders", "mapping": {"properties": {
                     "total": {"type": "scaled_float", "scaling_factor": 100}, "status": {"type": "keyword"}}},
                 "document": {
                     "root": {"table": t("orders"), "key": ["id"]},
                     "lookups": {"customer": {"table": t("customers"), "on": {"id": "customer_id"},
                                              "fields": ["name", "tier"]}},
                     "nested": {"lines": {"table": t("order_lines"), "on": {"order_id": "id"},
                                          "order_by": ["line_no"], "fields": {"no": "line_no", "qty": "qty"},
                                          "lookups": {"product": {"table": t("products"), "on": {"id": "product_id"},
                                                                  "fields": ["title"]}}}},
                     "max_documents": orders + 10}}]}
    path = directory / f"{prefix}.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_pipeline(path)


def load(prefix: str, orders: int) -> None:
    """The orders and lines of customer 1, as the MySQL sink writes them (its version column too)."""
    from tests.helpers import mysql_engine  # noqa: PLC0415

    with mysql_engine().begin() as conn:
        conn.exec_driver_sql(
            f"INSERT INTO `{prefix}_orders` (id, customer_id, status, total, created, __cdc_version) "
            f"SELECT seq + 1000, 1, 'new', 12.50, '2026-01-01 10:00:00.000000', 1 FROM seq_1_to_{orders}")
        conn.exec_driver_sql(
            f"INSERT INTO `{prefix}_order_lines` (id, order_id, line_no, product_id, qty, __cdc_version) "
            f"SELECT seq + 10000000, (seq + 1) DIV 2 + 1000, 2 - seq MOD 2, 1 + seq MOD 50, 1, 1 "
            f"FROM seq_1_to_{2 * orders}")


def documents_stage(stats: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    return stats["stages"]["documents"], stats["documents"]["orders"]


def ceiling(index: str, docs: int) -> float:
    """The same documents, bulk-indexed into a new index of the same mapping by the client's own helper;
    first, every one of them checked field by field against what the tables hold (customer 1's orders
    by load(): its changed name and tier, two lines in order with their products' titles)."""
    from elasticsearch import Elasticsearch, helpers  # noqa: PLC0415

    client = Elasticsearch(get_connection("cdcflow_elasticsearch").http_url(), request_timeout=120)
    mapping = client.indices.get_mapping(index=index)[index]["mappings"]
    copy = f"{index}-ceiling"
    client.indices.create(index=copy, mappings=mapping)
    sources = [(h["_id"], h["_source"]) for h in helpers.scan(client, index=index, size=5000)]
    assert len(sources) == docs, (len(sources), docs)
    for doc_id, doc in sources:
        oid = int(doc_id)
        if oid < 1001:
            continue  # the setup window's order of customer 2
        first, second = 2 * (oid - 1000) - 1, 2 * (oid - 1000)  # the lines load() gave the order
        want_lines = [{"no": 1, "qty": 1, "product": {"title": f"Product {1 + first % 50}"}},
                      {"no": 2, "qty": 1, "product": {"title": f"Product {1 + second % 50}"}}]
        assert doc["customer"] == {"name": "Ada Lovelace", "tier": "platinum"}, (doc_id, doc)
        assert doc["lines"] == want_lines, (doc_id, doc["lines"], want_lines)
        assert doc["customer_id"] == 1 and doc["total"] == 12.5, (doc_id, doc)
    started = time.perf_counter()
    for ok, item in helpers.streaming_bulk(client, ({"_index": copy, "_id": i, "_source": s} for i, s in sources),
                                           chunk_size=2000, max_chunk_bytes=50_000_000, raise_on_error=True):
        assert ok, item
    seconds = time.perf_counter() - started
    client.indices.delete(index=copy)
    client.close()
    return seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--orders", type=int, default=200_000)
    ap.add_argument("--small", type=int, default=5, help="windows of one changed order (the median is quoted)")
    args = ap.parse_args(argv)
    prefix = f"fan_{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp:
        cfg = pipeline(Path(tmp), prefix, args.orders)
        e = Emitter(prefix)
        e.put("customers", id=1, name="Ada", tier="gold")
        for pid in range(1, 51):
            e.put("products", id=pid, title=f"Product {pid}", price="9.90")
        e.put("orders", id=1, customer_id=2, status="new", total="1.00", created=shop.moment("2026-01-01T00:00:00"))
        e.put("order_lines", id=1, order_id=1, line_no=1, product_id=1, qty=1)
        runner.run_window(cfg, "setup", spark=None)
        load(prefix, args.orders)
        e.put("customers", id=1, tier="platinum")  # the first big rebuild: every document is new
        first_s, first = documents_stage(runner.run_window(cfg, "load", spark=None))
        small = []
        for i in range(args.small):
            e.rows[("orders", 1001 + i)] = {"id": 1001 + i, "customer_id": 1, "status": "new", "total": "12.50",
                                            "created": shop.moment("2026-01-01T10:00:00")}  # as load() wrote it
            e.put("orders", id=1001 + i, status=f"paid-{i}")
            seconds, figures = documents_stage(runner.run_window(cfg, f"small-{i}", spark=None))
            assert figures["rebuilt"] == 1, figures
            small.append(seconds)
        e.put("customers", id=1, name="Ada Lovelace")  # every document again, over documents that exist
        big_s, big = documents_stage(runner.run_window(cfg, "fanout", spark=None))
        assert big["rebuilt"] == args.orders, big
        bare = ceiling(f"{prefix}-orders", args.orders + 1)
    rows = {
        "fan-out 1 (one changed order), median window stage": {"documents": 1, "seconds": round(statistics.median(small), 3),
                                                               "docs_per_s": round(1 / statistics.median(small), 1)},
        f"fan-out {args.orders} (a changed customer), first build": {
            "documents": first["rebuilt"], "seconds": round(first_s, 2),
            "docs_per_s": round(first["rebuilt"] / first_s)},
        f"fan-out {args.orders} (a changed customer), documents that exist": {
            "documents": big["rebuilt"], "seconds": round(big_s, 2), "docs_per_s": round(big["rebuilt"] / big_s),
            "task_read_s": big["read_s"], "task_write_s": big["write_s"]},
        "ceiling: the same documents by streaming_bulk, one process": {
            "documents": args.orders + 1, "seconds": round(bare, 2), "docs_per_s": round((args.orders + 1) / bare)},
    }
    print("| case | documents | seconds | documents/s |\n|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['documents']} | {r['seconds']} | {r['docs_per_s']} |")
    print(f"rebuild / ceiling: {rows[list(rows)[2]]['docs_per_s'] / rows[list(rows)[3]]['docs_per_s']:.2f}; "
          f"the rebuild tasks' seconds, summed: reading and building {big['read_s']}, writing {big['write_s']}")
    out = ROOT / "bench" / "results" / f"{time.strftime('%Y%m%dT%H%M%S')}-composed-fanout.json"
    out.write_text(json.dumps({"command": "python -m bench.composed_fanout " + " ".join(argv or sys.argv[1:]),
                               "small_seconds": small, "rows": rows}, indent=2))
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
