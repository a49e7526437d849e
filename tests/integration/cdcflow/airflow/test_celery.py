"""Airflow as it runs on several machines: the CeleryExecutor on PostgreSQL, with Redis as the broker
and two Celery workers, started by scripts/services.sh (CDCFLOW_AIRFLOW_EXECUTOR=celery) on ports of
its own. A window triggered through the REST API runs its three tasks on the workers, in task
processes forked from a worker that had cdcflow's modules imported, on the long-lived Spark."""

from __future__ import annotations

import re
import shutil
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from cdcflow import cdcgen
from cdcflow.config import load_pipeline
from cdcflow.state import StateStore
from tests.airflow_server import CeleryAirflowServer, make_celery_server
from tests.helpers import bootstrap, expected, table_rows, unique, write_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.system, pytest.mark.celery,
              pytest.mark.services("kafka", "mysql", "spark")]
TASKS = ("plan_window", "process_window", "commit_offsets")
WORKERS = {f"worker{i}@{socket.gethostname()}" for i in (1, 2)}


@pytest.fixture(scope="module")
def airflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CeleryAirflowServer]:
    srv = make_celery_server(tmp_path_factory.mktemp("celery"))
    srv.env["AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC"] = "2"
    srv.env["AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL"] = "5"
    try:
        srv.start()
        yield srv
    finally:
        try:
            srv.stop()
        finally:
            shutil.rmtree(srv.env["CDCFLOW_HOME"], ignore_errors=True)


def _wait_for_dag(server: CeleryAirflowServer, dag_id: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while server.request("GET", f"/api/v2/dags/{dag_id}").status != 200:
        assert time.monotonic() < deadline, f"the dag-processor did not load {dag_id}\n{server.log_tail()}"
        time.sleep(1)


def _wait_for_run(server: CeleryAirflowServer, dag_id: str, run_id: str, timeout: float = 420) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        run = server.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}").body
        if run["state"] in ("success", "failed"):
            return run
        assert time.monotonic() < deadline, f"run {run_id} still {run['state']}\n{server.log_tail()}"
        time.sleep(2)


def test_a_window_runs_its_tasks_on_the_celery_workers_and_commits(airflow: CeleryAirflowServer) -> None:
    # the two workers answer to Celery under their own names
    workers = airflow.airflow("celery", "list-workers", "--output", "json").stdout
    assert WORKERS <= set(re.findall(r'"worker_name": "([^"]+)"', workers)), workers

    tag = unique("celery")
    cfg = load_pipeline(write_pipeline(airflow.config_dir, tag, f"t.{tag}", tag, schedule=None))
    topic = cfg.source.topics[0]
    stream = cdcgen.orders_stream(600, 80, seed=46, broken=False)
    cdcgen.produce(bootstrap(), topic, stream.events)
    _wait_for_dag(airflow, cfg.name)
    assert airflow.request("PATCH", f"/api/v2/dags/{cfg.name}", {"is_paused": False}).status == 200
    r = airflow.request("POST", f"/api/v2/dags/{cfg.name}/dagRuns",
                        {"dag_run_id": "celery-0", "logical_date": None, "conf": {}})
    assert r.status == 200, r.text
    assert _wait_for_run(airflow, cfg.name, "celery-0")["state"] == "success", airflow.log_tail()

    # each task ran on a Celery worker: its task instance names the worker (services.sh gives each
    # worker its name as the hostname), and that worker's log has the task's workload
    ran_on = {}
    for task in TASKS:
        ti = airflow.request("GET", f"/api/v2/dags/{cfg.name}/dagRuns/celery-0/taskInstances/{task}").body
        assert ti["state"] == "success", ti
        assert ti["hostname"] in WORKERS, ti
        worker_log = (airflow.logs / "airflow" / f"{ti['hostname'].split('@')[0]}.log").read_text(errors="replace")
        assert f"run_id=celery-0/task_id={task}/" in worker_log, f"{task} is not in {ti['hostname']}'s log"
        ran_on[task] = ti["hostname"]
    print("tasks on workers:", ran_on)
    xcom = airflow.request("GET", f"/api/v2/dags/{cfg.name}/dagRuns/celery-0/taskInstances/process_window/"
                                  "xcomEntries/return_value").body
    stats = xcom["value"]
    assert stats["spark"].startswith("connect sc://127.0.0.1:"), stats
    assert stats["records"] == len(stream.events)
    assert stats["preloaded"] is True  # forked from a worker that imported cdcflow's modules before its pool forked

    # the window committed: in the ledger, the stored offsets at the partitions' ends, the rows in MySQL
    store = StateStore(airflow.store_url)
    window = store.ledger.get_window(cfg.name, "celery-0")
    assert window is not None and window.status == "committed", window
    offsets = store.offsets.load(cfg.name)
    assert {p.tp: p.end for p in window.partitions} == offsets
    assert sum(offsets.values()) == len(stream.events)
    assert table_rows(cfg.sinks[0].table) == expected(stream.state)


def test_the_workers_import_cdcflow_before_their_pool_forks(airflow: CeleryAirflowServer) -> None:
    for name in sorted(WORKERS):
        log = (airflow.logs / "airflow" / f"{name.split('@')[0]}.log").read_text(errors="replace")
        preloaded, ready = log.find("cdcflow: preloaded"), log.find(f"{name} ready.")
        assert 0 <= preloaded < ready, f"{name}: no preload before the pool started\n{log[-3000:]}"
        assert "not loaded" not in log[preloaded:ready], log[preloaded:ready]
