"""What cdcflow is measured against, on the same topic and the same final state (issue 41).

* the raw ceilings: a bare confluent-kafka consume loop (events/s and bytes/s), a bare multi-row
  ``INSERT … ON DUPLICATE KEY UPDATE`` of the final rows, a bare LOAD DATA of them into an empty
  table, a bare Elasticsearch bulk of their documents;
* the apache-kafka provider's ConsumeFromTopicOperator through ``airflow dags test``, with
  bench/provider_fns.py's loops: the provider's defaults (the baseline until issue 41) and the
  careful loop.

Each is checked against the final state, and its CPU is counted over the interval its rate is
measured over, with the same process boundaries as cdcflow's (bench/meter.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import uuid
from pathlib import Path
from typing import Any

from bench import harness
from bench.harness import Checks, Shape
from bench.meter import ROOT, PeakRss, timed
from bench.provider_fns import CAREFUL_BATCH, DEFAULT_BATCH

BATCH = 500  # the bare upsert's rows per statement (the figure's history)
LOOPS = {"defaults": ("bench.provider_fns.provider_defaults", DEFAULT_BATCH),
         "careful": ("bench.provider_fns.provider_careful", CAREFUL_BATCH)}


def _rates(n: int, t: dict[str, float], unit: str) -> dict[str, Any]:
    return {f"{unit}_per_s": round(n / t["seconds"]), unit: n, "seconds": round(t["seconds"], 2)}


def raw_consume(shape: Shape, tag: str, n: int) -> dict[str, Any]:
    """Every message of the shape's topics, read to their ends by one consumer."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": harness.bootstrap(), "group.id": f"bench-raw-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "enable.partition.eof": True, "fetch.wait.max.ms": 100})
    parts = [(t, p) for t in shape.topics(tag) for p in range(shape.partitions)]
    consumer.assign([TopicPartition(t, p, 0) for t, p in parts])
    seen = size = 0
    pending = set(parts)
    with PeakRss() as mem, timed() as t:
        while pending:
            for msg in consumer.consume(num_messages=10_000, timeout=1.0):
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        pending.discard((msg.topic(), msg.partition()))
                    continue
                seen += 1
                size += len(msg.key() or b"") + len(msg.value() or b"")
    consumer.close()
    assert seen == n, f"consumed {seen} of {n}"
    return {"events_per_s": round(n / t["seconds"]), "bytes_per_s": round(size / t["seconds"]), "bytes": size,
            "seconds": round(t["seconds"], 2), "cpu_seconds": mem.cpu(t["start"], t["end"])}


def _final_rows(shape: Shape, state: dict[str, dict[int, Any]]) -> dict[str, list[tuple[Any, ...]]]:
    return {logical: shape.rows(state[logical]) for logical in shape.tables()}


def raw_mysql(shape: Shape, state: dict[str, dict[int, Any]], want: Checks) -> dict[str, Any]:
    """The final rows upserted in multi-row statements of 500, a commit each, one connection."""
    tables = harness.create_tables(shape, "bench_bare")
    model = shape.model
    rows = {t: [model.params(r) for r in rs] for t, rs in zip(tables, _final_rows(shape, state).values(), strict=True)}
    conn = harness.connect()
    with PeakRss() as mem, timed() as t, conn.cursor() as cur:
        for table, params in rows.items():
            sql = model.upsert_sql(table)
            for i in range(0, len(params), BATCH):
                cur.executemany(sql, params[i:i + BATCH])
                conn.commit()
    conn.close()
    n = sum(len(r) for r in rows.values())
    return {**_rates(n, t, "rows"), "batch": BATCH, "cpu_seconds": mem.cpu(t["start"], t["end"]),
            "checksum_ok": harness.mysql_checks(shape, "bench_bare") == want}


def raw_mysql_load(shape: Shape, state: dict[str, dict[int, Any]], want: Checks) -> dict[str, Any]:
    """The second ceiling: the final rows written to a file and bulk-loaded with one LOAD DATA LOCAL
    INFILE per table into an empty table (no upsert, no version guard, no reading)."""
    tables = harness.create_tables(shape, "bench_bare_load")
    model = shape.model
    final = dict(zip(tables, _final_rows(shape, state).values(), strict=True))
    conn = harness.connect(local_infile=True)
    path = Path(tempfile.mkstemp(suffix=".tsv")[1])
    with PeakRss() as mem, timed() as t:
        for table, rows in final.items():
            path.write_text("".join(model.load_line(r) + "\n" for r in rows), encoding="utf-8")
            with conn.cursor() as cur:
                cur.execute(model.load_sql(table, str(path)))
            conn.commit()
    conn.close()
    path.unlink()
    n = sum(len(r) for r in final.values())
    return {**_rates(n, t, "rows"), "cpu_seconds": mem.cpu(t["start"], t["end"]),
            "checksum_ok": harness.mysql_checks(shape, "bench_bare_load") == want}


def raw_es(shape: Shape, state: dict[str, dict[int, Any]], tag: str, want: Checks) -> dict[str, Any]:
    """The final documents in bulk requests of 1,000 index actions, one index per table, each created
    first with cdcflow's index settings (``harness.ES_SETTINGS``: the ceiling the issue compares with)."""
    from elasticsearch import Elasticsearch

    base = f"bench-bare-{tag}"
    es = Elasticsearch(harness.es_url(), request_timeout=120)
    final = {harness.index_of(shape, base, tag, t): rows for t, rows in _final_rows(shape, state).items()}
    for index in final:
        es.options(ignore_status=404).indices.delete(index=index)
        es.indices.create(index=index, settings=harness.ES_SETTINGS)
    docs = {index: [shape.model.es_doc(r) for r in rows] for index, rows in final.items()}
    with PeakRss() as mem, timed() as t:
        for index, rows in final.items():
            for i in range(0, len(rows), 1000):
                body = b"".join(b'{"index":{"_index":"%s","_id":"%d"}}\n%s\n' % (index.encode(), r[0], d)
                                for r, d in zip(rows[i:i + 1000], docs[index][i:i + 1000], strict=True))
                resp = es.bulk(operations=body)  # type: ignore[arg-type]  # NDJSON bytes: the client sends them as is
                assert not resp["errors"], "bare bulk had item errors"
    ok = harness.es_checks(shape, base, tag) == want
    for index in final:
        es.options(ignore_status=404).indices.delete(index=index)
    es.close()
    n = sum(len(r) for r in final.values())
    return {**_rates(n, t, "docs"), "cpu_seconds": mem.cpu(t["start"], t["end"]), "checksum_ok": ok}


def provider(shape: Shape, tag: str, n: int, want: Checks, loop: str) -> dict[str, Any]:
    """ConsumeFromTopicOperator + provider_fns' ``loop`` (defaults or careful) via ``airflow dags test``."""
    function, batch = LOOPS[loop]
    base = f"bench_provider_{loop}"
    harness.create_tables(shape, base)
    stats_file = Path(tempfile.mkstemp(suffix=".json")[1])
    topics = shape.topics(tag)
    env = dict(os.environ)
    env.update({
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "bench" / "dags"),
        "AIRFLOW_CONN_BENCH_KAFKA": json.dumps({"conn_type": "kafka", "extra": {
            "bootstrap.servers": harness.bootstrap(), "group.id": f"bench-provider-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest", "enable.auto.commit": False, "session.timeout.ms": 6000}}),
        "BENCH_TOPIC": topics[0] if len(topics) == 1 else "^" + shape.source(tag)["topics_regex"],
        "BENCH_MAX_MESSAGES": str(n), "BENCH_BATCH_SIZE": str(batch), "BENCH_APPLY_FUNCTION": function,
        "BENCH_PROVIDER_MODEL": "small" if shape.name == "small" else "real",
        "BENCH_PROVIDER_TABLE": f"{base}_{{table}}" if shape.routed else base,
        "BENCH_PROVIDER_STATS": str(stats_file), "PYTHONPATH": str(ROOT),
    })
    with PeakRss() as mem, timed() as t:
        proc = subprocess.run(["airflow", "dags", "test", "bench_provider_baseline"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=7200, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"provider baseline ({loop}) failed:\n" + (proc.stdout + proc.stderr)[-3000:])
    marks = json.loads(stats_file.read_text())
    stats_file.unlink()
    busy = marks["last_batch_end"] - marks["first_batch_start"]
    assert marks["messages"] == n, marks
    out = {"loop": loop, "batch": batch, "events_per_s": round(n / busy), "operator_seconds": round(busy, 2),
           "wall_seconds_with_airflow": round(t["seconds"], 2), "events_per_s_wall": round(n / t["seconds"]),
           "peak_rss_mib": mem.mib(), "cpu_seconds": mem.cpu(marks["first_batch_start"], marks["last_batch_end"]),
           "cpu_seconds_with_airflow_start": mem.cpu()}
    if marks.get("operator_start"):  # with the consumer's start: its group join and first fetch
        since = marks["last_batch_end"] - marks["operator_start"]
        out.update({"events_per_s_from_operator_start": round(n / since),
                    "seconds_from_operator_start": round(since, 2),
                    "cpu_seconds_from_operator_start": mem.cpu(marks["operator_start"], marks["last_batch_end"])})
    out["checksum_ok"] = harness.mysql_checks(shape, base) == want
    return out
