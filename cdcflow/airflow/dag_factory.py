"""Build one Airflow DAG per pipeline config: plan_window >> process_window >> commit_offsets.

Only configuration is read here (YAML + pydantic); Spark and the Kafka/MySQL clients are imported by
the tasks when they run, so DAG parsing stays fast.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from cdcflow.config import PipelineConfig, config_dir, iter_errors, load_all
from cdcflow.run_params import RUN_PARAMS, json_schema

log = logging.getLogger("cdcflow.dags")
ROOT = Path(__file__).resolve().parents[2]
START_DATE = datetime(2026, 1, 1)


def params_schema(cfg: PipelineConfig) -> dict[str, Any]:
    """The DAG's trigger params: one Airflow ``Param`` per declared run parameter (cdcflow/run_params.py)."""
    from airflow.sdk import Param  # noqa: PLC0415

    return {p.name: Param(None, **json_schema(p, cfg)) for p in RUN_PARAMS}


def timetable(cfg: PipelineConfig) -> Any:
    """Cron schedules get data intervals (a run covers [previous tick, this tick)), which backfills
    and ``window.align`` replay; Airflow 3 would otherwise make them trigger-only with empty intervals.
    ``on_data``: an Asset watched by the triggerer, which fires when records wait (airflow/triggers.py)."""
    schedule = cfg.schedule
    if schedule == "on_data":
        from airflow.sdk import Asset, AssetWatcher  # noqa: PLC0415

        from cdcflow.airflow.triggers import NewRecordsTrigger, watched_asset_uri  # noqa: PLC0415

        trigger = NewRecordsTrigger(cfg.name, cfg.on_data.min_records, cfg.on_data.max_wait,
                                    cfg.on_data.poll_interval)
        return [Asset(watched_asset_uri(cfg.name), watchers=[AssetWatcher(name=f"{cfg.name}_new_records",
                                                                          trigger=trigger)])]
    if schedule is None or schedule in ("@once", "@continuous"):
        return schedule
    from airflow.sdk import CronDataIntervalTimetable  # noqa: PLC0415

    return CronDataIntervalTimetable(schedule, timezone="UTC")


def _doc(cfg: PipelineConfig, path: Path, targets: list[str]) -> str:
    from cdcflow import assets  # noqa: PLC0415

    sinks = ", ".join(f"{s.type}:{s.name}" for s in cfg.sinks)
    outlets = ", ".join(f"`{uri}`" for uri in targets) or "named by the first window"
    return (f"### cdcflow pipeline `{cfg.name}`\n\n{cfg.description}\n\n"
            f"* config: `{path}`\n* topics: {cfg.source.described}\n* sinks: {sinks}\n"
            f"* window: {cfg.window.max_records} records / {cfg.window.max_duration:g}s, "
            f"stop_on_empty={cfg.window.stop_on_empty}\n* errors: tolerance={cfg.errors.tolerance}, "
            f"dlq={cfg.errors.dlq_topic}\n* assets (events through the alias "
            f"`{assets.alias_name(cfg.name)}`): {outlets}\n\nTrigger with `start_offsets` to replay from given offsets, with "
            "`start_time` and `end_time` to replay a time range; backfill runs replay their data interval "
            "and never move the stored offsets.")


def build_dag(cfg: PipelineConfig, path: Path) -> Any:
    from airflow.providers.standard.operators.python import PythonOperator  # noqa: PLC0415
    from airflow.sdk import DAG, Asset, AssetAlias  # noqa: PLC0415

    from cdcflow import assets  # noqa: PLC0415
    from cdcflow.airflow import tasks  # noqa: PLC0415

    default_args = {
        "retries": cfg.retries,
        "retry_delay": timedelta(seconds=cfg.retry_delay),
        "retry_exponential_backoff": True,
        "max_retry_delay": timedelta(minutes=30),
    }
    topics, targets = assets.declared(cfg)
    with DAG(
        dag_id=cfg.name, schedule=timetable(cfg), start_date=START_DATE, catchup=False,
        max_active_runs=1,  # windows of one pipeline never overlap
        params=params_schema(cfg), default_args=default_args, tags=["cdcflow", *cfg.tags],
        doc_md=_doc(cfg, path, targets), description=cfg.description or None,
    ) as dag:
        kwargs = {"pipeline": cfg.name}
        plan = PythonOperator(task_id="plan_window", python_callable=tasks.plan_window, op_kwargs=kwargs)
        if cfg.spark.mode == "submit":
            from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator  # noqa: PLC0415

            process = SparkSubmitOperator(
                task_id="process_window", conn_id=cfg.spark.conn_id,
                application=str(ROOT / "cdcflow" / "airflow" / "spark_submit.py"),
                application_args=["--pipeline", cfg.name, "--run-id", "{{ run_id }}",
                                  "--params", "{{ params | tojson }}"],
                conf={"spark.driver.memory": "1g", **cfg.spark.conf}, name=f"cdcflow-{cfg.name}")
        else:
            process = PythonOperator(task_id="process_window", python_callable=tasks.process_window,
                                     op_kwargs=kwargs)
        # lineage: the topics in, the sink targets out; one event per changed target (cdcflow/assets.py)
        commit = PythonOperator(task_id="commit_offsets", python_callable=tasks.commit_offsets, op_kwargs=kwargs,
                                inlets=[Asset(uri) for uri in topics],
                                outlets=[AssetAlias(assets.alias_name(cfg.name))])
        plan >> process >> commit
    return dag


def build_dags(directory: Path | None = None) -> dict[str, Any]:
    """DAGs of every valid pipeline; invalid files are logged here and raised by config_errors()."""
    loaded, errors = load_all(directory)
    for message in iter_errors(errors):
        log.error("skipping invalid pipeline config: %s", message)
    return {item.config.name: build_dag(item.config, item.path) for item in loaded}


class PipelineConfigErrors(Exception):
    """Raised while parsing dags/cdcflow_config_errors.py so Airflow lists it as an import error."""


def raise_config_errors(directory: Path | None = None) -> None:
    _loaded, errors = load_all(directory)
    if errors:
        raise PipelineConfigErrors(
            f"{len(errors)} invalid pipeline config(s) in {directory or config_dir()}; their DAGs are not "
            "loaded (the other pipelines are):\n" + "\n".join(iter_errors(errors)))
