"""Issue 44 through whole windows: Debezium's PostgreSQL connector's events with a TOASTed TEXT
column (tests/fixtures/debezium/postgres_toast.py, per Debezium's page on toasted values) and
MySQL ``binlog_row_image=MINIMAL`` updates (tests/fixtures/debezium/minimal_image.py), into a MySQL
table and an Elasticsearch index with ``delete: soft``, on the read tasks' early writes and the staged
path (``CDCFLOW_WINDOW_PATH=staged``), with both apply modes.
Values are read back from MariaDB and Elasticsearch.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from cdcflow import cdcgen, runner
from cdcflow.config import load_pipeline
from cdcflow.state import StateStore
from connectors.mysql import sink as mysql_sink
from tests.fixtures.debezium import minimal_image as mi
from tests.fixtures.debezium import postgres_toast as pg
from tests.helpers import bootstrap, es_docs, mysql_engine, unique, write_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.services("kafka", "mysql", "elasticsearch", "spark")]

# (window path, MySQL apply mode)
CASES = [("early", "set"), ("early", "rows"), ("staged", "set"), ("staged", "rows")]
T0 = 1_764_000_000_000  # ms: 2025-11-24T16:00:00Z


def _path(monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    if path != "early":
        monkeypatch.setenv("CDCFLOW_WINDOW_PATH", path)
    # the set path for every set the driver writes (a window's deletes); the tasks' sets here have more
    # than ROW_PATH_MAX rows (70 others with each change of interest)
    monkeypatch.setattr(mysql_sink, "ROW_PATH_MAX", 0)


def _pipeline(config_dir: Path, tag: str, topic: str, columns: list[dict[str, Any]], path: str, apply: str,
              **partial: Any) -> Any:
    sinks: list[dict[str, Any]] = [
        {"type": "mysql", "name": "m", "conn_id": "cdcflow_mysql", "table": tag, "create_table": True,
         "primary_key": ["id"], "columns": columns, "apply": apply, "delete": "soft", **partial},
        {"type": "elasticsearch", "name": "e", "conn_id": "cdcflow_elasticsearch", "index": tag.replace("_", "-"),
         "id_fields": ["id"], "delete": "soft", **partial}]
    return load_pipeline(write_pipeline(config_dir, tag, topic, tag, sinks=sinks,
                                        errors={"tolerance": "all", "dlq_topic": f"{tag}.dlq"}))


def _rows(table: str, columns: str) -> dict[int, tuple[Any, ...]]:
    with mysql_engine().connect() as conn:
        return {r[0]: tuple(r[1:]) for r in conn.exec_driver_sql(
            f"SELECT id, {columns}, __deleted_at FROM `{table}` ORDER BY id")}


def _window(cfg: Any, run: str, store: StateStore, spark: Any,
            params: dict[str, Any] | None = None) -> dict[str, Any]:
    stats = runner.run_window(cfg, run, params, store=store, spark=spark)
    assert stats["dead_lettered"] == 0, stats
    return stats


def _produce(topic: str, events: list[tuple[bytes, bytes | None]], create: bool = False) -> None:
    cdcgen.produce(bootstrap(), topic, [cdcgen.Event(k, v) for k, v in events], partitions=1, create=create)


@pytest.mark.parametrize(("path", "apply"), CASES)
def test_toasted_values_and_soft_deletes_from_postgresql(config_dir: Path, store: StateStore, spark: Any,
                                                         monkeypatch: pytest.MonkeyPatch, path: str,
                                                         apply: str) -> None:
    _path(monkeypatch, path)
    tag = unique(f"toast_{path}_{apply}")
    topic = f"{tag}.{pg.TOPIC}"
    cfg = _pipeline(config_dir, tag, topic, pg.SINK_COLUMNS, path, apply)
    others = [pg.event("c", T0 + i, 1000 + i, None, pg.row(2000 + i, f"f{i}", "l", f"e{i}@x", "short"))
              for i in range(70)]
    anne = pg.row(1004, "Anne", "Kretchmar", "annek@noanswer.org", pg.BIOGRAPHY)
    # window 1: the insert and, in the same window, the blog's update of first_name: biography TOASTed
    _produce(topic, [pg.event("c", T0 + 100, 24_023_128, None, anne), *others,  # window 1
                     pg.update(T0 + 200, 24_023_200, {**anne, "first_name": "Dana", "biography": pg.PLACEHOLDER})],
             create=True)
    _window(cfg, "w1", store, spark)
    columns = "first_name, last_name, biography"
    assert _rows(tag, columns)[1004] == ("Dana", "Kretchmar", pg.BIOGRAPHY, None)
    # window 2: another update, alone: the stored biography stays (others updated too: a set)
    _produce(topic, [pg.update(T0 + 300, 24_023_300, {**anne, "first_name": "Dana", "last_name": "Smith",
                                                      "biography": pg.PLACEHOLDER}),
                     *[pg.update(T0 + 300, 24_023_400 + i, {**pg.row(2000 + i, f"g{i}", "l", f"e{i}@x", "short")})
                       for i in range(70)]])
    _window(cfg, "w2", store, spark)
    assert _rows(tag, columns)[1004] == ("Dana", "Smith", pg.BIOGRAPHY, None)
    # window 3: the delete (its before image the key alone) and its tombstone: the row stays, marked
    deleted_ms = T0 + 400
    _produce(topic, pg.delete(deleted_ms, 24_023_500, 1004))
    _window(cfg, "w3", store, spark)
    marked = ("Dana", "Smith", pg.BIOGRAPHY, dt.datetime(2025, 11, 24, 16, 0, 0, 400_000))
    assert _rows(tag, columns)[1004] == marked
    # window 4: window 1 again (offsets 0-71: the insert and the update, both older than the delete):
    # they never undelete the row; the pipeline then reads on from there (windows 2 and 3 again)
    _window(cfg, "w4", store, spark, {"start_offsets": {topic: {"0": 0}}, "max_records": 72})
    assert _rows(tag, columns)[1004] == marked
    doc = es_docs(tag.replace("_", "-"))["1004"]
    assert (doc["first_name"], doc["last_name"], doc["biography"]) == ("Dana", "Smith", pg.BIOGRAPHY)
    assert doc["__deleted_at"] == "2025-11-24T16:00:00.400Z"
    # window 5: the key inserted again: the mark is cleared
    _produce(topic, [pg.event("c", T0 + 500, 24_023_600, None, pg.row(1004, "Anne", "K", "a@x", "new bio"))])
    _window(cfg, "w5", store, spark)
    assert _rows(tag, columns)[1004] == ("Anne", "K", "new bio", None)
    assert _rows(tag, columns)[2001] == ("g1", "l", "short", None)
    doc = es_docs(tag.replace("_", "-"))["1004"]
    assert "__deleted_at" not in doc and (doc["first_name"], doc["biography"]) == ("Anne", "new bio")


@pytest.mark.parametrize(("path", "apply"), CASES)
def test_minimal_row_images_keep_the_columns_they_lack(config_dir: Path, store: StateStore, spark: Any,
                                                       monkeypatch: pytest.MonkeyPatch, path: str, apply: str) -> None:
    """``ignore_null_updates: [name, price, stock]``; ``note`` is not listed, so a MINIMAL update that
    does not touch it writes its null (what a listed column guards against)."""
    _path(monkeypatch, path)
    tag = unique(f"minimal_{path}_{apply}")
    topic = f"{tag}.{mi.TOPIC}"
    cfg = _pipeline(config_dir, tag, topic, mi.SINK_COLUMNS, path, apply,
                    ignore_null_updates=["name", "price", "stock"])
    fillers = [mi.insert(100, 10 + i, {"id": 100 + i, "name": f"n{i}", "price": None, "stock": i, "note": None})
               for i in range(70)]
    _produce(topic, [mi.insert(100, 1, mi.ROW_1), mi.insert(100, 2, mi.ROW_2), *fillers,
                     mi.minimal_update(200, 3, 1, stock=2)], create=True)  # in the insert's window
    _window(cfg, "w1", store, spark)
    columns = "name, price, stock, note"
    assert _rows(tag, columns)[1] == ("lamp", mi.ROW_1["price"], 2, None, None)  # note: not listed, written null
    _produce(topic, [mi.minimal_update(300, 4, 2, name="standing desk"), mi.minimal_update(300, 5, 1, stock=0),
                     *[mi.minimal_update(300, 10 + i, 100 + i, stock=i + 1) for i in range(70)]])
    _window(cfg, "w2", store, spark)
    rows = _rows(tag, columns)
    assert rows[1] == ("lamp", mi.ROW_1["price"], 0, None, None)
    assert rows[2] == ("standing desk", mi.ROW_2["price"], 1, None, None)
    assert rows[105] == ("n5", None, 6, None, None)
    docs = es_docs(tag.replace("_", "-"))
    assert (docs["1"]["name"], docs["1"]["stock"], docs["2"]["name"], docs["2"]["stock"]) == (
        "lamp", 0, "standing desk", 1)
    # a window of one record: decoded record by record, which leaves the fields the payload lacks out
    # of the document (the column-wise decode writes them null): both keep the stored values
    _produce(topic, [mi.minimal_update(400, 200, 1, note="red")])
    _window(cfg, "w3", store, spark)
    assert _rows(tag, columns)[1] == ("lamp", mi.ROW_1["price"], 0, "red", None)
    doc = es_docs(tag.replace("_", "-"))["1"]
    assert (doc["name"], doc["stock"], doc["note"]) == ("lamp", 0, "red")


def test_a_soft_delete_and_a_partial_update_commit_with_the_windows_offsets_or_not_at_all(
        config_dir: Path, store: StateStore, spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Exactly-once (``offset_store.sink``): a window killed inside the sink's transaction (its rows and
    offsets written, not committed) leaves neither; its retry writes both, once."""
    from cdcflow.errors import WindowFailed
    from connectors.mysql.offsets import SinkOffsets

    tag = unique("toast_eo")
    topic = f"{tag}.{pg.TOPIC}"
    cfg = load_pipeline(write_pipeline(
        config_dir, tag, topic, tag, offset_store={"sink": "m"}, errors={"tolerance": "all", "dlq_topic": f"{tag}.dlq"},
        sinks=[{"type": "mysql", "name": "m", "conn_id": "cdcflow_mysql", "table": tag, "create_table": True,
                "primary_key": ["id"], "columns": pg.SINK_COLUMNS, "delete": "soft"}]))
    anne = pg.row(1004, "Anne", "Kretchmar", "annek@noanswer.org", pg.BIOGRAPHY)
    _produce(topic, [pg.event("c", T0 + 100, 100, None, anne),
                     pg.event("c", T0 + 100, 101, None, pg.row(1005, "Bo", "B", "b@x", "short"))], create=True)
    _window(cfg, "w1", store, spark)
    columns = "first_name, biography"
    before = _rows(tag, columns)
    assert before == {1004: ("Anne", pg.BIOGRAPHY, None), 1005: ("Bo", "short", None)}

    def sink_offsets() -> dict[tuple[str, int], int]:
        held = SinkOffsets(mysql_engine().url.render_as_string(hide_password=False))
        try:
            return {tp: o for tp, (o, _run) in held.load(cfg.name).items()}
        finally:
            held.close()

    assert sink_offsets() == {(topic, 0): 2}
    _produce(topic, [pg.update(T0 + 200, 200, {**anne, "first_name": "Dana", "biography": pg.PLACEHOLDER}),
                     *pg.delete(T0 + 300, 300, 1005)])
    monkeypatch.setenv("CDCFLOW_FAULTS", "during_sink_commit")  # SIGKILLs the task holding the transaction
    with pytest.raises(WindowFailed, match="Python worker died"):
        runner.run_window(cfg, "w2", store=store, spark=spark)
    assert _rows(tag, columns) == before and sink_offsets() == {(topic, 0): 2}
    monkeypatch.delenv("CDCFLOW_FAULTS")
    _window(cfg, "w2", store, spark)  # the retry: the same run, the same range
    assert _rows(tag, columns) == {1004: ("Dana", pg.BIOGRAPHY, None),
                                   1005: ("Bo", "short", dt.datetime(2025, 11, 24, 16, 0, 0, 300_000))}
    assert sink_offsets() == {(topic, 0): 5} == store.offsets.load(cfg.name)
