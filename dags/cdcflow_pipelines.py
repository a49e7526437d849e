"""One Airflow DAG per pipeline file in config/pipelines/ (logic: cdcflow.airflow.dag_factory)."""

from cdcflow.airflow.dag_factory import build_dags

globals().update(build_dags())
