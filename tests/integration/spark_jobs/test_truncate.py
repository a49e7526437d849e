"""``truncate: apply`` (issue 23): a TRUNCATE of the source table, as Debezium's MySQL connector writes
it (op "t", a source block, no row images and no key: mysql.adoc, "truncate events"), in the middle
of a window and at a window boundary, into a table made from the record schema, into one of
declared columns and into an Elasticsearch index; and a replay of the whole topic afterwards, which
must not bring a row or a document back nor delete a newer one."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from cdcflow import cdcgen, runner
from cdcflow.state import StateStore
from tests.fixtures.debezium import mysql_all_types as fx
from tests.helpers import bootstrap, es_docs, make_pipeline, mysql_engine, unique
from tests.integration.connectors.debezium.test_tables import edited

pytestmark = [pytest.mark.integration, pytest.mark.services]

MODES = {"time": "adaptive_time_microseconds", "decimal": "precise", "binary": "bytes", "bigint": "long"}
BASE_TS = int(dt.datetime(2024, 6, 1, 10, 0, 0, tzinfo=dt.UTC).timestamp())


def truncate_event(seconds_later: int, pos: int) -> cdcgen.Event:
    """TRUNCATE TABLE all_types, ``seconds_later`` after the fixture's first change."""
    ts_ms = (BASE_TS + seconds_later) * 1000
    payload = {"before": None, "after": None, "source": fx._source(BASE_TS + seconds_later, pos),  # noqa: SLF001
               "transaction": None, "op": "t", "ts_ms": ts_ms + 150, "ts_us": (ts_ms + 150) * 1000,
               "ts_ns": (ts_ms + 150) * 1_000_000}
    return cdcgen.Event(None, fx._wrap(fx._envelope_schema(MODES), payload, True))  # noqa: SLF001


def rows(table: str) -> dict[int, str]:
    with mysql_engine().connect() as conn:
        return dict(conn.exec_driver_sql(f"SELECT id, c_enum FROM `{table}` ORDER BY id").all())


def documents(index: str) -> dict[int, str]:
    return {int(i): d["c_enum"] for i, d in es_docs(index).items()}


def test_truncate_apply_in_a_window_at_its_boundary_and_under_a_replay(config_dir: Path, store: StateStore,
                                                                       spark: Any) -> None:
    derived, declared = unique("trunc"), unique("trunc_cols")
    index = derived.replace("_", "-")
    cfg = make_pipeline(config_dir, truncate="apply", sinks=[
        {"type": "elasticsearch", "name": "docs", "conn_id": "cdcflow_elasticsearch", "index": index,
         "id_fields": ["id"]},
        {"type": "mysql", "name": "rows", "conn_id": "cdcflow_mysql", "table": derived, "create_table": True},
        {"type": "mysql", "name": "declared", "conn_id": "cdcflow_mysql", "table": declared, "create_table": True,
         "primary_key": ["id"], "columns": [{"name": "id", "type": "INT"},
                                            {"name": "c_enum", "type": "ENUM('small','medium','large')"}]}])
    topic = cfg.source.topics[0]
    events = fx.events()
    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(k, v) for k, v in events[:3]], partitions=1)
    runner.run_window(cfg, "run-1", store=store, spark=spark)
    enum = {r["id"]: r["c_enum"] for r in fx.ROWS}
    assert rows(derived) == rows(declared) == documents(index) == enum

    # in the middle of a window: the update before it is dropped, the create after it applied
    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(*edited(events[3], 600)), truncate_event(660, 7_000),
                                        cdcgen.Event(*edited(events[1], 720))], partitions=1, create=False)
    stats = runner.run_window(cfg, "run-2", store=store, spark=spark)
    assert rows(derived) == rows(declared) == documents(index) == {2: enum[2]}
    assert {(t["sink"], t["table"], t["deleted"]) for t in stats["truncates"]} == {("rows", derived, 3),
                                                                                   ("declared", declared, 3),
                                                                                   ("docs", index, 3)}
    assert "truncates_ignored" not in stats

    # at a window boundary: the truncate ends one window, the next window's create is applied
    cdcgen.produce(bootstrap(), topic, [truncate_event(800, 7_500)], partitions=1, create=False)
    runner.run_window(cfg, "run-3", store=store, spark=spark)
    assert rows(derived) == rows(declared) == documents(index) == {}
    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(*edited(events[2], 900))], partitions=1, create=False)
    runner.run_window(cfg, "run-4", store=store, spark=spark)
    assert rows(derived) == rows(declared) == documents(index) == {3: enum[3]}

    # a replay of the whole topic: the changes older than the last truncate are not written again
    stats = runner.run_window(cfg, "replay", params={"start_offsets": {topic: {"0": 0}}}, store=store, spark=spark)
    assert rows(derived) == rows(declared) == documents(index) == {3: enum[3]}
    assert stats["sinks"]["rows"]["stale"] >= 1 and stats["sinks"]["docs"]["stale"] >= 1
    assert {(t["sink"], t["deleted"]) for t in stats["truncates"]} == {("rows", 0), ("declared", 0), ("docs", 0)}

