"""scripts/env.sh: connection defaults are valid JSON however often it is sourced, and never
override a connection the user set; CDCFLOW_AIRFLOW_EXECUTOR=celery switches Airflow's settings to the
Celery stack, also in a shell that sourced it without the variable before."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONNS = ["AIRFLOW_CONN_CDCFLOW_KAFKA", "AIRFLOW_CONN_CDCFLOW_MYSQL", "AIRFLOW_CONN_CDCFLOW_ELASTICSEARCH",
         "AIRFLOW_CONN_SPARK_DEFAULT"]


def _env_after(script: str, extra: dict[str, str], fresh: bool = False) -> dict[str, str]:
    """The environment after ``script``; ``fresh``: from a shell that has sourced no env.sh before."""
    drop = ("AIRFLOW_CONN_", "AIRFLOW__", "CDCFLOW_") if fresh else ("AIRFLOW_CONN_",)
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(extra)
    out = subprocess.run(["bash", "-c", f"{script}; env -0"], cwd=ROOT, env=env, capture_output=True, timeout=60,
                         check=True).stdout.decode()
    return dict(item.split("=", 1) for item in out.split("\0") if "=" in item)


def test_sourcing_twice_keeps_valid_connections() -> None:
    env = _env_after("source scripts/env.sh; source scripts/env.sh", {})
    for name in CONNS:
        json.loads(env[name])
    assert json.loads(env["AIRFLOW_CONN_CDCFLOW_KAFKA"])["extra"]["bootstrap.servers"].startswith("127.0.0.1:")


def test_a_users_connection_and_ports_are_kept() -> None:
    mine = '{"conn_type": "kafka", "extra": {"bootstrap.servers": "broker:9092"}}'
    env = _env_after("source scripts/env.sh", {"AIRFLOW_CONN_CDCFLOW_KAFKA": mine, "CDCFLOW_MYSQL_PORT": "3333"})
    assert env["AIRFLOW_CONN_CDCFLOW_KAFKA"] == mine
    assert json.loads(env["AIRFLOW_CONN_CDCFLOW_MYSQL"])["port"] == 3333


def test_without_the_switch_airflow_is_the_preloading_local_executor_on_sqlite(tmp_path: Path) -> None:
    env = _env_after("source scripts/env.sh", {"CDCFLOW_HOME": str(tmp_path)}, fresh=True)
    assert env["CDCFLOW_AIRFLOW_EXECUTOR"] == "local"
    assert env["AIRFLOW__CORE__EXECUTOR"] == "cdcflow.airflow.executor.PreloadingLocalExecutor"
    assert "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" not in env  # Airflow's default: SQLite in AIRFLOW_HOME
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS"] == "cdcflow.airflow.database.SQLITE_CONNECT_ARGS"
    assert not any(k.startswith(("AIRFLOW__CELERY", "CDCFLOW_REDIS_", "CDCFLOW_POSTGRES_")) for k in env)
    assert "CDCFLOW_OFFSET_STORE_URL" not in env  # the state store's default: SQLite in CDCFLOW_HOME/state


def test_the_celery_switch_points_airflow_at_redis_and_postgres(tmp_path: Path) -> None:
    # sourced once without the switch first, as scripts/test.sh's shell is when a test starts the stack
    env = _env_after("source scripts/env.sh; CDCFLOW_AIRFLOW_EXECUTOR=celery; source scripts/env.sh",
                     {"CDCFLOW_HOME": str(tmp_path), "CDCFLOW_POSTGRES_PORT": "5555", "CDCFLOW_REDIS_PORT": "6666"},
                     fresh=True)
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS" not in env  # SQLite's, not for psycopg2
    pg_pw = (tmp_path / "secrets" / "postgres.password").read_text().strip()
    redis_pw = (tmp_path / "secrets" / "redis.password").read_text().strip()
    assert pg_pw and redis_pw and pg_pw != redis_pw
    metadata = f"postgresql+psycopg2://airflow:{pg_pw}@127.0.0.1:5555/airflow"
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == metadata
    assert env["AIRFLOW__CELERY__RESULT_BACKEND"] == f"db+{metadata}"
    assert env["AIRFLOW__CELERY__BROKER_URL"] == f"redis://:{redis_pw}@127.0.0.1:6666/0"
    assert env["AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS"] == "cdcflow.airflow.celery_config.CELERY_CONFIG"
    assert env["CDCFLOW_AIRFLOW_WORKERS"] == "2"
    # cdcflow's state store: a database of its own on the same PostgreSQL, which every worker reaches
    assert env["CDCFLOW_OFFSET_STORE_URL"] == f"postgresql+psycopg2://airflow:{pg_pw}@127.0.0.1:5555/cdcflow_state"
    # the passwords are kept: a second source (another shell) gives the same URLs
    again = _env_after("source scripts/env.sh", {"CDCFLOW_HOME": str(tmp_path), "CDCFLOW_AIRFLOW_EXECUTOR": "celery",
                                                 "CDCFLOW_POSTGRES_PORT": "5555", "CDCFLOW_REDIS_PORT": "6666"},
                       fresh=True)
    assert again["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == metadata


def test_celery_mode_keeps_a_state_store_and_a_dags_folder_given(tmp_path: Path) -> None:
    mine = {"CDCFLOW_OFFSET_STORE_URL": "mysql+pymysql://cdcflow:x@db:3306/cdcflow", "AIRFLOW__CORE__DAGS_FOLDER": "/d"}
    env = _env_after("source scripts/env.sh",
                     {"CDCFLOW_HOME": str(tmp_path), "CDCFLOW_AIRFLOW_EXECUTOR": "celery", **mine}, fresh=True)
    assert {k: env[k] for k in mine} == mine


def test_an_unknown_executor_is_refused(tmp_path: Path) -> None:
    with pytest.raises(subprocess.CalledProcessError) as failed:
        _env_after("set -e; source scripts/env.sh",
                   {"CDCFLOW_HOME": str(tmp_path), "CDCFLOW_AIRFLOW_EXECUTOR": "kubernetes"}, fresh=True)
    assert b"expected local or celery" in failed.value.stderr
