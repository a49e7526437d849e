"""Airflow's LocalExecutor with cdcflow's task modules imported before it forks.

Every Airflow task runs in a fresh process, forked by a LocalExecutor worker (itself forked from the
scheduler). A window's task then imports SQLAlchemy, pydantic, confluent-kafka, pyarrow and PySpark's
Spark Connect client (pandas, gRPC): about a second of every window, paid again by every task. This
executor imports them once, in the scheduler before the workers are forked, so every task process
inherits them (copy-on-write) and starts its window at once.

    AIRFLOW__CORE__EXECUTOR=cdcflow.airflow.executor.PreloadingLocalExecutor

Only modules are imported: no client, connection, thread or gRPC channel exists before the fork, so
the children start clean. A module that fails to import is logged and left to the task, which then
reports the error itself.
"""

from __future__ import annotations

import importlib
import logging
import time

from airflow.executors.local_executor import LocalExecutor

log = logging.getLogger("cdcflow.executor")

# What a window's tasks import, heaviest first (bench/fixed_cost.py measures the difference).
PRELOAD = (
    "pyspark.sql.connect.session",
    "pyspark.sql.connect.functions",
    "pyspark.sql.functions",
    "sqlalchemy",
    "pymysql",
    "confluent_kafka",
    "pyarrow",
    "elasticsearch",
    "cdcflow.config",
    "cdcflow.runner",
    "cdcflow.window.plan",
    "cdcflow.window.process",
    "cdcflow.window.commit",
    "cdcflow.airflow.tasks",
    "connectors.kafka.reader",
    "connectors.kafka.dlq",
    "connectors.kafka.groups",
    "connectors.mysql.sink",
    "connectors.elasticsearch.sink",
    "spark_jobs.session",
    "spark_jobs.window",
    "spark_jobs.transform.row_transforms",
    "spark_jobs.transform.spark_stage",
)


def preload(modules: tuple[str, ...] = PRELOAD) -> dict[str, str]:
    """Import ``modules``; returns {module: error} for those that failed."""
    started, failed = time.perf_counter(), {}
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - the task reports it when it needs the module
            failed[name] = f"{exc.__class__.__name__}: {exc}"
    log.info("cdcflow: preloaded %d task modules in %.2fs%s", len(modules) - len(failed),
             time.perf_counter() - started, f"; not loaded: {failed}" if failed else "")
    return failed


class PreloadingLocalExecutor(LocalExecutor):
    """LocalExecutor whose workers, and so every task process, start with cdcflow's modules loaded."""

    def start(self) -> None:
        preload()
        super().start()
