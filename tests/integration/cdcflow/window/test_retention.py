"""Retention on the real services: old tombstones leave MariaDB and Elasticsearch, young ones and
other tables' stay; a replay that reaches records older than the tombstones' retention is refused."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cdcflow import cdcgen, runner
from cdcflow.config import ElasticsearchSinkConfig, MySqlSinkConfig, load_pipeline
from cdcflow.connections import get_connection
from cdcflow.errors import ConfigError
from cdcflow.state import StateStore
from connectors.elasticsearch.sink import TOMBSTONES as ES_TOMBSTONES
from connectors.elasticsearch.sink import ElasticsearchSink
from connectors.mysql.sink import TOMBSTONES, TOMBSTONES_AGE_INDEX, MySqlSink
from tests.helpers import bootstrap, es_client, mysql_engine, unique, write_pipeline
from tests.integration.cdcflow.window.test_time_ranges import BASE, H, five_hours

pytestmark = [pytest.mark.integration, pytest.mark.services]
DAY = 86400


def test_old_mysql_tombstones_are_pruned_and_young_ones_kept() -> None:
    tag = unique("rt")
    url = get_connection("cdcflow_mysql").sqlalchemy_url()
    columns = [{"name": "id", "type": "BIGINT"}]
    concrete = MySqlSink(MySqlSinkConfig(type="mysql", table=f"{tag}_a", primary_key=["id"], columns=columns,
                                         create_table=True), url)
    concrete.open()  # creates the tombstone table if this database has none yet
    concrete.close()
    sink = MySqlSink(MySqlSinkConfig(type="mysql", table=f"{tag}_{{topic}}", primary_key=["id"], columns=columns), url)
    rows = [(f"{tag}_a", b"k1", 40), (f"{tag}_a", b"k2", 1), (f"{tag}_b", b"k3", 40), (f"other{tag}", b"k4", 40)]
    with mysql_engine().begin() as conn:
        conn.exec_driver_sql(f"DROP INDEX IF EXISTS `{TOMBSTONES_AGE_INDEX}` ON `{TOMBSTONES}`")  # an older table
        for table, key, days in rows:
            conn.exec_driver_sql(
                f"INSERT INTO `{TOMBSTONES}` (table_name, key_hash, key_json, version, deleted_at) "
                "VALUES (%s, UNHEX(SHA1(%s)), %s, 1, NOW() - INTERVAL %s DAY)", (table, key, "{}", days))
    assert sink.prune_tombstones(30 * DAY, batch=1) == 2  # {topic} routes: both old ones of tag_a and tag_b
    with mysql_engine().connect() as conn:
        left = sorted(r[0] for r in conn.exec_driver_sql(
            f"SELECT table_name FROM `{TOMBSTONES}` WHERE table_name LIKE %s", (f"%{tag}%",)))
        assert left == sorted([f"{tag}_a", f"other{tag}"])  # the young one, and another table's
        assert conn.exec_driver_sql(
            "SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND "
            "TABLE_NAME = %s AND INDEX_NAME = %s", (TOMBSTONES, TOMBSTONES_AGE_INDEX)).scalar() == 2


def test_old_elasticsearch_tombstones_are_pruned_and_young_ones_kept() -> None:
    conn = get_connection("cdcflow_elasticsearch")
    tag = unique("rt")
    sink = ElasticsearchSink(ElasticsearchSinkConfig(type="elasticsearch", index=f"{tag}-{{topic}}",
                                                     id_fields=["id"]), conn.http_url())
    sink.open()
    sink.close()
    es = es_client()
    now_ms = int(time.time() * 1000)
    docs = {"old": (f"{tag}-a", now_ms - 40 * DAY * 1000), "young": (f"{tag}-a", now_ms - 1000),
            "other": (f"x{tag}-a", now_ms - 40 * DAY * 1000), "legacy": (f"{tag}-b", None)}
    for doc_id, (index, at) in docs.items():
        body = {"index": index, "id": doc_id, **({"deleted_at": at} if at else {})}
        es.index(index=ES_TOMBSTONES, id=f"{tag}-{doc_id}", document=body, refresh=True)
    assert sink.prune_tombstones(30 * DAY) == 1
    left = {h["_source"]["id"] for h in es.search(index=ES_TOMBSTONES, size=100, query={
        "terms": {"_id": [f"{tag}-{d}" for d in docs]}})["hits"]["hits"]}
    assert left == {"young", "other", "legacy"}  # legacy: written before deleted_at existed, kept
    es.close()


def test_a_replay_older_than_the_tombstones_retention_is_refused(config_dir: Path, tmp_path: Path) -> None:
    tag = unique("rtreplay")
    cfg = load_pipeline(write_pipeline(config_dir, tag, f"t.{tag}", tag, retention={"tombstones": "1d"}))
    topic = cfg.source.topics[0]
    old = five_hours(4)  # changes from three days ago
    cdcgen.produce(bootstrap(), topic, old.events)
    fresh = cdcgen.orders_stream(30, 10, seed=4, broken=False, start_ts=int(time.time() * 1000) - H,
                                 record_timestamps=True)
    cdcgen.produce(bootstrap(), topic, fresh.events, create=False)
    store = StateStore(f"sqlite:///{tmp_path / 'o.db'}")

    with pytest.raises(ConfigError) as exc:
        runner.plan(cfg, "replay-old", {"start_offsets": {topic: {"0": 0}}}, store)
    msg = str(exc.value)
    assert "the replay starts at records older than" in msg and f"{topic}[0] from 0 (records from" in msg
    assert "retention.tombstones (1 days)" in msg
    start = datetime.fromtimestamp((BASE + H) / 1000, UTC)
    with pytest.raises(ConfigError, match="the time range starts at 2026-11-20T01:00:00"):
        runner.plan(cfg, "range-old", {"start_time": start.isoformat(), "end_time": (start + timedelta(hours=1))
                                       .isoformat()}, store)
    assert store.ledger.history(cfg.name) == []  # nothing planned

    # from within the retention: planned; and the live pipeline is never held back
    recent = datetime.now(UTC) - timedelta(hours=2)
    ok = runner.plan(cfg, "range-new", {"start_time": recent.isoformat(), "end_time": datetime.now(UTC).isoformat()},
                     store)
    assert sum(w.max_records for w in ok.partitions) == len(fresh.events)
    live = runner.plan(cfg, "live", None, store)
    assert all(w.start == 0 for w in live.partitions)
