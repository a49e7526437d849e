"""The benchmark's plumbing: the services' addresses, tables and indexes by shape, producing a shape's
stream, pipeline files, and the checks of every sink against the final state computed from the events."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from bench.models import RowModel
from bench.shapes import Message, RealShape, SmallShape
from bench.workload import Workload

Shape = SmallShape | RealShape
Checks = dict[str, tuple[int, int]]  # logical table -> (row count, checksum)


ES_SETTINGS = {"number_of_replicas": 0, "refresh_interval": "30s"}  # cdcflow's measured index, and the bare bulk's


def mysql_url() -> str:
    from cdcflow.connections import get_connection

    return get_connection("cdcflow_mysql").sqlalchemy_url()


def bootstrap() -> str:
    from cdcflow.connections import get_connection

    return str(get_connection("cdcflow_kafka").kafka_config()["bootstrap.servers"])


def es_url() -> str:
    from cdcflow.connections import get_connection

    return get_connection("cdcflow_elasticsearch").http_url()


def connect(**extra: Any) -> Any:
    """A PyMySQL connection as a careful client opens one: utf8mb4, the session at +00:00 (TIMESTAMPs
    travel in UTC)."""
    import pymysql

    return pymysql.connect(host="127.0.0.1", port=int(os.environ["CDCFLOW_MYSQL_PORT"]),
                           user=os.environ["CDCFLOW_MYSQL_USER"], password=os.environ["CDCFLOW_MYSQL_PASSWORD"],
                           database=os.environ["CDCFLOW_MYSQL_DATABASE"], charset="utf8mb4",
                           init_command="SET time_zone = '+00:00'", **extra)


# -- names by shape: one table or index per source table when the shape routes ------------------------
def table_of(shape: Shape, base: str, logical: str) -> str:
    return f"{base}_{logical}" if shape.routed else base


def sink_table(shape: Shape, base: str) -> str:
    """The MySQL sink's ``table``: the name, or the template routing by ``{source.table}``."""
    return f"{base}_{{source.table}}" if shape.routed else base


def index_of(shape: Shape, base: str, tag: str, logical: str) -> str:
    if not shape.routed:
        return base
    return f"{base}-{dict(zip(shape.tables(), shape.topics(tag), strict=True))[logical]}"


def sink_index(shape: Shape, base: str) -> str:
    return f"{base}-{{topic}}" if shape.routed else base


# -- tables ---------------------------------------------------------------------------------------------
def drop_table(table: str) -> None:
    import sqlalchemy as sa

    with sa.create_engine(mysql_url()).begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS `{table}`")
        if conn.exec_driver_sql("SHOW TABLES LIKE 'cdcflow_tombstones'").first():
            conn.exec_driver_sql("DELETE FROM cdcflow_tombstones WHERE table_name = %s", (table,))


def drop_tables(shape: Shape, base: str) -> None:
    for logical in shape.tables():
        drop_table(table_of(shape, base, logical))


def create_tables(shape: Shape, base: str) -> list[str]:
    """The baselines' tables (the declared columns, as cdcflow's), empty."""
    names = [table_of(shape, base, logical) for logical in shape.tables()]
    conn = connect()
    with conn.cursor() as cur:
        for name in names:
            cur.execute(f"DROP TABLE IF EXISTS `{name}`")
            cur.execute(shape.model.ddl(name))
    conn.commit()
    conn.close()
    return names


# -- checks ---------------------------------------------------------------------------------------------
def expected(shape: Shape, state: dict[str, dict[int, Any]]) -> Checks:
    """Per table, the (row count, checksum) of the final state computed from the events."""
    return {t: shape.model.checksum(shape.rows(state[t])) for t in shape.tables()}


def mysql_checks(shape: Shape, base: str) -> Checks:
    conn = connect()
    out = {}
    with conn.cursor() as cur:
        for logical in shape.tables():
            cur.execute(shape.model.checksum_sql(table_of(shape, base, logical)), ())
            count, total = cur.fetchone()
            out[logical] = (int(count), int(total))
    conn.close()
    return out


def es_checksum(model: RowModel, index: str) -> tuple[int, int]:
    """(documents, checksum) of an index, a page of the scroll at a time."""
    from elasticsearch import Elasticsearch

    es = Elasticsearch(es_url(), request_timeout=120)
    es.indices.refresh(index=index)
    count = total = 0
    resp = es.search(index=index, size=2_000, scroll="2m")
    while resp["hits"]["hits"]:
        n, crc = model.es_checksum([h["_source"] for h in resp["hits"]["hits"]])
        count, total = count + n, total + crc
        resp = es.scroll(scroll_id=resp["_scroll_id"], scroll="2m")
    es.clear_scroll(scroll_id=resp["_scroll_id"])
    es.close()
    return count, total


def es_checks(shape: Shape, base: str, tag: str) -> Checks:
    return {t: es_checksum(shape.model, index_of(shape, base, tag, t)) for t in shape.tables()}


# -- Kafka ------------------------------------------------------------------------------------------------
def _produce(topics: Iterable[str], partitions: int, messages: Iterable[Message]) -> tuple[float, int]:
    """(seconds, bytes of keys and values) to create the topics and produce the messages."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap()})
    created = admin.create_topics([NewTopic(t, num_partitions=partitions, replication_factor=1) for t in topics])
    for future in created.values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap(), "linger.ms": 50, "batch.num.messages": 10_000,
                         "partitioner": "murmur2_random", "compression.type": "none", "acks": "all",
                         "message.max.bytes": 16_000_000})
    start, size = time.perf_counter(), 0
    for topic, key, value in messages:
        size += len(key) + (len(value) if value is not None else 0)
        while True:
            try:
                producer.produce(topic, key=key, value=value)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(120) == 0, "produce did not complete"
    return time.perf_counter() - start, size


def produce(topic: str, workload: Workload, partitions: int = 3) -> float:
    """bench/workload.py's small stream to ``topic`` (also bench/cluster_read.py)."""
    return _produce([topic], partitions, ((topic, k, v) for k, v, *_ in workload.stream()))[0]


def produce_shape(shape: Shape, tag: str) -> tuple[float, int]:
    return _produce(shape.topics(tag), shape.partitions, shape.messages(tag))


def delete_topics(topics: list[str]) -> None:
    """Best effort: the broker keeps every topic in memory (a million real-shaped events are ~10 GB)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap()})  # kept until the futures resolve
    futures = admin.delete_topics(topics, operation_timeout=60, request_timeout=60)
    for topic, future in futures.items():
        try:
            future.result(60)
        except Exception as exc:  # noqa: BLE001 - a topic left behind costs memory, not correctness
            print(f"could not delete topic {topic}: {exc}")


def delete_indexes(pattern: str) -> None:
    """Best effort: the run's Elasticsearch indexes (``tables50`` makes 50 a run), once checked."""
    from elasticsearch import Elasticsearch

    es = Elasticsearch(es_url(), request_timeout=120)
    try:
        names = list(es.options(ignore_status=404).indices.get(index=pattern, expand_wildcards="open").body)
        for name in names:  # by name: Elasticsearch 8 refuses to delete by a wildcard
            es.options(ignore_status=404).indices.delete(index=name)
    except Exception as exc:  # noqa: BLE001 - best effort, as delete_topics: the checks are done
        print(f"could not delete the indexes {pattern}: {exc.__class__.__name__}: {exc}")
    finally:
        es.close()


def pipeline_yaml(directory: Path, name: str, source: str | dict[str, Any], sinks: list[dict[str, Any]],
                  extra: dict[str, Any] | None = None, window: int = 250_000) -> None:
    """A pipeline file: ``source`` is a topic or a source block (``topics_regex`` …)."""
    block = {"topics": [source]} if isinstance(source, str) else source
    dlq = (block.get("topics") or ["bench"])[0] if "topics" in block else name
    cfg = {"name": name, "source": block,
           "window": {"max_records": window, "max_duration": "30m", "stop_on_empty": True},
           "sinks": sinks, "errors": {"tolerance": "all", "dlq_topic": f"{dlq}.dlq"}, **(extra or {})}
    (directory / f"{name}.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
