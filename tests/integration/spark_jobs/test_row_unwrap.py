"""ExtractNewRecordState after steps on the record, and its add_fields ts_ms, lsn, connector and
source.ts_ms, on the per-partition path (spark_jobs/transform/row_unwrap.py), into MySQL, read back.

The records are Debezium's own: the MySQL connector's (tests/fixtures/debezium/orders.py, mysql.adoc
"Change event values", "Tombstone events") and the PostgreSQL connector's
(tests/fixtures/debezium/postgres_toast.py, https://debezium.io/documentation/reference/stable/
connectors/postgresql.html "create events", "delete events"), with the JsonConverter's schemas. The
added fields are those of Debezium's New Record State Extraction page (https://debezium.io/
documentation/reference/stable/transformations/event-flattening.html, "Adding Debezium metadata to
the Kafka record").
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from cdcflow import cdcgen, runner
from cdcflow.state import StateStore
from tests.fixtures import orders as o
from tests.fixtures.debezium import orders as fx
from tests.fixtures.debezium import postgres_toast as pg
from tests.helpers import bootstrap, unique
from tests.integration.spark_jobs.test_row_transforms import (
    CHAIN,
    COLUMNS,
    _micros,
    _pipeline,
    _select,
)

pytestmark = [pytest.mark.integration, pytest.mark.services("kafka", "mysql", "spark")]

ADDED = [{"name": "ts", "type": "BIGINT", "field": "__ts_ms"}, {"name": "lsn", "type": "BIGINT", "field": "__lsn"},
         {"name": "connector", "type": "VARCHAR(16)", "field": "__connector"},
         {"name": "source_ts", "type": "BIGINT", "field": "__source_ts_ms"}]


def test_steps_on_the_record_before_the_unwrap_give_the_rows_of_the_source(
        config_dir: Path, store: StateStore, spark: Any) -> None:
    """[RegexRouter, TombstoneHandler, Filter, ExtractNewRecordState with add_fields, the field steps]:
    the topic renamed into the table's name before the unwrap, the Kafka tombstones dropped there (not
    the delete events, whose value is the envelope: they still delete their rows), another topic's
    records filtered out; each row as the source held it last, with the envelope's ts_ms, connector
    and source.ts_ms of its last change, and no lsn (MySQL's source block has none)."""
    tag = unique("rowfirst")
    topic = f"{tag}.inventory.orders"
    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(k, v) for k, v in fx.events()], partitions=2)

    steps = [{"type": "RegexRouter", "regex": rf"{tag}\.inventory\.(.*)", "replacement": f"{tag}_new_$1"},
             {"type": "TombstoneHandler", "behavior": "ignore"},
             {"type": "Filter", "predicate": {"type": "TopicNameMatches", "pattern": r".*_customers"}},
             {"type": "ExtractNewRecordState", "delete_handling": "none", "drop_tombstones": False,
              "add_fields": ["ts_ms", "lsn", "connector", "source.ts_ms"]},
             *CHAIN[1:4], CHAIN[5]]  # CHAIN's MaskField reads the topic, which the router renamed
    cfg = _pipeline(config_dir, tag, topic, "{topic}", steps, [*COLUMNS, *ADDED], "json_schema")
    stats = runner.run_window(cfg, "w", store=store, spark=spark)
    # the last change of each row: its statement's time, and its place in the statement's rows
    last = {3: (o.STATEMENTS[2].at, 1), 4: (o.STATEMENTS[2].at, 0)}  # 2 -> 3 the second row, 3 -> 4 the first
    want = [(i, r["customer"], r["paid"], _micros(r["created"]), "shop", last[i][0] * 1000 + 150 + last[i][1], None,
             "mysql", last[i][0] * 1000) for i, r in sorted(o.FINAL.items())]
    assert _select(f"{tag}_new_orders", "id, buyer, paid, created_us, src, ts, lsn, connector, source_ts") == want
    assert (stats["records"], stats["dead_lettered"]) == (len(fx.events()), 0)


def test_postgresqls_lsn_and_times_are_added_with_versioning_by_offset(
        config_dir: Path, store: StateStore, spark: Any) -> None:
    """PostgreSQL's create and update of row 1 and 2, then the delete of 2 rewritten (Debezium's
    delete.handling.mode rewrite): each row's lsn, ts_ms, connector and source.ts_ms as its last event
    carried them, with versioning kafka_offset (source.ts_ms read from the value, not the version)."""
    tag = unique("rowlsn")
    at = int(time.time() * 1000)
    anne = pg.row(1, "Anne", "Kretchmar", "annek@noanswer.org", None)
    events = [pg.event("c", at, 24023128, None, anne), pg.event("c", at + 10, 24023200, None, pg.row(
        2, "Dana", "Scully", "dana@noanswer.org", "FBI")), pg.update(at + 20, 24023300, {**anne, "first_name": "Ann"}),
        *pg.delete(at + 30, 24023400, 2)]
    topic = f"{tag}.inventory.customers"
    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(k, v) for k, v in events], partitions=1)
    steps = [{"type": "ExtractNewRecordState", "delete_handling": "rewrite",
              "add_fields": ["ts_ms", "lsn", "connector", "source.ts_ms"]}]
    columns = [{"name": "id", "type": "INT"}, {"name": "first_name", "type": "VARCHAR(32)"},
               {"name": "deleted", "type": "VARCHAR(5)", "field": "__deleted"}, *ADDED]
    cfg = _pipeline(config_dir, tag, topic, tag, steps, columns, "json_schema")
    cfg = cfg.model_copy(update={"versioning": "kafka_offset"})
    stats = runner.run_window(cfg, "w", store=store, spark=spark)

    assert _select(tag, "id, first_name, deleted, ts, lsn, connector, source_ts") == [
        (1, "Ann", "false", at + 20 + 150, 24023300, "postgresql", at + 20),
        (2, None, "true", at + 30 + 150, 24023400, "postgresql", at + 30)]  # the delete's before: the key alone
    assert (stats["records"], stats["dead_lettered"]) == (len(events), 0)
