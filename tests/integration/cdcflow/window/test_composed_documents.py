"""A composed index (docs/composed-documents.md) on the real services: a shop's four tables in
Debezium's encoding (tests/fixtures/debezium/shop.py), kept in MariaDB by a routed MySQL sink, and an
``orders`` index whose documents hold the customer (N:1), the lines (1:N) and each line's product
(N:1 under the 1:N). Windows change each table in turn; after each, every document of the index is
compared, field by field, with the document computed from the events alone (tests/composed.py), and
the window's figures say how many documents it found affected."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cdcflow import runner
from cdcflow.state import StateStore
from tests.composed import Shop
from tests.composed import pipeline as _pipeline
from tests.composed import read as _read
from tests.composed import same as _same
from tests.fixtures.debezium import shop
from tests.helpers import unique

pytestmark = [pytest.mark.integration, pytest.mark.services]


def test_each_tables_change_reaches_every_document_it_affects(config_dir: Path, store: StateStore,
                                                               spark: Any) -> None:
    prefix = unique("shop")
    cfg = _pipeline(config_dir, prefix)
    index = f"{prefix}-orders"
    s = Shop(prefix)
    created: set[str] = set()
    for cid, name, tier in [(1, "Ada", "gold"), (2, "Grace", "silver"), (3, "Linus", "bronze")]:
        s.put("customers", id=cid, name=name, tier=tier)
    for pid, title, price in [(10, "Lamp", "19.90"), (11, "Desk", "249.00"), (12, "Chair", "89.50")]:
        s.put("products", id=pid, title=title, price=price)
    for oid, cid, total in [(100, 1, "39.80"), (101, 1, "249.00"), (102, 2, "89.50"), (103, 3, "0.00")]:
        s.put("orders", id=oid, customer_id=cid, status="new", total=total, created=shop.moment(
            f"2026-01-0{oid - 99}T10:00:00.123456"))
    for lid, oid, no, pid, qty in [(1000, 100, 1, 10, 2), (1001, 101, 1, 11, 1), (1002, 102, 2, 12, 1),
                                   (1003, 102, 1, 10, 3)]:
        s.put("order_lines", id=lid, order_id=oid, line_no=no, product_id=pid, qty=qty)

    def window(run: str, affected: int | None) -> dict[str, Any]:
        s.produce(created)
        stats = runner.run_window(cfg, run, store=store, spark=spark)
        docs = stats["documents"]["orders"]
        if affected is not None:
            assert docs["affected"] == affected, (run, docs)
        assert docs["backlog"] == 0, (run, docs)
        want = s.documents()
        for doc in want.values():  # the created time as Elasticsearch holds it (ISO 8601)
            doc["created"] = doc["created"].isoformat()
        _same(_read(index), want, run)
        return docs

    first = window("w1-initial", 4)
    s.put("orders", id=101, status="paid")  # a changed order: its document
    window("w2-order", 1)
    s.put("customers", id=1, tier="platinum")  # a changed customer: every order of theirs
    window("w3-customer", 2)
    s.put("order_lines", id=1004, order_id=103, line_no=1, product_id=12, qty=5)  # new, changed, deleted lines
    s.put("order_lines", id=1001, qty=4)
    s.delete("order_lines", 1003)
    window("w4-lines", 3)
    s.put("products", id=10, title="Reading lamp")  # a changed product: every order with a line of it
    window("w5-product", 1)  # 1003 went in w4: only order 100 has a line of product 10 now
    s.put("order_lines", id=1000, order_id=101)  # a line moved to another order: both documents
    window("w6-moved", 2)
    s.delete("customers", 2)  # a deleted customer: its orders' documents without it
    window("w7-customer-gone", 1)
    s.delete("order_lines", 1002)  # a deleted order and its lines: its document deleted
    s.delete("orders", 102)
    last = window("w8-order-gone", 1)
    assert last["deleted"] == 1 and last["version"] > first["version"], last

    # a replay of every window from the first offset: rebuilt from the current state, nothing moves back
    starts = {shop.topic(prefix, t): {"0": 0} for t in shop.TABLES}
    replay = runner.run_window(cfg, "replay", params={"start_offsets": starts}, store=store, spark=spark)
    assert replay["documents"]["orders"]["affected"] == 4, replay["documents"]  # every order that ever was (102 gone)
    want = s.documents()
    for doc in want.values():
        doc["created"] = doc["created"].isoformat()
    _same(_read(index), want, "replay")


def test_max_documents_carries_the_rest_to_the_next_windows(config_dir: Path, store: StateStore, spark: Any) -> None:
    prefix = unique("shopb")
    cfg = _pipeline(config_dir, prefix, max_documents=3)
    index = f"{prefix}-orders"
    s = Shop(prefix)
    created: set[str] = set()
    s.put("customers", id=1, name="Ada", tier="gold")
    for oid in range(200, 208):
        s.put("orders", id=oid, customer_id=1, status="new", total="1.00", created=shop.moment("2026-02-01T00:00:00"))
    s.produce(created)
    first = runner.run_window(cfg, "b1", store=store, spark=spark)["documents"]["orders"]
    assert (first["affected"], first["rebuilt"], first["carried"], first["backlog"]) == (8, 3, 5, 5), first
    assert len(_read(index)) == 3
    s.put("customers", id=1, tier="platinum")  # every order again: the carried ones stay in the backlog once
    s.produce(created)
    second = runner.run_window(cfg, "b2", store=store, spark=spark)["documents"]["orders"]
    assert (second["affected"], second["rebuilt"], second["backlog"]) == (8, 3, 5), second
    third = runner.run_window(cfg, "b3", store=store, spark=spark)["documents"]["orders"]  # no record: backlog only
    fourth = runner.run_window(cfg, "b4", store=store, spark=spark)["documents"]["orders"]
    assert (third["rebuilt"], third["backlog"], fourth["rebuilt"], fourth["backlog"]) == (3, 2, 2, 0), (third, fourth)
    docs = _read(index)
    assert sorted(docs) == [str(o) for o in range(200, 208)]
    assert {d["customer"]["tier"] for d in docs.values()} == {"platinum"}


def test_a_window_killed_mid_rebuild_is_rebuilt_by_its_retry(config_dir: Path, store: StateStore, spark: Any,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The first rebuild task to have written its documents dies (SIGKILL of its Python worker, as an
    OOM kill would): the window fails with no offset moved, and its retry (same run id) rebuilds every
    document, the written ones with a newer version."""
    prefix = unique("shopk")
    cfg = _pipeline(config_dir, prefix, rebuild_batch=2)
    index = f"{prefix}-orders"
    s = Shop(prefix)
    created: set[str] = set()
    s.put("customers", id=1, name="Ada", tier="gold")
    for oid in range(300, 306):
        s.put("orders", id=oid, customer_id=1, status="new", total="2.50", created=shop.moment("2026-03-01T00:00:00"))
    s.produce(created)
    runner.run_window(cfg, "k1", store=store, spark=spark)
    s.put("customers", id=1, name="Ada L.")  # every document again, in three tasks of two
    s.produce(created)
    monkeypatch.setenv("CDCFLOW_FAULTS", "during_rebuild")
    with pytest.raises(Exception, match="Python worker"):
        runner.run_window(cfg, "k2", store=store, spark=spark)
    assert store.offsets.load(cfg.name)[(shop.topic(prefix, "customers"), 0)] == 1  # the commit did not happen
    monkeypatch.delenv("CDCFLOW_FAULTS")
    retry = runner.run_window(cfg, "k2", store=store, spark=spark)["documents"]["orders"]
    assert (retry["affected"], retry["rebuilt"], retry["backlog"]) == (6, 6, 0), retry
    want = s.documents()
    for doc in want.values():
        doc["created"] = doc["created"].isoformat()
    _same(_read(index), want, "retry")


def test_a_whole_index_rebuild_moves_the_alias_while_windows_go_on(config_dir: Path, store: StateStore, spark: Any,
                                                                   tmp_path: Path) -> None:
    """``cdcflow documents rebuild`` in its own process, paused once its first task has read its rows
    and before it writes them (a fault point's pause): a window changes those documents meanwhile and
    writes them into both indices with a newer version. The paused task's older documents then arrive
    and are refused (stale); the rebuild finishes, the index's name becomes an alias of the new index,
    the old index is gone, and every document equals the model, also after one more window."""
    import subprocess
    import sys
    import time

    from tests.helpers import es_client, subprocess_env

    prefix = unique("shopr")
    cfg = _pipeline(config_dir, prefix, rebuild_batch=2)
    index = f"{prefix}-orders"
    s = Shop(prefix)
    created: set[str] = set()
    for cid in (1, 2):
        s.put("customers", id=cid, name=f"c{cid}", tier="gold")
    for oid in range(400, 406):
        s.put("orders", id=oid, customer_id=1 + oid % 2, status="new", total="3.00",
              created=shop.moment("2026-04-01T00:00:00"))
    s.put("products", id=7, title="Lamp", price="1.00")
    s.put("order_lines", id=4000, order_id=400, line_no=1, product_id=7, qty=1)
    s.produce(created)
    runner.run_window(cfg, "r1", store=store, spark=spark)

    pause = tmp_path / "pause"
    pause.mkdir()
    env = subprocess_env(config_dir, CDCFLOW_OFFSET_STORE_URL=store.url, CDCFLOW_FAULTS=f"pause:before_rebuild_write:{pause}")
    cli = subprocess.Popen([sys.executable, "-m", "cdcflow.cli", "documents", "rebuild", cfg.name], env=env,
                           cwd=Path(__file__).resolve().parents[4], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
    try:
        until = time.monotonic() + 180
        while not (pause / "reached").exists():
            assert cli.poll() is None, cli.communicate()[0][-3000:]
            assert time.monotonic() < until, "the rebuild never reached its pause"
            time.sleep(0.2)
        s.put("customers", id=1, tier="platinum")  # three documents, written by the window into both indices
        s.put("products", id=7, title="Reading lamp")
        s.produce(created)
        during = runner.run_window(cfg, "r2", store=store, spark=spark)["documents"]["orders"]
        assert len(during["indices"]) == 2 and during["indices"][0] == index, during
    finally:
        (pause / "resume").touch()
        out = cli.communicate(timeout=300)[0]
    assert cli.returncode == 0, out[-3000:]
    rebuilt = json.loads(out[out.index("{"):])
    assert rebuilt["documents"] == 6 and rebuilt["stale"] >= 1, rebuilt  # the paused task's older reads refused
    es = es_client()
    try:
        behind = sorted(es.indices.get_alias(name=index))
        assert len(behind) == 1 and behind[0].startswith(f"{index}-"), behind
        assert not es.indices.exists_alias(name=f"{index}-rebuilding")
    finally:
        es.close()
    want = s.documents()
    for doc in want.values():
        doc["created"] = doc["created"].isoformat()
    _same(_read(index), want, "after the rebuild")
    s.put("orders", id=403, status="shipped")
    s.produce(created)
    runner.run_window(cfg, "r3", store=store, spark=spark)
    want = s.documents()
    for doc in want.values():
        doc["created"] = doc["created"].isoformat()
    _same(_read(index), want, "a window after the rebuild")
