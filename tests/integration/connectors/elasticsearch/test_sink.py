"""The Elasticsearch sink against a real Elasticsearch 8, alone and fanned out with MySQL."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from elasticsearch import ApiError

from cdcflow import assets, cdcgen, runner
from cdcflow.config import PipelineConfig, load_pipeline
from cdcflow.errors import SinkUnavailable
from cdcflow.state import StateStore
from cdcflow.window import clients
from cdcflow.connections import get_connection
from connectors.base import Change, SourceRef
from connectors.elasticsearch.config import ElasticsearchSinkConfig
from connectors.elasticsearch.sink import ElasticsearchSink
from tests.helpers import (
    BASE,
    ES_SINK,
    bootstrap,
    es_client,
    es_docs,
    expected,
    expected_docs,
    read_topic,
    subprocess_env,
    table_rows,
    unique,
    without_versions,
    write_pipeline,
)

pytestmark = [pytest.mark.integration, pytest.mark.services]
ROOT = Path(__file__).resolve().parents[4]


def _pipeline(config_dir: Path, with_mysql: bool = False, **es: Any) -> tuple[PipelineConfig, str]:
    tag = unique("es")
    index = f"idx-{tag.replace('_', '-')}"
    mysql = {**BASE["sinks"][0], "table": tag}
    sinks = ([mysql] if with_mysql else []) + [{**ES_SINK, "index": index, **es}]
    return load_pipeline(write_pipeline(config_dir, tag, f"t.{tag}", tag, sinks=sinks)), index


def test_bulk_of_50k_documents_with_deletes_and_tombstones(config_dir: Path, store: StateStore, spark: Any) -> None:
    cfg, index = _pipeline(config_dir)
    stream = cdcgen.orders_stream(50_000, 20_000, seed=21, broken=False)
    assert sum(1 for e in stream.events if e.kind == "tombstone") > 100
    cdcgen.produce(bootstrap(), cfg.source.topics[0], stream.events)

    stats = runner.run_window(cfg, "bulk", store=store, spark=spark)

    assert stats["records"] == len(stream.events)
    docs = es_docs(index)
    assert without_versions(docs) == expected_docs(stream.state)
    assert stats["sinks"]["orders_es"]["deleted"] > 0
    # re-applying the same window changes nothing
    before = es_docs(index)
    runner.run_window(cfg, "bulk-again", {"start_offsets": {cfg.source.topics[0]: {"0": 0, "1": 0, "2": 0}}},
                      store=store, spark=spark)
    assert es_docs(index) == before


def test_tombstone_behaviors(config_dir: Path, store: StateStore, spark: Any) -> None:
    k = b'{"id": 1}'
    created = cdcgen.Event(k, b'{"op": "c", "after": {"id": 1, "customer": "a", "status": "new", "amount": "1.00", '
                              b'"updated_ms": 1}, "source": {"ts_ms": 100}}')
    deleted = cdcgen.Event(k, b'{"op": "d", "before": {"id": 1}, "after": null, "source": {"ts_ms": 200}}')
    for behavior, survives, dlq in (("delete", False, 0), ("ignore", False, 0), ("fail", False, 1)):
        cfg, index = _pipeline(config_dir, behavior_on_null_values=behavior)
        cdcgen.produce(bootstrap(), cfg.source.topics[0], [created, deleted, cdcgen.Event(k, None)], partitions=1)
        stats = runner.run_window(cfg, f"tomb-{behavior}", store=store, spark=spark)
        assert ("1" in es_docs(index)) is survives, behavior
        assert stats["dead_lettered"] == dlq, behavior
    # a lone tombstone (its delete was in an earlier window) with behavior delete is a no-op
    cfg, index = _pipeline(config_dir)
    cdcgen.produce(bootstrap(), cfg.source.topics[0], [created], partitions=1)
    runner.run_window(cfg, "lone-1", store=store, spark=spark)
    cdcgen.produce(bootstrap(), cfg.source.topics[0], [cdcgen.Event(k, None)], create=False)
    runner.run_window(cfg, "lone-2", store=store, spark=spark)
    assert "1" in es_docs(index)


def test_malformed_documents_go_to_the_dlq_with_their_reason(config_dir: Path, store: StateStore, spark: Any) -> None:
    cfg, index = _pipeline(config_dir)
    stream = cdcgen.orders_stream(30, 10, seed=22, broken=False)
    bad = [cdcgen.Event(f'{{"id": {9000 + i}}}'.encode(), (
        f'{{"op": "c", "after": {{"id": {9000 + i}, "customer": "c", "status": "new", "amount": "{amount}", '
        f'"updated_ms": 5}}, "source": {{"ts_ms": 5}}}}').encode(), (("origin", b"test"),))
        for i, amount in enumerate(["12,5 EUR", "lots"])]
    cdcgen.produce(bootstrap(), cfg.source.topics[0], stream.events + bad)
    stats = runner.run_window(cfg, "malformed", store=store, spark=spark)
    assert stats["sinks"]["orders_es"]["failed"] == 2
    assert without_versions(es_docs(index)) == expected_docs(stream.state)
    dead = read_topic(cfg.errors.dlq_topic)
    assert sorted(m.value() for m in dead) == sorted(e.value for e in bad)
    for msg in dead:
        h = dict(msg.headers())
        assert h["origin"] == b"test"
        assert h["__connect.errors.stage"] == b"sink"
        assert h["__connect.errors.class.name"] == b"elasticsearch:orders_es"
        assert h["__cdcflow.errors.es.type"] == b"document_parsing_exception"
        assert b"failed to parse field [amount]" in h["__cdcflow.errors.es.reason"]
        assert h["__connect.errors.exception.class.name"] == b"elasticsearch.document_parsing_exception"


def test_malformed_documents_ignore_and_warn_skip_without_dlq(config_dir: Path, store: StateStore, spark: Any) -> None:
    bad = cdcgen.Event(b'{"id": 1}', b'{"op": "c", "after": {"id": 1, "amount": "x"}, "source": {"ts_ms": 5}}')
    for behavior in ("ignore", "warn"):
        cfg, _index = _pipeline(config_dir, behavior_on_malformed_documents=behavior)
        cdcgen.produce(bootstrap(), cfg.source.topics[0], [bad], partitions=1)
        stats = runner.run_window(cfg, f"m-{behavior}", store=store, spark=spark)
        assert stats["dead_lettered"] == 0
        assert stats["sinks"]["orders_es"]["extra"] == {"ignored" if behavior == "ignore" else "warned": 1}
        assert sum(store.offsets.load(cfg.name).values()) == 1


def test_replaying_an_older_window_changes_nothing_in_either_sink(config_dir: Path, store: StateStore, spark: Any) -> None:
    # gc_deletes 0s: Elasticsearch forgets deleted versions at once, so only cdcflow's tombstone
    # index stands between a replayed insert and a resurrected document
    cfg, index = _pipeline(config_dir, with_mysql=True, settings={"index.gc_deletes": "0s"})
    stream = cdcgen.orders_stream(400, 30, seed=23, broken=False)
    cdcgen.produce(bootstrap(), cfg.source.topics[0], stream.events)
    runner.run_window(cfg, "all", store=store, spark=spark)
    rows, docs = table_rows(cfg.sinks[0].table), es_docs(index)
    assert rows == expected(stream.state) and without_versions(docs) == expected_docs(stream.state)
    time.sleep(1)
    topic = cfg.source.topics[0]
    for n in (40, 150, 400):  # older windows, some ending mid-history, full of updates and deletes
        stats = runner.run_window(cfg, f"replay-{n}", {"start_offsets": {topic: {"0": 0, "1": 0, "2": 0}},
                                                       "max_records": n}, store=store, spark=spark)
        assert stats["records"] == n
        assert table_rows(cfg.sinks[0].table) == rows
        assert es_docs(index) == docs  # same sources and the same _version: nothing was rewritten


def test_a_full_replay_counts_no_change_on_every_sink_and_emits_no_asset_event(
        config_dir: Path, store: StateStore, spark: Any) -> None:
    """Issue 40: a replay of a whole applied topic into MySQL (set and row apply) and Elasticsearch
    upserts and deletes nothing: each change the sinks get is counted stale or unchanged, as their
    servers report it, and the window changed no target, so it has no asset event."""
    tag = unique("replay")
    index = f"idx-{tag.replace('_', '-')}"
    mysql = BASE["sinks"][0]
    sinks = [{**mysql, "table": tag}, {**mysql, "name": "orders_rows", "table": f"{tag}_rows", "apply": "rows"},
             {**ES_SINK, "index": index}]
    cfg = load_pipeline(write_pipeline(config_dir, tag, f"t.{tag}", tag, sinks=sinks))
    stream = cdcgen.orders_stream(600, 40, seed=24, broken=False)
    topic = cfg.source.topics[0]
    cdcgen.produce(bootstrap(), topic, stream.events)
    first = runner.run_window(cfg, "all", store=store, spark=spark)
    rows, docs = table_rows(tag), es_docs(index)
    assert rows == expected(stream.state) == table_rows(f"{tag}_rows")
    assert without_versions(docs) == expected_docs(stream.state)
    names = ["orders_mysql", "orders_rows", "orders_es"]
    # the first window gives each sink the last change of each key: an upsert of each live key, new
    # to the empty targets, and a delete of each key deleted in the window, which no target holds
    ids = {(k.get("payload") or k)["id"] for k in (json.loads(e.key) for e in stream.events)}
    live, keys = len(expected(stream.state)), len(ids)
    for name in names:
        f = first["sinks"][name]
        assert (f["upserted"], f["deleted"], f["stale"], f["unchanged"]) == (live, 0, 0, keys - live), (name, f)
    given = {name: sum(first["sinks"][name][k] for k in ("upserted", "deleted", "stale", "unchanged")) for name in names}
    assert len({*given.values()}) == 1  # the same changes reached each sink
    assert len(assets.window_events(cfg, store.ledger.get_window(cfg.name, "all"))) == 3

    replay = runner.run_window(cfg, "replay", {"start_offsets": {topic: {"0": 0, "1": 0, "2": 0}}},
                               store=store, spark=spark)
    assert replay["records"] == first["records"] == len(stream.events)
    for name in names:
        r = replay["sinks"][name]
        assert (r["upserted"], r["deleted"], r["failed"]) == (0, 0, 0), (name, r)
        # unchanged: each live row and each delete of an absent row; nothing is older than the targets
        assert (r["stale"], r["unchanged"]) == (0, given[name]), (name, r)
    assert table_rows(tag) == rows == table_rows(f"{tag}_rows")
    assert es_docs(index) == docs  # the same sources and _versions: nothing was re-indexed
    assert assets.window_events(cfg, store.ledger.get_window(cfg.name, "replay")) == []


def test_a_rejected_delete_is_never_skipped_whatever_behavior_on_malformed_documents_says() -> None:
    """Issue 40: with ``ignore`` (or ``warn``), a document Elasticsearch rejects is skipped; a delete
    it rejects is not: it comes back as a failed record (the DLQ, or the window fails), so no later
    replay can bring the document back. The rejection here is a write block on the index (403 per item)."""
    index = f"idx-{unique('block').replace('_', '-')}"
    es = es_client()
    es.indices.create(index=index)
    url = get_connection("cdcflow_elasticsearch").http_url()

    for doc_id, behavior in (("1", "ignore"), ("2", "warn")):
        def change(op: str, version: int, doc_id: str = doc_id) -> Change:
            doc = f'{{"id": {doc_id}, "note": "kept"}}' if op == "upsert" else None
            return Change(op, (index, doc_id), {"doc": doc}, version, SourceRef("t", 0, version, b"k", b"v"))

        cfg = ElasticsearchSinkConfig(type="elasticsearch", name="blocked", index=index, id_fields=["id"],
                                      behavior_on_malformed_documents=behavior, max_retries=1, retry_backoff=0.1)
        sink = ElasticsearchSink(cfg, url)
        sink.open()
        try:
            es.indices.put_settings(index=index, settings={"index.blocks.write": False})
            assert sink.write([change("upsert", 10)]) + sink.flush() == []
            es.indices.put_settings(index=index, settings={"index.blocks.write": True})
            assert sink.write([change("upsert", 11)]) + sink.flush() == []  # a document: skipped, counted
            failed = sink.write([change("delete", 12)]) + sink.flush()
        finally:
            es.indices.put_settings(index=index, settings={"index.blocks.write": False})
            sink.close()
        assert [(f.stage, f.offset, f.error_class) for f in failed] == [
            ("sink", 12, "elasticsearch.cluster_block_exception")], behavior
        assert f"rejected the delete of document '{doc_id}'" in failed[0].message
        assert sink.stats.extra == {"ignored" if behavior == "ignore" else "warned": 1}
        assert (sink.stats.upserted, sink.stats.deleted, sink.stats.failed) == (1, 0, 1)
        assert es.get(index=index, id=doc_id)["_source"] == {"id": int(doc_id), "note": "kept"}


def test_elasticsearch_failing_in_a_fan_out_commits_nothing_and_the_rerun_converges(
        config_dir: Path, store: StateStore, spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg, index = _pipeline(config_dir, with_mysql=True, max_retries=2, retry_backoff=0.1)
    stream = cdcgen.orders_stream(300, 40, seed=24, broken=False)
    cdcgen.produce(bootstrap(), cfg.source.topics[0], stream.events)
    monkeypatch.setenv("AIRFLOW_CONN_CDCFLOW_ELASTICSEARCH", '{"conn_type": "elasticsearch", "host": "127.0.0.1", "port": 1}')
    with pytest.raises(SinkUnavailable, match=r"sink 'orders_es': Elasticsearch at http://127.0.0.1:1 failed"):
        runner.run_window(cfg, "fanout", store=store, spark=spark)
    assert store.offsets.load(cfg.name) == {}
    assert table_rows(cfg.sinks[0].table) == expected(stream.state)  # MySQL was written first
    assert read_topic(cfg.errors.dlq_topic) == []
    monkeypatch.undo()
    runner.run_window(cfg, "fanout", store=store, spark=spark)  # the retry of the same run
    assert table_rows(cfg.sinks[0].table) == expected(stream.state)  # no duplicates, same state
    assert without_versions(es_docs(index)) == expected_docs(stream.state)
    assert sum(store.offsets.load(cfg.name).values()) == len(stream.events)


def _services(*args: str) -> None:
    subprocess.run([str(ROOT / "scripts/services.sh"), *args], check=True, capture_output=True, timeout=180)


def _documents_so_far(es: Any, index: str) -> int:
    """The index's document count; 0 while it does not exist yet or its primary shard is not started
    (a count on a just-created index answers 503 until then)."""
    if not es.indices.exists(index=index):
        return 0
    try:
        return int(es.options(max_retries=0).count(index=index)["count"])
    except ApiError as error:
        if error.meta.status == 503:
            return 0
        raise


def test_elasticsearch_stopped_mid_window_then_restarted(config_dir: Path) -> None:
    cfg, index = _pipeline(config_dir, bulk_max_actions=20, max_retries=3, retry_backoff=0.2)
    stream = cdcgen.orders_stream(30_000, 15_000, seed=25, broken=False)
    cdcgen.produce(bootstrap(), cfg.source.topics[0], stream.events)
    store = clients.offset_store(cfg)
    proc = subprocess.Popen([sys.executable, "-m", "cdcflow.cli", "run", cfg.name, "--run-id", "stopped"],
                            cwd=ROOT, env=subprocess_env(config_dir), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 180
        es = es_client()
        while not _documents_so_far(es, index):  # wait until the bulk writes are under way
            assert proc.poll() is None and time.monotonic() < deadline, "window ended before its first documents"
            time.sleep(0.1)
        _services("stop", "elasticsearch")
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 1, out[-3000:]
        assert "SinkUnavailable" in out and "Elasticsearch at" in out
    finally:
        if proc.poll() is None:
            proc.kill()
        _services("start", "elasticsearch")
    assert store.offsets.load(cfg.name) == {}
    assert store.ledger.get_window(cfg.name, "stopped").status == "failed"
    rerun = subprocess.run([sys.executable, "-m", "cdcflow.cli", "run", cfg.name, "--run-id", "stopped"], cwd=ROOT,
                           env=subprocess_env(config_dir), capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert without_versions(es_docs(index)) == expected_docs(stream.state)
    assert sum(store.offsets.load(cfg.name).values()) == len(stream.events)


def test_documents_route_per_topic_and_key_ignore_appends(config_dir: Path, store: StateStore, spark: Any) -> None:
    tag = unique("route")
    topics = [f"t.{tag}.a", f"t.{tag}.B"]
    sink = {**ES_SINK, "index": f"r-{tag.replace('_', '-')}-{{topic}}", "id_fields": [], "key_ignore": True}
    cfg = load_pipeline(write_pipeline(config_dir, tag, topics[0], tag, sinks=[sink],
                                       source={"topics": topics}))
    streams = {t: cdcgen.orders_stream(20, 5, seed=random.randrange(1000), broken=False) for t in topics}
    for topic, stream in streams.items():
        cdcgen.produce(bootstrap(), topic, stream.events, partitions=1)
    runner.run_window(cfg, "route", store=store, spark=spark)
    for topic, stream in streams.items():
        docs = es_docs(f"r-{tag.replace('_', '-')}-{topic.lower()}")
        upserts = [i for i, e in enumerate(stream.events) if e.value and b'"op": "d"' not in e.value]
        assert sorted(docs) == sorted(f"{topic}+0+{i}" for i in upserts)  # one document per change
