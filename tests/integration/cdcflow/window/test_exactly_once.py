"""Exactly-once into MySQL (offset_store.sink): the window's rows and its offsets are committed in one
MySQL transaction, so a window killed anywhere leaves both or neither, and a retried or next window
does not write what is already there. Real broker, MariaDB, Elasticsearch and Spark."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from cdcflow import cdcgen, runner
from cdcflow.config import load_pipeline
from cdcflow.state import StateStore
from cdcflow.window import clients
from connectors.mysql.offsets import SinkOffsets
from tests.helpers import (
    ES_SINK,
    bootstrap,
    es_docs,
    expected,
    mysql_engine,
    read_topic,
    run_cli_window,
    table_rows,
    unique,
    write_pipeline,
)

pytestmark = [pytest.mark.integration, pytest.mark.services]


def _pipeline(config_dir: Path, es: bool = False) -> Any:
    tag = unique("eo")
    sinks = {"sinks": [{"type": "mysql", "name": "orders_mysql", "conn_id": "cdcflow_mysql", "create_table": True,
                        "table": tag, "primary_key": ["id"], "batch_size": 100, "set_rows": 100,
                        "columns": [{"name": "id", "type": "BIGINT"}, {"name": "customer", "type": "VARCHAR(32)"},
                                    {"name": "status", "type": "VARCHAR(16)"},
                                    {"name": "amount", "type": "DECIMAL(10,2)"},
                                    {"name": "updated_at", "type": "BIGINT", "field": "updated_ms"}]},
                       *([{**ES_SINK, "index": tag.replace("_", "-")}] if es else [])]}
    path = write_pipeline(config_dir, tag, f"t.{tag}", tag, offset_store={"sink": "orders_mysql"}, **sinks)
    return load_pipeline(path)


def _sink_offsets(cfg: Any) -> dict[tuple[str, int], int]:
    held = SinkOffsets(mysql_engine().url.render_as_string(hide_password=False))
    try:
        return {tp: o for tp, (o, _run) in held.load(cfg.name).items()}
    finally:
        held.close()


def _committed_runs(cfg: Any) -> list[str]:
    with mysql_engine().connect() as conn:
        return [r[0] for r in conn.exec_driver_sql(
            "SELECT run_id FROM cdcflow_sink_commits WHERE pipeline = %s ORDER BY committed_at", (cfg.name,))]


def test_exactly_once_window_commits_rows_and_offsets_in_one_transaction(
        config_dir: Path, store: StateStore, spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _pipeline(config_dir, es=True)
    stream = cdcgen.orders_stream(400, 60, seed=21)  # with poison: one row MySQL rejects (savepoint + row path)
    cdcgen.produce(bootstrap(), cfg.source.topics[0], stream.events, partitions=3)
    looked_up: list[str] = []
    resolve = clients.get_connection
    monkeypatch.setattr(clients, "get_connection", lambda conn_id: looked_up.append(conn_id) or resolve(conn_id))

    stats = runner.run_window(cfg, "eo-1", store=store, spark=spark)

    # plan, process and commit (and the exactly-once sink's offsets) resolved each connection once
    assert sorted(looked_up) == ["cdcflow_elasticsearch", "cdcflow_kafka", "cdcflow_mysql"]

    assert table_rows(cfg.sinks[0].table) == expected(stream.state)
    assert {int(k) for k in es_docs(cfg.sinks[1].index)} >= set(stream.state)
    ends = {(w.topic, w.partition): w.end for w in store.ledger.get_window(cfg.name, "eo-1").partitions}
    assert _sink_offsets(cfg) == ends == store.offsets.load(cfg.name)
    assert sum(ends.values()) == len(stream.events)
    assert stats["sink_offsets"]["advanced"] == {f"{t}:{p}": e for (t, p), e in ends.items()}
    assert _committed_runs(cfg) == ["eo-1"]
    # the row MySQL rejected went to the DLQ; its batch was rolled back to its savepoint and re-applied
    sink_rejected = [e.value for e in stream.broken if e.expected_stage == "sink"]
    assert sink_rejected and set(sink_rejected) <= {m.value() for m in read_topic(cfg.errors.dlq_topic)}
    assert stats["sinks"]["orders_mysql"]["failed"] == len(sink_rejected)

    # an operator reset goes to the sink's offsets too: the next window replays from 0 (same versions: harmless)
    clients.set_offsets(cfg, store, dict.fromkeys(ends, 0), "test-reset")
    assert set(_sink_offsets(cfg).values()) == {0}
    again = runner.run_window(cfg, "eo-2", store=store, spark=spark)
    assert again["records"] == len(stream.events)
    first, replayed = stats["sinks"]["orders_mysql"], again["sinks"]["orders_mysql"]
    assert (replayed["upserted"], replayed["deleted"]) == (0, 0)  # the table held all of it: no change
    assert replayed["stale"] + replayed["unchanged"] == sum(first[k] for k in ("upserted", "deleted", "stale", "unchanged"))
    assert table_rows(cfg.sinks[0].table) == expected(stream.state)
    assert _sink_offsets(cfg) == ends == store.offsets.load(cfg.name)


def test_killed_inside_the_sink_transaction_leaves_neither_rows_nor_offsets(config_dir: Path) -> None:
    cfg = _pipeline(config_dir)
    stream = cdcgen.orders_stream(300, 50, seed=22, broken=False)
    cdcgen.produce(bootstrap(), cfg.source.topics[0], stream.events, partitions=3)

    died = run_cli_window(config_dir, cfg.name, "eo-killed", "during_sink_commit")  # SIGKILLs the Spark task's worker
    assert died.returncode == 1 and "Python worker died while the window ran" in died.stderr, died.stderr[-2000:]
    assert table_rows(cfg.sinks[0].table) == []  # every batch was written, none committed
    assert _sink_offsets(cfg) == {} and clients.offset_store(cfg).offsets.load(cfg.name) == {}

    retry = run_cli_window(config_dir, cfg.name, "eo-killed")
    assert retry.returncode == 0, retry.stderr[-2000:]
    assert table_rows(cfg.sinks[0].table) == expected(stream.state)
    assert sum(_sink_offsets(cfg).values()) == len(stream.events)


def test_a_window_killed_after_its_sink_transaction_is_not_written_again(config_dir: Path) -> None:
    """Killed after the sink's transaction and before the ledger commit: the next window starts where
    the sink's offsets say, and the retried run writes nothing (it does not rely on re-application)."""
    cfg = _pipeline(config_dir)
    stream = cdcgen.orders_stream(300, 50, seed=23, broken=False)
    cdcgen.produce(bootstrap(), cfg.source.topics[0], stream.events, partitions=3)

    died = run_cli_window(config_dir, cfg.name, "eo-1", "after_sinks")
    assert died.returncode == -signal.SIGKILL, died.stderr[-2000:]
    store = clients.offset_store(cfg)
    assert store.offsets.load(cfg.name) == {}  # the ledger commit did not happen
    in_sink = _sink_offsets(cfg)
    assert sum(in_sink.values()) == len(stream.events)  # ... but the sink's transaction did
    assert table_rows(cfg.sinks[0].table) == expected(stream.state)
    # mark a row by hand at its current version: a re-application would overwrite it
    some = min(stream.state)
    with mysql_engine().begin() as conn:
        conn.exec_driver_sql(f"UPDATE `{cfg.sinks[0].table}` SET customer = 'untouched' WHERE id = %s", (some,))

    nxt = run_cli_window(config_dir, cfg.name, "eo-2")  # a new run (Airflow's next one) starts at the sink's offsets
    assert nxt.returncode == 0, nxt.stderr[-2000:]
    assert '"records": 0' in nxt.stdout
    assert store.offsets.load(cfg.name) == in_sink  # the store took the sink's offsets

    retry = run_cli_window(config_dir, cfg.name, "eo-1")  # and the killed run's retry writes nothing again
    assert retry.returncode == 0, retry.stderr[-2000:]
    assert '"already": "eo-1"' in retry.stdout
    rows = dict((r[0], r[1]) for r in table_rows(cfg.sinks[0].table))
    assert rows[some] == "untouched"
    assert _committed_runs(cfg) == ["eo-1"]  # eo-2 read nothing
    assert store.ledger.get_window(cfg.name, "eo-1").status == "committed" and store.offsets.load(cfg.name) == in_sink


# -- a table made from the record schema (create_table without columns) -----------------------------
def _schema_pipeline(config_dir: Path, transforms: list[dict[str, Any]] | None) -> Any:
    """Exactly-once into a table created from the Connect schema of Debezium's typed envelopes
    (cdcgen's debezium_types: the JsonConverter's schemas, as the MySQL connector writes them)."""
    tag = unique("eoschema")
    sink = {"type": "mysql", "name": "orders_mysql", "conn_id": "cdcflow_mysql", "create_table": True, "table": tag,
            "primary_key": ["id"], "columns": []}
    chain = {"transforms": transforms, "source": {"key_converter": "json_schema", "value_converter": "json_schema"}
             } if transforms is not None else {}
    return load_pipeline(write_pipeline(config_dir, tag, f"t.{tag}", tag, offset_store={"sink": "orders_mysql"},
                                        sinks=[sink], **chain))


def _schema_rows(table: str) -> list[tuple[Any, ...]]:
    with mysql_engine().connect() as conn:
        return [tuple(r) for r in conn.exec_driver_sql(
            f"SELECT id, customer, status, amount, updated_ms, ordered_on, shipped_at FROM `{table}` ORDER BY id")]


def _schema_expected(state: dict[int, dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(*row, state[row[0]]["ordered_on"], state[row[0]]["shipped_at"]) for row in expected(state)]


UNWRAP = [{"type": "ExtractNewRecordState", "delete_handling": "none", "drop_tombstones": False}]


@pytest.mark.parametrize("chain", [None, UNWRAP], ids=["no_chain", "chain"])
def test_exactly_once_into_a_table_from_the_record_schema_on_the_partition_path(
        config_dir: Path, store: StateStore, spark: Any, monkeypatch: pytest.MonkeyPatch,
        chain: list[dict[str, Any]] | None) -> None:
    """The table is created from the records' schema before the writes, then its rows and the window's
    offsets are one transaction of one task; a replay from 0 changes nothing."""

    cfg = _schema_pipeline(config_dir, chain)
    stream = cdcgen.orders_stream(300, 50, seed=31, broken=False, debezium_types=True)
    cdcgen.produce(bootstrap(), cfg.source.topics[0], stream.events, partitions=3)

    stats = runner.run_window(cfg, "eo-1", store=store, spark=spark)

    assert _schema_rows(cfg.sinks[0].table) == _schema_expected(stream.state)
    ends = {(w.topic, w.partition): w.end for w in store.ledger.get_window(cfg.name, "eo-1").partitions}
    assert _sink_offsets(cfg) == ends == store.offsets.load(cfg.name)
    assert sum(ends.values()) == len(stream.events)
    assert stats["sink_offsets"]["advanced"] == {f"{t}:{p}": e for (t, p), e in ends.items()}
    assert _committed_runs(cfg) == ["eo-1"]

    clients.set_offsets(cfg, store, dict.fromkeys(ends, 0), "test-reset")
    again = runner.run_window(cfg, "eo-2", store=store, spark=spark)
    replayed = again["sinks"]["orders_mysql"]
    assert (again["records"], replayed["upserted"], replayed["deleted"]) == (len(stream.events), 0, 0)
    assert _schema_rows(cfg.sinks[0].table) == _schema_expected(stream.state)
    assert _sink_offsets(cfg) == ends


def test_killed_inside_the_transaction_of_a_table_from_the_record_schema_leaves_neither(config_dir: Path) -> None:
    """The table's DDL ran before (MySQL commits DDL apart): the table is there, empty, and no offset
    moved; the retry writes it all."""
    cfg = _schema_pipeline(config_dir, UNWRAP)
    stream = cdcgen.orders_stream(300, 50, seed=32, broken=False, debezium_types=True)
    cdcgen.produce(bootstrap(), cfg.source.topics[0], stream.events, partitions=3)

    died = run_cli_window(config_dir, cfg.name, "eo-killed", "during_sink_commit")
    assert died.returncode == 1 and "Python worker died while the window ran" in died.stderr, died.stderr[-2000:]
    assert _schema_rows(cfg.sinks[0].table) == []
    assert _sink_offsets(cfg) == {} and clients.offset_store(cfg).offsets.load(cfg.name) == {}

    retry = run_cli_window(config_dir, cfg.name, "eo-killed")
    assert retry.returncode == 0, retry.stderr[-2000:]
    assert _schema_rows(cfg.sinks[0].table) == _schema_expected(stream.state)
    assert sum(_sink_offsets(cfg).values()) == len(stream.events)


def test_a_window_without_a_row_for_a_table_from_the_record_schema_commits_its_offsets_alone(
        config_dir: Path, store: StateStore, spark: Any) -> None:
    """Every record filtered out (a Filter before the unwrap): no schema made the table, so it is not
    created; the sink's transaction commits the window's offsets alone."""
    cfg = _schema_pipeline(config_dir, [{"type": "Filter"}, *UNWRAP])
    stream = cdcgen.orders_stream(60, 10, seed=33, broken=False, debezium_types=True)
    cdcgen.produce(bootstrap(), cfg.source.topics[0], stream.events, partitions=2)

    stats = runner.run_window(cfg, "eo-1", store=store, spark=spark)

    ends = {(w.topic, w.partition): w.end for w in store.ledger.get_window(cfg.name, "eo-1").partitions}
    assert _sink_offsets(cfg) == ends and sum(ends.values()) == len(stream.events)
    assert stats["sink_offsets"]["advanced"] == {f"{t}:{p}": e for (t, p), e in ends.items()}
    with mysql_engine().connect() as conn:
        assert conn.exec_driver_sql("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() "
                                    "AND table_name = %s", (cfg.sinks[0].table,)).scalar() == 0
