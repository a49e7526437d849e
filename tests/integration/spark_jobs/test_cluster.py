"""Scale-out: the same pipeline config on a real Spark standalone cluster (a master, two workers and
a Spark Connect server on it, all started on this machine by tests/spark_cluster.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdcflow import cdcgen
from cdcflow.config import load_pipeline
from tests.helpers import bootstrap, expected, subprocess_env, table_rows, unique, write_pipeline
from tests.spark_cluster import ROOT, SparkCluster

pytestmark = [pytest.mark.integration, pytest.mark.services]
PARTITIONS = 6


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    c = SparkCluster(tmp_path_factory.mktemp("spark-cluster"), workers=2)
    try:
        c.start()
        yield c
    finally:
        c.stop()


# In a child process, as an Airflow task runs it (and because a Spark Connect session switches the
# process's pyspark.sql.functions to Connect columns, which the in-process tests cannot use). The
# child first opens a session on the default server: a second pipeline's session must not be reused.
WINDOW = """
import json, sys
from cdcflow import runner
from cdcflow.config import SparkConfig, find_pipeline
from spark_jobs.session import connect_spark
connect_spark(SparkConfig(remote=sys.argv[3]), "another-pipeline")
stats = runner.run_window(find_pipeline(sys.argv[1]), sys.argv[2])
print(json.dumps(stats))
"""


def test_a_pipeline_reads_its_partitions_in_parallel_on_both_workers(cluster: SparkCluster, config_dir: Path) -> None:
    tag = unique("cluster")
    cfg = load_pipeline(write_pipeline(config_dir, tag, f"t.{tag}", tag))
    assert cfg.spark.mode == "connect" and cfg.spark.remote is None  # the config names no cluster
    stream = cdcgen.orders_stream(30_000, 3_000, seed=23)
    cdcgen.produce(bootstrap(), cfg.source.topics[0], stream.events, partitions=PARTITIONS)
    env = subprocess_env(config_dir, CDCFLOW_SPARK_REMOTE=cluster.remote)  # where the deployment points it
    out = subprocess.run([sys.executable, "-c", WINDOW, cfg.name, "cluster-1", os.environ["CDCFLOW_SPARK_REMOTE"]],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    stats = json.loads(out.stdout.strip().splitlines()[-1])

    assert stats["spark"] == f"connect {cluster.remote}"
    assert stats["records"] == len(stream.events)
    assert table_rows(cfg.sinks[0].table) == expected(stream.state)
    assert stats["dead_lettered"] == len(stream.broken) == 6  # to the DLQ from the cluster's executors
    # Spark's own status: the read stage (one task per partition range) ran on both workers
    workers = cluster.executor_workers()  # executor id -> worker id, from each worker's JSON
    assert len(set(workers.values())) == 2, workers
    reads = [s for s in cluster.stages() if s["numTasks"] == PARTITIONS]
    assert reads, [(s["stageId"], s["numTasks"], s["name"]) for s in cluster.stages()]
    ran_on = {workers[t["executorId"]] for s in reads for t in s["tasks"].values()}
    assert ran_on == set(workers.values()), (ran_on, workers)
