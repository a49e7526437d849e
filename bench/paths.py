"""cdcflow's measured paths: windows of a pipeline until the topic is drained, the warm-up before
them, and the fixed cost of a window (warm session and fresh process)."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench import harness, shapes
from bench.harness import Shape
from bench.meter import ROOT, PeakRss, timed
from bench.models import SMALL
from bench.workload import Workload

BATCH = 500  # the MySQL sink's rows per statement


def declared_sink(shape: Shape, table: str, **extra: Any) -> dict[str, Any]:
    """cdcflow's MySQL sink with the declared columns (the source table's DDL)."""
    return {"type": "mysql", "name": "m", "table": harness.sink_table(shape, table), "create_table": True,
            "primary_key": ["id"], "columns": shape.model.columns, "batch_size": BATCH, **extra}


def schema_sink(shape: Shape, table: str) -> dict[str, Any]:
    """cdcflow's MySQL sink whose tables are created from the record schema (docs/types.md)."""
    return {"type": "mysql", "name": "m", "table": harness.sink_table(shape, table), "create_table": True,
            "batch_size": BATCH}


def es_sink(shape: Shape, index: str) -> dict[str, Any]:
    """cdcflow's Elasticsearch sink, with the measured index settings (no replica, a 30 s refresh)."""
    return {"type": "elasticsearch", "name": "e", "index": harness.sink_index(shape, index), "id_fields": ["id"],
            "bulk_max_actions": 1000, "settings": dict(harness.ES_SETTINGS)}


ES_WARM_WINDOWS = 4  # a fresh Elasticsearch's bulk CPU fell from 40 to 13.5 s over five runs (docs/benchmarks.md)


def run_cdcflow(name: str, source: str | dict[str, Any], sinks: list[dict[str, Any]], spark: Any, tmp: Path,
                extra: dict[str, Any] | None = None, window: int = 250_000) -> dict[str, Any]:
    """Windows until one finds nothing new. The rate and the CPU are over the windows that read
    records (the first one's start to the last one's end); the session is already started."""
    from cdcflow import runner
    from cdcflow.config import find_pipeline

    harness.pipeline_yaml(tmp, name, source, sinks, extra, window)
    cfg = find_pipeline(name)
    windows = []
    with PeakRss() as mem, timed() as t:
        busy_end = t["start"]
        for n in range(1, 100_000):
            with timed() as w:
                stats = runner.run_window(cfg, f"{name}-{n}", spark=spark)
            if stats["records"] == 0:
                break
            busy_end = w["end"]
            windows.append({"records": stats["records"], "seconds": round(w["seconds"], 2), "stages": stats["stages"],
                            "dead_lettered": stats.get("dead_lettered", 0)})
    busy = sum(x["seconds"] for x in windows)
    return {"windows": windows, "seconds": round(busy, 2),
            "events_per_s": round(sum(x["records"] for x in windows) / busy) if busy else 0,
            "dead_lettered": sum(x["dead_lettered"] for x in windows),
            "peak_rss_mib": mem.mib(), "cpu_seconds": mem.cpu(t["start"], busy_end),
            "wall_seconds_with_final_empty_window": round(t["seconds"], 2)}


def warm_up(spark: Any, tmp: Path, shape: Shape, es: bool = False) -> None:
    """One unrecorded window per measured sink first: the first window of a process pays the JVM's and
    the Python workers' warm-up (~15-20 s), which would land on whichever path is measured first.
    With ``es``, :data:`ES_WARM_WINDOWS` windows into a throwaway index too: Elasticsearch's own JIT
    warms over several bulk loads, which would otherwise land on the first MySQL+ES round."""
    tag = uuid.uuid4().hex[:8]
    events = 60_000 if shape.name == "small" else 25_000  # above SMALL_WINDOW: the shuffle path
    warm = shapes.make(shape.name, events, 20_000 if shape.name == "small" else 5_000, 3)
    harness.produce_shape(warm, tag)
    print("warm-up: one window per measured sink (not recorded) ...")
    sinks = {"set": declared_sink(warm, "bench_warmup"), "rows": declared_sink(warm, "bench_warmup", apply="rows")}
    if warm.name != "small":
        sinks["schema"] = schema_sink(warm, "bench_warmup")
    for kind, sink in sinks.items():
        harness.drop_tables(warm, "bench_warmup")
        run_cdcflow(f"bench_warmup_{kind}_{tag}", warm.source(tag), [sink], spark, tmp, window=shape.window)
    for i in range(ES_WARM_WINDOWS if es else 0):
        print(f"warm-up: Elasticsearch, window {i + 1} of {ES_WARM_WINDOWS} (not recorded) ...")
        harness.drop_tables(warm, "bench_warmup")
        index = f"bench-warmup-{tag}-{i}"
        run_cdcflow(f"bench_warmup_es{i}_{tag}", warm.source(tag), [declared_sink(warm, "bench_warmup"),
                                                                     es_sink(warm, index)], spark, tmp,
                    window=shape.window)
        harness.delete_indexes(f"{index}*")
    harness.drop_tables(warm, "bench_warmup")


def window_overhead(spark: Any, tmp: Path) -> dict[str, float]:
    """Wall time of one window with 1,000 records and of one with no new data (the small shape's events)."""
    from cdcflow import runner
    from cdcflow.config import find_pipeline

    topic = f"bench.overhead.{uuid.uuid4().hex[:8]}"
    table = "bench_overhead"
    harness.drop_table(table)
    sink = {"type": "mysql", "name": "m", "table": table, "create_table": True, "primary_key": ["id"],
            "columns": SMALL.columns, "batch_size": BATCH}
    harness.pipeline_yaml(tmp, "bench_overhead", topic, [sink])
    harness.produce(topic, Workload(events=1000, keys=1000, seed=7))
    cfg = find_pipeline("bench_overhead")
    with timed() as full:
        stats = runner.run_window(cfg, "overhead-1", spark=spark)
    assert stats["records"] == 1000, stats
    with timed() as empty:
        stats = runner.run_window(cfg, "overhead-2", spark=spark)
    assert stats["records"] == 0
    # the same windows as a fresh process (`cdcflow run`), what a DAG run's process_window task pays each time:
    # Python imports and a Spark Connect session. On the server's shared session (pipelines without a
    # spark.conf of their own share one, renewed hourly) the first run may meet a session no window used yet,
    # whose Python worker daemon starts with it: that first run is reported apart, the next one is the
    # steady figure. A pipeline with a spark.conf of its own gets a new session: the once-an-hour figure.
    fresh: dict[str, float] = {}
    own = {"spark": {"conf": {"spark.sql.shuffle.partitions": "4"}}}  # a spark.conf of its own: its own session
    runs = (("window_1000_records_fresh_process_first_s", "bench_overhead_fresh_0", 1000, None),
            ("window_1000_records_fresh_process_s", "bench_overhead_fresh_1", 1000, None),
            ("window_no_new_data_fresh_process_s", "bench_overhead_fresh_1", 0, None),  # fresh_1 again: read to its end
            ("window_1000_records_fresh_process_new_session_s", f"bench_overhead_own_{uuid.uuid4().hex[:8]}", 1000,
             own))
    for label, name, expect, extra in runs:
        if expect:
            harness.produce(f"{topic}.{name}", Workload(events=1000, keys=1000, seed=8 + len(fresh)))
            harness.pipeline_yaml(tmp, name, f"{topic}.{name}", [sink], extra)
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "cdcflow.cli", "run", name], cwd=ROOT,
                              capture_output=True, text=True, timeout=600, check=False)
        assert proc.returncode == 0 and f'"records": {expect},' in proc.stdout, proc.stderr[-2000:]
        fresh[label] = round(time.perf_counter() - started, 2)
    return {"window_1000_records_s": round(full["seconds"], 2), "window_no_new_data_s": round(empty["seconds"], 2),
            **fresh}
