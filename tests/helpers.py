"""Test helpers: throw-away pipelines (unique topic and table), reading MySQL and Kafka back."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import yaml

from cdcflow.config import PipelineConfig, load_pipeline
from cdcflow.connections import get_connection

BASE: dict[str, Any] = {
    "source": {"kafka_conn_id": "cdcflow_kafka"},
    "window": {"max_records": 100_000, "max_duration": "60s", "stop_on_empty": True},
    "initial_offsets": "earliest",
    "sinks": [{
        "type": "mysql", "name": "orders_mysql", "conn_id": "cdcflow_mysql", "create_table": True,
        "primary_key": ["id"], "batch_size": 100,
        "columns": [
            {"name": "id", "type": "BIGINT"},
            {"name": "customer", "type": "VARCHAR(32)"},
            {"name": "status", "type": "VARCHAR(16)"},
            {"name": "amount", "type": "DECIMAL(10,2)"},
            {"name": "updated_at", "type": "BIGINT", "field": "updated_ms"},
        ],
    }],
    "errors": {"tolerance": "all", "context_headers": True},
}


def bootstrap() -> str:
    return get_connection("cdcflow_kafka").kafka_config()["bootstrap.servers"]


def mysql_engine() -> sa.Engine:
    return sa.create_engine(get_connection("cdcflow_mysql").sqlalchemy_url())


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def write_pipeline(directory: Path, name: str, topic: str, table: str, **overrides: Any) -> Path:
    data = _merge(BASE, {"name": name, "source": {"topics": [topic]}, "errors": {"dlq_topic": f"{topic}.dlq"}})
    data["sinks"][0]["table"] = table
    data = _merge(data, overrides)
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def make_pipeline(directory: Path, **overrides: Any) -> PipelineConfig:
    tag = uuid.uuid4().hex[:10]
    path = write_pipeline(directory, f"t_{tag}", f"t.{tag}.orders", f"orders_{tag}", **overrides)
    return load_pipeline(path)


def table_rows(table: str) -> list[tuple[Any, ...]]:
    with mysql_engine().connect() as conn:
        return [tuple(r) for r in conn.exec_driver_sql(
            f"SELECT id, customer, status, amount, updated_at FROM `{table}` ORDER BY id")]


def expected(state: dict[int, dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(r["id"], r["customer"], r["status"], Decimal(r["amount"]), r["updated_ms"])
            for _i, r in sorted(state.items())]


def read_topic(topic: str, timeout: float = 20.0) -> list[Any]:
    """Every message of ``topic`` (all partitions), read to EOF."""
    from connectors.kafka.reader import read_topic as read

    return read({"bootstrap.servers": bootstrap(), "group.id": f"reader-{uuid.uuid4().hex}"}, topic, timeout)


def subprocess_env(config_dir: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["CDCFLOW_CONFIG_DIR"] = str(config_dir)
    env.update(extra)
    return env


def run_cli_window(config_dir: Path, pipeline: str, run_id: str,
                   fault: str | None = None) -> subprocess.CompletedProcess[str]:
    """``cdcflow run <pipeline> --run-id <run_id>`` in a fresh process (optionally with CDCFLOW_FAULTS)."""
    env = subprocess_env(config_dir)
    env.pop("CDCFLOW_FAULTS", None)
    if fault:
        env["CDCFLOW_FAULTS"] = fault
    return subprocess.run([sys.executable, "-m", "cdcflow.cli", "run", pipeline, "--run-id", run_id], env=env,
                          cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=300)


ES_SINK: dict[str, Any] = {
    "type": "elasticsearch", "name": "orders_es", "conn_id": "cdcflow_elasticsearch",
    "id_fields": ["id"], "bulk_max_actions": 200,
    "mapping": {"properties": {"id": {"type": "long"}, "customer": {"type": "keyword"},
                               "status": {"type": "keyword"}, "amount": {"type": "scaled_float", "scaling_factor": 100},
                               "updated_ms": {"type": "date", "format": "epoch_millis"}}},
}


def es_client() -> Any:
    from elasticsearch import Elasticsearch

    return Elasticsearch(get_connection("cdcflow_elasticsearch").http_url(), request_timeout=30)


def es_docs(index: str) -> dict[str, dict[str, Any]]:
    """Every document of ``index`` (refreshed first), by id, with its _version under '_version'. Read
    over a point in time, page by page: a scroll's context can be freed under the reader (a CI run
    saw "No search context found" half-way through 16k documents)."""
    es = es_client()
    es.indices.refresh(index=index)
    out: dict[str, dict[str, Any]] = {}
    pit = es.open_point_in_time(index=index, keep_alive="2m")["id"]
    after = None
    try:
        while True:
            resp = es.search(pit={"id": pit, "keep_alive": "2m"}, size=5000, version=True,
                             sort=[{"_shard_doc": "asc"}], search_after=after, track_total_hits=False)
            hits = resp["hits"]["hits"]
            if not hits:
                return out
            for h in hits:
                out[h["_id"]] = {**h["_source"], "_version": h["_version"]}
            pit, after = resp.get("pit_id", pit), hits[-1]["sort"]
    finally:
        es.close_point_in_time(id=pit)
        es.close()


def expected_docs(state: dict[int, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {str(i): r for i, r in state.items()}


def without_versions(docs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {k: {f: v for f, v in d.items() if f != "_version"} for k, d in docs.items()}


def state_of(events: list[Any]) -> dict[int, dict[str, Any]]:
    """The rows the valid change events (cdcgen.Event, kind "change") leave in an empty table, applied
    in order; poison records and tombstones change nothing."""
    state: dict[int, dict[str, Any]] = {}
    for e in events:
        if not e.value or e.kind != "change":
            continue
        doc = json.loads(e.value)
        doc = doc["payload"] if "schema" in doc else doc
        if doc["op"] == "d":
            state.pop(doc["before"]["id"], None)
        else:
            state[doc["after"]["id"]] = doc["after"]
    return state
