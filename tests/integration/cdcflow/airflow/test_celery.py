"""Airflow as it runs on several machines: the CeleryExecutor on PostgreSQL, with Redis as the broker
and two Celery workers, started by scripts/services.sh (CDCFLOW_AIRFLOW_EXECUTOR=celery) on ports of
its own, with cdcflow's state store in a database of its own on that PostgreSQL. Windows run their
tasks on the workers as Airflow runs them: triggered through the REST API with offset parameters,
scheduled, backfilled, started by the on_data trigger, and followed by a DAG scheduled on the table's
asset; a worker SIGKILLed mid-window has the window retried on the other worker, which takes the
writer lease over at once (docs/operating.md, "Running Airflow on several machines").

One stack for the module (about 40 s to start, 15-30 s to stop). The pipelines and the downstream
DAG are written before it starts, so that the dag-processor parses them at once; the kill is the last
test, and the killed worker is not started again.
"""

from __future__ import annotations

import re
import shutil
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import psutil
import pytest
import sqlalchemy as sa

from cdcflow import assets, cdcgen
from cdcflow.config import PipelineConfig, load_pipeline
from cdcflow.state import StateStore
from cdcflow.state.tables import writers_table
from connectors import faults
from tests.airflow_server import CeleryAirflowServer, make_celery_server
from tests.helpers import bootstrap, expected, table_rows, unique, write_pipeline
from tests.integration.cdcflow.airflow.test_scheduler import (
    DOWNSTREAM,
    _t,
    _wait_for_backfill,
    _wait_until_idle,
)
from tests.integration.cdcflow.state.test_store_on_mysql import round_trip
from tests.integration.cdcflow.window.test_time_ranges import BASE, H, five_hours, in_range

pytestmark = [pytest.mark.integration, pytest.mark.system, pytest.mark.celery,
              pytest.mark.services("kafka", "mysql", "spark")]
TASKS = ("plan_window", "process_window", "commit_offsets")
WORKERS = {f"worker{i}@{socket.gethostname()}" for i in (1, 2)}
# where the kill lands: the read range is in the ledger and the tables declared before the read are
# written (the read tasks write them), the offsets not committed; in the process_window task itself
KILL_POINT = "after_read"
HEARTBEAT_TIMEOUT = 20  # s without a task heartbeat before the scheduler fails the try (Airflow's default: 300)


@dataclass
class Stack:
    server: CeleryAirflowServer
    pipelines: dict[str, PipelineConfig]  # by what the test does with it
    streams: dict[str, cdcgen.Stream]
    downstream: str  # the DAG scheduled on the on_data pipeline's table
    pause: Path  # CDCFLOW_FAULTS pauses the first window at KILL_POINT once <pause>/reached is gone


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("celery")
    srv = make_celery_server(tmp)
    srv.env.update({"AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2", "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": str(HEARTBEAT_TIMEOUT),
                    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "2"})
    dags = srv.own_dags_folder()
    # the fault point, disarmed: only the first process to reach it pauses, and "reached" says one did
    pause = tmp / "pause"
    pause.mkdir()
    (pause / "reached").write_text("disarmed")
    srv.env["CDCFLOW_FAULTS"] = faults.pause_entry(KILL_POINT, pause)

    settings: dict[str, tuple[dict[str, Any], cdcgen.Stream]] = {
        "rest": ({"schedule": None}, cdcgen.orders_stream(600, 80, seed=46, broken=False)),
        "hourly": ({"schedule": "@hourly"}, five_hours(9)),
        "on_data": ({"schedule": "on_data", "on_data": {"min_records": 50, "max_wait": "10s", "poll_interval": "1s"}},
                    cdcgen.orders_stream(300, 40, seed=7, broken=False)),
        "killed": ({"schedule": None, "retries": 2, "retry_delay": "1s"},
                   cdcgen.orders_stream(400, 50, seed=13, broken=False)),
    }
    pipelines, streams = {}, {}
    for role, (overrides, stream) in settings.items():
        tag = unique(f"celery_{role}")
        cfg = load_pipeline(write_pipeline(srv.config_dir, tag, f"t.{tag}", tag, **overrides))
        cdcgen.produce(bootstrap(), cfg.source.topics[0], stream.events)
        pipelines[role], streams[role] = cfg, stream
    on_data = pipelines["on_data"]
    downstream = f"{on_data.name}_report"
    uri = assets.target_uri(on_data, on_data.sinks[0].name, on_data.sinks[0].table)
    (dags / f"{downstream}.py").write_text(DOWNSTREAM.format(dag_id=downstream, uri=uri))
    try:
        srv.start()
        yield Stack(srv, pipelines, streams, downstream, pause)
    finally:
        try:
            srv.stop()
        finally:
            shutil.rmtree(srv.env["CDCFLOW_HOME"], ignore_errors=True)


def _runs(server: CeleryAirflowServer, dag_id: str) -> list[dict[str, Any]]:
    return server.request("GET", f"/api/v2/dags/{dag_id}/dagRuns?order_by=run_after").body["dag_runs"]


def _wait_for_finished_runs(server: CeleryAirflowServer, dag_id: str, count: int,
                            timeout: float = 180) -> list[dict[str, Any]]:
    """The DAG's runs, once ``count`` of them have finished (runs the scheduler or a trigger started)."""
    deadline = time.monotonic() + timeout
    while len(done := [r for r in _runs(server, dag_id) if r["state"] in ("success", "failed")]) < count:
        assert time.monotonic() < deadline, f"{dag_id} runs: {_runs(server, dag_id)}\n{server.log_tail()}"
        time.sleep(1)
    return done


def _ran_on_workers(server: CeleryAirflowServer, dag_id: str, run_id: str,
                    tasks: tuple[str, ...] = TASKS) -> dict[str, str]:
    """The worker each task of the run succeeded on: the task instance's hostname, which names the
    Celery worker (services.sh gives each worker its name as the hostname)."""
    ran_on = {}
    for task in tasks:
        ti = server.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task}").body
        assert ti["state"] == "success", ti
        assert ti["hostname"] in WORKERS, ti
        ran_on[task] = ti["hostname"]
    return ran_on


def test_windows_triggered_with_offset_parameters_run_their_tasks_on_the_workers_and_commit(stack: Stack) -> None:
    airflow, cfg, stream = stack.server, stack.pipelines["rest"], stack.streams["rest"]
    # the two workers answer to Celery under their own names
    workers = airflow.airflow("celery", "list-workers", "--output", "json").stdout
    assert WORKERS <= set(re.findall(r'"worker_name": "([^"]+)"', workers)), workers
    topic = cfg.source.topics[0]
    airflow.unpause(cfg.name)

    # the first window starts at given offsets (from 0 on partitions 0-2) with a budget of 300
    # records; the second continues from the offsets the first stored
    airflow.trigger(cfg.name, "celery-0", {"start_offsets": {topic: {"0": 0, "1": 0, "2": 0}}, "max_records": 300})
    airflow.trigger(cfg.name, "celery-1")
    runs = airflow.wait_for_runs(cfg.name, ["celery-0", "celery-1"])
    assert [r["state"] for r in runs] == ["success"] * 2, airflow.log_tail()

    for run_id in ("celery-0", "celery-1"):
        ran_on = _ran_on_workers(airflow, cfg.name, run_id)
        print(run_id, "tasks on workers:", ran_on)
        for task, worker in ran_on.items():  # that worker's log has the task's workload
            worker_log = (airflow.logs / "airflow" / f"{worker.split('@')[0]}.log").read_text(errors="replace")
            assert f"run_id={run_id}/task_id={task}/" in worker_log, f"{task} is not in {worker}'s log"
    for run_id, records in (("celery-0", 300), ("celery-1", len(stream.events) - 300)):
        stats = airflow.xcom(cfg.name, run_id)
        assert stats["spark"].startswith("connect sc://127.0.0.1:"), stats
        assert stats["records"] == records
        assert stats["preloaded"] is True  # forked from a worker that imported cdcflow's modules before its pool forked

    # committed in the state store on the stack's PostgreSQL: the second window starts where the first
    # ended, the stored offsets are the partitions' ends, the rows in MySQL the stream's last state
    assert airflow.store_url.startswith("postgresql+psycopg2://") and airflow.store_url.endswith("/cdcflow_state")
    store = StateStore(airflow.store_url)
    first, second = (store.ledger.get_window(cfg.name, r) for r in ("celery-0", "celery-1"))
    assert (first.origin, second.origin) == ("params", "stored")
    assert all(w.status == "committed" for w in (first, second))
    assert {p.tp: p.start for p in first.partitions} == {(topic, i): 0 for i in range(3)}
    assert {p.tp: p.start for p in second.partitions} == {p.tp: p.end for p in first.partitions}
    offsets = store.offsets.load(cfg.name)
    assert offsets == {p.tp: p.end for p in second.partitions}
    assert sum(offsets.values()) == len(stream.events)
    assert table_rows(cfg.sinks[0].table) == expected(stream.state)


def test_the_workers_import_cdcflow_before_their_pool_forks(stack: Stack) -> None:
    for name in sorted(WORKERS):
        log = (stack.server.logs / "airflow" / f"{name.split('@')[0]}.log").read_text(errors="replace")
        preloaded, ready = log.find("cdcflow: preloaded"), log.find(f"{name} ready.")
        assert 0 <= preloaded < ready, f"{name}: no preload before the pool started\n{log[-3000:]}"
        assert "not loaded" not in log[preloaded:ready], log[preloaded:ready]


def test_a_scheduled_window_then_a_backfill_of_three_hours_run_on_the_workers(stack: Stack) -> None:
    airflow, cfg, stream = stack.server, stack.pipelines["hourly"], stack.streams["hourly"]
    airflow.unpause(cfg.name)
    try:
        # unpaused, the scheduler runs the last complete hour at once (catchup off): a scheduled
        # window, which reads everything from the stored offsets (the earliest)
        scheduled = _wait_for_finished_runs(airflow, cfg.name, 1)[0]  # (a next hour may have begun since)
        assert (scheduled["run_type"], scheduled["state"]) == ("scheduled", "success"), airflow.log_tail()
        _ran_on_workers(airflow, cfg.name, scheduled["dag_run_id"])
        _wait_until_idle(airflow, cfg.name)
        store = StateStore(airflow.store_url)
        window = store.ledger.get_window(cfg.name, scheduled["dag_run_id"])
        assert (window.origin, window.status) == ("stored", "committed")
        live_offsets = store.offsets.load(cfg.name)
        assert sum(live_offsets.values()) == len(stream.events)
        assert table_rows(cfg.sinks[0].table) == expected(stream.state)

        # `airflow backfill create` over 01:00..03:00: three hourly runs, [01:00, 02:00) .. [03:00, 04:00)
        start, end = (datetime.fromtimestamp((BASE + h * H) / 1000, UTC) for h in (1, 3))
        airflow.airflow("backfill", "create", "--dag-id", cfg.name, "--from-date", start.isoformat(),
                        "--to-date", end.isoformat())
        runs = _wait_for_backfill(airflow, cfg.name, 3)
        assert [r["state"] for r in runs] == ["success"] * 3, airflow.log_tail()
        for run in runs:
            _ran_on_workers(airflow, cfg.name, run["dag_run_id"])
    finally:
        airflow.unpause(cfg.name, paused=True)

    # the replayed older changes never overwrite newer ones; the live offsets stay where they were
    assert table_rows(cfg.sinks[0].table) == expected(stream.state)
    assert store.offsets.load(cfg.name) == live_offsets
    windows = sorted((store.ledger.get_window(cfg.name, r["dag_run_id"]) for r in runs), key=lambda w: w.interval)
    assert [w.interval for w in windows] == [(datetime(2026, 11, 20, h), datetime(2026, 11, 20, h + 1))
                                             for h in (1, 2, 3)]
    for w, h in zip(windows, (1, 2, 3), strict=True):
        assert (w.origin, w.status) == ("backfill", "committed")
        assert w.total_records == len(in_range(stream.events, BASE + h * H, BASE + (h + 1) * H))
    # backfill runs may run side by side on the two workers; their writes to the sinks never overlap
    held = sorted((w.stats["writer"]["from"], w.stats["writer"]["to"]) for w in windows)
    assert all(t1 <= f2 for (_f1, t1), (f2, _t2) in pairwise(held)), held


def test_on_data_starts_a_window_on_a_worker_and_its_asset_event_runs_the_downstream_dag(stack: Stack) -> None:
    airflow, cfg, stream = stack.server, stack.pipelines["on_data"], stack.streams["on_data"]
    airflow.wait_for_dag(stack.downstream)
    airflow.unpause(cfg.name)
    try:
        # the triggerer's NewRecordsTrigger sees 300 records waiting (min_records 50) and starts a window
        [run] = _wait_for_finished_runs(airflow, cfg.name, 1)
        assert (run["run_type"], run["state"]) == ("asset_triggered", "success"), airflow.log_tail()
        _ran_on_workers(airflow, cfg.name, run["dag_run_id"])
        store = StateStore(airflow.store_url)
        assert sum(store.offsets.load(cfg.name).values()) == len(stream.events)
        assert table_rows(cfg.sinks[0].table) == expected(stream.state)

        # the commit's asset event on the table runs the DAG scheduled on it, on a worker too
        [report] = _wait_for_finished_runs(airflow, stack.downstream, 1)
        assert (report["run_type"], report["state"]) == ("asset_triggered", "success"), airflow.log_tail()
        _ran_on_workers(airflow, stack.downstream, report["dag_run_id"], ("report",))
        seen = airflow.request("GET", f"/api/v2/dags/{stack.downstream}/dagRuns/{report['dag_run_id']}/taskInstances/"
                                      "report/xcomEntries/return_value").body["value"]
        assert seen == [run["dag_run_id"]]
    finally:
        airflow.unpause(cfg.name, paused=True)


def test_the_state_store_works_in_the_stacks_postgresql(stack: Stack) -> None:
    round_trip(stack.server.store_url)


def _worker_of(server: CeleryAirflowServer, pid: int) -> tuple[str, psutil.Process]:
    """The Celery worker that ``pid`` descends from: its name and its main process."""
    mains = {int((server.logs / "airflow" / f"{name.split('@')[0]}.pid").read_text()): name for name in WORKERS}
    proc: psutil.Process | None = psutil.Process(pid)
    while proc is not None and proc.pid not in mains:
        proc = proc.parent()
    assert proc is not None, f"process {pid} is not a Celery worker's"
    return mains[proc.pid], proc


def _lease(store: StateStore, pipeline: str) -> tuple[str, float]:
    """The pipeline's writer lease: its holder, and when it expires (epoch seconds)."""
    with store.engine.connect() as conn:
        row = conn.execute(sa.select(writers_table).where(writers_table.c.pipeline == pipeline)).one()
    return row.holder, row.expires_at.replace(tzinfo=UTC).timestamp()


def test_a_worker_killed_mid_window_has_the_window_retried_on_the_other_worker(stack: Stack) -> None:
    """The worker running process_window is SIGKILLed, all its processes at once (a host lost). The
    scheduler finds the task's heartbeats stopped and fails the try; the retry runs on the other worker,
    takes the dead attempt's writer lease at once (its own earlier attempt: cdcflow/window/lease.py),
    replays the recorded range, and commits once: nothing lost, nothing written or counted twice."""
    airflow, cfg, stream = stack.server, stack.pipelines["killed"], stack.streams["killed"]
    run_id = "killed-0"
    for other in ("rest", "hourly", "on_data"):  # no other window may reach the fault point
        airflow.unpause(stack.pipelines[other].name, paused=True)
        _wait_until_idle(airflow, stack.pipelines[other].name)
    airflow.unpause(cfg.name)
    reached = stack.pause / "reached"
    reached.unlink()  # armed
    airflow.trigger(cfg.name, run_id)
    deadline = time.monotonic() + 120
    while not (reached.exists() and reached.read_text().isdigit()):
        assert time.monotonic() < deadline, f"no window reached {KILL_POINT}\n{airflow.log_tail()}"
        time.sleep(0.2)
    killed, worker = _worker_of(airflow, int(reached.read_text()))
    store = StateStore(airflow.store_url)
    recorded = {p.tp: p.end for p in store.ledger.get_window(cfg.name, run_id).partitions}
    assert None not in recorded.values() and sum(recorded.values()) == len(stream.events)
    holder, expires = _lease(store, cfg.name)
    assert holder.startswith(f"{run_id}@{socket.gethostname()}/{killed.split('@')[0]}:"), holder

    processes = [worker, *worker.children(recursive=True)]
    killed_at = time.time()
    for proc in processes:  # the main process first: it would fork new pool processes
        proc.kill()
    psutil.wait_procs(processes, timeout=10)

    [run] = airflow.wait_for_runs(cfg.name, [run_id], timeout=240)
    assert run["state"] == "success", airflow.log_tail()
    tries = sorted(airflow.request("GET", f"/api/v2/dags/{cfg.name}/dagRuns/{run_id}/taskInstances/process_window/"
                                          "tries").body["task_instances"], key=lambda t: t["try_number"])
    assert [(t["try_number"], t["state"], t["hostname"]) for t in tries] == [
        (1, "failed", killed), (2, "success", next(iter(WORKERS - {killed})))], tries
    assert _ran_on_workers(airflow, cfg.name, run_id)["commit_offsets"] != killed

    # the retry took the lease at once, long before the dead attempt's would have expired
    stats = airflow.xcom(cfg.name, run_id)
    assert stats["writer"]["waited_s"] < 1.0, stats["writer"]
    assert stats["writer"]["from"] < expires, (stats["writer"], expires)
    # nothing lost or written twice: the recorded range replayed, committed once, the rows as produced
    window = store.ledger.get_window(cfg.name, run_id)
    assert (window.status, window.attempt) == ("committed", 2)
    assert {p.tp: p.end for p in window.partitions} == recorded == store.offsets.load(cfg.name)
    assert stats["records"] == len(stream.events)
    assert table_rows(cfg.sinks[0].table) == expected(stream.state)
    totals = store.totals.read(cfg.name)
    assert totals["cdcflow_windows"] == [({"outcome": "committed"}, 1.0)]
    assert sum(v for _labels, v in totals["cdcflow_records_read"]) == len(stream.events)

    timings = {"try 1 failed": _t(tries[0]["end_date"]), "retry started": _t(tries[1]["start_date"]),
               "lease taken": stats["writer"]["from"], "lease would have expired": expires,
               "run done": _t(run["end_date"])}
    timings = {k: v - killed_at for k, v in timings.items()}
    print(f"killed {killed} at {KILL_POINT}; after the kill (s):", {k: round(v, 1) for k, v in timings.items()})
    assert timings["try 1 failed"] >= HEARTBEAT_TIMEOUT - 5  # found by its missing heartbeats, not before
