"""One consume window, in three steps: plan, process, commit.

* ``plan``    fixes the window in the ledger before any record is read: per partition, the start
  offset (stored, initial, or given as ``start_offsets`` / ``start_time``) and its share of
  ``max_records``; for a time range (a backfill run's data interval, ``start_time`` + ``end_time``,
  or an aligned window's interval end) also the offset where the read stops. Idempotent per run id,
  so a cleared or retried run gets the same window.
* ``process`` reads the planned ranges on Spark, records the actual end offsets, sends bad records
  to the DLQ and applies the sinks. A retry after the read replays exactly the recorded range.
* ``commit``  moves the stored offsets (compare-and-set) only after ``process`` succeeded, then
  mirrors them to the pipeline's Kafka consumer group for lag tools.

The Airflow DAG runs these as three tasks; ``run_window`` runs them in one process (CLI, tests).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cdcflow.config import PipelineConfig
from cdcflow.state import StateStore
from cdcflow.window.clients import Clients
from cdcflow.window.commit import commit
from cdcflow.window.plan import plan
from cdcflow.window.process import process
from connectors import faults

__all__ = ["commit", "plan", "process", "run_window"]


def run_window(cfg: PipelineConfig, run_id: str, params: Mapping[str, Any] | None = None,
               store: StateStore | None = None, spark: Any = None) -> dict[str, Any]:
    """plan + process + commit in this process (CLI and tests; the DAG runs them as tasks), with the
    pipeline's connections resolved once for the three."""
    clients = Clients(cfg)
    store = store or clients.store()
    plan(cfg, run_id, params, store, clients=clients)
    stats = process(cfg, run_id, params, store, spark, clients=clients)
    faults.checkpoint("after_sinks")
    stats["commit"] = commit(cfg, run_id, store, clients=clients)
    return stats
