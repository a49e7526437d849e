"""The Python daemon of the long-lived Spark server's workers (``spark.python.daemon.module``, set by
scripts/services.sh): PySpark's own daemon, with the modules a window's tasks use imported before it
forks a worker.

Spark forks each Python worker from one daemon process, and a worker left idle for a minute is
stopped. A scheduled pipeline's windows are usually further apart than that, so nearly every window
started a worker that imported PySpark's worker, pyarrow, pandas, confluent-kafka and cdcflow's
read/decode/write modules afresh: ~0.6 s of a 1,000-record window, ~2 s when the daemon itself was
new (docs/benchmarks.md, "The worker daemon"). Imported here once, they are in every forked worker
already (copy-on-write pages, so the workers also share that memory).

PySpark imports the worker module after the fork because pyarrow and pandas may start threads, and
a fork copies no thread. The imports here leave two native threads in the daemon: OpenBLAS's (kept
to one thread, so no pool) and jemalloc's background thread of pyarrow, whose fork handlers re-create
it in the child; Arrow re-creates its own thread pools after a fork. An import that fails here is
logged and left to the worker, which imports it again when it runs.

The preloaded code lives as long as the daemon (a server session's, about an hour): after upgrading
cdcflow, restart the Spark server (``scripts/services.sh stop spark; scripts/services.sh start
spark``), as for any change of the code the workers run.
"""

from __future__ import annotations

import os
import sys
import time

PRELOADED = (
    "pyspark.worker", "pyspark.sql.pandas.serializers", "pyarrow", "pyarrow.compute", "pyarrow.json", "pyarrow.ipc",
    "pandas", "numpy", "msgspec", "confluent_kafka", "sqlalchemy", "pymysql",
    "spark_jobs.project.targets", "spark_jobs.read.ranges", "spark_jobs.read.decode", "spark_jobs.write.tasks",
    "spark_jobs.write.early_writes", "spark_jobs.write.target_writes",
    "spark_jobs.transform.spark_stage", "spark_jobs.project.tables", "spark_jobs.write.sinks",
    "connectors.formats", "connectors.debezium.envelope", "connectors.debezium.columns", "connectors.kafka.reader",
    "connectors.kafka.dlq", "connectors.mysql.sink", "connectors.elasticsearch.sink", "elasticsearch",
)


def preload(modules: tuple[str, ...] = PRELOADED) -> list[str]:
    """Import ``modules``; returns those that failed (each logged to stderr, the Spark server's log)."""
    import importlib  # noqa: PLC0415

    failed = []
    started = time.perf_counter()
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - a worker imports it again, and fails there with its own error
            failed.append(name)
            print(f"cdcflow worker daemon: could not preload {name}: {exc.__class__.__name__}: {exc}", file=sys.stderr)
    print(f"cdcflow worker daemon: preloaded {len(modules) - len(failed)} modules in "
          f"{time.perf_counter() - started:.2f} s", file=sys.stderr)
    return failed


if __name__ == "__main__":
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    # the workers' Arrow memory from jemalloc (spark_jobs/session.py::DEFAULT_CONF says why); set here,
    # before pyarrow's first allocation, as spark.executorEnv does not reach a local server's workers
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")
    preload()
    from pyspark.daemon import manager

    manager()
