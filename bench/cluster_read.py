"""Throughput on a real Spark standalone cluster: 1 worker against 2 workers (1 core each), on a
topic with 6 partitions, on the Spark Connect server of that cluster. What is timed is either a
window's read stage as the window job runs it (one Spark task per partition range reading with
confluent-kafka into Arrow, the Debezium decode, and the local checkpoint: ``spark_jobs.read.ranges``), or
with ``--full`` whole windows into MySQL (``runner.run_window``: read, decode, last change per key,
write, commit), checked against the events' final state.

    scripts/bench.sh --cluster-read [--full]   (or: python -m bench.cluster_read [--events 600000] [--full])
    python -m bench.cluster_read --full --shape debezium --events 60000
                                   the real-shaped stream (bench/shapes.py: Debezium's JsonConverter with
                                   schemas, ~10 KB an event, 3 partitions) into its declared columns

Needs kafka (scripts/services.sh start kafka). Starts and stops its own clusters (tests/spark_cluster.py).
Prints a table and writes bench/results/<time>-cluster-read.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from cdcflow import cdcgen
from cdcflow.connections import get_connection

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = 6


def read_once(spark: object, topic: str, consumer_conf: dict[str, object], ends: dict[int, int]) -> tuple[int, float]:
    from pyspark.sql import functions as F  # noqa: PLC0415

    import pyarrow as pa  # noqa: PLC0415

    from connectors.kafka.reader import ReadRange  # noqa: PLC0415
    from spark_jobs.job import WindowJob
    from spark_jobs.read.ranges import reader  # noqa: PLC0415

    ranges = tuple(ReadRange(topic, p, 0, max_records=ends[p], stop=ends[p], deadline=time.time() + 600,
                             stop_on_eof=True) for p in range(PARTITIONS))
    job = WindowJob("bench", "read", consumer_conf, {}, ranges, (), "source_ts_ms", "all", None, True)
    read = reader(job, tuple((r,) for r in ranges))

    def counted(batches):  # type: ignore[no-untyped-def]
        for decoded in read(batches):  # read and decoded in the read tasks, as a window does
            yield pa.RecordBatch.from_pydict({"n": [decoded.num_rows]})

    t0 = time.perf_counter()
    idx = spark.range(0, PARTITIONS, 1, PARTITIONS).select(F.col("id").cast("int").alias("idx"))  # type: ignore[attr-defined]
    records = idx.mapInArrow(counted, "n long").agg(F.sum("n")).collect()[0][0] or 0
    seconds = time.perf_counter() - t0
    return int(records), seconds


def full_once(spark: object, topic: str, tmp: Path, r: int, want: tuple[int, int]) -> tuple[int, float]:
    """The topic through whole windows of 250,000 records into a new MySQL table: (records, seconds)."""
    from bench.harness import drop_table, pipeline_yaml  # noqa: PLC0415
    from bench.run import COLUMNS, mysql_checksum  # noqa: PLC0415
    from cdcflow import runner  # noqa: PLC0415
    from cdcflow.config import find_pipeline  # noqa: PLC0415

    name = f"cluster_full_{uuid.uuid4().hex[:6]}_{r}"
    drop_table(name)
    pipeline_yaml(tmp, name, topic, [{"type": "mysql", "name": "m", "table": name, "create_table": True,
                                      "primary_key": ["id"], "columns": COLUMNS, "batch_size": 500}])
    cfg = find_pipeline(name)
    records, t0 = 0, time.perf_counter()
    for n in range(1, 100):
        stats = runner.run_window(cfg, f"{name}-{n}", spark=spark)
        if not stats["records"]:
            break
        records += stats["records"]
    seconds = time.perf_counter() - t0
    got = mysql_checksum(name)
    assert got == want, f"{name}: {got} != the events' final state {want}"
    drop_table(name)
    return records, seconds


def full_shape_once(spark: object, shape: object, tag: str, tmp: Path, r: int, workers: int,
                    want: object) -> tuple[int, float]:
    """A shape's topic through whole windows into its declared columns (bench/paths.py, as bench.run
    measures cdcflow), checked against the events' final state: (records, seconds of the windows)."""
    from bench import harness, paths  # noqa: PLC0415

    base = f"bench_cluster_{workers}w_{r}"
    harness.drop_tables(shape, base)  # type: ignore[arg-type]
    out = paths.run_cdcflow(f"cluster_{tag}_{workers}w_{r}", shape.source(tag),  # type: ignore[attr-defined]
                            [paths.declared_sink(shape, base)], spark, tmp, None, shape.window)  # type: ignore[arg-type,attr-defined]
    got = harness.mysql_checks(shape, base)  # type: ignore[arg-type]
    assert got == want, f"{base}: {got} != the events' final state {want}"
    harness.drop_tables(shape, base)  # type: ignore[arg-type]
    return sum(w["records"] for w in out["windows"]), out["seconds"]


def main() -> None:
    from connectors.kafka.reader import discover  # noqa: PLC0415
    from spark_jobs.session import release_sessions  # noqa: PLC0415
    from tests.spark_cluster import SparkCluster  # noqa: PLC0415

    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=600_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--full", action="store_true", help="whole windows into MySQL, not the read stage alone")
    ap.add_argument("--shape", choices=["small", "debezium"], default="small",
                    help="with --full: the workload (bench/shapes.py); debezium is real-shaped, ~10 KB an event")
    args = ap.parse_args()
    if args.shape != "small" and not args.full:
        ap.error("--shape debezium needs --full")
    bootstrap = get_connection("cdcflow_kafka").kafka_config()["bootstrap.servers"]
    topic = f"bench.cluster.{uuid.uuid4().hex[:8]}"
    t = time.perf_counter()
    shape, tag = None, uuid.uuid4().hex[:8]
    if args.shape != "small":  # real-shaped events, as bench.run produces them
        from bench import harness as bench_harness  # noqa: PLC0415
        from bench import shapes  # noqa: PLC0415

        shape = shapes.make(args.shape, args.events, max(args.events // 10, 1), 5)
        bench_harness.produce_shape(shape, tag)
        want = bench_harness.expected(shape, shape.final_state())
        topic = shape.topics(tag)[0]
        tmp_config = Path(tempfile.mkdtemp(prefix="cdcflow-cluster-"))
        os.environ["CDCFLOW_CONFIG_DIR"] = str(tmp_config)
        os.environ["CDCFLOW_OFFSET_STORE_URL"] = f"sqlite:///{tmp_config / 'offsets.db'}"
    elif args.full:  # the recorded benchmark's workload (bench/workload.py), checked by its final state
        from bench.harness import produce  # noqa: PLC0415
        from bench.workload import Workload, checksum  # noqa: PLC0415

        workload = Workload(args.events, max(args.events // 10, 1))
        want = checksum(workload.final_state())
        produce(topic, workload, partitions=PARTITIONS)
        tmp_config = Path(tempfile.mkdtemp(prefix="cdcflow-cluster-"))
        os.environ["CDCFLOW_CONFIG_DIR"] = str(tmp_config)
        os.environ["CDCFLOW_OFFSET_STORE_URL"] = f"sqlite:///{tmp_config / 'offsets.db'}"
    else:
        cdcgen.produce(bootstrap, topic, cdcgen.orders_stream(args.events, args.events // 10, seed=5,
                                                              broken=False).events, partitions=PARTITIONS)
    parts = shape.partitions if shape is not None else PARTITIONS
    print(f"produced {args.events:,} events to {topic} ({parts} partitions) in {time.perf_counter() - t:.1f} s")
    conf = {"bootstrap.servers": bootstrap, "group.id": "bench-cluster-read", "enable.auto.commit": False,
            "enable.partition.eof": True, "fetch.wait.max.ms": 100, "auto.offset.reset": "error"}
    ends = {p.partition: p.end for p in discover(conf, [topic])}
    total = sum(ends.values())
    rows = []
    for workers in (1, 2):
        with tempfile.TemporaryDirectory() as tmp:
            cluster = SparkCluster(Path(tmp), workers=workers)
            try:
                cluster.start()
                from pyspark.sql import SparkSession  # noqa: PLC0415

                spark = SparkSession.builder.remote(cluster.remote).create()
                times = []
                for r in range(args.rounds + 1):  # the first round warms the executors' Python workers
                    if shape is not None:
                        n, seconds = full_shape_once(spark, shape, tag, tmp_config, r, workers, want)
                    elif args.full:
                        n, seconds = full_once(spark, topic, tmp_config, r, want)
                    else:
                        n, seconds = read_once(spark, topic, conf, ends)
                    assert n == total, (n, total)
                    if r:
                        times.append(seconds)
                spark.stop()
                release_sessions(cluster.remote)
            finally:
                cluster.stop()
        med = statistics.median(times)
        rows.append({"workers": workers, "median_s": round(med, 2), "runs_s": [round(x, 2) for x in times],
                     "events_per_s": round(total / med)})
        what = "whole windows into MySQL" if args.full else "read+decode+checkpoint"
        print(f"{workers} worker(s), 1 core each: {what} of {total:,} events: median {med:.2f} s "
              f"= {total / med:,.0f} events/s  (runs {', '.join(f'{x:.2f}' for x in times)})", flush=True)
    ratio = round(rows[1]["events_per_s"] / rows[0]["events_per_s"], 2)
    print(f"2 workers / 1 worker: {ratio}x  ({os.cpu_count()} cores on this machine, shared with the broker)")
    kind = ("cluster-full" if args.full else "cluster-read") + ("" if shape is None else f"-{args.shape}")
    out = ROOT / "bench" / "results" / f"{time.strftime('%Y%m%dT%H%M%S')}-{kind}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"command": "python -m bench.cluster_read " + " ".join(sys.argv[1:]), "events": total,
                               "partitions": len(ends), "rows": rows, "ratio_2_over_1": ratio,
                               "cores": os.cpu_count(), "what": kind}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
