"""The Airflow side: DAG parsing, import errors for bad configs, `airflow dags test`, SparkSubmitOperator."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cdcflow import cdcgen
from cdcflow.config import load_pipeline
from cdcflow.window import clients
from tests.helpers import bootstrap, expected, subprocess_env, table_rows, unique, write_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.system, pytest.mark.services]
ROOT = Path(__file__).resolve().parents[4]
DAGS = ROOT / "dags"


def _dagbag():  # noqa: ANN202 - Airflow type
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS))


def test_dagbag_has_no_import_errors_and_one_dag_per_pipeline() -> None:
    bag = _dagbag()
    assert bag.import_errors == {}
    assert "demo_orders" in bag.dag_ids
    dag = bag.get_dag("demo_orders")
    assert dag.max_active_runs == 1
    assert [t.task_id for t in dag.topological_sort()] == ["plan_window", "process_window", "commit_offsets"]
    assert set(dag.params) == {"start_offsets", "start_time", "end_time", "max_records", "max_duration"}
    assert dag.default_args["retry_exponential_backoff"] is True


def test_dag_files_import_no_spark_and_no_clients() -> None:
    code = ("import runpy, sys; runpy.run_path('dags/cdcflow_pipelines.py'); "
            "heavy = [m for m in ('pyspark', 'confluent_kafka', 'pymysql') if m in sys.modules]; "
            "print(heavy); sys.exit(1 if heavy else 0)")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_an_invalid_config_is_an_import_error_and_the_others_still_load(config_dir: Path) -> None:
    write_pipeline(config_dir, "fine", "t.fine", "fine")
    (config_dir / "broken.yaml").write_text("name: broken\nsource: {topics: [x]}\nwindow: {max_records: zero}\nsinks: []\n")
    bag = _dagbag()
    assert bag.dag_ids == ["fine"]
    [(path, message)] = bag.import_errors.items()
    assert path.endswith("cdcflow_config_errors.py")
    assert f"{config_dir / 'broken.yaml'}: 2 errors" in message
    assert "line 3, window.max_records: expected input should be a valid integer" in message
    assert "line 4, sinks: expected list should have at least 1 item" in message


def _dags_test(config_dir: Path, dag_id: str, conf: dict[str, object]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["airflow", "dags", "test", dag_id, "-c", json.dumps(conf)], cwd=ROOT,
                          env=subprocess_env(config_dir), capture_output=True, text=True, timeout=600)


def test_airflow_dags_test_runs_a_window_end_to_end(config_dir: Path) -> None:
    tag = unique("af")
    cfg = load_pipeline(write_pipeline(config_dir, tag, f"t.{tag}", tag))
    stream = cdcgen.orders_stream(120, 25, seed=11)
    cdcgen.produce(bootstrap(), cfg.source.topics[0], stream.events)

    first = _dags_test(config_dir, cfg.name, {"max_records": 50})
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert sum(clients.offset_store(cfg).offsets.load(cfg.name).values()) == 50

    rest = _dags_test(config_dir, cfg.name, {"max_records": 100_000})
    assert rest.returncode == 0, rest.stdout[-3000:] + rest.stderr[-3000:]
    assert table_rows(cfg.sinks[0].table) == expected(stream.state)
    assert sum(clients.offset_store(cfg).offsets.load(cfg.name).values()) == len(stream.events)


def test_invalid_trigger_params_are_rejected_with_the_reason(config_dir: Path) -> None:
    tag = unique("afbad")
    cfg = load_pipeline(write_pipeline(config_dir, tag, f"t.{tag}", tag))
    result = _dags_test(config_dir, cfg.name, {"max_records": 100, "start_offsets": {"nope": {"0": 1}}})
    assert result.returncode != 0
    out = result.stdout + result.stderr
    assert "ParamValidationError" in out
    assert "Invalid input for param start_offsets" in out and "'nope'" in out
    assert clients.offset_store(cfg).ledger.history(cfg.name) == []  # rejected before any window was planned


def test_invalid_time_params_are_rejected_with_the_reason(config_dir: Path) -> None:
    tag = unique("aftime")
    cfg = load_pipeline(write_pipeline(config_dir, tag, f"t.{tag}", tag, retries=0))
    result = _dags_test(config_dir, cfg.name, {"start_time": "2026-11-20T10:00:00Z",
                                               "end_time": "2026-11-20T09:00:00Z"})
    out = result.stdout + result.stderr
    assert "end_time (2026-11-20T09:00:00Z) must be after start_time (2026-11-20T10:00:00Z)" in out, out[-3000:]
    assert clients.offset_store(cfg).ledger.history(cfg.name) == []  # rejected before any window was planned


def test_the_same_job_runs_under_spark_submit_operator(config_dir: Path) -> None:
    tag = unique("submit")
    cfg = load_pipeline(write_pipeline(config_dir, tag, f"t.{tag}", tag, spark={"mode": "submit"}))
    stream = cdcgen.orders_stream(80, 20, seed=12)
    cdcgen.produce(bootstrap(), cfg.source.topics[0], stream.events)
    assert os.environ["AIRFLOW_CONN_SPARK_DEFAULT"]
    result = _dags_test(config_dir, cfg.name, {})
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    assert "spark-submit" in out
    assert table_rows(cfg.sinks[0].table) == expected(stream.state)
    assert sum(clients.offset_store(cfg).offsets.load(cfg.name).values()) == len(stream.events)
