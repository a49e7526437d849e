"""Task callables of a pipeline DAG. Each loads its pipeline by name when it runs."""

from __future__ import annotations

import logging
import sys
from typing import Any

from cdcflow import assets, runner
from cdcflow.config import find_pipeline
from cdcflow.errors import CdcflowError, DeadLettersExceeded, PipelineStopped
from cdcflow.run_params import PARAMS
from cdcflow.window.commit import asset_events
from cdcflow.window.plan import AirflowRun
from connectors import faults

log = logging.getLogger("cdcflow.tasks")


def _params(context: dict[str, Any]) -> dict[str, Any]:
    params = dict(context.get("params") or {})
    return {k: params.get(k) for k in PARAMS}


def _run(context: dict[str, Any]) -> AirflowRun:
    dag_run = context.get("dag_run")
    run_type = getattr(getattr(dag_run, "run_type", None), "value", None) or str(getattr(dag_run, "run_type", ""))
    return AirflowRun(run_type, context.get("data_interval_start"), context.get("data_interval_end"))


def plan_window(pipeline: str, **context: Any) -> dict[str, Any]:
    cfg = find_pipeline(pipeline)
    try:
        window = runner.plan(cfg, context["run_id"], _params(context), run=_run(context))
    except PipelineStopped as exc:  # an operator's stop skips the run; it is not a failure to retry
        from airflow.sdk.exceptions import AirflowSkipException  # noqa: PLC0415

        raise AirflowSkipException(str(exc)) from exc
    return {"origin": window.origin,
            "interval": [t.isoformat() + "Z" for t in window.interval] if window.interval else None,
            "partitions": [{"topic": p.topic, "partition": p.partition, "start": p.start,
                            "max_records": p.max_records, "stop": p.stop} for p in window.partitions]}


def process_window(pipeline: str, **context: Any) -> dict[str, Any]:
    # forked by the PreloadingLocalExecutor, the task starts with Spark's client already imported
    preloaded = "pyspark.sql.connect.session" in sys.modules
    cfg = find_pipeline(pipeline)
    try:
        stats = runner.process(cfg, context["run_id"], _params(context))
    except DeadLettersExceeded as exc:  # the breaker STOPPED the pipeline: a retry would meet the same records
        from airflow.sdk.exceptions import AirflowFailException  # noqa: PLC0415

        raise AirflowFailException(str(exc)) from exc
    faults.checkpoint("after_sinks")  # the sinks and the DLQ flushed, the task's result not yet returned
    return {**stats, "preloaded": preloaded}


def commit_offsets(pipeline: str, **context: Any) -> dict[str, Any]:
    """Commit the window's offsets, then name the sink targets it changed: one asset event each
    (cdcflow/assets.py), which Airflow records when this task succeeds, after the commit."""
    from airflow.sdk import Asset, AssetAlias  # noqa: PLC0415

    cfg = find_pipeline(pipeline)
    committed = runner.commit(cfg, context["run_id"])
    alias = context["outlet_events"][AssetAlias(assets.alias_name(cfg.name))]
    try:
        events = asset_events(cfg, context["run_id"])
    except CdcflowError as exc:  # the offsets are committed: a missing connection must not fail the window
        log.warning("window %s of %s is committed, but its asset events could not be named: %s", context["run_id"],
                    cfg.name, exc)
        events = []
    for event in events:
        alias.add(Asset(event.uri), extra=event.extra)
    return {**committed, "asset_events": [e.uri for e in events]}
