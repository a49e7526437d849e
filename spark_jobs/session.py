"""The one place a SparkSession is created, with settings sized for a small machine."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from cdcflow.config import SparkConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_CONF = {
    "spark.driver.memory": "1g",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.adaptive.enabled": "true",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.task.maxFailures": "1",  # a failed task fails the window; Airflow owns the retries
    "spark.python.worker.reuse": "true",
}


def resolve_master(cfg: SparkConfig) -> str:
    return cfg.master or os.environ.get("CDCFLOW_SPARK_MASTER") or "local[*]"


def get_spark(cfg: SparkConfig, app_name: str = "cdcflow") -> SparkSession:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession  # noqa: PLC0415 - heavy; only when a window runs

    builder = SparkSession.builder.appName(app_name)
    if not os.environ.get("CDCFLOW_SPARK_SUBMITTED"):  # under spark-submit the master comes from it
        builder = builder.master(resolve_master(cfg))
    for key, value in {**DEFAULT_CONF, **cfg.conf}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("CDCFLOW_SPARK_LOG_LEVEL", "WARN"))
    return spark
