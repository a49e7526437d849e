"""One window on Spark: the path that runs it, its deadline, and Spark's failures named.

The default path keeps the records in the Python workers from the read to the write
(spark_jobs/partition_tasks.py); the pipelines it does not serve (SMTs, ``pk_mode: kafka`` …) take
the older Spark path (:func:`spark_jobs.cdc_window.run_spark_path`). Either way the window runs
under its deadline (``spark.timeout``), what it checkpointed on the server is released when it ends,
and an error from inside Spark comes back as the cdcflow error it was (or names what died).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from connectors.errors import CdcflowError, WindowFailed
from spark_jobs import cdc_window, partition_tasks
from spark_jobs.cdc_window import WindowJob, WindowResult, unwrap_spark_error
from spark_jobs.deadline import Deadline
from spark_jobs.session import Checkpoints, out_of_memory, server_lost, spark_unavailable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def run_window_job(spark: SparkSession, job: WindowJob,
                   on_read: Callable[[dict[tuple[str, int], tuple[int, int]]], None]) -> WindowResult:
    checkpoints = Checkpoints()
    what = f"the window {job.run_id} of {job.pipeline}"
    try:
        with Deadline(spark, job.spark_timeout, what) as deadline:
            if partition_tasks.eligible(job):  # the default path: the records stay in the Python workers
                return partition_tasks.run(spark, job, on_read, deadline, checkpoints)
            return cdc_window.run_spark_path(spark, job, on_read, deadline, checkpoints)
    except CdcflowError:
        raise
    except Exception as exc:  # Py4J / PythonException wrappers from Spark
        inner = unwrap_spark_error(exc) or out_of_memory(exc, what) or spark_unavailable(exc) or server_lost(spark)
        if inner is not None:
            raise inner from None
        if "Python worker exited unexpectedly" in str(exc):
            raise WindowFailed(
                "a Spark task's Python worker died while the window ran (killed, or out of memory: see the Spark "
                "log, .local/services/spark/connect.log for the long-lived Spark); nothing of the window was "
                "committed and no offset moved: the retry runs it again") from exc
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise WindowFailed(f"Spark job failed: {exc.__class__.__name__}: {first}") from exc
    finally:
        checkpoints.release()  # what the window held on the server, gone with it
