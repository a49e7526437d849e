"""scripts/env.sh: connection defaults are valid JSON however often it is sourced, and never
override a connection the user set."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONNS = ["AIRFLOW_CONN_CDCFLOW_KAFKA", "AIRFLOW_CONN_CDCFLOW_MYSQL", "AIRFLOW_CONN_CDCFLOW_ELASTICSEARCH",
         "AIRFLOW_CONN_SPARK_DEFAULT"]


def _env_after(script: str, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW_CONN_")}
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
